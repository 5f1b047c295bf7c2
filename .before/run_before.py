import sys, runpy
for f in list(sys.meta_path):
    if "editable" in repr(f) or "editable" in type(f).__module__:
        sys.meta_path.remove(f)
sys.path.insert(0, ".before/pkg")
import bnn_ppl.inference.fitting as f
print("using", f.__file__, flush=True)
sys.argv = ["sgmcmc_temperature.py"] + sys.argv[1:]
runpy.run_path("benchmarks/sgmcmc_temperature.py", run_name="__main__")

"""Time to first draw of HMC and NUTS, against compiling the gradient and computing it once.

For each model (an MLP on digits, LeNet-5 on 28x28 images, a small ResNet-FRN on 32x32
images) and each sampler, a fresh process (nothing compiled, no persistent cache) times
``bp.fit`` with one warmup iteration and one draw (HMC: a short fixed trajectory; NUTS:
trees of depth at most 2) up to its ``Posterior`` (the draws and their per-row
log-likelihoods), then, in the same process, the reference: ``jax.jit`` of
``value_and_grad`` of the same potential (data as arguments), compiled and run once. It prints
``ratio = first draw / reference`` (target <= 2), the XLA compilations during the run (all,
and those of programs holding the network's gradient, by a marker on the network's output)
and their seconds (a program holds the gradient when the mark that a marker's backward pass
puts on the network's output is in the module JAX hands to XLA). ``--quick``: the MLP only.

    python benchmarks/time_to_first_draw.py            # all three models, HMC and NUTS
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import struct
import subprocess
import sys
import tempfile
import time

MODELS = ("mlp", "lenet5", "resnet")


def _child(model_name: str, algo: str) -> dict:
    import flax.linen as nn
    import jax
    import numpy as np

    import bnn_ppl as bp
    from bnn_ppl.config import HMCConfig, NUTSConfig
    from bnn_ppl.inference import full_batch_potential
    from bnn_ppl.models import MLP, LeNet5, ResNet20FRN

    mark = 7654321.0  # exact in float32; the backward pass of the marker puts it in a program
    mark_text = "0x{:08X}".format(*struct.unpack("<I", struct.pack("<f", mark)))

    @jax.custom_vjp
    def marker(y):
        return y

    marker.defvjp(lambda y: (y, None), lambda _, g: (jax.numpy.where(g == mark, g, g),))

    class Marked(nn.Module):
        inner: nn.Module

        def __call__(self, x):
            return marker(self.inner(x))

    log: list[tuple[str, float]] = []

    def on_duration(event: str, duration: float, **kw: object) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            log.append((str(kw.get("fun_name")), duration))

    def with_gradient(folder: str) -> list[bool]:
        """Per program handed to XLA (JAX's dumps, in order): does it hold the gradient?"""
        files = sorted(pathlib.Path(folder).glob("jax_ir*.mlir"))
        return [mark_text in f.read_text() for f in files]

    rng = np.random.default_rng(0)
    if model_name == "mlp":
        data = bp.data.load("digits")
        x, y, net = data.x_train, data.y_train, MLP(hidden=(50,), out=10)
    elif model_name == "lenet5":
        x = rng.normal(size=(512, 28, 28, 1)).astype(np.float32)
        y, net = rng.integers(0, 10, 512).astype(np.int32), LeNet5(out=10)
    else:
        x = rng.normal(size=(256, 32, 32, 3)).astype(np.float32)
        y, net = rng.integers(0, 10, 256).astype(np.int32), ResNet20FRN(width=8, blocks_per_stage=1)
    model = bp.BNN(Marked(net), bp.priors.Normal(0.3), bp.likelihoods.Categorical())
    jax.block_until_ready(jax.jit(lambda v: v + 1)(1.0))  # the backend is up

    jax.monitoring.register_event_duration_secs_listener(on_duration)
    dumps = tempfile.mkdtemp()
    jax.config.update("jax_dump_ir_to", os.path.join(dumps, "run"))
    kw = dict(num_warmup=1, num_samples=1)
    if algo == "hmc":
        config = HMCConfig(trajectory_length=0.05, step_size=0.01, **kw)
    else:
        config = NUTSConfig(max_tree_depth=2, **kw)
    cpu, wall = time.process_time(), time.perf_counter()
    post = bp.fit(model, (x, y), config, jax.random.key(0), progress_bar=False)
    jax.block_until_ready((post.samples, post.log_likelihood))
    first = {"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu}
    run_log, log[:] = list(log), []
    jax.config.update("jax_dump_ir_to", "")
    grads = with_gradient(os.path.join(dumps, "run"))
    grads += [False] * (len(run_log) - len(grads))

    pot = full_batch_potential(model, x, y)
    u = jax.block_until_ready(pot.init_params(jax.random.key(1)))
    log[:] = []
    vg = jax.jit(lambda u, data: jax.value_and_grad(pot.potential_fn_gen(data))(u))
    cpu, wall = time.process_time(), time.perf_counter()
    jax.block_until_ready(vg(u, pot.data))
    ref = {"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu}
    return {
        "model": model_name,
        "algo": algo,
        "params": pot.num_params,
        "first": first,
        "ref": ref,
        "compiles": len(run_log),
        "grad_programs": [name for (name, _), g in zip(run_log, grads, strict=True) if g],
        "compile_s": sum(d for _, d in run_log),
        "grad_compile_s": sum(d for (_, d), g in zip(run_log, grads, strict=True) if g),
        "ref_compile_s": sum(d for _, d in log),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="the MLP only")
    p.add_argument("--models", nargs="+", choices=MODELS, default=None)
    p.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    import _record

    _record.add_flag(p)
    a = p.parse_args(argv)
    if a.child:
        print(json.dumps(_child(*a.child)))
        return 0
    models = a.models or (["mlp"] if a.quick else list(MODELS))
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}
    env |= {"JAX_PLATFORMS": "cpu", "BNN_PPL_CACHE_DIR": "off", "JAX_ENABLE_COMPILATION_CACHE": "0"}
    env.pop("JAX_DISABLE_MOST_OPTIMIZATIONS", None)
    print(f"{'model':8} {'algo':5} {'params':>7} {'first draw s':>13} {'ref s':>7} {'ratio':>6} "
          f"{'cpu ratio':>9} {'compiles':>8} {'grad progs':>10} {'compile s':>9}")  # fmt: skip
    worst, results = 0.0, []
    for model in models:
        for algo in ("hmc", "nuts"):
            out = subprocess.run(
                [sys.executable, __file__, "--child", model, algo],
                env=env, capture_output=True, text=True, check=True,
            )  # fmt: skip
            r = json.loads(out.stdout.strip().splitlines()[-1])
            results.append((model, algo, r))
            ratio = r["first"]["wall"] / r["ref"]["wall"]
            worst = max(worst, ratio)
            print(
                f"{model:8} {algo:5} {r['params']:>7} {r['first']['wall']:>13.2f} "
                f"{r['ref']['wall']:>7.2f} {ratio:>6.2f} "
                f"{r['first']['cpu'] / r['ref']['cpu']:>9.2f} "
                f"{r['compiles']:>8} {len(r['grad_programs']):>10} {r['compile_s']:>9.2f}"
            )
            print(f"    gradient programs: {', '.join(r['grad_programs'])} "
                  f"({r['grad_compile_s']:.2f} s of {r['compile_s']:.2f} s compiling; "
                  f"reference compile {r['ref_compile_s']:.2f} s)")  # fmt: skip
    print(f"worst ratio first draw / (compile value_and_grad + one gradient): {worst:.2f} "
          f"(target <= 2)")  # fmt: skip
    if a.record:
        names = {"mlp": "MLP", "lenet5": "LeNet-5", "resnet": "ResNet-FRN"}
        table = [
            [names[m], algo.upper(), r["params"], round(r["first"]["wall"], 2),
             round(r["ref"]["wall"], 2), round(r["first"]["wall"] / r["ref"]["wall"], 2),
             round(r["first"]["cpu"] / r["ref"]["cpu"], 2), r["compiles"],
             len(r["grad_programs"]), round(r["compile_s"], 2)]
            for m, algo, r in results
        ]  # fmt: skip
        columns = ["model", "sampler", "parameters", "first draw (s)", "reference (s)", "ratio"]
        columns += ["CPU ratio", "XLA compilations", "programs with the gradient", "compiling (s)"]
        _record.record("first_draw", columns, table, key=["model", "sampler"], to=a.record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

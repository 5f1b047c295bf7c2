"""A rerun's compilation with bnn_ppl's default persistent compilation cache, against the first.

Two fresh processes fit the same model with the same settings, sharing an empty cache folder
(``BNN_PPL_CACHE_DIR``); each reports its wall time and the seconds it spent compiling (XLA
backend compilations, including the reads of programs found in the cache). The second run is
a rerun (``--mode rerun``) or a checkpointed run in a new folder (``--mode checkpointed``,
whose segments also compile the sampling loop). Target: the second run compiles in <= 20 % of
the first run's compile time.

    python benchmarks/compile_cache.py                 # HMC on an MLP(50), digits
    python benchmarks/compile_cache.py --method nuts --mode checkpointed
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def _child(method: str, checkpoint_dir: str | None, samples: int) -> dict:
    import jax

    compile_s = {"backend": 0.0, "trace": 0.0, "lower": 0.0}
    counts = {"compiles": 0, "hits": 0}

    def on_duration(event: str, d: float, **kw: object) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            compile_s["backend"] += d
            counts["compiles"] += 1
        elif event == "/jax/core/compile/jaxpr_trace_duration":
            compile_s["trace"] += d
        elif event == "/jax/core/compile/jaxpr_to_mlir_module_duration":
            compile_s["lower"] += d

    def on_event(event: str, **kw: object) -> None:
        if event == "/jax/compilation_cache/cache_hits":
            counts["hits"] += 1

    jax.monitoring.register_event_duration_secs_listener(on_duration)
    jax.monitoring.register_event_listener(on_event)
    import bnn_ppl as bp
    from bnn_ppl.config import HMCConfig, NUTSConfig
    from bnn_ppl.models import MLP

    data = bp.data.load("digits")
    model = bp.BNN(MLP(hidden=(50,), out=10), bp.priors.Normal(0.3), bp.likelihoods.Categorical())
    cls = HMCConfig if method == "hmc" else NUTSConfig
    extra = {"max_tree_depth": 5} if method == "nuts" else {"trajectory_length": 0.2}
    config = cls(num_warmup=samples, num_samples=samples, **extra)
    ckpt = {} if checkpoint_dir is None else {"checkpoint_dir": checkpoint_dir,
                                              "checkpoint_every": max(1, samples // 4)}  # fmt: skip
    start = time.perf_counter()
    post = bp.inference.fit(model, data, config, jax.random.key(0), **ckpt)
    wall = time.perf_counter() - start
    return {"wall": wall, **compile_s, **counts, "cache": jax.config.jax_compilation_cache_dir,
            "acc": float(post.config.get("test_accuracy", 0.0) or 0.0)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--method", choices=("hmc", "nuts"), default="hmc")
    p.add_argument("--mode", choices=("rerun", "checkpointed"), default="rerun")
    p.add_argument("--samples", type=int, default=20, help="warmup iterations and draws")
    p.add_argument("--quick", action="store_true", help="5 warmup iterations and draws")
    p.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    import _record

    _record.add_flag(p)
    a = p.parse_args(argv)
    if a.child:
        method, ckpt, samples = a.child
        print(json.dumps(_child(method, None if ckpt == "-" else ckpt, int(samples))))
        return 0
    samples = 5 if a.quick else a.samples
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}
        env |= {"JAX_PLATFORMS": "cpu", "BNN_PPL_CACHE_DIR": os.path.join(tmp, "cache")}
        env.pop("JAX_DISABLE_MOST_OPTIMIZATIONS", None)
        rows = []
        for i in range(2):
            ckpt = os.path.join(tmp, f"run{i}") if a.mode == "checkpointed" else "-"
            out = subprocess.run(
                [sys.executable, __file__, "--child", a.method, ckpt, str(samples)],
                env=env, capture_output=True, text=True, check=True,
            )  # fmt: skip
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"{a.method}, {a.mode}, MLP(50) on digits, {samples} warmup + {samples} draws; "
          "seconds (wall clock)")  # fmt: skip
    print(f"{'run':8} {'wall':>7} {'backend compile':>16} {'trace':>7} {'lower':>7} "
          f"{'compiles':>9} {'cache hits':>10}")  # fmt: skip
    for name, r in zip(("first", "second"), rows, strict=True):
        print(f"{name:8} {r['wall']:>7.2f} {r['backend']:>16.2f} {r['trace']:>7.2f} "
              f"{r['lower']:>7.2f} {r['compiles']:>9} {r['hits']:>10}")  # fmt: skip
    ratio = rows[1]["backend"] / rows[0]["backend"]
    print(f"second / first backend compile: {ratio:.1%} (target <= 20 %); "
          f"wall {rows[1]['wall'] / rows[0]['wall']:.1%}")  # fmt: skip
    if a.record:
        table = [
            [name, a.mode, round(r["wall"], 2), round(r["backend"], 2), round(r["trace"], 2),
             round(r["lower"], 2), r["compiles"], r["hits"]]
            for name, r in zip(("first", "second"), rows, strict=True)
        ]  # fmt: skip
        columns = ["run", "mode", "wall (s)", "compiling (s)", "tracing (s)", "lowering (s)"]
        _record.record(
            "cache", [*columns, "compilations", "cache hits"], table, key=["run", "mode"],
            title=f"{a.method.upper()} on MLP(50), digits, {samples} warmup + {samples} draws",
            to=a.record,
        )  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

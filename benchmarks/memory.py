"""Benchmark: peak resident memory of one full-batch ``value_and_grad`` vs N (ResNet20FRN).

For each N (default 5k, 20k, 50k CIFAR-shaped 32x32x3 random images, 10 classes, chunk size
c = 512), a fresh subprocess builds the potential of a ResNet20FRN BNN, deletes its host copies
of the data (only the device copy of the data stays), compiles ``jax.jit(value_and_grad)`` of
the potential, and then runs it once. It reports, in MiB:

* ``data``: the bytes of the (padded) device data ``x``, ``y``, ``mask``;
* ``XLA temp``: the compiled program's temporary buffers (``memory_analysis()``), the
  compile-time bound on the working memory of the gradient;
* ``before - data``: resident memory just before the call, minus the data (the runtime,
  compiled code, parameters);
* ``peak - data``: the peak resident memory *during* the call (the kernel's high-water mark is
  reset right before it, ``/proc/self/clear_refs``; where that is not allowed a 5 ms sampling
  thread is used instead), minus the data. This is the number that must not grow with N;
* ``process peak - data``: the high-water mark of the whole process (``ru_maxrss`` read
  before the reset, or the call's peak if higher), which also contains building the potential
  (host copies of the data in flight) and compilation.

``--analysis-only`` compiles but does not run (seconds instead of hours on a CPU: the ``XLA
temp`` column for the full-size configuration). On CPUs the gradient of a ConvNet inside the
potential's ``lax.scan`` is very slow (see RESULTS.md: XLA:CPU does not canonicalise
convolutions inside loop bodies), so measured runs on a CPU use smaller sizes.

Usage::

    python benchmarks/memory.py                       # N = 5k, 20k, 50k; c = 512; width 16
    python benchmarks/memory.py --analysis-only       # compile-time memory only
    python benchmarks/memory.py --n 512 2048 8192 --chunk-size 128 --width 4
    python benchmarks/memory.py --quick               # smoke test (seconds)
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import threading
import time

MIB = 2**20


def _status(field: str) -> int:
    """A ``/proc/self/status`` field (VmRSS, VmHWM) in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class _Sampler(threading.Thread):
    """Polls VmRSS every 5 ms (used when the kernel's peak cannot be reset)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak, self.stop = 0, threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.peak = max(self.peak, _status("VmRSS"))
            time.sleep(0.005)


def child(args: argparse.Namespace) -> dict:
    """One measurement (runs in its own process)."""
    import jax
    import numpy as np

    import bnn_ppl as bp
    from bnn_ppl.inference import full_batch_potential
    from bnn_ppl.models import ResNet20FRN

    n, s = args.child, args.image_size
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, s, s, 3), dtype=np.float32)
    y = rng.integers(0, 10, n).astype(np.int32)
    model = bp.BNN(
        ResNet20FRN(out=10, width=args.width, blocks_per_stage=args.blocks),
        bp.priors.Normal(0.2),
        bp.likelihoods.Categorical(),
    )
    pot = full_batch_potential(model, x, y, chunk_size=args.chunk_size)
    del x, y
    gc.collect()
    data_bytes = sum(a.nbytes for a in pot.data)
    u = pot.init_params(jax.random.key(0), method="network")
    f = jax.jit(lambda u, d: jax.value_and_grad(pot.potential_fn_gen(d))(u))
    t0 = time.perf_counter()
    compiled = f.lower(u, pot.data).compile()
    compile_s = time.perf_counter() - t0
    mem = compiled.memory_analysis()
    out = dict(
        n=n,
        chunk=pot.chunk_size,
        num_chunks=pot.num_chunks,
        params=pot.num_params,
        data=data_bytes,
        temp=mem.temp_size_in_bytes,
        compile_s=compile_s,
    )
    if not args.analysis_only:
        gc.collect()
        before = _status("VmRSS")
        setup_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # before reset
        reset = _reset_peak()
        sampler = None if reset else _Sampler()
        if sampler:
            sampler.start()
        t0 = time.perf_counter()
        value, grad = jax.block_until_ready(compiled(u, pot.data))
        out["run_s"] = time.perf_counter() - t0
        if sampler:
            sampler.stop.set()
            sampler.join()
        peak = _status("VmHWM") if reset else sampler.peak
        assert np.isfinite(float(value))
        out.update(
            before=before,
            peak=peak,
            peak_method="VmHWM" if reset else "sampled",
            process_peak=max(setup_peak, peak),
        )
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, nargs="+", default=[5_000, 20_000, 50_000])
    p.add_argument("--chunk-size", type=int, default=512)
    p.add_argument("--width", type=int, default=16, help="ResNet20FRN width (16: ResNet-20)")
    p.add_argument("--blocks", type=int, default=3, help="blocks per stage (3: ResNet-20)")
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--analysis-only", action="store_true", help="compile, do not run")
    p.add_argument("--timeout", type=float, default=None, help="seconds per subprocess")
    p.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test (seconds)")
    p.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    import _record

    _record.add_flag(p)
    args = p.parse_args(argv)
    if args.quick:
        args.n, args.chunk_size, args.width, args.blocks, args.image_size = [32, 96], 16, 2, 1, 8
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child is not None:
        print(json.dumps(child(args)))
        return 0
    import _timing

    t_start = time.perf_counter()
    print("# bnn_ppl memory benchmark: peak RSS of one full-batch value_and_grad, ResNet20FRN")
    print(_timing.machine())
    print(
        f"# images {args.image_size}x{args.image_size}x3, width {args.width}, "
        f"{args.blocks} blocks/stage, chunk size {args.chunk_size}"
        + (", compile-time analysis only" if args.analysis_only else "")
    )
    base = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--quick"]
    rows = []
    for n in args.n:
        cmd = [sys.executable, os.path.abspath(__file__), *base, "--child", str(n)]
        if args.quick:
            cmd += ["--quick"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
        if proc.returncode != 0:
            print(proc.stderr[-3000:], file=sys.stderr)
            return proc.returncode
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    print(
        f"\n{'N':>7}{'chunks':>8}{'data':>9}{'XLA temp':>10}{'before-data':>13}"
        f"{'peak-data':>11}{'proc peak-data':>16}{'run s':>8}   (MiB)"
    )
    for r in rows:
        line = f"{r['n']:>7}{r['num_chunks']:>8}{r['data'] / MIB:>9.1f}{r['temp'] / MIB:>10.1f}"
        if "peak" in r:
            line += (
                f"{(r['before'] - r['data']) / MIB:>13.1f}"
                f"{(r['peak'] - r['data']) / MIB:>11.1f}"
                f"{(r['process_peak'] - r['data']) / MIB:>16.1f}{r['run_s']:>8.1f}"
            )
        print(line)
    if len(rows) > 1:
        first, last = rows[0], rows[-1]
        print(
            f"\nfrom N={first['n']} to N={last['n']} (data x{last['data'] / first['data']:.1f}):"
            f" XLA temp x{last['temp'] / first['temp']:.2f}",
            end="",
        )
        if "peak" in first:
            grow = (last["peak"] - last["data"]) - (first["peak"] - first["data"])
            print(
                f", peak - data grows by {grow / MIB:+.1f} MiB "
                f"(peak measured by {first['peak_method']})"
            )
        else:
            print()
    print(f"# {rows[0]['params']} parameters; total {time.perf_counter() - t_start:.0f} s")
    if args.record:
        import _record

        columns = ["N", "chunks", "data", "XLA temp"]
        if "peak" in rows[0]:
            columns += ["before − data", "peak − data", "process peak − data", "run (s)"]
        table = []
        for r in rows:
            cells = [r["n"], r["num_chunks"], r["data"] / MIB, r["temp"] / MIB]
            if "peak" in r:
                cells += [(r[k] - r["data"]) / MIB for k in ("before", "peak", "process_peak")]
                cells.append(r["run_s"])
            table.append([round(c, 1) if isinstance(c, float) else c for c in cells])
        _record.record(
            f"width_{args.width}" + ("_analysis" if args.analysis_only else ""),
            columns,
            table,
            key=["N"],
            title=f"ResNet20FRN width {args.width} ({rows[0]['params']:,} parameters), "
            f"chunks of {args.chunk_size} rows",
            notes="MiB; peak measured by "
            + str(rows[0].get("peak_method", "compile-time analysis only"))
            + ".",
            to=args.record,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

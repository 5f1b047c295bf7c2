"""Benchmark: time per full-batch gradient vs the number of rows N, and vs the device count.

From ONE process (simulated CPU devices: the script sets
``XLA_FLAGS=--xla_force_host_platform_device_count=8`` before JAX starts unless XLA_FLAGS
already sets a count), for a regression MLP BNN:

1. **vs N** on one device: the median time of ``pot.value_and_grad`` for N = N0, 2 N0, 4 N0, ...
   and the ratio ``t(N) / t(N0)`` next to ``N / N0`` (linear scaling means the two agree; the
   column ``ms per 1k rows`` should be flat). The fit ``t = a + b N`` (least squares) gives the
   fixed cost ``a`` and the per-row cost ``b``.
2. **vs devices** at fixed N: the same potential built with ``devices=jax.devices()[:k]`` for
   k = 1, 2, 4, 8, and the speed-up ``t(1) / t(k)``. Simulated devices share the machine's
   cores, so on a 2-core machine the best possible speed-up is about 2 (if a single device does
   not already use both cores); what this measures beyond that is the overhead of sharding
   (per-device programs, the ``psum``), which should stay small.

All candidates of a section are timed round-robin; medians are reported.

Usage::

    python benchmarks/scaling.py            # MLP 50-256-256-1, N = 2.5k..40k; 20k on 1..8 devices
    python benchmarks/scaling.py --quick    # smoke test (seconds)
"""

from __future__ import annotations

import os
import sys

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    ).strip()

import argparse  # noqa: E402
import time  # noqa: E402

import _record  # noqa: E402
import _timing  # noqa: E402
import jax  # noqa: E402
import numpy as np  # noqa: E402

import bnn_ppl as bp  # noqa: E402
from bnn_ppl.inference import full_batch_potential  # noqa: E402
from bnn_ppl.models import MLP  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, nargs="+", default=[2_500, 5_000, 10_000, 20_000, 40_000])
    p.add_argument("--device-n", type=int, default=20_000, help="N of the device sweep")
    p.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--d", type=int, default=50)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--chunk-size", type=int, default=None, help="default: the library's (1024)")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test (seconds)")
    _record.add_flag(p)
    args = p.parse_args(argv)
    if args.quick:
        args.n, args.device_n, args.devices = [100, 200, 400], 200, [1, 2]
        args.d, args.width, args.rounds, args.chunk_size = 4, 8, 2, 64
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    t0 = time.perf_counter()
    print("# bnn_ppl scaling benchmark: full-batch value_and_grad vs N and vs devices")
    print(_timing.machine())
    rng = np.random.default_rng(args.seed)
    n_max = max(*args.n, args.device_n)
    x_all = rng.standard_normal((n_max, args.d)).astype(np.float32)
    y_all = np.sin(x_all @ rng.standard_normal(args.d) / np.sqrt(args.d)).astype(np.float32)
    model = bp.BNN(
        MLP(hidden=(args.width,) * 2, out=1), bp.priors.Normal(1.0), bp.likelihoods.Gaussian(0.5)
    )

    def candidate(n: int, devices: list) -> tuple:
        pot = full_batch_potential(
            model, x_all[:n], y_all[:n], devices=devices, chunk_size=args.chunk_size
        )
        u = pot.init_params(jax.random.key(args.seed), method="network")
        _timing.block(pot.value_and_grad(u))  # compile
        return pot, (lambda: _timing.block(pot.value_and_grad(u)), 1)

    # ---- vs N, one device
    dev0 = jax.devices()[:1]
    pots, jobs = {}, {}
    for n in args.n:
        pots[n], jobs[n] = candidate(n, dev0)
    times = _timing.round_robin(jobs, rounds=args.rounds)
    med = {n: _timing.median(ts) * 1e3 for n, ts in times.items()}
    n0 = args.n[0]
    print(
        f"\n## vs N (1 device, MLP {args.d}-{args.width}-{args.width}-1, "
        f"{pots[n0].num_params} parameters)"
    )
    print(
        f"{'N':>8}{'chunks':>8}{'median ms':>11}{'min ms':>9}{'ms/1k rows':>12}"
        f"{'t/t0':>8}{'N/N0':>7}"
    )
    by_rows = []
    for n in args.n:
        s = _timing.summary(times[n])
        by_rows.append(
            [n, pots[n].num_chunks, round(s["median"], 2), round(s["min"], 2),
             round(s["median"] / n * 1e3, 3), round(med[n] / med[n0], 2), n / n0]
        )  # fmt: skip
        print(
            f"{n:>8}{pots[n].num_chunks:>8}{s['median']:>11.2f}{s['min']:>9.2f}"
            f"{s['median'] / n * 1e3:>12.3f}{med[n] / med[n0]:>8.2f}{n / n0:>7.1f}"
        )
    a, b = np.polynomial.polynomial.polyfit(
        np.asarray(args.n, float), np.asarray([med[n] for n in args.n]), 1
    )
    print(
        f"least-squares fit t = a + b N: a = {a:.2f} ms fixed, b = {b * 1e3:.3f} ms per 1k "
        f"rows; t(N_max)/t(N0) = {med[args.n[-1]] / med[n0]:.2f} for N ratio "
        f"{args.n[-1] / n0:.1f}"
    )

    # ---- vs devices, fixed N
    counts = [k for k in args.devices if k <= jax.device_count()]
    pots, jobs = {}, {}
    for k in counts:
        pots[k], jobs[k] = candidate(args.device_n, jax.devices()[:k])
    times = _timing.round_robin(jobs, rounds=args.rounds)
    med = {k: _timing.median(ts) * 1e3 for k, ts in times.items()}
    print(f"\n## vs simulated devices (N={args.device_n}; {os.cpu_count()} physical CPUs)")
    print(
        f"{'devices':>8}{'rows/dev':>10}{'chunks':>8}{'median ms':>11}{'min ms':>9}{'speed-up':>10}"
    )
    by_devices = []
    for k in counts:
        s = _timing.summary(times[k])
        by_devices.append(
            [k, pots[k].num_chunks * pots[k].chunk_size, pots[k].num_chunks,
             round(s["median"], 2), round(s["min"], 2), round(med[counts[0]] / med[k], 2)]
        )  # fmt: skip
        print(
            f"{k:>8}{pots[k].num_chunks * pots[k].chunk_size:>10}{pots[k].num_chunks:>8}"
            f"{s['median']:>11.2f}{s['min']:>9.2f}{med[counts[0]] / med[k]:>10.2f}"
        )
    print(f"# total {time.perf_counter() - t0:.0f} s")
    if args.record:
        model_name = f"MLP {args.d}-{args.width}-{args.width}-1"
        _record.record(
            "rows",
            ["N", "chunks", "median (ms)", "min (ms)", "ms per 1k rows", "t / t0", "N / N0"],
            by_rows,
            title=f"Gradient time vs N (1 device, {model_name})",
            notes=f"Least-squares fit: {a:.2f} ms fixed + {b * 1e3:.3f} ms per 1k rows.",
            to=args.record,
        )
        _record.record(
            "devices",
            ["devices", "rows per device", "chunks", "median (ms)", "min (ms)", "speed-up"],
            by_devices,
            title=f"Gradient time vs simulated devices (N = {args.device_n}, {model_name})",
            notes=f"Simulated devices share the machine's {os.cpu_count()} CPU cores.",
            to=args.record,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

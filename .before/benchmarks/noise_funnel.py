"""Benchmark: are the UCI reference chains in separate modes, or at different noise scales?

The reference recipe's chains on UCI yacht split 0 (MLP(50), N(0, 1), Gaussian likelihood with
a HalfNormal(1) noise prior) sit 60-380 nats apart in log posterior. This script runs
:func:`bnn_ppl.inference.reference_hmc` on one split with the noise scale learned and then
fixed at each ``--fixed`` value, all in one process, and prints per chain: the mean ``lp``, its
gap below the best chain (``chain_levels``), the geometric-mean noise scale and the part of the
gap that ``N · Δ log σ`` accounts for (``scale_levels``), and the recipe's convergence figures.
If the learned-noise gaps are the noise scale's (``scale_gap ≈ gap``) and the fixed-noise
chains sit at one level, the chains are at different heights of one funnel in ``σ``, not in
separate modes of the network.

Usage::

    python benchmarks/noise_funnel.py --dataset yacht --warmup 300 --draws 200 --max-seconds 240
    python benchmarks/noise_funnel.py --quick     # tiny: a smoke test
"""

from __future__ import annotations

import argparse
import time
import warnings

import jax
import numpy as np

import bnn_ppl as bp
from bnn_ppl.inference import reference_hmc
from bnn_ppl.models import mlp_bnn


def run_one(data, noise: float | None, args: argparse.Namespace) -> None:
    """One recipe run and its per-chain table."""
    model = mlp_bnn(data, args.width, 1.0, noise=noise)
    t0 = time.time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run = reference_hmc(model, data, x_test=data.x_test, rng_key=jax.random.key(args.seed),
                            num_warmup=args.warmup, segment_draws=args.draws,
                            max_draws=args.max_draws, max_seconds=args.max_seconds,
                            max_num_steps=args.max_num_steps)  # fmt: skip
    rec = run.posterior.config["convergence"]
    last = run.checks[-1] if run.checks else None
    label = "learned (HalfNormal(1))" if noise is None else f"fixed {noise:g}"
    print(f"\nnoise {label}: {run.stop_reason}, {run.draws} draws/chain after {args.warmup} "
          f"warmup, {time.time() - t0:.0f} s; R-hat max "
          f"{last.rhat_max if last else float('nan'):.3f}, bulk ESS min "
          f"{last.ess_bulk_min if last else float('nan'):.0f}")  # fmt: skip
    scales = {s["chain"]: s for s in rec["scale_levels"]}
    health = {h["chain"]: h for h in rec["chain_health"]}
    print("chain   lp mean   gap (nats)  gap (sd)  noise scale  scale gap  moving")
    for c in rec["chain_levels"]:
        s = scales.get(c["chain"])
        sigma = f"{np.exp(s['log_mean']):11.4g}" if s else f"{noise:11.4g}"
        sgap = f"{s['scale_gap']:9.0f}" if s else f"{'-':>9}"
        print(f"{c['chain']:5d} {c['lp_mean']:9.1f} {c['gap']:12.1f} {c['gap_sd']:9.1f} "
              f"{sigma} {sgap}  {health[c['chain']]['moving']}")  # fmt: skip
    if rec["scale_funnel"]:
        print("scale_funnel:", rec["scale_funnel"])


def main(args: argparse.Namespace) -> None:
    data = bp.data.load_subset(args.dataset, split=args.split)
    print(
        f"{data.name} split {args.split}: {len(data.x_train)} train rows, MLP({args.width}), "
        f"N(0, 1), 4 chains from prior draws, max_num_steps {args.max_num_steps}"
    )
    for noise in [None, *args.fixed]:
        run_one(data, noise, args)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="yacht")
    p.add_argument("--split", type=int, default=0)
    p.add_argument("--width", type=int, default=50)
    p.add_argument("--warmup", type=int, default=300)
    p.add_argument("--draws", type=int, default=200, help="segment draws per chain")
    p.add_argument("--max-draws", type=int, default=400)
    p.add_argument("--max-seconds", type=float, default=240.0)
    p.add_argument("--max-num-steps", type=int, default=256)
    p.add_argument(
        "--fixed",
        type=float,
        nargs="*",
        default=[0.05],
        help="fixed noise scales (standardised targets) to compare",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="tiny settings: a smoke test")
    args = p.parse_args(argv)
    if args.quick:
        args.width, args.warmup, args.draws, args.max_draws, args.max_num_steps = 4, 20, 10, 10, 8
    return args


if __name__ == "__main__":
    main(parse_args())

"""Benchmark: identity or adapted diagonal mass matrix for reference HMC runs?

Izmailov et al. ran HMC with an identity mass matrix and the fixed trajectory length
(π/2)·σ_prior·√T: a quarter period of the prior. ``bp.fit`` with an ``HMCConfig`` adapts a diagonal
mass matrix by default and keeps the trajectory a quarter period *in the current metric*
((π/2)·σ_prior·√T while it is the identity, π/2 once it holds the posterior's variances). The
reference recipe (:func:`bnn_ppl.inference.reference_hmc`) must pick one; this measures both,
plus the diagonal metric with Izmailov et al.'s length kept literally (the old default), on a
small digits MLP:

  identity        no mass-matrix adaptation, (π/2)·σ_prior·√T throughout (Izmailov et al.)
  diagonal        diagonal mass matrix adapted, a quarter period in the current metric
  diagonal-fixed  diagonal mass matrix adapted, (π/2)·σ_prior·√T throughout

All with the step size adapted (dual averaging, target acceptance 0.8) and chains started from
independent prior draws. Per run: mean leapfrog steps, and for each function-space quantity
(:mod:`bnn_ppl.diagnostics.function_values`: all softmax probabilities, p(true class), centred
logits) the
share of R-hat above 1.01 and 1.1 and the minimum and median bulk ESS per 1000 gradient
evaluations of the sampling phase (the efficiency a reference run pays for).

Usage::

    python benchmarks/reference_mass_matrix.py            # MLP(20), 1437 rows, seeds 0 and 1
    python benchmarks/reference_mass_matrix.py --quick    # tiny: a smoke test
"""

from __future__ import annotations

import argparse
import time
import warnings

import jax
import numpy as np

import bnn_ppl as bp
from bnn_ppl.config import HMCConfig
from bnn_ppl.diagnostics import convergence
from bnn_ppl.diagnostics.function_values import CLASSIFICATION_QUANTITIES, function_values
from bnn_ppl.inference import default_trajectory_length
from bnn_ppl.models import MLP

KERNELS = ("identity", "diagonal", "diagonal-fixed")


def kernel_kwargs(name: str, model: bp.BNN, x: np.ndarray) -> dict:
    if name == "identity":
        return {"mass_matrix": "identity"}
    if name == "diagonal":
        return {}
    return {"trajectory_length": default_trajectory_length(model, x)}


def run(args: argparse.Namespace, name: str, seed: int) -> dict:
    data = bp.data.load("digits")
    x, y = data.x_train[: args.max_train], data.y_train[: args.max_train]
    xt, yt = data.x_test[: args.num_test], data.y_test[: args.num_test]
    model = bp.BNN(
        MLP(hidden=(args.width,), out=data.num_classes),
        bp.priors.Normal(args.prior_scale),
        bp.likelihoods.Categorical(),
    )
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a slow chain is a result here, not an error
        config = HMCConfig(num_warmup=args.warmup, num_samples=args.samples,
                           num_chains=args.chains, **kernel_kwargs(name, model, x))  # fmt: skip
        post = bp.fit(model, (x, y), config, jax.random.key(seed), progress_bar=False)
        samples = jax.block_until_ready(post.samples)
    wall = time.perf_counter() - t
    steps = np.asarray(post.sample_stats["n_steps"])  # (ArviZ's name for num_steps)
    grads = float(steps.sum())  # every chain's sampling-phase gradients
    row = {"kernel": name, "seed": seed, "leapfrog": float(steps.mean()), "wall_s": wall}
    for q in CLASSIFICATION_QUANTITIES:
        conv = convergence({q: function_values(model, samples, xt, q, y=yt)})
        ess = np.ravel(conv.ess_bulk[q])
        row[q] = {
            "rhat>1.01": conv.fraction_above(1.01),
            "rhat>1.1": conv.fraction_above(1.1),
            "ess_min_per_1k": 1000 * float(np.min(ess)) / grads,
            "ess_median_per_1k": 1000 * float(np.median(ess)) / grads,
        }
    return row


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kernels", nargs="+", default=list(KERNELS), choices=KERNELS)
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    p.add_argument("--width", type=int, default=20)
    p.add_argument("--prior-scale", type=float, default=0.3)
    p.add_argument("--max-train", type=int, default=None, help="training rows (default: all)")
    p.add_argument("--num-test", type=int, default=360)
    p.add_argument("--warmup", type=int, default=300)
    p.add_argument("--samples", type=int, default=300)
    p.add_argument("--chains", type=int, default=4)
    p.add_argument("--quick", action="store_true", help="MLP(4), 100 rows, 2 kernels, 20+20")
    args = p.parse_args(argv)
    if args.quick:
        args.kernels, args.seeds, args.width, args.max_train = ["identity", "diagonal"], [0], 4, 100
        args.num_test, args.warmup, args.samples, args.chains = 20, 20, 20, 2
    n = args.max_train or 1437
    print(f"# digits, MLP({args.width}), N(0, {args.prior_scale}^2) prior, {n} training rows, "
          f"{args.num_test} test rows; {args.chains} chains x ({args.warmup} warmup + "
          f"{args.samples} draws); jax {jax.__version__}, {jax.devices()[0].platform}")  # fmt: skip
    print("# per quantity: share of R-hat > 1.01 / > 1.1, min / median bulk ESS per 1000 "
          "gradients (sampling phase)")  # fmt: skip
    head = f"{'kernel':<15}{'seed':>5}{'steps':>7}"
    for q in CLASSIFICATION_QUANTITIES:
        head += f"  {q + ': >1.01 >1.1 min/1k med/1k':>38}"
    print(head + f"{'wall s':>8}")
    for seed in args.seeds:
        for k in args.kernels:
            r = run(args, k, seed)
            line = f"{k:<15}{seed:>5}{r['leapfrog']:>7.1f}"
            for q in CLASSIFICATION_QUANTITIES:
                s = r[q]
                line += (f"  {s['rhat>1.01']:>17.1%}{s['rhat>1.1']:>6.1%}"
                         f"{s['ess_min_per_1k']:>7.2f}{s['ess_median_per_1k']:>8.1f}")  # fmt: skip
            print(line + f"{r['wall_s']:>8.0f}", flush=True)


if __name__ == "__main__":
    main()

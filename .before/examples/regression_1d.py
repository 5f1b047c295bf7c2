"""1-D regression with a gap: does epistemic uncertainty grow away from the data?

Wilson (2020) argues that a Bayesian model average knows what it does not know: between two
clusters of data, where many functions fit equally well, the posterior predictive should widen.
This example fits one tanh MLP (same prior and likelihood) on the seeded 1-D set with a gap in
the inputs (``bp.data.load("gap1d")``: training inputs in [-1, -0.3] and [0.3, 1], test grid
over [-1.5, 1.5]) with :func:`bnn_ppl.inference.fit` and three methods:

* ``HMC``: full-batch HMC, the reference;
* ``SVI``: mean-field VI started at a MAP solution;
* ``ensemble``: a deep ensemble.

It also draws functions from the prior (:func:`bnn_ppl.prior_predictive`). The table gives, per
method, the epistemic spread (the across-draw standard deviation of f(x), original units)
averaged over the gap and near the data (:func:`bnn_ppl.data.synthetic.gap1d_spread`), their
ratio, and the RMSE of the BMA mean against the noise-free function on the grid. The claim is
supported for a method when its spread in the gap exceeds its spread near the data. Every
posterior is a run folder ``--out/<method>`` that ``bnn-ppl evaluate`` reads (the prior is not
fitted, so it has none); ``--out``/``regression_1d.png`` has one panel per predictive: the 95%
band of f and a few function draws.

    python examples/regression_1d.py            # about 4 minutes on 2 busy CPU cores
    python examples/regression_1d.py --full     # longer chains, more SVI/ensemble steps
"""

from __future__ import annotations

import argparse
import os
import time

import jax
import numpy as np
from matplotlib.figure import Figure

import bnn_ppl as bp
from bnn_ppl.config import EnsembleConfig, HMCConfig, SVIConfig
from bnn_ppl.data.synthetic import gap1d_mean, gap1d_spread
from bnn_ppl.inference import fit_run
from bnn_ppl.plots import regression_band, save_figure

METHODS = ("prior", "HMC", "SVI", "ensemble")


def build_model(args: argparse.Namespace) -> bp.BNN:
    """A tanh MLP with a Normal prior and a Gaussian likelihood with known noise."""
    return bp.BNN(
        bp.models.MLP(hidden=(args.width,) * args.depth, out=1, activation=jax.numpy.tanh),
        prior=bp.priors.Normal(args.prior_scale),
        likelihood=bp.likelihoods.Gaussian(scale=args.noise),
    )


def configs(args: argparse.Namespace) -> dict[str, bp.config.Config]:
    return {
        "HMC": HMCConfig(num_warmup=args.num_warmup, num_samples=args.num_samples),
        "SVI": SVIConfig(num_steps=args.num_steps, map_steps=args.map_steps,
                         num_samples=args.num_samples),
        "ensemble": EnsembleConfig(num_members=args.num_members, num_steps=args.map_steps),
    }  # fmt: skip


def plot(functions: dict[str, np.ndarray], x: np.ndarray, x_train: np.ndarray,
         y_train: np.ndarray, num_plotted: int) -> Figure:
    """One panel per predictive: 95% band of f, its mean and a few draws."""
    fig = Figure(figsize=(4.0 * len(functions), 3.6), layout="constrained")
    axes = fig.subplots(1, len(functions), sharey=True)
    for ax, (name, f) in zip(np.atleast_1d(axes), functions.items(), strict=True):
        lo, hi = np.quantile(f, [0.025, 0.975], axis=0)
        regression_band(x, f.mean(0), lo, hi, x_train=x_train, y_train=y_train,
                        draws=f[:num_plotted], label=f"{name} mean", ax=ax)
        ax.set_title(name)
        ax.set_ylim(-4, 4)
    return fig


def main(args: argparse.Namespace) -> None:
    data = bp.data.load("gap1d", seed=args.seed, num_train=args.num_train)
    model = build_model(args)
    x = data.x_test[:, 0] * data.x_std[0] + data.x_mean[0]
    options = {k: vars(args)[k] for k in ("width", "depth", "prior_scale", "noise")}
    keys = dict(zip(METHODS, jax.random.split(jax.random.key(args.seed), len(METHODS)),
                    strict=True))  # fmt: skip
    functions: dict[str, np.ndarray] = {}
    wall: dict[str, float] = {}
    for name, config in {"prior": None, **configs(args)}.items():
        start = time.perf_counter()
        if config is None:
            mean = bp.prior_predictive(model, data.x_test, args.num_samples,
                                       rng_key=keys[name]).mean
        else:
            post, _ = fit_run(os.path.join(args.out, config.method), model, data, config,
                              keys[name], options=options)
            mean = post.predictions["mean"].reshape(-1, len(x))  # (chain * draw, n)
        functions[name] = np.asarray(mean) * data.y_std + data.y_mean
        wall[name] = time.perf_counter() - start

    f_true = gap1d_mean(x)
    print(f"gap1d: {len(data.x_train)} training points, MLP {args.depth}x{args.width} (tanh), "
          f"{model.num_params(data.x_train)} parameters, prior Normal({args.prior_scale}), "
          f"noise {args.noise} (standardised y)")
    print("claim (Wilson 2020): epistemic uncertainty grows away from the data, "
          "i.e. sd in gap > sd near data")
    print(f"{'method':<10}{'sd in gap':>11}{'sd near data':>14}{'gap/near':>10}"
          f"{'RMSE vs f':>11}{'time s':>8}  supports claim")
    for name, f in functions.items():
        gap, near = gap1d_spread(f, x)
        rmse = float(np.sqrt(np.mean((f.mean(0) - f_true) ** 2)))
        verdict = "n/a (prior)" if name == "prior" else ("yes" if gap > near else "no")
        print(f"{name:<10}{gap:>11.3f}{near:>14.3f}{gap / near:>10.2f}{rmse:>11.3f}"
              f"{wall[name]:>8.1f}  {verdict}")
    print(f"(sd: across-draw sd of f(x) in original units; {args.num_samples} HMC/SVI/prior "
          f"draws, {args.num_members} ensemble members)")
    path = os.path.join(args.out, "regression_1d.png")
    x_train = data.x_train[:, 0] * data.x_std[0] + data.x_mean[0]
    save_figure(plot(functions, x, x_train, data.y_train * data.y_std + data.y_mean,
                     args.num_plotted), path)  # fmt: skip
    print(f"wrote {path} and the run folders {args.out}/{{hmc,svi,ensemble}}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--full", action="store_true",
                   help="longer runs: 1000 warmup / 1000 samples, 4x the SVI/MAP steps, "
                        "10 ensemble members")
    p.add_argument("--width", type=int, default=50)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--prior-scale", type=float, default=1.0)
    p.add_argument("--noise", type=float, default=0.15, help="likelihood noise (standardised y)")
    p.add_argument("--num-train", type=int, default=100)
    p.add_argument("--num-warmup", type=int, default=300)
    p.add_argument("--num-samples", type=int, default=300,
                   help="HMC samples, SVI draws and prior draws")
    p.add_argument("--map-steps", type=int, default=2000,
                   help="Adam steps of a MAP solution: each ensemble member, SVI's start")
    p.add_argument("--num-steps", type=int, default=5000, help="SVI steps")
    p.add_argument("--num-members", type=int, default=5, help="ensemble members")
    p.add_argument("--num-plotted", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="runs/regression_1d")
    args = p.parse_args(argv)
    if args.full:
        args.num_warmup, args.num_samples, args.num_members = 1000, 1000, 10
        args.map_steps, args.num_steps = 4 * args.map_steps, 4 * args.num_steps
    return args


if __name__ == "__main__":
    main(parse_args())

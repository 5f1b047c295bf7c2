"""Priors over functions: what a weight prior says about f(x), before and after the data.

Wilson (2020): the prior that matters is the prior over functions. This example draws functions
from a BNN's prior (:func:`bnn_ppl.prior_predictive`) on the seeded 1-D regression set with a
gap in the inputs (``bp.data.load("gap1d")``), runs full-batch HMC, and plots prior draws and the
posterior predictive band side by side. It prints the spread of the functions in the gap and
near the data: a posterior that knows what it does not know is wide in the gap and narrow where
the data are.

    python examples/prior_functions.py                       # Normal(1) prior
    python examples/prior_functions.py --prior laplace:0.5   # any "family:args" prior
    python examples/prior_functions.py --prior normal:2,fan_in
"""

from __future__ import annotations

import argparse
import os

import jax
import numpy as np

import bnn_ppl as bp
from bnn_ppl.plots import regression_band, save_figure


def get_data(args: argparse.Namespace) -> bp.data.Dataset:
    """The 1-D gap set (train in [-1,-0.3] ∪ [0.3,1], test grid over [-1.5,1.5])."""
    return bp.data.load("gap1d", seed=args.seed, num_train=args.num_train)


def build_model(args: argparse.Namespace) -> bp.BNN:
    """A tanh MLP with the chosen prior and a Gaussian likelihood with known noise."""
    return bp.BNN(
        bp.models.MLP(hidden=(args.width,) * args.depth, out=1, activation=jax.numpy.tanh),
        prior=bp.priors.from_string(args.prior),
        likelihood=bp.likelihoods.Gaussian(scale=args.noise),
    )


def spread(draws: np.ndarray, x: np.ndarray, where: np.ndarray) -> float:
    """Mean across inputs in ``where`` of the across-draw standard deviation of f(x)."""
    return float(np.std(draws[:, where], axis=0).mean())


def main(args: argparse.Namespace) -> None:
    data = get_data(args)
    model = build_model(args)
    x_orig = data.x_test[:, 0] * data.x_std[0] + data.x_mean[0]
    in_gap = np.abs(x_orig) < 0.25
    near_data = (np.abs(x_orig) > 0.4) & (np.abs(x_orig) < 0.9)

    prior = bp.prior_predictive(model, data.x_test, args.num_prior_draws,
                                rng_key=jax.random.key(args.seed))
    mcmc = bp.inference.hmc(model, data.x_train, data.y_train, num_warmup=args.num_warmup,
                            num_samples=args.num_samples, rng_key=jax.random.key(args.seed + 1))
    post = bp.predict(model, mcmc.get_samples(), data.x_test)

    f_prior = np.asarray(prior.mean) * data.y_std + data.y_mean
    f_post = np.asarray(post.mean) * data.y_std + data.y_mean
    print(f"prior {args.prior} on MLP {args.depth}x{args.width} (tanh), "
          f"{model.num_params(data.x_train)} parameters; {len(data.x_train)} training points")
    print(f"{'functions':<12}{'sd in gap':>12}{'sd near data':>14}")
    for name, f in (("prior", f_prior), ("posterior", f_post)):
        print(f"{name:<12}{spread(f, x_orig, in_gap):>12.3f}{spread(f, x_orig, near_data):>14.3f}")

    os.makedirs(args.out_dir, exist_ok=True)
    x_train = data.x_train[:, 0] * data.x_std[0] + data.x_mean[0]
    y_train = data.y_train * data.y_std + data.y_mean
    for name, f in (("prior", f_prior), ("posterior", f_post)):
        lo, hi = np.quantile(f, [0.025, 0.975], axis=0)
        fig = regression_band(x_orig, f.mean(0), lo, hi, x_train=x_train, y_train=y_train,
                              draws=f[: args.num_plotted], label=f"{name} mean")
        fig.axes[0].set_title(f"{name} functions, prior {args.prior}")
        path = os.path.join(args.out_dir, f"{name}_functions.png")
        save_figure(fig, path)
        print(f"wrote {path}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--prior", default="normal:1.0", help="prior as 'family:args[,fan_in]'")
    p.add_argument("--width", type=int, default=50)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--noise", type=float, default=0.3, help="likelihood noise (standardised y)")
    p.add_argument("--num-train", type=int, default=100)
    p.add_argument("--num-prior-draws", type=int, default=200)
    p.add_argument("--num-plotted", type=int, default=20)
    p.add_argument("--num-warmup", type=int, default=300)
    p.add_argument("--num-samples", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out-dir", default="runs/prior_functions")
    return p.parse_args(argv)


if __name__ == "__main__":
    main(parse_args())

"""Priors over functions: what a weight prior says about f(x), before and after the data.

Wilson (2020): the prior that matters is the prior over functions. This example draws functions
from a BNN's prior (:func:`bnn_ppl.prior_predictive`) on the seeded 1-D regression set with a
gap in the inputs (``bp.data.load("gap1d")``), runs full-batch HMC
(:func:`bnn_ppl.inference.fit`), and plots prior draws and the posterior predictive band side by
side. It prints the spread of the functions in the gap and near the data
(:func:`bnn_ppl.data.synthetic.gap1d_spread`): a posterior that knows what it does not know is
wide in the gap and narrow where the data are. The HMC run is the run folder ``--out/hmc``,
which ``bnn-ppl evaluate`` reads; the figures are ``--out/{prior,posterior}_functions.png``.

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
from bnn_ppl.config import HMCConfig
from bnn_ppl.data.synthetic import gap1d_spread
from bnn_ppl.inference import fit_run
from bnn_ppl.plots import regression_band, save_figure


def main(args: argparse.Namespace) -> None:
    data = bp.data.load("gap1d", seed=args.seed, num_train=args.num_train)
    model = bp.BNN(
        bp.models.MLP(hidden=(args.width,) * args.depth, out=1, activation=jax.numpy.tanh),
        prior=bp.priors.from_string(args.prior),
        likelihood=bp.likelihoods.Gaussian(scale=args.noise),
    )
    prior = bp.prior_predictive(model, data.x_test, args.num_prior_draws,
                                rng_key=jax.random.key(args.seed))  # fmt: skip
    post, _ = fit_run(os.path.join(args.out, "hmc"), model, data,
                      HMCConfig(num_warmup=args.num_warmup, num_samples=args.num_samples),
                      jax.random.key(args.seed + 1),
                      options={k: vars(args)[k] for k in ("prior", "width", "depth", "noise")})

    x = data.x_test[:, 0] * data.x_std[0] + data.x_mean[0]
    functions = {
        "prior": np.asarray(prior.mean) * data.y_std + data.y_mean,
        "posterior": post.predictions["mean"].reshape(-1, len(x)) * data.y_std + data.y_mean,
    }
    print(f"prior {args.prior} on MLP {args.depth}x{args.width} (tanh), "
          f"{model.num_params(data.x_train)} parameters; {len(data.x_train)} training points")
    print(f"{'functions':<12}{'sd in gap':>12}{'sd near data':>14}")
    for name, f in functions.items():
        gap, near = gap1d_spread(f, x)
        print(f"{name:<12}{gap:>12.3f}{near:>14.3f}")

    x_train = data.x_train[:, 0] * data.x_std[0] + data.x_mean[0]
    y_train = data.y_train * data.y_std + data.y_mean
    for name, f in functions.items():
        lo, hi = np.quantile(f, [0.025, 0.975], axis=0)
        fig = regression_band(x, f.mean(0), lo, hi, x_train=x_train, y_train=y_train,
                              draws=f[: args.num_plotted], label=f"{name} mean")
        fig.axes[0].set_title(f"{name} functions, prior {args.prior}")
        path = os.path.join(args.out, f"{name}_functions.png")
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
    p.add_argument("--out", default="runs/prior_functions")
    return p.parse_args(argv)


if __name__ == "__main__":
    main(parse_args())

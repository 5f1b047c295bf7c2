"""1-D regression with a gap: does epistemic uncertainty grow away from the data?

Wilson (2020) argues that a Bayesian model average knows what it does not know: between two
clusters of data, where many functions fit equally well, the posterior predictive should widen.
This example fits one tanh MLP (same prior and likelihood) on the seeded 1-D set with a gap in
the inputs (``bp.data.load("gap1d")``: training inputs in [-1, -0.3] and [0.3, 1], test grid
over [-1.5, 1.5]) with three methods:

* ``HMC``: full-batch HMC (:func:`bnn_ppl.inference.hmc`), the reference;
* ``SVI``: mean-field VI (:func:`bnn_ppl.inference.svi_mean_field`) started at a MAP solution;
* ``ensemble``: a deep ensemble (:func:`bnn_ppl.inference.deep_ensemble`).

It also draws functions from the prior (:func:`bnn_ppl.prior_predictive`). The table gives, per
method, the epistemic spread (the across-sample standard deviation of f(x), original units)
averaged over the gap (|x| < 0.25) and near the data (0.4 < |x| < 0.9), their ratio, and the
test RMSE of the BMA mean against the noise-free function on the grid. The claim is supported
for a method when its spread in the gap exceeds its spread near the data. The figure
(``--out-dir``/``regression_1d.png``) has one panel per predictive: the 95% band of f and a few
function draws.

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
from bnn_ppl.plots import regression_band, save_figure

METHODS = ("prior", "HMC", "SVI", "ensemble")


def get_data(args: argparse.Namespace) -> bp.data.Dataset:
    """The 1-D gap set, standardised with training statistics."""
    return bp.data.load("gap1d", seed=args.seed, num_train=args.num_train)


def build_model(args: argparse.Namespace) -> bp.BNN:
    """A tanh MLP with a Normal prior and a Gaussian likelihood with known noise."""
    return bp.BNN(
        bp.models.MLP(hidden=(args.width,) * args.depth, out=1, activation=jax.numpy.tanh),
        prior=bp.priors.Normal(args.prior_scale),
        likelihood=bp.likelihoods.Gaussian(scale=args.noise),
    )


def run_hmc(model: bp.BNN, data: bp.data.Dataset, args: argparse.Namespace, key: jax.Array):
    mcmc = bp.inference.hmc(model, data.x_train, data.y_train, num_warmup=args.num_warmup,
                            num_samples=args.num_samples, rng_key=key)
    return mcmc.get_samples()


def run_svi(model: bp.BNN, data: bp.data.Dataset, args: argparse.Namespace, key: jax.Array):
    map_key, svi_key, draw_key = jax.random.split(key, 3)
    fit_map = bp.inference.map_estimate(model, data.x_train, data.y_train,
                                        num_steps=args.map_steps, rng_key=map_key)
    fit = bp.inference.svi_mean_field(model, data.x_train, data.y_train,
                                      num_steps=args.svi_steps, init_loc=fit_map.params,
                                      rng_key=svi_key)
    return fit.sample_posterior(draw_key, args.num_samples)


def run_ensemble(model: bp.BNN, data: bp.data.Dataset, args: argparse.Namespace,
                 key: jax.Array):
    ens = bp.inference.deep_ensemble(model, data.x_train, data.y_train, args.ensemble_size,
                                     num_steps=args.ensemble_steps, rng_key=key)
    return ens.params


def evaluate(functions: dict[str, np.ndarray], x: np.ndarray, f_true: np.ndarray
             ) -> dict[str, dict[str, float]]:
    """Per method: spread of f in the gap and near the data, and the RMSE of the mean."""
    in_gap = np.abs(x) < 0.25
    near_data = (np.abs(x) > 0.4) & (np.abs(x) < 0.9)
    results = {}
    for name, f in functions.items():
        sd = f.std(axis=0)
        gap, near = float(sd[in_gap].mean()), float(sd[near_data].mean())
        results[name] = {
            "sd_gap": gap,
            "sd_near": near,
            "ratio": gap / near,
            "rmse": float(np.sqrt(np.mean((f.mean(0) - f_true) ** 2))),
        }
    return results


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
    data = get_data(args)
    model = build_model(args)
    x = data.x_test[:, 0] * data.x_std[0] + data.x_mean[0]
    x_train = data.x_train[:, 0] * data.x_std[0] + data.x_mean[0]
    y_train = data.y_train * data.y_std + data.y_mean
    f_true = bp.data.synthetic.gap1d_mean(x)

    keys = jax.random.split(jax.random.key(args.seed), len(METHODS))
    runs = {"HMC": run_hmc, "SVI": run_svi, "ensemble": run_ensemble}
    functions: dict[str, np.ndarray] = {}
    wall: dict[str, float] = {}
    for name, key in zip(METHODS, keys, strict=True):
        start = time.perf_counter()
        if name == "prior":
            pred = bp.prior_predictive(model, data.x_test, args.num_samples, rng_key=key)
        else:
            pred = bp.predict(model, runs[name](model, data, args, key), data.x_test)
        functions[name] = np.asarray(pred.mean) * data.y_std + data.y_mean
        wall[name] = time.perf_counter() - start

    results = evaluate(functions, x, f_true)
    print(f"gap1d: {len(x_train)} training points, MLP {args.depth}x{args.width} (tanh), "
          f"{model.num_params(data.x_train)} parameters, prior Normal({args.prior_scale}), "
          f"noise {args.noise} (standardised y)")
    print("claim (Wilson 2020): epistemic uncertainty grows away from the data, "
          "i.e. sd in gap > sd near data")
    print(f"{'method':<10}{'sd in gap':>11}{'sd near data':>14}{'gap/near':>10}"
          f"{'RMSE vs f':>11}{'time s':>8}  supports claim")
    for name in METHODS:
        r = results[name]
        verdict = "n/a (prior)" if name == "prior" else ("yes" if r["ratio"] > 1 else "no")
        print(f"{name:<10}{r['sd_gap']:>11.3f}{r['sd_near']:>14.3f}{r['ratio']:>10.2f}"
              f"{r['rmse']:>11.3f}{wall[name]:>8.1f}  {verdict}")
    print(f"(sd: across-sample sd of f(x) in original units, averaged over |x| < 0.25 (gap) and "
          f"0.4 < |x| < 0.9 (near data); {args.num_samples} HMC/SVI/prior draws, "
          f"{args.ensemble_size} ensemble members)")

    os.makedirs(args.out_dir, exist_ok=True)
    path = os.path.join(args.out_dir, "regression_1d.png")
    save_figure(plot(functions, x, x_train, y_train, args.num_plotted), path)
    print(f"wrote {path}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--full", action="store_true",
                   help="longer runs: 1000 warmup / 1000 samples, 4x the SVI/ensemble steps, "
                        "10 ensemble members")
    p.add_argument("--width", type=int, default=50)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--prior-scale", type=float, default=1.0)
    p.add_argument("--noise", type=float, default=0.15, help="likelihood noise (standardised y)")
    p.add_argument("--num-train", type=int, default=100)
    p.add_argument("--num-warmup", type=int, default=300)
    p.add_argument("--num-samples", type=int, default=300,
                   help="HMC samples, SVI draws and prior draws")
    p.add_argument("--map-steps", type=int, default=2000)
    p.add_argument("--svi-steps", type=int, default=5000)
    p.add_argument("--ensemble-size", type=int, default=5)
    p.add_argument("--ensemble-steps", type=int, default=2000)
    p.add_argument("--num-plotted", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out-dir", default="runs/regression_1d")
    args = p.parse_args(argv)
    if args.full:
        args.num_warmup, args.num_samples = 1000, 1000
        args.map_steps, args.svi_steps = 4 * args.map_steps, 4 * args.svi_steps
        args.ensemble_size, args.ensemble_steps = 10, 4 * args.ensemble_steps
    return args


if __name__ == "__main__":
    main(parse_args())

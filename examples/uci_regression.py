"""UCI regression benchmark: HMC (BMA), mean-field SVI and a deep ensemble on the standard splits.

The standard protocol (Hernandez-Lobato & Adams 2015; Gal & Ghahramani 2016): an MLP with one
hidden layer of 50 ReLU units, inputs and targets standardised with the training split's
statistics, and the test RMSE and test log-likelihood reported in the original target units,
mean ± standard error over the splits. Every method fits the same BNN: a Normal prior on every
weight and a Gaussian likelihood whose noise has a HalfNormal prior, so HMC infers the noise
along with the weights (site ``noise_scale``), SVI fits a factor for it, and every ensemble
member has its own MAP noise.

* ``HMC``: full-batch NUTS (:func:`bnn_ppl.inference.nuts`, tree depth at most
  ``--max-tree-depth`` so that a sample costs at most 2^depth - 1 gradients; the noise of
  energy and yacht is so small that a fixed trajectory length needs thousands of leapfrog
  steps) or, with ``--sampler hmc``, fixed-trajectory HMC (:func:`bnn_ppl.inference.hmc`);
  the BMA of its samples;
* ``SVI``: mean-field VI (:func:`bnn_ppl.inference.svi_mean_field`) started at a MAP solution;
* ``ensemble``: a deep ensemble of MAP solutions (:func:`bnn_ppl.inference.deep_ensemble`).

The test log-likelihood is that of the BMA (the exact Gaussian mixture over samples,
:func:`bnn_ppl.metrics.mixture_nll`). The table puts the published MC-dropout log-likelihoods
beside ours (Gal's DropoutUncertaintyExps README, "grid search (new)", 20 splits, 40 epochs x
grid-searched dropout rate and tau). At the defaults only ``--splits 2`` splits and short
chains are run, so the standard errors are rough; ``--full`` runs all 20 splits and longer
chains. It saves ``uci_regression.png`` (test LL per data set and method, with the MC-dropout
reference) and ``metrics.json`` into ``--out-dir``.

    python examples/uci_regression.py                    # about 11 minutes on 2 busy CPU cores
    python examples/uci_regression.py --full             # all 20 splits, longer runs (hours)
    python examples/uci_regression.py --datasets yacht --splits 1 --data-dir ../shared/data/uci

UCI files are read from ``--data-dir`` or ``$BNN_PPL_DATA``.
"""

from __future__ import annotations

import argparse
import os
import time

import jax
import numpy as np
import numpyro.distributions as dist
from matplotlib.figure import Figure

import bnn_ppl as bp
from bnn_ppl.io import write_json
from bnn_ppl.plots import save_figure

METHODS = ("HMC", "SVI", "ensemble")

# Gal's DropoutUncertaintyExps README, "grid search (new)": MC-dropout test log-likelihood
MC_DROPOUT_LL = {"energy": -1.21, "yacht": -1.25, "concrete": -2.93, "boston": -2.40,
                 "wine-red": -0.93}


def get_data(name: str, split: int, args: argparse.Namespace) -> bp.data.Dataset:
    """Split ``split`` of ``uci/<name>``, standardised with its training statistics."""
    return bp.data.load(f"uci/{name}", split=split, data_dir=args.data_dir)


def build_model(args: argparse.Namespace) -> bp.BNN:
    """MLP(50) with a Normal prior and a Gaussian likelihood with a HalfNormal noise prior."""
    return bp.BNN(
        bp.models.MLP(hidden=(args.width,), out=1),
        prior=bp.priors.Normal(args.prior_scale),
        likelihood=bp.likelihoods.Gaussian(scale=dist.HalfNormal(args.noise_prior)),
    )


def run_hmc(model: bp.BNN, data: bp.data.Dataset, args: argparse.Namespace, key: jax.Array):
    """Full-batch NUTS (bounded tree depth) or fixed-trajectory HMC; the posterior samples."""
    common = dict(num_warmup=args.num_warmup, num_samples=args.num_samples, rng_key=key)
    if args.sampler == "nuts":
        mcmc = bp.inference.nuts(model, data.x_train, data.y_train,
                                 max_tree_depth=args.max_tree_depth, **common)
    else:
        mcmc = bp.inference.hmc(model, data.x_train, data.y_train,
                                trajectory_length=args.trajectory_length, **common)
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
    return bp.inference.deep_ensemble(model, data.x_train, data.y_train, args.ensemble_size,
                                      num_steps=args.ensemble_steps, rng_key=key).params


RUNS = {"HMC": run_hmc, "SVI": run_svi, "ensemble": run_ensemble}


def evaluate(pred, data: bp.data.Dataset) -> dict[str, float]:
    """Test RMSE of the BMA mean and test log-likelihood of the BMA, original units."""
    avg = bp.bma(pred)
    return {
        "rmse": float(bp.metrics.rmse(avg.mean, data.y_test, y_scale=data.y_std)),
        "ll": -float(bp.metrics.mixture_nll(pred.mean, pred.scale, data.y_test,
                                            y_scale=data.y_std)),
    }


def mean_se(values: list[float]) -> tuple[float, float]:
    """Mean and standard error (nan with a single value)."""
    v = np.asarray(values, dtype=float)
    se = float(v.std(ddof=1) / np.sqrt(v.size)) if v.size > 1 else float("nan")
    return float(v.mean()), se


def _fmt(values: list[float]) -> str:
    m, se = mean_se(values)
    return f"{m:.2f} ± {se:.2f}" if np.isfinite(se) else f"{m:.2f}"


def format_table(results: dict[str, dict[str, dict[str, list[float]]]]) -> str:
    """One row per data set: RMSE and LL per method (mean ± SE), MC-dropout LL."""
    w = 15
    head = f"{'dataset':<10}" + "".join(f"{'RMSE ' + m:>{w}}" for m in METHODS) + "".join(
        f"{'LL ' + m:>{w}}" for m in METHODS) + f"{'LL MC-dropout':>{w}}"
    lines = [head]
    for name, per_method in results.items():
        ref = MC_DROPOUT_LL.get(name)
        lines.append(
            f"{name:<10}"
            + "".join(f"{_fmt(per_method[m]['rmse']):>{w}}" for m in METHODS)
            + "".join(f"{_fmt(per_method[m]['ll']):>{w}}" for m in METHODS)
            + f"{(f'{ref:.2f}' if ref is not None else '-'):>{w}}"
        )
    return "\n".join(lines)


def plot(results: dict[str, dict[str, dict[str, list[float]]]]) -> Figure:
    """Test LL (mean ± SE over splits) per data set and method, MC-dropout as a black bar."""
    names = list(results)
    fig = Figure(figsize=(1.6 * len(names) + 3, 3.6), layout="constrained")
    ax = fig.add_subplot()
    width = 0.8 / (len(METHODS) + 1)
    pos = np.arange(len(names))
    for i, m in enumerate(METHODS):
        stats = [mean_se(results[n][m]["ll"]) for n in names]
        ax.bar(pos + i * width, [s[0] for s in stats], width,
               yerr=[0 if not np.isfinite(s[1]) else s[1] for s in stats], label=m)
    ax.bar(pos + len(METHODS) * width, [MC_DROPOUT_LL.get(n, np.nan) for n in names], width,
           color="k", label="MC dropout (Gal)")
    ax.set_xticks(pos + 0.4 - width / 2, names)
    ax.set_ylabel("test log-likelihood (original units)")
    ax.axhline(0, color="grey", lw=0.5)
    ax.legend(fontsize=8)
    return fig


def main(args: argparse.Namespace) -> None:
    model = build_model(args)
    print(f"UCI standard splits, MLP({args.width}) ReLU, prior Normal({args.prior_scale}), noise "
          f"HalfNormal({args.noise_prior}); splits 0..{args.splits - 1}; HMC "
          f"{args.num_warmup}+{args.num_samples}, SVI {args.map_steps} MAP + {args.svi_steps} "
          f"steps, ensemble {args.ensemble_size} x {args.ensemble_steps} steps; the HMC row is "
          + (f"NUTS (max tree depth {args.max_tree_depth})" if args.sampler == "nuts" else
             f"HMC (trajectory length {args.trajectory_length or 'default'})"))
    results: dict[str, dict[str, dict[str, list[float]]]] = {}
    start = time.perf_counter()
    for name in args.datasets:
        results[name] = {m: {"rmse": [], "ll": []} for m in METHODS}
        for split in range(args.splits):
            data = get_data(name, split, args)
            keys = jax.random.split(jax.random.key(args.seed + split), len(METHODS))
            for m, key in zip(METHODS, keys, strict=True):
                pred = bp.predict(model, RUNS[m](model, data, args, key), data.x_test)
                for k, v in evaluate(pred, data).items():
                    results[name][m][k].append(v)
        print(f"  {name}: {len(data.x_train)} train / {len(data.x_test)} test rows, "
              f"{time.perf_counter() - start:.0f} s so far", flush=True)
    wall = time.perf_counter() - start

    print()
    print("claim: a BNN's BMA (HMC) on the standard protocol is competitive with or better "
          "than MC dropout in test log-likelihood (higher is better)")
    print(f"test RMSE and LL in original units, mean ± SE over {args.splits} split(s); "
          f"total wall time {wall:.0f} s")
    print(format_table(results))
    for name, per_method in results.items():
        if name in MC_DROPOUT_LL:
            hmc = mean_se(per_method["HMC"]["ll"])[0]
            verdict = "beats" if hmc > MC_DROPOUT_LL[name] else "does not beat"
            print(f"  {name}: HMC LL {hmc:.2f} {verdict} MC dropout {MC_DROPOUT_LL[name]:.2f}")

    os.makedirs(args.out_dir, exist_ok=True)
    png = os.path.join(args.out_dir, "uci_regression.png")
    save_figure(plot(results), png)
    print(f"wrote {png}")
    path = os.path.join(args.out_dir, "metrics.json")
    write_json(path, {"args": vars(args), "results": results, "mc_dropout_ll": MC_DROPOUT_LL,
                      "wall_time_s": wall})
    print(f"wrote {path}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--datasets", nargs="+", default=list(MC_DROPOUT_LL),
                   choices=("boston", "concrete", "energy", "kin8nm", "naval", "power",
                            "protein", "wine-red", "yacht"))
    p.add_argument("--splits", type=int, default=2, help="splits 0..k-1 (--full: all 20)")
    p.add_argument("--full", action="store_true",
                   help="all 20 splits, HMC 1000+1000, 4x the SVI/ensemble steps")
    p.add_argument("--data-dir", default=os.environ.get("BNN_PPL_DATA"),
                   help="folder of the UCI split files (default: $BNN_PPL_DATA)")
    p.add_argument("--width", type=int, default=50)
    p.add_argument("--prior-scale", type=float, default=1.0)
    p.add_argument("--noise-prior", type=float, default=1.0,
                   help="scale of the HalfNormal prior on the noise sd (standardised y)")
    p.add_argument("--num-warmup", type=int, default=200)
    p.add_argument("--num-samples", type=int, default=200,
                   help="HMC samples and SVI draws")
    p.add_argument("--sampler", choices=("nuts", "hmc"), default="nuts",
                   help="the HMC row: NUTS with a bounded tree depth (cost per sample at most "
                        "2^depth - 1 gradients), or HMC with a fixed trajectory length")
    p.add_argument("--max-tree-depth", type=int, default=6, help="NUTS (--full: 10)")
    p.add_argument("--trajectory-length", type=float, default=None,
                   help="HMC (default: the library's (pi/2) x prior scale)")
    p.add_argument("--map-steps", type=int, default=3000)
    p.add_argument("--svi-steps", type=int, default=3000)
    p.add_argument("--ensemble-size", type=int, default=5)
    p.add_argument("--ensemble-steps", type=int, default=3000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out-dir", default="runs/uci_regression")
    args = p.parse_args(argv)
    if args.full:
        args.splits, args.num_warmup, args.num_samples = 20, 1000, 1000
        args.max_tree_depth = 10
        args.map_steps, args.svi_steps = 4 * args.map_steps, 4 * args.svi_steps
        args.ensemble_steps = 4 * args.ensemble_steps
    if not 1 <= args.splits <= 20:
        p.error("--splits must be between 1 and 20")
    return args


if __name__ == "__main__":
    main(parse_args())

"""Compare posterior approximations of a Bayesian MLP against full-batch HMC.

Three methods fit the same one-hidden-layer BNN (same prior, likelihood and temperature) on the
same data:

* ``HMC``: full-batch HMC (:func:`bnn_ppl.inference.hmc`; Izmailov et al.'s fixed trajectory
  length with an adapted step size), the reference;
* ``SVI``: mean-field variational inference (:func:`bnn_ppl.inference.svi_mean_field`),
  initialised at a MAP solution (:func:`bnn_ppl.inference.map_estimate`) as Izmailov et al. do,
  predicting with ``--svi-samples`` draws from the fitted guide;
* ``ensemble``: a deep ensemble of ``--ensemble-size`` MAP solutions
  (:func:`bnn_ppl.inference.deep_ensemble`), each member treated as one posterior sample.

Every method runs through :func:`bnn_ppl.fit` with its config dataclass (``HMCConfig``,
``SVIConfig`` with ``map_steps``, ``EnsembleConfig``), the one path from model to posterior.

Each method's per-sample test predictions (:func:`bnn_ppl.predict`) are averaged into the
Bayesian model average (BMA, :func:`bnn_ppl.bma`); for HMC a single posterior sample (the last
one drawn) is reported too, so the table shows what averaging over the posterior buys. Methods
are kept in a dict ``name -> per-sample predictions``, so another approximation only adds an
entry.

Classification (``--dataset digits``, the default) prints accuracy, NLL, ECE and Brier score,
and the agreement (fraction of equal top-1 predictions) and total variation distance of each
predictive distribution to HMC's BMA; it saves a reliability diagram (accuracy against
confidence per bin, :func:`bnn_ppl.plots.reliability_diagram`). Regression (``--dataset
diabetes``) prints RMSE and the test NLL of the BMA (the exact Gaussian mixture,
:func:`bnn_ppl.metrics.mixture_nll`), both in the target's original units, and the RMSE between
each method's BMA mean and HMC's BMA mean (also original units) in place of agreement and TV.
Everything lands in ``--out-dir`` (default ``runs/compare_<dataset>/``): ``metrics.json`` and,
for classification, ``reliability.png``.

Run it with the defaults (a few minutes on 2 CPU cores)::

    python examples/compare_hmc_svi.py
    python examples/compare_hmc_svi.py --dataset diabetes

or a quick smoke run::

    python examples/compare_hmc_svi.py --num-warmup 20 --num-samples 10 --width 8 \\
        --max-train 200 --map-steps 50 --svi-steps 50 --ensemble-steps 50 --ensemble-size 2 \\
        --svi-samples 10 --out-dir /tmp/compare
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import jax
import numpy as np
import numpyro.distributions as dist

import bnn_ppl as bp
from bnn_ppl.config import Config, EnsembleConfig, HMCConfig, SVIConfig
from bnn_ppl.inference import fit
from bnn_ppl.io import write_json
from bnn_ppl.plots import reliability_diagram, save_figure

REFERENCE = "HMC"

# (method, row key, row label): every row is the BMA of some of a method's per-sample predictions
ROWS = (
    ("HMC", "single_sample", "single sample"),
    ("HMC", "bma", "BMA"),
    ("SVI", "bma", "BMA"),
    ("ensemble", "bma", "BMA"),
)

# metric key -> column header
CLASSIFICATION_COLUMNS = {
    "accuracy": "accuracy",
    "nll": "NLL",
    "ece": "ECE",
    "brier": "Brier",
    "agreement": "agree w/ HMC",
    "tv": "TV w/ HMC",
}
REGRESSION_COLUMNS = {
    "rmse": "RMSE",
    "nll": "NLL",
    "rmse_vs_hmc": "RMSE vs HMC mean",
}


def get_data(args: argparse.Namespace) -> bp.data.Dataset:
    """The data set, standardised (a fixed split); the first ``args.max_train`` training rows."""
    data = bp.data.load(args.dataset)
    if args.max_train is not None:
        data = data._replace(
            x_train=data.x_train[: args.max_train], y_train=data.y_train[: args.max_train]
        )
    return data


def build_model(args: argparse.Namespace, data: bp.data.Dataset) -> bp.BNN:
    """MLP with one hidden layer and an isotropic Normal prior.

    Classification: a categorical likelihood. Regression: a Gaussian likelihood on the
    standardised targets with fixed noise ``args.noise``, or, with ``--noise-prior s``, a
    HalfNormal(s) prior on the noise that every method infers along with the weights.
    """
    if data.task == "classification":
        likelihood, out = bp.likelihoods.Categorical(), data.num_classes
    else:
        noise = args.noise if args.noise_prior is None else dist.HalfNormal(args.noise_prior)
        likelihood, out = bp.likelihoods.Gaussian(scale=noise), 1
    return bp.BNN(
        bp.models.MLP(hidden=(args.width,), out=out),
        prior=bp.priors.Normal(args.prior_scale),
        likelihood=likelihood,
        temperature=args.temperature,
    )


def _fitted(model: bp.BNN, config: Config, rng_key: jax.Array, x: np.ndarray, y: np.ndarray):
    """``bp.fit`` and its wall time; the draws with one leading axis."""
    start = time.perf_counter()
    post = fit(model, (x, y), config, rng_key)
    return post, post.flat_samples(), time.perf_counter() - start


def run_hmc(
    model: bp.BNN, args: argparse.Namespace, rng_key: jax.Array, x: np.ndarray, y: np.ndarray
) -> tuple[dict[str, Any], dict[str, float]]:
    """Full-batch HMC; returns the posterior samples and HMC's diagnostics."""
    config = HMCConfig(num_warmup=args.num_warmup, num_samples=args.num_samples,
                       num_chains=args.num_chains, chunk_size=args.chunk_size)  # fmt: skip
    post, samples, wall = _fitted(model, config, rng_key, x, y)
    stats = post.sample_stats
    return samples, {
        "accept_prob": float(np.mean(stats["acceptance_rate"])),
        "num_divergences": int(np.sum(stats["diverging"])),
        "num_steps": float(np.mean(stats["n_steps"])),
        "wall_time_s": wall,
    }


def run_svi(
    model: bp.BNN, args: argparse.Namespace, rng_key: jax.Array, x: np.ndarray, y: np.ndarray
) -> tuple[dict[str, Any], dict[str, float]]:
    """MAP, then mean-field SVI started at it (fit's recipe); ``--svi-samples`` guide draws."""
    config = SVIConfig(map_steps=args.map_steps, num_steps=args.svi_steps,
                       num_samples=args.svi_samples, chunk_size=args.chunk_size)  # fmt: skip
    post, samples, wall = _fitted(model, config, rng_key, x, y)
    losses = post.trace["loss"]
    return samples, {
        "map_final_loss": post.config["map_final_loss"],
        "final_neg_elbo": float(np.mean(losses[-max(1, args.svi_steps // 10) :])),
        "wall_time_s": wall,
    }


def run_ensemble(
    model: bp.BNN, args: argparse.Namespace, rng_key: jax.Array, x: np.ndarray, y: np.ndarray
) -> tuple[dict[str, Any], dict[str, float]]:
    """A deep ensemble of MAP solutions; its members play the role of posterior samples."""
    config = EnsembleConfig(num_members=args.ensemble_size, num_steps=args.ensemble_steps,
                            chunk_size=args.chunk_size)  # fmt: skip
    post, params, wall = _fitted(model, config, rng_key, x, y)
    final = post.trace["final_loss"]
    return params, {
        "mean_final_loss": float(final.mean()),
        "max_final_loss": float(final.max()),
        "wall_time_s": wall,
    }


def _subsets(predictions: dict[str, Any]) -> dict[tuple[str, str], Any]:
    """(method, row) -> the per-sample predictions that row averages."""
    take = {"bma": lambda a: a, "single_sample": lambda a: a[-1:]}
    return {
        (method, row): jax.tree.map(take[row], predictions[method])
        for method, row, _ in ROWS
        if method in predictions
    }


def evaluate(predictions: dict[str, Any], data: bp.data.Dataset) -> dict[str, dict[str, dict]]:
    """Metrics of every row of :data:`ROWS`: ``results[method][row][metric]``.

    ``predictions`` maps a method to its per-sample test predictions (probabilities
    ``(S, n, K)``, or a GaussianPrediction with ``(S, n)`` fields). Agreement, TV and the RMSE
    vs HMC compare with the BMA of :data:`REFERENCE`.
    """
    subsets = _subsets(predictions)
    ref = bp.bma(predictions[REFERENCE])
    y = data.y_test
    results: dict[str, dict[str, dict]] = {}
    for (method, row), per_sample in subsets.items():
        avg = bp.bma(per_sample)
        if data.task == "classification":
            m = {
                "accuracy": bp.metrics.accuracy(avg, y),
                "nll": bp.metrics.nll(avg, y),
                "ece": bp.metrics.ece(avg, y),
                "brier": bp.metrics.brier(avg, y),
                "agreement": bp.metrics.agreement(avg, ref),
                "tv": bp.metrics.total_variation(avg, ref),
            }
        else:
            m = {
                "rmse": bp.metrics.rmse(avg.mean, y, y_scale=data.y_std),
                "nll": bp.metrics.mixture_nll(
                    per_sample.mean, per_sample.scale, y, y_scale=data.y_std
                ),
                "rmse_vs_hmc": bp.metrics.rmse(avg.mean, ref.mean, y_scale=data.y_std),
            }
        results.setdefault(method, {})[row] = {k: float(v) for k, v in m.items()}
    return results


def reliability_curves(
    predictions: dict[str, Any], labels: np.ndarray
) -> dict[str, bp.metrics.ReliabilityCurve]:
    """Row label -> reliability curve of that row's BMA (the bins ECE uses)."""
    labels_by_row = {(method, row): label for method, row, label in ROWS}
    return {
        f"{method} {labels_by_row[method, row]}": bp.metrics.reliability_curve(
            bp.bma(per_sample), labels
        )
        for (method, row), per_sample in _subsets(predictions).items()
    }


def format_table(results: dict[str, dict[str, dict]], columns: dict[str, str]) -> str:
    """One line per row of :data:`ROWS`, one column per metric."""
    widths = [max(10, len(h) + 2) for h in columns.values()]
    header = f"{'method':<10}{'predictive':<15}" + "".join(
        f"{h:>{w}}" for h, w in zip(columns.values(), widths, strict=True)
    )
    lines = [header]
    for method, row, label in ROWS:
        if row not in results.get(method, {}):
            continue
        r = results[method][row]
        lines.append(
            f"{method:<10}{label:<15}"
            + "".join(f"{r[k]:>{w}.4f}" for k, w in zip(columns, widths, strict=True))
        )
    return "\n".join(lines)


def main(args: argparse.Namespace) -> None:
    data = get_data(args)
    model = build_model(args, data)
    out_dir = args.out_dir or os.path.join("runs", f"compare_{args.dataset}")
    print(
        f"{args.dataset} ({data.task}): {len(data.x_train)} train / {len(data.x_test)} test "
        f"rows; MLP(hidden=({args.width},)) with {model.num_params(data.x_train)} parameters"
    )

    # method name -> per-sample test predictions (probabilities or Gaussian mean/scale)
    predictions: dict[str, Any] = {}
    diagnostics: dict[str, dict[str, float]] = {}
    runs = {"HMC": run_hmc, "SVI": run_svi, "ensemble": run_ensemble}
    keys = jax.random.split(jax.random.key(args.seed), len(runs))
    for (name, run), key in zip(runs.items(), keys, strict=True):
        draws, diagnostics[name] = run(model, args, key, data.x_train, data.y_train)
        predictions[name] = bp.predict(model, draws, data.x_test, chunk_size=args.chunk_size)
        print(f"  {name}: {diagnostics[name]['wall_time_s']:.1f} s", flush=True)

    results = evaluate(predictions, data)
    columns = CLASSIFICATION_COLUMNS if data.task == "classification" else REGRESSION_COLUMNS
    print()
    if data.task == "regression":
        print(
            f"test metrics in original units (y std {data.y_std:.2f}); "
            "NLL: the BMA's Gaussian mixture; RMSE vs HMC mean: RMSE between the method's "
            "and HMC's BMA means"
        )
    print(format_table(results, columns))

    h, s, e = diagnostics["HMC"], diagnostics["SVI"], diagnostics["ensemble"]
    total = args.num_samples * args.num_chains
    print()
    print(
        f"HMC: mean accept prob {h['accept_prob']:.3f}, "
        f"{h['num_divergences']} divergences in {total} samples, "
        f"mean leapfrog steps {h['num_steps']:.1f}, wall time {h['wall_time_s']:.1f} s"
    )
    print(
        f"SVI: MAP ({args.map_steps} steps) then {args.svi_steps} steps, final -ELBO "
        f"{s['final_neg_elbo']:.1f}, {args.svi_samples} draws, wall time {s['wall_time_s']:.1f} s"
    )
    print(
        f"ensemble: {args.ensemble_size} members x {args.ensemble_steps} steps, final "
        f"potential mean {e['mean_final_loss']:.1f} (max {e['max_final_loss']:.1f}), "
        f"wall time {e['wall_time_s']:.1f} s"
    )

    print()
    if data.task == "classification":
        fig = reliability_diagram(
            reliability_curves(predictions, data.y_test), title=f"{args.dataset}: test set"
        )
        png = os.path.join(out_dir, "reliability.png")
        save_figure(fig, png)
        print(f"wrote {png}")
    path = os.path.join(out_dir, "metrics.json")
    write_json(
        path,
        {
            "args": vars(args),
            "dataset": {"name": args.dataset, "task": data.task, "y_std": data.y_std},
            "results": results,
            "diagnostics": diagnostics,
        },
    )
    print(f"wrote {path}")


def _positive_int(s: str) -> int:
    v = int(s)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {s}")
    return v


def _nonnegative_int(s: str) -> int:
    v = int(s)
    if v < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {s}")
    return v


def _positive_float(s: str) -> float:
    v = float(s)
    if not v > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {s}")
    return v


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="HMC vs mean-field SVI vs a deep ensemble on one BNN.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--dataset", choices=("digits", "diabetes"), default="digits")
    parser.add_argument("--width", type=_positive_int, default=50, help="hidden units")
    parser.add_argument(
        "--prior-scale",
        type=_positive_float,
        default=0.3,
        help="standard deviation of the Normal prior on every weight",
    )
    parser.add_argument(
        "--temperature",
        type=_positive_float,
        default=1.0,
        help="posterior temperature (< 1: cold posterior)",
    )
    parser.add_argument(
        "--noise",
        type=_positive_float,
        default=0.5,
        help="regression: fixed noise sd of the standardised targets",
    )
    parser.add_argument(
        "--noise-prior",
        type=_positive_float,
        default=None,
        help="regression: infer the noise sd under a HalfNormal prior of this scale "
        "(replaces --noise)",
    )
    parser.add_argument("--num-warmup", type=_nonnegative_int, default=200)
    parser.add_argument("--num-samples", type=_positive_int, default=200)
    parser.add_argument("--num-chains", type=_positive_int, default=1)
    parser.add_argument(
        "--map-steps", type=_positive_int, default=1000, help="MAP steps that initialise SVI"
    )
    parser.add_argument("--svi-steps", type=_positive_int, default=3000)
    parser.add_argument(
        "--svi-samples",
        type=_positive_int,
        default=200,
        help="draws from the SVI guide for the BMA",
    )
    parser.add_argument("--ensemble-size", type=_positive_int, default=5)
    parser.add_argument(
        "--ensemble-steps",
        type=_positive_int,
        default=1000,
        help="training steps of every ensemble member",
    )
    parser.add_argument(
        "--chunk-size",
        type=_positive_int,
        default=None,
        help="rows per network call (default: the library's)",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of every method (the split is fixed)"
    )
    parser.add_argument(
        "--max-train",
        type=_positive_int,
        default=None,
        help="use only the first k training rows (default: all)",
    )
    parser.add_argument(
        "--out-dir",
        default=None,
        help="where metrics.json and reliability.png go (default: runs/compare_<dataset>)",
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    main(parse_args())

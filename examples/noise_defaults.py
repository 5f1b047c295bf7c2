"""The regression noise sd of every ``bnn-ppl run`` method: fixed, learned or held-out.

Runs each method on one regression data set three times with ``--noise`` fixed at 0.5, learned
(``halfnormal:1``) and ``heldout`` (fixed at the training rows' 5-fold held-out MAP RMSE), all
else at the command line's defaults, into ``--out/<method>_<noise>`` (an existing run is
reused), and prints per method the test log likelihood of each (the BMA's mixture, original
units), E[(y - m)^2 / s^2] (1: the predictive's width is right) and the learned noise's test LL
minus the others', paired over the test rows with its standard error, and the learned noise
sd's draws. The command line's default (:func:`bnn_ppl.cli.default_noise`) is marked.

    python examples/noise_defaults.py --dataset diabetes --out runs/noise_defaults
"""

from __future__ import annotations

import argparse
import os

import numpy as np
from scipy.special import logsumexp
from scipy.stats import norm

import bnn_ppl as bp
from bnn_ppl import cli, runs
from bnn_ppl.metrics.splits import mean_se

NOISES = {"0.5": "fixed 0.5", "halfnormal:1": "learned", "heldout": "held-out"}


def run_all(args: argparse.Namespace) -> dict[str, dict[str, str]]:
    """Method -> noise -> run folder, running what is not there yet."""
    folders: dict[str, dict[str, str]] = {}
    for method in args.methods:
        folders[method] = {}
        for noise in NOISES:
            folder = os.path.join(args.out, f"{method}_{noise.replace(':', '')}")
            if not os.path.exists(os.path.join(folder, runs.METRICS)):
                argv = ["run", method, "--dataset", args.dataset, "--noise", noise, "--seed",
                        str(args.seed), "--out", folder, "--quiet"]  # fmt: skip
                if args.split is not None:
                    argv += ["--split", str(args.split)]
                if args.max_train is not None:
                    argv += ["--max-train", str(args.max_train)]
                if cli.main(argv) != 0:
                    raise SystemExit(f"bnn-ppl {' '.join(argv)} failed")
            folders[method][noise] = folder
    return folders


def row_scores(run: runs.Run) -> tuple[np.ndarray, np.ndarray]:
    """Per test row: the BMA's log density (the mixture over draws, original units) and
    (y - m)^2 / s^2 of its moment-matched Gaussian (:func:`bnn_ppl.bma`)."""
    pred = runs.flat_draws(run.predictions, run.chains)
    y = np.asarray(run.targets, np.float64)
    logp = norm.logpdf(y, np.asarray(pred.mean, np.float64), np.asarray(pred.scale, np.float64))
    ll = logsumexp(logp, axis=0) - np.log(len(logp)) - np.log(run.y_std)
    avg = bp.bma(pred)
    return ll, (y - np.asarray(avg.mean)) ** 2 / np.asarray(avg.scale) ** 2


def learned_sd(run: runs.Run) -> str:
    """The learned noise sd's median and 5-95 % range over the run's draws (standardised)."""
    lo, mid, hi = np.quantile(np.asarray(run.samples["noise_scale"]).ravel(), [0.05, 0.5, 0.95])
    return f"{mid:.3f} [{lo:.3f}, {hi:.3f}]"


def table(folders: dict[str, dict[str, str]]) -> list[str]:
    head = ("| method (default) | test LL: fixed 0.5 / learned / held-out | E[z²]: fixed 0.5 / "
            "learned / held-out | learned σ | learned − fixed 0.5 | learned − held-out |")
    lines = [head, "|" + "---|" * 6]
    for method, by_noise in folders.items():
        loaded = {n: runs.load_run(f, samples=n == "halfnormal:1") for n, f in by_noise.items()}
        scores = {n: row_scores(run) for n, run in loaded.items()}
        ll = " / ".join(f"{scores[n][0].mean():.3f}" for n in NOISES)
        z2 = " / ".join(f"{scores[n][1].mean():.2f}" for n in NOISES)
        learned = scores["halfnormal:1"][0]
        diffs = [mean_se(learned - scores[n][0]) for n in ("0.5", "heldout")]
        cells = " | ".join(f"{m:+.3f} ± {se:.3f}" for m, se in diffs)
        default = NOISES[cli.default_noise(method)]
        sd = learned_sd(loaded["halfnormal:1"])
        lines.append(f"| {method} ({default}) | {ll} | {z2} | {sd} | {cells} |")
    return lines


def main(args: argparse.Namespace) -> None:
    folders = run_all(args)
    split = "" if args.split is None else f" split {args.split}"
    print(f"{args.dataset}{split}, seed {args.seed}: test LL of the BMA (mixture, original units); "
          "differences paired over the test rows, ± their SE")  # fmt: skip
    print("\n".join(table(folders)))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--dataset", default="diabetes", help="a regression data set of bnn-ppl run")
    p.add_argument("--methods", nargs="+", default=[m for m in cli.METHODS if m != "reference_hmc"],
                   choices=cli.METHODS, help="bnn-ppl run methods")  # fmt: skip
    p.add_argument("--split", type=int, default=None, help="uci/*: which standard split")
    p.add_argument("--max-train", type=int, default=None, help="use the first k training rows")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="runs/noise_defaults", help="one run folder per cell here")
    return p.parse_args(argv)


if __name__ == "__main__":
    main(parse_args())

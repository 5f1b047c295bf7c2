"""Cold posteriors: does a temperature T < 1 help without data augmentation?

Wenzel et al. (2020) found that tempering the posterior, p(θ|D)^(1/T) with T < 1, improves a
BNN's predictions; Izmailov et al. (2021) ran full-batch HMC and found that *without data
augmentation* the cold posterior does not help: T = 1 is as good as or better than T < 1. This
example sweeps T ∈ {1, 0.3, 0.1, 0.03} with full-batch HMC (:func:`bnn_ppl.inference.fit`,
``HMCConfig``) for both tempering modes of :class:`bnn_ppl.BNN`:

* ``temper="likelihood"``: log p(θ) + log p(D|θ) / T (only the likelihood is tempered);
* ``temper="posterior"``: [log p(θ) + log p(D|θ)] / T (the whole posterior is).

on two data sets, none of them augmented: digits (MLP(50), categorical likelihood; BMA test
accuracy and NLL) and one UCI regression split (MLP(50), Gaussian likelihood with a HalfNormal
noise prior; BMA test RMSE and log-likelihood in original units). T = 1 is the same posterior in
both modes and is run once. The table states the claim and, per data set and mode, whether T = 1
has the best test NLL / LL of the sweep. Every setting is a run folder
``--out/<dataset>/T=1`` or ``--out/<dataset>/<temper>_T=<T>`` that ``bnn-ppl evaluate`` reads;
``--out`` also gets ``cold_posterior.png`` (NLL and LL against T) and ``summary.json``.

HMC's trajectory length follows Izmailov et al. ((π/2)·σ_prior·√T, the library's default) on
digits; on the UCI set it is ``--uci-trajectory-length`` · √T to keep the default run short.

    python examples/cold_posterior.py           # about 14 minutes on 2 busy CPU cores
    python examples/cold_posterior.py --full    # all digits rows, longer chains

UCI files are read from ``--data-dir`` or ``$BNN_PPL_DATA``.
"""

from __future__ import annotations

import argparse
import math
import os
import time

import jax
import numpy as np
import numpyro.distributions as dist
from matplotlib.figure import Figure

import bnn_ppl as bp
from bnn_ppl.config import HMCConfig
from bnn_ppl.inference import fit_run
from bnn_ppl.io import write_json
from bnn_ppl.plots import save_figure

TEMPERATURES = (1.0, 0.3, 0.1, 0.03)
MODES = ("likelihood", "posterior")


def build_model(args: argparse.Namespace, data: bp.data.Dataset, t: float, mode: str) -> bp.BNN:
    """MLP(width) with a Normal prior; categorical, or Gaussian with a HalfNormal noise prior."""
    if data.task == "classification":
        likelihood, out, scale = bp.likelihoods.Categorical(), data.num_classes, args.prior_scale
    else:
        likelihood = bp.likelihoods.Gaussian(scale=dist.HalfNormal(args.noise_prior))
        out, scale = 1, args.uci_prior_scale
    return bp.BNN(bp.models.MLP(hidden=(args.width,), out=out), prior=bp.priors.Normal(scale),
                  likelihood=likelihood, temperature=t,
                  temper="likelihood" if mode == "both" else mode)  # fmt: skip


def settings(temperatures: tuple[float, ...]) -> list[tuple[str, float]]:
    """(mode, T) pairs; T = 1 once (both modes are the same posterior there)."""
    return [("both", 1.0)] + [(m, t) for m in MODES for t in temperatures if t != 1.0]


def folder_name(mode: str, t: float) -> str:
    return f"T={t:g}" if mode == "both" else f"{mode}_T={t:g}"


def score(r: dict[str, float]) -> float:
    """Higher is better: minus the NLL (digits) or the test log-likelihood (UCI)."""
    return -r["nll"] if "accuracy" in r else r["ll"]


def t1_is_best(results: dict, name: str, mode: str) -> bool:
    """Whether T = 1 has the best test NLL (digits) / highest LL (UCI) of ``mode``'s sweep."""
    rows = {t: score(r) for (m, t), r in results[name].items() if m in (mode, "both")}
    return max(rows, key=rows.get) == 1.0


def plot(results: dict) -> Figure:
    fig = Figure(figsize=(5.0 * len(results), 3.6), layout="constrained")
    for ax, name in zip(np.atleast_1d(fig.subplots(1, len(results))), results, strict=True):
        for mode in MODES:
            ts = sorted(t for m, t in results[name] if m in (mode, "both"))
            ax.plot(ts, [-score(results[name][("both" if t == 1.0 else mode, t)]) for t in ts],
                    marker="o", label=f"temper={mode}")
        ax.set(xscale="log", xlabel="temperature T", title=name,
               ylabel="test NLL (lower is better)")
        ax.legend(fontsize=8)
    return fig


def main(args: argparse.Namespace) -> None:
    datasets = {"digits": bp.data.load("digits").head(args.max_train),
                args.uci: bp.data.load(f"uci/{args.uci}", split=args.split,
                                       data_dir=args.data_dir)}  # fmt: skip
    results: dict[str, dict[tuple[str, float], dict[str, float]]] = {}
    start = time.perf_counter()
    for name, data in datasets.items():
        results[name] = {}
        for i, (mode, t) in enumerate(settings(args.temperatures)):
            length = None if data.task == "classification" else args.uci_trajectory_length
            config = HMCConfig(num_warmup=args.num_warmup, num_samples=args.num_samples,
                               trajectory_length=length and length * math.sqrt(t))
            post, record = fit_run(
                os.path.join(args.out, name, folder_name(mode, t)),
                build_model(args, data, t, mode), data, config, jax.random.key(args.seed + i),
                options={"temperature": t, "temper": mode, "width": args.width,
                         "prior_scale": args.prior_scale, "uci_prior_scale": args.uci_prior_scale,
                         "noise_prior": args.noise_prior},
                split=None if name == "digits" else args.split)  # fmt: skip
            m = record["metrics"]
            results[name][(mode, t)] = {
                **({"accuracy": m["accuracy"], "nll": m["nll"]} if "accuracy" in m
                   else {"rmse": m["rmse"], "ll": -m["nll"]}),
                "accept_prob": float(np.mean(post.sample_stats["acceptance_rate"]))}  # fmt: skip
            print(f"  {name} T={t} ({mode}): {time.perf_counter() - start:.0f} s so far",
                  flush=True)
    wall = time.perf_counter() - start

    d, u = datasets["digits"], datasets[args.uci]
    print("\nclaim (Izmailov et al. 2021): without data augmentation a cold posterior (T < 1) "
          "does not help; T = 1 is as good or better")
    print(f"digits: {len(d.x_train)} train / {len(d.x_test)} test rows, prior "
          f"Normal({args.prior_scale}); {args.uci} split {args.split}: {len(u.x_train)} train / "
          f"{len(u.x_test)} test rows, prior Normal({args.uci_prior_scale}), original units; "
          f"MLP({args.width}); HMC {args.num_warmup}+{args.num_samples} per setting; "
          f"total wall time {wall:.0f} s")
    print(f"{'temper':<12}{'T':>6}{'digits acc':>12}{'digits NLL':>12}{'accept':>8}"
          f"{'RMSE ' + args.uci:>16}{'LL ' + args.uci:>14}{'accept':>8}")
    for mode, t in settings(args.temperatures):
        a, b = results["digits"][(mode, t)], results[args.uci][(mode, t)]
        print(f"{mode:<12}{t:>6g}{a['accuracy']:>12.4f}{a['nll']:>12.4f}{a['accept_prob']:>8.2f}"
              f"{b['rmse']:>16.3f}{b['ll']:>14.3f}{b['accept_prob']:>8.2f}")
    print()
    verdicts = []
    for name in datasets:
        for mode in MODES:
            verdicts.append(t1_is_best(results, name, mode))
            print(f"  {name}, temper={mode}: T = 1 has the best test "
                  f"{'NLL' if name == 'digits' else 'LL'}: {'yes' if verdicts[-1] else 'no'}")
    print(f"measurement {'supports' if all(verdicts) else 'does not fully support'} the claim "
          f"({sum(verdicts)}/{len(verdicts)} sweeps best at T = 1)")
    png, path = os.path.join(args.out, "cold_posterior.png"), os.path.join(args.out, "summary.json")
    save_figure(plot(results), png)
    write_json(path, {"args": vars(args), "wall_time_s": wall,
                      "results": {n: {folder_name(m, t): r for (m, t), r in rs.items()}
                                  for n, rs in results.items()}})  # fmt: skip
    print(f"wrote {png}, {path} and one run folder per setting under {args.out}/")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--full", action="store_true",
                   help="all digits training rows, HMC 1000+1000 per setting")
    p.add_argument("--uci", default="energy",
                   choices=("boston", "concrete", "energy", "wine-red", "yacht"))
    p.add_argument("--split", type=int, default=0, help="UCI standard split")
    p.add_argument("--data-dir", default=os.environ.get("BNN_PPL_DATA"),
                   help="folder of the UCI split files (default: $BNN_PPL_DATA)")
    p.add_argument("--max-train", type=int, default=500, help="digits training rows")
    p.add_argument("--width", type=int, default=50)
    p.add_argument("--prior-scale", type=float, default=0.3, help="digits prior sd")
    p.add_argument("--uci-prior-scale", type=float, default=1.0)
    p.add_argument("--noise-prior", type=float, default=1.0,
                   help="UCI: scale of the HalfNormal prior on the noise sd (standardised y)")
    p.add_argument("--uci-trajectory-length", type=float, default=0.3,
                   help="UCI HMC trajectory length at T = 1 (scaled by sqrt(T))")
    p.add_argument("--temperatures", type=float, nargs="+", default=list(TEMPERATURES),
                   help="the sweep; must include 1")
    p.add_argument("--num-warmup", type=int, default=100)
    p.add_argument("--num-samples", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="runs/cold_posterior")
    args = p.parse_args(argv)
    args.temperatures = tuple(sorted(set(args.temperatures), reverse=True))
    if 1.0 not in args.temperatures or min(args.temperatures) <= 0:
        p.error("--temperatures must be positive and include 1")
    if args.full:
        args.max_train, args.num_warmup, args.num_samples = None, 1000, 1000
    return args


if __name__ == "__main__":
    main(parse_args())

"""Cold posteriors: does a temperature T < 1 help without data augmentation?

Wenzel et al. (2020) found that tempering the posterior, p(θ|D)^(1/T) with T < 1, improves a
BNN's predictions; Izmailov et al. (2021), with full-batch HMC, found that *without data
augmentation* it does not: T = 1 is as good as or better than T < 1. This example sweeps
T ∈ {1, 0.3, 0.1, 0.03} with full-batch HMC (:func:`bnn_ppl.inference.fit_run`) for both
tempering modes of :class:`bnn_ppl.BNN` (``temper="likelihood"``: log p(θ) + log p(D|θ) / T;
``temper="posterior"``: [log p(θ) + log p(D|θ)] / T; T = 1 is run once) on two data sets, none
augmented: digits (:func:`bnn_ppl.models.mlp_bnn`, categorical; BMA test accuracy and NLL) and
one UCI regression split (Gaussian likelihood with a HalfNormal noise prior; BMA test RMSE and
log-likelihood in original units). The table states the claim and, per data set and mode,
whether T = 1 has the best test NLL / LL of the sweep. Every setting is a run folder
``--out/<dataset>/T=1`` or ``--out/<dataset>/<temper>_T=<T>`` that ``bnn-ppl evaluate`` reads;
``--out`` also gets ``cold_posterior.png`` (test NLL against T) and ``summary.json``. HMC's
trajectory length is Izmailov et al.'s (π/2)·σ_prior·√T (the library's default) on digits,
``--uci-trajectory-length`` · √T on the UCI set (read from ``--data-dir`` or ``$BNN_PPL_DATA``).

    python examples/cold_posterior.py           # about 14 minutes on 2 busy CPU cores
    python examples/cold_posterior.py --full    # all digits rows, longer chains
"""

from __future__ import annotations

import argparse
import math
import os
import time

import jax
import numpy as np

import bnn_ppl as bp
from bnn_ppl.config import HMCConfig
from bnn_ppl.inference import fit_run
from bnn_ppl.io import write_json
from bnn_ppl.models import mlp_bnn
from bnn_ppl.plots import metric_curves, save_figure

TEMPERATURES = (1.0, 0.3, 0.1, 0.03)
MODES = ("likelihood", "posterior")


def settings(temperatures: tuple[float, ...]) -> list[tuple[str, float]]:
    """(mode, T) pairs; T = 1 once (both modes are the same posterior there)."""
    return [("both", 1.0)] + [(m, t) for m in MODES for t in temperatures if t != 1.0]


def folder_name(mode: str, t: float) -> str:
    return f"T={t:g}" if mode == "both" else f"{mode}_T={t:g}"


def t1_is_best(results: dict, name: str, mode: str) -> bool:
    """Whether T = 1 has the best test NLL (= highest LL) of ``mode``'s sweep."""
    rows = {t: r["ll"] for (m, t), r in results[name].items() if m in (mode, "both")}
    return max(rows, key=rows.get) == 1.0


def main(args: argparse.Namespace) -> None:
    datasets = {"digits": bp.data.load("digits").head(args.max_train),
                args.uci: bp.data.load_subset(args.uci, split=args.split, data_dir=args.data_dir)}
    options = {k: getattr(args, k) for k in ("width", "prior_scale", "uci_prior_scale",
                                             "noise_prior")}  # fmt: skip
    results: dict[str, dict[tuple[str, float], dict[str, float]]] = {}
    start = time.perf_counter()
    for name, data in datasets.items():
        results[name], digits = {}, data.task == "classification"
        for i, (mode, t) in enumerate(settings(args.temperatures)):
            length = None if digits else args.uci_trajectory_length * math.sqrt(t)
            config = HMCConfig.from_options(vars(args), trajectory_length=length)
            model = mlp_bnn(data, args.width, args.prior_scale if digits else args.uci_prior_scale,
                            noise_prior=args.noise_prior, temperature=t,
                            temper="likelihood" if mode == "both" else mode)  # fmt: skip
            post, record = fit_run(os.path.join(args.out, name, folder_name(mode, t)), model, data,
                                   config, jax.random.key(args.seed + i),
                                   options={"temperature": t, "temper": mode} | options,
                                   split=None if digits else args.split)  # fmt: skip
            accept, m = float(np.mean(post.sample_stats["acceptance_rate"])), record["metrics"]
            results[name][(mode, t)] = m | {"ll": -m["nll"], "accept_prob": accept}
            print(f"  {name} T={t} ({mode}): {time.perf_counter()-start:.0f} s so far", flush=True)
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
    curves = {f"temper={m}": {t: {n: r[("both" if t == 1.0 else m, t)]["nll"] for n, r in
                                  results.items()} for t in args.temperatures} for m in MODES}
    save_figure(metric_curves(curves, xlabel="temperature T", xscale="log",
                              metrics={n: f"{n}: test NLL (lower: better)" for n in results}), png)
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
    p.add_argument("--data-dir", default=os.environ.get("BNN_PPL_DATA"),
                   help="folder of the UCI split files (default: $BNN_PPL_DATA)")
    p.add_argument("--temperatures", type=float, nargs="+", default=list(TEMPERATURES),
                   help="the sweep; must include 1")
    for flag, kind, default, text in (
        ("--split", int, 0, "UCI standard split"),
        ("--max-train", int, 500, "digits training rows"),
        ("--width", int, 50, "hidden units"),
        ("--prior-scale", float, 0.3, "digits prior sd"),
        ("--uci-prior-scale", float, 1.0, "UCI prior sd"),
        ("--noise-prior", float, 1.0, "UCI: HalfNormal scale of the noise sd (standardised y)"),
        ("--uci-trajectory-length", float, 0.3, "UCI HMC trajectory length at T = 1 (x sqrt(T))"),
        ("--num-warmup", int, 100, "HMC warmup per setting"),
        ("--num-samples", int, 100, "HMC draws per setting"),
        ("--seed", int, 0, "random seed"),
    ):  # fmt: skip
        p.add_argument(flag, type=kind, default=default, help=text)
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

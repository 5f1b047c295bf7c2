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

``--converged`` measures the claim on converged chains instead (issue 19): digits only (all
training rows, MLP(20) unless ``--width``), T ∈ {1, 0.3, 0.1}, each setting fitted by the
reference recipe (:class:`bnn_ppl.config.ReferenceHMCConfig`: 4 chains from prior draws, run in
segments until >= 99 % of the test probabilities have R-hat <= 1.01 and bulk ESS >= 400, or
``--max-seconds`` / ``--max-draws`` per setting end it; ``--burn-in`` leaves each chain's first
share out of every check). Every row reports the test accuracy,
NLL and ECE with its convergence figures (converged or not, R-hat max and the share <= 1.01, the
smallest bulk ESS, draws per chain, gradients, time), and the verdict is stated over the
settings that converged only; the others are listed as not converged.

    python examples/cold_posterior.py           # about 14 minutes on 2 busy CPU cores
    python examples/cold_posterior.py --full    # all digits rows, longer chains
    python examples/cold_posterior.py --converged --max-seconds 420   # converged chains
"""

from __future__ import annotations

import argparse
import math
import os
import time
from pathlib import Path

import jax
import numpy as np

import bnn_ppl as bp
from bnn_ppl.config import HMCConfig, ReferenceHMCConfig
from bnn_ppl.inference import fit_run
from bnn_ppl.inference.reference.stopping import describe_recipe
from bnn_ppl.inference.run_folder import CONVERGENCE_HEADER, convergence_cells
from bnn_ppl.io import read_json, write_json
from bnn_ppl.models import mlp_bnn
from bnn_ppl.plots import metric_curves, save_figure

TEMPERATURES = (1.0, 0.3, 0.1, 0.03)
CONVERGED_TEMPERATURES = (1.0, 0.3, 0.1)
MODES = ("likelihood", "posterior")
REFERENCE = Path(__file__).resolve().parent / "references" / "digits.json"
CLAIM = ("claim (Izmailov et al. 2021): without data augmentation a cold posterior (T < 1) does "
         "not help; T = 1 is as good or better")  # fmt: skip


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


def converged_verdicts(rows: dict[tuple[str, float], dict]) -> dict[str, str | bool]:
    """Per tempering mode, over the settings that *converged* only: ``True``/``False`` whether
    T = 1 has the best test NLL, or the reason there is no verdict (a string); and
    ``"overall"``: ``"supports"``, ``"does not support"`` or ``"no verdict"``.

    Example:
        >>> ok = {"converged": True}
        >>> rows = {("both", 1.0): ok | {"nll": 0.2}, ("likelihood", 0.1): ok | {"nll": 0.3},
        ...         ("posterior", 0.1): {"converged": False, "nll": 0.1}}
        >>> converged_verdicts(rows)
        {'likelihood': True, 'posterior': 'no T < 1 converged', 'overall': 'supports'}
    """
    out: dict[str, str | bool] = {}
    for mode in MODES:
        nll = {t: r["nll"] for (m, t), r in rows.items() if m in (mode, "both") and r["converged"]}
        if 1.0 not in nll:
            out[mode] = "T = 1 did not converge"
        elif len(nll) < 2:
            out[mode] = "no T < 1 converged"
        else:
            out[mode] = min(nll, key=nll.get) == 1.0
    judged = [v for v in out.values() if isinstance(v, bool)]
    out["overall"] = ("no verdict" if not judged else "supports" if all(judged)
                      else "does not support")  # fmt: skip
    return out


def main_converged(args: argparse.Namespace) -> None:
    """The sweep on digits with every setting fitted by the reference recipe (``--converged``)."""
    data = bp.data.load("digits").head(args.max_train)
    config = ReferenceHMCConfig(num_warmup=args.num_warmup, segment_draws=args.segment_draws,
                                max_draws=args.max_draws, max_seconds=args.max_seconds,
                                burn_in=args.burn_in)  # fmt: skip
    print(f"digits: {len(data.x_train)} train / {len(data.x_test)} test rows, MLP({args.width}), "
          f"prior Normal({args.prior_scale}); reference recipe per setting: "
          f"{describe_recipe(config)}",
          flush=True)  # fmt: skip
    rows: dict[tuple[str, float], dict] = {}
    start = time.perf_counter()
    for i, (mode, t) in enumerate(settings(args.temperatures)):
        model = mlp_bnn(data, args.width, args.prior_scale, temperature=t,
                        temper="likelihood" if mode == "both" else mode)  # fmt: skip
        ckpt = args.checkpoint_root and os.path.join(args.checkpoint_root, folder_name(mode, t))
        _, record = fit_run(os.path.join(args.out, "digits", folder_name(mode, t)), model, data,
                            config, jax.random.key(args.seed + i),
                            options={"temperature": t, "temper": mode, "width": args.width,
                                     "prior_scale": args.prior_scale},
                            checkpoint_dir=ckpt)  # fmt: skip
        rows[(mode, t)] = ({k: record["metrics"][k] for k in ("accuracy", "nll", "ece")}
                           | record["summary"]["convergence"]
                           | {"wall_time_s": record["wall_time_s"]})  # fmt: skip
        status = "converged" if rows[(mode, t)]["converged"] else "NOT converged"
        print(f"  T={t:g} ({mode}): {status}; {time.perf_counter() - start:.0f} s so far",
              flush=True)  # fmt: skip
    wall = time.perf_counter() - start
    print(f"\n{CLAIM}\nconverged chains (reference recipe), total wall time {wall:.0f} s")
    print(f"{'temper':<12}{'T':>5}{'accuracy':>10}{'NLL':>8}{'ECE':>8}{CONVERGENCE_HEADER}"
          f"{'wall s':>8}")
    for (mode, t), r in rows.items():
        print(f"{mode:<12}{t:>5g}{r['accuracy']:>10.4f}{r['nll']:>8.4f}{r['ece']:>8.4f}"
              f"{convergence_cells(r)}{r['wall_time_s']:>8.0f}")
    ref = read_json(REFERENCE)
    if (args.width, args.prior_scale, args.max_train) == (50, 0.3, None):
        print(f"stored reference {REFERENCE.name} (same setting as T = 1): accuracy "
              f"{ref['metrics']['accuracy']:.4f}, NLL {ref['metrics']['nll']:.4f}")
    else:
        print(f"stored reference {REFERENCE.name} is {ref['model']['network']}, "
              f"{ref['model']['prior']} on all rows: not this setting, not compared")
    verdicts = converged_verdicts(rows)
    print()
    for mode in MODES:
        v = verdicts[mode]
        text = ("no verdict: " + v) if isinstance(v, str) else "yes" if v else "no"
        print(f"  temper={mode}: T = 1 has the best test NLL of the converged settings: {text}")
    unconverged = [f"{m} T={t:g} ({r['stop_reason']})" for (m, t), r in rows.items()
                   if not r["converged"]]  # fmt: skip
    print(f"not converged, excluded from the verdict: {', '.join(unconverged) or 'none'}")
    print(f"on converged chains the measurement {verdicts['overall']} the claim"
          if verdicts["overall"] != "no verdict" else
          "no verdict on converged chains: not enough settings converged")  # fmt: skip
    path = os.path.join(args.out, "summary.json")
    write_json(path, {"args": vars(args), "wall_time_s": wall, "verdicts": verdicts,
                      "results": {folder_name(m, t): r for (m, t), r in rows.items()}})  # fmt: skip
    print(f"wrote {path} and one run folder per setting under {args.out}/digits/")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--full", action="store_true",
                   help="all digits training rows, HMC 1000+1000 per setting")
    p.add_argument("--converged", action="store_true",
                   help="digits only, every setting by the reference recipe until converged "
                   "(or its budget ends); verdict over the converged settings only")
    p.add_argument("--uci", default="energy",
                   choices=("boston", "concrete", "energy", "wine-red", "yacht"))
    p.add_argument("--data-dir", default=os.environ.get("BNN_PPL_DATA"),
                   help="folder of the UCI split files (default: $BNN_PPL_DATA)")
    p.add_argument("--temperatures", type=float, nargs="+", default=None,
                   help=f"the sweep; must include 1 (default {TEMPERATURES}, --converged "
                   f"{CONVERGED_TEMPERATURES})")
    for flag, kind, default, text in (
        ("--split", int, 0, "UCI standard split"),
        ("--max-train", int, None, "digits training rows (default 500, --converged: all)"),
        ("--width", int, None, "hidden units (default 50, --converged: 20)"),
        ("--prior-scale", float, 0.3, "digits prior sd"),
        ("--uci-prior-scale", float, 1.0, "UCI prior sd"),
        ("--noise-prior", float, 1.0, "UCI: HalfNormal scale of the noise sd (standardised y)"),
        ("--uci-trajectory-length", float, 0.3, "UCI HMC trajectory length at T = 1 (x sqrt(T))"),
        ("--num-warmup", int, None, "HMC warmup per setting (default 100, --converged: 300)"),
        ("--num-samples", int, 100, "HMC draws per setting"),
        ("--seed", int, 0, "random seed"),
        ("--segment-draws", int, 200, "--converged: draws per chain between convergence checks"),
        ("--max-draws", int, 3000, "--converged: most draws per chain per setting"),
        ("--burn-in", float, 0.0, "--converged: share of each chain's first draws left out"),
        ("--max-seconds", float, 420.0, "--converged: most wall time per setting"),
    ):  # fmt: skip
        p.add_argument(flag, type=kind, default=default, help=text)
    p.add_argument("--out", default="runs/cold_posterior")
    p.add_argument("--checkpoint-root", default=None,
                   help="--converged: commit each run's segments under this folder, so that the "
                   "same command (or one with a larger budget and another --out) resumes them")
    args = p.parse_args(argv)
    c = args.converged
    defaults = {"width": 20 if c else 50, "num_warmup": 300 if c else 100,
                "temperatures": CONVERGED_TEMPERATURES if c else TEMPERATURES}  # fmt: skip
    for k, v in defaults.items():
        setattr(args, k, v if getattr(args, k) is None else getattr(args, k))
    if args.max_train is None and not (c or args.full):
        args.max_train = 500
    args.temperatures = tuple(sorted(set(args.temperatures), reverse=True))
    if 1.0 not in args.temperatures or min(args.temperatures) <= 0:
        p.error("--temperatures must be positive and include 1")
    if args.full:
        args.max_train, args.num_warmup, args.num_samples = None, 1000, 1000
    return args


if __name__ == "__main__":
    _args = parse_args()
    main_converged(_args) if _args.converged else main(_args)

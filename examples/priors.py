"""How much does the prior family matter? HMC's BMA under Normal, Laplace, Student-t, logistic.

Izmailov et al. (2021, "What's the effect of priors?"): results are fairly robust across the
Normal prior's scale and across prior families, so isotropic Gaussian priors work well. This
example fits the same one-hidden-layer BNN on digits by full-batch HMC
(:func:`bnn_ppl.inference.fit`) under every prior of ``--families`` at every scale of
``--scales``: ``normal:s``, ``laplace:s``, ``student_t:DF,s`` (``--df`` degrees of freedom) and
``logistic:s`` (:func:`bnn_ppl.priors.from_string`; ``s`` is the family's scale parameter, not
its standard deviation). Every prior gets the same HMC budget: the trajectory length
``--trajectory-length`` (default ``(π/2)·0.3``, Izmailov et al.'s length for a Normal(0.3)
prior) with the step size adapted in warmup; ``--full`` uses the library's default per prior
instead. It prints the test accuracy and NLL of each BMA, one row per (family, scale), then

* the family effect (the spread max − min of BMA accuracy and NLL over families, averaged over
  scales) against the scale effect (the spread over scales, averaged over families);
* the best NLL of the Normal prior against the best NLL of any prior.

The claim counts as supported when the family effect on accuracy is at most
``--acc-tolerance`` (absolute) and the Normal prior's best NLL is within ``--tolerance``
(relative) of the best overall. Every prior is a run folder ``--out/<family>/<scale>`` that
``bnn-ppl evaluate`` reads; ``--out`` also gets ``priors.png`` (accuracy and NLL against the
scale, one line per family) and ``summary.json``.

``--converged`` measures the claim on converged chains instead (issue 19): every family at
``--family-scale`` (0.3) and the Normal prior at every ``--scales``, MLP(20) unless ``--width``,
each fitted by the reference recipe (:class:`bnn_ppl.config.ReferenceHMCConfig`: 4 chains from
prior draws, segments until >= 99 % of the test probabilities have R-hat <= 1.01 and bulk ESS
>= 400, or ``--max-seconds`` / ``--max-draws`` per prior end it; ``--burn-in`` leaves each
chain's first share out of every check). Every row reports accuracy,
NLL and ECE with its convergence figures, and both parts of the claim are judged over the
priors that converged only (the family effect at ``--family-scale``; the Normal prior's best NLL
against the best); the others are listed as not converged.

    python examples/priors.py             # a few minutes on 2 CPU cores
    python examples/priors.py --full      # 4x the draws, 2 chains, wider net
    python examples/priors.py --converged --max-seconds 360   # converged chains
"""

from __future__ import annotations

import argparse
import math
import os

import jax
import numpy as np

import bnn_ppl as bp
from bnn_ppl.config import HMCConfig, ReferenceHMCConfig
from bnn_ppl.inference import fit_run
from bnn_ppl.inference.reference.stopping import describe_recipe
from bnn_ppl.inference.run_folder import CONVERGENCE_HEADER, convergence_cells
from bnn_ppl.io import write_json
from bnn_ppl.models import mlp_bnn
from bnn_ppl.plots import metric_curves, save_figure

FAMILIES = ("normal", "laplace", "student_t", "logistic")


def prior_spec(family: str, scale: float, df: float) -> str:
    """The CLI form of a prior: ``"normal:0.3"``, ``"student_t:3,0.3"``, ..."""
    return f"student_t:{df:g},{scale:g}" if family == "student_t" else f"{family}:{scale:g}"


def summarise(
    results: dict[str, dict[float, dict]], tolerance: float, acc_tolerance: float
) -> dict[str, float | bool]:
    """Family effect vs scale effect, and the Normal prior's best NLL vs the best overall."""
    families, scales = list(results), sorted(next(iter(results.values())))
    out: dict[str, float | bool] = {}
    for metric in ("accuracy", "nll"):
        grid = np.array([[results[f][s][metric] for s in scales] for f in families])
        out[f"family_effect_{metric}"] = float(np.ptp(grid, axis=0).mean())  # over families
        out[f"scale_effect_{metric}"] = float(np.ptp(grid, axis=1).mean())  # over scales
    best = {f: min(r["nll"] for r in results[f].values()) for f in families}
    out["best_family"] = min(best, key=best.get)
    out["best_nll"] = best[out["best_family"]]
    out["normal_best_nll"] = best.get("normal", float("nan"))
    out["normal_close"] = bool(out["normal_best_nll"] <= out["best_nll"] * (1 + tolerance))
    out["family_robust"] = bool(out["family_effect_accuracy"] <= acc_tolerance)
    out["supported"] = bool(out["normal_close"] and out["family_robust"])
    return out


def main(args: argparse.Namespace) -> None:
    data = bp.data.load("digits").head(args.max_train)
    print(f"digits: {len(data.x_train)} train / {len(data.x_test)} test rows; "
          f"MLP(hidden=({args.width},)); HMC {args.num_chains} chain(s) x "
          f"{args.num_warmup} warmup + {args.num_samples} samples per prior", flush=True)
    config = HMCConfig.from_options(vars(args))  # warmup, samples, chains, trajectory length
    results: dict[str, dict[float, dict]] = {}
    table = [f"{'prior':<22}{'accuracy':>10}{'NLL':>10}{'accept':>9}{'leapfrog':>10}{'time s':>9}"]
    for family in args.families:
        for scale in args.scales:
            spec = prior_spec(family, scale, args.df)
            model = mlp_bnn(data, args.width, bp.priors.from_string(spec))
            _, record = fit_run(os.path.join(args.out, family, f"{scale:g}"), model, data, config,
                                jax.random.key(args.seed),  # the same key: only the prior changes
                                options={"prior": spec, "width": args.width})  # fmt: skip
            r = {k: record["metrics"][k] for k in ("accuracy", "nll")}
            results.setdefault(family, {})[scale] = r
            chains, wall = record["summary"]["chains"], record["wall_time_s"]
            table.append(f"{spec:<22}{r['accuracy']:>10.4f}{r['nll']:>10.4f}"
                         f"{np.mean([c['accept_prob'] for c in chains]):>9.3f}"
                         f"{np.mean([c['num_steps'] for c in chains]):>10.1f}{wall:>9.1f}")
            print(f"  {spec}: {wall:.1f} s", flush=True)
    summary = summarise(results, args.tolerance, args.acc_tolerance)
    print("\n" + "\n".join(table) + "\n")
    print(f"family effect (max - min over families, mean over scales): accuracy "
          f"{summary['family_effect_accuracy']:.4f}, NLL {summary['family_effect_nll']:.4f}")
    print(f"scale effect  (max - min over scales, mean over families): accuracy "
          f"{summary['scale_effect_accuracy']:.4f}, NLL {summary['scale_effect_nll']:.4f}")
    print(f"best NLL: {summary['best_nll']:.4f} ({summary['best_family']}); Normal's best "
          f"{summary['normal_best_nll']:.4f}")
    verdict = "supported" if summary["supported"] else "NOT supported"
    print(f"claim (Izmailov et al.): results are robust across prior families (family effect on "
          f"accuracy <= {args.acc_tolerance:g}: {'yes' if summary['family_robust'] else 'no'}) "
          f"and Gaussian priors work well (Normal's best NLL within {args.tolerance:.0%} of the "
          f"best: {'yes' if summary['normal_close'] else 'no'}): {verdict} here")

    png, path = os.path.join(args.out, "priors.png"), os.path.join(args.out, "summary.json")
    save_figure(metric_curves(results, xlabel="prior scale", xscale="log",
                              title=f"digits, MLP({args.width}), HMC BMA per prior"), png)
    write_json(path, {
        "args": vars(args), "summary": summary,
        "results": {f: {f"{s:g}": r for s, r in v.items()} for f, v in results.items()},
    })  # fmt: skip
    print(f"wrote {png}, {path} and one run folder per prior under {args.out}/")


def converged_summary(rows: dict[tuple[str, float], dict], family_scale: float, tolerance: float,
                      acc_tolerance: float) -> dict[str, float | str | bool | None]:  # fmt: skip
    """The claim over the *converged* priors only: ``family_effect_accuracy`` / ``_nll``
    (max - min over the converged families at ``family_scale``; ``None`` unless the Normal prior
    and another family converged there), ``scale_effect_*`` (over the converged Normal scales),
    ``normal_close`` (the Normal prior's best NLL within ``tolerance`` of the best converged NLL;
    ``None`` if no Normal prior converged), ``family_robust`` and ``verdict``:
    ``"supported"``, ``"NOT supported"`` (a judged part fails) or ``"no verdict"``.

    Example:
        >>> ok = {"converged": True, "accuracy": 0.95}
        >>> rows = {("normal", 0.3): ok | {"nll": 0.20}, ("laplace", 0.3): ok | {"nll": 0.21},
        ...         ("logistic", 0.3): {"converged": False, "accuracy": 0.5, "nll": 2.0}}
        >>> s = converged_summary(rows, 0.3, 0.05, 0.02)
        >>> s["family_effect_accuracy"], s["normal_close"], s["verdict"]
        (0.0, True, 'supported')
    """
    done = {k: r for k, r in rows.items() if r["converged"]}
    families = {f: r for (f, s), r in done.items() if s == family_scale}
    normal = {s: r for (f, s), r in done.items() if f == "normal"}
    out: dict[str, float | str | bool | None] = {}
    for metric in ("accuracy", "nll"):
        values = [r[metric] for r in families.values()]
        out[f"family_effect_{metric}"] = (float(np.ptp(values)) if "normal" in families
                                          and len(values) > 1 else None)  # fmt: skip
        scales = [r[metric] for r in normal.values()]
        out[f"scale_effect_{metric}"] = float(np.ptp(scales)) if len(scales) > 1 else None
    best = min(done, key=lambda k: done[k]["nll"], default=None)
    out["best"] = None if best is None else f"{best[0]} at scale {best[1]:g}"
    out["best_nll"] = None if best is None else done[best]["nll"]
    out["normal_best_nll"] = min((r["nll"] for r in normal.values()), default=None)
    out["normal_close"] = (None if out["normal_best_nll"] is None else
                           bool(out["normal_best_nll"] <= out["best_nll"] * (1 + tolerance)))
    effect = out["family_effect_accuracy"]
    out["family_robust"] = None if effect is None else bool(effect <= acc_tolerance)
    parts = (out["family_robust"], out["normal_close"])
    out["verdict"] = ("NOT supported" if False in parts else "no verdict" if None in parts
                      else "supported")  # fmt: skip
    return out


def main_converged(args: argparse.Namespace) -> None:
    """Every prior fitted by the reference recipe (``--converged``); the claim over those that
    converged."""
    data = bp.data.load("digits").head(args.max_train)
    config = ReferenceHMCConfig(num_warmup=args.num_warmup, segment_draws=args.segment_draws,
                                max_draws=args.max_draws, max_seconds=args.max_seconds,
                                burn_in=args.burn_in)  # fmt: skip
    keys = [(f, args.family_scale) for f in args.families]
    keys += [("normal", s) for s in args.scales if ("normal", s) not in keys]
    print(f"digits: {len(data.x_train)} train / {len(data.x_test)} test rows; MLP(hidden="
          f"({args.width},)); reference recipe per prior: {describe_recipe(config)}", flush=True)
    rows: dict[tuple[str, float], dict] = {}
    for family, scale in keys:
        spec = prior_spec(family, scale, args.df)
        model = mlp_bnn(data, args.width, bp.priors.from_string(spec))
        ckpt = args.checkpoint_root and os.path.join(args.checkpoint_root, family, f"{scale:g}")
        _, record = fit_run(os.path.join(args.out, family, f"{scale:g}"), model, data, config,
                            jax.random.key(args.seed),  # the same key: only the prior changes
                            options={"prior": spec, "width": args.width},
                            checkpoint_dir=ckpt)  # fmt: skip
        rows[(family, scale)] = ({k: record["metrics"][k] for k in ("accuracy", "nll", "ece")}
                                 | record["summary"]["convergence"]
                                 | {"spec": spec, "wall_time_s": record["wall_time_s"]})
        status = "converged" if rows[(family, scale)]["converged"] else "NOT converged"
        print(f"  {spec}: {status}, {record['wall_time_s']:.0f} s", flush=True)
    s = converged_summary(rows, args.family_scale, args.tolerance, args.acc_tolerance)
    print(f"\n{'prior':<20}{'accuracy':>10}{'NLL':>8}{'ECE':>8}{CONVERGENCE_HEADER}{'wall s':>8}")
    for r in rows.values():
        print(f"{r['spec']:<20}{r['accuracy']:>10.4f}{r['nll']:>8.4f}{r['ece']:>8.4f}"
              f"{convergence_cells(r)}{r['wall_time_s']:>8.0f}")
    total = sum(r["wall_time_s"] for r in rows.values())

    def fmt(v: float | None) -> str:
        return "n/a (too few converged)" if v is None else f"{v:.4f}"

    print(f"total wall time {total:.0f} s\n")
    print(f"family effect at scale {args.family_scale:g} (max - min over converged families): "
          f"accuracy {fmt(s['family_effect_accuracy'])}, NLL {fmt(s['family_effect_nll'])}")
    print(f"scale effect of the Normal prior (max - min over converged scales): accuracy "
          f"{fmt(s['scale_effect_accuracy'])}, NLL {fmt(s['scale_effect_nll'])}")
    where = f" ({s['best']})" if s["best"] else ""
    print(f"best converged NLL: {fmt(s['best_nll'])}{where}; Normal's best "
          f"{fmt(s['normal_best_nll'])}")
    unconverged = [f"{r['spec']} ({r['stop_reason']})" for r in rows.values() if not r["converged"]]
    print(f"not converged, excluded from the verdict: {', '.join(unconverged) or 'none'}")

    def yes(v: bool | None) -> str:
        return "not judged" if v is None else "yes" if v else "no"

    print(f"claim (Izmailov et al.) on converged chains: robust across prior families (family "
          f"effect on accuracy <= {args.acc_tolerance:g}: {yes(s['family_robust'])}) and "
          f"Gaussian priors work well (Normal's best NLL within {args.tolerance:.0%} of the best: "
          f"{yes(s['normal_close'])}): {s['verdict']}")
    path = os.path.join(args.out, "summary.json")
    write_json(path, {"args": vars(args), "summary": s, "wall_time_s": total,
                      "results": {r["spec"]: r for r in rows.values()}})  # fmt: skip
    print(f"wrote {path} and one run folder per prior under {args.out}/")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--families", nargs="+", choices=FAMILIES, default=list(FAMILIES))
    p.add_argument("--scales", nargs="+", type=float, default=[0.1, 0.3, 1.0],
                   help="scale parameter of every family")
    p.add_argument("--df", type=float, default=3.0, help="Student-t degrees of freedom")
    p.add_argument("--width", type=int, default=None, help="default 50, --converged: 20")
    p.add_argument("--num-chains", type=int, default=1)
    p.add_argument("--num-warmup", type=int, default=None, help="default 100, --converged: 300")
    p.add_argument("--num-samples", type=int, default=100)
    p.add_argument("--max-train", type=int, default=None)
    p.add_argument("--trajectory-length", type=float, default=0.5 * math.pi * 0.3,
                   help="HMC trajectory length for every prior (--full: (π/2)·σ_prior)")
    p.add_argument("--tolerance", type=float, default=0.05,
                   help="relative NLL margin within which Normal counts as working well")
    p.add_argument("--acc-tolerance", type=float, default=0.02,
                   help="largest mean spread of accuracy over families that counts as robust")
    p.add_argument("--full", action="store_true",
                   help="width 100, 2 chains x 400 + 400, Izmailov et al.'s trajectory length")
    p.add_argument("--converged", action="store_true",
                   help="every family at --family-scale and Normal at every --scales, each by the "
                   "reference recipe until converged (or its budget ends); verdict over the "
                   "converged priors only")
    p.add_argument("--family-scale", type=float, default=0.3,
                   help="--converged: the scale at which the families are compared")
    p.add_argument("--segment-draws", type=int, default=200,
                   help="--converged: draws per chain between convergence checks")
    p.add_argument("--max-draws", type=int, default=3000, help="--converged: per chain and prior")
    p.add_argument("--burn-in", type=float, default=0.0,
                   help="--converged: share of each chain's first draws left out of every check")
    p.add_argument("--max-seconds", type=float, default=360.0,
                   help="--converged: most wall time per prior")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="runs/priors")
    p.add_argument("--checkpoint-root", default=None,
                   help="--converged: commit each run's segments under this folder, so that the "
                   "same command (or one with a larger budget and another --out) resumes them")
    args = p.parse_args(argv)
    if args.width is None:
        args.width = 20 if args.converged else 50
    if args.num_warmup is None:
        args.num_warmup = 300 if args.converged else 100
    if args.full:
        args.width, args.num_chains, args.num_warmup, args.num_samples = 100, 2, 400, 400
        args.trajectory_length = None
    if min(args.scales) <= 0:
        p.error("--scales must be positive")
    return args


if __name__ == "__main__":
    _args = parse_args()
    main_converged(_args) if _args.converged else main(_args)

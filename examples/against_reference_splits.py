"""Pool ``examples/against_reference.py`` runs over reference splits: each method's metrics
and compute, each claim's paired difference with its SE and verdict.

Each argument is one split's ``summary.json`` (or its folder). Metrics: mean ± SE over splits
of each split's mean over seeds; gradients, wall seconds: mean over splits and seeds (the
reference's from its record). Claims (and the short HMC run against the ensemble): the mean over
splits of each split's seed-mean difference; its SE over splits and the per-row paired SE (each
row's difference averaged over seeds): the larger decides at 2 SE.

    python examples/against_reference_splits.py runs/against_boston*/summary.json
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import against_reference as ar  # noqa: E402  (the claims and columns of the runs pooled here)

from bnn_ppl.io import read_json, write_json  # noqa: E402
from bnn_ppl.metrics.splits import mean_se  # noqa: E402
from bnn_ppl.validation import InputValueError  # noqa: E402

# beside the claims (:data:`against_reference.CLAIMS`): the short HMC run against the ensemble,
# at about equal gradients in the equal-samples regime of a regression reference
COMPARISONS = (
    ("short_hmc_beats_ensemble", "HMC", "ensemble", "ll",
     "a short HMC run outperforms deep ensembles ({metric} higher)"),
)  # fmt: skip
# the settings that may differ between the pooled runs (all others must agree)
PER_RUN = ("reference", "out", "seed", "seeds", "regimes", "methods", "ref_samples")


def _split_of(reference: str) -> tuple[str, str]:
    """The split's label and the reference family (its file name with ``split<K>`` as
    ``split*``) of a reference path."""
    name = Path(reference).name
    found = re.search(r"split(\d+)", name)
    return (found[1] if found else Path(name).stem), re.sub(r"split\d+", "split*", name)


def load_summaries(paths: list[str]) -> tuple[str, dict[str, dict[str, dict]]]:
    """The task and, per regime, split label -> that split's regime body (with the run's
    ``reference_cost``) from ``paths`` (``summary.json`` files or folders holding one).

    Raises:
        InputValueError: a missing file; runs of different reference families, tasks or
            settings; one split's regime in two files.
    """
    task, family, settings, first = None, None, None, None
    regimes: dict[str, dict[str, dict]] = {}
    for raw in paths:
        path = Path(raw) / "summary.json" if Path(raw).is_dir() else Path(raw)
        if not path.is_file():
            raise InputValueError(f"{raw}: no such summary.json; pass the files (or folders) "
                                  "examples/against_reference.py wrote with --out.")  # fmt: skip
        payload = read_json(path)
        args = payload["args"]
        split, fam = _split_of(args["reference"])
        mine = {k: v for k, v in args.items() if k not in PER_RUN}
        if first is None:
            task, family, settings, first = payload["task"], fam, mine, path
        elif (payload["task"], fam) != (task, family) or mine != settings:
            diff = sorted(k for k in mine.keys() | settings.keys()
                          if mine.get(k) != settings.get(k))  # fmt: skip
            raise InputValueError(f"{path} pools badly with {first}: reference family {fam} vs "
                                  f"{family}, task {payload['task']} vs {task}, settings that "
                                  f"differ: {diff}; pool runs of one reference family and one "
                                  "set of settings.")  # fmt: skip
        for regime, body in payload["regimes"].items():
            if split in regimes.setdefault(regime, {}):
                raise InputValueError(f"{path}: split {split}, {regime!r} is also in "
                                      f"{regimes[regime][split]['path']}; pass one run per "
                                      "split and regime.")  # fmt: skip
            regimes[regime][split] = body | {
                "path": str(path),
                "reference_cost": payload["reference_cost"],
            }
    return task, dict(sorted(regimes.items()))


def _key(split: str) -> tuple[int, str]:
    return (int(split), split) if split.isdigit() else (1 << 30, split)


def _score(row: dict, key: str, task: str) -> float:
    """The per-row score ``key`` of a claim, averaged over rows: a run's table row gives it."""
    return -row["nll"] if key == "ll" else row[ar.DISTANCE[task]]


def pool_regime(splits: dict[str, dict], task: str) -> dict[str, Any]:
    """One regime pooled over its splits (:func:`load_summaries`' per-split bodies):
    ``methods``: method -> metric -> [mean, SE, splits] (SE over splits of each split's mean
    over seeds), ``gradients`` and ``seconds`` (means over splits and seeds); ``claims``:
    claim -> the pooled difference, its split SE and per-row paired SE, which of the two decided
    (the larger), the verdict, and each split's difference."""
    order = sorted(splits, key=_key)
    names = list(dict.fromkeys(n for s in order for r in splits[s]["results_per_seed"] for n in r))
    methods: dict[str, dict] = {}
    for name in names:
        have = [s for s in order if name in splits[s]["results_per_seed"][0]]
        rows = {s: [r[name] for r in splits[s]["results_per_seed"]] for s in have}
        cell: dict[str, Any] = {"splits": len(have)}
        for metric in ar.COLUMNS[task]:
            m, se = mean_se([np.mean([r[metric] for r in rows[s]]) for s in have])
            cell[metric] = [m, se, len(have)]
        if name == ar.REF:  # the reference's own cost: its record's sampling gradients, seconds
            costs = [splits[s]["reference_cost"] for s in have]
            cell["gradients"] = float(np.mean([c["sampling_gradients"] for c in costs]))
            cell["seconds"] = float(np.mean([c["wall_seconds"] for c in costs]))
        elif "gradients" in rows[have[0]][0]:
            for k in ("gradients", "seconds"):
                cell[k] = float(np.mean([r[k] for s in have for r in rows[s]]))
        methods[name] = cell
    claims: dict[str, dict] = {}
    for claim, a, b, key, text in (*ar.CLAIMS, *COMPARISONS):
        have = [s for s in order if {a, b} <= set(splits[s]["results_per_seed"][0])]
        if not have:
            continue
        per_split = {s: float(np.mean([_score(r[a], key, task) - _score(r[b], key, task)
                                       for r in splits[s]["results_per_seed"]]))
                     for s in have}  # fmt: skip
        d, se = mean_se(list(per_split.values()))
        rows = [np.mean([np.asarray(sc[a][key]) - np.asarray(sc[b][key]) for sc in
                         splits[s]["row_scores"]], axis=0)
                for s in have if "row_scores" in splits[s]]  # fmt: skip
        flat = np.concatenate(rows) if rows else np.array([])
        row_mean, row_se = mean_se(flat) if flat.size else (np.nan, np.nan)
        # the larger SE decides (a few splits' SE is itself noisy; the rows' misses the
        # training set's and the seeds' variation between splits)
        if np.isnan(se) and np.isnan(row_se):
            raise InputValueError(
                f"{claim}: one split without per-row scores gives no SE; "
                "pool two splits or more, or runs that store row_scores."
            )
        decided = "splits" if np.isnan(row_se) or se >= row_se else "rows"
        v = ar.verdict(d, se if decided == "splits" else row_se)
        label = "comparison" if claim in {c[0] for c in COMPARISONS} else "claim (Izmailov et al.)"
        claims[claim] = {"label": label, "a": a, "b": b, "score": key,
                         "text": text.format(metric=ar.METRIC[task]),
                         "difference": d, "split_se": se, "splits": len(have),
                         "row_mean": row_mean,
                         "row_se": row_se, "rows": int(flat.size), "row_splits": len(rows),
                         "decided_by": decided, "verdict": v,
                         "positive_splits": sum(x > 0 for x in per_split.values()),
                         "per_split": per_split}  # fmt: skip
    seeds = sorted({len(splits[s]["results_per_seed"]) for s in order})
    return {"splits": order, "seeds": seeds, "methods": methods, "claims": claims}


def _cell(value: list[float]) -> str:
    m, se, _ = value
    return f"{m:.3f} ± {se:.3f}" if np.isfinite(se) else f"{m:.3f}"


def report(pooled: dict[str, dict], task: str) -> str:
    """The pooled tables and claim lines of :func:`pool_regime`'s results, per regime."""
    out = []
    for regime, p in pooled.items():
        cols = ar.COLUMNS[task]
        seeds = "/".join(map(str, p["seeds"]))
        out.append(f"\n{regime}: {len(p['splits'])} split(s) ({', '.join(p['splits'])}), "
                   f"{seeds} seed(s) each; mean ± SE over splits of each split's mean over "
                   "seeds; gradients and seconds: mean over splits and seeds")  # fmt: skip
        out.append(f"{'method':<18}" + "".join(f"{h:>17}" for h in cols.values())
                   + f"{'gradients':>12}{'seconds':>9}{'splits':>7}")  # fmt: skip
        for name, c in p["methods"].items():
            cost = (f"{c['gradients']:>12,.0f}{c['seconds']:>9.0f}" if "gradients" in c
                    else f"{'-':>12}{'-':>9}")  # fmt: skip
            out.append(f"{name:<18}" + "".join(f"{_cell(c[m]):>17}" for m in cols)
                       + f"{cost}{c['splits']:>7}")  # fmt: skip
        claims = p["claims"]
        if not claims:
            continue
        heads = [f"{c['a']} - {c['b']} ({c['score']})" for c in claims.values()]
        out.append("\nper split, mean over seeds: " + "; ".join(heads))
        for s in p["splits"]:
            cells = [f"{c['per_split'][s]:+.4f}" if s in c["per_split"] else "-"
                     for c in claims.values()]  # fmt: skip
            out.append(f"  split {s:<4}" + "".join(f"{x:>12}" for x in cells))
        for c in claims.values():
            se = c["split_se"] if c["decided_by"] == "splits" else c["row_se"]
            out.append(
                f"{c['label']} ({regime}): {c['text']}: {c['a']} - {c['b']} = "
                f"{c['difference']:+.4f}"
                + (
                    f" ± {c['split_se']:.4f} SE over {c['splits']} splits (SE of the per-split "
                    "means over seeds)"
                    if c["splits"] > 1
                    else " on 1 split (no SE over splits)"
                )
                + f"; per-row paired SE {c['row_se']:.4f} "
                f"over {c['rows']} rows of {c['row_splits']} split(s) (mean {c['row_mean']:+.4f});"
                f" {c['positive_splits']} of {c['splits']} split(s) positive: {c['verdict']} "
                f"({abs(c['difference']) / se:.1f} {c['decided_by'][:-1]} SE)"
            )
    return "\n".join(out).lstrip("\n")


def main(argv: list[str] | None = None) -> dict[str, dict]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "summaries",
        nargs="+",
        help="summary.json files (or their folders), one run per split and regime",
    )
    p.add_argument("--json", default=None, help="also write the pooled figures here (JSON)")
    args = p.parse_args(argv)
    task, regimes = load_summaries(args.summaries)
    pooled = {regime: pool_regime(splits, task) for regime, splits in regimes.items()}
    print(report(pooled, task))
    if args.json:
        write_json(args.json, {"task": task, "summaries": args.summaries, "regimes": pooled})
        print(f"\nwrote {args.json}")
    return pooled


if __name__ == "__main__":
    main()

"""Several reference posteriors of one UCI split, each model against a baseline, paired by test row.

The cold-posterior and prior studies on a regression split. Each record (``reference.py`` with
``--temperature``/``--temper`` or ``--prior``) is one model's reference posterior of the same
split; per record: the model, whether it converged, its cost (draws per chain, sampling
gradients, committed wall time), test LL (mixture and moment-matched), RMSE, E[(y - m)^2 / s^2]
and the learned noise sd; then its test LL minus the baseline's, paired over the test rows
(mean ± SE, ddof 1; a verdict only beyond 2 SE, only between converged runs). That SE is the
test rows' sampling error on one split; ``--splits`` repeats the table per split and pools each
model's difference over them (SE over the splits beside the per-row SE; the larger decides).

    python examples/reference_models.py --baseline uci_boston_split0_learned_prior0.3_init.json \\
        --references examples/references --pattern "uci_boston_split0_learned_*.json"
    python examples/reference_models.py --splits 0 1 2 \\
        --baseline "uci_boston_split{k}_learned_prior0.3_init.json" \\
        --pattern "uci_boston_split{k}_learned_[ls]*.json"     # the prior families, pooled
"""

from __future__ import annotations

import argparse
import fnmatch
import os
from pathlib import Path
from typing import Any

import numpy as np

from bnn_ppl.io import load_npz, read_json
from bnn_ppl.validation import InputValueError

REFERENCES = Path(__file__).resolve().parent / "references"
BASELINE = "uci_boston_split0_learned_prior0.3_init.json"
PATTERN = "uci_boston_split0_learned_*.json"


def load(folder: Path, name: str) -> dict[str, Any]:
    """One record with its per-test-row log densities (target units) from its ``.npz``."""
    rec = read_json(folder / name)
    arrays = load_npz(folder / rec["predictions"]["file"], sha256=rec["predictions"]["sha256"])
    if "log_density" not in arrays or "y_std" not in arrays:
        raise InputValueError(
            f"{name} has no per-row mixture log density or y_std in its .npz: match UCI "
            "regression records written by examples/reference.py with the default --quantity."
        )
    y, mean, scale = (np.asarray(arrays[k], np.float64) for k in ("y_test", "mean", "scale"))
    log_sd = float(np.log(float(arrays["y_std"])))
    gauss = -0.5 * np.log(2 * np.pi) - np.log(scale) - 0.5 * ((y - mean) / scale) ** 2
    noise = arrays.get("draws_noise_scale")
    model = rec["model"]
    return {
        "file": name,
        "record": rec,
        "y": y,
        "mixture": np.asarray(arrays["log_density"], np.float64) - log_sd,
        "gaussian": gauss - log_sd,
        "sq_err": ((y - mean) * float(arrays["y_std"])) ** 2,
        "z2": float(np.mean((y - mean) ** 2 / scale**2)),
        "noise": None if noise is None else float(np.mean(np.asarray(noise, np.float64))),
        "label": f"{model['prior']}, T={model.get('temperature', 1.0):g}"
        + (f" ({model.get('temper', 'likelihood')})" if model.get("temperature", 1.0) != 1 else "")
        + (", prior-draw starts" if not rec["recipe"].get("init_steps", 0) else ""),
    }


def paired(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """Mean and standard error (ddof 1) of ``a - b`` over the rows."""
    d = a - b
    return float(d.mean()), float(d.std(ddof=1) / np.sqrt(d.size))


def one_split(folder: Path, baseline: str, pattern: str) -> dict[str, tuple]:
    """Print one split's table and paired differences; return, per converged model, its
    per-row mixture-LL difference from the converged baseline (``{label: (rows, ...)}``)."""
    names = sorted(n for n in os.listdir(folder) if fnmatch.fnmatch(n, pattern))
    if baseline not in names:
        names.insert(0, baseline)
    if len(names) < 2:
        raise InputValueError(
            f"--pattern {pattern!r} matches no record besides --baseline in {folder}: give "
            "the pattern of the other models' records."
        )
    base = load(folder, baseline)
    rows = [base] + [load(folder, n) for n in names if n != baseline]
    split = (base["record"]["data"]["name"], base["record"]["data"]["split"])
    for r in rows[1:]:
        other = (r["record"]["data"]["name"], r["record"]["data"]["split"])
        if other != split or not np.array_equal(r["y"], base["y"]):
            raise InputValueError(
                f"{r['file']} is {other}, the baseline {split}: the records must share one "
                "split's test rows; narrow --pattern."
            )
    print(f"{split[0]} split {split[1]}: {len(rows)} reference posteriors, "
          f"{base['y'].size} test rows; baseline {base['label']}")  # fmt: skip
    print(f"{'model':<52} {'converged':>10} {'draws':>7} {'gradients':>11} {'time s':>7} "
          f"{'mix LL':>9} {'LL':>7} {'RMSE':>6} {'E[z^2]':>7} {'sigma':>7}")  # fmt: skip
    for r in rows:
        rec, c = r["record"], r["record"]["recipe"]["convergence"]
        noise = f"{r['noise']:>7.3g}" if r["noise"] is not None else f"{'-':>7}"
        print(f"{r['label']:<52} {'yes' if rec['converged'] else 'NO':>10} {c['draws']:>7,} "
              f"{c['gradients']:>11,} {c['seconds']:>7.0f} {r['mixture'].mean():>9.4g} "
              f"{r['gaussian'].mean():>7.4g} {np.sqrt(r['sq_err'].mean()):>6.3f} "
              f"{r['z2']:>7.3f} {noise}")  # fmt: skip
    print(f"\ntest LL minus the baseline's, paired over the {base['y'].size} test rows "
          "(mean ± SE, ddof 1); a difference is called only beyond 2 SE")  # fmt: skip
    diffs = {}
    for r in rows[1:]:
        if not (r["record"]["converged"] and base["record"]["converged"]):
            print(f"{r['label']:<52} not converged: no verdict")
            continue
        cells = []
        for key, what in (("mixture", "mixture LL"), ("gaussian", "LL")):
            d, se = paired(r[key], base[key])
            verdict = ("better" if d > 0 else "worse") if abs(d) > 2 * se else "undecided"
            cells.append(f"{what} {d:+.3f} ± {se:.3f} ({verdict})")
        d, se = paired(r["sq_err"], base["sq_err"])
        cells.append(f"squared error {d:+.2f} ± {se:.2f}")
        print(f"{r['label']:<52} " + "; ".join(cells))
        diffs[r["label"]] = r["mixture"] - base["mixture"]
    return diffs


def pooled(per_split: dict[int, dict[str, np.ndarray]]) -> None:
    """Each model's mixture-LL difference over the splits where it and the baseline converged:
    mean ± SE over the splits' means and the per-row paired SE over all their rows; the
    larger SE decides (2 SE), as examples/against_reference_splits.py does."""
    labels = sorted({label for diffs in per_split.values() for label in diffs})
    print(f"\npooled over splits {sorted(per_split)}: mixture LL minus the baseline's (the larger "
          "of the SE over splits and the per-row paired SE decides, at 2 SE)")  # fmt: skip
    for label in labels:
        found = {k: d[label] for k, d in per_split.items() if label in d}
        means = np.array([v.mean() for v in found.values()])
        rows = np.concatenate(list(found.values()))
        row_se = float(rows.std(ddof=1) / np.sqrt(rows.size))
        split_se = float(means.std(ddof=1) / np.sqrt(means.size)) if means.size > 1 else np.nan
        se = row_se if np.isnan(split_se) else max(split_se, row_se)
        d = float(means.mean())
        verdict = ("better" if d > 0 else "worse") if abs(d) > 2 * se else "undecided"
        print(f"{label:<52} {d:+.3f} (SE over {means.size} split(s) "
              f"{'-' if np.isnan(split_se) else f'{split_se:.3f}'}, per row {row_se:.3f} over "
              f"{rows.size} rows; better on {int(np.sum(means > 0))} of {means.size} "
              f"splits): {verdict}")  # fmt: skip


def main(args: argparse.Namespace) -> None:
    folder = Path(args.references)
    if args.splits is None:
        one_split(folder, args.baseline, args.pattern)
        return
    if "{k}" not in args.baseline or "{k}" not in args.pattern:
        raise InputValueError(
            "--splits needs '{k}' in --baseline and --pattern (the split number), e.g. "
            "--baseline 'uci_boston_split{k}_learned_prior0.3_init.json'."
        )
    per_split = {}
    for k in args.splits:
        print()
        per_split[k] = one_split(folder, args.baseline.replace("{k}", str(k)),
                                 args.pattern.replace("{k}", str(k)))  # fmt: skip
    pooled(per_split)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--references", default=str(REFERENCES), help="folder of reference records")
    p.add_argument("--baseline", default=BASELINE, help="the record the others are paired with")
    p.add_argument("--pattern", default=PATTERN, help="the other records' file names (fnmatch)")
    p.add_argument("--splits", type=int, nargs="+", default=None,
                   help="several splits: '{k}' in --baseline and --pattern is each split's "
                   "number; the differences are also pooled over the splits")
    return p.parse_args(argv)


if __name__ == "__main__":
    main(parse_args())

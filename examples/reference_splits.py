"""UCI test metrics over several standard splits, from converged reference posteriors only.

The UCI test log-likelihood and RMSE over the standard splits on converged chains, beside
MC dropout's published per-split results (paired by split). This reads the stored reference
records matching ``--pattern`` (one per split, written by
``examples/reference.py``; their ``.npz`` checked by SHA-256 and their metrics recomputed from
it), refuses records of different models or recipes, prints one row per split with its
convergence figures, and the mean ± standard error of the *converged* splits only, beside
MC-dropout's 20-split mean (:data:`bnn_ppl.metrics.splits.MC_DROPOUT_LL`) and the paired
per-split difference against it (:data:`~bnn_ppl.metrics.splits.MC_DROPOUT_SPLITS`). Splits
stored unconverged are listed, never averaged in.

    python examples/reference_splits.py      # yacht, noise 0.05, optimised starts
    python examples/reference_splits.py --pattern "uci_boston_split*_learned_prior0.3_init.json"
    python examples/reference_splits.py --pattern "uci_yacht_split*_noise0.05_init.json" \\
        --references examples/references
"""

from __future__ import annotations

import argparse
import fnmatch
import os
from pathlib import Path
from typing import Any

import numpy as np

from bnn_ppl.io import load_npz, read_json
from bnn_ppl.metrics.comparison import stored_predictions
from bnn_ppl.metrics.splits import (
    MC_DROPOUT_LL,
    MC_DROPOUT_SPLITS,
    mean_se,
    paired_difference,
    reference_verdicts,
    split_table,
)
from bnn_ppl.metrics.suite import predictive_metrics
from bnn_ppl.validation import InputValueError

REFERENCES = Path(__file__).resolve().parent / "references"
PATTERN = "uci_yacht_split*_noise0.05_init.json"
SPLITS = 20  # the UCI standard splits (Hernandez-Lobato & Adams 2015) of every set here
# what must be the same in every record of one table: the model and the recipe's rule
SAME = ("model", "dataset", "recipe.max_rhat", "recipe.min_share", "recipe.min_ess",
        "recipe.burn_in", "recipe.num_chains")  # fmt: skip


def _field(record: dict[str, Any], key: str) -> Any:
    if key == "dataset":
        return record["data"]["name"]
    if key == "model" and "noise_choice" in record["model"]:
        # a noise sd chosen per split by a rule (reference.py --noise heldout): the rule is
        # the model's, the value each split's own (as Gal's protocol tunes tau per split)
        model = dict(record["model"])
        model["noise"] = model.pop("noise_choice")["rule"]
        return model
    part, _, name = key.partition(".")
    return record[part] if not name else record[part].get(name)


def load_records(folder: str | os.PathLike, pattern: str) -> list[dict[str, Any]]:
    """The records in ``folder`` whose file name matches ``pattern``, sorted by split, each
    with its metrics recomputed from its ``.npz`` (``"recomputed"``)."""
    folder = Path(folder)
    names = sorted(n for n in os.listdir(folder) if fnmatch.fnmatch(n, pattern))
    if not names:
        raise InputValueError(
            f"--pattern {pattern!r} matches no file in {folder}: give the "
            "reference records' name pattern, e.g. 'uci_yacht_split*_...json'."
        )
    records = []
    for name in names:
        rec = read_json(folder / name)
        arrays = load_npz(folder / rec["predictions"]["file"], sha256=rec["predictions"]["sha256"])
        if "mean" not in arrays or "y_std" not in arrays:
            raise InputValueError(
                f"{name} is not a UCI regression reference (no Gaussian mean "
                "and y_std in its .npz): match UCI records only."
            )
        metrics = predictive_metrics(stored_predictions(arrays), arrays["y_test"],
                                     task="regression", y_std=float(arrays["y_std"]))  # fmt: skip
        y, mean, scale = arrays["y_test"], arrays["mean"], arrays["scale"]
        rec["recomputed"] = {"ll": -metrics["nll"], "rmse": metrics["rmse"],
                             "z2": float(np.mean((y - mean) ** 2 / scale**2))}  # fmt: skip
        if "log_density" in arrays:  # the mixture's density per row (written since learned noise)
            rec["recomputed"]["ll_mixture"] = float(np.mean(arrays["log_density"])
                                                    - np.log(float(arrays["y_std"])))  # fmt: skip
        rec["file"] = name
        records.append(rec)
    first = records[0]
    for rec in records[1:]:
        for key in SAME:
            if _field(rec, key) != _field(first, key):
                raise InputValueError(
                    f"{rec['file']} and {first['file']} differ in {key} ({_field(rec, key)!r} "
                    f"vs {_field(first, key)!r}): one table holds one model and one recipe; "
                    "narrow --pattern."
                )
    splits = [r["data"]["split"] for r in records]
    if len(set(splits)) != len(splits):
        raise InputValueError(
            f"--pattern {pattern!r} matches two records of one split "
            f"({sorted(splits)}): narrow it to one record per split."
        )
    return sorted(records, key=lambda r: r["data"]["split"])


def split_rows(records: list[dict[str, Any]]) -> str:
    """One line per record: split, verdict, draws, convergence figures and test metrics."""
    head = (f"{'split':>5} {'noise':>6} {'converged':>14} {'draws/chain':>12} {'R-hat max':>10} "
            f"{'ESS min':>8} {'E[z^2]':>7} {'mix LL':>8} {'test LL':>9} {'RMSE':>8}")  # fmt: skip
    lines = [head]
    for r in records:
        c = r["recipe"]["convergence"]
        verdict = "yes" if r["converged"] else f"no ({r['stop_reason']})"
        noise = r["model"].get("noise", "learned")
        noise = "learned" if str(noise).startswith("HalfNormal") else noise  # a prior on it
        noise = f"{noise:>6g}" if isinstance(noise, float | int) else f"{noise:>6}"
        mix = r["recomputed"].get("ll_mixture")
        mix = f"{mix:>8.3f}" if mix is not None else f"{'-':>8}"
        lines.append(f"{r['data']['split']:>5} {noise} {verdict:>14} {c['draws']:>12,} "
                     f"{c['rhat_max']:>10.3f} {c['ess_bulk_min']:>8.0f} "
                     f"{r['recomputed']['z2']:>7.3f} {mix} "
                     f"{r['recomputed']['ll']:>9.3f} {r['recomputed']['rmse']:>8.3f}")  # fmt: skip
    return "\n".join(lines)


def main(args: argparse.Namespace) -> None:
    records = load_records(args.references, args.pattern)
    name = records[0]["data"]["name"].removeprefix("uci/")
    done = [r for r in records if r["converged"]]
    model = records[0]["model"]
    noise = (f"chosen per split by the rule {model['noise_choice']['rule']!r}"
             if "noise_choice" in model else model.get("noise", "learned"))  # fmt: skip
    print(
        f"{name}: {model['network']}, prior {model['prior']}, {model['likelihood']} noise "
        f"{noise} (standardised); {len(records)} stored split(s) of "
        f"{SPLITS} match {args.pattern!r}, {len(done)} converged"
    )
    print(split_rows(records))
    missing = sorted(set(range(SPLITS)) - {r["data"]["split"] for r in records})
    print(f"not run or not stored: splits {missing}" if missing else "every split stored")
    failed = [f"{r['data']['split']} ({r['stop_reason']})" for r in records if not r["converged"]]
    print(f"stored NOT converged (left out of the table): splits {', '.join(failed)}" if failed
          else "every stored split converged")  # fmt: skip
    if not done:
        print("no converged split: no table")
        return
    results = {name: {"reference HMC": {
        "ll": [r["recomputed"]["ll"] for r in done],
        "rmse": [r["recomputed"]["rmse"] for r in done],
        "z2": [r["recomputed"]["z2"] for r in done]}}}  # fmt: skip
    print(
        f"\nmean ± SE over the {len(done)} converged split(s) "
        f"({', '.join(str(r['data']['split']) for r in done)}), target units; MC dropout: "
        f"the published mean over all {SPLITS} splits"
    )
    print(split_table(results, columns=[("ll", "LL"), ("rmse", "RMSE")], reference=MC_DROPOUT_LL,
                      reference_label="LL MC-dropout", width=20))  # fmt: skip
    z2, z2_se = mean_se(results[name]["reference HMC"]["z2"])
    print(f"E[(y - m)^2 / s^2] (1: calibrated): {z2:.3f} ± {z2_se:.3f}")
    mixture = [r["recomputed"]["ll_mixture"] for r in done if "ll_mixture" in r["recomputed"]]
    if len(mixture) == len(done):
        m, se = mean_se(mixture)
        print(f"mixture LL (the BMA's own density, not moment-matched): {m:.3f} ± {se:.3f}")
    if name in MC_DROPOUT_SPLITS:  # Gal's per-split results: paired on the same splits
        gal = MC_DROPOUT_SPLITS[name]
        ll = np.asarray(gal["ll"])
        print(
            f"MC dropout as Gal reports it (mixture LL, mean ± std(ddof=0)/sqrt(n) over his "
            f"{ll.size} splits): {ll.mean():.3f} ± {ll.std() / np.sqrt(ll.size):.3f}; "
            f"RMSE {np.mean(gal['rmse']):.3f}"
        )
        if len(mixture) == len(done):
            mix = np.asarray(mixture)
            print(f"ours the same way (mixture LL, ddof 0, {mix.size} splits): {mix.mean():.3f} ± "
                  f"{mix.std() / np.sqrt(mix.size):.3f}")  # fmt: skip
        for key, label, ours in (
            ("ll", "mixture LL", {r["data"]["split"]: r["recomputed"].get("ll_mixture")
                                  for r in done}),
            ("ll", "LL (moment-matched)", {r["data"]["split"]: r["recomputed"]["ll"]
                                           for r in done}),
            ("rmse", "RMSE", {r["data"]["split"]: r["recomputed"]["rmse"] for r in done}),
        ):  # fmt: skip
            if any(v is None for v in ours.values()):
                continue
            d, se, wins = paired_difference(ours, gal[key])
            better = wins if key == "ll" else len(ours) - wins
            z = d / se if se > 0 else float("nan")
            print(f"{label} minus MC dropout's on the same splits (paired, mean ± SE ddof 1): "
                  f"{d:+.3f} ± {se:.3f} ({z:+.1f} SE), ours better on {better} of "
                  f"{len(ours)} splits")  # fmt: skip
    for line in reference_verdicts(results, method="reference HMC", metric="ll",
                                   reference=MC_DROPOUT_LL, label="LL",
                                   reference_label="MC dropout"):  # fmt: skip
        print(line + (f" (on {len(done)} of {SPLITS} splits)" if len(done) < SPLITS else ""))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--references", default=str(REFERENCES), help="folder of reference records")
    p.add_argument(
        "--pattern",
        default=PATTERN,
        help="file-name pattern of the records, one per split (fnmatch)",
    )
    return p.parse_args(argv)


if __name__ == "__main__":
    main(parse_args())

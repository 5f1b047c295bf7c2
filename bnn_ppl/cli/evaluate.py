"""``bnn-ppl evaluate`` and ``bnn-ppl compare``: read run folders back and tabulate them.

Example:
    >>> from bnn_ppl.cli import main
    >>> main(["compare", "runs/hmc"])  # one folder: nothing to compare
    2
"""

# Notes:
#
# ``evaluate`` prints a run's test metrics (of the BMA, and per chain), its sampler summary,
# weight- and function-space R-hat/ESS (with >= 2 chains) and the test values that fail R-hat <=
# 1.01 or bulk ESS >= 400 with the chain furthest from the others on them
# (:mod:`bnn_ppl.diagnostics.slow_values`), and writes ``reliability.png``,
# ``rhat.png`` and ``evaluation.json``. ``compare`` scores runs on the same test set against the
# first: accuracy, NLL, top-1 agreement and total variation (RMSE between BMA means for
# regression).
#
# ::
#
#     bnn-ppl evaluate runs/hmc            # metrics table, R-hat, reliability.png, rhat.png
#     bnn-ppl compare runs/hmc runs/ens    # agreement and total variation with the first run

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np

import bnn_ppl as bp
from bnn_ppl import runs
from bnn_ppl.cli.console import printer, table, verdict
from bnn_ppl.cli.settings import CLIError
from bnn_ppl.diagnostics.slow_values import LISTED, describe_laggards, laggards  # (loads JAX)
from bnn_ppl.io import write_json
from bnn_ppl.metrics.comparison import closeness
from bnn_ppl.validation import InputError, InputValueError

if TYPE_CHECKING:
    from bnn_ppl import runs
    from bnn_ppl.cli.parser import CompareOptions, EvaluateOptions

# bnn_ppl.runs and bnn_ppl.plots (which load JAX and matplotlib) are imported inside the commands.


def _convergence_json(conv: Any, by: str) -> dict[str, Any]:
    return {
        "fraction_above": {str(t): conv.fraction_above(t) for t in bp.diagnostics.THRESHOLDS},
        "groups": [
            {
                "name": g.name,
                "size": g.size,
                "rhat_p50_p90_p99_max": list(g.rhat_quantiles),
                "fraction_above": {str(t): v for t, v in g.frac_above.items()},
                "ess_bulk_min": g.ess_bulk_min,
                "ess_bulk_median": g.ess_bulk_median,
                "ess_tail_min": g.ess_tail_min,
            }
            for g in conv.summary(by)
        ],
    }


def _diagnostics(run: runs.Run) -> tuple[dict[str, Any], Any, Any]:
    """(JSON summary, weight-space and function-space Convergence or None, None)."""
    method = run.record.get("method", "?")
    if not run.chains:
        kind = "draws from the fitted guide" if method == "svi" else "ensemble members"
        reason = (
            f"method {method}: the {kind} are independent, not Markov chains; R-hat does not apply"
        )
        return {"skipped": reason}, None, None
    if run.num_chains < 2:
        reason = "1 chain: R-hat compares chains and needs at least 2 (re-run with --num-chains 2)"
        return {"skipped": reason}, None, None
    # function space: the saved per-draw predictions' location (probabilities, or predictive
    # means for regression), what bp.diagnostics.function_space computes, without re-running
    # the network or reloading the data
    try:
        values = np.asarray(bp.likelihoods.location(run.predictions))
        ws = bp.diagnostics.weight_space(run.samples or {})
        fs = bp.diagnostics.convergence({"predictive": values})
    except InputError as e:  # e.g. NaN draws; a bug elsewhere keeps its traceback
        return {"skipped": f"diagnostics undefined: {e}"}, None, None

    lags = laggards(values)  # the values failing R-hat <= 1.01 / bulk ESS >= 400, worst first
    return (
        {
            "weight_space": _convergence_json(ws, "layer"),
            "function_space": _convergence_json(fs, "site"),
            "slow_values": describe_laggards(lags, int(np.prod(values.shape[2:]))),
            "laggards": [g._asdict() for g in lags[:LISTED]],
        },
        ws,
        fs,
    )


def _metrics_rows(run: runs.Run) -> list[tuple[str, dict[str, float]]]:
    rows = [
        (
            f"BMA ({run.num_draws} draws)",
            runs.predictive_metrics(
                runs.flat_draws(run.predictions, run.chains),
                run.targets,
                task=run.task,
                y_std=run.y_std,
            ),
        )
    ]
    if run.chains and run.num_chains > 1:
        for c, pred in enumerate(runs.per_chain(run.predictions)):
            m = runs.predictive_metrics(pred, run.targets, task=run.task, y_std=run.y_std)
            rows.append((f"chain {c} BMA", m))
    return rows


def cmd_evaluate(ns: EvaluateOptions) -> int:
    from bnn_ppl import plots  # start-up time: matplotlib loads for evaluate, not compare

    say = printer(ns.quiet)
    num_bins = ns.num_bins
    if isinstance(num_bins, bool) or not isinstance(num_bins, int) or num_bins < 1:
        raise InputValueError(f"--num-bins must be an integer >= 1, got {num_bins!r}.")
    run = runs.load_run(ns.run, samples=True)
    if run.task == "classification" and num_bins > len(run.targets):
        raise InputValueError(
            f"--num-bins {num_bins} exceeds the {len(run.targets)} test rows of {ns.run}; a "
            "reliability diagram needs at most one bin per row (default 15)."
        )
    out = ns.out or run.path
    dataset, method = runs.dataset_name(run), runs.method_name(run)
    print(
        f"{run.path}: {method} on {dataset} ({run.task}), {run.num_draws} draws"
        + (f" in {run.num_chains} chains" if run.chains else "")
    )

    summary = run.record.get("summary", {})
    conv = summary.get("convergence")  # a reference_hmc run's own verdict, by its rule
    if conv:
        print(f"reference run: {verdict(conv)}"
              + (f"; {summary['not_converged']}" if summary.get("not_converged") else ""))
    rows = _metrics_rows(run)
    keys = list(rows[0][1])
    print()
    print(table(["predictive", *keys], [[name, *(m[k] for k in keys)] for name, m in rows]))
    chains = summary.get("chains") or []
    if chains:
        print()
        print(
            table(
                ["chain", "accept prob", "divergences", "step size"],
                [
                    [
                        str(r["chain"]),
                        r["accept_prob"],
                        str(r["divergences"]),
                        f"{r['step_size']:.3g}",
                    ]
                    for r in chains
                ],
            )
        )

    diag, ws, fs = _diagnostics(run)
    print()
    if ws is None:
        print(f"R-hat skipped: {diag['skipped']}")
    else:
        print("weight space (rank-normalised split R-hat, per layer):")
        print(ws.table("layer"))
        print("function space (predictions on the test set):")
        print(fs.table("site"))
        print(f"slow values: {diag['slow_values']}")

    written = []
    if run.task == "classification":
        avg = np.asarray(bp.bma(runs.flat_draws(run.predictions, run.chains)))
        curve = bp.metrics.reliability_curve(avg, run.targets, num_bins=num_bins)
        fig = plots.reliability_diagram(
            {f"{method} BMA": curve}, title=f"{dataset}: {method}, test set"
        )
        plots.save_figure(fig, os.path.join(out, "reliability.png"))
        written.append("reliability.png")
    if ws is not None:
        fig = plots.rhat_histograms({"weight space": ws, "function space": fs})
        plots.save_figure(fig, os.path.join(out, "rhat.png"))
        written.append("rhat.png")
    write_json(
        os.path.join(out, runs.EVALUATION),
        {
            "run": run.path,
            "method": method,
            "dataset": dataset,
            "task": run.task,
            "metrics": {name: m for name, m in rows},
            "sampler": chains,
            "diagnostics": diag,
            "plots": written,
        },
    )
    written.append(runs.EVALUATION)
    say(f"\nwrote {', '.join(os.path.join(out, w) for w in written)}")
    return 0


def cmd_compare(ns: CompareOptions) -> int:

    say = printer(ns.quiet)
    if len(ns.runs) < 2:
        raise CLIError("compare needs at least two run folders (the first is the reference).")
    loaded = [runs.load_run(path) for path in ns.runs]
    runs.check_comparable(loaded)
    ref = loaded[0]
    ref_flat = runs.flat_draws(ref.predictions, ref.chains)
    results = []
    for run in loaded:
        flat = runs.flat_draws(run.predictions, run.chains)
        row: dict[str, Any] = {
            "run": run.path,
            "method": runs.method_name(run),
            "draws": run.num_draws,
            **runs.predictive_metrics(flat, run.targets, task=run.task, y_std=run.y_std),
            **closeness(flat, ref_flat, y_std=run.y_std),
        }
        results.append(row)
    if ref.task == "classification":
        columns = {"accuracy": "accuracy", "nll": "NLL", "agreement": "agreement", "tv": "TV"}
    else:
        columns = {"rmse": "RMSE", "nll": "NLL", "rmse_vs_reference": "RMSE vs ref mean"}
    dataset = runs.dataset_name(ref)
    say(f"test set of {dataset} ({len(ref.targets)} rows); reference: {ref.path}")
    print(
        table(
            ["run", "method", "draws", *columns.values()],
            [[r["run"], r["method"], str(r["draws"]), *(r[k] for k in columns)] for r in results],
        )
    )
    if ns.out:
        write_json(
            ns.out, {"reference": ref.path, "dataset": dataset, "task": ref.task, "runs": results}
        )
        say(f"wrote {ns.out}")
    return 0

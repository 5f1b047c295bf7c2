"""``bnn-ppl evaluate`` and ``bnn-ppl compare``: read run folders back and tabulate them.

Example:
    >>> from bnn_ppl.cli import main
    >>> main(["compare", "runs/hmc"])  # one folder: nothing to compare
    2
"""

# Notes:
#
# ``evaluate`` prints a run's test metrics (of the BMA, and per chain), its sampler summary,
# weight- and function-space R-hat/ESS (with >= 2 chains), the test values that fail the run's
# rule with the chain furthest from the others on them (:mod:`bnn_ppl.diagnostics.slow_values`)
# and a verdict by that rule (:func:`rule_for`, :func:`judge`: R-hat <= 1.01 and bulk ESS >= 100
# per chain for an ordinary run, a reference run's own thresholds), with the draws per chain
# that would meet it; it writes ``reliability.png``, ``rhat.png`` and ``evaluation.json``. It
# holds the run folder's :class:`~bnn_ppl.runs.FolderLock` throughout, so it never reads or
# writes a folder while a run writes it.
# ``compare`` scores runs on the same test set against the first: accuracy, NLL, top-1
# agreement and total variation (RMSE between BMA means for regression).
#
# ::
#
#     bnn-ppl evaluate runs/hmc            # metrics table, R-hat, reliability.png, rhat.png
#     bnn-ppl compare runs/hmc runs/ens    # agreement and total variation with the first run

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

import bnn_ppl as bp
from bnn_ppl import runs
from bnn_ppl.cli.console import count, printer, table, verdict
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


ESS_PER_CHAIN = 100
"""The ordinary rule's bulk ESS per chain: ArviZ's recommendation (Vehtari et al. 2021: bulk
ESS of at least 100 per chain, e.g. 400 for 4 chains, for reliable R-hat and posterior means)."""
SHARE = 0.99  # the ordinary rule's share of test values that must meet it


class Rule(NamedTuple):
    """How ``evaluate`` judges a run's test values: R-hat at most ``max_rhat`` and bulk ESS at
    least ``min_ess`` (all chains together) for at least ``min_share`` of them; ``name`` and
    ``why`` say which rule it is and where its thresholds come from."""

    name: str
    max_rhat: float
    min_ess: float
    min_share: float
    why: str

    def describe(self) -> str:
        return (
            f"{self.name} rule: R-hat <= {self.max_rhat:g} and bulk ESS >= {self.min_ess:g} "
            f"({self.why}) for at least {self.min_share:.0%} of the test values"
        )


def rule_for(run: runs.Run) -> Rule:
    """The reference rule (its own thresholds) for a reference_hmc run; for any other chain
    run R-hat <= 1.01 and bulk ESS >= :data:`ESS_PER_CHAIN` per chain, for :data:`SHARE` of
    the test values."""
    if run.record.get("method") == "reference_hmc" or run.config.get("method") == "reference_hmc":
        c = bp.config.ReferenceHMCConfig()
        get = run.config.get
        return Rule(
            "reference-run",
            float(get("max_rhat", c.max_rhat)),
            float(get("min_ess", c.min_ess)),
            float(get("min_share", c.min_share)),
            "the run's own stopping rule",
        )
    k = run.num_chains
    return Rule(
        "ordinary-run",
        1.01,
        float(ESS_PER_CHAIN * k),
        SHARE,
        f"{ESS_PER_CHAIN} per chain x {count(k, 'chain')}, ArviZ's recommendation",
    )


def _round_up(x: float) -> int:
    """``x`` rounded up to two significant figures (a budget, not a measurement)."""
    if x <= 100:
        return int(math.ceil(x))
    scale = 10 ** (int(math.floor(math.log10(x))) - 1)
    return int(math.ceil(x / scale) * scale)


def judge(values: Any, rule: Rule) -> dict[str, Any]:
    """The verdict on ``(chains, draws, ...)`` test values by ``rule``: ``met``, the shares
    meeting each threshold, the median bulk ESS, the draws per chain that would meet the rule
    at this run's rate (:func:`~bnn_ppl.inference.reference.stopping.project_convergence`) and
    ``text``, one sentence that names the rule and what would meet it."""
    # start-up time: JAX loads only when a run is projected
    from bnn_ppl.inference.reference.stopping import FAR, project_convergence, quantity_figures

    a = np.asarray(values, dtype=np.float64)
    chains, n = a.shape[:2]
    flat = a.reshape(chains, n, -1)
    rhat, ess, constant = quantity_figures(flat)
    size = flat.shape[-1]
    rhat, ess = bp.diagnostics.unknown_as_failing(rhat, ess)
    share_rhat = (np.sum(rhat <= rule.max_rhat) + constant) / size
    share_ess = (np.sum(ess >= rule.min_ess) + constant) / size
    met = bool(share_rhat >= rule.min_share and share_ess >= rule.min_share)
    out: dict[str, Any] = {
        "rule": rule._asdict(),
        "met": met,
        "share_rhat_ok": float(share_rhat),
        "share_ess_ok": float(share_ess),
        "ess_bulk_median": float(np.median(ess)) if ess.size else None,
        "draws_per_chain": int(n),
        "draws_needed_per_chain": None,
        "draws_for_rhat": None,
        "draws_for_ess": None,
    }
    head = f"verdict ({rule.describe()}): "
    if met:
        out["text"] = head + f"met by {share_rhat:.0%} (R-hat) and {share_ess:.0%} (ESS) of {size}."
        return out
    p = project_convergence(
        flat, max_rhat=rule.max_rhat, min_share=rule.min_share, min_ess=rule.min_ess
    )
    text = (
        f"NOT met: {share_rhat:.0%} of the {size} values meet R-hat and {share_ess:.0%} bulk ESS "
        f"(median bulk ESS {out['ess_bulk_median']:.0f} from {chains} x {n} draws)"
    )
    if n * chains < rule.min_ess:
        text += f"; {n} draws per chain cannot reach it even if every draw were independent"
    if math.isfinite(p.draws_needed):
        need = _round_up(p.draws_needed)
        out["draws_needed_per_chain"] = need
        out["draws_for_rhat"], out["draws_for_ess"] = p.draws_for_rhat, p.draws_for_ess
        text += (
            f". To meet it, run about {need:,} draws per chain at this run's rate "
            f"(R-hat needs {_round_up(p.draws_for_rhat):,}, bulk ESS "
            f"{_round_up(p.draws_for_ess):,})"
        )
        if p.draws_needed > FAR * n:
            text += f": an extrapolation over a factor of {p.draws_needed / n:.0f}, a rough guide"
    else:
        text += ". Some values have no effective draws: the chains do not move on them"
    out["text"] = head + text + "."
    return out


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

    rule = rule_for(run)
    # the values failing the rule's R-hat or bulk ESS, worst first
    lags = laggards(values, max_rhat=rule.max_rhat, min_ess=rule.min_ess)
    size = int(np.prod(values.shape[2:]))
    return (
        {
            "weight_space": _convergence_json(ws, "layer"),
            "function_space": _convergence_json(fs, "site"),
            "verdict": judge(values, rule),
            "slow_values": describe_laggards(
                lags, size, max_rhat=rule.max_rhat, min_ess=rule.min_ess
            ),
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
    # the run folder's lock, from the first read to the last write: a folder that a run (or
    # another evaluate) holds is refused at once, before anything is read or written
    with runs.FolderLock(ns.run, existing=True) as lock:
        lock.mark()
        return _evaluate(ns, num_bins, say, plots)


def _evaluate(ns: EvaluateOptions, num_bins: int, say: Any, plots: Any) -> int:
    """``evaluate`` under the run folder's lock."""
    run = runs.load_run(ns.run, samples=True)
    if run.task == "classification" and num_bins > len(run.targets):
        raise InputValueError(
            f"--num-bins {num_bins} exceeds the {len(run.targets)} test rows of {ns.run}; a "
            "reliability diagram needs at most one bin per row (default 15)."
        )
    out = ns.out or run.path
    dataset, method = runs.dataset_name(run), runs.method_name(run)
    print(
        f"{run.path}: {method} on {dataset} ({run.task}), {count(run.num_draws, 'draw')}"
        + (f" in {count(run.num_chains, 'chain')}" if run.chains else "")
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
        print()
        print(diag["verdict"]["text"])

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
        columns = {"rmse": "RMSE", "nll": "NLL", "mean_sq_std_residual": "E[(y-m)²/s²]",
                   "rmse_vs_reference": "RMSE vs ref mean"}  # fmt: skip
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

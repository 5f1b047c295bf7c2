"""Benchmark results over data splits: mean ± standard error per data set and method, beside a
published number, as a table, a bar chart and a verdict.
"""

# Notes:
#
# The UCI regression protocol (Hernandez-Lobato & Adams 2015; Gal & Ghahramani 2016) reports every
# test metric as its mean ± standard error over the standard splits. :func:`mean_se` computes
# that pair, :func:`split_table` prints one row per data set, :func:`split_bars` draws them and
# :func:`reference_verdicts` says whether a method beats the published number;
# :data:`MC_DROPOUT_LL` holds the published MC-dropout test log-likelihoods to set beside ours.

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from bnn_ppl.validation import InputValueError

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["MC_DROPOUT_LL", "mean_se", "reference_verdicts", "split_bars", "split_table"]

MC_DROPOUT_LL: dict[str, float] = {
    "energy": -1.21,
    "yacht": -1.25,
    "concrete": -2.93,
    "boston": -2.40,
    "wine-red": -0.93,
}
"""MC-dropout test log-likelihood (original units), mean over the 20 standard splits: Gal's
DropoutUncertaintyExps README (https://github.com/yaringal/DropoutUncertaintyExps, commit
6eb4497), column "Grid Search LL (new)" (40 epochs, grid-searched dropout rate and tau)."""

Results = Mapping[str, Mapping[str, Mapping[str, Sequence[float]]]]
"""data set -> method -> metric -> one value per split."""


def mean_se(values: Sequence[float]) -> tuple[float, float]:
    """Mean and standard error of the mean (``std(ddof=1) / sqrt(n)``; nan for one value).

    Raises:
        ValueError: no values.

    Example:
        >>> from bnn_ppl.metrics.splits import MC_DROPOUT_LL, mean_se, split_table
        >>> [round(v, 4) for v in mean_se([1.0, 2.0, 3.0])]       # mean, std(ddof=1) / sqrt(3)
        [2.0, 0.5774]
        >>> results = {"yacht": {"HMC": {"ll": [-1.0, -1.2]}, "SVI": {"ll": [-3.0]}}}
        >>> print(split_table(results, columns=[("ll", "LL")], reference=MC_DROPOUT_LL,
        ...                   reference_label="LL MC-dropout"))
        dataset             LL HMC         LL SVI  LL MC-dropout
        yacht         -1.10 ± 0.10          -3.00          -1.25
    """
    v = np.asarray(values, dtype=float)
    if v.size == 0:
        raise InputValueError("values must hold at least one number (one per split), got none.")
    se = float(v.std(ddof=1) / np.sqrt(v.size)) if v.size > 1 else float("nan")
    return float(v.mean()), se


def _cell(values: Sequence[float]) -> str:
    m, se = mean_se(values)
    return f"{m:.2f} ± {se:.2f}" if np.isfinite(se) else f"{m:.2f}"


def split_table(
    results: Results,
    *,
    columns: Sequence[tuple[str, str]],
    reference: Mapping[str, float] | None = None,
    reference_label: str = "published",
    width: int = 15,
) -> str:
    """One row per data set: for every ``(metric, label)`` of ``columns``, one column per method
    (``"label method"``: mean ± SE over the splits, 2 decimals; the mean alone for one split),
    then the ``reference`` value of the data set (``-`` where it has none).

    Args:
        results: data set -> method -> metric -> one value per split (methods in the order of
            the first data set).
        columns: ``(metric key, column label)`` pairs, e.g. ``[("rmse", "RMSE"), ("ll", "LL")]``.
        reference: data set -> a published value to print last (omitted: no such column).
        reference_label: the header of that column.
        width: characters per column.
    """
    if not results:
        raise InputValueError("results must hold at least one data set, got none.")
    methods = list(next(iter(results.values())))
    head = f"{'dataset':<10}" + "".join(f"{label + ' ' + m:>{width}}"
                                        for _, label in columns for m in methods)  # fmt: skip
    if reference is not None:
        head += f"{reference_label:>{width}}"
    lines = [head]
    for name, per_method in results.items():
        row = f"{name:<10}" + "".join(f"{_cell(per_method[m][key]):>{width}}"
                                      for key, _ in columns for m in methods)  # fmt: skip
        if reference is not None:
            ref = reference.get(name)
            row += f"{(f'{ref:.2f}' if ref is not None else '-'):>{width}}"
        lines.append(row)
    return "\n".join(lines)


def split_bars(
    results: Results,
    metric: str,
    *,
    reference: Mapping[str, float] | None = None,
    reference_label: str = "published",
    ylabel: str | None = None,
) -> Figure:
    """A bar chart of ``metric``: per data set, one bar per method (mean ± SE over the splits;
    no error bar for one split), then the ``reference`` value as a black bar (none: omitted).
    Built with ``Figure`` (no pyplot); save it with :func:`bnn_ppl.plots.save_figure`.

    Example:
        >>> fig = split_bars({"yacht": {"HMC": {"ll": [-1.0, -1.2]}}}, "ll",
        ...                  reference=MC_DROPOUT_LL, reference_label="MC dropout")
        >>> [round(float(p.get_height()), 2) for p in fig.axes[0].patches]
        [-1.1, -1.25]
    """
    from matplotlib.figure import Figure

    if not results:
        raise InputValueError("results must hold at least one data set, got none.")
    names, methods = list(results), list(next(iter(results.values())))
    fig = Figure(figsize=(1.6 * len(names) + 3, 3.6), layout="constrained")
    ax = fig.add_subplot()
    width, pos = 0.8 / (len(methods) + (reference is not None)), np.arange(len(names))
    for i, m in enumerate(methods):
        stats = [mean_se(results[n][m][metric]) for n in names]
        ax.bar(pos + i * width, [s[0] for s in stats], width,
               yerr=[s[1] if np.isfinite(s[1]) else 0 for s in stats], label=m)  # fmt: skip
    if reference is not None:
        ax.bar(pos + len(methods) * width, [reference.get(n, np.nan) for n in names], width,
               color="k", label=reference_label)  # fmt: skip
    ax.set_xticks(pos + 0.4 - width / 2, names)
    ax.set_ylabel(ylabel or metric)
    ax.axhline(0, color="grey", lw=0.5)
    ax.legend(fontsize=8)
    return fig


def reference_verdicts(
    results: Results,
    *,
    method: str,
    metric: str,
    reference: Mapping[str, float],
    label: str | None = None,
    reference_label: str = "published",
) -> list[str]:
    """Per data set with a ``reference`` value: whether ``method``'s mean ``metric`` over the
    splits beats it (higher is better, as for a log-likelihood), in words.

    Example:
        >>> reference_verdicts({"yacht": {"HMC": {"ll": [-1.0, -1.2]}}, "power": {"HMC": {
        ...     "ll": [-2.9]}}}, method="HMC", metric="ll", reference=MC_DROPOUT_LL,
        ...     label="LL", reference_label="MC dropout")
        ['yacht: HMC LL -1.10 beats MC dropout -1.25']
    """
    lines = []
    for name, per_method in results.items():
        if name in reference:
            mean = mean_se(per_method[method][metric])[0]
            verdict = "beats" if mean > reference[name] else "does not beat"
            lines.append(f"{name}: {method} {label or metric} {mean:.2f} {verdict} "
                         f"{reference_label} {reference[name]:.2f}")  # fmt: skip
    return lines

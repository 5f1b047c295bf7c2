"""Benchmark results over data splits: mean ± standard error per data set and method, beside a
published number, as a table, a bar chart and a verdict.
"""

# Notes:
#
# The UCI regression protocol (Hernandez-Lobato & Adams 2015; Gal & Ghahramani 2016) reports every
# test metric as its mean ± standard error over the standard splits. :func:`mean_se` computes
# that pair, :func:`split_table` prints one row per data set, :func:`split_bars` draws them and
# :func:`reference_verdicts` says whether a method beats the published number;
# :data:`MC_DROPOUT_LL` holds the published MC-dropout test log-likelihoods to set beside ours,
# :data:`MC_DROPOUT_SPLITS` its per-split values for :func:`paired_difference`.

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from bnn_ppl.validation import InputValueError

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "MC_DROPOUT_LL",
    "MC_DROPOUT_SPLITS",
    "mean_se",
    "paired_difference",
    "reference_verdicts",
    "split_bars",
    "split_table",
]

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

MC_DROPOUT_SPLITS: dict[str, dict[str, tuple[float, ...]]] = {
    "boston": {
        "ll": (
            -2.443889, -2.448347, -2.244970, -2.346867,
            -2.734608, -2.178829, -2.144628, -2.484117,
            -2.634877, -2.850389, -2.608335, -2.162721,
            -2.299501, -2.385535, -2.239866, -2.224863,
            -2.382306, -2.375882, -2.374039, -2.474142,
        ),
        "rmse": (
            2.745676, 2.640772, 2.349843, 2.661657,
            3.854153, 1.996020, 1.859032, 3.595565,
            3.739696, 4.973758, 3.757496, 2.247232,
            2.293467, 2.983381, 2.159991, 2.050627,
            2.807166, 2.896462, 2.627676, 3.832783,
        ),
    },
    "concrete": {
        "ll": (
            -3.049893, -2.930489, -2.791703, -2.924963,
            -3.092403, -2.830087, -3.028778, -2.987481,
            -2.869217, -2.976233, -2.710934, -2.817134,
            -2.882523, -2.797704, -3.050021, -2.932490,
            -2.956410, -2.895815, -3.127512, -3.081328,
        ),
        "rmse": (
            5.438703, 4.673399, 3.760426, 4.535901,
            5.561922, 3.988152, 5.878223, 5.170036,
            4.552494, 4.880133, 3.768809, 4.458397,
            4.447321, 3.818972, 5.814562, 4.887840,
            4.543333, 4.449826, 5.917640, 5.983116,
        ),
    },
    "energy": {
        "ll": (
            -1.173607, -1.210391, -1.176010, -1.209791,
            -1.221295, -1.202420, -1.186327, -1.204904,
            -1.244948, -1.191703, -1.260580, -1.206046,
            -1.251423, -1.204716, -1.178663, -1.222189,
            -1.227810, -1.201544, -1.221946, -1.234026,
        ),
        "rmse": (
            0.435287, 0.537972, 0.440206, 0.534191,
            0.568367, 0.507284, 0.468202, 0.524113,
            0.628359, 0.484224, 0.632783, 0.532371,
            0.643605, 0.516194, 0.463108, 0.580331,
            0.593854, 0.524943, 0.576865, 0.585076,
        ),
    },
    "wine-red": {
        "ll": (
            -0.927774, -0.909881, -1.065034, -0.899762,
            -0.843662, -0.950040, -0.972570, -0.995097,
            -0.837671, -0.960299, -0.920368, -0.963501,
            -1.013899, -0.923216, -0.907020, -0.831179,
            -0.923515, -0.876169, -0.907150, -0.933986,
        ),
        "rmse": (
            0.610026, 0.609150, 0.699378, 0.603055,
            0.564092, 0.633412, 0.641207, 0.684125,
            0.577029, 0.639495, 0.643206, 0.637920,
            0.671812, 0.606002, 0.603662, 0.558695,
            0.615187, 0.592011, 0.625149, 0.621567,
        ),
    },
    "yacht": {
        "ll": (
            -1.311006, -1.201944, -1.138653, -1.247666,
            -1.221854, -1.220454, -1.171420, -1.384943,
            -1.183758, -1.159242, -1.353637, -1.344309,
            -1.263200, -1.262759, -1.289186, -1.214368,
            -1.189999, -1.253364, -1.241088, -1.350116,
        ),
        "rmse": (
            0.885647, 0.605791, 0.366809, 0.743944,
            0.537741, 0.576525, 0.452943, 0.949718,
            0.486062, 0.388262, 0.796846, 1.258799,
            0.665679, 0.604506, 0.638304, 0.497681,
            0.486522, 0.712831, 0.686612, 0.984274,
        ),
    },
}
"""MC dropout's per-split test results, one value per standard split 0-19 (the split files'
order): ``"ll"`` its test log-likelihood (the log of the mean over dropout samples of the
Gaussian densities, original units) and ``"rmse"`` its MC test RMSE. From Gal's
DropoutUncertaintyExps (commit 6eb4497), ``UCI_Datasets/<set>/results/test_ll_100_xepochs_1_
hidden_layers.txt`` and ``test_MC_rmse_...``: the runs behind :data:`MC_DROPOUT_LL` (their
means round to its values; concrete's is -2.937 against the README's -2.93). Pair them with
our splits by index through :func:`paired_difference`."""

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


def paired_difference(
    ours: Mapping[int, float], theirs: Sequence[float]
) -> tuple[float, float, int]:
    """Mean and standard error of ``ours[k] - theirs[k]`` over the splits ``k`` in ``ours``
    (a paired comparison on the same splits), and how many of them are positive.

    Args:
        ours: split index -> our value on that split.
        theirs: one value per split, indexed by split (e.g. ``MC_DROPOUT_SPLITS[name]["ll"]``).

    Raises:
        InputValueError: no splits, or a split index outside ``theirs``.

    Example:
        >>> d, se, wins = paired_difference({0: -2.3, 1: -2.5}, [-2.4, -2.45])
        >>> round(d, 3), round(se, 3), wins
        (0.025, 0.075, 1)
    """
    if not ours:
        raise InputValueError("ours must hold at least one split's value, got none.")
    bad = [k for k in ours if not 0 <= k < len(theirs)]
    if bad:
        raise InputValueError(
            f"ours has split(s) {bad} outside the {len(theirs)} values of theirs: "
            "pair values of the same standard splits."
        )
    diff = [ours[k] - theirs[k] for k in sorted(ours)]
    m, se = mean_se(diff)
    return m, se, sum(d > 0 for d in diff)


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

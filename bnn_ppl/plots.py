"""Figures: reliability diagrams, R-hat in weight vs function space, 1-D regression bands,
metrics against a setting.
"""

# Notes:
#
# Every function returns a :class:`matplotlib.figure.Figure` built with the object-oriented API
# (``Figure(...)``, not :mod:`matplotlib.pyplot`): nothing here selects a backend, opens a window,
# calls ``plt.show`` or registers the figure with pyplot's global state, so the module is safe in
# scripts, tests, notebooks and worker processes alike. :func:`save_figure` renders a figure to
# PNG through :func:`bnn_ppl.io.atomic_write`, so a reader never sees a half-written image.

from __future__ import annotations

import math
import os
from collections.abc import Mapping

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import NullLocator

from bnn_ppl._compat import arviz
from bnn_ppl.io import atomic_write
from bnn_ppl.metrics import ReliabilityCurve
from bnn_ppl.validation import InputTypeError, InputValueError

__all__ = [
    "reliability_diagram",
    "rhat_histograms",
    "regression_band",
    "metric_curves",
    "trace_plot",
    "rank_plot",
    "save_figure",
]

_CURVE_FIELDS = ReliabilityCurve._fields
PERFECT_LABEL = "perfect calibration"


def _as_numpy(curve: object, name: str) -> dict[str, np.ndarray]:
    """The fields of a ReliabilityCurve-like record as 1-D NumPy arrays of equal length."""
    missing = [f for f in _CURVE_FIELDS if not hasattr(curve, f)]
    if missing:
        raise InputTypeError(
            f"curves[{name!r}] must be a bnn_ppl.metrics.ReliabilityCurve (from "
            f"bnn_ppl.metrics.reliability_curve); got {type(curve).__name__} lacking {missing}."
        )
    out = {f: np.asarray(getattr(curve, f), dtype=float) for f in _CURVE_FIELDS}
    shapes = {f: a.shape for f, a in out.items()}
    if len(set(shapes.values())) != 1 or out["count"].ndim != 1:
        raise InputValueError(
            f"curves[{name!r}] must have 1-D fields of one length (num_bins,); got {shapes}."
        )
    return out


def _root_figure(ax: Axes) -> Figure:
    fig = ax.figure
    while not isinstance(fig, Figure):  # a SubFigure: walk up to the Figure that owns it
        fig = fig.figure
    return fig


def reliability_diagram(
    curves: Mapping[str, ReliabilityCurve],
    *,
    ax: Axes | None = None,
    title: str | None = None,
) -> Figure:
    """Reliability diagram: accuracy against top-1 confidence per bin, one line per method.

    As in the calibration plots of Heek & Kalchbrenner (2019, ATMC): confidence on the x axis,
    accuracy on the y axis, the diagonal for perfect calibration; points below the diagonal are
    over-confident. Each method's non-empty bins are drawn as markers joined by a line at
    (mean confidence, accuracy); empty bins (NaN, count 0) are skipped. Below it, a panel shows
    how many examples fell into each bin (grouped bars, one colour per method, log scale), so
    that bins holding a handful of examples are not over-read.

    Args:
        curves: method name -> :class:`~bnn_ppl.metrics.ReliabilityCurve` (from
            :func:`bnn_ppl.metrics.reliability_curve`), drawn in the mapping's order.
        ax: draw into these axes instead of a new figure; the counts then go on a twin y axis
            (right) as a light bar overlay, and the figure containing ``ax`` is returned.
        title: title of the reliability panel (default none).

    Returns:
        The :class:`~matplotlib.figure.Figure` (new unless ``ax`` was given). The reliability
        axes hold one line per method (label = method name) followed by the diagonal (label
        ``"perfect calibration"``).

    Raises:
        ValueError: ``curves`` is empty, or a curve's fields differ in length.
        TypeError: a value is not a ReliabilityCurve.

    Example:
        >>> import numpy as np
        >>> import bnn_ppl as bp
        >>> probs = np.array([[0.9, 0.1], [0.8, 0.2], [0.4, 0.6]])
        >>> curve = bp.metrics.reliability_curve(probs, np.array([0, 1, 1]), num_bins=4)
        >>> fig = reliability_diagram({"A": curve})
        >>> top = fig.axes[0]
        >>> [line.get_label() for line in top.get_lines()]
        ['A', 'perfect calibration']
        >>> top.get_lines()[0].get_xdata().size   # 2 of the 4 bins hold examples
        2
    """
    if not isinstance(curves, Mapping):
        raise InputTypeError(
            f"curves must be a mapping of method name -> ReliabilityCurve; got "
            f"{type(curves).__name__}."
        )
    if not curves:
        raise InputValueError("curves is empty; pass at least one method name -> ReliabilityCurve.")
    data = {str(name): _as_numpy(c, str(name)) for name, c in curves.items()}

    if ax is None:
        fig = Figure(figsize=(5.0, 6.0), layout="constrained")
        top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=(3, 1))
        overlay = False
    else:
        fig = _root_figure(ax)
        top, bottom = ax, ax.twinx()
        overlay = True

    num_methods = len(data)
    for i, (name, c) in enumerate(data.items()):
        keep = (c["count"] > 0) & np.isfinite(c["confidence"]) & np.isfinite(c["accuracy"])
        (line,) = top.plot(
            c["confidence"][keep],
            c["accuracy"][keep],
            marker="o",
            markersize=4,
            label=name,
            clip_on=False,
        )
        # Bars: the bin's extent split into one slot per method (bins of equal-mass curves
        # without finite bounds, i.e. empty ones, are skipped with the rest).
        lo, hi = c["bin_lower"], c["bin_upper"]
        bars = keep & np.isfinite(lo) & np.isfinite(hi)
        width = (hi[bars] - lo[bars]) / num_methods
        bottom.bar(
            lo[bars] + i * width,
            c["count"][bars],
            width=width,
            align="edge",
            color=line.get_color(),
            alpha=0.25 if overlay else 0.8,
            label=name,
        )
    top.plot([0.0, 1.0], [0.0, 1.0], linestyle="--", color="0.5", label=PERFECT_LABEL)

    top.set_xlim(0.0, 1.0)
    top.set_ylim(0.0, 1.0)
    top.set_ylabel("accuracy")
    top.legend(loc="best")
    if title is not None:
        top.set_title(title)
    if overlay:
        top.set_xlabel("confidence")
        bottom.set_ylabel("examples per bin")
        bottom.set_zorder(top.get_zorder() - 1)  # bars behind the curves
        top.patch.set_visible(False)
    else:
        top.grid(alpha=0.3)
        bottom.set_xlabel("confidence (top-1 probability)")
        bottom.set_ylabel("count")
        if any(np.any(c["count"] > 0) for c in data.values()):
            bottom.set_yscale("log")
        bottom.grid(alpha=0.3)
    return fig


_RHAT_TICKS = (0.9, 0.95, 0.98, 0.99, 1.0, 1.01, 1.02, 1.05, 1.1, 1.2, 1.5, 2.0, 3.0, 5.0, 10.0,
               20.0, 50.0, 100.0, 1e3, 1e4, 1e5, 1e6)  # fmt: skip


def rhat_ticks(lo: float, hi: float, *, most: int = 7) -> list[float]:
    """Plain R-hat tick values between ``lo`` and ``hi`` on a log axis, at least a ninth of
    the axis apart (their labels never overlap), 1.01 and 1.1 first, at most ``most``.

    >>> rhat_ticks(0.99, 1.25)
    [1.0, 1.05, 1.1, 1.2]
    """
    span = math.log(hi / lo)
    gap = span / 9
    inside = [t for t in _RHAT_TICKS if lo <= t <= hi]
    chosen: list[float] = []
    for t in sorted(inside, key=lambda t: (t not in (1.0, 1.1, 1.01), abs(math.log(t)))):
        if len(chosen) < most and all(abs(math.log(t / c)) >= gap for c in chosen):
            chosen.append(t)
    return sorted(chosen)


def rhat_histograms(
    spaces: Mapping[str, np.ndarray | object],
    *,
    thresholds: tuple[float, ...] = (1.01, 1.1),
    bins: int = 40,
) -> Figure:
    """Histograms of R-hat per space on a log axis, with vertical lines at ``thresholds``.

    The figure of Izmailov et al. (2021) and the Stan-forum discussion: weight-space R-hat is
    poor (permutation symmetry) while function-space R-hat is mostly fine.

    Args:
        spaces: name -> R-hat values (any shape) or a :class:`bnn_ppl.diagnostics.Convergence`,
            e.g. ``{"weight space": weight_space(s), "function space": function_space(...)}``.
        thresholds: R-hat values marked with dashed lines (Vehtari's 1.01, Izmailov's 1.1).
        bins: histogram bins (log-spaced over the range of all values).

    Example:
        >>> import os, tempfile
        >>> import numpy as np
        >>> import bnn_ppl as bp
        >>> from bnn_ppl.plots import reliability_diagram, save_figure
        >>> probs = np.array([[0.9, 0.1], [0.8, 0.2], [0.4, 0.6], [0.55, 0.45]])
        >>> labels = np.array([0, 1, 1, 1])
        >>> curve = bp.metrics.reliability_curve(probs, labels, num_bins=5)
        >>> fig = reliability_diagram({"model": curve})
        >>> path = os.path.join(tempfile.mkdtemp(), "reliability.png")
        >>> save_figure(fig, path)
        >>> open(path, "rb").read(8) == b"\\x89PNG\\r\\n\\x1a\\n"
        True
    """
    if not spaces:
        raise InputValueError("spaces is empty; pass e.g. {'weight space': rhat_values}.")
    values = {}
    for name, v in spaces.items():
        arr = np.ravel(v.all_rhat() if hasattr(v, "all_rhat") else np.asarray(v, dtype=float))
        arr = arr[np.isfinite(arr)]
        if arr.size == 0:
            raise InputValueError(f"spaces[{name!r}] has no finite R-hat values.")
        values[name] = arr
    lo = min(min(a.min() for a in values.values()), min(thresholds)) * 0.999
    hi = max(max(a.max() for a in values.values()), max(thresholds)) * 1.001
    # R-hat - 1 spans decades near 1, so bin log(R-hat) on a log-scaled axis
    edges = np.geomspace(max(lo, 0.9), hi, bins + 1)
    fig = Figure(figsize=(6.4, 2.6 * len(values)), layout="constrained")
    axes = fig.subplots(len(values), 1, sharex=True, squeeze=False)[:, 0]
    for ax, (name, arr) in zip(axes, values.items(), strict=True):
        ax.hist(arr, bins=edges, color="C0", alpha=0.8)
        top = ax.get_ylim()[1]
        for j, t in enumerate(thresholds):
            ax.axvline(t, color="k", ls="--", lw=1)
            # stagger the labels: thresholds sit close together on a log axis
            right = math.log(t / edges[0]) > 0.75 * math.log(edges[-1] / edges[0])
            ax.text(
                t,
                top * (0.95 - 0.12 * j),
                f" {t:g}: {np.mean(arr > t):.0%} above ",
                va="top",
                ha="right" if right else "left",  # (inside the axes)
                fontsize=8,
            )
        ax.set_xscale("log")
        ticks = rhat_ticks(edges[0], edges[-1])  # plain numbers, never "1.05 x 10^0"
        ax.set_xticks(ticks, labels=[f"{t:g}" for t in ticks])
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlim(edges[0], edges[-1])
        ax.set_ylabel("count")
        ax.set_title(f"{name} (n = {arr.size})")
    axes[-1].set_xlabel("R-hat (rank-normalised split)")
    return fig


def regression_band(
    x_grid: np.ndarray,
    mean: np.ndarray,
    lower: np.ndarray,
    upper: np.ndarray,
    *,
    x_train: np.ndarray | None = None,
    y_train: np.ndarray | None = None,
    draws: np.ndarray | None = None,
    label: str = "predictive mean",
    ax: Axes | None = None,
) -> Figure:
    """A 1-D regression: predictive mean, a credible band, optional function draws and the
    training points.

    Args:
        x_grid: ``(m,)`` or ``(m, 1)`` inputs, sorted.
        mean, lower, upper: ``(m,)`` predictive mean and band limits (e.g. the 2.5% and 97.5%
            quantiles of the BMA).
        x_train, y_train: training points to overlay.
        draws: ``(S, m)`` individual functions (prior or posterior draws) drawn thinly.
    """
    xg = np.ravel(np.asarray(x_grid, dtype=float))
    arrays = {"mean": mean, "lower": lower, "upper": upper}
    arrays = {k: np.ravel(np.asarray(v, dtype=float)) for k, v in arrays.items()}
    for k, v in arrays.items():
        if v.shape != xg.shape:
            raise InputValueError(f"{k} must have the shape of x_grid {xg.shape}; got {v.shape}.")
    fig, ax = (
        (Figure(figsize=(6.4, 4.0), layout="constrained"), None)
        if ax is None
        else (_root_figure(ax), ax)
    )
    if ax is None:
        ax = fig.add_subplot()
    ax.fill_between(
        xg, arrays["lower"], arrays["upper"], color="C0", alpha=0.25, label="credible band"
    )
    if draws is not None:
        for d in np.asarray(draws, dtype=float).reshape(-1, xg.size):
            ax.plot(xg, d, color="C0", lw=0.5, alpha=0.3)
    ax.plot(xg, arrays["mean"], color="C0", lw=2, label=label)
    if x_train is not None and y_train is not None:
        ax.scatter(
            np.ravel(x_train), np.ravel(y_train), s=10, color="k", zorder=3, label="training data"
        )
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    ax.legend(loc="best", fontsize=8)
    return fig


def _arviz_figure(plot: object) -> Figure:
    viz = getattr(plot, "viz", None)
    fig = viz["figure"].item() if viz is not None and "figure" in viz.data_vars else None
    if not isinstance(fig, Figure):
        raise RuntimeError(
            "ArviZ did not return a matplotlib figure; is arviz-plots installed "
            "with its matplotlib backend?"
        )
    return fig


def trace_plot(idata: object, var_names: list[str] | None = None) -> Figure:
    """ArviZ's trace plot (``arviz.plot_trace_dist``) as a matplotlib figure."""
    az = arviz()  # NumPyro before ArviZ; see bnn_ppl._compat
    return _arviz_figure(az.plot_trace_dist(idata, var_names=var_names, backend="matplotlib"))


def rank_plot(idata: object, var_names: list[str] | None = None) -> Figure:
    """ArviZ's rank plot (``arviz.plot_rank``) as a matplotlib figure."""
    az = arviz()
    return _arviz_figure(az.plot_rank(idata, var_names=var_names, backend="matplotlib"))


def metric_curves(
    curves: Mapping[str, Mapping[float, Mapping[str, float]]],
    *,
    xlabel: str,
    metrics: Mapping[str, str] | None = None,
    xscale: str = "linear",
    title: str | None = None,
) -> Figure:
    """Metrics against a setting, one panel per metric and one line per curve.

    Args:
        curves: label -> x -> metric name -> value (e.g. prior family -> scale -> metrics).
        xlabel: the x axis' label; ``xscale``: ``"linear"`` or ``"log"``.
        metrics: metric name -> y label, one panel each (default: BMA test accuracy and NLL).
        title: the figure's title.

    Example:
        >>> fig = metric_curves({"normal": {0.1: {"accuracy": 0.9, "nll": 0.3},
        ...                                 1.0: {"accuracy": 0.8, "nll": 0.5}}},
        ...                     xlabel="prior scale", xscale="log")
        >>> [ax.get_ylabel() for ax in fig.axes]
        ['BMA test accuracy', 'BMA test NLL']
    """
    metrics = metrics or {"accuracy": "BMA test accuracy", "nll": "BMA test NLL"}
    if not curves or not metrics:
        raise InputValueError("metric_curves needs at least one curve and one metric.")
    fig = Figure(figsize=(4.5 * len(metrics), 3.6), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(metrics)))
    for ax, (metric, ylabel) in zip(axes, metrics.items(), strict=True):
        for label, by_x in curves.items():
            xs = sorted(by_x)
            ax.plot(xs, [by_x[x][metric] for x in xs], marker="o", label=label)
        ax.set(xscale=xscale, xlabel=xlabel, ylabel=ylabel)
        ax.grid(alpha=0.3)
    axes[0].legend()
    if title:
        fig.suptitle(title)
    return fig


def save_figure(fig: Figure, path: str | os.PathLike, *, dpi: float = 150) -> None:
    """Write ``fig`` to ``path`` as PNG, atomically (missing parent folders are created).

    The image is rendered into a temporary file in the target folder, which is then renamed over
    ``path`` (:func:`bnn_ppl.io.atomic_write`): a reader sees the old file or the new one, and no
    temporary file is left behind, also on error.

    Example:
        >>> import os, tempfile
        >>> from matplotlib.figure import Figure
        >>> fig = Figure(figsize=(1, 1))
        >>> path = os.path.join(tempfile.mkdtemp(), "plots", "empty.png")
        >>> save_figure(fig, path)
        >>> os.listdir(os.path.dirname(path))
        ['empty.png']
    """
    if not isinstance(fig, Figure):
        raise InputTypeError(f"fig must be a matplotlib.figure.Figure; got {type(fig).__name__}.")
    atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=dpi))

"""Reliability diagrams and atomic PNG writing (bnn_ppl.plots)."""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure

import bnn_ppl as bp
from bnn_ppl.plots import PERFECT_LABEL, reliability_diagram, save_figure

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _curve(seed: int, n: int = 200, num_bins: int = 10) -> bp.metrics.ReliabilityCurve:
    rng = np.random.default_rng(seed)
    logits = 3.0 * rng.normal(size=(n, 5))
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    labels = rng.integers(0, 5, size=n).astype(np.int32)
    return bp.metrics.reliability_curve(probs, labels, num_bins=num_bins)


def test_one_line_per_method_plus_the_diagonal() -> None:
    curves = {"HMC": _curve(0), "SVI": _curve(1), "ensemble": _curve(2)}
    fig = reliability_diagram(curves)
    assert isinstance(fig, Figure)
    top, bottom = fig.axes
    lines = top.get_lines()
    assert [line.get_label() for line in lines] == [*curves, PERFECT_LABEL]
    legend = [t.get_text() for t in top.get_legend().get_texts()]
    assert legend == [*curves, PERFECT_LABEL]
    diag = lines[-1]
    np.testing.assert_array_equal(diag.get_xdata(), [0.0, 1.0])
    np.testing.assert_array_equal(diag.get_ydata(), [0.0, 1.0])
    # each method's line sits at (mean confidence, accuracy) of its non-empty bins
    for line, curve in zip(lines, curves.values(), strict=False):
        keep = np.asarray(curve.count) > 0
        np.testing.assert_allclose(line.get_xdata(), np.asarray(curve.confidence)[keep])
        np.testing.assert_allclose(line.get_ydata(), np.asarray(curve.accuracy)[keep])
    # the lower panel: one bar per (method, non-empty bin), coloured like the method's line
    assert top.get_xlabel() == "" and "confidence" in bottom.get_xlabel()
    assert top.get_ylabel() == "accuracy"
    expected_bars = sum(int(np.sum(np.asarray(c.count) > 0)) for c in curves.values())
    assert len(bottom.patches) == expected_bars
    counts = sorted(p.get_height() for p in bottom.patches)
    assert counts == sorted(float(k) for c in curves.values() for k in np.asarray(c.count) if k > 0)
    for line, bars in zip(lines, bottom.containers, strict=False):
        assert bars.get_label() == line.get_label()
        for bar in bars:
            assert to_rgb(bar.get_facecolor()) == to_rgb(line.get_color())


def test_empty_bins_are_skipped() -> None:
    nan = np.nan
    curve = bp.metrics.ReliabilityCurve(
        bin_lower=np.array([0.0, 0.25, 0.5, 0.75]),
        bin_upper=np.array([0.25, 0.5, 0.75, 1.0]),
        confidence=np.array([nan, 0.4, nan, 0.9]),
        accuracy=np.array([nan, 0.5, nan, 0.8]),
        count=np.array([0, 3, 0, 7]),
    )
    fig = reliability_diagram({"m": curve})
    top, bottom = fig.axes
    line = top.get_lines()[0]
    np.testing.assert_array_equal(line.get_xdata(), [0.4, 0.9])
    np.testing.assert_array_equal(line.get_ydata(), [0.5, 0.8])
    assert not np.isnan(line.get_xdata()).any()
    assert [p.get_height() for p in bottom.patches] == [3, 7]
    np.testing.assert_allclose([p.get_x() for p in bottom.patches], [0.25, 0.75])


def test_equal_mass_curves_with_empty_bins() -> None:
    # more bins than examples: the empty bins have NaN bounds too, and are skipped
    probs = np.array([[0.9, 0.1], [0.3, 0.7], [0.6, 0.4]])
    curve = bp.metrics.reliability_curve(probs, np.array([0, 1, 1]), num_bins=5, binning="mass")
    fig = reliability_diagram({"m": curve})
    top, bottom = fig.axes
    assert top.get_lines()[0].get_xdata().size == 3
    assert len(bottom.patches) == 3


def test_draws_into_given_axes_with_a_count_overlay() -> None:
    fig = Figure()
    ax = fig.add_subplot()
    out = reliability_diagram({"A": _curve(0), "B": _curve(1)}, ax=ax, title="t")
    assert out is fig
    assert [line.get_label() for line in ax.get_lines()] == ["A", "B", PERFECT_LABEL]
    assert ax.get_title() == "t" and ax.get_xlabel() == "confidence"
    assert len(fig.axes) == 2  # ax and its twin holding the bars
    assert fig.axes[1].patches


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="empty"):
        reliability_diagram({})
    with pytest.raises(TypeError, match="ReliabilityCurve"):
        reliability_diagram({"m": np.zeros(3)})
    with pytest.raises(TypeError, match="mapping"):
        reliability_diagram([_curve(0)])
    bad = _curve(0)._replace(count=np.ones(3))
    with pytest.raises(ValueError, match="one length"):
        reliability_diagram({"m": bad})
    with pytest.raises(TypeError, match="Figure"):
        save_figure("not a figure", "x.png")


def test_save_figure_writes_a_png_atomically(tmp_path: Path) -> None:
    fig = reliability_diagram({"HMC": _curve(0), "SVI": _curve(1)})
    path = tmp_path / "sub" / "reliability.png"
    save_figure(fig, path)
    assert path.read_bytes()[:8] == PNG_SIGNATURE
    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
    assert image.std() > 0  # something was drawn
    assert [p.name for p in path.parent.iterdir()] == ["reliability.png"]
    # replacing an existing file leaves just the new one
    save_figure(Figure(figsize=(1, 1)), path, dpi=50)
    assert matplotlib.image.imread(path).shape[:2] == (50, 50)
    assert [p.name for p in path.parent.iterdir()] == ["reliability.png"]


def test_failed_save_leaves_the_old_file_and_no_temp_file(tmp_path: Path) -> None:
    path = tmp_path / "fig.png"
    save_figure(Figure(figsize=(1, 1)), path, dpi=20)
    before = path.read_bytes()
    broken = Figure(figsize=(1, 1))

    def savefig(f, **kwargs):  # writes part of an image, then fails
        f.write(PNG_SIGNATURE)
        raise RuntimeError("disk full")

    broken.savefig = savefig
    with pytest.raises(RuntimeError, match="disk full"):
        save_figure(broken, path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["fig.png"]


def test_no_pyplot_state() -> None:
    before = "matplotlib.pyplot" in sys.modules
    fig = reliability_diagram({"m": _curve(0)})
    assert fig.canvas is not None
    if not before:  # the module itself never imports pyplot
        assert "matplotlib.pyplot" not in sys.modules


def test_rhat_histograms_and_regression_band_write_pngs(tmp_path):
    from matplotlib.image import imread

    from bnn_ppl.diagnostics import weight_space
    from bnn_ppl.plots import regression_band, rhat_histograms, save_figure

    rng = np.random.default_rng(0)
    draws = rng.normal(size=(3, 50, 20))
    draws[0, :, :5] += 2.0
    fig = rhat_histograms({"weight space": weight_space({"w": draws}),
                           "function space": np.full(30, 1.001)})
    assert len(fig.axes) == 2
    assert fig.axes[0].get_xscale() == "log"
    assert {round(line.get_xdata()[0], 3) for line in fig.axes[0].lines} == {1.01, 1.1}
    path = tmp_path / "rhat.png"
    save_figure(fig, path)
    assert imread(path).size > 0
    xg = np.linspace(-1, 1, 30)
    fig = regression_band(xg, np.sin(xg), np.sin(xg) - 0.2, np.sin(xg) + 0.2,
                          x_train=xg[::3], y_train=np.sin(xg[::3]), draws=np.zeros((4, 30)))
    save_figure(fig, tmp_path / "band.png")
    assert (tmp_path / "band.png").stat().st_size > 1000
    with pytest.raises(ValueError, match="shape of x_grid"):
        regression_band(xg, xg[:5], xg, xg)
    with pytest.raises(ValueError, match="empty"):
        rhat_histograms({})


def test_trace_and_rank_plots_delegate_to_arviz(tmp_path):
    import arviz as az

    from bnn_ppl.plots import rank_plot, save_figure, trace_plot

    idata = az.from_dict({"posterior": {"w": np.random.default_rng(0).normal(size=(2, 40, 2))}})
    for fn in (trace_plot, rank_plot):
        fig = fn(idata)
        save_figure(fig, tmp_path / f"{fn.__name__}.png")
        assert (tmp_path / f"{fn.__name__}.png").stat().st_size > 1000

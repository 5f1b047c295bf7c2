"""Results over data splits (bnn_ppl.metrics.splits): mean ± standard error per data set and
method, beside a published number, as a table, a bar chart and a verdict."""

from __future__ import annotations

import math

import numpy as np
import pytest
from matplotlib.container import BarContainer

from bnn_ppl.metrics.splits import (
    MC_DROPOUT_LL,
    MC_DROPOUT_SPLITS,
    mean_se,
    paired_difference,
    reference_verdicts,
    split_bars,
    split_table,
)


def test_mean_se_is_the_mean_and_the_standard_error_of_the_mean():
    v = [1.0, 4.0, 2.0, 7.0]
    mean, se = mean_se(v)
    assert mean == 3.5
    assert se == pytest.approx(np.std(v, ddof=1) / 2.0)
    m1, se1 = mean_se([2.5])
    assert m1 == 2.5 and math.isnan(se1)
    with pytest.raises(ValueError, match="at least one number"):
        mean_se([])


def test_split_table_prints_every_method_per_metric_then_the_reference():
    results = {
        "yacht": {"HMC": {"rmse": [1.0, 2.0], "ll": [-1.0, -2.0]},
                  "SVI": {"rmse": [3.0, 3.0], "ll": [-3.0, -4.0]}},
        "kin8nm": {"HMC": {"rmse": [0.1, 0.1], "ll": [1.0, 1.0]},
                   "SVI": {"rmse": [0.2, 0.2], "ll": [0.5, 0.5]}},
    }  # fmt: skip
    text = split_table(results, columns=[("rmse", "RMSE"), ("ll", "LL")],
                       reference=MC_DROPOUT_LL, reference_label="LL MC-dropout")  # fmt: skip
    head, yacht, kin8nm = text.splitlines()
    assert head.split() == ["dataset", "RMSE", "HMC", "RMSE", "SVI", "LL", "HMC", "LL", "SVI",
                            "LL", "MC-dropout"]  # fmt: skip
    assert yacht.split() == ["yacht", "1.50", "±", "0.50", "3.00", "±", "0.00", "-1.50", "±",
                             "0.50", "-3.50", "±", "0.50", "-1.25"]  # fmt: skip
    assert kin8nm.split()[-1] == "-"  # no published number
    assert "MC-dropout" not in split_table(results, columns=[("ll", "LL")])


def test_published_numbers_are_gals_grid_search_ll():
    # Gal's DropoutUncertaintyExps README, "Grid Search LL (new)"
    assert MC_DROPOUT_LL == {"energy": -1.21, "yacht": -1.25, "concrete": -2.93,
                             "boston": -2.40, "wine-red": -0.93}  # fmt: skip


RESULTS = {
    "yacht": {"HMC": {"ll": [-1.0, -2.0]}, "SVI": {"ll": [-3.0]}},
    "kin8nm": {"HMC": {"ll": [1.0, 1.5]}, "SVI": {"ll": [0.5]}},
}


def test_split_bars_draws_each_methods_mean_and_se_then_the_reference():
    fig = split_bars(RESULTS, "ll", reference=MC_DROPOUT_LL, reference_label="MC dropout")
    (ax,) = fig.axes
    bars = {c.get_label(): c for c in ax.containers if isinstance(c, BarContainer)}
    assert list(bars) == ["HMC", "SVI", "MC dropout"]
    assert [p.get_height() for p in bars["HMC"]] == [-1.5, 1.25]
    assert [p.get_height() for p in bars["SVI"]] == [-3.0, 0.5]
    ref = [p.get_height() for p in bars["MC dropout"]]
    assert ref[0] == -1.25 and math.isnan(ref[1])  # kin8nm has no published number
    # error bars: ± the standard error over the splits; none for a single split
    spans = [[s[1][1] - s[0][1] for s in bars[m].errorbar.lines[2][0].get_segments()]
             for m in ("HMC", "SVI")]  # fmt: skip
    assert spans[0] == pytest.approx([2 * mean_se(RESULTS[n]["HMC"]["ll"])[1] for n in RESULTS])
    assert spans[1] == [0.0, 0.0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["yacht", "kin8nm"]
    assert ax.get_ylabel() == "ll"
    no_ref = split_bars(RESULTS, "ll").axes[0]
    assert [c.get_label() for c in no_ref.containers if isinstance(c, BarContainer)] == [
        "HMC", "SVI"]  # fmt: skip
    with pytest.raises(ValueError, match="at least one data set"):
        split_bars({}, "ll")


def test_reference_verdicts_compare_the_mean_over_splits_with_the_published_number():
    reference = {"yacht": -2.5, "kin8nm": 0.4, "boston": -2.4}  # no boston results: no line
    lines = reference_verdicts(RESULTS, method="SVI", metric="ll", reference=reference)
    assert lines == ["yacht: SVI ll -3.00 does not beat published -2.50",
                     "kin8nm: SVI ll 0.50 beats published 0.40"]  # fmt: skip


def test_mc_dropout_per_split_results_are_the_published_means_runs():
    """Each set's 20 per-split values average (rounded) to the published 20-split mean, and
    their ddof-0 SE is the README's (boston LL -2.40 ± 0.04, RMSE 2.90 ± 0.18)."""
    for name, per in MC_DROPOUT_SPLITS.items():
        assert len(per["ll"]) == len(per["rmse"]) == 20
        assert np.mean(per["ll"]) == pytest.approx(MC_DROPOUT_LL[name], abs=0.0075)
    ll, rmse = np.asarray(MC_DROPOUT_SPLITS["boston"]["ll"]), MC_DROPOUT_SPLITS["boston"]["rmse"]
    assert round(float(ll.std() / np.sqrt(20)), 2) == 0.04
    assert round(float(np.mean(rmse)), 2) == 2.90
    assert round(float(np.std(rmse) / np.sqrt(20)), 2) == 0.18


def test_paired_difference_pairs_by_split_index():
    theirs = [-2.0, -3.0, -1.0, -4.0]
    d, se, wins = paired_difference({3: -3.0, 1: -3.5, 0: -1.5}, theirs)
    diffs = [0.5, -0.5, 1.0]  # splits 0, 1, 3
    assert d == pytest.approx(np.mean(diffs))
    assert se == pytest.approx(np.std(diffs, ddof=1) / np.sqrt(3))
    assert wins == 2
    with pytest.raises(ValueError, match="outside the 4 values"):
        paired_difference({4: 0.0}, theirs)
    with pytest.raises(ValueError, match="at least one split"):
        paired_difference({}, theirs)

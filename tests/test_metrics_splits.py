"""Tables over data splits (bnn_ppl.metrics.splits): mean ± standard error per data set and
method, beside a published number."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bnn_ppl.metrics.splits import MC_DROPOUT_LL, mean_se, split_table


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

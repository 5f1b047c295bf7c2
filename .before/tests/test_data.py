"""Embedded datasets: shapes, training-statistics standardisation, fixed seeded splits."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_diabetes
from tolerances import assert_sums_close

import bnn_ppl as bp


def test_digits():
    d = bp.data.load("digits")
    assert d.task == "classification" and d.num_classes == 10
    assert d.x_train.shape == (1437, 64) and d.x_test.shape == (360, 64)
    assert d.x_train.dtype == np.float32 and d.y_train.dtype == np.int32
    # standardised with training statistics: train columns have mean 0 (to the float32
    # rounding of a sum of 1437 terms, tests/tolerances.py)
    assert_sums_close(d.x_train.mean(0), 0.0, np.abs(d.x_train).mean(0), len(d.x_train))
    assert set(np.unique(d.y_train)) == set(range(10))
    assert np.all(np.isfinite(d.x_train)) and np.all(np.isfinite(d.x_test))


def test_diabetes_targets_standardised_with_training_stats_and_recoverable():
    d = bp.data.load("diabetes")
    assert d.task == "regression" and d.num_classes == 0
    assert d.x_train.shape[1] == 10 and len(d.x_train) + len(d.x_test) == 442
    assert_sums_close(d.y_train.mean(), 0.0, np.abs(d.y_train).mean(), len(d.y_train))
    np.testing.assert_allclose(d.y_train.std(), 1, atol=1e-5)  # a sum of squares: no cancelling
    _, y = load_diabetes(return_X_y=True)
    scaled = np.concatenate([d.y_train, d.y_test]) * d.y_std
    order = np.argsort(scaled + d.y_mean)
    # standardised value (rounded to float32) x std + mean: two terms that can cancel
    assert_sums_close(
        (scaled + d.y_mean)[order], np.sort(y), (np.abs(scaled) + abs(d.y_mean))[order], 2
    )


def test_split_is_seeded():
    a, b, c = bp.data.load("digits"), bp.data.load("digits"), bp.data.load("digits", seed=1)
    np.testing.assert_array_equal(a.x_train, b.x_train)
    assert not np.array_equal(a.y_train, c.y_train)


def test_bad_names_and_fractions():
    with pytest.raises(
        ValueError, match=r"unknown dataset 'mnits'; available: \['breast_cancer'.*mean 'mnist'"
    ):
        bp.data.load("mnits")
    with pytest.raises(ValueError, match="test_fraction"):
        bp.data.load("digits", test_fraction=1.5)


def test_head_keeps_the_first_training_rows_and_the_test_split():
    data = bp.data.load("digits")
    head = data.head(50)
    np.testing.assert_array_equal(head.x_train, data.x_train[:50])
    np.testing.assert_array_equal(head.y_train, data.y_train[:50])
    assert head.x_test is data.x_test and head.x_mean is data.x_mean
    assert data.head(None) is data
    for bad in (0, len(data.x_train) + 1):
        with pytest.raises(ValueError, match="max_train must be between 1 and the"):
            data.head(bad)
    with pytest.raises(ValueError, match="max_train must be an int"):
        data.head(2.5)

"""Embedded datasets: shapes, training-statistics standardisation, fixed seeded splits."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_diabetes

import bnn_ppl as bp


def test_digits():
    d = bp.data.load("digits")
    assert d.task == "classification" and d.num_classes == 10
    assert d.x_train.shape == (1437, 64) and d.x_test.shape == (360, 64)
    assert d.x_train.dtype == np.float32 and d.y_train.dtype == np.int32
    # standardised with training statistics: train columns have mean 0, test columns do not
    np.testing.assert_allclose(d.x_train.mean(0), 0, atol=1e-5)
    assert set(np.unique(d.y_train)) == set(range(10))
    assert np.all(np.isfinite(d.x_train)) and np.all(np.isfinite(d.x_test))


def test_diabetes_targets_standardised_with_training_stats_and_recoverable():
    d = bp.data.load("diabetes")
    assert d.task == "regression" and d.num_classes == 0
    assert d.x_train.shape[1] == 10 and len(d.x_train) + len(d.x_test) == 442
    np.testing.assert_allclose(d.y_train.mean(), 0, atol=1e-5)
    np.testing.assert_allclose(d.y_train.std(), 1, atol=1e-5)
    _, y = load_diabetes(return_X_y=True)
    recovered = np.sort(np.concatenate([d.y_train, d.y_test]) * d.y_std + d.y_mean)
    np.testing.assert_allclose(recovered, np.sort(y), rtol=1e-5)


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

"""scikit-learn's bundled sets, the synthetic gap set, and the registry behind ``load``."""

from __future__ import annotations

import numpy as np
import pytest
from tolerances import assert_sums_close

import bnn_ppl as bp
from bnn_ppl.data import synthetic

CLASSIFICATION = {  # name: (examples, features, classes)
    "digits": (1797, 64, 10),
    "breast_cancer": (569, 30, 2),
    "wine": (178, 13, 3),
    "iris": (150, 4, 3),
}


@pytest.mark.parametrize("name", sorted(CLASSIFICATION))
def test_bundled_classification_sets(name):
    n, features, classes = CLASSIFICATION[name]
    d = bp.data.load(name, seed=3, test_fraction=0.25)
    assert d.name == name and d.task == "classification" and d.num_classes == classes
    assert len(d.x_train) + len(d.x_test) == n and d.x_train.shape[1] == features
    assert d.x_train.dtype == np.float32 and d.y_train.dtype == np.int32
    assert len(d.x_test) == int(np.ceil(0.25 * n))
    assert_sums_close(d.x_train.mean(0), 0.0, np.abs(d.x_train).mean(0), len(d.x_train))
    # stratified: every class in both splits, in about the same proportion
    assert set(np.unique(d.y_test)) == set(range(classes))
    share = np.bincount(d.y_train, minlength=classes) / len(d.y_train)
    np.testing.assert_allclose(np.bincount(d.y_test, minlength=classes) / len(d.y_test), share,
                               atol=0.06)  # fmt: skip


def test_registry_lists_every_name_and_checks_options():
    names = bp.data.available()
    assert names == sorted(names)
    for expected in ("digits", "iris", "gap1d", "uci/energy", "uci/wine-red", "mnist",
                     "cifar100", "imdb_reviews"):  # fmt: skip
        assert expected in names
    with pytest.raises(TypeError, match=r"load\('iris'\) got unexpected option\(s\) \['split'\]"):
        bp.data.load("iris", split=0)
    with pytest.raises(TypeError, match=r"\['data_dir', 'max_len'\]"):
        bp.data.load("digits", max_len=3, data_dir="x")
    with pytest.raises(TypeError, match="seed must be an integer"):
        bp.data.load("wine", seed=0.5)
    with pytest.raises(ValueError, match="unknown dataset 'nope'"):
        bp.data.load("nope")


def test_gap1d_has_a_gap_and_a_wider_dense_test_grid():
    d = bp.data.load("gap1d", seed=0)
    assert d.name == "gap1d" and d.task == "regression"
    assert d.x_train.shape == (100, 1) and d.x_test.shape == (301, 1)
    assert d.x_train.dtype == np.float32 and d.y_train.dtype == np.float32
    x = d.x_train[:, 0] * d.x_std[0] + d.x_mean[0]
    assert np.all(np.abs(x) >= 0.3 - 1e-6) and np.all(np.abs(x) <= 1 + 1e-6)
    assert (x < 0).sum() == 50 and (x > 0).sum() == 50
    scaled = d.x_test[:, 0] * d.x_std[0]
    magnitude = np.abs(scaled) + abs(d.x_mean[0])  # two terms that cancel near 0
    assert_sums_close(scaled + d.x_mean[0], np.linspace(-1.5, 1.5, 301), magnitude, 2)
    # targets are sin(3x) plus noise of the stated scale (in original units)
    y = d.y_train * d.y_std + d.y_mean
    residual = y - synthetic.gap1d_mean(x)
    assert 0.05 < residual.std() < 0.15
    assert_sums_close(d.y_train.mean(), 0.0, np.abs(d.y_train).mean(), len(d.y_train))


def test_gap1d_is_seeded_and_validated():
    a, b, c = (bp.data.load("gap1d", seed=s) for s in (1, 1, 2))
    np.testing.assert_array_equal(a.x_train, b.x_train)
    np.testing.assert_array_equal(a.y_test, b.y_test)
    assert not np.array_equal(a.x_train, c.x_train)
    small = bp.data.load("gap1d", num_train=10, num_test=5, noise_scale=0.0)
    assert small.x_train.shape == (10, 1) and small.x_test.shape == (5, 1)
    with pytest.raises(ValueError, match="num_train must be >= 2"):
        bp.data.load("gap1d", num_train=1)
    with pytest.raises(ValueError, match="noise_scale must be a finite number >= 0"):
        bp.data.load("gap1d", noise_scale=-0.1)
    with pytest.raises(TypeError, match="noise_scale must be a number"):
        bp.data.load("gap1d", noise_scale="0.1")


def test_standardise_centres_constant_columns_exactly():
    train = np.array([[0.998, 1.0], [0.998, 3.0], [0.998, 2.0]])
    tr, te, mean, std = bp.data.standardise(train, np.array([[0.998, 2.0]]))
    assert std[0] == 1.0 and np.all(tr[:, 0] == 0) and te[0, 0] == 0
    np.testing.assert_allclose(tr[:, 1].std(), 1)


def test_gap1d_spread_averages_the_across_draw_sd_over_the_gap_and_near_the_data():
    from bnn_ppl.data.synthetic import IN_GAP, NEAR_DATA, gap1d_spread

    rng = np.random.default_rng(0)
    x = np.linspace(-1.5, 1.5, 301)
    f = rng.normal(size=(400, 301)) * np.where(np.abs(x) < 0.3, 3.0, 1.0)
    gap, near = gap1d_spread(f, x)
    sd = f.std(axis=0)
    assert gap == pytest.approx(sd[np.abs(x) < IN_GAP].mean())
    assert near == pytest.approx(sd[(np.abs(x) > NEAR_DATA[0]) & (np.abs(x) < NEAR_DATA[1])].mean())
    assert gap > 2.5 * near
    with pytest.raises(ValueError, match=r"functions must be \(draws, n\)"):
        gap1d_spread(f[:, :10], x)

"""Corruptions computed on arrays: shapes, seeding, monotone severity, and checked arguments."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_digits
from tolerances import assert_sums_close

import bnn_ppl as bp
from bnn_ppl.data import CORRUPTIONS, SEVERITIES, corrupt


@pytest.fixture(scope="module")
def digit_images():
    """100 of scikit-learn's digits as (n, 8, 8) images in [0, 1]."""
    x, _ = load_digits(return_X_y=True)
    return (x[:100] / 16.0).reshape(-1, 8, 8).astype(np.float32)


@pytest.fixture(scope="module")
def colour_images():
    """Smooth random colour images, (n, 16, 16, 3) in [0, 1]."""
    rng = np.random.default_rng(0)
    coarse = rng.uniform(0.1, 0.9, size=(20, 4, 4, 3))
    return np.repeat(np.repeat(coarse, 4, axis=1), 4, axis=2).astype(np.float32)


@pytest.mark.parametrize("kind", CORRUPTIONS)
@pytest.mark.parametrize("images", ["digit_images", "colour_images"])
def test_severity_increases_the_distortion(kind, images, request):
    x = request.getfixturevalue(images)
    mse = []
    for severity in SEVERITIES:
        y = corrupt(x, kind, severity, seed=0)
        assert y.shape == x.shape and y.dtype == x.dtype
        assert y.min() >= 0 and y.max() <= 1 and np.isfinite(y).all()
        mse.append(float(np.mean((y - x) ** 2)))
    assert mse[0] > 0
    assert all(a < b for a, b in zip(mse, mse[1:], strict=False)), (kind, mse)


@pytest.mark.parametrize("kind", ["gaussian_noise", "shot_noise"])
def test_noise_is_seeded(kind, digit_images):
    a = corrupt(digit_images, kind, 3, seed=1)
    np.testing.assert_array_equal(a, corrupt(digit_images, kind, 3, seed=1))
    assert not np.array_equal(a, corrupt(digit_images, kind, 3, seed=2))


def test_deterministic_corruptions_keep_what_they_should(colour_images):
    # contrast keeps each image's per-channel mean; blur keeps constant images unchanged
    x = colour_images
    y = corrupt(x, "contrast", 5)
    # float32 means of 16x16 pixels; y = (x - m) c + m cancels back to m (tests/tolerances.py)
    m = x.mean(axis=(1, 2), keepdims=True, dtype=np.float64)
    terms = np.abs(x) + np.abs(x - m) * 0.15 + np.abs(m)  # both sides' terms
    assert_sums_close(y.mean(axis=(1, 2)), x.mean(axis=(1, 2)), terms.mean(axis=(1, 2)), 16 * 16)
    flat = np.full((2, 9, 9, 3), 0.25, np.float32)
    np.testing.assert_allclose(corrupt(flat, "gaussian_blur", 5), flat, atol=1e-6)


def test_bad_arguments_raise_value_error(digit_images):
    with pytest.raises(ValueError, match=r"unknown corruption 'fog'; available: \['gauss"):
        corrupt(digit_images, "fog", 1)
    for severity in (0, 6, 2.5, True, "3"):
        with pytest.raises(ValueError, match="severity must be an integer in 1..5"):
            corrupt(digit_images, "contrast", severity)
    with pytest.raises(ValueError, match=r"values in \[0, 1\].*divide 8-bit pixels by 255"):
        corrupt(digit_images * 16, "contrast", 1)
    with pytest.raises(ValueError, match="floating point"):
        corrupt((digit_images * 255).astype(np.uint8), "contrast", 1)
    with pytest.raises(ValueError, match=r"got shape \(64,\)"):
        corrupt(digit_images[0].ravel(), "contrast", 1)
    with_nan = digit_images.copy()
    with_nan[0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="without NaN"):
        corrupt(with_nan, "contrast", 1)


def test_corrupt_test_set_on_standardised_digits():
    data = bp.data.load("digits")
    clean = data.x_test * data.x_std + data.x_mean
    errors = []
    for severity in SEVERITIES:
        x, y = bp.data.corrupt_test_set(data, "gaussian_noise", severity, seed=0)
        assert x.shape == data.x_test.shape and x.dtype == np.float32
        np.testing.assert_array_equal(y, data.y_test)
        pixels = x * data.x_std + data.x_mean  # back in digits' 0-16 units, clipped to range
        assert pixels.min() > -1e-4 and pixels.max() < 16 + 1e-4
        errors.append(float(np.mean((pixels - clean) ** 2)))
    assert all(a < b for a, b in zip(errors, errors[1:], strict=False))
    with pytest.raises(ValueError, match="knows the image layout of"):
        bp.data.corrupt_test_set(bp.data.load("iris"), "contrast", 1)

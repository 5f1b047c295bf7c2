"""A seeded 1-D regression set with a gap in the inputs: the picture of epistemic uncertainty.

Example:
    >>> from bnn_ppl.data import synthetic
    >>> d = synthetic.gap1d(seed=0)
    >>> d.x_train.shape, d.x_test.shape, d.task
    ((100, 1), (301, 1), 'regression')
    >>> x = d.x_train[:, 0] * d.x_std[0] + d.x_mean[0]
    >>> bool(((x >= -1) & (x <= -0.3) | (x >= 0.3) & (x <= 1)).all())
    True
"""

# Notes:
#
# Training inputs are drawn uniformly from ``[-1, -0.3]`` and ``[0.3, 1]`` (nothing in between);
# targets are ``sin(3 x)`` plus Gaussian noise. The test set is a dense, evenly spaced grid over
# ``[-1.5, 1.5]`` with targets from the same law, so a good posterior predictive is confident
# near the data and grows uncertain in the gap and beyond the edges.
#
# As with every :class:`~bnn_ppl.data.Dataset`, ``x`` and ``y`` are standardised with training
# statistics; ``x * x_std + x_mean`` gives back the original inputs (for plotting).

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from bnn_ppl.data.dataset import Dataset, regression_dataset
from bnn_ppl.validation import InputTypeError, InputValueError

__all__ = ["GAP", "IN_GAP", "NEAR_DATA", "TEST_RANGE", "TRAIN_RANGE", "gap1d", "gap1d_mean",
           "gap1d_spread"]

TRAIN_RANGE = (-1.0, 1.0)
"""Inputs of the training set lie in this interval ..."""
GAP = (-0.3, 0.3)
"""... except in this gap."""
TEST_RANGE = (-1.5, 1.5)
"""The test grid spans this interval."""
IN_GAP = 0.25
"""|x| below this is "in the gap" for :func:`gap1d_spread` (clear of the data's edge at 0.3)."""
NEAR_DATA = (0.4, 0.9)
"""|x| in this interval is "near the data" for :func:`gap1d_spread` (inside the clusters)."""


def gap1d_mean(x: np.ndarray) -> np.ndarray:
    """The noise-free regression function ``sin(3 x)`` (in original units)."""
    return np.sin(3.0 * np.asarray(x))


def gap1d_spread(functions: Any, x: Any) -> tuple[float, float]:
    """The epistemic spread of function draws in the gap and near the data.

    Args:
        functions: draws of f at the inputs ``x``, ``(draws, n)``.
        x: the inputs in original units, ``(n,)`` (``x_test[:, 0] * x_std[0] + x_mean[0]``).

    Returns:
        The across-draw standard deviation of f(x), averaged over ``|x| < IN_GAP`` and over
        ``NEAR_DATA[0] < |x| < NEAR_DATA[1]``.

    Example:
        >>> import numpy as np
        >>> x = np.linspace(-1.5, 1.5, 31)
        >>> f = np.stack([np.zeros(31), np.where(np.abs(x) < 0.3, 2.0, 0.0)])
        >>> gap1d_spread(f, x)
        (1.0, 0.0)
    """
    f, x = np.asarray(functions, dtype=float), np.abs(np.asarray(x, dtype=float))
    if f.ndim != 2 or x.shape != f.shape[1:]:
        raise InputValueError(
            f"functions must be (draws, n) draws at the n inputs x, got {f.shape} and x {x.shape}."
        )
    sd = f.std(axis=0)
    gap, near = x < IN_GAP, (x > NEAR_DATA[0]) & (x < NEAR_DATA[1])
    return float(sd[gap].mean()), float(sd[near].mean())


def _count(name: str, value: Any, minimum: int) -> int:
    try:
        v = operator.index(value)
    except TypeError:
        raise InputTypeError(f"{name} must be an integer, got {type(value).__name__}.") from None
    if v < minimum:
        raise InputValueError(f"{name} must be >= {minimum}, got {v}.")
    return v


def gap1d(
    *,
    seed: int = 0,
    num_train: int = 100,
    num_test: int = 301,
    noise_scale: float = 0.1,
) -> Dataset:
    """The 1-D regression set with a gap (see the module docstring).

    Args:
        seed: seed of the inputs and the noise (the same seed gives the same data).
        num_train: training examples, half on each side of the gap.
        num_test: points of the evenly spaced test grid over ``TEST_RANGE``.
        noise_scale: standard deviation of the Gaussian noise on the targets, >= 0.
    """
    seed = _count("seed", seed, 0)
    num_train = _count("num_train", num_train, 2)
    num_test = _count("num_test", num_test, 1)
    if isinstance(noise_scale, bool) or not isinstance(
        noise_scale, int | float | np.integer | np.floating
    ):
        raise InputTypeError(f"noise_scale must be a number, got {type(noise_scale).__name__}.")
    if not (np.isfinite(noise_scale) and noise_scale >= 0):
        raise InputValueError(f"noise_scale must be a finite number >= 0, got {noise_scale!r}.")
    rng = np.random.default_rng(seed)
    left = rng.uniform(TRAIN_RANGE[0], GAP[0], size=num_train - num_train // 2)
    right = rng.uniform(GAP[1], TRAIN_RANGE[1], size=num_train // 2)
    x_train = np.sort(np.concatenate([left, right]))[:, None]
    y_train = gap1d_mean(x_train[:, 0]) + noise_scale * rng.normal(size=num_train)
    x_test = np.linspace(*TEST_RANGE, num_test)[:, None]
    y_test = gap1d_mean(x_test[:, 0]) + noise_scale * rng.normal(size=num_test)
    return regression_dataset("gap1d", x_train, y_train, x_test, y_test)

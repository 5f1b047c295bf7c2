"""Datasets as NumPy arrays in a :class:`Dataset` record.

``load(name)`` returns a train/test split standardised with *training* statistics. Embedded
defaults come from scikit-learn's bundled files, so they work offline:

* ``"digits"`` - 8x8 handwritten digits, 1,797 examples, 64 features, 10 classes.
* ``"diabetes"`` - 442 patients, 10 features, a continuous target (standardised; metrics are
  reported in original units with ``y_std``).

Example:
    >>> import bnn_ppl as bp
    >>> d = bp.data.load("digits")
    >>> d.x_train.shape, d.x_test.shape, d.num_classes
    ((1437, 64), (360, 64), 10)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

__all__ = ["Dataset", "load", "available", "standardise"]


class Dataset(NamedTuple):
    """A train/test split.

    Inputs are standardised with the training mean and standard deviation (``x_mean``,
    ``x_std``); regression targets likewise (``y_mean``, ``y_std``; classification: 0 and 1).
    ``num_classes`` is 0 for regression.
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int
    x_mean: np.ndarray
    x_std: np.ndarray
    y_mean: float
    y_std: float

    @property
    def task(self) -> str:
        """``"classification"`` or ``"regression"``."""
        return "classification" if self.num_classes > 0 else "regression"


def standardise(
    train: np.ndarray, test: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Standardise both arrays with the training columns' mean and std.

    Columns that are constant in the training set (std 0, e.g. always-blank pixels) are centred
    and left unscaled (std reported as 1), rather than divided by zero.
    """
    mean = train.mean(axis=0)
    std = train.std(axis=0)
    std = np.where(std > 0, std, 1.0)
    return (train - mean) / std, (test - mean) / std, mean, std


def _split(
    n: int, test_fraction: float, seed: int, strata: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.model_selection import train_test_split

    idx = np.arange(n)
    train, test = train_test_split(idx, test_size=test_fraction, random_state=seed, stratify=strata)
    return np.sort(train), np.sort(test)


def _load_digits(seed: int, test_fraction: float) -> Dataset:
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    tr, te = _split(len(x), test_fraction, seed, y)
    xtr, xte, m, s = standardise(x[tr].astype(np.float64), x[te].astype(np.float64))
    return Dataset(
        "digits",
        xtr.astype(np.float32),
        y[tr].astype(np.int32),
        xte.astype(np.float32),
        y[te].astype(np.int32),
        10,
        m,
        s,
        0.0,
        1.0,
    )


def _load_diabetes(seed: int, test_fraction: float) -> Dataset:
    from sklearn.datasets import load_diabetes

    x, y = load_diabetes(return_X_y=True, scaled=False)
    tr, te = _split(len(x), test_fraction, seed, None)
    xtr, xte, m, s = standardise(x[tr], x[te])
    ytr, yte, ym, ys = standardise(y[tr], y[te])
    return Dataset(
        "diabetes",
        xtr.astype(np.float32),
        ytr.astype(np.float32),
        xte.astype(np.float32),
        yte.astype(np.float32),
        0,
        m,
        s,
        float(ym),
        float(ys),
    )


_LOADERS: dict[str, Callable[[int, float], Dataset]] = {
    "digits": _load_digits,
    "diabetes": _load_diabetes,
}


def available() -> list[str]:
    """Names accepted by :func:`load`."""
    return sorted(_LOADERS)


def load(name: str, *, seed: int = 0, test_fraction: float = 0.2) -> Dataset:
    """Load a dataset by name as a standardised train/test :class:`Dataset`.

    Args:
        name: one of :func:`available`.
        seed: seed of the train/test split (the same seed always gives the same split).
        test_fraction: fraction of examples in the test set, in (0, 1).

    Raises:
        ValueError: unknown name (the message lists the known ones) or a bad ``test_fraction``.
    """
    if name not in _LOADERS:
        raise ValueError(f"unknown dataset {name!r}; available: {available()}.")
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction!r}.")
    return _LOADERS[name](int(seed), float(test_fraction))

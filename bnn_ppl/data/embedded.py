"""Data sets bundled with scikit-learn: they work offline, with a fixed seeded train/test split.

Example:
    >>> from bnn_ppl.data import embedded
    >>> d = embedded.iris(seed=0, test_fraction=0.2)
    >>> d.x_train.shape, d.x_test.shape, d.num_classes
    ((120, 4), (30, 4), 3)
"""

# Notes:
#
# =================  ==============  ========  ========  =======
# name               task            examples  features  classes
# =================  ==============  ========  ========  =======
# ``digits``         classification     1,797        64       10
# ``breast_cancer``  classification       569        30        2
# ``wine``           classification       178        13        3
# ``iris``           classification       150         4        3
# ``diabetes``       regression           442        10        -
# =================  ==============  ========  ========  =======
#
# Classification splits are stratified by class. Inputs (and the diabetes target, in its
# original units) are standardised with training statistics.

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np

from bnn_ppl.data.dataset import Dataset, regression_dataset, standardise
from bnn_ppl.validation import InputTypeError, InputValueError

__all__ = ["breast_cancer", "diabetes", "digits", "iris", "wine"]


def _check_split_args(seed: Any, test_fraction: Any) -> tuple[int, float]:
    try:
        seed = operator.index(seed)
    except TypeError:
        raise InputTypeError(f"seed must be an integer, got {type(seed).__name__}.") from None
    if isinstance(test_fraction, bool) or not isinstance(
        test_fraction, int | float | np.integer | np.floating
    ):
        raise InputTypeError(f"test_fraction must be a number, got {type(test_fraction).__name__}.")
    if not (math.isfinite(test_fraction) and 0.0 < test_fraction < 1.0):
        raise InputValueError(f"test_fraction must be in (0, 1), got {test_fraction!r}.")
    return int(seed), float(test_fraction)


def _split(
    n: int, test_fraction: float, seed: int, strata: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.model_selection import train_test_split

    idx = np.arange(n)
    train, test = train_test_split(idx, test_size=test_fraction, random_state=seed, stratify=strata)
    return np.sort(train), np.sort(test)


def _classification(
    name: str, x: np.ndarray, y: np.ndarray, seed: Any, test_fraction: Any
) -> Dataset:
    seed, test_fraction = _check_split_args(seed, test_fraction)
    tr, te = _split(len(x), test_fraction, seed, y)
    xtr, xte, mean, std = standardise(x[tr].astype(np.float64), x[te].astype(np.float64))
    return Dataset(
        name,
        xtr.astype(np.float32),
        y[tr].astype(np.int32),
        xte.astype(np.float32),
        y[te].astype(np.int32),
        int(np.max(y)) + 1,
        mean,
        std,
        0.0,
        1.0,
    )


def digits(*, seed: int = 0, test_fraction: float = 0.2) -> Dataset:
    """8x8 handwritten digits (pixel values 0-16, flattened to 64 features), 10 classes."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    return _classification("digits", x, y, seed, test_fraction)


def breast_cancer(*, seed: int = 0, test_fraction: float = 0.2) -> Dataset:
    """Wisconsin breast cancer: 30 features of cell nuclei, malignant (0) or benign (1)."""
    from sklearn.datasets import load_breast_cancer

    x, y = load_breast_cancer(return_X_y=True)
    return _classification("breast_cancer", x, y, seed, test_fraction)


def wine(*, seed: int = 0, test_fraction: float = 0.2) -> Dataset:
    """Wine recognition: 13 chemical features, 3 cultivars."""
    from sklearn.datasets import load_wine

    x, y = load_wine(return_X_y=True)
    return _classification("wine", x, y, seed, test_fraction)


def iris(*, seed: int = 0, test_fraction: float = 0.2) -> Dataset:
    """Fisher's iris: 4 measurements, 3 species."""
    from sklearn.datasets import load_iris

    x, y = load_iris(return_X_y=True)
    return _classification("iris", x, y, seed, test_fraction)


def diabetes(*, seed: int = 0, test_fraction: float = 0.2) -> Dataset:
    """Diabetes progression: 10 features, a continuous target (standardised; ``y_std`` and
    ``y_mean`` give back the original units)."""
    from sklearn.datasets import load_diabetes

    seed, test_fraction = _check_split_args(seed, test_fraction)
    x, y = load_diabetes(return_X_y=True, scaled=False)
    tr, te = _split(len(x), test_fraction, seed, None)
    return regression_dataset("diabetes", x[tr], y[tr], x[te], y[te])

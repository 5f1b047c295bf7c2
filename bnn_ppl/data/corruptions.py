"""Image corruptions computed on arrays, for covariate-shift evaluation without downloads.

Example:
    >>> import numpy as np
    >>> from bnn_ppl.data import corrupt
    >>> x = np.full((2, 8, 8), 0.5, np.float32)
    >>> y = corrupt(x, "contrast", 5)
    >>> y.shape, y.dtype, float(y.max())
    ((2, 8, 8), dtype('float32'), 0.5)
"""

# Notes:
#
# Four corruptions from Hendrycks & Dietterich (2019), with their CIFAR-10-C parameters, at
# severities 1 (mild) to 5 (strong); the names match ``cifar10_corrupted``'s:
#
# ==================  =========================================  =============================
# kind                what                                       parameter, severity 1 ... 5
# ==================  =========================================  =============================
# ``gaussian_noise``  ``x + N(0, c^2)``                          c = 0.04, 0.06, 0.08, 0.09, 0.10
# ``shot_noise``      ``Poisson(c x) / c``                       c = 500, 250, 100, 75, 50
# ``gaussian_blur``   Gaussian filter, std ``c`` pixels, edges   c = 0.4, 0.6, 0.7, 0.8, 1.0
#                     extended
# ``contrast``        ``(x - m) c + m``, m the image's mean      c = 0.75, 0.5, 0.4, 0.3, 0.15
#                     per channel
# ==================  =========================================  =============================
#
# :func:`corrupt` works on float images with values in ``[0, 1]`` (divide 8-bit pixels by 255,
# scikit-learn's digits by 16), shaped ``(n, H, W)`` or ``(n, H, W, C)``; the result has the
# same shape and dtype and is clipped to ``[0, 1]``. Random corruptions are seeded.
# :func:`corrupt_test_set` applies one to a standardised :class:`~bnn_ppl.data.Dataset`'s test
# set (digits, mnist, fashion_mnist, cifar10, cifar100) and standardises the result with the
# same training statistics.

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from bnn_ppl.data.dataset import Dataset
from bnn_ppl.data.tfds import load_corrupted
from bnn_ppl.validation import InputValueError

__all__ = ["CORRUPTIONS", "IMAGE_FORMATS", "SEVERITIES", "corrupt", "corrupt_test_set"]

SEVERITIES = (1, 2, 3, 4, 5)

_PARAMETERS: dict[str, tuple[float, ...]] = {
    "gaussian_noise": (0.04, 0.06, 0.08, 0.09, 0.10),
    "shot_noise": (500.0, 250.0, 100.0, 75.0, 50.0),
    "gaussian_blur": (0.4, 0.6, 0.7, 0.8, 1.0),
    "contrast": (0.75, 0.5, 0.4, 0.3, 0.15),
}

CORRUPTIONS = tuple(_PARAMETERS)
"""The kinds :func:`corrupt` computes."""

IMAGE_FORMATS: dict[str, tuple[tuple[int, ...], float]] = {
    "digits": ((8, 8), 16.0),
    "mnist": ((28, 28, 1), 255.0),
    "fashion_mnist": ((28, 28, 1), 255.0),
    "cifar10": ((32, 32, 3), 255.0),
    "cifar100": ((32, 32, 3), 255.0),
}
"""Image shape and largest pixel value of the data sets :func:`corrupt_test_set` knows."""


def _gaussian_noise(x: np.ndarray, c: float, rng: np.random.Generator) -> np.ndarray:
    return x + c * rng.standard_normal(x.shape)


def _shot_noise(x: np.ndarray, c: float, rng: np.random.Generator) -> np.ndarray:
    return rng.poisson(x * c) / c


def _gaussian_blur(x: np.ndarray, c: float, rng: np.random.Generator) -> np.ndarray:
    del rng
    radius = max(1, math.ceil(4.0 * c))
    offsets = np.arange(-radius, radius + 1)
    weights = np.exp(-0.5 * (offsets / c) ** 2)
    weights /= weights.sum()
    for axis in (1, 2):  # height, then width (separable filter)
        pad = [(0, 0)] * x.ndim
        pad[axis] = (radius, radius)
        padded = np.pad(x, pad, mode="edge")
        size = x.shape[axis]
        x = sum(
            w * np.take(padded, np.arange(k, k + size), axis=axis) for k, w in enumerate(weights)
        )
    return x


def _contrast(x: np.ndarray, c: float, rng: np.random.Generator) -> np.ndarray:
    del rng
    mean = x.mean(axis=(1, 2), keepdims=True)
    return (x - mean) * c + mean


_FUNCTIONS: dict[str, Callable[[np.ndarray, float, np.random.Generator], np.ndarray]] = {
    "gaussian_noise": _gaussian_noise,
    "shot_noise": _shot_noise,
    "gaussian_blur": _gaussian_blur,
    "contrast": _contrast,
}


def _check_kind_severity(kind: Any, severity: Any) -> int:
    if kind not in _PARAMETERS:
        raise InputValueError(f"unknown corruption {kind!r}; available: {list(CORRUPTIONS)}.")
    if isinstance(severity, bool):
        raise InputValueError(f"severity must be an integer in 1..5, got {severity!r}.")
    try:
        severity = operator.index(severity)
    except TypeError:
        raise InputValueError(f"severity must be an integer in 1..5, got {severity!r}.") from None
    if severity not in SEVERITIES:
        raise InputValueError(f"severity must be an integer in 1..5, got {severity}.")
    return severity


def corrupt(x: np.ndarray, kind: str, severity: int, *, seed: int = 0) -> np.ndarray:
    """Corrupt a batch of images (see the module docstring for the kinds and parameters).

    Args:
        x: float images in ``[0, 1]``, ``(n, H, W)`` or ``(n, H, W, C)``.
        kind: one of :data:`CORRUPTIONS`.
        severity: 1 (mild) to 5 (strong).
        seed: seed of the noise (the same seed gives the same corruption).

    Returns:
        The corrupted images, same shape and dtype as ``x``, clipped to ``[0, 1]``.

    Raises:
        ValueError: unknown ``kind``, ``severity`` not in 1..5, ``x`` not 3-D/4-D, not
            floating point, or with values outside ``[0, 1]`` or NaN.

    Example:
        >>> import numpy as np
        >>> from bnn_ppl.data import corrupt
        >>> x = np.random.default_rng(0).uniform(size=(4, 8, 8, 1)).astype(np.float32)
        >>> mse = [float(np.mean((corrupt(x, "gaussian_noise", s) - x) ** 2)) for s in (1, 5)]
        >>> mse[0] < mse[1]
        True
    """
    severity = _check_kind_severity(kind, severity)
    x = np.asarray(x)
    if x.ndim not in (3, 4):
        raise InputValueError(f"x must be images (n, H, W) or (n, H, W, C), got shape {x.shape}.")
    if not np.issubdtype(x.dtype, np.floating):
        raise InputValueError(
            f"x must be floating point in [0, 1], got dtype {x.dtype}; divide 8-bit pixels "
            "by 255 first."
        )
    if x.size and (np.isnan(x).any() or x.min() < 0.0 or x.max() > 1.0):
        raise InputValueError(
            f"x must hold values in [0, 1] without NaN, got range [{np.nanmin(x)}, "
            f"{np.nanmax(x)}]; divide 8-bit pixels by 255 (scikit-learn digits by 16)."
        )
    rng = np.random.default_rng(seed)
    out = _FUNCTIONS[kind](x.astype(np.float64), _PARAMETERS[kind][severity - 1], rng)
    return np.clip(out, 0.0, 1.0).astype(x.dtype)


def corrupt_test_set(
    data: Dataset, kind: str, severity: int, *, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """The test set of ``data`` under a corruption, standardised like ``data``.

    The test inputs are mapped back to pixels (``x * x_std + x_mean``), reshaped to images,
    scaled to ``[0, 1]``, corrupted with :func:`corrupt`, and mapped back to the layout and
    standardisation of ``data`` (its *training* statistics).

    Args:
        data: a :class:`~bnn_ppl.data.Dataset` named in :data:`IMAGE_FORMATS`.
        kind, severity, seed: as in :func:`corrupt`.

    Returns:
        ``(x, y)``: corrupted test inputs (same shape and dtype as ``data.x_test``) and the
        test labels.

    Example:
        >>> import bnn_ppl as bp
        >>> data = bp.data.load("digits")
        >>> x, y = bp.data.corrupt_test_set(data, "gaussian_blur", 3)
        >>> x.shape == data.x_test.shape, bool((y == data.y_test).all())
        (True, True)
    """
    if data.name not in IMAGE_FORMATS:
        raise InputValueError(
            f"corrupt_test_set knows the image layout of {sorted(IMAGE_FORMATS)}, not "
            f"{data.name!r}; call corrupt() on images in [0, 1] instead."
        )
    shape, peak = IMAGE_FORMATS[data.name]
    x = data.x_test.astype(np.float64) * data.x_std + data.x_mean
    images = np.clip(x.reshape((len(x), *shape)) / peak, 0.0, 1.0)
    corrupted = corrupt(images, kind, severity, seed=seed) * peak
    x_new = (corrupted.reshape(x.shape) - data.x_mean) / data.x_std
    return x_new.astype(data.x_test.dtype), data.y_test


def shifted_test_sets(
    data: Dataset,
    kinds: Sequence[str],
    *,
    severities: Sequence[int] = SEVERITIES,
    max_test: int | None = None,
) -> dict[tuple[str, int], tuple[np.ndarray, np.ndarray]]:
    """``(kind, severity) -> (x, y)``: the clean test set as ``("clean", 0)``, then ``data``'s
    test set under every corruption of ``kinds`` at every severity, each cut to its first
    ``max_test`` rows. CIFAR-10 is read from ``cifar10_corrupted``
    (:func:`~bnn_ppl.data.load_corrupted`: raises ``DataNotFoundError`` when it is not
    prepared); the other image sets are corrupted here (:func:`corrupt_test_set`).

    Example:
        >>> import bnn_ppl as bp
        >>> sets = shifted_test_sets(bp.data.load("digits"), ["contrast"], severities=[1, 5],
        ...                          max_test=10)
        >>> list(sets), sets["contrast", 5][0].shape
        ([('clean', 0), ('contrast', 1), ('contrast', 5)], (10, 64))
    """
    if data.name == "cifar10":
        sets: Any = load_corrupted(data, corruptions=kinds, severities=severities)
    else:
        sets = {(k, s): corrupt_test_set(data, k, s) for k in kinds for s in severities}
    sets = {("clean", 0): (data.x_test, data.y_test), **sets}
    return {key: (x[:max_test], y[:max_test]) for key, (x, y) in sets.items()}

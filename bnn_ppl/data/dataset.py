"""The :class:`Dataset` record, standardisation with training statistics, a missing-data error.

Example:
    >>> import numpy as np
    >>> from bnn_ppl.data import standardise
    >>> train, test = np.array([[1.0, 5.0], [3.0, 5.0]]), np.array([[2.0, 6.0]])
    >>> tr, te, mean, std = standardise(train, test)
    >>> tr.tolist(), te.tolist(), mean.tolist(), std.tolist()
    ([[-1.0, 0.0], [1.0, 0.0]], [[0.0, 1.0]], [2.0, 5.0], [1.0, 1.0])
"""

# Notes:
#
# Every loader in :mod:`bnn_ppl.data` returns a :class:`Dataset`: NumPy arrays, inputs (and
# regression targets) standardised with statistics of the *training* split only, and the
# statistics themselves so that predictions can be reported in original units.

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from bnn_ppl.validation import InputError, InputValueError

__all__ = [
    "DataNotFoundError",
    "Dataset",
    "regression_dataset",
    "standardise",
    "standardise_images",
]


class Dataset(NamedTuple):
    """A train/test split as NumPy arrays.

    Inputs are standardised with the training mean and standard deviation (``x_mean``,
    ``x_std``), so ``x * x_std + x_mean`` gives back the original inputs; regression targets
    likewise (``y_mean``, ``y_std``; for classification they are 0 and 1, labels are ``int32``
    in ``[0, num_classes)``). ``num_classes`` is 0 for regression.

    Layouts:

    * tabular sets: ``x`` is ``(n, features)`` float32; ``x_mean``/``x_std`` are ``(features,)``.
    * images: ``x`` is ``(n, height, width, channels)`` float32, standardised per channel;
      ``x_mean``/``x_std`` are ``(channels,)`` in the original pixel units (0-255).
    * token sequences (``imdb_reviews``): ``x`` is ``(n, max_len)`` int32 token ids, not
      standardised (``x_mean`` 0, ``x_std`` 1).
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

    def head(self, max_train: int | None, max_test: int | None = None) -> Dataset:
        """The first ``max_train`` training rows and ``max_test`` test rows (``None``: all of
        them); the standardisation statistics are unchanged.

        Example:
            >>> import bnn_ppl as bp
            >>> d = bp.data.load("digits").head(100, max_test=30)
            >>> d.x_train.shape, d.y_test.shape
            ((100, 64), (30,))

        Raises:
            ValueError: ``max_train`` or ``max_test`` is not a positive int, or above the rows
                of its split.
        """
        out = self
        for name, limit, split in (("max_train", max_train, "train"),
                                   ("max_test", max_test, "test")):  # fmt: skip
            if limit is None:
                continue
            x, y = getattr(self, f"x_{split}"), getattr(self, f"y_{split}")
            if isinstance(limit, bool) or not isinstance(limit, int | np.integer):
                raise InputValueError(f"{name} must be an int or None, got {limit!r}.")
            if not 1 <= limit <= len(x):
                raise InputValueError(
                    f"{name} must be between 1 and the {len(x)} {split}ing rows of "
                    f"{self.name}, got {limit}; pass None to use them all."
                )
            out = out._replace(**{f"x_{split}": x[:limit], f"y_{split}": y[:limit]})
        return out

    def as_images(self) -> Dataset:
        """Rows of a square single-channel image's pixels, ``(n, side * side)``, as images
        ``(n, side, side, 1)`` for a convolutional network; ``x_mean`` and ``x_std`` are
        reshaped alike, so ``x * x_std + x_mean`` still gives the pixels. A Dataset of images
        is returned as it is.

        Example:
            >>> import bnn_ppl as bp
            >>> d = bp.data.load("digits").as_images()
            >>> d.x_train.shape[1:], d.x_mean.shape
            ((8, 8, 1), (8, 8, 1))

        Raises:
            ValueError: the rows are not square images (or not 2-D).
        """
        if self.x_train.ndim == 4:
            return self
        side = math.isqrt(self.x_train.shape[-1]) if self.x_train.ndim == 2 else 0
        if side == 0 or side * side != self.x_train.shape[-1]:
            raise InputValueError(
                f"{self.name}'s inputs of shape {self.x_train.shape[1:]} are not rows of a "
                "square image's pixels; as_images() needs (n, side * side)."
            )

        def image(a: np.ndarray) -> np.ndarray:
            return np.reshape(a, (*a.shape[:-1], side, side, 1))

        def stat(a: np.ndarray) -> np.ndarray:
            return image(np.broadcast_to(a, side * side).copy())

        return self._replace(
            x_train=image(self.x_train),
            x_test=image(self.x_test),
            x_mean=stat(self.x_mean),
            x_std=stat(self.x_std),
        )


class DataNotFoundError(InputError, FileNotFoundError):
    """A data set is not on this machine.

    bnn_ppl never downloads: the message names the data set, every place that was searched,
    and the command that fetches or prepares it on a machine with network access.
    """


def standardise(
    train: np.ndarray, test: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Standardise both arrays with the training columns' mean and std.

    Columns that are constant in the training set (e.g. always-blank pixels) are centred
    exactly and left unscaled (std reported as 1), rather than divided by zero. "Constant" means
    all training values are equal, not merely ``std == 0``: the float std of a constant column
    such as 0.998 comes out as about 1e-13, and dividing by it would turn rounding error into
    values of order 1 (UCI naval has such a column).
    """
    mean = train.mean(axis=0)
    std = train.std(axis=0)
    constant = np.ptp(train, axis=0) == 0
    mean = np.where(constant, train[0], mean)
    std = np.where(constant | ~(std > 0), 1.0, std)
    return (train - mean) / std, (test - mean) / std, mean, std


def regression_dataset(
    name: str, x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray
) -> Dataset:
    """A regression :class:`Dataset`: inputs and targets standardised with the training
    split's statistics (:func:`standardise`), as float32.

    Example:
        >>> import numpy as np
        >>> from bnn_ppl.data.dataset import regression_dataset
        >>> x, y = np.array([[1.0], [3.0]]), np.array([2.0, 4.0])
        >>> data = regression_dataset("toy", x, y, x[:1], y[:1])
        >>> data.y_train.tolist(), data.y_mean, data.y_std, data.num_classes
        ([-1.0, 1.0], 3.0, 1.0, 0)
    """
    xtr, xte, x_mean, x_std = standardise(x_train, x_test)
    ytr, yte, y_mean, y_std = standardise(y_train, y_test)
    return Dataset(
        name,
        xtr.astype(np.float32),
        ytr.astype(np.float32),
        xte.astype(np.float32),
        yte.astype(np.float32),
        0,
        x_mean,
        x_std,
        float(y_mean),
        float(y_std),
    )


def standardise_images(
    train: np.ndarray, test: np.ndarray, *, chunk_size: int = 4096
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Standardise ``(n, H, W, C)`` images per channel with the training mean and std.

    The statistics are accumulated in float64 over chunks of images (no float64 copy of the
    whole set is made); the returned images are float32. A constant channel is centred only
    (std reported as 1), as in :func:`standardise`.

    Example:
        >>> import numpy as np
        >>> from bnn_ppl.data import standardise_images
        >>> x = np.arange(2 * 2 * 2 * 3, dtype=np.uint8).reshape(2, 2, 2, 3)
        >>> tr, te, mean, std = standardise_images(x, x[:1])
        >>> tr.shape, tr.dtype, mean.shape
        ((2, 2, 2, 3), dtype('float32'), (3,))
    """
    if train.ndim != 4 or test.ndim != 4 or train.shape[1:] != test.shape[1:]:
        raise InputValueError(
            f"images must be (n, height, width, channels) with matching shapes, got "
            f"train {train.shape} and test {test.shape}."
        )
    channels = train.shape[-1]
    count = train.shape[0] * train.shape[1] * train.shape[2]
    total = np.zeros(channels)
    for start in range(0, len(train), chunk_size):
        total += train[start : start + chunk_size].sum(axis=(0, 1, 2), dtype=np.float64)
    mean = total / count
    squares = np.zeros(channels)
    for start in range(0, len(train), chunk_size):
        dev = train[start : start + chunk_size].astype(np.float64) - mean
        squares += np.einsum("nhwc,nhwc->c", dev, dev)
    std = np.sqrt(squares / count)
    constant = np.array([_is_constant(train[..., c], chunk_size) for c in range(channels)])
    mean = np.where(constant, train[0, 0, 0].astype(np.float64), mean)
    std = np.where(constant | ~(std > 0), 1.0, std)
    return (
        _apply(train, mean, std, chunk_size),
        _apply(test, mean, std, chunk_size),
        mean,
        std,
    )


def _is_constant(channel: np.ndarray, chunk_size: int) -> bool:
    first = channel.flat[0]
    return all(
        bool((channel[start : start + chunk_size] == first).all())
        for start in range(0, len(channel), chunk_size)
    )


def _apply(x: np.ndarray, mean: np.ndarray, std: np.ndarray, chunk_size: int) -> np.ndarray:
    out = np.empty(x.shape, np.float32)
    for start in range(0, len(x), chunk_size):
        chunk = x[start : start + chunk_size].astype(np.float64)
        out[start : start + chunk_size] = (chunk - mean) / std
    return out

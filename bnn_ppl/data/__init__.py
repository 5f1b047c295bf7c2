"""Data sets as NumPy arrays in a :class:`Dataset` record: ``bp.data.load(name, **options)``."""

# Notes:
#
# Every loader returns a train/test split standardised with *training* statistics (never the
# test set's) and the statistics themselves (``x_mean``, ``x_std``, ``y_mean``, ``y_std``), so
# that metrics can be reported in original units. Nothing is ever downloaded: a data set that is
# not on this machine raises :class:`DataNotFoundError` at once, saying where it looked and how
# to get it.
#
# Names and their options (keyword arguments of :func:`load`):
#
# * ``digits``, ``breast_cancer``, ``wine``, ``iris`` (classification), ``diabetes``
#   (regression): scikit-learn's bundled files, offline, seeded split
#   (:mod:`~bnn_ppl.data.embedded`). Options ``seed``, ``test_fraction``.
# * ``gap1d``: seeded 1-D regression with a gap in the inputs (:mod:`~bnn_ppl.data.synthetic`).
#   Options ``seed``, ``num_train``, ``num_test``, ``noise_scale``.
# * ``uci/boston``, ``uci/concrete``, ``uci/energy``, ``uci/kin8nm``, ``uci/naval``,
#   ``uci/power``, ``uci/protein``, ``uci/wine-red``, ``uci/yacht``: UCI regression with the
#   standard splits (:mod:`~bnn_ppl.data.uci`). Options ``split``, ``data_dir`` (default
#   ``$BNN_PPL_DATA``).
# * ``mnist``, ``fashion_mnist``, ``cifar10``, ``cifar100``: tensorflow-datasets images
#   (:mod:`~bnn_ppl.data.tfds`). Option ``data_dir``.
# * ``imdb_reviews``: tokenised reviews padded to a fixed length. Options ``data_dir``,
#   ``vocab_size``, ``max_len``.
#
# Covariate shift: :func:`load_corrupted` (CIFAR-10-C from tensorflow-datasets) and
# :func:`corrupt` / :func:`corrupt_test_set` (four corruptions computed on arrays, offline).

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Callable
from typing import Any

from bnn_ppl.data import embedded, synthetic, text, uci
from bnn_ppl.data import tfds as _tfds
from bnn_ppl.data.corruptions import (
    CORRUPTIONS,
    SEVERITIES,
    corrupt,
    corrupt_test_set,
    shifted_test_sets,
)
from bnn_ppl.data.dataset import DataNotFoundError, Dataset, standardise, standardise_images
from bnn_ppl.data.tfds import CorruptedTestSets, load_corrupted
from bnn_ppl.validation import InputTypeError, InputValueError

__all__ = [
    "CORRUPTIONS",
    "SEVERITIES",
    "CorruptedTestSets",
    "DataNotFoundError",
    "Dataset",
    "available",
    "corrupt",
    "corrupt_test_set",
    "embedded",
    "load",
    "load_corrupted",
    "load_subset",
    "standardise",
    "shifted_test_sets",
    "standardise_images",
    "synthetic",
    "text",
    "uci",
]

_LOADERS: dict[str, Callable[..., Dataset]] = {
    "digits": embedded.digits,
    "breast_cancer": embedded.breast_cancer,
    "wine": embedded.wine,
    "iris": embedded.iris,
    "diabetes": embedded.diabetes,
    "gap1d": synthetic.gap1d,
    **{f"uci/{name}": functools.partial(uci.load_uci, name) for name in uci.FOLDERS},
    **{name: functools.partial(_tfds.load_images, name) for name in _tfds.IMAGE_SETS},
    "imdb_reviews": _tfds.load_imdb,
}


def available() -> list[str]:
    """Names accepted by :func:`load` (whether or not their files are on this machine)."""
    return sorted(_LOADERS)


def _options(loader: Callable[..., Dataset]) -> list[str]:
    params = inspect.signature(loader).parameters.values()
    return sorted(p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY)


def load(name: str, **options: Any) -> Dataset:
    """Load a data set by name as a standardised train/test :class:`Dataset`.

    Args:
        name: one of :func:`available` (see the table in the module docstring).
        **options: the data set's options, e.g. ``seed`` and ``test_fraction`` (embedded
            sets), ``split`` and ``data_dir`` (``uci/*``), ``data_dir`` (tfds sets),
            ``vocab_size`` and ``max_len`` (``imdb_reviews``).

    Raises:
        ValueError: unknown name (the message lists the known ones) or a bad option value.
        TypeError: an option the data set does not take (the message lists those it takes).
        DataNotFoundError: the data set is not on this machine (the message says where it
            looked and how to get it).

    Example:
        >>> import bnn_ppl as bp
        >>> d = bp.data.load("digits")
        >>> d.x_train.shape, d.x_test.shape, d.num_classes
        ((1437, 64), (360, 64), 10)
        >>> bp.data.load("iris", seed=1).task
        'classification'
        >>> bp.data.load("gap1d", split=0)
        Traceback (most recent call last):
        ...
        bnn_ppl.validation.InputTypeError: load('gap1d') got unexpected option(s) ['split']; ...
    """
    if name not in _LOADERS:
        close = difflib.get_close_matches(str(name), _LOADERS, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise InputValueError(f"unknown dataset {name!r}; available: {available()}.{hint}")
    loader = _LOADERS[name]
    accepted = _options(loader)
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise InputTypeError(
            f"load({name!r}) got unexpected option(s) {unknown}; it accepts {accepted}."
        )
    return loader(**options)


def load_subset(
    name: str,
    *,
    split: int | None = None,
    data_dir: str | None = None,
    max_train: int | None = None,
    max_test: int | None = None,
) -> Dataset:
    """:func:`load` by a script's short name, its first ``max_train`` / ``max_test`` rows.

    A UCI set may be named without its prefix (``"yacht"`` is ``"uci/yacht"``); ``split`` and
    ``data_dir`` are passed only to the data sets that take them (``None``: their defaults).

    Example:
        >>> import bnn_ppl as bp
        >>> d = bp.data.load_subset("digits", split=3, max_train=50, max_test=20)
        >>> d.name, len(d.x_train), len(d.x_test)
        ('digits', 50, 20)

    Raises:
        what :func:`load` and :meth:`Dataset.head` raise.
    """
    if isinstance(name, str) and name in uci.FOLDERS:
        name = f"uci/{name}"
    if name not in _LOADERS:
        return load(name)  # (raises, naming the known data sets)
    given = {"split": split, "data_dir": data_dir}
    accepted = _options(_LOADERS[name])
    options = {k: v for k, v in given.items() if v is not None and k in accepted}
    return load(name, **options).head(max_train, max_test)

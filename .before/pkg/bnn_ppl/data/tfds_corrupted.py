"""CIFAR-10-C (``cifar10_corrupted``): 19 corruptions x 5 severities of the CIFAR-10 test set.

Read through the same never-download, never-hang tfds machinery as :mod:`bnn_ppl.data.tfds`
(prepared folders are looked for first; a missing set is a
:class:`~bnn_ppl.data.DataNotFoundError` naming the command that prepares it) and standardised
with the clean training set's statistics. Sets are read lazily, one per lookup.

Example:
    >>> import bnn_ppl as bp
    >>> clean = bp.data.load("cifar10")  # doctest: +SKIP
    >>> shifted = bp.data.load_corrupted(clean, severities=[5])  # doctest: +SKIP
    >>> len(shifted)  # doctest: +SKIP
    19
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bnn_ppl.data.dataset import DataNotFoundError, Dataset
from bnn_ppl.data.tfds import (
    _check_labels,
    _find_prepared,
    _images,
    _import_tfds,
    _missing,
    _open,
    _Where,
    search_dirs,
)
from bnn_ppl.validation import InputValueError

__all__ = ["CorruptedTestSets", "load_corrupted"]


def _corruption_configs(tfds: Any) -> list[tuple[str, int]]:
    configs = tfds.builder_cls("cifar10_corrupted").BUILDER_CONFIGS
    pairs = []
    for config in configs:
        kind, severity = config.name.rsplit("_", 1)
        pairs.append((kind, int(severity)))
    return pairs


class CorruptedTestSets(Mapping[tuple[str, int], tuple[np.ndarray, np.ndarray]]):
    """``(corruption, severity) -> (x, y)``, read and standardised when looked up.

    Returned by :func:`load_corrupted`. Each corrupted test set (10,000 CIFAR-10 images) is
    read from disk on every lookup and not cached, so iterating over all 95 keeps one in
    memory at a time.
    """

    def __init__(
        self,
        keys: list[tuple[str, int]],
        open_fn: Any,
        mean: np.ndarray,
        std: np.ndarray,
    ) -> None:
        self._keys = list(keys)
        self._open = open_fn
        self._mean = np.asarray(mean, np.float64)
        self._std = np.asarray(std, np.float64)

    def __getitem__(self, key: tuple[str, int]) -> tuple[np.ndarray, np.ndarray]:
        if key not in self._keys:
            raise KeyError(key)
        x, y = _images(*self._open(key))
        _check_labels("cifar10_corrupted", y, 10)
        mean, std = self._mean.astype(np.float32), self._std.astype(np.float32)
        return (x.astype(np.float32) - mean) / std, y

    def __iter__(self) -> Iterator[tuple[str, int]]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __repr__(self) -> str:
        kinds = sorted({k for k, _ in self._keys})
        return f"CorruptedTestSets({len(self._keys)} sets: {len(kinds)} corruptions x severities)"


def load_corrupted(
    clean: Dataset,
    *,
    corruptions: Sequence[str] | None = None,
    severities: Sequence[int] | None = None,
    data_dir: str | os.PathLike | None = None,
) -> CorruptedTestSets:
    """CIFAR-10-C: the CIFAR-10 test set under 19 corruptions at 5 severities.

    Every requested ``(corruption, severity)`` is checked at once (a missing one raises
    :class:`~bnn_ppl.data.DataNotFoundError` before anything is read); the sets are then read
    lazily, one per lookup, and standardised with ``clean``'s training statistics.

    Args:
        clean: the clean ``cifar10`` :class:`~bnn_ppl.data.Dataset` (``load("cifar10")``),
            whose ``x_mean``/``x_std`` standardise the corrupted images.
        corruptions: corruption names (default all 19, e.g. ``"gaussian_noise"``, ``"fog"``).
        severities: severities in 1..5 (default all).
        data_dir: tfds data directory searched first.

    Returns:
        A mapping ``(corruption, severity) -> (x, y)``, ``x`` ``(10000, 32, 32, 3)`` float32.

    Example:
        >>> import bnn_ppl as bp
        >>> clean = bp.data.load("cifar10")  # doctest: +SKIP
        >>> shifted = bp.data.load_corrupted(clean, severities=[5])  # doctest: +SKIP
        >>> x, y = shifted["fog", 5]  # doctest: +SKIP
    """
    if clean.name != "cifar10":
        raise InputValueError(
            f"load_corrupted reads cifar10_corrupted and needs the clean 'cifar10' Dataset for "
            f"its training statistics, got {clean.name!r}. For other image sets use "
            "bp.data.corrupt_test_set."
        )
    tfds = _import_tfds()
    known = _corruption_configs(tfds)
    kinds = sorted({k for k, _ in known})
    levels = sorted({s for _, s in known})
    if isinstance(corruptions, str):
        corruptions = [corruptions]
    for kind in corruptions or []:
        if kind not in kinds:
            raise InputValueError(f"unknown corruption {kind!r}; cifar10_corrupted has {kinds}.")
    for severity in severities or []:
        if isinstance(severity, bool) or severity not in levels:
            raise InputValueError(f"severity must be in {levels}, got {severity!r}.")
    keys = [
        (k, s)
        for k, s in known
        if (corruptions is None or k in corruptions) and (severities is None or s in severities)
    ]
    if not keys:
        raise InputValueError("no (corruption, severity) pair requested; pass non-empty lists.")

    roots: dict[tuple[str, int], Path | None] = {}
    missing, looked_first = [], None
    for key in keys:
        root, looked = _find_prepared(tfds, "cifar10_corrupted", f"{key[0]}_{key[1]}", data_dir)
        roots[key] = root
        if root is None:
            missing.append(key)
            looked_first = looked_first or looked
    target = search_dirs(data_dir)[0][0]
    if missing:  # one probe: tfds may serve what is not on disk (see the module docstring)
        kind, severity = missing[0]
        try:
            _open(tfds, "cifar10_corrupted", f"{kind}_{severity}", ["test"], target)
        except DataNotFoundError as err:
            configs = [f"{k}_{s}" for k, s in missing]
            message = _missing("cifar10_corrupted", configs, looked_first or [], target)
            raise DataNotFoundError(message) from err.__cause__

    def open_fn(key: tuple[str, int]) -> tuple[Any, _Where]:
        config = f"{key[0]}_{key[1]}"
        root = roots[key] if roots[key] is not None else target
        (source,), where = _open(tfds, "cifar10_corrupted", config, ["test"], root)
        return source, where

    return CorruptedTestSets(keys, open_fn, clean.x_mean, clean.x_std)

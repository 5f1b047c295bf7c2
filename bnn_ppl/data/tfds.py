"""tensorflow-datasets loaders, read through ``tfds.data_source`` (random access, no TensorFlow).

Example:
    >>> import bnn_ppl as bp
    >>> data = bp.data.load("cifar10", data_dir="~/tensorflow_datasets")  # doctest: +SKIP
    >>> data.x_train.shape, data.num_classes  # doctest: +SKIP
    ((50000, 32, 32, 3), 10)
"""

# Notes:
#
# ================  =======================  ==============  ========
# name              x                        classes         split
# ================  =======================  ==============  ========
# ``mnist``         ``(n, 28, 28, 1)``       10              60k/10k
# ``fashion_mnist`` ``(n, 28, 28, 1)``       10              60k/10k
# ``cifar10``       ``(n, 32, 32, 3)``       10              50k/10k
# ``cifar100``      ``(n, 32, 32, 3)``       100 (fine)      50k/10k
# ``imdb_reviews``  ``(n, max_len)`` int32   2               25k/25k
# ================  =======================  ==============  ========
#
# Images are float32, standardised per channel with the training mean and std (in pixel units,
# 0-255); there is no data augmentation (augmentation is what creates the cold-posterior effect,
# Izmailov et al. 2021). ``imdb_reviews`` is tokenised with a vocabulary of the ``vocab_size``
# most frequent training tokens and padded to ``max_len`` (:mod:`bnn_ppl.data.text`).
# :func:`~bnn_ppl.data.tfds.load_corrupted` gives ``cifar10_corrupted`` (19
# corruptions x 5 severities) on the standardisation of a clean ``cifar10``
# :class:`~bnn_ppl.data.Dataset`.
#
# **Never downloads, never hangs.** tfds retries a download for minutes before giving up when
# there is no network. So before anything that could download, the prepared variant directory
# (``<root>/<name>[/<config>]/<version>/dataset_info.json``) is looked for under the
# ``data_dir`` argument, ``$TFDS_DATA_DIR`` and ``~/tensorflow_datasets``, in that order, and the
# data are opened from the first root that has it with ``download=False``. When none has it, tfds
# is still asked to open it with ``download=False`` (it may serve data sets we cannot see on
# disk, such as those of ``tfds.testing.mock_data``); if it cannot, a
# :class:`~bnn_ppl.data.DataNotFoundError` says which data set is missing, where it looked, and
# the command that prepares it on a machine with network access. That takes well under a second.
#
# tensorflow-datasets is an optional dependency (``pip install "bnn_ppl[tfds]"``), imported only
# when one of these loaders runs.

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from bnn_ppl.data import text
from bnn_ppl.data.dataset import DataNotFoundError, Dataset, standardise_images
from bnn_ppl.validation import InputError, InputTypeError, InputValueError

__all__ = [
    "IMAGE_SETS",
    "MissingExtraError",
    "load_imdb",
    "load_images",
    "search_dirs",
    "CorruptedTestSets",
    "load_corrupted",
]

IMAGE_SETS: dict[str, int] = {"mnist": 10, "fashion_mnist": 10, "cifar10": 10, "cifar100": 100}
"""Image data sets and their number of classes."""

_DEFAULT_DIR = "~/tensorflow_datasets"


class MissingExtraError(InputError, ImportError):
    """tensorflow-datasets is not installed (an ``ImportError``; the command line reports it
    as ``bnn-ppl: error``, naming the extra to install)."""


def _import_tfds() -> Any:
    try:
        import tensorflow_datasets as tfds
    except ImportError as err:
        raise MissingExtraError(
            "this data set is read with tensorflow-datasets, which is not installed (or misses "
            f'a dependency: {err}). Install the optional extra: pip install "bnn_ppl[tfds]"'
        ) from err
    return tfds


def search_dirs(data_dir: str | os.PathLike | None = None) -> list[tuple[Path, str]]:
    """The tfds data directories searched, in order, each with where it comes from.

    Example:
        >>> from bnn_ppl.data.tfds import search_dirs
        >>> [origin for _, origin in search_dirs("/data")][0]
        'data_dir argument'
    """
    candidates = []
    if data_dir is not None:
        candidates.append((Path(data_dir).expanduser(), "data_dir argument"))
    if os.environ.get("TFDS_DATA_DIR"):
        candidates.append((Path(os.environ["TFDS_DATA_DIR"]).expanduser(), "$TFDS_DATA_DIR"))
    candidates.append((Path(_DEFAULT_DIR).expanduser(), "tfds default"))
    seen, unique = set(), []
    for path, origin in candidates:
        if path not in seen:
            seen.add(path)
            unique.append((path, origin))
    return unique


def _variant(tfds: Any, name: str, config: str | None) -> str:
    """``name[/config]/version``: where tfds puts a prepared data set under a data directory."""
    cls = tfds.builder_cls(name)
    version = cls.VERSION
    if config is not None:
        version = next(c for c in cls.BUILDER_CONFIGS if c.name == config).version or version
    return "/".join(p for p in (name, config, str(version)) if p)


def _find_prepared(
    tfds: Any, name: str, config: str | None, data_dir: str | os.PathLike | None
) -> tuple[Path | None, list[str]]:
    """The first data directory holding the prepared variant (or None), and the paths tried."""
    variant = _variant(tfds, name, config)
    looked = []
    for root, origin in search_dirs(data_dir):
        info = root / variant / "dataset_info.json"
        if info.is_file():
            return root, looked
        looked.append(f"  {info}  ({origin})")
    return None, looked


def _missing(name: str, configs: Sequence[str | None], looked: list[str], target: Path) -> str:
    if list(configs) == [None]:
        what, build = repr(name), name
    elif len(configs) == 1:
        build = f"{name}/{configs[0]}"
        what = repr(build)
    else:
        shown = ", ".join(str(c) for c in configs[:5]) + (", ..." if len(configs) > 5 else "")
        what, build = f"{name!r} ({len(configs)} configs missing: {shown})", name
    return (
        f"tfds data set {what} is not prepared on this machine, and bnn_ppl never downloads "
        f"(without network, tfds would retry the download for minutes). Looked for:\n"
        + "\n".join(looked)
        + "\nPrepare it on a machine with network access (`tfds build` needs "
        "`pip install tensorflow tensorflow-datasets` there):\n"
        f"  tfds build {build} --data_dir {target} --file_format array_record\n"
        f"(if that machine is another one, copy {target / name} to the same place here)."
    )


class _Where(NamedTuple):
    """A data set variant (``name[/config]``) under a data directory, for error messages."""

    full: str
    root: Path

    def damaged(self, problem: str, err: BaseException) -> InputValueError:
        return InputValueError(
            f"tfds data set {self.full!r} under {self.root} is damaged or incomplete: {problem} "
            f"({type(err).__name__}: {err}). Delete {self.root / self.full} and prepare it "
            f"again on a machine with network access:\n  tfds build {self.full} --data_dir "
            f"{self.root} --file_format array_record"
        )


def _open(
    tfds: Any,
    name: str,
    config: str | None,
    splits: list[str],
    data_dir: str | os.PathLike | None,
) -> tuple[list[Any], _Where]:
    """Data sources of ``splits``, opened without downloading (see the module docstring), and
    where they are."""
    full = f"{name}/{config}" if config else name
    root, looked = _find_prepared(tfds, name, config, data_dir)
    if root is not None:
        where = _Where(full, root)
        try:
            sources = tfds.data_source(full, split=splits, data_dir=str(root), download=False)
        except NotImplementedError as err:  # prepared as tfrecord (tfds.load's default)
            raise DataNotFoundError(
                f"tfds data set {full!r} is prepared under {root} in a format without random "
                f"access (tfds.load writes tfrecord); bnn_ppl reads array_record. Prepare it "
                f"again on a machine with network access:\n"
                f"  tfds build {full} --data_dir {root} --file_format array_record\n"
                f"tfds said: {err}"
            ) from err
        except Exception as err:  # unreadable metadata (dataset_info.json, ...): say so
            raise where.damaged("it cannot be opened", err) from err
        if any(len(s) == 0 for s in sources):
            raise where.damaged("a split has no examples", ValueError(f"splits {splits}"))
        return sources, where
    target = search_dirs(data_dir)[0][0]
    try:
        sources = tfds.data_source(full, split=splits, data_dir=str(target), download=False)
    except Exception as err:  # tfds' "not prepared" errors vary (KeyError, NotImplementedError..)
        raise DataNotFoundError(_missing(name, [config], looked, target)) from err
    if any(len(s) == 0 for s in sources):
        raise DataNotFoundError(_missing(name, [config], looked, target))
    return sources, _Where(full, target)


def _examples(source: Any, where: _Where) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(index, example)`` pairs of a data source; an unreadable record is a clear error.

    One ``source[i]`` at a time: as fast as tfds' batched ``__getitems__`` on array_record
    (measured), and the one access path ``tfds.testing.mock_data`` implements correctly.
    """
    for i in range(len(source)):
        try:
            example = source[i]
        except Exception as err:  # array_record, PIL or protobuf errors of a damaged file
            raise where.damaged(f"record {i} of {len(source)} cannot be read", err) from err
        yield i, example


def _images(source: Any, where: _Where) -> tuple[np.ndarray, np.ndarray]:
    n = len(source)
    x, y = np.empty(0), np.empty(n, np.int32)
    for i, example in _examples(source, where):
        image = np.asarray(example["image"])
        if i == 0:
            x = np.empty((n, *image.shape), image.dtype)
        x[i] = image
        y[i] = example["label"]
    return x, y


def _check_labels(name: str, y: np.ndarray, num_classes: int) -> None:
    if y.size and (y.min() < 0 or y.max() >= num_classes):
        raise InputValueError(
            f"{name}: labels must be in [0, {num_classes}), got [{y.min()}, {y.max()}]."
        )


def load_images(name: str, *, data_dir: str | os.PathLike | None = None) -> Dataset:
    """Load an image data set of :data:`IMAGE_SETS`, standardised per channel.

    Args:
        name: ``"mnist"``, ``"fashion_mnist"``, ``"cifar10"`` or ``"cifar100"``.
        data_dir: tfds data directory searched first (then ``$TFDS_DATA_DIR`` and
            ``~/tensorflow_datasets``).

    Raises:
        DataNotFoundError: the data set is not prepared (the message says how to prepare it).
        ImportError: tensorflow-datasets is not installed.
    """
    if name not in IMAGE_SETS:
        raise InputValueError(
            f"unknown tfds image data set {name!r}; available: {sorted(IMAGE_SETS)}."
        )
    tfds = _import_tfds()
    (train, test), where = _open(tfds, name, None, ["train", "test"], data_dir)
    x_train, y_train = _images(train, where)
    x_test, y_test = _images(test, where)
    num_classes = IMAGE_SETS[name]
    _check_labels(name, y_train, num_classes)
    _check_labels(name, y_test, num_classes)
    xtr, xte, mean, std = standardise_images(x_train, x_test)
    return Dataset(name, xtr, y_train, xte, y_test, num_classes, mean, std, 0.0, 1.0)


def load_imdb(
    *,
    data_dir: str | os.PathLike | None = None,
    vocab_size: int = 20_000,
    max_len: int = 100,
) -> Dataset:
    """Load ``imdb_reviews`` (``plain_text``) as padded token ids, for a CNN-LSTM.

    The vocabulary is built from the training reviews only (:func:`~bnn_ppl.data.text.
    build_vocabulary`); ids are in ``[0, vocab_size)`` with 0 padding and 1 unknown words.
    The defaults (20,000 token ids, 100 tokens) are those of Izmailov et al.'s IMDB runs
    (bnn_hmc, after Keras' imdb_cnn_lstm example).

    Args:
        data_dir: tfds data directory searched first.
        vocab_size: number of token ids, including padding and unknown.
        max_len: length of every sequence (longer reviews keep their last ``max_len`` tokens).
    """
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int | np.integer):
        raise InputTypeError(f"vocab_size must be an integer, got {type(vocab_size).__name__}.")
    if vocab_size < 3:
        raise InputValueError(
            f"vocab_size must be >= 3 (ids 0 and 1 are reserved), got {vocab_size}."
        )
    if isinstance(max_len, bool) or not isinstance(max_len, int | np.integer):
        raise InputTypeError(f"max_len must be an integer, got {type(max_len).__name__}.")
    if max_len < 1:
        raise InputValueError(f"max_len must be >= 1, got {max_len}.")
    tfds = _import_tfds()
    (train, test), where = _open(tfds, "imdb_reviews", "plain_text", ["train", "test"], data_dir)
    texts, labels = {}, {}
    for split, source in (("train", train), ("test", test)):
        texts[split] = [None] * len(source)
        labels[split] = np.empty(len(source), np.int32)
        for i, example in _examples(source, where):
            texts[split][i] = example["text"]
            labels[split][i] = example["label"]
        _check_labels("imdb_reviews", labels[split], 2)
    vocabulary = text.build_vocabulary(texts["train"], int(vocab_size))
    return Dataset(
        "imdb_reviews",
        text.encode(texts["train"], vocabulary, int(max_len)),
        labels["train"],
        text.encode(texts["test"], vocabulary, int(max_len)),
        labels["test"],
        2,
        np.zeros(()),
        np.ones(()),
        0.0,
        1.0,
    )


# -------------------- tfds_corrupted
# CIFAR-10-C (``cifar10_corrupted``): 19 corruptions x 5 severities of the CIFAR-10 test set.
#
# Read through the same never-download, never-hang tfds machinery as :mod:`bnn_ppl.data.tfds`
# (prepared folders are looked for first; a missing set is a
# :class:`~bnn_ppl.data.DataNotFoundError` naming the command that prepares it) and standardised
# with the clean training set's statistics. Sets are read lazily, one per lookup.

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

    Example:
        >>> import bnn_ppl as bp
        >>> clean = bp.data.load("cifar10")  # doctest: +SKIP
        >>> shifted = bp.data.load_corrupted(clean, severities=[5])  # doctest: +SKIP
        >>> len(shifted)  # doctest: +SKIP
        19
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

"""tensorflow-datasets loaders, read through ``tfds.data_source`` (random access, no TensorFlow).

================  =======================  ==============  ========
name              x                        classes         split
================  =======================  ==============  ========
``mnist``         ``(n, 28, 28, 1)``       10              60k/10k
``fashion_mnist`` ``(n, 28, 28, 1)``       10              60k/10k
``cifar10``       ``(n, 32, 32, 3)``       10              50k/10k
``cifar100``      ``(n, 32, 32, 3)``       100 (fine)      50k/10k
``imdb_reviews``  ``(n, max_len)`` int32   2               25k/25k
================  =======================  ==============  ========

Images are float32, standardised per channel with the training mean and std (in pixel units,
0-255); there is no data augmentation (augmentation is what creates the cold-posterior effect,
Izmailov et al. 2021). ``imdb_reviews`` is tokenised with a vocabulary of the ``vocab_size``
most frequent training tokens and padded to ``max_len`` (:mod:`bnn_ppl.data.text`).
:func:`~bnn_ppl.data.tfds_corrupted.load_corrupted` gives ``cifar10_corrupted`` (19
corruptions x 5 severities) on the standardisation of a clean ``cifar10``
:class:`~bnn_ppl.data.Dataset`.

**Never downloads, never hangs.** tfds retries a download for minutes before giving up when
there is no network. So before anything that could download, the prepared variant directory
(``<root>/<name>[/<config>]/<version>/dataset_info.json``) is looked for under the
``data_dir`` argument, ``$TFDS_DATA_DIR`` and ``~/tensorflow_datasets``, in that order, and the
data are opened from the first root that has it with ``download=False``. When none has it, tfds
is still asked to open it with ``download=False`` (it may serve data sets we cannot see on
disk, such as those of ``tfds.testing.mock_data``); if it cannot, a
:class:`~bnn_ppl.data.DataNotFoundError` says which data set is missing, where it looked, and
the command that prepares it on a machine with network access. That takes well under a second.

tensorflow-datasets is an optional dependency (``pip install "bnn_ppl[tfds]"``), imported only
when one of these loaders runs.

Example:
    >>> import bnn_ppl as bp
    >>> data = bp.data.load("cifar10", data_dir="~/tensorflow_datasets")  # doctest: +SKIP
    >>> data.x_train.shape, data.num_classes  # doctest: +SKIP
    ((50000, 32, 32, 3), 10)
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
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

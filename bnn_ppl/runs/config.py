"""The ``config.json`` of a run folder: what a run was, and the claim of a folder for it."""

# Notes:
#
# A run folder (:mod:`bnn_ppl.runs`) is claimed before anything runs: :func:`claim` writes
# :func:`make_config`'s record (the run's options, the identity of its data, the model's size,
# paths and library versions) or, when the folder already holds a run, refuses unless the options
# and data are the same, naming every difference. :func:`data_identity` fingerprints a data set
# so that a rerun on other data is refused and ``bnn-ppl compare`` only compares runs on one test
# set.

from __future__ import annotations

import errno
import hashlib
import importlib.metadata
import json
import os
import platform
from collections.abc import Collection, Mapping
from typing import Any

import numpy as np

import bnn_ppl
from bnn_ppl.io import read_json, remove_temporaries, write_json
from bnn_ppl.validation import InputValueError

__all__ = [
    "FORMAT",
    "SCHEMA_VERSION",
    "CONFIG",
    "POSTERIOR",
    "SAMPLES",
    "PREDICTIONS",
    "METRICS",
    "EVALUATION",
    "PROGRESS",
    "CHECKPOINTS",
    "versions",
    "git_commit",
    "array_sha256",
    "data_identity",
    "make_config",
    "config_differences",
    "read_config",
    "read_record",
    "claim",
    "check_claim",
    "record_checksum",
    "FolderLock",
    "LOCK",
]

FORMAT = "bnn_ppl.run"
SCHEMA_VERSION = 1
CONFIG = "config.json"
SAMPLES = "samples.npz"
PREDICTIONS = "predictions.npz"
METRICS = "metrics.json"
POSTERIOR = "posterior.nc"
EVALUATION = "evaluation.json"
PROGRESS = "progress.jsonl"
CHECKPOINTS = "checkpoints"
FILES = (CONFIG, POSTERIOR, SAMPLES, PREDICTIONS, METRICS, EVALUATION, PROGRESS)
"""The files of a run folder (their atomic writers' temporaries are cleaned by :func:`claim`)."""

_PACKAGES = ("jax", "jaxlib", "numpyro", "flax", "optax", "numpy", "arviz")


def versions() -> dict[str, str]:
    """Versions of bnn_ppl, Python and the libraries a run's numbers depend on."""
    out = {"bnn_ppl": bnn_ppl.__version__, "python": platform.python_version()}
    for name in _PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def git_commit(where: str | os.PathLike) -> str | None:
    """The commit checked out at ``where`` (a folder in a git checkout), with ``+dirty`` when
    tracked files have uncommitted changes; ``None`` outside git or without git. Read it when
    a run starts: it records the code that runs, not whatever HEAD is when the run ends.

    Example:
        >>> import tempfile
        >>> git_commit(tempfile.mkdtemp()) is None  # not a checkout
        True
    """
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=where, capture_output=True, text=True,
                              check=True).stdout.strip()  # fmt: skip

    try:
        head = git("rev-parse", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+dirty" if dirty else "")


def array_sha256(*arrays: Any) -> str:
    """SHA-256 of the shapes, dtypes and bytes of ``arrays`` (a data fingerprint)."""
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(np.asarray(a))
        h.update(f"{a.shape}{a.dtype}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def data_identity(
    data: Any, *, name: str | None = None, split: int | None = None
) -> dict[str, Any]:
    """The ``data`` section of a run's config: the data set's name, split, task, sizes and the
    SHA-256 fingerprints (:func:`array_sha256`) of its training and test arrays.

    Args:
        data: a :class:`~bnn_ppl.data.Dataset`.
        name: the data set's name as the user gave it (default ``data.name``).
        split: the split number where the data set has several.

    Example:
        >>> import os, tempfile
        >>> import numpy as np
        >>> from bnn_ppl.runs import config as run_config
        >>> from bnn_ppl.data import Dataset
        >>> z = np.zeros(2)
        >>> data = Dataset("toy", np.zeros((4, 2)), np.array([0, 1, 0, 1]), np.zeros((2, 2)),
        ...                np.array([1, 0]), 2, z, z + 1, 0.0, 1.0)
        >>> ident = run_config.data_identity(data)
        >>> ident["num_train"], len(ident["test_sha256"])
        (4, 64)
        >>> folder = os.path.join(tempfile.mkdtemp(), "run")
        >>> run_config.claim(folder, run_config.make_config({"seed": 0}, data=ident))
        False
        >>> run_config.claim(folder, run_config.make_config({"seed": 0}, data=ident))
        True
    """
    return {
        "name": str(data.name if name is None else name),
        "split": split,
        "task": data.task,
        "num_classes": int(data.num_classes),
        "num_train": int(len(data.x_train)),
        "num_test": int(len(data.x_test)),
        "train_sha256": array_sha256(data.x_train, data.y_train),
        "test_sha256": array_sha256(data.x_test, data.y_test),
    }


def make_config(
    arguments: Mapping[str, Any],
    *,
    data: Mapping[str, Any],
    model: Mapping[str, Any] | None = None,
    environment: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``config.json`` of a run: its options, its data's identity, the model's size, where
    it ran from (``environment``: paths) and the library versions. Only ``arguments`` and
    ``data`` are compared by :func:`claim`; the rest may change between a run and its resume."""
    return {
        "format": FORMAT,
        "schema_version": SCHEMA_VERSION,
        "arguments": dict(arguments),
        "data": dict(data),
        "model": dict(model or {}),
        "environment": dict(environment or {}),
        "versions": versions(),
    }


def config_differences(saved: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """One line per differing option or data field between two run configs (versions and the
    model summary are not compared: they follow from the rest)."""
    lines = []
    for section, prefix in (("arguments", ""), ("data", "data.")):
        a, b = saved.get(section) or {}, new.get(section) or {}
        for key in sorted(set(a) | set(b), key=str):
            old, now = a.get(key, "(absent)"), b.get(key, "(absent)")
            if old != now:
                lines.append(f"  {prefix}{key}: {old!r} ({CONFIG}) != {now!r} (this run)")
    return lines


def record_checksum(record: Mapping[str, Any]) -> str:
    """SHA-256 of a JSON record's fields other than ``"checksum"`` (canonical JSON): what
    ``metrics.json`` stores under ``"checksum"``, so that a damaged record is refused. It
    detects damage, not tampering: whoever edits the record can recompute it."""
    body = {k: v for k, v in record.items() if k != "checksum"}
    text = json.dumps(body, sort_keys=True, allow_nan=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def read_record(path: str, missing: str) -> Any:
    """A run folder's JSON file; ``InputValueError(missing)`` if it does not exist, one naming
    the file if it cannot be read or parsed."""
    try:
        return read_json(path)
    except FileNotFoundError:
        raise InputValueError(missing) from None
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InputValueError(f"{path} is unreadable (damaged?): {e}") from e


def read_config(folder: str) -> dict[str, Any]:
    path = os.path.join(folder, CONFIG)
    cfg = read_record(path, f"{folder} is not a bnn-ppl run folder (it has no {CONFIG}); pass "
                            "the --out folder of a `bnn-ppl run`.")  # fmt: skip
    if not isinstance(cfg, dict) or cfg.get("format") != FORMAT:
        raise InputValueError(f"{path} is not the config of a bnn-ppl run (format {FORMAT!r}).")
    if cfg.get("schema_version") != SCHEMA_VERSION:
        raise InputValueError(
            f"{path} has schema version {cfg.get('schema_version')!r}; this bnn_ppl reads "
            f"version {SCHEMA_VERSION}. Use the bnn_ppl version that wrote it."
        )
    return cfg


LOCK = ".lock"
"""The run folder's lock file (an exclusive ``flock`` held by :class:`FolderLock`)."""


class FolderLock:
    """One writer per run folder: an exclusive ``flock`` on ``<folder>/.lock``, held from
    the claim to the last file written (the kernel releases it when the process ends, even
    by SIGKILL). A second process asking for it is refused at once, and touches nothing.

    Use as a context manager around :func:`claim` and every write of the run::

        with FolderLock(out) as lock:
            runs.claim(out, config, lock=lock)
            ...  # fit, then save_posterior(out, ...)

    ``existing=True`` locks a folder that already holds a run (``config.json``), to read it
    and write next to it (``bnn-ppl evaluate``): a folder without a run is refused and
    nothing is created.

    Raises:
        InputValueError: ``folder`` exists and is not a folder (``existing``: holds no run),
            or another process holds its lock (the message names the folder and the holder's
            process id).
    """

    def __init__(self, folder: str | os.PathLike, *, existing: bool = False):
        self.folder = os.fspath(folder)
        self.existing = bool(existing)
        self._fd: int | None = None
        self._writable = True

    @property
    def held(self) -> bool:
        """Whether this object holds the lock now."""
        return self._fd is not None

    def __enter__(self) -> FolderLock:
        import fcntl

        name = f"run folder {self.folder}" if self.existing else f"--out {self.folder}"
        if self.existing and not os.path.isdir(self.folder):
            raise InputValueError(f"run folder {self.folder} does not exist (pass the --out of "
                                  "a bnn-ppl run).")
        if self.existing and not os.path.isfile(os.path.join(self.folder, CONFIG)):
            raise InputValueError(f"{self.folder} is not a bnn-ppl run folder (it has no "
                                  f"{CONFIG}); pass the --out folder of a `bnn-ppl run`.")
        if os.path.exists(self.folder) and not os.path.isdir(self.folder):
            raise InputValueError(f"{name} exists and is not a folder.")
        path = os.path.join(self.folder, LOCK)
        if os.path.isdir(self.folder) and not os.path.exists(path):
            entries = [e for e in os.listdir(self.folder) if not _temporary(e)]
            if entries and CONFIG not in entries:  # not a run folder: leave it as it is
                raise InputValueError(
                    f"--out {self.folder} is not empty and is not a bnn-ppl run folder (no "
                    f"{CONFIG}); choose a new or empty folder."
                )
        try:
            fd = os.open(path, os.O_RDWR)  # an existing lock file is never rewritten here
        except FileNotFoundError:
            if not self.existing:
                os.makedirs(self.folder, exist_ok=True)
            fd = self._read_only(path, os.O_RDWR | os.O_CREAT)
        except OSError:  # (not writable: see _read_only)
            fd = self._read_only(path, os.O_RDWR)
        if fd is None:  # a read-only folder without a lock file: nobody can hold its lock
            return self
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            try:
                holder = os.read(fd, 32).decode("ascii", "replace").strip() or "unknown"
            finally:
                os.close(fd)
            other = "" if self.existing else ", or choose another --out"
            raise InputValueError(
                f"{name} is in use by another bnn-ppl run or evaluate (process {holder} holds "
                f"{path}); nothing was changed. Wait for it to finish{other}."
            ) from None
        self._fd = fd
        return self

    def _read_only(self, path: str, flags: int) -> int | None:
        """Open the lock file with ``flags``; where a folder that ``existing`` reads may not
        be written, read-only (``flock`` needs no write access), or ``None`` if it has none."""
        try:
            return os.open(path, flags, 0o666)
        except OSError as e:
            if not self.existing or e.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise
        self._writable = False
        return os.open(path, os.O_RDONLY) if os.path.exists(path) else None

    def mark(self) -> None:
        """Write this process's id into the lock file (for the message a second process
        gets); :func:`claim` calls it once the folder is claimed, so that a refused command
        leaves even the lock file as it was."""
        if self._fd is not None and self._writable:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, f"{os.getpid()}\n".encode(), 0)

    def __exit__(self, *exc: Any) -> None:
        if self._fd is not None:
            import fcntl

            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def check_claim(folder: str | os.PathLike, config: Mapping[str, Any],
                may_change: Collection[str] = ()) -> bool:  # fmt: skip
    """Whether :func:`claim` would reuse ``folder`` (``False``: new or empty), reading only:
    call it before taking the folder's lock where the folder has no lock file yet, so that a
    refused run does not even create one (where it has one, take the lock first: a busy
    folder is then refused as busy).

    Raises:
        ValueError: as :func:`claim` (not a folder, not a run folder, another configuration).
    """
    folder = os.fspath(folder)
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise InputValueError(f"--out {folder} exists and is not a folder.")
    entries = [e for e in os.listdir(folder) if e != LOCK and not _temporary(e)] if (
        os.path.isdir(folder)) else []  # fmt: skip
    if not entries:
        return False
    if not os.path.exists(os.path.join(folder, CONFIG)):
        raise InputValueError(
            f"--out {folder} is not empty and is not a bnn-ppl run folder (no {CONFIG}); "
            "choose a new or empty folder."
        )
    saved = read_config(folder)
    kept = {k: v for k, v in (config.get("arguments") or {}).items() if k not in may_change}
    then = {k: v for k, v in (saved.get("arguments") or {}).items() if k not in may_change}
    diff = config_differences({**saved, "arguments": then}, {**config, "arguments": kept})
    if diff:
        raise InputValueError(
            f"--out {folder} holds a run with a different configuration; refusing to reuse "
            "it:\n" + "\n".join(diff) + "\nUse a new --out folder, or re-run with the "
            "original options."
        )
    return True


def _temporary(entry: str) -> bool:
    """Whether a folder entry is a temporary of an atomic write of a run file."""
    return entry.endswith(".tmp") and any(entry.startswith(f".{n}.") for n in FILES)


def claim(folder: str | os.PathLike, config: Mapping[str, Any],
          may_change: Collection[str] = (), *, lock: FolderLock | None = None) -> bool:  # fmt: skip
    """Make ``folder`` the folder of the run ``config``; return whether it already was.

    A new or empty folder gets ``config.json``. A folder written by the same configuration is
    reused (a killed run resumes from its checkpoints; a finished one is redone with the same
    result, its files replaced atomically, so a kill meanwhile leaves the finished results
    readable). ``may_change``: ``arguments`` that may differ from the folder's (a reference
    run's budget: a rerun continues its chains); ``config.json`` is left as it is, for the
    caller to rewrite once the run has succeeded (so that a run refused later, e.g. by a
    checkpoint folder in use, changes nothing). Temporary files that a killed write left
    behind (``.<name>.<hex>.tmp`` of the run's own files) are removed first; a folder holding
    nothing else counts as new.

    Everything happens under the folder's :class:`FolderLock`: ``lock``, held by the caller
    for the whole run, or else one taken for the claim alone. A folder another process holds
    is refused at once, before anything is removed or written.

    Raises:
        ValueError: the folder holds a run with a different configuration (every differing
            option is named with both values), files that are not a bnn-ppl run, or is in
            use by another process.
    """
    folder = os.fspath(folder)
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise InputValueError(f"--out {folder} exists and is not a folder.")
    if lock is None or not lock.held:
        if not os.path.exists(os.path.join(folder, LOCK)):  # no lock file yet: nobody holds it
            check_claim(folder, config, may_change)  # read only: a refusal creates nothing
        with FolderLock(folder) as held:
            return claim(folder, config, may_change, lock=held)
    if os.path.abspath(lock.folder) != os.path.abspath(folder):
        raise InputValueError(f"lock is the lock of {lock.folder}, not of {folder}.")
    remove_temporaries(folder, FILES)  # (under the lock: no other writer is in flight)
    if check_claim(folder, config, may_change):
        lock.mark()
        return True
    write_json(os.path.join(folder, CONFIG), dict(config))
    lock.mark()
    return False

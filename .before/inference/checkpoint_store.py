"""A checkpoint folder whose every file is verified before it is trusted.

:class:`CheckpointStore` is where :func:`~bnn_ppl.inference.resume.run_segments` keeps a run:

* ``run.json`` - the run's fingerprint (:mod:`bnn_ppl.inference.fingerprint`), written once;
* ``state_NNNNNN.npz`` - the sampler state after segment ``N`` (segment 0 is warmup);
* ``draws_NNNNNN.npz`` - the draws and extra fields of sampling segment ``N`` (``N >= 1``);
  ``draws_000000.npz``, if warmup committed one, holds warmup's statistics (its wall time,
  per-iteration fields such as leapfrog steps, the adapted step size);
* ``record_NNNNNN.json`` - the commit record of segment ``N``, written last: the SHA-256 of the
  state file and of *every* draws file of segments ``1..N``, the draws per segment, and a
  SHA-256 of the record itself (``"checksum"``, over its other fields).

Guarantees (each one is tested in ``tests/test_resume.py``):

* **Verified reads.** :meth:`CheckpointStore.latest` checks a record's own checksum, its name
  against its segment number, its fingerprint digest against ``run.json``'s, and the SHA-256 of
  every file it names; a record that fails any check, and every newer one, is *moved aside*
  into ``aside/`` with the damaged files (never deleted, never overwritten), and the newest
  intact record is used: a resume redoes the lost segments, which are bit-exact.
* **No short run.** A record counts the draws of every segment; a finished run is one whose
  record holds every requested draw, and it is read from all its draws files, each verified.
* **One writer.** An exclusive ``flock`` on ``lock`` (released by the kernel when the process
  dies, also by SIGKILL): a second process on the same folder gets a clear error.
* **Atomic files.** Every file goes through :mod:`bnn_ppl.io`; temporary files a killed process
  left behind are removed when the folder is opened (under the lock).

Example:
    >>> import tempfile, numpy as np
    >>> store = CheckpointStore(tempfile.mkdtemp(), {"digest": "abc"})
    >>> with store:
    ...     _ = store.commit(0, {"leaf_0": np.zeros(3)}, None, draws_per_segment=[])
    ...     store.latest().segment
    0
"""

from __future__ import annotations

import fcntl
import glob
import hashlib
import json
import os
import time
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from bnn_ppl import io
from bnn_ppl.validation import InputValueError

__all__ = ["CheckpointStore", "CheckpointError", "Record", "record_checksum"]

FORMAT = "bnn_ppl.resume/1"


class CheckpointError(InputValueError):
    """A checkpoint folder that cannot be used: locked, another run's, or damaged beyond
    recovery. The message names the file and what to do."""


class Record(NamedTuple):
    """A verified commit record: ``segment`` (0 = after warmup), ``draws_per_segment`` (draws
    per chain of segments ``1..segment``), and the verified file names -> SHA-256."""

    segment: int
    draws_per_segment: list[int]
    state_file: str
    state_sha256: str
    draws_files: dict[str, str]

    @property
    def draws_done(self) -> int:
        """Draws per chain committed so far."""
        return int(sum(self.draws_per_segment))


def saved_fingerprint(path: str | os.PathLike) -> dict[str, Any] | None:
    """The fingerprint in ``path``'s ``run.json``, verified; ``None`` where there is none.

    Raises:
        CheckpointError: ``run.json`` is damaged or not a bnn_ppl checkpoint's.
    """
    run_file = os.path.join(path, "run.json")
    if not os.path.exists(run_file):
        return None
    try:
        saved = io.read_json(run_file)
        ok = isinstance(saved, dict) and saved.get("checksum") == record_checksum(saved)
    except (ValueError, UnicodeDecodeError):
        ok = False
    if not ok or saved.get("format") != FORMAT:
        raise CheckpointError(
            f"{run_file} is damaged or not a bnn_ppl checkpoint (checksum mismatch); it is "
            "left as it is. Restore it or use a new folder."
        )
    return dict(saved["fingerprint"])


def record_checksum(fields: Mapping[str, Any]) -> str:
    """SHA-256 of a record's fields other than ``"checksum"`` (canonical JSON)."""
    body = {k: v for k, v in fields.items() if k != "checksum"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode("utf-8")).hexdigest()


def _name(kind: str, segment: int, ext: str) -> str:
    return f"{kind}_{segment:06d}.{ext}"


WARMUP = _name("draws", 0, "npz")


class CheckpointStore:
    """The checkpoint folder ``path`` of the run whose fingerprint is ``fingerprint`` (a
    JSON-able dict with a ``"digest"``); use as a context manager (it holds the lock).

    Opening checks ``run.json``: a new folder gets it; a folder of another run is refused by
    :func:`~bnn_ppl.inference.fingerprint.check_same` (naming the differing field).
    """

    def __init__(self, path: str | os.PathLike, fingerprint: Mapping[str, Any]):
        self.path = os.fspath(path)
        self.fingerprint = dict(fingerprint)
        self._lock_fd: int | None = None
        self._last: Record | None = None  # the newest record verified or written by us

    # ---------------------------------------------------------------- lock
    def __enter__(self) -> CheckpointStore:
        os.makedirs(self.path, exist_ok=True)
        fd = os.open(os.path.join(self.path, "lock"), os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise CheckpointError(
                f"checkpoint_dir {self.path} is in use by another process (its 'lock' is held); "
                "wait for it to finish or use another folder."
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd, self._last = fd, None
        try:
            self._clean_temporaries()
            self._check_run_file()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def _require_lock(self) -> None:
        if self._lock_fd is None:
            raise RuntimeError("use the CheckpointStore inside `with store:` (it holds the lock).")

    def _clean_temporaries(self) -> None:
        io.remove_temporaries(self.path)  # left by killed atomic writes; we hold the lock

    # ---------------------------------------------------------------- run.json
    def _check_run_file(self) -> None:
        from bnn_ppl.inference.fingerprint import check_same

        run_file = os.path.join(self.path, "run.json")
        if not os.path.exists(run_file):
            if glob.glob(os.path.join(self.path, "record_*.json")):
                raise CheckpointError(
                    f"{run_file} is missing but the folder holds commit records: it is damaged; "
                    "restore run.json or use a new folder."
                )
            body = {"format": FORMAT, "fingerprint": self.fingerprint}
            io.write_json(run_file, {**body, "checksum": record_checksum(body)})
            return
        saved = saved_fingerprint(self.path)
        assert saved is not None
        check_same(saved, self.fingerprint, self.path)

    # ---------------------------------------------------------------- writing
    def commit(
        self,
        segment: int,
        state: Mapping[str, np.ndarray],
        draws: Mapping[str, np.ndarray] | None,
        draws_per_segment: list[int],
    ) -> Record:
        """Write segment ``segment``'s state (and draws), then its record; return the record.

        ``draws_per_segment`` lists the draws per chain of segments ``1..segment``; segment 0
        (warmup) may have ``draws`` (its statistics: :meth:`load_warmup`), every later one
        must. Files of this segment that exist (from a moved-aside run) are moved aside first,
        never overwritten.
        """
        self._require_lock()
        if len(draws_per_segment) != segment or (draws is None and segment > 0):
            raise InputValueError(
                "draws_per_segment must list segments 1..segment, and draws be given for "
                "segment > 0."
            )
        previous = (self._last or self.latest()) if segment > 0 else None
        if segment > 0 and (previous is None or previous.segment != segment - 1):
            raise InputValueError(
                f"segment {segment} must follow segment {segment - 1}; write the segments in order."
            )
        names = [_name(k, segment, e) for k, e in (("state", "npz"), ("draws", "npz"))]
        self._move_aside([*names, _name("record", segment, "json")], "superseded")
        state_file = names[0]
        files = {state_file: io.save_npz(os.path.join(self.path, state_file), state)}
        draws_files = dict(previous.draws_files) if previous else {}
        if draws is not None:
            draws_files[names[1]] = io.save_npz(os.path.join(self.path, names[1]), draws)
        body = {
            "format": FORMAT,
            "fingerprint": self.fingerprint["digest"],
            "segment": segment,
            "draws_per_segment": list(map(int, draws_per_segment)),
            "state_file": state_file,
            "files": files | draws_files,
        }
        io.write_json(
            os.path.join(self.path, _name("record", segment, "json")),
            {**body, "checksum": record_checksum(body)},
        )
        if previous is not None and previous.segment >= 1:  # keep the two newest states
            old = os.path.join(self.path, _name("state", previous.segment - 1, "npz"))
            if os.path.exists(old):
                os.unlink(old)
        self._last = Record(
            segment, list(draws_per_segment), state_file, files[state_file], draws_files
        )
        return self._last

    def _move_aside(self, names: list[str], why: str) -> None:
        present = [n for n in names if os.path.exists(os.path.join(self.path, n))]
        if not present:
            return
        folder = os.path.join(self.path, "aside", f"{time.strftime('%Y%m%dT%H%M%S')}-{why}")
        os.makedirs(folder, exist_ok=True)
        for n in present:
            target = os.path.join(folder, n)
            while os.path.exists(target):
                target += "~"
            os.replace(os.path.join(self.path, n), target)

    # ---------------------------------------------------------------- reading
    def _verify(self, name: str) -> tuple[Record | None, list[str]]:
        """The record in file ``name`` if it and every file it names are intact; else
        ``None`` and the names of the damaged files (the record's own name included)."""
        path = os.path.join(self.path, name)
        try:
            with open(path, encoding="utf-8") as f:
                rec = json.load(f)
            segment = rec["segment"]
            ok = (
                isinstance(rec, dict)
                and rec.get("checksum") == record_checksum(rec)
                and rec.get("format") == FORMAT
                and rec.get("fingerprint") == self.fingerprint["digest"]
                and isinstance(segment, int)
                and isinstance(rec["files"], dict)
                and all(isinstance(v, str) for v in rec["files"].values())
                and isinstance(rec["draws_per_segment"], list)
                and all(type(n) is int and n >= 0 for n in rec["draws_per_segment"])
                and name == _name("record", segment, "json")
                and len(rec["draws_per_segment"]) == segment
                and rec["state_file"] == _name("state", segment, "npz")
                and set(rec["files"]) - {WARMUP}  # (warmup's statistics: optional)
                == {rec["state_file"]} | {_name("draws", k, "npz") for k in range(1, segment + 1)}
            )
        except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError, OSError):
            ok = False
        if not ok:
            return None, [name]
        bad = []
        for fname, digest in rec["files"].items():
            fpath = os.path.join(self.path, fname)
            if not os.path.exists(fpath) or io.sha256_file(fpath) != digest:
                bad.append(fname)
        if bad:
            return None, [name] + bad
        draws = {k: v for k, v in rec["files"].items() if k != rec["state_file"]}
        state = rec["state_file"]
        return Record(segment, rec["draws_per_segment"], state, rec["files"][state], draws), []

    def latest(self) -> Record | None:
        """The newest intact record (``None``: nothing committed yet). Damaged records, the
        damaged files they name, and every newer segment's files are moved into ``aside/``."""
        self._require_lock()
        names = sorted(glob.glob(os.path.join(self.path, "record_*.json")), reverse=True)
        for i, path in enumerate(names):
            record, damaged = self._verify(os.path.basename(path))
            if record is None:
                self._move_aside(damaged, "damaged")
                continue
            if i > 0:  # files of the segments after the intact record: keep them aside
                newer = [
                    f"{kind}_{k:06d}.{ext}"
                    for k in range(record.segment + 1, record.segment + 2 + i)
                    for kind, ext in (("state", "npz"), ("draws", "npz"), ("record", "json"))
                ]
                self._move_aside(newer, "after-damaged")
            self._last = record
            return record
        if names:
            raise CheckpointError(
                f"no intact commit record in {self.path} (all moved to {self.path}/aside); "
                "delete the folder's record_*.json to start over, or use a new folder."
            )
        return None

    def load_state(self, record: Record) -> dict[str, np.ndarray]:
        """The state arrays of ``record``, verified against its SHA-256."""
        return self._load(record.state_file, record.state_sha256)

    def load_draws(self, record: Record) -> list[dict[str, np.ndarray]]:
        """Every segment's draws of ``record``, in order, each verified."""
        names = [_name("draws", k, "npz") for k in range(1, record.segment + 1)]
        return [self._load(n, record.draws_files[n]) for n in names]

    def load_warmup(self, record: Record) -> dict[str, np.ndarray] | None:
        """Warmup's statistics, verified (``None``: warmup committed none)."""
        digest = record.draws_files.get(WARMUP)
        return None if digest is None else self._load(WARMUP, digest)

    def _load(self, name: str, digest: str) -> dict[str, np.ndarray]:
        try:
            return io.load_npz(os.path.join(self.path, name), sha256=digest)
        except (ValueError, OSError) as e:
            raise CheckpointError(
                f"{os.path.join(self.path, name)} changed after it was verified ({e}); rerun to "
                "fall back to the newest intact checkpoint."
            ) from e

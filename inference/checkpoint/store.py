"""A checkpoint folder whose every file is verified before it is trusted.

Example:
    >>> import tempfile, numpy as np
    >>> store = CheckpointStore(tempfile.mkdtemp(), {"digest": "abc"})
    >>> with store:
    ...     _ = store.commit(0, {"leaf_0": np.zeros(3)}, None, draws_per_segment=[])
    ...     store.latest().segment
    0
"""

# Notes:
#
# :class:`CheckpointStore` is where :func:`~bnn_ppl.inference.checkpoint.segments.run_segments`
# keeps a run:
#
# * ``run.json`` - the run's fingerprint (:func:`run_fingerprint`), written once;
# * ``state_NNNNNN.npz`` - the sampler state after segment ``N`` (segment 0 is warmup);
# * ``draws_NNNNNN.npz`` - the draws and extra fields of sampling segment ``N`` (``N >= 1``);
#   ``draws_000000.npz``, if warmup committed one, holds warmup's statistics (its wall time,
#   per-iteration fields such as leapfrog steps, the adapted step size);
# * ``record_NNNNNN.json`` - the commit record of segment ``N``, written last: the SHA-256 of the
#   state file and of *every* draws file of segments ``1..N``, the draws per segment, and a
#   SHA-256 of the record itself (``"checksum"``, over its other fields).
#
# Guarantees (each one is tested in ``tests/inference/checkpoint/test_resume.py``):
#
# * **Verified reads.** :meth:`CheckpointStore.latest` checks a record's own checksum, its name
#   against its segment number, its fingerprint digest against ``run.json``'s, and the SHA-256 of
#   every file it names; a record that fails any check, and every newer one, is *moved aside*
#   into ``aside/`` with the damaged files (never deleted, never overwritten), and the newest
#   intact record is used, with a :class:`CheckpointDamageWarning`: a resume keeps the intact
#   prefix (every segment's state is kept, so damage to any draws file falls back to the
#   segment before it) and redoes the lost segments, which are bit-exact.
# * **Damage, not tampering.** The checksums detect damage (flipped bits, truncation, files of
#   another run); an edit whose checksums are recomputed is accepted.
# * **No short run.** A record counts the draws of every segment; a finished run is one whose
#   record holds every requested draw, and it is read from all its draws files, each verified.
# * **One writer.** An exclusive ``flock`` on ``lock`` (released by the kernel when the process
#   dies, also by SIGKILL): a second process on the same folder gets a clear error.
# * **Atomic files.** Every file goes through :mod:`bnn_ppl.io`; temporary files a killed process
#   left behind are removed when the folder is opened (under the lock).

from __future__ import annotations

import dataclasses
import errno
import fcntl
import glob
import hashlib
import json
import os
import re
import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import numpy as np

from bnn_ppl import io
from bnn_ppl.inference.potential.bnn import EARLIER_CPU_CHUNK, RECORDED_RULES
from bnn_ppl.validation import InputValueError

__all__ = [
    "CheckpointStore",
    "CheckpointError",
    "CheckpointDamageWarning",
    "Record",
    "record_checksum",
    "run_fingerprint",
    "check_same",
    "array_digest",
    "function_digest",
    "resume_chunk",
    "recorded_chunk",
]

FORMAT = "bnn_ppl.resume/1"


class CheckpointError(InputValueError):
    """A checkpoint folder that cannot be used: locked, another run's, or damaged beyond
    recovery. The message names the file and what to do."""


class CheckpointDamageWarning(UserWarning):
    """Damaged checkpoint files were moved aside and the run resumes from an older segment."""


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
    :func:`~bnn_ppl.inference.checkpoint.store.check_same` (naming the differing field).
    A folder on read-only storage opens :attr:`read_only` (a shared lock, nothing written): a
    finished run is read back; committing, or damage that would be moved aside, is an error.
    """

    def __init__(self, path: str | os.PathLike, fingerprint: Mapping[str, Any]):
        self.path = os.fspath(path)
        self.fingerprint = dict(fingerprint)
        self._lock_fd: int | None = None
        self._last: Record | None = None  # the newest record verified or written by us
        self.read_only = False  # on read-only storage: read back, never written

    # ---------------------------------------------------------------- lock
    def __enter__(self) -> CheckpointStore:
        self.read_only = False
        try:
            os.makedirs(self.path, exist_ok=True)
            fd = os.open(os.path.join(self.path, "lock"), os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as e:  # read-only storage: a finished run can still be read back
            if e.errno not in (errno.EROFS, errno.EACCES, errno.EPERM) or not os.path.isfile(
                    os.path.join(self.path, "run.json")):  # fmt: skip
                raise
            fd = os.open(self.path, os.O_RDONLY)  # (a shared lock on the folder itself)
            self.read_only = True
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if self.read_only else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise CheckpointError(
                f"checkpoint_dir {self.path} is in use by another process (its 'lock' is held); "
                "wait for it to finish or use another folder."
            ) from None
        if not self.read_only:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd, self._last = fd, None
        try:
            if not self.read_only:
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
        if self.read_only:
            raise CheckpointError(
                f"{self.path} is on read-only storage: it can be read back (a finished run) but "
                "not continued. Copy it to writable storage to resume the run."
            )
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
        # every segment's state is kept (a state is one draw per chain, small beside its
        # segment's draws): damage to any older draws file falls back to the segment before it
        self._last = Record(
            segment, list(draws_per_segment), state_file, files[state_file], draws_files
        )
        return self._last

    def _move_aside(self, names: list[str], why: str) -> None:
        present = [n for n in names if os.path.exists(os.path.join(self.path, n))]
        if not present:
            return
        if self.read_only:
            raise CheckpointError(
                f"{self.path} is on read-only storage and {sorted(present)} are {why}; they "
                "cannot be moved aside here. Copy the folder to writable storage and rerun."
            )
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
        damaged files they name, and every newer segment's files are moved into ``aside/``,
        with one :class:`CheckpointDamageWarning` naming them and the segment kept: the intact
        prefix (every segment before the first damaged file) is kept and the rest redone."""
        self._require_lock()
        names = sorted(glob.glob(os.path.join(self.path, "record_*.json")), reverse=True)
        moved: list[str] = []
        for i, path in enumerate(names):
            record, damaged = self._verify(os.path.basename(path))
            if record is None:
                self._move_aside(damaged, "damaged")
                moved += [d for d in damaged if d not in moved]
                continue
            if i > 0:  # files of the segments after the intact record: keep them aside
                newer = [
                    f"{kind}_{k:06d}.{ext}"
                    for k in range(record.segment + 1, record.segment + 2 + i)
                    for kind, ext in (("state", "npz"), ("draws", "npz"), ("record", "json"))
                ]
                self._move_aside(newer, "after-damaged")
            if moved:
                warnings.warn(CheckpointDamageWarning(
                    f"{self.path}: damaged checkpoint files {sorted(moved)} (and the segments "
                    f"after them) were moved to {self.path}/aside; resuming after segment "
                    f"{record.segment}, the newest intact one: the later segments are redone "
                    "(bit for bit)."), stacklevel=2)  # fmt: skip
            self._last = record
            return record
        if names:
            raise CheckpointError(
                f"no intact commit record in {self.path}: every record, or a file every record "
                f"needs, was damaged; they are now in {self.path}/aside (nothing was deleted). "
                "Run the same command again to start over from warmup, or use a new folder."
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


# -------------------- fingerprint
# What a checkpointed run is: a fingerprint that a resume must match field by field.
#
# :func:`run_fingerprint` records, as flat named fields:
#
# * ``config.<field>`` - every field of the method's config (``config.to_dict()``), but
#   ``chain_batching`` at its default ``"auto"`` (a folder written before the field existed
#   resumes; forced to ``"vectorized"`` or ``"sequential"``, the draws may differ by float32
#   rounding, so it is recorded);
# * ``data.x``, ``data.y`` - SHA-256 of the training arrays (dtype, shape and bytes);
# * ``seed`` - the random key's data;
# * ``model.network`` - SHA-256 of the *jaxpr* of the potential (the network, the prior, the
#   likelihood and the tempering, traced at the initial parameters). It captures what the network
#   computes, not its ``repr``: an activation changed from relu to tanh in an nnx module, or a
#   different lambda in a linen module, is a different program. Memory addresses printed in a
#   jaxpr are removed, so the same program gives the same digest in every process;
# * ``model.param_shapes`` - every parameter's name, shape and dtype;
# * ``model.potential_at_init`` - the potential's value at the initial parameters (catches a
#   changed constant that the jaxpr shows only by name, such as an array the network closes over);
# * ``versions`` - jax, jaxlib and numpyro (bit-exact resumes need the same programs);
# * ``potential.memory_chunk`` - only where a rule chose the chunk (from free device memory, or
#   the CPU rule from the network's activations: :mod:`bnn_ppl.inference.potential.bnn`): the
#   chunk, which a resume takes again (the rounding of float32 sums depends on it).
#
# ``digest`` is the SHA-256 of all fields; :func:`check_same` compares two fingerprints and names
# every differing field.

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_NONE = object()
OMITTED_AT = {"chain_batching": "auto"}
"""Config fields added after checkpoint folders existed, left out of the fingerprint at these
values (those folders' behaviour), so that such folders resume."""


def array_digest(a: Any) -> str:
    """Hex SHA-256 of an array's dtype, shape and bytes (C order)."""
    arr = np.ascontiguousarray(np.asarray(a))
    head = f"{arr.dtype.str}{arr.shape}".encode()
    return io.sha256_bytes(head + arr.tobytes())


def _key_text(key: Any) -> str:
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        impl = str(jax.random.key_impl(key))
        key = jax.random.key_data(key)
    else:
        impl = "raw"
    return impl + ":" + " ".join(str(int(v)) for v in np.ravel(np.asarray(key)))


def function_digest(fn: Callable[..., Any], *args: Any) -> str:
    """SHA-256 of the jaxpr of ``fn(*args)`` with memory addresses removed: equal for the same
    computation in any process, different when an operation changes.

    Example:
        >>> import jax.numpy as jnp
        >>> x = jnp.ones(3)
        >>> function_digest(jax.nn.relu, x) == function_digest(jax.nn.tanh, x)
        False
        >>> function_digest(jax.nn.relu, x) == function_digest(lambda v: jax.nn.relu(v), x)
        True
    """
    text = _ADDRESS.sub("", str(jax.make_jaxpr(fn)(*args)))
    return hashlib.sha256(text.encode()).hexdigest()


def run_fingerprint(
    config: Mapping[str, Any],
    x: Any,
    y: Any,
    rng_key: Any,
    potential_fn: Callable[[Any], Any],
    init_params: Any,
    *,
    memory_chunk: int | None = None,
    devices: int | None = None,
) -> dict[str, Any]:
    """The fingerprint of a run (see the module doc): ``{"fields": {...}, "digest": sha}``,
    and ``"devices"``, the number of devices the data are split over (outside the digest:
    it only lets :func:`check_same` name the cause when a resume runs on another number of
    devices, whose program, and so ``model.network``, differs).

    ``init_params`` are one chain's unconstrained initial parameters (the potential is traced
    and evaluated there). ``memory_chunk``: the chunk the potential's memory rule chose
    (``pot.chunk_size`` where ``pot.chunk_rule`` is one of the memory rules), recorded as
    ``potential.memory_chunk``: a resume (:func:`~bnn_ppl.inference.fit`) builds its potential
    with that chunk again, whatever memory is free then.
    """
    fields: dict[str, Any] = {
        f"config.{k}": v for k, v in config.items() if OMITTED_AT.get(k, _NONE) != v
    }
    if memory_chunk is not None:
        fields["potential.memory_chunk"] = int(memory_chunk)
    fields["data.x"] = array_digest(x)
    fields["data.y"] = array_digest(y)
    fields["seed"] = _key_text(rng_key)
    fields["model.network"] = function_digest(potential_fn, init_params)
    fields["model.param_shapes"] = {
        jax.tree_util.keystr(path): f"{np.dtype(leaf.dtype).str}{tuple(leaf.shape)}"
        for path, leaf in jax.tree_util.tree_flatten_with_path(init_params)[0]
    }
    value = np.asarray(jax.jit(potential_fn)(init_params), np.float64)
    fields["model.potential_at_init"] = float(value).hex()
    import jaxlib
    import numpyro

    fields["versions"] = f"jax {jax.__version__}, jaxlib {jaxlib.__version__}, " + (
        f"numpyro {numpyro.__version__}"
    )
    fields = json.loads(json.dumps(fields, sort_keys=True))  # JSON-normal (tuples -> lists)
    digest = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()
    out: dict[str, Any] = {"fields": fields, "digest": digest}
    if devices is not None:
        out["devices"] = int(devices)
    return out


def resume_chunk(config: Any, checkpoint_dir: str | os.PathLike) -> tuple[Any, int | None]:
    """``(config to build the potential with, the chunk a run in checkpoint_dir recorded)``:
    a run whose chunk a rule chose (``potential.memory_chunk`` in its verified ``run.json``:
    the memory rule, or the CPU rule) resumes with that chunk, whatever memory is free now or
    whatever the rule would choose now; an int ``chunk_size``, or no such run, builds with
    ``config`` as it is (and the recorded chunk is ``None``). A run on the CPU that recorded
    no chunk was written when the CPU default was a fixed ``EARLIER_CPU_CHUNK`` rows: it
    resumes with that chunk (recorded as ``None`` again, as it was)."""
    saved = saved_fingerprint(checkpoint_dir) if os.path.isdir(checkpoint_dir) else None
    memory = (saved or {}).get("fields", {}).get("potential.memory_chunk")
    if isinstance(config.chunk_size, int):
        return config, None
    if memory is not None:
        return dataclasses.replace(config, chunk_size=memory), memory
    if saved is not None and config.chunk_size is None and jax.default_backend() == "cpu":
        return dataclasses.replace(config, chunk_size=EARLIER_CPU_CHUNK), None
    return config, None


def recorded_chunk(pot: Any, resumed: int | None) -> int | None:
    """The ``memory_chunk`` to fingerprint: the resumed run's, else the chunk of ``pot`` if
    a rule chose it (:data:`~bnn_ppl.inference.potential.bnn.RECORDED_RULES`), else
    ``None``."""
    if resumed is not None:
        return resumed
    return pot.chunk_size if pot.chunk_rule in RECORDED_RULES else None


_WHY = {
    "model.network": " (the network's computation changed, e.g. an activation or a layer)",
    "model.param_shapes": " (the parameters' names or shapes changed)",
    "model.potential_at_init": " (the model's prior, likelihood or constants changed)",
    "data.x": " (other training inputs)",
    "data.y": " (other training targets)",
    "potential.memory_chunk": (
        " (the chunk a rule chose: from free device memory, or on the CPU from the network's "
        "activations)"
    ),
}


def check_same(saved: Mapping[str, Any], current: Mapping[str, Any], where: str) -> None:
    """Raise :class:`~bnn_ppl.inference.checkpoint.store.CheckpointError` naming every field
    in which fingerprint ``current`` differs from ``saved`` (the run in folder ``where``).

    Example:
        >>> a = {"fields": {"config.num_samples": 30, "seed": "0 0"}, "digest": "x"}
        >>> b = {"fields": {"config.num_samples": 40, "seed": "0 0"}, "digest": "y"}
        >>> try:
        ...     check_same(a, b, "runs/a")
        ... except CheckpointError as e:
        ...     print(str(e)[:68])
        runs/a holds another run: config.num_samples is 30 there and 40 now.
    """
    if saved.get("digest") == current.get("digest"):
        return
    a, b = dict(saved.get("fields", {})), dict(current.get("fields", {}))
    then, now = saved.get("devices"), current.get("devices")
    if then is not None and now is not None and then != now:
        raise CheckpointError(
            f"{where} was written by a run on {then} device(s) and this one has {now}: a "
            "resume needs the same number of devices (the data's split over them is part of "
            "the compiled program, and float32 sums round differently). Resume with "
            f"{then} device(s) (e.g. devices=jax.devices()[:{then}], or CUDA_VISIBLE_DEVICES), "
            "or use a new checkpoint_dir."
        )
    parts = []
    for name in sorted(set(a) | set(b)):
        if a.get(name, "<missing>") != b.get(name, "<missing>"):
            va, vb = a.get(name, "<missing>"), b.get(name, "<missing>")
            if isinstance(va, str) and len(va) == 64 or isinstance(va, dict):
                parts.append(f"{name} differs{_WHY.get(name, '')}")
            else:
                parts.append(f"{name} is {va!r} there and {vb!r} now{_WHY.get(name, '')}")
    if not parts:
        parts = ["the fingerprint digest differs"]
    raise CheckpointError(
        f"{where} holds another run: {'; '.join(parts)}. Resume with the same settings, or use "
        "a new checkpoint_dir."
    )

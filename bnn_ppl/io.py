"""Files written atomically, read without pickle.

Example:
    >>> import os, tempfile, numpy as np
    >>> from bnn_ppl.io import load_npz, read_json, save_npz, write_json
    >>> j, z = (os.path.join(tempfile.mkdtemp(), n) for n in ("m.json", "d.npz"))
    >>> write_json(j, {"accuracy": 0.97})
    >>> digest = save_npz(z, {"w": np.zeros((2, 3))})  # no pickle, atomic
    >>> read_json(j), load_npz(z, sha256=digest)["w"].shape
    ({'accuracy': 0.97}, (2, 3))
"""

# Notes:
#
# Arrays go to ``.npz`` files with :func:`save_npz` (atomic, no pickle, returns the SHA-256 of the
# bytes written) and come back with :func:`load_npz`, which never unpickles: an object array, a
# pickled file, a truncated or corrupted archive or a checksum mismatch is a ``ValueError`` naming
# the file and what is wrong with it.

from __future__ import annotations

import hashlib
import io
import json
import os
import secrets
import zipfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from typing import IO, Any

import numpy as np

from bnn_ppl.validation import InputTypeError, InputValueError

__all__ = [
    "atomic_write",
    "atomic_write_path",
    "write_json",
    "read_json",
    "write_jsonl",
    "read_jsonl",
    "npz_bytes",
    "save_npz",
    "load_npz",
    "sha256_bytes",
    "sha256_file",
    "remove_temporaries",
]


_O_BINARY = getattr(os, "O_BINARY", 0)  # Windows: no newline translation


def _create_temporary(folder: str, prefix: str) -> tuple[int, str]:
    """Create a new, empty ``<folder>/<prefix><random>.tmp``; return its descriptor and path.

    Unlike ``tempfile.mkstemp`` (always mode 0600) the file is created with mode 0666, which
    the kernel reduces by the umask (or the folder's default ACL), as ``open(path, "w")``
    would: a run folder on a shared filesystem is readable by whoever the user's umask allows.
    """
    for _ in range(100):
        tmp = os.path.join(folder, f"{prefix}{secrets.token_hex(8)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_BINARY, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"could not create a temporary file in {folder} (100 names taken).")


def _temporary_prefix(path: str) -> str:
    return f".{os.path.basename(path)}."


def remove_temporaries(folder: str | os.PathLike, names: Sequence[str] | None = None) -> None:
    """Delete the temporary files that killed atomic writes left in ``folder``
    (``.<name>.<hex>.tmp``), of the files ``names`` only if given. Only for a folder no
    other process is writing to."""
    folder = os.fspath(folder)
    if not os.path.isdir(folder):
        return
    wanted = None if names is None else {_temporary_prefix(n) for n in names}
    hex_digits = set("0123456789abcdef")
    for entry in os.listdir(folder):
        stem, _, token = entry.removesuffix(".tmp").rpartition(".")
        ours = entry.startswith(".") and entry.endswith(".tmp") and bool(token)
        if not ours or not set(token) <= hex_digits:
            continue
        if wanted is None or f"{stem}." in wanted:
            with suppress(FileNotFoundError):
                os.unlink(os.path.join(folder, entry))


@contextmanager
def _replacing(path: str | os.PathLike) -> Iterator[tuple[int, str]]:
    """A new temporary file beside ``path`` (missing folders created), as its open descriptor
    and name. On a normal exit it is renamed over ``path`` and the folder fsynced; on any
    error it is removed and ``path`` is untouched. The body writes, syncs and closes it."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = _create_temporary(folder, _temporary_prefix(path))
    try:
        yield fd, tmp
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    _fsync_folder(folder)


def atomic_write(path: str | os.PathLike, write: Callable[[IO[bytes]], None]) -> None:
    """Create or replace ``path`` atomically; ``write(f)`` writes the content to binary file ``f``.

    Missing parent folders are created. The file gets the mode ``open(path, "w")`` gives a
    new file (0666 less the umask). On any error the temporary file is removed and the
    previous content of ``path`` (if any) is left untouched.
    """
    with _replacing(path) as (fd, _tmp), os.fdopen(fd, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())


@contextmanager
def atomic_write_path(path: str | os.PathLike) -> Iterator[str]:
    """Create or replace ``path`` atomically with a writer that wants a file *name*.

    Yields the name of a new, empty temporary file in the target's folder (missing folders are
    created); the body writes it (e.g. ``tree.to_netcdf(tmp)``), and on a normal exit it is
    fsynced and renamed over ``path``. On any error, or if the body leaves nothing there, the
    temporary file is removed and the previous ``path`` is untouched. The final file has the
    mode ``open(path, "w")`` gives (0666 less the umask), even when the writer recreated the
    temporary file with other permissions.

    Example:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "out.txt")
        >>> with atomic_write_path(path) as tmp:
        ...     with open(tmp, "w") as f:
        ...         _ = f.write("done")
        >>> open(path).read(), sorted(os.listdir(os.path.dirname(path)))
        ('done', ['out.txt'])
    """
    with _replacing(path) as (fd, tmp):
        try:  # 0666 less the umask (os.umask() is not thread-safe)
            mode = os.fstat(fd).st_mode & 0o7777
        finally:
            os.close(fd)
        yield tmp
        os.chmod(tmp, mode)
        fd = os.open(tmp, os.O_RDONLY | _O_BINARY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _fsync_folder(folder: str) -> None:
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # make the rename itself durable
    finally:
        os.close(dir_fd)


def write_json(path: str | os.PathLike, obj: Any, *, indent: int = 2) -> None:
    """Write ``obj`` as JSON (UTF-8) to ``path`` atomically."""
    data = (json.dumps(obj, indent=indent, allow_nan=True) + "\n").encode("utf-8")
    atomic_write(path, lambda f: f.write(data))


def read_json(path: str | os.PathLike) -> Any:
    """Read a JSON file written by :func:`write_json`."""
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def write_jsonl(path: str | os.PathLike, rows: Any) -> None:
    """Write ``rows`` (JSON-able dicts) as JSON lines to ``path`` atomically; a file that
    already holds exactly these lines is left untouched."""
    data = "".join(json.dumps(row) + "\n" for row in rows).encode("utf-8")
    if os.path.exists(path):
        with open(path, "rb") as f:
            if f.read() == data:
                return
    atomic_write(path, lambda f: f.write(data))


def read_jsonl(path: str | os.PathLike) -> list[Any]:
    """Read the JSON lines :func:`write_jsonl` wrote."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


# ------------------------------------------------------------------------------------- arrays
_ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)  # fixed timestamps: the same arrays give the same bytes


def sha256_bytes(data: bytes) -> str:
    """Hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | os.PathLike) -> str:
    """Hex SHA-256 of the file at ``path`` (read in 1 MiB blocks)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def npz_bytes(arrays: Mapping[str, Any]) -> bytes:
    """The bytes of an uncompressed ``.npz`` holding ``arrays`` (readable by ``np.load``).

    Unlike ``np.savez`` this takes any string key (``"file"``, dotted site names) and writes
    the same bytes for the same arrays (fixed zip timestamps).

    Raises:
        TypeError: a key is not a non-empty string, or an array has dtype ``object`` (it could
            only be stored by pickling, which bnn_ppl never does).
    """
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, mode="w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for key, value in arrays.items():
            if not isinstance(key, str) or not key:
                raise InputTypeError(f"npz keys must be non-empty strings, got {key!r}.")
            arr = np.asarray(value)
            if arr.dtype.hasobject:
                raise InputTypeError(
                    f"array {key!r} has dtype {arr.dtype}, which can only be stored by "
                    "pickling; convert it to a numeric array."
                )
            info = zipfile.ZipInfo(key + ".npy", date_time=_ZIP_EPOCH)
            info.compress_type = zipfile.ZIP_STORED
            with zf.open(info, mode="w", force_zip64=True) as f:
                np.lib.format.write_array(f, arr, allow_pickle=False)
    return buf.getvalue()


def save_npz(path: str | os.PathLike, arrays: Mapping[str, Any]) -> str:
    """Write ``arrays`` (name -> array) to ``path`` as ``.npz``, atomically; return its SHA-256.

    The returned digest is that of the exact bytes on disk: store it next to the file and pass
    it to :func:`load_npz` to detect truncation or corruption (damage, not deliberate edits:
    whoever edits the file can store its new digest too).
    """
    data = npz_bytes(arrays)
    atomic_write(path, lambda f: f.write(data))
    return sha256_bytes(data)


def load_npz(path: str | os.PathLike, *, sha256: str | None = None) -> dict[str, np.ndarray]:
    """Read every array of the ``.npz`` file at ``path``, never unpickling anything.

    Args:
        path: the file.
        sha256: the expected hex SHA-256 of the file's bytes (as returned by :func:`save_npz`);
            checked before anything is parsed.

    Returns:
        A dict name -> NumPy array, in the archive's order.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: the checksum differs, the file is not a valid ``.npz`` (truncated, corrupted,
            a plain ``.npy`` or a pickle), or an array holds Python objects (``dtype=object``,
            which would need pickle to load). The message names the file.
    """
    path = os.fspath(path)
    with open(path, "rb") as f:
        data = f.read()
    if sha256 is not None and sha256_bytes(data) != sha256:
        raise InputValueError(
            f"{path}: checksum mismatch (expected sha256 {sha256[:12]}..., got "
            f"{sha256_bytes(data)[:12]}...); the file is truncated or corrupted."
        )
    if not data.startswith(b"PK"):
        raise InputValueError(
            f"{path} is not an .npz archive (it is empty, truncated, or another format such as a "
            ".npy or a pickle); bnn_ppl only reads .npz files it can load without pickle."
        )
    out: dict[str, np.ndarray] = {}
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            for key in npz.files:
                try:
                    out[key] = npz[key]
                except ValueError as e:
                    if "allow_pickle" in str(e) or "Object arrays" in str(e):
                        raise InputValueError(
                            f"{path}: array {key!r} holds Python objects (dtype object) and "
                            "could only be loaded by unpickling it, which bnn_ppl refuses to do "
                            "(a pickle can run arbitrary code). Store numeric arrays only."
                        ) from None
                    raise
    except ValueError as e:
        if str(e).startswith(path):
            raise
        raise InputValueError(
            f"{path} is not a valid .npz archive (truncated or corrupted?): {e}"
        ) from e
    except Exception as e:  # zipfile/zlib/struct errors of a damaged archive: say which file
        raise InputValueError(
            f"{path} is not a valid .npz archive (truncated or corrupted?): {type(e).__name__}: {e}"
        ) from e
    return out

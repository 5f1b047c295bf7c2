"""Files written atomically, read without pickle.

Every file bnn_ppl writes goes through :func:`atomic_write`: the bytes go to a temporary file in
the target's folder, are flushed and fsynced, and the temporary file is renamed over the target
(``os.replace``, atomic on POSIX). A reader therefore sees the old file or the new one, never a
partial one.

Example:
    >>> import os, tempfile
    >>> from bnn_ppl.io import write_json, read_json
    >>> path = os.path.join(tempfile.mkdtemp(), "run", "metrics.json")
    >>> write_json(path, {"accuracy": 0.97})
    >>> read_json(path)
    {'accuracy': 0.97}
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from typing import IO, Any

__all__ = ["atomic_write", "write_json", "read_json"]


def atomic_write(path: str | os.PathLike, write: Callable[[IO[bytes]], None]) -> None:
    """Create or replace ``path`` atomically; ``write(f)`` writes the content to binary file ``f``.

    Missing parent folders are created. On any error the temporary file is removed and the
    previous content of ``path`` (if any) is left untouched.
    """
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
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

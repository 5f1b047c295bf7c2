"""Benchmark records: the tables the benchmark pages are generated from (not a benchmark itself).

A script run with ``--record`` calls :func:`record` once per table it measured; each call appends
one JSON object to ``benchmarks/records/<script>.jsonl``. ``docs/_generate.py`` renders the
newest record of each table (``key`` columns given: the newest row of each key) with its command,
date, commit and machine. :func:`read_records` parses and checks a record file.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import platform
import sys
from pathlib import Path
from typing import Any

RECORDS = Path(__file__).resolve().parent / "records"
REQUIRED = (
    "script",
    "table",
    "command",
    "date",
    "commit",
    "machine",
    "columns",
    "rows",
    "notes",
    "source",
)
SOURCES = ("measured", "transcribed")


class RecordError(ValueError):
    """A record that cannot be written or read: names the field and the fix."""


def commit() -> str:
    """The short commit of the working tree (``+dirty`` when it has uncommitted changes)."""
    from bnn_ppl.runs import git_commit

    full = git_commit(Path(__file__).resolve().parent.parent)
    if full is None:
        return "unknown"
    head, _, dirty = full.partition("+")
    return head[:7] + ("+" + dirty if dirty else "")


def machine() -> str:
    """CPU count and model, JAX's version, backend and device kind."""
    cpu = platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    parts = [f"{os.cpu_count()} CPU cores ({cpu})"]
    try:  # a script whose timing ran in subprocesses has not imported JAX itself
        import jax
    except ImportError:
        jax = None
    if jax is not None:
        device = jax.devices()[0]
        kind = "" if device.device_kind == jax.default_backend() else f" ({device.device_kind})"
        parts.append(f"jax {jax.__version__} {jax.default_backend()}{kind}")
    return ", ".join(parts)


def command(argv: list[str] | None = None) -> str:
    """The command line that ran this script, as a user would type it from the repository root."""
    argv = sys.argv if argv is None else argv
    script = Path(argv[0])
    try:
        script = script.resolve().relative_to(Path(__file__).resolve().parent.parent)
    except ValueError:
        pass
    return " ".join(["python", str(script), *argv[1:]])


def _plain(value: Any) -> Any:
    """A JSON-safe cell: numpy scalars to Python numbers, NaN to None."""
    if hasattr(value, "item") and not isinstance(value, str | bytes):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, int | float | str | bool) or value is None:
        return value
    raise RecordError(f"a cell of `rows` is {type(value).__name__}: give numbers or strings")


def validate(entry: dict[str, Any]) -> dict[str, Any]:
    """Check one record's fields; return it. Raises :class:`RecordError` naming the field."""
    missing = [k for k in REQUIRED if k not in entry]
    if missing:
        raise RecordError(f"record without {missing}: every record has {list(REQUIRED)}")
    for k in ("script", "table", "command", "date", "commit", "machine"):
        if not isinstance(entry[k], str) or not entry[k]:
            raise RecordError(f"`{k}` must be a non-empty string, got {entry[k]!r}")
    if not entry["table"].replace("_", "").isalnum():
        raise RecordError(f"`table` {entry['table']!r}: use letters, digits and underscores")
    if entry["source"] not in SOURCES:
        raise RecordError(f"`source` {entry['source']!r}: one of {SOURCES}")
    columns, rows = entry["columns"], entry["rows"]
    if not isinstance(columns, list) or not columns or not all(isinstance(c, str) for c in columns):
        raise RecordError("`columns` must be a non-empty list of strings")
    if not isinstance(rows, list) or not all(
        isinstance(r, list) and len(r) == len(columns) for r in rows
    ):
        raise RecordError(f"`rows` must be lists of {len(columns)} cells, one per column")
    key = entry.get("key")
    if key is not None and (not isinstance(key, list) or not set(key) <= set(columns)):
        raise RecordError(f"`key` {key!r} must name columns of {columns}")
    if not isinstance(entry["notes"], str):
        raise RecordError("`notes` must be a string")
    return entry


def record(
    table: str,
    columns: list[str],
    rows: list[list[Any]],
    *,
    script: str | None = None,
    command_line: str | None = None,
    notes: str = "",
    title: str | None = None,
    key: list[str] | None = None,
    to: bool | str | Path | None = True,
    **fields: Any,
) -> dict[str, Any]:
    """Append one table to ``benchmarks/records/<script>.jsonl``; return the record.

    Args:
        table: the table's name within its script (letters, digits, ``_``); a later record of
            the same name replaces it on the page.
        columns: column headings.
        rows: one list of cells (numbers or strings) per row.
        script: the script's file name (default: the running script's).
        command_line: the command that produced the table (default: this process's).
        notes: what the reader needs to read the table (settings not in the command).
        title: a heading for the table.
        key: columns that identify a row: the page then keeps, for each key, the newest row of
            every record of this table (records measuring a few rows each).
        to: the record file, or ``True`` for ``benchmarks/records/<script stem>.jsonl`` (what
            ``--record`` without a file gives).
        fields: ``date``, ``commit``, ``machine``, ``source`` to override what is measured here.
    """
    script = script or Path(sys.argv[0]).name
    entry: dict[str, Any] = {
        "script": script,
        "table": table,
        "title": title,
        "command": command_line or command(),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%MZ"),
        "commit": commit(),
        "machine": machine(),
        "columns": list(columns),
        "rows": [[_plain(c) for c in row] for row in rows],
        "notes": notes,
        "source": "measured",
    }
    if key is not None:
        entry["key"] = list(key)
    entry.update(fields)
    if entry["title"] is None:
        del entry["title"]
    validate(entry)
    path = RECORDS / f"{Path(script).stem}.jsonl" if to is True else Path(to)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(entry, ensure_ascii=False) + "\n").encode()
    # one write of one line to a file opened for appending: a reader never sees half a line
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)
    print(f"# recorded table {table!r} in {path}")
    return entry


def add_flag(parser: Any) -> None:
    """Add ``--record [FILE]`` to an ``argparse`` parser (``record(..., to=args.record)``)."""
    parser.add_argument(
        "--record",
        nargs="?",
        const=True,
        default=None,
        metavar="FILE",
        help="append the tables to benchmarks/records/<script>.jsonl (or FILE): the docs pages "
        "show the newest",
    )


def table_of(first: str, results: dict[str, dict[str, Any]]) -> tuple[list[str], list[list]]:
    """Columns and rows from ``{row name: {column: value}}`` (the first column is ``first``)."""
    columns = [first]
    for values in results.values():
        columns += [c for c in values if c not in columns]
    rows = [[name, *(values.get(c) for c in columns[1:])] for name, values in results.items()]
    return columns, rows


def read_records(path: Path) -> list[dict[str, Any]]:
    """Every record of one file, in the order written (each checked by :func:`validate`)."""
    out = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as e:
            raise RecordError(f"{path}:{n}: not JSON ({e})") from e
        try:
            out.append(validate(entry))
        except RecordError as e:
            raise RecordError(f"{path}:{n}: {e}") from e
    return out


def latest(entries: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Table name -> what the page shows: the newest record, or merged rows for keyed tables.

    A keyed table's rows are those of all its records, a later row replacing an earlier one
    with the same key cells; the result carries ``sources`` (the records that contributed, with
    the indices of their rows in ``rows``). Later in the file is newer.
    """
    tables: dict[str, dict[str, Any]] = {}
    for entry in entries:
        name, key = entry["table"], entry.get("key")
        shown = tables.get(name)
        fresh = (
            not key
            or shown is None
            or (shown["columns"], shown.get("key")) != (entry["columns"], key)
        )
        if fresh:  # this record replaces what was shown
            shown = tables[name] = {**entry, "rows": [], "sources": [], "row_source": []}
        elif entry.get("title"):  # the newest record names the table
            shown["title"] = entry["title"]
        source = len(shown["sources"])
        shown["sources"].append(entry)
        if not key:
            shown["rows"], shown["row_source"] = list(entry["rows"]), [0] * len(entry["rows"])
            continue
        idx = [entry["columns"].index(k) for k in key]
        rows, origin = shown["rows"], shown["row_source"]
        for row in entry["rows"]:  # a row replaces the row with the same key cells
            k = [row[i] for i in idx]
            for j, old in enumerate(rows):
                if [old[i] for i in idx] == k:
                    rows[j], origin[j] = row, source
                    break
            else:
                rows.append(row)
                origin.append(source)
    return tables

"""Benchmark records: ``benchmarks/_record.py`` writes them, ``docs/_generate.py`` renders them.

The helper appends whole, valid JSON lines (also from concurrent writers) and refuses a record
that would not render; the generator shows the newest record of each table (for keyed tables,
the newest row of each key) with its command, date, commit and machine. Every stored record
file parses, every table a benchmarks page includes exists, and the GPU tables are what
``gpu.record_tables`` makes of the raw runs in ``benchmarks/gpu_runs``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


records = _load("_bench_record_under_test", ROOT / "benchmarks" / "_record.py")
generate = _load("_docs_generate_under_test", ROOT / "docs" / "_generate.py")

FIXED = dict(date="2026-01-02T03:04Z", commit="abc1234", machine="2 CPU cores (test)")


def test_record_appends_valid_lines(tmp_path):
    path = tmp_path / "demo.jsonl"
    records.record("speed", ["case", "ms"], [["a", 1.5], ["b", 2]], script="demo.py",
                   command_line="python benchmarks/demo.py", to=path)  # fmt: skip
    records.record("speed", ["case", "ms"], [["a", 1.25]], script="demo.py", to=path, notes="n")
    lines = path.read_text().splitlines()
    assert len(lines) == 2
    first, second = (json.loads(line) for line in lines)
    for key in records.REQUIRED:
        assert key in first and key in second
    assert first["command"] == "python benchmarks/demo.py"
    assert first["rows"] == [["a", 1.5], ["b", 2]] and first["source"] == "measured"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\dZ", first["date"])
    assert first["commit"] and first["machine"].split()[1] == "CPU"
    assert [e["rows"] for e in records.read_records(path)] == [first["rows"], second["rows"]]


def test_record_numpy_cells_and_nan(tmp_path):
    import numpy as np

    path = tmp_path / "demo.jsonl"
    entry = records.record("t", ["x", "y"], [[np.float32(0.5), float("nan")]], script="demo.py",
                           to=path, **FIXED)  # fmt: skip
    assert entry["rows"] == [[0.5, None]]
    assert json.loads(path.read_text())["rows"] == [[0.5, None]]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(columns=["a", "b"], rows=[[1]]), "`rows` must be lists of 2 cells"),
        (dict(columns=[], rows=[]), "`columns` must be a non-empty list"),
        (dict(table="bad name"), "`table` 'bad name'"),
        (dict(key=["missing"]), "`key` ['missing'] must name columns"),
        (dict(source="guessed"), "`source` 'guessed'"),
        (dict(rows=[[object()]]), "a cell of `rows` is object"),
    ],
)
def test_record_refuses_a_bad_record_and_writes_nothing(tmp_path, kwargs, message):
    path = tmp_path / "demo.jsonl"
    args = dict(table="t", columns=["a"], rows=[[1]]) | kwargs
    with pytest.raises(records.RecordError, match=re.escape(message)):
        records.record(script="demo.py", to=path, **args)
    assert not path.exists()


def test_concurrent_records_are_whole_lines(tmp_path):
    """Each record is one append of one line: concurrent writers never interleave."""
    path = tmp_path / "demo.jsonl"
    row = [["x" * 5000, 1.0]]  # a line longer than a typical pipe buffer

    def write(i: int) -> None:
        for j in range(10):
            records.record(f"t{i}", ["text", "v"], row, script="demo.py", to=path, notes=str(j),
                           **FIXED)  # fmt: skip

    threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    entries = records.read_records(path)
    assert len(entries) == 80
    assert sorted((e["table"], e["notes"]) for e in entries) == sorted(
        (f"t{i}", str(j)) for i in range(8) for j in range(10)
    )


def test_read_records_names_the_bad_line(tmp_path):
    path = tmp_path / "demo.jsonl"
    records.record("t", ["a"], [[1]], script="demo.py", to=path, **FIXED)
    with path.open("a") as f:
        f.write('{"script": "demo.py"}\n')
    with pytest.raises(records.RecordError, match=r"demo.jsonl:2: record without"):
        records.read_records(path)


def test_generate_renders_the_newest_record_of_each_table(tmp_path, monkeypatch):
    folder, out = tmp_path / "records", tmp_path / "generated"
    path = folder / "demo.jsonl"
    common = dict(script="demo.py", to=path, machine="2 CPU cores (test)")
    records.record("speed", ["case", "ms"], [["old", 9.5]], command_line="python old",
                   date="2026-01-01T00:00Z", commit="1111111", **common)  # fmt: skip
    records.record("speed", ["case", "ms"], [["new", 1234.5], ["other", 3]],
                   command_line="python benchmarks/demo.py --new", date="2026-01-02T00:00Z",
                   commit="2222222", notes="Two rows.", **common)  # fmt: skip
    records.record("other", ["n"], [[1]], date="2026-01-02T00:00Z", commit="2222222",
                   source="transcribed", **common)  # fmt: skip
    monkeypatch.setattr(generate, "BENCH_RECORDS", folder)
    monkeypatch.setattr(generate, "BENCH_GENERATED", out)
    (out).mkdir()
    (out / "demo.gone.md").write_text("a table no record holds any more")
    assert generate.benchmark_includes() == ["demo.other", "demo.speed"]
    assert not (out / "demo.gone.md").exists()
    text = (out / "demo.speed.md").read_text()
    assert "| case | ms |\n|---|---:|\n| new | 1,234.5 |\n| other | 3 |\n" in text
    assert "old" not in text and "1111111" not in text
    assert "2026-01-02, commit `2222222`, 2 CPU cores (test)." in text
    assert "```bash\npython benchmarks/demo.py --new\n```" in text and "Two rows." in text
    assert "transcribed" in (out / "demo.other.md").read_text()


def test_generate_merges_keyed_rows_newest_first(tmp_path, monkeypatch):
    folder = tmp_path / "records"
    path = folder / "demo.jsonl"
    common = dict(script="demo.py", to=path, key=["n"], machine="m")
    cols = ["n", "ms", "unused"]
    records.record("t", cols, [[1, 10.0, None], [2, 20.0, None]], command_line="python a",
                   date="2026-01-01T00:00Z", commit="aaaaaaa", **common)  # fmt: skip
    records.record("t", cols, [[2, 21.0, None], [3, 30.0, None]], command_line="python b",
                   date="2026-01-02T00:00Z", commit="bbbbbbb", **common)  # fmt: skip
    shown = records.latest(records.read_records(path))["t"]
    assert shown["rows"] == [[1, 10.0, None], [2, 21.0, None], [3, 30.0, None]]
    text = generate.render_table(shown)
    # the empty column is left out; each row names its run; each run its command and commit
    assert "| n | ms | run |" in text and "unused" not in text
    assert "| 1 | 10.0 | 1 |\n| 2 | 21.0 | 2 |\n| 3 | 30.0 | 2 |" in text
    assert "Run 1: 2026-01-01, commit `aaaaaaa`" in text and "python a" in text
    assert "Run 2: 2026-01-02, commit `bbbbbbb`" in text and "python b" in text
    # a record with other columns starts the table afresh
    records.record("t", ["n", "s"], [[1, 0.5]], command_line="python c", date="2026-01-03T00:00Z",
                   commit="ccccccc", **common)  # fmt: skip
    assert records.latest(records.read_records(path))["t"]["rows"] == [[1, 0.5]]


STORED = sorted((ROOT / "benchmarks" / "records").glob("*.jsonl"))


@pytest.mark.parametrize("path", STORED, ids=[p.name for p in STORED])
def test_every_stored_record_parses(path):
    entries = records.read_records(path)
    assert entries, path
    for entry in entries:
        assert Path(entry["script"]).stem == path.stem
        assert (ROOT / "benchmarks" / entry["script"]).is_file(), entry["script"]
        assert entry["command"].strip() and re.fullmatch(r"[0-9a-f]{7,40}(\+dirty)?",
                                                         entry["commit"])  # fmt: skip


def test_every_included_table_has_a_record():
    tables = {f"{p.stem}.{t}" for p in STORED for t in records.latest(records.read_records(p))}
    pages = sorted((ROOT / "docs" / "benchmarks").glob("*.md"))
    included = set()
    for page in pages:
        included |= set(re.findall(r"```\{include\} _generated/([\w.]+)\.md", page.read_text()))
    assert included, "no benchmarks page includes a generated table"
    assert included <= tables, sorted(included - tables)


def test_gpu_records_are_the_raw_runs_tables(monkeypatch):
    """Each GPU record is what ``gpu.record_tables`` makes of the run file its notes name."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import gpu

    checked = 0
    for entry in records.read_records(ROOT / "benchmarks" / "records" / "gpu.jsonl"):
        run = re.search(r"benchmarks/gpu_runs/(\S+\.jsonl)", entry["notes"])
        if run is None:
            continue
        lines = (ROOT / "benchmarks" / "gpu_runs" / run.group(1)).read_text().splitlines()
        raw = [json.loads(line) for line in lines if line.strip()]
        machine, tables = gpu.record_tables(raw, mflop_per_row=gpu.RESNET20_MFLOP_PER_ROW)
        table = next(t for t in tables if t["table"] == entry["table"])
        assert machine == entry["machine"]
        assert json.loads(json.dumps(table["rows"])) == entry["rows"]
        assert table["columns"] == entry["columns"] and table["key"] == entry["key"]
        checked += 1
    assert checked >= 7


@pytest.mark.slow  # ~30 s on 2 busy cores: the scaling script's --quick sizes
def test_a_script_records_its_tables(tmp_path):
    out = tmp_path / "scaling.jsonl"
    proc = subprocess.run(
        [sys.executable, "benchmarks/scaling.py", "--quick", "--record", str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    entries = records.read_records(out)
    assert [e["table"] for e in entries] == ["rows", "devices"]
    assert entries[0]["command"].startswith("python benchmarks/scaling.py --quick --record")
    assert [r[0] for r in entries[0]["rows"]] == [100, 200, 400]  # N of --quick
    text = generate.render_table(records.latest(entries)["rows"])
    assert "| N | chunks | median (ms) |" in text


def test_keyed_rows_of_one_record_keep_the_last_of_each_key(tmp_path):
    path = tmp_path / "demo.jsonl"
    records.record("t", ["n", "ms"], [[1, 1.0], [1, 2.0], [2, 3.0]], script="demo.py", to=path,
                   key=["n"], **FIXED)  # fmt: skip
    shown = records.latest(records.read_records(path))["t"]
    assert shown["rows"] == [[1, 2.0], [2, 3.0]] and shown["row_source"] == [0, 0]

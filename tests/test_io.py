"""Atomic writes: all or nothing."""

from __future__ import annotations

import os

import pytest

from bnn_ppl.io import atomic_write, read_json, write_json


def test_roundtrip_and_no_temporary_files_left(tmp_path):
    path = tmp_path / "a" / "b.json"
    write_json(path, {"x": [1, 2.5], "name": "ü"})
    write_json(path, {"x": 3})
    assert read_json(path) == {"x": 3}
    assert os.listdir(path.parent) == ["b.json"]


def test_failed_write_keeps_the_old_file(tmp_path):
    path = tmp_path / "c.json"
    write_json(path, {"old": True})

    def broken(f):
        f.write(b'{"new": ')
        raise RuntimeError("killed mid-write")

    with pytest.raises(RuntimeError, match="killed"):
        atomic_write(path, broken)
    assert read_json(path) == {"old": True}
    assert os.listdir(tmp_path) == ["c.json"]

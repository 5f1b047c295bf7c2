"""Atomic writes: all or nothing; arrays saved and loaded without pickle, damage detected."""

from __future__ import annotations

import contextlib
import os
import pickle
import stat

import numpy as np
import pytest

from bnn_ppl.io import (
    atomic_write,
    load_npz,
    npz_bytes,
    read_json,
    save_npz,
    sha256_file,
    write_json,
)


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


@contextlib.contextmanager
def umask(mask):
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


@pytest.mark.parametrize("mask", [0o022, 0o002, 0o077, 0o027], ids=oct)
def test_files_get_the_mode_open_gives_under_the_umask(tmp_path, mask):
    """Not mkstemp's 0600: collaborators on a shared filesystem must be able to read runs."""
    json_path, npz_path, plain = tmp_path / "m.json", tmp_path / "a.npz", tmp_path / "plain"
    with umask(mask):
        write_json(json_path, {"x": 1})
        save_npz(npz_path, {"a": np.ones(2)})
        plain.write_text("reference")  # what open() gives
    want = 0o666 & ~mask
    assert stat.S_IMODE(plain.stat().st_mode) == want
    for path in (json_path, npz_path):
        assert stat.S_IMODE(path.stat().st_mode) == want, (oct(path.stat().st_mode), oct(mask))
    os.chmod(json_path, 0o600)  # replacing a file: a new file, with the umask's mode again
    with umask(mask):
        write_json(json_path, {"x": 2})
    assert stat.S_IMODE(json_path.stat().st_mode) == want and read_json(json_path) == {"x": 2}


ARRAYS = {
    "Dense_0.kernel": np.arange(12, dtype=np.float32).reshape(3, 4),
    "file": np.int64(7),  # np.savez cannot take this name; a 0-d array stays 0-d
    "mask": np.array([True, False]),
    "empty": np.zeros((0, 2), np.float16),
    "strided": np.arange(10)[::3],
    "fortran": np.asfortranarray(np.arange(6.0).reshape(2, 3)),
}


def test_npz_roundtrip_exact_and_deterministic(tmp_path):
    path = tmp_path / "a.npz"
    digest = save_npz(path, ARRAYS)
    assert digest == sha256_file(path) and npz_bytes(ARRAYS) == path.read_bytes()
    back = load_npz(path, sha256=digest)
    assert list(back) == list(ARRAYS)
    for k, v in ARRAYS.items():
        assert back[k].dtype == v.dtype and back[k].shape == np.shape(v)
        np.testing.assert_array_equal(back[k], v)
    assert dict(np.load(path)).keys() == ARRAYS.keys()  # a plain .npz for numpy too
    assert os.listdir(tmp_path) == ["a.npz"]


def test_object_arrays_are_refused_both_ways(tmp_path):
    with pytest.raises(TypeError, match="pickling"):
        save_npz(tmp_path / "x.npz", {"a": np.array([{"x": 1}], dtype=object)})
    assert not os.listdir(tmp_path)
    crafted = tmp_path / "crafted.npz"
    np.savez(crafted, fine=np.ones(2), evil=np.array([print], dtype=object))
    with pytest.raises(ValueError, match=r"crafted\.npz: array 'evil' holds Python objects"):
        load_npz(crafted)


@pytest.mark.parametrize("kind", ["pickle", "npy", "empty", "text"])
def test_other_formats_are_refused(tmp_path, kind):
    path = tmp_path / "f.npz"
    if kind == "pickle":
        path.write_bytes(pickle.dumps({"a": np.ones(2)}))
    elif kind == "npy":
        np.save(open(path, "wb"), np.ones(3))
    elif kind == "text":
        path.write_text("PK but not really a zip")
    else:
        path.write_bytes(b"")
    with pytest.raises(ValueError, match=r"f\.npz"):
        load_npz(path)


def test_every_truncation_and_checksum_mismatch_is_a_clear_error(tmp_path):
    path = tmp_path / "t.npz"
    digest = save_npz(path, ARRAYS)
    good = path.read_bytes()
    cuts = [*range(0, len(good), 11), len(good) - 1]
    for n in cuts:  # never a numpy/zipfile traceback: always our ValueError
        path.write_bytes(good[:n])
        with pytest.raises(ValueError, match=r"t\.npz"):
            load_npz(path)
    bad = bytearray(good)
    bad[len(good) // 2] ^= 0xFF
    path.write_bytes(bytes(bad))
    with pytest.raises(ValueError, match="checksum mismatch"):
        load_npz(path, sha256=digest)
    with pytest.raises(FileNotFoundError):
        load_npz(tmp_path / "missing.npz")

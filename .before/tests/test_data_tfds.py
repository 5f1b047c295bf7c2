"""tensorflow-datasets loaders: mocked data, tiny really-prepared data, and the offline path.

Three kinds of evidence:

* ``tfds.testing.mock_data`` (random examples, no files) for every loader: shapes, dtypes,
  class counts, standardisation.
* a tiny ``mnist`` / ``imdb_reviews`` really prepared on disk as array_record (fake examples
  written by tfds' own builder, no network and no TensorFlow), read back through the real
  decoding path: the on-disk search order and the files tfds actually writes.
* the offline path: nothing prepared, no network: a clear ``DataNotFoundError`` in well under
  5 seconds, no socket opened, nothing written.
"""

from __future__ import annotations

import json
import shutil
import socket
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import bnn_ppl as bp
from bnn_ppl import cli
from bnn_ppl.data import DataNotFoundError
from bnn_ppl.validation import InputValueError

tfds = pytest.importorskip("tensorflow_datasets")
MockPolicy = tfds.testing.MockPolicy

IMAGES = {  # name: (image shape, classes)
    "mnist": ((28, 28, 1), 10),
    "fashion_mnist": ((28, 28, 1), 10),
    "cifar10": ((32, 32, 3), 10),
    "cifar100": ((32, 32, 3), 100),
}


@pytest.fixture(autouse=True)
def isolated_tfds_dirs(tmp_path, monkeypatch):
    """``~/tensorflow_datasets`` and ``$TFDS_DATA_DIR`` point nowhere real during these tests."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("TFDS_DATA_DIR", raising=False)


@pytest.fixture
def no_network(monkeypatch):
    """Every attempt to resolve a host or open a connection is recorded and refused."""
    attempts = []

    def refuse(*args, **kwargs):
        attempts.append(args)
        raise OSError("network disabled in this test")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    return attempts


# --- mocked data (tfds.testing.mock_data: tfds.data_source works without TensorFlow) --------


@pytest.mark.parametrize("name", sorted(IMAGES))
def test_image_loaders_under_mock_data(name, tmp_path):
    shape, classes = IMAGES[name]
    with tfds.testing.mock_data(num_examples=12, policy=MockPolicy.USE_CODE):
        d = bp.data.load(name, data_dir=tmp_path)
    assert d.name == name and d.task == "classification" and d.num_classes == classes
    assert d.x_train.shape == (12, *shape) and d.x_test.shape == (12, *shape)
    assert d.x_train.dtype == np.float32 and d.x_test.dtype == np.float32
    assert d.y_train.dtype == np.int32 and d.y_test.dtype == np.int32
    assert d.y_train.min() >= 0 and d.y_train.max() < classes
    # standardised per channel with training statistics (pixel units)
    assert d.x_mean.shape == (shape[-1],) and d.x_std.shape == (shape[-1],)
    assert np.all((d.x_mean > 0) & (d.x_mean < 255))
    # computed in float64, so that only the float32 rounding of each standardised value is
    # tested: a few eps of |x| plus the centring's mean/std (issue 14, item 6: no fixed atol)
    x = d.x_train.astype(np.float64)
    eps = np.finfo(np.float32).eps
    tol = 4 * eps * (np.abs(x).max(axis=(0, 1, 2)) + np.abs(d.x_mean) / d.x_std)
    np.testing.assert_array_less(np.abs(x.mean(axis=(0, 1, 2))), tol)
    np.testing.assert_array_less(np.abs(x.std(axis=(0, 1, 2)) - 1), tol)


def test_imdb_under_mock_data(tmp_path):
    with tfds.testing.mock_data(num_examples=9, policy=MockPolicy.USE_CODE):
        d = bp.data.load("imdb_reviews", data_dir=tmp_path, vocab_size=12, max_len=16)
    assert d.num_classes == 2 and d.x_train.shape == (9, 16) and d.x_test.shape == (9, 16)
    assert d.x_train.dtype == np.int32 and d.y_train.dtype == np.int32
    assert d.x_train.min() >= 0 and d.x_train.max() < 12
    assert set(np.unique(d.y_train)) <= {0, 1}
    assert (d.x_train > 1).any()  # some in-vocabulary tokens


def test_cifar10_corrupted_under_mock_data(tmp_path):
    with tfds.testing.mock_data(num_examples=6, policy=MockPolicy.USE_CODE):
        clean = bp.data.load("cifar10", data_dir=tmp_path)
        everything = bp.data.load_corrupted(clean, data_dir=tmp_path)
        assert len(everything) == 19 * 5
        assert {k for k, _ in everything} >= {"gaussian_noise", "fog", "jpeg_compression"}
        shifted = bp.data.load_corrupted(
            clean, corruptions=["fog", "gaussian_noise"], severities=[1, 5], data_dir=tmp_path
        )
        assert sorted(shifted) == [("fog", 1), ("fog", 5), ("gaussian_noise", 1),
                                   ("gaussian_noise", 5)]  # fmt: skip
        x, y = shifted["fog", 5]
    assert x.shape == (6, 32, 32, 3) and x.dtype == np.float32
    assert y.dtype == np.int32 and y.min() >= 0 and y.max() < 10
    assert np.isfinite(x).all()


def test_load_corrupted_rejects_bad_requests(tmp_path):
    digits = bp.data.load("digits")
    with pytest.raises(ValueError, match="needs the clean 'cifar10' Dataset.*corrupt_test_set"):
        bp.data.load_corrupted(digits)
    with tfds.testing.mock_data(num_examples=2, policy=MockPolicy.USE_CODE):
        clean = bp.data.load("cifar10", data_dir=tmp_path)
    with pytest.raises(ValueError, match="unknown corruption 'rain'"):
        bp.data.load_corrupted(clean, corruptions=["rain"])
    with pytest.raises(ValueError, match=r"severity must be in \[1, 2, 3, 4, 5\], got 6"):
        bp.data.load_corrupted(clean, severities=[6])


# --- tiny data really prepared by tfds (array_record, no network, no TensorFlow) -----------


def _prepare_tiny(name, data_dir, examples, monkeypatch, file_format="array_record"):
    """Prepare ``name`` under ``data_dir`` with tfds' own builder, from fake examples."""
    cls = tfds.builder_cls(name)

    def split_generators(self, dl_manager):
        return {split: self._generate_examples(split) for split in examples}

    def generate_examples(self, split, *args):
        yield from enumerate(examples[split])

    monkeypatch.setattr(cls, "_split_generators", split_generators)
    monkeypatch.setattr(cls, "_generate_examples", generate_examples)
    builder = tfds.builder(name, data_dir=str(data_dir), file_format=file_format)
    builder.download_and_prepare(
        download_config=tfds.download.DownloadConfig(try_download_gcs=False)
    )


def _digit_images(n, seed):
    from PIL import Image  # tfds encodes PIL images without TensorFlow

    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, n)
    examples = [
        {"image": Image.fromarray(p), "label": int(c)} for p, c in zip(pixels, labels, strict=True)
    ]
    return examples, pixels, labels


def test_really_prepared_mnist_is_found_after_an_empty_data_dir(tmp_path, monkeypatch, no_network):
    prepared = tmp_path / "prepared"
    train, train_px, train_y = _digit_images(20, seed=0)
    test, test_px, test_y = _digit_images(7, seed=1)
    _prepare_tiny("mnist", prepared, {"train": train, "test": test}, monkeypatch)
    monkeypatch.setenv("TFDS_DATA_DIR", str(prepared))
    empty = tmp_path / "empty"
    empty.mkdir()

    d = bp.data.load("mnist", data_dir=empty)  # not in data_dir: found under $TFDS_DATA_DIR

    assert d.x_train.shape == (20, 28, 28, 1) and d.x_test.shape == (7, 28, 28, 1)
    np.testing.assert_allclose(d.x_mean, [train_px.mean()])
    np.testing.assert_allclose(d.x_std, [train_px.std()])
    # tfds shuffles the records when it writes them: match examples by their pixels
    for x, y, px, labels in ((d.x_train, d.y_train, train_px, train_y),
                             (d.x_test, d.y_test, test_px, test_y)):  # fmt: skip
        written = {p.tobytes(): int(c) for p, c in zip(px, labels, strict=True)}
        read = np.rint(x[..., 0] * d.x_std[0] + d.x_mean[0]).astype(np.uint8)
        assert {p.tobytes(): int(c) for p, c in zip(read, y, strict=True)} == written
    assert no_network == [] and not any(empty.iterdir())


def test_really_prepared_imdb_tokenised_with_the_training_vocabulary(tmp_path, monkeypatch):
    reviews = {
        "train": [
            {"text": b"A great film.<br />Great acting", "label": 1},
            {"text": b"a dull film, dull and long", "label": 0},
        ],
        "test": [{"text": b"great great unknownword", "label": 1}],
    }
    _prepare_tiny("imdb_reviews", tmp_path, reviews, monkeypatch)
    d = bp.data.load("imdb_reviews", data_dir=tmp_path, vocab_size=5, max_len=4)
    # vocabulary: a (2), dull (2), film (2), great (2) -> top 3 alphabetically among ties
    vocab = bp.data.text.build_vocabulary([r["text"] for r in reviews["train"]], 5)
    assert vocab == {"a": 2, "dull": 3, "film": 4}
    np.testing.assert_array_equal(d.x_test, [[0, 1, 1, 1]])  # "great great unknownword"
    dull = d.x_train[d.y_train == 0]  # tfds shuffles records: find the review by its label
    np.testing.assert_array_equal(dull, [[4, 3, 1, 1]])  # "film, dull and long": the end kept
    assert sorted(d.y_train.tolist()) == [0, 1]


def test_tfrecord_preparation_is_reported_with_the_rebuild_command(tmp_path, monkeypatch):
    train, _, _ = _digit_images(3, seed=0)
    _prepare_tiny("mnist", tmp_path, {"train": train, "test": train}, monkeypatch)
    info = tmp_path / "mnist" / "3.0.1" / "dataset_info.json"
    meta = json.loads(info.read_text())
    meta["fileFormat"] = "tfrecord"  # what tfds.load writes by default
    info.write_text(json.dumps(meta))
    with pytest.raises(DataNotFoundError, match="(?s)without random access.*--file_format array"):
        bp.data.load("mnist", data_dir=tmp_path)


# --- damaged preparations: a clear error naming the folder and the rebuild command -----------


@pytest.fixture(scope="module")
def prepared_mnist(tmp_path_factory):
    """A tiny mnist prepared once (20 train, 7 test images); tests damage copies of it."""
    root = tmp_path_factory.mktemp("prepared")
    train, _, _ = _digit_images(20, seed=0)
    test, _, _ = _digit_images(7, seed=1)
    with pytest.MonkeyPatch.context() as mp:
        _prepare_tiny("mnist", root, {"train": train, "test": test}, mp)
    return root


def _shards(folder, split):
    return sorted(folder.glob(f"mnist-{split}.array_record-*"))


def _truncate(variant, split="train"):
    for p in _shards(variant, split):
        p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])


DAMAGE = {  # how: (damage the variant folder, what the message says)
    "truncated records": (_truncate, " of 20 cannot be read (UnidentifiedImageError"),
    "emptied records": (lambda v: [p.write_bytes(b"") for p in _shards(v, "test")], "of 7"),
    "deleted records": (lambda v: [p.unlink() for p in _shards(v, "train")], "record 0 of 20"),
    "unparsable dataset_info.json": (
        lambda v: (v / "dataset_info.json").write_text("{not json"),
        "it cannot be opened",
    ),
}


@pytest.mark.parametrize("how", list(DAMAGE))
def test_a_damaged_preparation_is_a_clear_error(how, prepared_mnist, tmp_path, no_network):
    damage, problem = DAMAGE[how]
    root = Path(shutil.copytree(prepared_mnist, tmp_path / "tfds"))
    damage(root / "mnist" / "3.0.1")
    with pytest.raises(InputValueError) as info:
        bp.data.load("mnist", data_dir=root)
    message = str(info.value)
    assert f"tfds data set 'mnist' under {root} is damaged or incomplete: " in message
    assert problem in message
    assert f"Delete {root / 'mnist'}" in message
    assert f"tfds build mnist --data_dir {root} --file_format array_record" in message
    assert no_network == []


def test_the_command_line_reports_a_damaged_preparation(prepared_mnist, tmp_path, capsys):
    root = Path(shutil.copytree(prepared_mnist, tmp_path / "tfds"))
    _truncate(root / "mnist" / "3.0.1")
    rc = cli.main(["run", "svi", "--dataset", "mnist", "--data-dir", str(root),
                   "--out", str(tmp_path / "run")])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("bnn-ppl: error: tfds data set 'mnist' under")
    assert "Traceback" not in err and not (tmp_path / "run").exists()


# --- offline: nothing prepared, no network --------------------------------------------------


@pytest.mark.parametrize(
    ("name", "options", "variant"),
    [
        ("mnist", {}, "mnist/3.0.1"),
        ("fashion_mnist", {}, "fashion_mnist/3.0.1"),
        ("cifar10", {}, "cifar10/3.0.2"),
        ("cifar100", {}, "cifar100/3.0.2"),
        ("imdb_reviews", {"vocab_size": 100}, "imdb_reviews/plain_text/1.0.0"),
    ],
)
def test_missing_data_fails_fast_with_where_and_how(name, options, variant, tmp_path, no_network):
    empty = tmp_path / "empty"
    empty.mkdir()
    start = time.perf_counter()
    with pytest.raises(DataNotFoundError) as info:
        bp.data.load(name, data_dir=empty, **options)
    elapsed = time.perf_counter() - start
    assert elapsed < 5.0, f"the offline failure took {elapsed:.1f} s"
    message = str(info.value)
    assert f"tfds data set '{name}" in message and "never downloads" in message
    assert str(empty / variant / "dataset_info.json") in message  # where it looked ...
    assert str(tmp_path / "home" / "tensorflow_datasets" / variant) in message  # ... and here
    build = name + ("/plain_text" if name == "imdb_reviews" else "")
    assert f"tfds build {build} --data_dir {empty} --file_format array_record" in message
    assert no_network == []  # it did not even try
    assert not any(empty.iterdir())  # and wrote nothing
    assert not (tmp_path / "home").exists()


def test_missing_data_searches_tfds_data_dir_too(tmp_path, monkeypatch, no_network):
    monkeypatch.setenv("TFDS_DATA_DIR", str(tmp_path / "shared_tfds"))
    with pytest.raises(DataNotFoundError) as info:
        bp.data.load("mnist")
    message = str(info.value)
    assert f"{tmp_path / 'shared_tfds' / 'mnist' / '3.0.1'}" in message
    assert "($TFDS_DATA_DIR)" in message and "(tfds default)" in message
    assert f"--data_dir {tmp_path / 'shared_tfds'} " in message  # prepared where tfds looks


def test_missing_cifar10_corrupted_names_the_missing_configs(tmp_path, no_network):
    with tfds.testing.mock_data(num_examples=2, policy=MockPolicy.USE_CODE):
        clean = bp.data.load("cifar10", data_dir=tmp_path)
    start = time.perf_counter()
    with pytest.raises(DataNotFoundError) as info:
        bp.data.load_corrupted(clean, data_dir=tmp_path)
    assert time.perf_counter() - start < 5.0
    message = str(info.value)
    assert "'cifar10_corrupted' (95 configs missing: brightness_1" in message
    assert f"tfds build cifar10_corrupted --data_dir {tmp_path} --file_format" in message
    with pytest.raises(DataNotFoundError, match="'cifar10_corrupted/fog_3'"):
        bp.data.load_corrupted(clean, corruptions=["fog"], severities=[3], data_dir=tmp_path)
    assert no_network == []


# --- options and the optional dependency ------------------------------------------------------


def test_options_are_checked(tmp_path):
    with pytest.raises(TypeError, match=r"load\('mnist'\) got unexpected option\(s\) \['seed'\]"):
        bp.data.load("mnist", seed=0)
    with pytest.raises(ValueError, match="vocab_size must be >= 3"):
        bp.data.load("imdb_reviews", vocab_size=2)
    with pytest.raises(ValueError, match="max_len must be >= 1"):
        bp.data.load("imdb_reviews", max_len=0)
    with pytest.raises(TypeError, match="max_len must be an integer"):
        bp.data.load("imdb_reviews", max_len=4.5)


def test_missing_tensorflow_datasets_says_which_extra_to_install(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "tensorflow_datasets", None)  # import fails
    with pytest.raises(ImportError, match=r'pip install "bnn_ppl\[tfds\]"'):
        bp.data.load("mnist")
    # the command line says so in one line, not with a traceback
    rc = cli.main(["run", "svi", "--dataset", "mnist", "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("bnn-ppl: error: this data set is read with tensorflow-")
    assert 'pip install "bnn_ppl[tfds]"' in err and not (tmp_path / "r").exists()
    # embedded sets never need it
    assert bp.data.load("iris").num_classes == 3


def test_search_dirs_order(tmp_path, monkeypatch):
    monkeypatch.setenv("TFDS_DATA_DIR", str(tmp_path / "env"))
    dirs = bp.data.tfds.search_dirs(tmp_path / "arg")
    assert dirs == [
        (tmp_path / "arg", "data_dir argument"),
        (tmp_path / "env", "$TFDS_DATA_DIR"),
        (Path(tmp_path / "home" / "tensorflow_datasets"), "tfds default"),
    ]

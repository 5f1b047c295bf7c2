"""The examples that measure the papers' claims run end to end with tiny settings.

``uci_regression.py``, ``cold_posterior.py`` and ``regression_1d.py`` are registered here, with
the runner of ``test_examples.py`` (same subprocess, environment and compilation cache). Besides
``{out}``, the flags may use ``{data}``: the UCI split files in ``../shared/data/uci`` (runs that
need them are skipped when the folder is missing).

``uci_regression.py`` runs in this process instead: its reported numbers are recomputed from the
predictions saved in its run folders (one per split and method, each read by ``bnn-ppl
evaluate``), and the MC-dropout numbers it prints are checked against the table it cites.
Every example's run folders must pass ``bnn-ppl evaluate``.
"""

from __future__ import annotations

import importlib.util
import json
import math
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import UCI_DIR
from scipy import stats
from scipy.special import logsumexp
from test_examples import EXAMPLES, _check_ok, _run, check_run_folders
from tolerances import assert_sums_close, mixture_nll_magnitude

from bnn_ppl import cli, runs
from bnn_ppl.data import uci as uci_data

PNG = b"\x89PNG\r\n\x1a\n"

# script name -> flags that make it finish in seconds (plus compilation)
TINY_FLAGS: dict[str, list[str]] = {
    "uci_regression.py": [
        "--datasets", "yacht", "--splits", "2", "--width", "8", "--num-warmup", "10",
        "--num-samples", "10", "--map-steps", "50", "--num-steps", "50",
        "--num-members", "2", "--data-dir", "{data}", "--out", "{out}",
    ],
    "cold_posterior.py": [
        "--max-train", "100", "--width", "8", "--num-warmup", "10", "--num-samples", "10",
        "--temperatures", "1", "0.1", "--uci", "yacht",
        "--data-dir", "{data}", "--out", "{out}",
    ],
    "regression_1d.py": [
        "--width", "8", "--num-train", "30", "--num-warmup", "10", "--num-samples", "10",
        "--map-steps", "50", "--num-steps", "50", "--num-members", "2",
        "--num-plotted", "3", "--out", "{out}",
    ],
}  # fmt: skip

# script name -> strings its stdout must contain
EXPECTED_ROWS: dict[str, list[str]] = {
    "uci_regression.py": [
        "claim",
        "RMSE HMC",
        "LL ensemble",
        "LL MC-dropout",
        "yacht",
        "mean ± SE over 2 split(s)",
        "uci_regression.png",
        "summary.json",
    ],
    "cold_posterior.py": [
        "claim",
        "digits acc",
        "digits NLL",
        "LL yacht",
        "temper=likelihood",
        "temper=posterior",
        "cold_posterior.png",
    ],
    "regression_1d.py": [
        "claim",
        "sd in gap",
        "sd near data",
        "prior",
        "HMC",
        "SVI",
        "ensemble",
        "regression_1d.png",
    ],
}


def _check_cold(stdout: str, out_dir: Path) -> None:
    """Three settings (T = 1 once, T = 0.1 per mode) with valid metrics, and a verdict."""
    assert (out_dir / "cold_posterior.png").read_bytes()[:8] == PNG
    rows = [r.split() for r in stdout.splitlines()]
    rows = [r for r in rows if r and r[0] in ("both", "likelihood", "posterior") and len(r) == 8]
    assert [(r[0], float(r[1])) for r in rows] == [
        ("both", 1.0),
        ("likelihood", 0.1),
        ("posterior", 0.1),
    ]
    for r in rows:
        assert 0.0 <= float(r[2]) <= 1.0 and float(r[3]) > 0.0  # digits accuracy, NLL
        assert float(r[5]) > 0.0 and math.isfinite(float(r[6]))  # yacht RMSE, LL
    assert "measurement supports" in stdout or "measurement does not fully support" in stdout
    payload = json.loads((out_dir / "summary.json").read_text())
    assert set(payload["results"]) == {"digits", "yacht"}
    settings = ["T=1", "likelihood_T=0.1", "posterior_T=0.1"]
    assert check_run_folders(out_dir) == sorted(f"{d}/{s}" for d in ("digits", "yacht")
                                                for s in settings)  # fmt: skip
    # the table prints what the run folders hold
    for r, setting in zip(rows, settings, strict=True):
        digits = runs.load_run(out_dir / "digits" / setting).record["metrics"]
        yacht = runs.load_run(out_dir / "yacht" / setting).record["metrics"]
        assert float(r[2]) == pytest.approx(digits["accuracy"], abs=5e-5)
        assert float(r[3]) == pytest.approx(digits["nll"], abs=5e-5)
        assert float(r[5]) == pytest.approx(yacht["rmse"], abs=5e-4)
        assert float(r[6]) == pytest.approx(-yacht["nll"], abs=5e-4)


def _check_1d(stdout: str, out_dir: Path) -> None:
    """A row per predictive; prior functions spread wider near the data than the posterior's."""
    assert (out_dir / "regression_1d.png").read_bytes()[:8] == PNG
    rows = {
        r.split()[0]: r.split()[1:]
        for r in stdout.splitlines()
        if r.split() and r.split()[0] in ("prior", "HMC", "SVI", "ensemble")
    }
    assert set(rows) == {"prior", "HMC", "SVI", "ensemble"}
    for r in rows.values():
        assert float(r[0]) >= 0.0 and float(r[1]) >= 0.0
    assert float(rows["prior"][1]) > float(rows["HMC"][1])
    assert check_run_folders(out_dir) == ["ensemble", "hmc", "svi"]  # the prior is not fitted


# script name -> check(stdout, out_dir) after a successful run
CHECKS: dict[str, Callable[[str, Path], None]] = {
    "cold_posterior.py": _check_cold,
    "regression_1d.py": _check_1d,
}


# run in this process by their own test (it records what the script computes)
IN_PROCESS = {"uci_regression.py"}


# each run is 60-90 s of compilation on a 2-core CI machine: these with -m slow only, so that
# the default suite stays within its budget (their checks are the same code paths)
SLOW = {"cold_posterior.py", "regression_1d.py"}


@pytest.mark.parametrize(
    "script",
    [
        pytest.param(s, marks=pytest.mark.slow) if s in SLOW else s
        for s in sorted(set(TINY_FLAGS) - IN_PROCESS)
    ],
)
def test_example_runs(script: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    flags = TINY_FLAGS[script]
    if "{data}" in flags and not UCI_DIR.is_dir():
        pytest.skip(f"no UCI data at {UCI_DIR}")
    out_dir = tmp_path / "out"
    flags = [f.replace("{out}", str(out_dir)).replace("{data}", str(UCI_DIR)) for f in flags]
    proc = _run(script, flags, cwd=tmp_path, node=request.node)
    _check_ok(proc)
    for row in EXPECTED_ROWS[script]:
        assert row in proc.stdout, f"{row!r} not in the output of {script}:\n{proc.stdout}"
    CHECKS[script](proc.stdout, out_dir)


# The table uci_regression.py cites: Gal's DropoutUncertaintyExps README
# (https://github.com/yaringal/DropoutUncertaintyExps, readme.md at commit 6eb4497), column
# "Grid Search LL (new)": MC-dropout test log-likelihood, mean over the 20 standard splits.
GAL_GRID_SEARCH_LL = {
    "boston": -2.40, "concrete": -2.93, "energy": -1.21, "kin8nm": 1.14, "naval": 4.45,
    "power": -2.80, "protein": -2.87, "wine-red": -0.93, "yacht": -1.25,
}  # fmt: skip
UCI_FOLDERS = {"yacht": "yacht"}  # example name -> folder of the split files


def _load_example(script: str):
    spec = importlib.util.spec_from_file_location(Path(script).stem, EXAMPLES / script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _y_std(data) -> float:
    return float(np.ravel(data.y_std)[0])


def _recompute(pred, data) -> dict[str, tuple[float, float, int]]:
    """Test RMSE and log-likelihood of the BMA in original units, in float64 from the
    per-sample predictions, each with the sum of |terms| and term count of its float32
    computation (tests/tolerances.py). RMSE is compared through its square."""
    m = np.asarray(pred.mean, np.float64).reshape(len(pred.mean), -1)  # (S, n)
    s = np.asarray(pred.scale, np.float64).reshape(m.shape)
    y = np.asarray(data.y_test, np.float64).reshape(-1)
    y_std = _y_std(data)
    num_samples, n = m.shape
    err = m.mean(axis=0) - y
    mse = float(np.mean(err**2))
    # the BMA mean averages S means of either sign and y is subtracted: both cancel
    mse_terms = float(np.mean(err**2 + 2 * np.abs(err) * (np.abs(m).mean(axis=0) + np.abs(y))))
    logc = stats.norm.logpdf(y, m, s)
    ll = float(np.mean(logsumexp(logc, axis=0) - math.log(num_samples)) - math.log(y_std))
    return {
        "mse": (mse, mse_terms, num_samples + n + 2),
        "ll": (ll, mixture_nll_magnitude(m, s, y, y_std), num_samples * n * 4),
    }


@pytest.mark.slow  # ~40 s quiet; the UCI loaders and fit paths have their own tests
def test_uci_regression_reports_what_its_predictions_give(tmp_path: Path, capsys):
    """The UCI example's summary.json, table and verdict equal the metrics recomputed (float64,
    by hand) from the predictions saved in its run folders, on the standard yacht splits; every
    run folder passes ``bnn-ppl evaluate``; the MC-dropout numbers are those of the table it
    cites."""
    script = "uci_regression.py"
    if not UCI_DIR.is_dir():
        pytest.skip(f"no UCI data at {UCI_DIR}")
    example = _load_example(script)
    # the published reference values are the cited table's
    assert example.MC_DROPOUT_LL == {k: GAL_GRID_SEARCH_LL[k] for k in example.MC_DROPOUT_LL}
    out_dir = tmp_path / "out"
    flags = [f.replace("{out}", str(out_dir)).replace("{data}", str(UCI_DIR))
             for f in TINY_FLAGS[script]]  # fmt: skip
    args = example.parse_args(flags)
    example.main(args)
    stdout = capsys.readouterr().out
    for row in EXPECTED_ROWS[script]:
        assert row in stdout, f"{row!r} not in the output of {script}:\n{stdout}"
    assert (out_dir / "uci_regression.png").read_bytes()[:8] == PNG

    # one run folder per (split, method), each on the standard split's test rows
    methods, splits = example.METHODS, 2
    folders = {m: c.method for m, c in example.configs(args).items()}
    assert sorted(p.relative_to(out_dir).as_posix() for p in out_dir.glob("*/*/*")) == sorted(
        f"yacht/split{k}/{folders[m]}" for k in range(splits) for m in methods
    )
    raw = uci_data.read_table(UCI_DIR / UCI_FOLDERS["yacht"] / "data.txt")
    recomputed = {m: {"mse": [], "ll": []} for m in methods}
    payload = json.loads((out_dir / "summary.json").read_text())
    results = payload["results"]["yacht"]
    assert set(results) == set(methods)
    y_stds = []
    for split in range(splits):
        data = uci_data.load_uci("yacht", split=split, data_dir=UCI_DIR)
        y_stds.append(_y_std(data))
        rows = uci_data.read_table(
            UCI_DIR / UCI_FOLDERS["yacht"] / f"index_test_{split}.txt", integer=True
        ).ravel()
        scaled = np.asarray(data.y_test, np.float64) * data.y_std  # float32 x std + mean
        assert_sums_close(scaled + data.y_mean, raw[rows, -1], np.abs(scaled) + abs(data.y_mean), 2)
        assert _y_std(data) > 2  # original units differ from standardised ones
        for method in methods:
            folder = out_dir / "yacht" / f"split{split}" / folders[method]
            assert cli.main(["evaluate", str(folder)]) == 0
            run = runs.load_run(folder)
            np.testing.assert_array_equal(run.targets, data.y_test)
            assert run.y_std == pytest.approx(_y_std(data))
            pred = runs.flat_draws(run.predictions, run.chains)  # (draw, n)
            for key, (want, terms, n) in _recompute(pred, data).items():
                recomputed[method][key].append(want)
                if key == "mse":
                    got = (results[method]["rmse"][split] / _y_std(data)) ** 2
                else:
                    got = results[method]["ll"][split]
                assert_sums_close(got, want, terms, n, what=f"{method} {key} split {split}")

    # the table prints mean ± SE over the splits of those numbers, then Gal's value
    row = [r for r in stdout.splitlines() if r.startswith("yacht ")]
    assert len(row) == 1, stdout
    printed = [tuple(map(float, p)) for p in re.findall(r"(-?\d+\.\d+) ± (-?\d+\.\d+)", row[0])]
    assert len(printed) == 2 * len(methods), row
    columns = [
        [math.sqrt(mse) * y_std for mse, y_std in zip(recomputed[m]["mse"], y_stds, strict=True)]
        for m in methods
    ] + [recomputed[m]["ll"] for m in methods]

    def printed_as(shown: float, value: float) -> bool:  # rounded to 2 decimals
        return abs(shown - value) <= 0.005 + 1e-6 * max(1.0, abs(value))

    for (mean, se), values in zip(printed, columns, strict=True):
        v = np.asarray(values)
        assert printed_as(mean, v.mean()) and printed_as(se, v.std(ddof=1) / math.sqrt(len(v))), (
            row[0],
            values,
        )
    gal = GAL_GRID_SEARCH_LL["yacht"]
    assert row[0].split()[-1] == f"{gal:.2f}"
    assert payload["mc_dropout_ll"] == example.MC_DROPOUT_LL
    # ... and the verdict compares the recomputed HMC mean with Gal's value
    number = r"(-?\d+\.\d+)"
    verdict = re.findall(
        f"yacht: HMC LL {number} (beats|does not beat) MC dropout {number}", stdout
    )
    assert len(verdict) == 1, stdout
    shown, verb, reference = verdict[0]
    hmc = float(np.mean(recomputed["HMC"]["ll"]))
    assert printed_as(float(shown), hmc) and float(reference) == gal, verdict
    if abs(hmc - gal) > 1e-4:  # (closer, float32 rounding may decide)
        assert verb == ("beats" if hmc > gal else "does not beat"), (verdict, hmc)


def test_reference_splits_refuses_mixed_models_two_records_of_a_split_and_no_match(tmp_path):
    """The split table holds one model, one recipe and one record per split; it says which
    files differ and how to narrow the pattern, and never averages an unconverged split."""
    mod = _load_example("reference_splits.py")
    refs = EXAMPLES / "references"
    for name in ("uci_yacht_split0_noise0.05_init", "uci_yacht_split0_noise0.05_init_s1",
                 "uci_boston_split0"):  # fmt: skip
        for ext in (".json", ".npz"):
            shutil.copy(refs / (name + ext), tmp_path / (name + ext))
    with pytest.raises(ValueError, match="two records of one split"):
        mod.load_records(tmp_path, "uci_yacht_split0_noise0.05_init*.json")
    with pytest.raises(ValueError, match="differ in model.*narrow --pattern"):
        mod.load_records(tmp_path, "uci_*_split0*.json")
    with pytest.raises(ValueError, match="matches no file"):
        mod.load_records(tmp_path, "uci_energy_*.json")
    (rec,) = mod.load_records(tmp_path, "uci_boston_split0.json")  # stored unconverged
    assert not rec["converged"]
    assert rec["recomputed"]["ll"] == pytest.approx(rec["metrics"]["test_ll_original"], rel=1e-6)


def test_reference_splits_takes_a_noise_chosen_per_split_by_one_rule(tmp_path):
    """Records whose noise sd each split chose by the same rule (reference.py --noise heldout)
    are one model; a rule's record beside a fixed-noise one is not."""
    from bnn_ppl.io import read_json, write_json

    mod = _load_example("reference_splits.py")
    refs = EXAMPLES / "references"
    names = [f"uci_concrete_split{k}_noise0.2_prior0.3_init" for k in (0, 1)]
    for name in names:
        for ext in (".json", ".npz"):
            shutil.copy(refs / (name + ext), tmp_path / (name + ext))
    for name, noise in zip(names, (0.3, 0.4), strict=True):
        rec = read_json(tmp_path / f"{name}.json")
        rec["model"] |= {"noise": noise, "noise_choice": {"rule": "heldout_rmse", "noise": noise}}
        write_json(tmp_path / f"{name}.json", rec)
    records = mod.load_records(tmp_path, "uci_concrete_split*.json")
    assert [r["model"]["noise"] for r in records] == [0.3, 0.4]
    rows = mod.split_rows(records).splitlines()
    assert [row.split()[1] for row in rows[1:]] == ["0.3", "0.4"]
    rec = read_json(tmp_path / f"{names[1]}.json")
    del rec["model"]["noise_choice"]
    write_json(tmp_path / f"{names[1]}.json", rec)
    with pytest.raises(ValueError, match="differ in model"):
        mod.load_records(tmp_path, "uci_concrete_split*.json")


@pytest.mark.parametrize("text,want", [("heldout", "heldout"), ("0.4", 0.4), ("1e-2", 0.01)])
def test_reference_noise_is_a_positive_number_or_heldout(text, want, capsys):
    mod = _load_example("reference.py")
    assert mod.parse_args(["--noise", text]).noise == want
    for bad in ("0", "-1", "nan", "inf", "held-out", ""):
        with pytest.raises(SystemExit):
            mod.parse_args(["--noise", bad])
        assert "a positive number or 'heldout'" in capsys.readouterr().err

"""The examples that measure the papers' claims run end to end with tiny settings.

``uci_regression.py``, ``cold_posterior.py`` and ``regression_1d.py`` are registered here, with
the runner of ``test_examples.py`` (same subprocess, environment and compilation cache). Besides
``{out}``, the flags may use ``{data}``: the UCI split files in ``../shared/data/uci`` (runs that
need them are skipped when the folder is missing).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import UCI_DIR
from test_examples import _check_ok, _run

PNG = b"\x89PNG\r\n\x1a\n"

# script name -> flags that make it finish in seconds (plus compilation)
TINY_FLAGS: dict[str, list[str]] = {
    "uci_regression.py": [
        "--datasets", "yacht", "--splits", "2", "--width", "8", "--num-warmup", "10",
        "--num-samples", "10", "--map-steps", "50", "--svi-steps", "50",
        "--ensemble-size", "2", "--ensemble-steps", "50",
        "--data-dir", "{data}", "--out-dir", "{out}",
    ],
    "cold_posterior.py": [
        "--max-train", "100", "--width", "8", "--num-warmup", "10", "--num-samples", "10",
        "--temperatures", "1", "0.1", "--uci", "yacht",
        "--data-dir", "{data}", "--out-dir", "{out}",
    ],
    "regression_1d.py": [
        "--width", "8", "--num-train", "30", "--num-warmup", "10", "--num-samples", "10",
        "--map-steps", "50", "--svi-steps", "50", "--ensemble-size", "2",
        "--ensemble-steps", "50", "--num-plotted", "3", "--out-dir", "{out}",
    ],
}  # fmt: skip

# script name -> strings its stdout must contain
EXPECTED_ROWS: dict[str, list[str]] = {
    "uci_regression.py": ["claim", "RMSE HMC", "LL ensemble", "LL MC-dropout", "yacht",
                          "mean ± SE over 2 split(s)", "uci_regression.png", "metrics.json"],
    "cold_posterior.py": ["claim", "digits acc", "digits NLL", "LL yacht", "temper=likelihood",
                          "temper=posterior", "cold_posterior.png"],
    "regression_1d.py": ["claim", "sd in gap", "sd near data", "prior", "HMC", "SVI",
                         "ensemble", "regression_1d.png"],
}


def _check_uci(stdout: str, out_dir: Path) -> None:
    """One yacht row with finite numbers beside Gal's -1.25; metrics for every method."""
    assert (out_dir / "uci_regression.png").read_bytes()[:8] == PNG
    row = [r for r in stdout.splitlines() if r.startswith("yacht ")]
    assert len(row) == 1 and row[0].rstrip().endswith("-1.25"), stdout
    payload = json.loads((out_dir / "metrics.json").read_text())
    results = payload["results"]["yacht"]
    assert set(results) == {"HMC", "SVI", "ensemble"}
    for r in results.values():
        assert len(r["rmse"]) == len(r["ll"]) == 2
        # a tiny run need not fit (50 steps, 10 samples): only finite, positive RMSEs
        assert all(0.0 < v and math.isfinite(v) for v in r["rmse"]), r
        assert all(math.isfinite(v) for v in r["ll"]), r


def _check_cold(stdout: str, out_dir: Path) -> None:
    """Three settings (T = 1 once, T = 0.1 per mode) with valid metrics, and a verdict."""
    assert (out_dir / "cold_posterior.png").read_bytes()[:8] == PNG
    rows = [r.split() for r in stdout.splitlines()]
    rows = [r for r in rows if r and r[0] in ("both", "likelihood", "posterior") and len(r) == 8]
    assert [(r[0], float(r[1])) for r in rows] == [
        ("both", 1.0), ("likelihood", 0.1), ("posterior", 0.1)]
    for r in rows:
        assert 0.0 <= float(r[2]) <= 1.0 and float(r[3]) > 0.0  # digits accuracy, NLL
        assert float(r[5]) > 0.0 and math.isfinite(float(r[6]))  # yacht RMSE, LL
    assert "measurement supports" in stdout or "measurement does not fully support" in stdout
    payload = json.loads((out_dir / "metrics.json").read_text())
    assert set(payload["results"]) == {"digits", "yacht"}


def _check_1d(stdout: str, out_dir: Path) -> None:
    """A row per predictive; prior functions spread wider near the data than the posterior's."""
    assert (out_dir / "regression_1d.png").read_bytes()[:8] == PNG
    rows = {r.split()[0]: r.split()[1:] for r in stdout.splitlines()
            if r.split() and r.split()[0] in ("prior", "HMC", "SVI", "ensemble")}
    assert set(rows) == {"prior", "HMC", "SVI", "ensemble"}
    for r in rows.values():
        assert float(r[0]) >= 0.0 and float(r[1]) >= 0.0
    assert float(rows["prior"][1]) > float(rows["HMC"][1])


# script name -> check(stdout, out_dir) after a successful run
CHECKS: dict[str, Callable[[str, Path], None]] = {
    "uci_regression.py": _check_uci,
    "cold_posterior.py": _check_cold,
    "regression_1d.py": _check_1d,
}


@pytest.mark.parametrize("script", sorted(TINY_FLAGS))
def test_example_runs(script: str, tmp_path: Path) -> None:
    flags = TINY_FLAGS[script]
    if "{data}" in flags and not UCI_DIR.is_dir():
        pytest.skip(f"no UCI data at {UCI_DIR}")
    out_dir = tmp_path / "out"
    flags = [f.replace("{out}", str(out_dir)).replace("{data}", str(UCI_DIR)) for f in flags]
    proc = _run(script, flags, cwd=tmp_path)
    _check_ok(proc)
    for row in EXPECTED_ROWS[script]:
        assert row in proc.stdout, f"{row!r} not in the output of {script}:\n{proc.stdout}"
    CHECKS[script](proc.stdout, out_dir)

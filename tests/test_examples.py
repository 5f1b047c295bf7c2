"""Every script in ``examples/`` runs end to end with tiny settings.

A new example must register its tiny flags in ``TINY_FLAGS`` (an unregistered script fails the
registration test). Optionally it registers

* ``VARIANTS``: named extra flags, one run per variant (default: one run, ``"default"``);
* ``EXPECTED_ROWS``: strings its stdout must contain;
* ``CHECKS``: a function ``check(stdout, out_dir, variant)`` run after a successful run.

Every run gets a fresh temporary working directory; ``{out}`` in the flags stands for a folder
inside it, so nothing is written into the repository.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import run_child, subprocess_env

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

_TINY_COMPARE = [
    "--num-warmup", "20", "--num-samples", "10", "--width", "8", "--max-train", "200",
    "--map-steps", "50", "--num-steps", "50", "--svi-samples", "10", "--num-members", "2",
    "--out", "{out}",
]  # fmt: skip

# script name -> flags that make it finish in seconds
TINY_FLAGS: dict[str, list[str]] = {
    "compare_hmc_svi.py": _TINY_COMPARE,
    "rhat.py": [
        "--width",
        "8",
        "--num-chains",
        "2",
        "--num-warmup",
        "20",
        "--num-samples",
        "20",
        "--num-test",
        "40",
        "--max-train",
        "200",
        "--out",
        "{out}",
    ],
    "prior_functions.py": [
        "--width",
        "8",
        "--num-train",
        "30",
        "--num-prior-draws",
        "10",
        "--num-plotted",
        "3",
        "--num-warmup",
        "20",
        "--num-samples",
        "10",
        "--out",
        "{out}",
    ],
}

TINY_FLAGS["reference.py"] = [
    "--width", "4", "--num-chains", "2", "--num-warmup", "20", "--segment-draws", "10",
    "--max-draws", "20", "--max-train", "100", "--max-test", "30", "--out", "{out}",
]  # fmt: skip

TINY_FLAGS["numpyro_model.py"] = [
    "--num-train", "40", "--num-warmup", "100", "--num-samples", "100", "--chunk-size", "16",
    "--memory-n", "1000", "4000", "--table-chunk-size", "250", "--seed", "0",
]  # fmt: skip

# reads the stored references (no sampling): the default pattern, yacht's fixed-noise splits
TINY_FLAGS["reference_splits.py"] = []
TINY_FLAGS["noise_defaults.py"] = ["--methods", "map", "svi", "--max-train", "60", "--out", "{out}"]

# script name -> variant name -> extra flags (one run per variant)
VARIANTS: dict[str, dict[str, list[str]]] = {
    "compare_hmc_svi.py": {"digits": [], "diabetes": ["--dataset", "diabetes"]},
}

# script name -> strings its stdout must contain
EXPECTED_ROWS: dict[str, list[str]] = {
    "rhat.py": [
        "weight space",
        "function space: probs (papers)",
        "function space: p_true",
        "function space: centred_logits",
        "Izmailov",
        "R-hat > 1.01",
        "per layer",
        "chain 1",
    ],
    "prior_functions.py": ["sd in gap", "sd near data", "prior", "posterior"],
    "compare_hmc_svi.py": [
        "single sample",
        "BMA",
        "accept prob",
        "divergences",
        "leapfrog steps",
        "wall time",
        "-ELBO",
        "members",
        "summary.json",
    ],
}

TIMEOUT_S = 540  # under pytest-timeout 600; the slow sgmcmc CNN variant took ~420 s, loaded


def _check_compare(stdout: str, out_dir: Path, variant: str) -> None:
    """The comparison prints one row per (method, predictive), writes a run folder per method
    that ``bnn-ppl evaluate`` reads, and its BMA rows are those folders' metrics."""
    from bnn_ppl import runs

    rows = [line.split() for line in stdout.splitlines()]
    labels = ("HMC single sample", "HMC BMA", "SVI BMA", "ensemble BMA")
    for label in labels:
        row = [r for r in rows if r[: len(label.split())] == label.split()]
        assert len(row) == 1, f"no single {label} row in:\n{stdout}"
    assert check_run_folders(out_dir) == ["ensemble", "hmc", "svi"]
    payload = json.loads((out_dir / "summary.json").read_text())
    assert set(payload) == {"args", "dataset", "results", "diagnostics"}
    assert payload["args"]["width"] == 8 and payload["args"]["max_train"] == 200
    assert payload["args"]["dataset"] == variant == payload["dataset"]["name"]
    results = payload["results"]
    assert set(results) == set(labels)
    for label, folder in (("HMC BMA", "hmc"), ("SVI BMA", "svi"), ("ensemble BMA", "ensemble")):
        saved = runs.load_run(out_dir / folder).record["metrics"]
        assert {k: results[label][k] for k in saved} == pytest.approx(saved, rel=1e-6)
    assert set(payload["diagnostics"]) == {"hmc", "svi", "ensemble"}
    for diag in payload["diagnostics"].values():
        assert diag["wall_time_s"] > 0
    assert 0.0 <= payload["diagnostics"]["hmc"]["accept_prob"] <= 1.0
    rows_ = list(results.values())

    if variant == "digits":
        assert "agree w/ HMC" in stdout and "TV w/ HMC" in stdout
        for r in rows_:
            assert set(r) == {"accuracy", "nll", "ece", "brier", "agreement", "tv"}
            for key in ("accuracy", "ece", "agreement", "tv"):
                assert 0.0 <= r[key] <= 1.0, (key, r)
            assert r["nll"] > 0.0 and 0.0 <= r["brier"] <= 2.0
        hmc = results["HMC BMA"]
        assert hmc["agreement"] == 1.0 and hmc["tv"] == 0.0  # the reference itself
        # A tiny run (200 rows, 10 samples) reaches about 0.65-0.75 BMA accuracy over seeds;
        # chance level on digits is 0.1.
        assert hmc["accuracy"] > 0.5
        png = out_dir / "reliability.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert str(png) in stdout
        figures = ["reliability.png", "summary.json"]
    else:
        assert "RMSE vs HMC mean" in stdout and "original units" in stdout
        assert payload["dataset"]["task"] == "regression"
        y_std = payload["dataset"]["y_std"]
        assert y_std > 10  # diabetes targets: std about 77, so original units are not unit-free
        for r in rows_:
            assert set(r) == {"rmse", "nll", "mean_sq_std_residual", "rmse_vs_reference", "w2"}
            # a constant prediction of the mean has RMSE ~ y_std; a fit model beats 1.5 x that
            assert 0.0 < r["rmse"] < 1.5 * y_std
            assert r["rmse_vs_reference"] >= 0.0
            assert r["nll"] > 0.0 and r["nll"] < 10.0  # original units: log(77) ~ 4.3 scale
        assert results["HMC BMA"]["rmse_vs_reference"] == 0.0
        figures = ["summary.json"]
    files = sorted(p.name for p in out_dir.iterdir() if p.is_file())
    assert files == figures


def _check_numpyro_model(stdout: str, out_dir: Path, variant: str) -> None:
    """The two samplers' predictive means agree within their Monte Carlo error (at every one of
    the 24 test points with sd > 0 the difference is under 4 standard errors: sd / sqrt(ESS) of
    each chain, combined; a 30-draw run, whose warmup had not adapted, failed this at 2 of 5
    seeds by up to 4.3, 100 draws gave 1.2-1.4 at seeds 0-4), the NumPyro program's working
    memory grows with the rows and the chunked one's does not."""
    gap = next(line for line in stdout.splitlines() if "Monte Carlo standard error:" in line)
    assert float(gap.split(":")[1].split()[0]) < 4.0, gap
    rows = [
        line.split() for line in stdout.splitlines() if line.split()[:1] in (["1000"], ["4000"])
    ]
    assert len(rows) == 2, stdout
    (_, _, _, _, theirs_1k, ours_1k), (_, _, _, _, theirs_4k, ours_4k) = rows
    assert float(theirs_4k) > 2 * float(theirs_1k)
    assert float(ours_4k) <= 1.05 * float(ours_1k)


# script name -> check(stdout, out_dir, variant) after a successful run
def _check_prior_functions(stdout: str, out_dir: Path, variant: str) -> None:
    """Both figures are written, and prior functions are wider than the posterior's near data."""
    for name in ("prior_functions.png", "posterior_functions.png"):
        assert (out_dir / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert check_run_folders(out_dir) == ["hmc"]  # the prior is drawn, not fitted
    rows = {
        r.split()[0]: [float(v) for v in r.split()[1:]]
        for r in stdout.splitlines()
        if r.split() and r.split()[0] in ("prior", "posterior") and len(r.split()) == 3
    }
    assert rows["prior"][1] > rows["posterior"][1]


def _check_reference(stdout: str, out_dir: Path, variant: str) -> None:
    """The record says honestly that the tiny run did not converge, names its command, seed and
    versions, and its metrics reproduce from the stored predictions (checked by SHA-256)."""
    import numpy as np

    import bnn_ppl as bp
    from bnn_ppl.io import load_npz, read_json

    record = read_json(out_dir / "digits.json")
    assert record["converged"] is False and record["stop_reason"] == "max_draws"
    assert "NOT converged" in stdout and "WARNING (not converged)" in stdout
    assert record["command"].startswith("python ") and record["seed"] == 0
    assert {"bnn_ppl", "jax", "numpyro"} <= set(record["versions"])
    assert record["model"]["likelihood"] == "Categorical" and "noise" not in record["model"]
    assert len(record["recipe"]["convergence"]["checks"]) == 2
    arrays = load_npz(out_dir / "digits.npz", sha256=record["predictions"]["sha256"])
    assert arrays["probs"].shape == (30, 10) and arrays["chain_probs"].shape == (2, 30, 10)
    # each chain's BMA (the reference's own noise floor): equal draws, so they average to it
    np.testing.assert_allclose(arrays["chain_probs"].mean(0), arrays["probs"], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(
        record["metrics"]["nll"],
        float(bp.metrics.nll(arrays["probs"], arrays["y_test"])),
        rtol=1e-6,
    )
    assert record["metrics"]["accuracy"] == float(
        bp.metrics.accuracy(arrays["probs"], arrays["y_test"])
    )


def _check_rhat(stdout: str, out_dir: Path, variant: str) -> None:
    """The histogram PNG is written; weight space and the three function-space quantities
    report fractions in [0, 100] %."""
    assert (out_dir / "rhat.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert check_run_folders(out_dir) == ["hmc"]
    assert "slow values (probs): " in stdout and " values fail R-hat <= 1.01" in stdout
    rows = [r.split() for r in stdout.splitlines() if r.endswith(tuple("0123456789"))]
    spaces = [r for r in rows if r[:2] in (["weight", "space"], ["function", "space:"])]
    assert len(spaces) == 4
    for r in spaces:
        shares = [float(t.rstrip("%")) for t in r if t.endswith("%")]
        assert len(shares) == 2 and all(0.0 <= v <= 100.0 for v in shares)


def _check_reference_splits(stdout: str, out_dir: Path, variant: str) -> None:
    """One row per stored split, with the record's own test metrics; the mean over the
    converged splits only, beside MC dropout's published number."""
    from bnn_ppl.io import read_json

    folder = EXAMPLES / "references"
    records = sorted(folder.glob("uci_yacht_split*_noise0.05_init.json"))
    assert records, "no stored yacht split references"
    lines = stdout.splitlines()
    lls = []
    for path in records:
        rec = read_json(path)
        split = rec["data"]["split"]
        row = [r.split() for r in lines if r.split()[:1] == [str(split)]]
        assert len(row) == 1, f"no single row for split {split}:\n{stdout}"
        assert float(row[0][-2]) == pytest.approx(rec["metrics"]["test_ll_original"], abs=5e-4)
        assert float(row[0][-1]) == pytest.approx(rec["metrics"]["rmse_original"], abs=5e-4)
        if rec["converged"]:
            lls.append(rec["metrics"]["test_ll_original"])
    table = [r.split() for r in lines if r.startswith("yacht ")]
    assert len(table) == 1 and float(table[0][-1]) == -1.25  # MC dropout, 20 splits
    assert float(table[0][1]) == pytest.approx(float(np.mean(lls)), abs=5e-3)
    assert f"{len(lls)} converged" in stdout


def _check_noise_defaults(stdout: str, out: Path, variant: str) -> None:
    """One row per method with its default marked, three LLs and two paired differences."""
    rows = [r for r in stdout.splitlines() if r.startswith(("| map ", "| svi "))]
    assert [r.split()[1:3] for r in rows] == [["map", "(held-out)"], ["svi", "(learned)"]]
    for r in rows:
        cells = [c.strip() for c in r.strip("|").split("|")]
        assert len(cells[1].split(" / ")) == 3 and "[" in cells[3]  # the learned σ's range
        assert all("±" in c for c in cells[4:]) and len(cells) == 6
    assert (out / "svi_halfnormal1" / "metrics.json").exists()


CHECKS: dict[str, Callable[[str, Path, str], None]] = {
    "noise_defaults.py": _check_noise_defaults,
    "reference_splits.py": _check_reference_splits,
    "rhat.py": _check_rhat,
    "reference.py": _check_reference,
    "compare_hmc_svi.py": _check_compare,
    "prior_functions.py": _check_prior_functions,
    "numpyro_model.py": _check_numpyro_model,
}


def _scripts() -> list[str]:
    return sorted(p.name for p in EXAMPLES.glob("*.py"))


# runs that repeat another's code path on other data: -m slow only (suite time budget)
SLOW_RUNS = {
    ("compare_hmc_svi.py", "diabetes"),
    ("noise_defaults.py", "default"),  # six CLI runs, two with the held-out rule's 25 MAP fits
    ("reference.py", "default"),
    # 30-40 s each on quiet CI cores, mostly compilation of code paths the library tests and
    # compare_hmc_svi's run (which stays) cover: -m slow (the default suite's 8-minute budget)
    ("rhat.py", "default"),
    ("prior_functions.py", "default"),
    ("numpyro_model.py", "default"),
}


def _runs() -> list[Any]:
    return [
        pytest.param(script, variant, marks=pytest.mark.slow)
        if (script, variant) in SLOW_RUNS
        else (script, variant)
        for script in _scripts()
        if script in TINY_FLAGS
        for variant in VARIANTS.get(script, {"default": []})
    ]


def _run(script: str, flags: list[str], cwd: Path,
         node: pytest.Item) -> subprocess.CompletedProcess[str]:  # fmt: skip
    return run_child(
        [sys.executable, str(EXAMPLES / script), *flags],
        node,
        capture_output=True,
        text=True,
        env=subprocess_env(),  # sharing the tests' persistent compilation cache
        cwd=cwd,
        timeout=TIMEOUT_S,
        check=False,
    )


def check_run_folders(out_dir: Path) -> list[str]:
    """Every run folder an example wrote under ``out_dir`` (a folder holding ``config.json``)
    passes ``bnn-ppl evaluate``; returns them, relative to ``out_dir``, sorted."""
    from bnn_ppl import cli

    folders = sorted(p.parent for p in out_dir.rglob("config.json"))
    for folder in folders:
        assert cli.main(["evaluate", str(folder)]) == 0, f"bnn-ppl evaluate {folder} failed"
    return [f.relative_to(out_dir).as_posix() for f in folders]


def _check_ok(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == 0, (
        f"exit code {proc.returncode}\n--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}"
    )


def test_every_example_is_registered() -> None:
    scripts = _scripts()
    assert scripts, f"no example scripts found in {EXAMPLES}"
    # the examples of the papers' claims register in their own modules
    import test_examples_claims_a
    import test_examples_claims_b
    import test_examples_sgmcmc

    registered = (
        set(TINY_FLAGS)
        | set(test_examples_claims_a.TINY_FLAGS)
        | set(test_examples_claims_b.TINY_FLAGS)
        | set(test_examples_sgmcmc.TINY_FLAGS)
    )
    missing = [s for s in scripts if s not in registered]
    assert not missing, f"examples without tiny flags in a TINY_FLAGS registry: {missing}"
    for registry in (TINY_FLAGS, VARIANTS, EXPECTED_ROWS, CHECKS):
        stale = sorted(set(registry) - set(scripts))
        assert not stale, f"registry entries without a script: {stale}"


@pytest.mark.parametrize(("script", "variant"), _runs())
def test_example_runs(script: str, variant: str, tmp_path: Path,
                      request: pytest.FixtureRequest) -> None:  # fmt: skip
    out_dir = tmp_path / "out"
    extra = VARIANTS.get(script, {"default": []})[variant]
    flags = [f.replace("{out}", str(out_dir)) for f in [*TINY_FLAGS[script], *extra]]
    proc = _run(script, flags, cwd=tmp_path, node=request.node)
    _check_ok(proc)
    for row in EXPECTED_ROWS.get(script, []):
        assert row in proc.stdout, f"{row!r} not in the output of {script}:\n{proc.stdout}"
    if script in CHECKS:
        CHECKS[script](proc.stdout, out_dir, variant)

"""The converged modes of ``cold_posterior.py`` and ``priors.py`` (``--converged``, issue 19).

Each setting is fitted by the reference recipe; the verdict is stated over the settings that
converged only, and the others are listed as not converged. The verdict functions are checked
here on constructed rows (fast: nothing is fitted), with an unconverged setting that would flip
the verdict if it were counted; the end-to-end runs (a tiny budget no setting can converge in,
~2 minutes of compilation per setting on 2 busy cores: one setting each) are slow.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_examples import _check_ok, _run, check_run_folders
from test_examples_claims_a import _load_example

from bnn_ppl import Posterior
from bnn_ppl.inference.run_folder import CONVERGENCE_HEADER, convergence_cells, convergence_summary

OK = {"converged": True}
NOT = {"converged": False, "stop_reason": "max_seconds"}


def test_cold_verdict_counts_converged_settings_only() -> None:
    verdicts = _load_example("cold_posterior.py").converged_verdicts
    rows = {
        ("both", 1.0): OK | {"nll": 0.20},
        ("likelihood", 0.3): OK | {"nll": 0.25},
        ("likelihood", 0.1): NOT | {"nll": 0.01},  # best, but not converged: not counted
        ("posterior", 0.3): NOT | {"nll": 0.01},
    }
    v = verdicts(rows)
    assert v == {"likelihood": True, "posterior": "no T < 1 converged", "overall": "supports"}
    rows[("likelihood", 0.3)] = OK | {"nll": 0.15}  # a converged T < 1 that is better
    assert verdicts(rows)["likelihood"] is False
    assert verdicts(rows)["overall"] == "does not support"
    rows[("both", 1.0)] = NOT | {"nll": 0.20}  # without T = 1 there is nothing to compare
    v = verdicts(rows)
    assert v["likelihood"] == v["posterior"] == "T = 1 did not converge"
    assert v["overall"] == "no verdict"


def test_priors_verdict_counts_converged_priors_only() -> None:
    summary = _load_example("priors.py").converged_summary
    rows = {
        ("normal", 0.3): OK | {"accuracy": 0.95, "nll": 0.20},
        ("laplace", 0.3): OK | {"accuracy": 0.94, "nll": 0.21},
        ("logistic", 0.3): NOT | {"accuracy": 0.10, "nll": 0.01},  # would flip both parts
        ("normal", 1.0): OK | {"accuracy": 0.90, "nll": 0.30},
    }
    s = summary(rows, 0.3, 0.05, 0.02)
    assert s["family_effect_accuracy"] == pytest.approx(0.01)
    assert s["scale_effect_nll"] == pytest.approx(0.10)
    assert s["best_nll"] == s["normal_best_nll"] == 0.20
    assert s["verdict"] == "supported"
    rows[("laplace", 0.3)] = OK | {"accuracy": 0.90, "nll": 0.10}  # converged and far better
    s = summary(rows, 0.3, 0.05, 0.02)
    assert (s["family_robust"], s["normal_close"], s["verdict"]) == (False, False, "NOT supported")
    rows = {k: r | NOT for k, r in rows.items() if k[0] == "normal"} | {
        ("laplace", 0.3): OK | {"accuracy": 0.9, "nll": 0.1}
    }
    s = summary(rows, 0.3, 0.05, 0.02)  # no Normal prior converged: nothing to judge
    assert s["family_robust"] is None and s["normal_close"] is None
    assert s["verdict"] == "no verdict"


def test_convergence_summary_only_for_reference_runs() -> None:
    hmc = Posterior("hmc", {"w": np.zeros((2, 4))})
    assert convergence_summary(hmc) is None
    record = {"converged": False, "stop_reason": "max_seconds", "rhat_max": None, "draws": 0}
    cut = Posterior("reference_hmc", {"w": np.zeros((2, 4))}, config={"convergence": record})
    row = convergence_cells(convergence_summary(cut))  # stopped in warmup: no figures
    assert len(row) == len(CONVERGENCE_HEADER)
    assert row.split() == ["no", "-", "-", "-", "0", "-", "-", "-"]


def _unconverged_run(script: str, flags: list[str], tmp_path: Path,
                     node: pytest.Item) -> tuple[str, dict, Path]:  # fmt: skip
    out = tmp_path / "out"
    proc = _run(script, [*flags, "--converged", "--max-train", "100", "--width", "4",
                         "--num-warmup", "20", "--segment-draws", "10", "--max-draws", "20",
                         "--out", str(out)], cwd=tmp_path, node=node)  # fmt: skip
    _check_ok(proc)
    assert CONVERGENCE_HEADER in proc.stdout
    return proc.stdout, json.loads((out / "summary.json").read_text()), out


def _check_rows(stdout: str, results: dict, out: Path) -> None:
    """Every setting is printed with its figures, recorded and listed as not converged."""
    unconverged = next(r for r in stdout.splitlines() if r.startswith("not converged"))
    for r in results.values():
        assert r["converged"] is False and r["stop_reason"] == "max_draws" and r["draws"] == 20
        assert r["rhat_max"] > 1.01 and r["gradients"] > 0 and 0 <= r["ece"] <= 1
        assert convergence_cells(r) in stdout
        assert "(max_draws)" in unconverged
    for folder in check_run_folders(out):  # and metrics.json holds what was printed
        record = json.loads((out / folder / "metrics.json").read_text())
        assert convergence_cells(record["summary"]["convergence"]) in stdout


@pytest.mark.slow
def test_cold_posterior_converged_mode_reports_and_excludes(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    stdout, payload, out = _unconverged_run(
        "cold_posterior.py", ["--temperatures", "1"], tmp_path, request.node
    )
    assert set(payload["results"]) == {"T=1"}  # one setting: each costs minutes of compilation
    _check_rows(stdout, payload["results"], out)
    assert payload["verdicts"] == {
        "likelihood": "T = 1 did not converge",
        "posterior": "T = 1 did not converge",
        "overall": "no verdict",
    }
    assert "no verdict on converged chains" in stdout and "supports" not in stdout


@pytest.mark.slow
def test_priors_converged_mode_reports_and_excludes(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    ckpt = tmp_path / "ckpt"
    stdout, payload, out = _unconverged_run(
        "priors.py",
        ["--families", "normal", "--scales", "0.3", "--checkpoint-root", str(ckpt)],
        tmp_path,
        request.node,
    )
    assert (ckpt / "normal" / "0.3" / "run.json").is_file()  # resumable: segments committed
    assert set(payload["results"]) == {"normal:0.3"}  # one prior: minutes of compilation each
    _check_rows(stdout, payload["results"], out)
    s = payload["summary"]
    assert s["family_robust"] is None and s["normal_close"] is None  # nothing converged
    assert s["verdict"] == "no verdict"
    assert stdout.rstrip().splitlines()[-2].endswith(": no verdict")

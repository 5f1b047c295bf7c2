"""The paper-claim examples ``priors.py``, ``agreement.py``, ``covariate_shift.py`` and
``against_reference.py`` run end to end with tiny settings, print their table and claim lines,
and write their PNG or summary; ``against_reference.py``'s loader and gradient accounting are
also checked without fitting anything.

Same conventions and runner as ``tests/test_examples.py`` (``{out}`` stands for a folder in a
fresh temporary working directory); this module keeps its own registries, which
``test_examples.py`` can merge for its registration check.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from test_examples import EXAMPLES, _check_ok, _run, check_run_folders
from test_examples_claims_a import _load_example

from bnn_ppl import runs
from bnn_ppl.io import load_npz, read_json, save_npz, write_json
from bnn_ppl.validation import InputValueError

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

_TINY_FITS = [
    "--width", "8", "--num-warmup", "10", "--num-samples", "10", "--max-train", "200",
    "--map-steps", "50", "--num-steps", "50", "--svi-samples", "10", "--num-members", "2",
]  # fmt: skip

# script name -> flags that make it finish in well under a minute of compute
TINY_FLAGS: dict[str, list[str]] = {
    "priors.py": [
        "--width", "8", "--num-warmup", "10", "--num-samples", "10", "--max-train", "200",
        "--families", "normal", "laplace", "--scales", "0.1", "0.3", "--out", "{out}",
    ],
    "agreement.py": [
        *_TINY_FITS, "--cycle-length", "20", "--burnin-cycles", "1", "--cycles", "2",
        "--out", "{out}",
    ],
    "covariate_shift.py": [
        *_TINY_FITS, "--kinds", "gaussian_noise", "contrast", "--cifar10", "auto",
        "--out", "{out}",
    ],
    "against_reference.py": [
        "--samples", "2", "--gradients", "60", "--hmc-warmup", "2", "--map-steps", "20",
        "--svi-steps", "20", "--svi-samples", "4", "--sg-map-steps", "5", "--cycle-length", "10",
        "--burnin-cycles", "1", "--seeds", "2", "--out", "{out}",
    ],
    # two synthetic splits' summaries (PREPARE writes them), one as a folder, one as a file
    "against_reference_splits.py": [
        "{out}/split0", "{out}/split1/summary.json", "--json", "{out}/pooled.json",
    ],
    # four synthetic records of one split (PREPARE writes them)
    "reference_models.py": [
        "--references", "{out}", "--baseline", "base.json", "--pattern", "m_*.json",
    ],
}  # fmt: skip

# script name -> strings its stdout must contain
EXPECTED_ROWS: dict[str, list[str]] = {
    "priors.py": ["normal:0.1", "laplace:0.3", "family effect", "scale effect", "claim"],
    "agreement.py": ["agree w/ HMC", "TV w/ HMC", "ensemble", "SVI", "SGHMC", "HMC chains",
                     "noise floor", "TV gap", "claim"],
    "covariate_shift.py": ["severity", "clean", "HMC acc", "ensemble NLL", "SVI acc",
                           "accuracy drop", "claim", "CIFAR-10-C part"],
    "against_reference.py": ["equal samples:", "equal gradients:", "agree w/ ref", "TV w/ ref",
                             "ECE", "gradients", "reference", "HMC chains", "noise floor"],
    "against_reference_splits.py": ["equal samples: 2 split(s) (0, 1), 2 seed(s) each",
                                    "test LL", "W2 w/ ref", "reference chains", "split 1"],
    "reference_models.py": ["uci/boston split 0: 4 reference posteriors, 40 test rows",
                            "mix LL", "E[z^2]", "sigma", "paired over the 40 test rows"],
}  # fmt: skip


def _claim_line(stdout: str) -> str:
    lines = [line for line in stdout.splitlines() if line.startswith("claim")]
    assert len(lines) == 1, stdout
    assert lines[0].endswith(("supported here", "NOT supported here")), lines[0]
    return lines[0]


def _check_files(out_dir: Path, png: str, stdout: str, summary: str = "metrics.json") -> dict:
    assert (out_dir / png).read_bytes()[:8] == PNG_MAGIC
    assert str(out_dir / png) in stdout
    return json.loads((out_dir / summary).read_text())


def _check_priors(stdout: str, out_dir: Path, variant: str) -> None:
    """One row per (family, scale) with accuracy and NLL in range; PNG and JSON written."""
    _claim_line(stdout)
    payload = _check_files(out_dir, "priors.png", stdout, "summary.json")
    assert {f: set(r) for f, r in payload["results"].items()} == {
        "normal": {"0.1", "0.3"},
        "laplace": {"0.1", "0.3"},
    }
    assert check_run_folders(out_dir) == ["laplace/0.1", "laplace/0.3", "normal/0.1", "normal/0.3"]
    for family, by_scale in payload["results"].items():
        for scale, r in by_scale.items():
            assert 0.1 < r["accuracy"] <= 1.0 and r["nll"] > 0.0
            # the summary holds what the run folder holds
            saved = runs.load_run(out_dir / family / scale).record["metrics"]
            assert r == {k: saved[k] for k in ("accuracy", "nll")}
    rows = [line.split() for line in stdout.splitlines()]
    assert sum(1 for r in rows if r and r[0] in ("normal:0.1", "laplace:0.3")) == 2


def _check_agreement(stdout: str, out_dir: Path, variant: str) -> None:
    """HMC is its own reference; every other row has agreement and TV in [0, 1]."""
    _claim_line(stdout)
    payload = _check_files(out_dir, "agreement.png", stdout, "summary.json")
    results = payload["results"]
    assert set(results) == {"HMC", "ensemble", "SVI", "SGHMC", "HMC chains"}
    assert check_run_folders(out_dir) == ["ensemble", "hmc", "sghmc", "svi"]
    for name in ("HMC", "ensemble", "SVI", "SGHMC"):  # the table holds what the folders hold
        saved = runs.load_run(out_dir / name.lower()).record["metrics"]
        assert {k: results[name][k] for k in saved} == pytest.approx(saved, rel=1e-6)
    assert results["HMC"]["agreement"] == 1.0 and results["HMC"]["tv"] == 0.0
    for r in results.values():
        assert 0.0 <= r["agreement"] <= 1.0 and 0.0 <= r["tv"] <= 1.0
    assert payload["supported"] == (
        results["ensemble"]["agreement"] > results["SVI"]["agreement"]
        and results["ensemble"]["tv"] < results["SVI"]["tv"]
    )


def _check_covariate_shift(stdout: str, out_dir: Path, variant: str) -> None:
    """Every method has a curve over severities 0..5; the CIFAR part runs or says it skipped."""
    _claim_line(stdout)
    payload = _check_files(out_dir, "covariate_shift.png", stdout, "summary.json")
    digits = payload["digits"]
    folders = check_run_folders(out_dir)
    assert [f for f in folders if f.startswith("digits/")] == [
        "digits/ensemble", "digits/hmc", "digits/svi"]  # fmt: skip
    for name in ("HMC", "ensemble", "SVI"):  # severity 0 is the folder's clean test set
        saved = runs.load_run(out_dir / "digits" / name.lower()).record["metrics"]
        clean = digits["results"][name]["clean/0"]
        assert clean == pytest.approx({k: saved[k] for k in clean}, rel=1e-6)
    assert set(digits["by_severity"]) == {"HMC", "ensemble", "SVI"}
    for curve in digits["by_severity"].values():
        assert sorted(curve) == ["0", "1", "2", "3", "4", "5"]
        for r in curve.values():
            assert 0.0 <= r["accuracy"] <= 1.0 and r["nll"] > 0.0
    # clean + 2 kinds x 5 severities
    assert all(len(r) == 11 for r in digits["results"].values())
    assert "skipped" in payload["cifar10"] or "by_severity" in payload["cifar10"]


ROWS = {"reference", "ensemble", "SVI", "SGHMC", "HMC", "HMC chains"}
# variant -> the stored reference it runs against (default: the script's, digits)
REFERENCES = {"default": "digits.json", "yacht": "uci_yacht_split0_noise0.05.json"}


def _check_against_reference(stdout: str, out_dir: Path, variant: str) -> None:
    """Both regimes: the reference's row is the stored file's (its metrics, closeness 0 to
    itself, its recorded gradients and kept draws); each method's gradients are what its
    settings cost; each claim line says what the numbers say."""
    payload = json.loads((out_dir / "summary.json").read_text())
    record = read_json(EXAMPLES / "references" / REFERENCES[variant])
    conv = record["recipe"]["convergence"]
    kept = (conv["draws"] - (conv.get("burn_in_draws") or 0)) * record["recipe"]["num_chains"]
    arrays = load_npz(EXAMPLES / "references" / record["predictions"]["file"])
    regression = payload["task"] == "regression"
    assert regression == ("mean" in arrays)
    claims = [line for line in stdout.splitlines() if line.startswith("claim")]
    # per regime: HMC vs the ensemble (and, for regression, the heteroscedastic one), ensemble
    # vs SVI; each judged on paired per-row differences over 2 seeds
    assert len(claims) == (6 if regression else 4), claims
    assert all(c.endswith(("supported", "contradicted", "undecided")) for c in claims), claims
    assert set(payload["regimes"]) == {"equal samples", "equal gradients"}
    for regime, body in payload["regimes"].items():
        assert len(body["results_per_seed"]) == 2
        rows, verdicts = body["results_per_seed"][0], body["verdicts_seed0"]
        for claim in body["claims"].values():  # supported only beyond 2 paired SE
            d, se = claim["difference"], claim["paired_se"]
            want = "supported" if d > 2 * se else "contradicted" if d < -2 * se else "undecided"
            assert se > 0 and claim["verdict"] == want
        # the reference's own chains give the noise floor when its .npz stores them
        per_chain = "chain_probs" in arrays or "chain_mean" in arrays
        het = {"het. ensemble"} if regression else set()
        assert set(rows) == ROWS | het | ({"reference chains"} if per_chain else set())
        assert all(r["seconds"] >= 0 for name, r in rows.items() if name in ROWS - {"HMC chains"}
                   and name != "reference")  # fmt: skip
        ref, ens, svi = rows["reference"], rows["ensemble"], rows["SVI"]
        assert ref["samples"] == kept and ref["gradients"] == conv["gradients"]
        if regression:  # the record's figures in the target's units, recomputed from the .npz
            want = {"test_ll": record["metrics"]["test_ll_original"],
                    "rmse": record["metrics"]["rmse_original"]}  # fmt: skip
            assert ref["w2"] == 0.0 and ref["rmse_vs_reference"] == 0.0
            assert all(r["w2"] >= 0.0 and r["test_ll"] == -r["nll"] for r in rows.values())
            assert verdicts["ensemble_closer_than_svi"] == (ens["w2"] < svi["w2"])
            assert verdicts["hmc_beats_ensemble"] == (
                ref["test_ll"] > ens["test_ll"] and ref["rmse"] <= ens["rmse"]
            )
        else:
            want = record["metrics"]
            assert ref["agreement"] == 1.0 and ref["tv"] == 0.0
            for r in rows.values():
                assert 0.0 <= r["agreement"] <= 1.0 and 0.0 <= r["tv"] <= 1.0
            assert verdicts["ensemble_closer_than_svi"] == (
                ens["agreement"] > svi["agreement"] and ens["tv"] < svi["tv"]
            )
            assert verdicts["hmc_beats_ensemble"] == (
                ref["nll"] < ens["nll"] and ref["accuracy"] >= ens["accuracy"]
            )
        for k, v in want.items():  # float32 sums over at most a few hundred rows
            assert ref[k] == pytest.approx(v, rel=1e-5), k
        assert ens["gradients"] == 20 * ens["samples"]
        assert rows["HMC"]["gradients"] > 0 and rows["SGHMC"]["gradients"] > 0
        if regime == "equal samples":
            assert {rows[m]["samples"] for m in ("ensemble", "SVI", "SGHMC", "HMC")} == {2}
        else:  # 60 gradients: 3 members, 20 MAP + 40 SVI steps
            assert ens["gradients"] == svi["gradients"] == 60


# Two synthetic splits of against_reference.py's summary.json, 2 seeds, 3 test rows each, the
# per-row log densities and distances chosen for a hand computation (_check_against_splits).
# Per row, averaged over the seeds: reference - ensemble (ll) split 0 [.1 .2 .3], split 1
# [.4 .5 .6]; reference - het. ensemble -[.5 .6 .7], -[.6 .7 .8]; SVI - ensemble (dist)
# [.1 0 -.1], [.3 .2 .1].
_LL_GAP = {"0": ([0.0, 0.2, 0.4], [0.2, 0.2, 0.2]), "1": ([0.4, 0.6, 0.8], [0.4, 0.4, 0.4])}
_HET_GAP = {"0": [-0.5, -0.6, -0.7], "1": [-0.6, -0.7, -0.8]}
_SVI_DIST = {"0": [1.1, 1.0, 0.9], "1": [1.3, 1.2, 1.1]}
_RMSE = {"0": (2.0, 2.2), "1": (2.4, 2.6)}  # the ensemble's, per seed
_SECONDS = {"0": (10.0, 20.0), "1": (30.0, 40.0)}  # every method's, per seed
_REF_COST = {"0": (1000.0, 50.0), "1": (3000.0, 150.0)}  # the reference's gradients, seconds


def _synthetic_summary(split: str) -> dict:
    ref_ll = np.full(3, -2.0)
    seeds, scores = [], []
    for seed in range(2):
        ll = {
            "reference": ref_ll,
            "ensemble": ref_ll - np.array(_LL_GAP[split][seed]),
            "het. ensemble": ref_ll - np.array(_HET_GAP[split]),
            "SVI": ref_ll - 0.5,
            "HMC": ref_ll - 0.1,  # the short run: HMC - ensemble = the reference's gap - 0.1
        }
        dist = {"reference": np.zeros(3), "ensemble": np.ones(3), "het. ensemble": np.ones(3),
                "SVI": np.array(_SVI_DIST[split]), "HMC": np.ones(3)}  # fmt: skip
        rows = {}
        for name in ll:
            rows[name] = {"nll": float(-ll[name].mean()), "test_ll": float(ll[name].mean()),
                          "rmse": _RMSE[split][seed] if name == "ensemble" else 2.0,
                          "rmse_vs_reference": 0.5, "w2": float(dist[name].mean()),
                          "gradients": 100.0, "samples": 4.0,
                          "seconds": _SECONDS[split][seed]}  # fmt: skip
        rows["reference"] |= {"gradients": _REF_COST[split][0], "seconds": _REF_COST[split][1]}
        rows["reference chains"] = {"nll": 2.0, "test_ll": -2.0, "rmse": 2.0,
                                    "rmse_vs_reference": 0.1, "w2": 0.05}  # fmt: skip
        seeds.append(rows)
        scores.append({n: {"ll": ll[n].tolist(), "dist": dist[n].tolist()} for n in ll})
    return {
        "args": {"samples": "4", "reference": f"refs/uci_toy_split{split}_learned.json",
                 "out": f"runs/split{split}", "seed": "0", "seeds": "2"},
        "task": "regression",
        "reference_cost": {"sampling_gradients": _REF_COST[split][0],
                           "wall_seconds": _REF_COST[split][1]},
        "regimes": {"equal samples": {"results_per_seed": seeds, "row_scores": scores}},
    }  # fmt: skip


def _write_against_splits(out_dir: Path) -> None:
    for split in ("0", "1"):
        (out_dir / f"split{split}").mkdir(parents=True)
        write_json(out_dir / f"split{split}" / "summary.json", _synthetic_summary(split))


def _check_against_splits(stdout: str, out_dir: Path, variant: str) -> None:
    """The pooled figures against a hand computation from the synthetic splits."""
    pooled = read_json(out_dir / "pooled.json")["regimes"]["equal samples"]
    assert pooled["splits"] == ["0", "1"] and pooled["seeds"] == [2]
    m = pooled["methods"]
    # test LL: each split's mean over seeds (-2.2, -2.5), then mean and SE over the splits
    assert m["ensemble"]["test_ll"] == pytest.approx([-2.35, 0.15, 2])
    assert m["ensemble"]["rmse"] == pytest.approx([2.3, 0.2, 2])  # splits 2.1 and 2.5
    assert m["SVI"]["w2"] == pytest.approx([1.1, 0.1, 2])  # splits 1.0 and 1.2
    assert m["reference"]["test_ll"] == pytest.approx([-2.0, 0.0, 2])
    # compute: mean over splits and seeds; the reference's from its runs' reference_cost
    assert m["ensemble"]["gradients"] == 100.0 and m["ensemble"]["seconds"] == 25.0
    assert m["reference"]["gradients"] == 2000.0 and m["reference"]["seconds"] == 100.0
    assert "gradients" not in m["reference chains"]
    c = pooled["claims"]
    ens, het, svi = (
        c["hmc_beats_ensemble"],
        c["hmc_beats_het_ensemble"],
        c["ensemble_closer_than_svi"],
    )
    # split means .2 and .5: SE |.5 - .2| / 2; rows .1 ... .6: SE sqrt(.035) / sqrt(6)
    assert ens["difference"] == pytest.approx(0.35) and ens["split_se"] == pytest.approx(0.15)
    assert ens["row_se"] == pytest.approx(np.sqrt(0.035 / 6)) and ens["rows"] == 6
    assert ens["per_split"] == pytest.approx({"0": 0.2, "1": 0.5})
    assert ens["decided_by"] == "splits" and ens["verdict"] == "supported"  # 2.3 SE
    assert het["difference"] == pytest.approx(-0.65) and het["split_se"] == pytest.approx(0.05)
    assert het["row_se"] == pytest.approx(np.sqrt(0.011 / 6)) and het["verdict"] == "contradicted"
    assert svi["difference"] == pytest.approx(0.1) and svi["split_se"] == pytest.approx(0.1)
    assert svi["row_se"] == pytest.approx(np.sqrt(0.02 / 6)) and svi["verdict"] == "undecided"
    assert svi["positive_splits"] == 1 and ens["positive_splits"] == 2
    hmc = c["short_hmc_beats_ensemble"]  # split means .1 and .4, rows 0 ... .5
    assert hmc["difference"] == pytest.approx(0.25) and hmc["split_se"] == pytest.approx(0.15)
    assert hmc["row_se"] == pytest.approx(ens["row_se"]) and hmc["verdict"] == "undecided"
    lines = [line for line in stdout.splitlines() if line.startswith(("claim", "comparison"))]
    assert [line.rsplit(": ", 1)[1].split()[0] for line in lines] == [
        "supported", "contradicted", "undecided", "undecided"]  # fmt: skip
    assert "+0.3500 ± 0.1500 SE over 2 splits" in lines[0]
    assert lines[3].startswith("comparison (equal samples): a short HMC run")


def _write_record(folder: Path, name: str, log_density, *, split=0, converged=True,
                  prior="Normal(0.3)", temperature=1.0) -> None:
    """A reference record of reference.py's form with the given per-row log densities."""
    n = len(log_density)
    y = np.linspace(-1, 1, n)
    arrays = {"y_test": y.astype(np.float32), "mean": (0.9 * y).astype(np.float32),
              "scale": np.full(n, 0.5, np.float32), "y_std": np.asarray(2.0),
              "log_density": np.asarray(log_density, np.float64),
              "draws_noise_scale": np.full((2, 3, 1), 0.4, np.float16)}  # fmt: skip
    sha = save_npz(folder / f"{name}.npz", arrays)
    write_json(folder / f"{name}.json", {
        "data": {"name": "uci/boston", "split": split},
        "model": {"prior": prior, "temperature": temperature, "temper": "likelihood"},
        "predictions": {"file": f"{name}.npz", "sha256": sha},
        "converged": converged, "wall_seconds": 10.0,
        "recipe": {"init_steps": 100,
                   "convergence": {"draws": 500, "gradients": 1000, "seconds": 12.0}}})  # fmt: skip


# per-row log densities of reference_models.py's synthetic records (_check_reference_models)
_ROWS = np.random.default_rng(0).normal(-1.0, 0.5, 40)
_BETTER = _ROWS + 0.3 + np.random.default_rng(1).normal(0, 0.05, 40)  # better on every row
_NOISY = _ROWS + np.random.default_rng(2).normal(0, 1.0, 40)  # no difference beyond its noise


def _write_reference_models(out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    _write_record(out_dir, "base", _ROWS)
    _write_record(out_dir, "m_cold", _BETTER, temperature=0.3)
    _write_record(out_dir, "m_lap", _NOISY, prior="laplace:0.2")
    _write_record(out_dir, "m_unconv", _BETTER, prior="normal:0.1", converged=False)


def _check_reference_models(stdout: str, out_dir: Path, variant: str) -> None:
    """The paired per-row difference and each verdict against a hand computation."""
    d = _BETTER - _ROWS
    assert f"mixture LL {d.mean():+.3f} ± {d.std(ddof=1) / np.sqrt(40):.3f} (better)" in stdout
    assert f"{_ROWS.mean() - np.log(2.0):>7.3f}" in stdout  # target units: minus log y_std
    line = next(x for x in stdout.splitlines() if x.startswith("laplace:0.2") and "±" in x)
    assert "(undecided)" in line.split(";")[0]
    assert "normal:0.1, T=1" in stdout and "not converged: no verdict" in stdout
    assert "Normal(0.3), T=0.3 (likelihood)" in stdout


def test_reference_models_pools_over_splits(tmp_path, capsys):
    """--splits: each split's difference, then mean ± SE over the splits' means beside the
    per-row SE over all rows; the larger decides."""
    gaps = {0: 0.2, 1: 0.4, 2: 0.3}
    rng = np.random.default_rng(3)
    rows = {}
    for k, gap in gaps.items():
        base = rng.normal(-1.0, 0.5, 40)
        rows[k] = gap + rng.normal(0, 0.01, 40)
        _write_record(tmp_path, f"base{k}", base, split=k)
        _write_record(tmp_path, f"m{k}_lap", base + rows[k], split=k, prior="laplace:0.2")
    mod = _load_example("reference_models.py")
    flags = ["--references", str(tmp_path), "--baseline", "base{k}.json", "--pattern"]
    mod.main(mod.parse_args([*flags, "m{k}_*.json", "--splits", "0", "1", "2"]))
    out = capsys.readouterr().out
    means = np.array([rows[k].mean() for k in gaps])
    split_se = means.std(ddof=1) / np.sqrt(3)
    allrows = np.concatenate(list(rows.values()))
    row_se = allrows.std(ddof=1) / np.sqrt(allrows.size)
    line = next(x for x in out.splitlines() if x.startswith("laplace:0.2") and "split(s)" in x)
    assert f"{means.mean():+.3f} (SE over 3 split(s) {split_se:.3f}, per row {row_se:.3f}" in line
    assert "over 120 rows; better on 3 of 3 splits): better" in line  # 0.3 / 0.058 > 2
    with pytest.raises(InputValueError, match="needs '{k}'"):
        mod.main(mod.parse_args(["--references", str(tmp_path), "--splits", "0",
                                 "--baseline", "base0.json", "--pattern", "m0_*.json"]))


def test_reference_models_refuses_another_split_and_no_match(tmp_path):
    _write_record(tmp_path, "base", np.zeros(5))
    _write_record(tmp_path, "m_other", np.zeros(5), split=1)
    mod = _load_example("reference_models.py")
    flags = ["--references", str(tmp_path), "--baseline", "base.json", "--pattern"]
    with pytest.raises(InputValueError, match="one split's test rows"):
        mod.main(mod.parse_args([*flags, "m_*.json"]))
    with pytest.raises(InputValueError, match="no record besides"):
        mod.main(mod.parse_args([*flags, "zz*.json"]))


# script name -> writes the inputs of a script that reads files (before its run)
PREPARE: dict[str, Callable[[Path], None]] = {
    "against_reference_splits.py": _write_against_splits,
    "reference_models.py": _write_reference_models,
}

# script name -> check(stdout, out_dir, variant) after a successful run
CHECKS: dict[str, Callable[[str, Path, str], None]] = {
    "priors.py": _check_priors,
    "agreement.py": _check_agreement,
    "covariate_shift.py": _check_covariate_shift,
    "against_reference.py": _check_against_reference,
    "against_reference_splits.py": _check_against_splits,
    "reference_models.py": _check_reference_models,
}


def test_registered_scripts_exist() -> None:
    for registry in (TINY_FLAGS, EXPECTED_ROWS, CHECKS, PREPARE):
        missing = sorted(s for s in registry if not (EXAMPLES / s).is_file())
        assert not missing, f"registered but not in {EXAMPLES}: {missing}"


# each run is 60-90 s of compilation on a 2-core CI machine: these with -m slow only, so that
# the default suite stays within its budget (their checks are the same code paths)
# (against_reference.py: eight fits of the reference's MLP(50) on all digits rows, ~170 s of
# CPU at these flags, most of it compilation)
SLOW = {"agreement.py", "covariate_shift.py", "priors.py", "against_reference.py"}


@pytest.mark.parametrize(
    "script",
    [pytest.param(s, marks=pytest.mark.slow) if s in SLOW else s for s in sorted(TINY_FLAGS)],
)
def test_example_runs(script: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    out_dir = tmp_path / "out"
    flags = [f.replace("{out}", str(out_dir)) for f in TINY_FLAGS[script]]
    if script in PREPARE:
        PREPARE[script](out_dir)
    proc = _run(script, flags, cwd=tmp_path, node=request.node)
    _check_ok(proc)
    for row in EXPECTED_ROWS[script]:
        assert row in proc.stdout, f"{row!r} not in the output of {script}:\n{proc.stdout}"
    CHECKS[script](proc.stdout, out_dir, "default")


def _needs_uci(monkeypatch: pytest.MonkeyPatch) -> None:
    from conftest import UCI_DIR

    if not (UCI_DIR / "yacht").is_dir():
        pytest.skip(f"no UCI data at {UCI_DIR}")
    monkeypatch.setenv("BNN_PPL_DATA", str(UCI_DIR))


@pytest.mark.slow  # eight tiny fits of MLP(50) on yacht: ~150 s on 2 shared cores, compiling
def test_against_reference_runs_on_the_yacht_reference(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """The regression reference: test LL, RMSE and W2 columns, the record's figures in the
    reference's row, its chains' noise floor, the claims judged on LL/RMSE and W2."""
    _needs_uci(monkeypatch)
    out_dir = tmp_path / "out"
    flags = [f.replace("{out}", str(out_dir)) for f in TINY_FLAGS["against_reference.py"]]
    ref = EXAMPLES / "references" / REFERENCES["yacht"]
    proc = _run("against_reference.py", [*flags, "--reference", str(ref)], cwd=tmp_path,
                node=request.node)
    _check_ok(proc)
    for row in ("test LL", "RMSE", "W2 w/ ref", "reference chains", "W2 gap", "noise sd 0.05"):
        assert row in proc.stdout, f"{row!r} not in the output:\n{proc.stdout}"
    _check_against_reference(proc.stdout, out_dir, "yacht")


def test_against_reference_loads_the_checked_reference_and_refuses_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stored files load (checksum checked) with the data and model their records name; a
    corrupted copy, a model the script cannot build and a record of other rows are refused,
    naming the file."""
    script = _load_example("against_reference.py")
    record, arrays, data, task = script.load_reference(script.REFERENCE)
    probs = arrays["probs"]
    assert task == "classification" and data.name == "digits"
    assert probs.shape == (len(data.x_test), 10) and record["converged"] is True
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)
    assert script.reference_model(record, script.REFERENCE) == (50, 0.3, None)
    npz = (script.REFERENCE.parent / "digits.npz").read_bytes()
    (tmp_path / "digits.npz").write_bytes(npz[:-1] + bytes([npz[-1] ^ 1]))
    write_json(tmp_path / "digits.json", record)
    with pytest.raises(ValueError, match="checksum mismatch"):
        script.load_reference(tmp_path / "digits.json")
    (tmp_path / "digits.npz").write_bytes(npz)
    write_json(tmp_path / "digits.json", record | {"data": record["data"] | {"test_rows": 359}})
    with pytest.raises(ValueError, match="another model or data"):
        script.load_reference(tmp_path / "digits.json")
    deeper = record | {"model": record["model"] | {"network": "MLP(hidden=(20, 20))"}}
    with pytest.raises(ValueError, match="cannot build"):
        script.reference_model(deeper, tmp_path / "digits.json")
    _needs_uci(monkeypatch)  # the regression reference: its task, model and target scale
    path = script.REFERENCE.parent / REFERENCES["yacht"]
    record, arrays, data, task = script.load_reference(path)
    assert task == "regression" and data.name == "uci/yacht" and len(data.x_train) == 277
    assert script.reference_model(record, path) == (50, 1.0, 0.05)
    assert float(arrays["y_std"]) == pytest.approx(float(data.y_std))


def test_against_reference_spends_about_equal_gradients() -> None:
    """At equal gradients the ensemble and SVI spend exactly the budget and SGHMC within one
    cycle of it (its MAP and burn-in counted); at equal samples each draws ``--samples``."""
    script = _load_example("against_reference.py")
    args = script.parse_args(
        ["--gradients", "50000", "--map-steps", "5000", "--samples", "4", "--hmc-warmup", "100"]
    )
    assert args.svi_steps == "auto"  # the reference's task decides
    args = script.task_defaults(args, "classification")
    assert args.svi_steps == 3000 and args.gradients == 50_000
    assert script.task_defaults(script.parse_args([]), "regression").gradients == 500_000
    regimes = script.configs(args, 1437, per_draw=50.0)
    eq = regimes["equal gradients"]
    count = {m: script.gradients(None, c, 1437, "") for m, c in eq.items() if m != "HMC"}
    assert count["ensemble"] == count["SVI"] == 50_000 and eq["ensemble"].num_members == 10
    per_cycle = 2 * 1000 * 128 / 1437
    assert abs(count["SGHMC"] - 50_000) <= per_cycle / 2
    assert eq["HMC"].num_samples == 50_000 / (2 * 50.0) - 100  # after 100 warmup
    assert eq["HMC"].max_num_steps == 1024  # the reference's cap, passed on
    assert script.configs(args, 277, 256.0, max_num_steps=256)["equal gradients"][
        "HMC"].max_num_steps == 256  # fmt: skip
    same = regimes["equal samples"]
    assert same["ensemble"].num_members == same["SVI"].num_samples == 4
    assert same["SGHMC"].num_samples * 2 == same["HMC"].num_samples * 2 == 4


def test_against_reference_splits_refuses_what_does_not_pool(tmp_path: Path) -> None:
    """A missing file, one split's regime twice and runs of other settings are refused naming
    the file; one split alone is judged on its per-row paired SE."""
    script = _load_example("against_reference_splits.py")
    _write_against_splits(tmp_path)
    one, two = str(tmp_path / "split0"), str(tmp_path / "split1")
    with pytest.raises(ValueError, match="no such summary.json"):
        script.load_summaries([one, str(tmp_path / "split2")])
    with pytest.raises(ValueError, match="split 0, 'equal samples' is also in"):
        script.load_summaries([one, two, one])
    other = _synthetic_summary("1")
    other["args"]["samples"] = "10"
    write_json(tmp_path / "split1" / "summary.json", other)
    with pytest.raises(ValueError, match=r"settings that differ: \['samples'\]"):
        script.load_summaries([one, two])
    task, regimes = script.load_summaries([one])
    claim = script.pool_regime(regimes["equal samples"], task)["claims"]["hmc_beats_ensemble"]
    assert np.isnan(claim["split_se"]) and claim["decided_by"] == "rows"
    assert claim["difference"] == pytest.approx(0.2)  # rows .1 .2 .3: SE .1 / sqrt(3)
    assert claim["row_se"] == pytest.approx(0.1 / np.sqrt(3)) and claim["verdict"] == "supported"


def _reference_py_model(monkeypatch, argv: list[str]):
    """``examples/reference.py`` run with ``argv`` up to its ``reference_hmc`` call: the
    module, its parsed arguments and the model it would sample."""
    mod = _load_example("reference.py")
    seen = {}

    class Stop(Exception):
        pass

    def capture(model, *args, **kwargs):
        seen["model"] = model
        raise Stop

    monkeypatch.setattr(mod, "reference_hmc", capture)
    args = mod.parse_args(argv)
    with pytest.raises(Stop):
        mod.main(args)
    return mod, args, seen["model"]


def test_reference_py_builds_the_prior_and_temperature_it_is_given(monkeypatch):
    """``--prior`` and ``--temperature``/``--temper`` reach the model reference_hmc samples;
    ``--prior`` with ``--prior-scale`` is refused."""
    mod, _, model = _reference_py_model(
        monkeypatch, ["--dataset", "gap1d", "--width", "4", "--prior", "laplace:0.2",
                      "--temperature", "0.5", "--temper", "posterior"])  # fmt: skip
    assert type(model.prior).__name__ == "Laplace" and model.prior.scale == 0.2
    assert model.temperature == 0.5 and model.temper == "posterior"
    with pytest.raises(SystemExit):
        mod.parse_args(["--prior", "laplace:0.2", "--prior-scale", "0.3"])


@pytest.mark.parametrize(
    ("flag", "family", "params", "record"),
    [
        ("2", "HalfNormal", {"scale": 2.0}, "HalfNormal(2)"),
        ("lognormal:-4,0.5", "LogNormal", {"loc": -4.0, "scale": 0.5},
         "LogNormal(loc=-4, scale=0.5)"),
        ("inversegamma:3,0.05", "InverseGamma", {"concentration": 3.0, "rate": 0.05},
         "InverseGamma(concentration=3, rate=0.05)"),
    ],
)  # fmt: skip
def test_reference_py_learns_the_noise_under_the_prior_it_is_given(
    monkeypatch, flag, family, params, record
):
    """``--noise-prior``: a HalfNormal's scale or any prior ``bnn-ppl run --noise`` takes; the
    model reference_hmc samples has it, and the record names it. A bad one is refused."""
    mod, args, model = _reference_py_model(
        monkeypatch, ["--dataset", "gap1d", "--width", "4", "--noise-prior", flag]
    )
    prior = model.likelihood.scale
    assert type(prior).__name__ == family
    assert {k: float(getattr(prior, k)) for k in params} == pytest.approx(params)
    assert mod.noise_record(args.noise_prior) == record
    for bad in ("gamma:1", "lognormal:-4", "inversegamma:3,0", "heldout", "0"):
        with pytest.raises(SystemExit):
            mod.parse_args(["--noise-prior", bad])

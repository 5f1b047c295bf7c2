"""The ``bnn-ppl`` command line, end to end at tiny size.

The CLI runs in-process through :func:`bnn_ppl.cli.main` (so compiled programs are shared between
tests); one test runs the installed console script. Every bad input gets a test asserting its
message and the exit status 2 without a traceback; bad ``run`` options are also refused before
anything is written or compiled.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import count_compiles, subprocess_env

from bnn_ppl import cli, config, runs
from bnn_ppl.inference import SGMCMCAccuracyWarning
from bnn_ppl.io import load_npz, read_json

# one pytest-xdist worker runs this module: its run-folder fixtures (hmc_run above all) are built
# once, not once per worker, and its tests reuse that worker's compiled programs. The fixtures
# are session-scoped: xdist interleaves other modules' tests on that worker, and a module-scoped
# fixture is torn down at each switch and built again (hmc_run and svi_run were built twice)
pytestmark = pytest.mark.xdist_group("test_cli")

PNG = b"\x89PNG\r\n\x1a\n"
TINY = ["--model", "mlp", "--width", "8", "--dataset", "digits", "--max-train", "200"]
# 50 warmup iterations, not fewer: NumPyro's schedule leaves step-size adaptation the last 10 %
# of warmup (after the mass matrix), and with 10 or 20 one chain ended at acceptance 0.38-0.47,
# repeating over half its draws (a StuckChainWarning); with 50, 0.8-0.94 on seeds 0-1
HMC = ["hmc", *TINY, "--num-warmup", "50", "--num-samples", "20"]
HMC_CHECKPOINTED = [*HMC, "--num-chains", "2", "--checkpoint-every", "10"]
# the ensemble_run fixture's run (a test repeating it reads its programs from the compilation cache)
ENSEMBLE = ["ensemble", *TINY, "--num-members", "3", "--num-steps", "50"]


def bnn_ppl(*args: str) -> tuple[int, str, str]:
    """Run ``bnn-ppl args`` in-process; return (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(list(args))
    return rc, out.getvalue(), err.getvalue()


def ok(*args: str) -> str:
    rc, out, err = bnn_ppl(*args)
    assert rc == 0, f"bnn-ppl {' '.join(args)} failed ({rc}):\n{out}\n{err}"
    return out


@pytest.fixture(scope="session")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cli")


@pytest.fixture(scope="session")
def hmc_run(folder: Path) -> Path:
    """HMC, 2 chains, checkpointed in two segments of 10 draws (fit with
    checkpoint_dir=<out>/checkpoints); also the uninterrupted run of the SIGKILL test."""
    out = folder / "hmc"
    ok("run", *HMC_CHECKPOINTED, "--out", str(out), "--quiet")
    return out


@pytest.fixture(scope="session")
def ensemble_run(folder: Path) -> Path:
    out = folder / "ensemble"
    ok("run", *ENSEMBLE, "--out", str(out), "--quiet")
    return out


@pytest.fixture(scope="session")
def svi_run(folder: Path) -> Path:
    out = folder / "svi"
    ok("run", "svi", *TINY, "--num-steps", "50", "--map-steps", "20",
       "--num-samples", "10", "--out", str(out), "--quiet")  # fmt: skip
    return out


@pytest.fixture(scope="session")
def diabetes_run(folder: Path) -> Path:
    """A regression run (another data set)."""
    out = folder / "diabetes"
    ok("run", "ensemble", "--model", "mlp", "--width", "8", "--dataset", "diabetes",
       "--num-members", "2", "--num-steps", "50", "--out", str(out), "--quiet")  # fmt: skip
    return out


# ------------------------------------------------------------------------------ run/evaluate
def test_run_hmc_writes_the_run_folder(hmc_run: Path) -> None:
    config = read_json(hmc_run / runs.CONFIG)
    assert config["arguments"]["prior"] == "normal:0.3"
    assert config["arguments"]["num_chains"] == 2
    assert "steps" not in config["arguments"]  # only the method's own options
    assert config["data"]["num_train"] == 200 and config["data"]["num_test"] == 360
    assert {"bnn_ppl", "jax", "numpyro"} <= set(config["versions"])

    record = read_json(hmc_run / runs.METRICS)
    assert set(record["metrics"]) == {"accuracy", "nll", "ece", "brier"}
    assert 0.5 < record["metrics"]["accuracy"] <= 1.0
    assert record["layout"] == ["chain", "draw"] and record["num_draws"] == 40
    assert len(record["summary"]["chains"]) == 2

    files = record["files"]
    samples = load_npz(hmc_run / runs.SAMPLES, sha256=files[runs.SAMPLES])
    assert samples["Dense_0.kernel"].shape == (2, 20, 64, 8)
    pred = load_npz(hmc_run / runs.PREDICTIONS, sha256=files[runs.PREDICTIONS])
    assert pred["probs"].shape == (2, 20, 360, 10)
    assert pred["targets"].shape == (360,)
    assert (hmc_run / runs.CHECKPOINTS / "run.json").exists()  # the checkpoint store's


def test_evaluate_writes_metrics_diagnostics_and_plots(hmc_run: Path) -> None:
    out = ok("evaluate", str(hmc_run))
    assert "accuracy" in out and "chain 1 BMA" in out
    assert "weight space" in out and "function space" in out
    for name in ("reliability.png", "rhat.png"):
        assert (hmc_run / name).read_bytes()[:8] == PNG, name
    evaluation = read_json(hmc_run / runs.EVALUATION)
    bma = evaluation["metrics"]["BMA (40 draws)"]
    assert bma == pytest.approx(read_json(hmc_run / runs.METRICS)["metrics"])
    ws = evaluation["diagnostics"]["weight_space"]
    assert [g["name"] for g in ws["groups"]] == ["Dense_0", "Dense_1"]
    assert 0.0 <= ws["fraction_above"]["1.1"] <= 1.0
    assert evaluation["plots"] == ["reliability.png", "rhat.png"]
    # the values failing the ordinary rule (R-hat <= 1.01, bulk ESS >= 100 per chain: 200 for
    # 2 chains), worst first, with the odd chain: the library's laggards of the saved per-draw
    # probabilities
    from bnn_ppl.cli.evaluate import judge, rule_for
    from bnn_ppl.diagnostics.slow_values import describe_laggards, laggards

    probs = load_npz(hmc_run / runs.PREDICTIONS)["probs"]
    want = laggards(probs, min_ess=200)
    text = describe_laggards(want, probs[0, 0].size, min_ess=200)
    assert f"slow values: {text}" in out
    # the verdict names the rule and, not met by 2 x 20 draws, the draws that would meet it
    rule = rule_for(runs.load_run(str(hmc_run)))
    assert (rule.name, rule.max_rhat, rule.min_ess) == ("ordinary-run", 1.01, 200.0)
    verdict = judge(probs, rule)
    assert verdict["text"] in out and verdict == evaluation["diagnostics"]["verdict"]
    assert "ordinary-run rule: R-hat <= 1.01 and bulk ESS >= 200" in verdict["text"]
    assert not verdict["met"] and verdict["draws_needed_per_chain"] > 20
    assert f"run about {verdict['draws_needed_per_chain']:,} draws per chain" in out
    listed = evaluation["diagnostics"]["laggards"]
    assert [tuple(g["index"]) for g in listed] == [g.index for g in want[:20]]


def test_evaluate_draws_its_reliability_diagram_from_the_library_bma(
    ensemble_run: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The reliability diagram is of the BMA (bp.bma: the mean of the members' probabilities)."""
    import bnn_ppl as bp

    # a copy: evaluate writes evaluation.json, and other tests check the shared folder has none
    ensemble_run = Path(shutil.copytree(ensemble_run, tmp_path / "ensemble"))
    seen = []
    curve = bp.metrics.reliability_curve
    monkeypatch.setattr(
        bp.metrics,
        "reliability_curve",
        lambda probs, *a, **k: seen.append(probs) or curve(probs, *a, **k),
    )
    ok("evaluate", str(ensemble_run), "--quiet")
    probs = load_npz(ensemble_run / runs.PREDICTIONS)["probs"]  # (members, n, K)
    (avg,) = seen
    np.testing.assert_allclose(avg, probs.mean(axis=0), rtol=1e-6)


def test_hmc_without_checkpoints_draws_the_same_chain(hmc_run: Path, folder: Path) -> None:
    out = folder / "hmc_plain"
    ok("run", *HMC, "--num-chains", "2", "--out", str(out), "--quiet")
    a, b = (load_npz(f / runs.SAMPLES) for f in (hmc_run, out))
    # the same chain up to the float32 rounding of two differently compiled programs (their
    # gradient sums run in another order): a few eps of the draws' magnitude, not a fixed atol
    # (measured: at most 3.1 eps; the differences do not grow along the chain)
    eps = np.finfo(np.float32).eps
    for site in a:
        tol = 16 * eps * np.abs(a[site]).max()
        np.testing.assert_allclose(a[site], b[site], rtol=0, atol=tol, err_msg=site)


@pytest.mark.parametrize("run", ["hmc_run", "svi_run", "ensemble_run", "diabetes_run"])
def test_the_run_folder_holds_an_arviz_posterior(run: str, request: pytest.FixtureRequest) -> None:
    """posterior.nc is the Posterior of the run: its draws are samples.npz (with the chain
    axis), its predictions predictions.npz, and ArviZ reads it (summary, log_likelihood)."""
    import arviz as az

    from bnn_ppl.posterior import Posterior

    out: Path = request.getfixturevalue(run)
    post = Posterior.load(out / runs.POSTERIOR)
    samples, preds = load_npz(out / runs.SAMPLES), load_npz(out / runs.PREDICTIONS)
    chains = post.method in cli.CHAIN_METHODS
    assert set(post.samples) == set(samples)
    for site, a in post.samples.items():
        np.testing.assert_array_equal(a if chains else a.reshape(-1, *a.shape[2:]), samples[site])
    for name, a in post.predictions.items():
        np.testing.assert_array_equal(a if chains else a.reshape(-1, *a.shape[2:]), preds[name])
    settings = cli.RunSettings.from_arguments(read_json(out / runs.CONFIG)["arguments"])
    expected = settings.config.to_dict()
    assert {k: post.config.get(k) for k in expected} == expected  # plus what the method chose
    tree = post.to_inference_data()
    assert az.summary(tree, kind="stats").shape[0] > 0
    assert tree["log_likelihood"]["y"].shape[-1] == len(post.observed["y"])


def test_the_cli_runs_what_fit_runs(svi_run: Path) -> None:
    """bnn-ppl run = bnn_ppl.fit with the run's config: the same draws, bit for bit."""
    import jax

    from bnn_ppl.inference import fit

    s = cli.RunSettings.from_arguments(read_json(svi_run / runs.CONFIG)["arguments"])
    o = s.options
    data = cli.inputs_for(o.model, cli.load_data(o.dataset, max_train=o.max_train))
    post = fit(cli.build_model(o, data), data, s.config, jax.random.key(o.seed))
    stored = load_npz(svi_run / runs.SAMPLES)
    for site, a in post.flat_samples().items():
        np.testing.assert_array_equal(a, stored[site])


def test_rerun_with_the_same_options_resumes(hmc_run: Path, folder: Path) -> None:
    copy = folder / "hmc_again"
    shutil.copytree(hmc_run, copy)
    rc, out, err = bnn_ppl("run", *HMC_CHECKPOINTED, "--out", str(copy))
    assert rc == 0, err
    assert "reusing the run folder" in out and "resumed after checkpoint segment 2" in out
    assert "hmc: 2 chains x 20 draws in" in out and "test, BMA of 40 draws: accuracy" in out
    assert (copy / runs.SAMPLES).read_bytes() == (hmc_run / runs.SAMPLES).read_bytes()


def test_a_resume_may_respace_progress_but_not_change_options(hmc_run: Path, folder: Path) -> None:
    """--progress-every is not in config.json: rerunning the finished run with it reuses the
    folder, reads the same draws back and rewrites checkpoints/progress.jsonl at the new
    spacing (one line per segment of 10 draws before)."""
    copy = folder / "hmc_progress"
    shutil.copytree(hmc_run, copy)
    log = copy / runs.CHECKPOINTS / runs.PROGRESS
    assert [p["draws"] for p in map(json.loads, log.read_text().splitlines())] == [0, 10, 20]
    out = ok("run", *HMC_CHECKPOINTED, "--progress-every", "5", "--out", str(copy))
    assert "reusing the run folder" in out and "resumed after checkpoint segment 2" in out
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [p["draws"] for p in lines] == [0, 5, 10, 15, 20]
    assert lines[-1]["test_accuracy"] > 0.5
    assert "progress_every" not in read_json(copy / runs.CONFIG)["arguments"]
    assert (copy / runs.SAMPLES).read_bytes() == (hmc_run / runs.SAMPLES).read_bytes()


def test_sgmcmc_with_one_chain_skips_rhat_and_says_why(folder: Path) -> None:
    out_dir = folder / "sgmcmc"
    rc, out, err = bnn_ppl(
        "run", "sghmc", *TINY, "--num-chains", "1",
        "--cycle-length", "10", "--num-warmup", "1", "--num-samples", "3", "--batch-size",
        "50", "--out", str(out_dir), "--quiet",
    )  # fmt: skip
    assert rc == 0, err
    assert out == "" and err == ""  # --quiet: nothing at all on success
    assert read_json(out_dir / runs.METRICS)["num_draws"] == 3
    assert load_npz(out_dir / runs.SAMPLES)["Dense_0.bias"].shape == (1, 3, 8)
    out = ok("evaluate", str(out_dir), "--quiet")
    assert "R-hat skipped: 1 chain" in out
    assert not (out_dir / "rhat.png").exists() and (out_dir / "reliability.png").exists()


def test_compare_prints_agreement_and_tv(
    hmc_run: Path, ensemble_run: Path, svi_run: Path, folder: Path
) -> None:
    target = folder / "compare.json"
    out = ok("compare", str(hmc_run), str(ensemble_run), str(svi_run), "--out", str(target))
    assert "agreement" in out and "TV" in out and "ensemble" in out and "svi" in out
    table = read_json(target)
    assert table["reference"] == str(hmc_run)
    first, *others = table["runs"]
    assert first["agreement"] == 1.0 and first["tv"] == 0.0
    for row in others:
        assert 0.0 <= row["agreement"] <= 1.0 and 0.0 <= row["tv"] <= 1.0
    assert [r["method"] for r in table["runs"]] == ["hmc", "ensemble", "svi"]


def test_regression_run_reports_original_units(diabetes_run: Path) -> None:
    record = read_json(diabetes_run / runs.METRICS)
    assert set(record["metrics"]) == {"rmse", "nll", "mean_sq_std_residual"}
    assert record["metrics"]["rmse"] > 10  # diabetes targets are in the hundreds
    out = ok("evaluate", str(diabetes_run), "--quiet")
    assert "independent, not Markov chains" in out
    assert not (diabetes_run / "reliability.png").exists()


def test_noise_heldout_fixes_the_sd_the_library_rule_chooses(folder: Path) -> None:
    """``--noise heldout`` runs with the noise sd that ``heldout_noise`` chooses on the same
    training rows, network, prior and seed (its own tests check the rule), and records it."""
    import jax
    import numpyro.distributions as dist

    import bnn_ppl as bp
    from bnn_ppl.inference import heldout_noise
    from bnn_ppl.models import MLP

    out = folder / "heldout"
    args = ["map", "--model", "mlp", "--width", "8", "--dataset", "diabetes", "--max-train",
            "100", "--num-steps", "50", "--noise", "heldout", "--seed", "3"]  # fmt: skip
    text = ok("run", *args, "--out", str(out))
    data = cli.load_data("diabetes", max_train=100)
    learned = bp.BNN(MLP(hidden=(8,), out=1), bp.priors.from_string("normal:0.3"),
                     bp.likelihoods.Gaussian(scale=dist.HalfNormal(1.0)))  # fmt: skip
    want = heldout_noise(learned, data.x_train, data.y_train, rng_key=jax.random.key(3))
    got = read_json(out / runs.METRICS)["noise_choice"]
    assert got["noise"] == want.noise and got["rule"] == "heldout_rmse"
    np.testing.assert_allclose(got["fold_rmse"], want.fold_rmse, rtol=1e-5)
    assert f"noise sd {want.noise:g} (standardised)" in text
    # the fit's likelihood has that sd: the MAP's predictive scale (standardised) is the noise
    pred = load_npz(out / runs.PREDICTIONS)
    np.testing.assert_allclose(pred["scale"], want.noise, rtol=1e-6)


# ----------------------------------------------------------------------------------- --help
def _fields(cls: type) -> set[str]:
    return {"--" + f.name.replace("_", "-") for f in dataclasses.fields(cls)}


REFERENCE = ["reference_hmc", *TINY, "--num-chains", "2", "--num-warmup", "50",
             "--segment-draws", "10"]  # fmt: skip


def test_a_reference_run_commits_its_segments_and_a_larger_budget_continues_it(
    folder: Path,
) -> None:
    """bnn-ppl run reference_hmc: fit(ReferenceHMCConfig) with every segment committed to
    <out>/checkpoints, each check printed, the verdict in metrics.json and evaluate; a rerun
    with a larger --max-draws (a budget field) reuses the folder, continues the same chains and
    records the new budget; a changed draw-determining option is still refused."""
    out = folder / "reference"
    text = ok("run", *REFERENCE, "--max-draws", "20", "--out", str(out))
    assert "until R-hat <= 1.01 and bulk ESS >= 400 for 99% of the test predictions" in text
    assert "  segment 1: 10 draws/chain, R-hat <= threshold for" in text
    assert "  segment 2: 20 draws/chain" in text and "NOT converged (max_draws)" in text
    record = read_json(out / runs.METRICS)
    conv = record["summary"]["convergence"]
    assert (conv["converged"], conv["stop_reason"], conv["draws"]) == (False, "max_draws", 20)
    assert "reference_hmc stopped (max_draws) before converging" in record["summary"][
        "not_converged"]
    assert (out / runs.CHECKPOINTS / "record_000002.json").exists()  # warmup + 2 segments
    first = load_npz(out / runs.SAMPLES, sha256=record["files"][runs.SAMPLES])

    more = ok("run", *REFERENCE, "--max-draws", "30", "--out", str(out), "--quiet")
    assert more == ""  # --quiet: not even the checks
    record = read_json(out / runs.METRICS)
    assert record["summary"]["resumed_after_segment"] == 2
    assert record["summary"]["convergence"]["draws"] == 30
    assert read_json(out / runs.CONFIG)["arguments"]["max_draws"] == 30
    again = load_npz(out / runs.SAMPLES, sha256=record["files"][runs.SAMPLES])
    for k, v in first.items():  # the same chains, continued
        np.testing.assert_array_equal(again[k][:, :20], v, err_msg=k)
    assert again["Dense_0.kernel"].shape[:2] == (2, 30)
    assert ok("evaluate", str(out)).splitlines()[1].startswith(
        "reference run: NOT converged (max_draws) after 30 draws per chain; reference_hmc "
        "stopped (max_draws)")

    rc, _, err = bnn_ppl("run", *REFERENCE, "--max-draws", "30", "--seed", "1", "--out", str(out))
    assert rc == 2 and "seed: 0 (config.json) != 1 (this run)" in err
    # a larger budget refused later (its checkpoints in use by another run) records nothing:
    # config.json keeps the budget of the results beside it
    fcntl = pytest.importorskip("fcntl")
    before = (out / runs.CONFIG).read_bytes()
    with open(out / runs.CHECKPOINTS / "lock", "a") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        rc, _, err = bnn_ppl("run", *REFERENCE, "--max-draws", "40", "--out", str(out))
    assert rc == 2 and "in use by another" in err and (out / runs.CONFIG).read_bytes() == before


def test_a_reference_run_whose_budget_ends_in_warmup_says_so(folder: Path) -> None:
    out = folder / "reference_cut"
    ok("run", *REFERENCE, "--max-seconds", "0.001", "--out", str(out), "--quiet")
    conv = read_json(out / runs.METRICS)["summary"]["convergence"]
    assert (conv["converged"], conv["stop_reason"], conv["draws"]) == (False, "max_seconds", None)
    assert ok("evaluate", str(out)).splitlines()[1].startswith(
        "reference run: NOT converged (max_seconds) during warmup: no draw sampled; "
        "reference_hmc stopped at its budget (max_seconds=0.001) during warmup")


def test_the_budget_a_reference_rerun_may_change_is_what_its_checkpoint_does_not_fingerprint(
) -> None:
    from bnn_ppl.cli.settings import BUDGET_FIELDS
    from bnn_ppl.inference.reference.checkpoint import NOT_FINGERPRINTED

    assert set(BUDGET_FIELDS) == set(NOT_FINGERPRINTED)


def test_top_level_and_run_help_list_the_commands_and_methods() -> None:
    rc, out, _ = bnn_ppl("--help")
    assert rc == 0 and all(c in out for c in ("run", "evaluate", "compare"))
    rc, out, _ = bnn_ppl("run", "--help")
    assert rc == 0 and all(f"  {m} " in out for m in cli.METHODS)
    rc, _, err = bnn_ppl()  # no command: the usage on stderr, a usage error
    assert rc == 2 and "usage: bnn-ppl" in err


def test_chunk_size_takes_an_int_or_auto() -> None:
    from bnn_ppl.cli.parser import parse_run

    def chunk(*extra: str) -> object:
        return parse_run(["hmc", "--out", "unused", *extra]).config.chunk_size

    assert (chunk(), chunk("--chunk-size", "64"), chunk("--chunk-size", "auto")) == (
        None,
        64,
        "auto",
    )
    with pytest.raises(SystemExit), contextlib.redirect_stderr(io.StringIO()):
        chunk("--chunk-size", "big")


@pytest.mark.parametrize("method", cli.METHODS)
def test_run_method_help_shows_its_options_and_no_other_methods(
    method: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every field of the method's config and of the shared options is an option with its
    help and the default that applies; the options of other methods are absent."""
    monkeypatch.setenv("COLUMNS", "200")  # one line per option
    rc, out, _ = bnn_ppl("run", method, "--help")
    assert rc == 0
    from bnn_ppl.cli.parser import one_chain_options

    shared = cli.ChainRunOptions if method in cli.CHAIN_METHODS else cli.RunOptions
    hidden = {"--" + n.replace("_", "-") for n in one_chain_options(config.CONFIGS[method])}
    own = (_fields(config.CONFIGS[method]) | _fields(shared)) - hidden  # (svi, map: no chains)
    for flag in own:
        assert flag in out, f"bnn-ppl run {method} --help lacks {flag}"
    others = set().union(*(_fields(c) for c in config.CONFIGS.values()))
    others |= _fields(cli.ChainRunOptions)
    for flag in others - own:
        assert f"{flag} " not in out, f"bnn-ppl run {method} --help shows {flag}"
    for name, value in cli.CLI_DEFAULTS[method].items():
        assert f"(default: {value})" in out, (name, value)
    if method == "hmc":  # the help of the config's fields is the comment beside each
        assert "warmup iterations per chain (default: 200)" in out


def test_console_script_help() -> None:
    script = Path(sys.executable).parent / "bnn-ppl"
    assert script.exists(), "bnn-ppl is not installed: pip install -e . --no-deps"
    proc = subprocess.run(
        [str(script), "run", "ensemble", "--help"],
        capture_output=True, text=True, timeout=120, env=subprocess_env(),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    for flag in ("--model", "--dataset", "--prior", "--temperature", "--out", "--quiet",
                 "--num-members", "--num-steps", "--batch-size"):  # fmt: skip
        assert flag in proc.stdout


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (["--method", "nuts"], "bnn-ppl run nuts [OPTIONS]"),
        (["--method=sgmcmc", "--sampler", "atmc"], "the method is a subcommand"),
        (["ensemble", "--members", "3"], "use --num-members"),
        (["svi", "--steps", "3"], "use --num-steps"),
        (["atmc", "--burnin-cycles", "3"], "use --num-warmup (burn-in cycles)"),
    ],
)
def test_the_earlier_spelling_is_refused_with_the_new_one(old: list[str], new: str) -> None:
    rc, _, err = bnn_ppl("run", *old, "--out", "never-written")
    assert rc == 2 and new in err and "is gone" in err and "Traceback" not in err


# ------------------------------------------------------------------------------- bad inputs
BAD_RUNS = {
    "unknown prior": (["--prior", "gauss:0.3"], "unknown prior 'gauss'; known priors"),
    "malformed prior": (["--prior", "normal:abc"], "must be numbers"),
    "prior arity": (["--prior", "normal:1,2,3"], "Normal takes"),
    "temperature 0": (["--temperature", "0"], "--temperature must be a finite number > 0"),
    "negative temperature": (["--temperature", "-1"], "--temperature must be a finite number > 0"),
    "unknown dataset": (["--dataset", "digitz"], "unknown dataset 'digitz'"),
    "unknown model": (["--model", "mlpx"], "invalid choice 'mlpx' for argument '--model'"),
    "unknown method": (["vi"], "bnn-ppl run takes a method, one of hmc, nuts, svi, map"),
    "not a number": (["--num-samples", "many"], "Error parsing --num-samples: invalid literal"),
    "zero samples": (["--num-samples", "0"], "--num-samples must be an int >= 1, got 0"),
    "option of another method": (
        ["svi", "--num-chains", "2"],
        "--num-chains does not apply to bnn-ppl run svi; it applies to "
        "hmc/nuts/sgld/sghmc/sgnht/atmc",
    ),
    "chain batching of a method without chains": (
        ["svi", "--chain-batching", "sequential"],
        "--chain-batching does not apply to bnn-ppl run svi; it applies to hmc/nuts/ensemble",
    ),
    "unknown chain batching": (
        ["--chain-batching", "batched"],
        "--chain-batching must be one of ['auto', 'sequential', 'vectorized'], got 'batched'",
    ),
    "checkpoints of a method without chains": (
        ["ensemble", "--checkpoint-every", "2"],
        "--checkpoint-every does not apply to bnn-ppl run ensemble",
    ),
    "progress without checkpoints": (
        ["--progress-every", "5"],
        "--progress-every needs --checkpoint-every: its lines go to <out>/checkpoints/",
    ),
    "zero progress spacing": (
        ["--checkpoint-every", "5", "--progress-every", "0"],
        "--progress-every must be an integer >= 1, got 0",
    ),
    "option of another network": (
        ["--model", "lenet5", "--width", "4"],
        "--width does not apply to --model lenet5",
    ),
    "noise for classification": (["--noise", "0.3"], "--noise applies to regression"),
    "held-out noise for classification": (["--noise", "heldout"], "--noise applies to regression"),
    "malformed noise": (["--dataset", "diabetes", "--noise", "gamma:1"], "--noise must be a "),
    "noise prior missing a parameter": (
        ["--dataset", "diabetes", "--noise", "lognormal:-3"],
        "a prior on it ('halfnormal:SCALE', 'halfcauchy:SCALE', 'lognormal:LOC,SCALE'",
    ),
    "noise prior with a zero rate": (
        ["--dataset", "diabetes", "--noise", "inversegamma:3,0"],
        "--noise inversegamma rate must be a finite number > 0",
    ),
    "zero noise": (["--dataset", "diabetes", "--noise", "0"], "--noise must be a finite number"),
    "seed out of range": (["--seed", "-1"], "--seed must be an integer in [0, 2**32)"),
    "too many training rows": (["--max-train", "5000"], "exceeds the 1437 training rows"),
    "option of another data set": (["--split", "1"], "unexpected option(s) ['split']"),
    "text model on images": (["--model", "cnnlstm"], "--model cnnlstm takes token ids"),
    # extreme but well-typed values (issue 14, 11d/11e): refused before the folder is claimed
    "denormal prior scale": (["--prior", "normal:1e-50"], "cannot be represented in float32"),
    "denormal temperature": (["--temperature", "1e-45"], "cannot be represented in float32"),
    "temperature too cold for float32": (
        ["svi", "--temperature", "1e-30"],
        "--temperature 1e-30 is too cold for float32 with 1437 training rows",
    ),
    "huge num-samples": (
        ["--num-samples", str(10**9)],
        "--num-chains x --num-samples = 2,000,000,000 draws of 3,760 parameters and 3,600 test "
        "predictions each need about",
    ),
    "huge num-chains": (["--num-chains", str(10**9)], "more than this machine's"),
    "huge svi draws": (["svi", "--num-samples", str(10**9)], "lower --num-samples"),
    "huge ensemble": (["ensemble", "--num-members", str(10**9)], "lower --num-members"),
    "count beyond int32": (["--num-warmup", str(2**31)], "is above 2147483647, the largest"),
    "iterations beyond int32": (
        ["atmc", "--cycle-length", str(2**20), "--num-samples", str(2**11)],
        "(automatic --num-warmup, at most 50, + --num-samples) x --cycle-length = 2199912448",
    ),
    "nuts tree beyond int32": (
        ["nuts", "--max-tree-depth", "1000000"],
        "--max-tree-depth 1000000 is above 30",
    ),  # was a JaxRuntimeError traceback after 48 s
    "hmc trajectory that never ends": (
        ["--prior", "normal:1e6"],
        "hmc would take 157,079,633 leapfrog steps per iteration",
    ),
    "reference draws beyond int32": (
        ["reference_hmc", "--max-draws", str(2**31 - 1)],
        "--num-warmup + --max-draws = 2147484147 iterations is above 2147483647",
    ),
    "huge reference run": (
        ["reference_hmc", "--max-draws", str(10**9)],
        "--num-chains x --max-draws = 4,000,000,000 draws of 3,760 parameters",
    ),
    "checkpoint spacing of a reference run": (
        ["reference_hmc", "--checkpoint-every", "5"],
        "--checkpoint-every does not apply to bnn-ppl run reference_hmc",
    ),
    "svi batch larger than the data": (
        ["svi", "--batch-size", "5000"],
        "--batch-size 5000 is larger than the 1437 training rows of digits",
    ),
    "ensemble batch larger than the data": (
        ["ensemble", "--batch-size", "1438"],
        "--batch-size 1438 is larger than the 1437 training rows",
    ),
    "sgmcmc batch larger than the data": (
        ["atmc", "--max-train", "100", "--batch-size", "128"],
        "--batch-size 128 is larger than the 100 training rows",
    ),
}


@pytest.mark.parametrize("case", list(BAD_RUNS))
def test_bad_run_options_are_refused_with_a_message(case: str, tmp_path: Path) -> None:
    extra, message = BAD_RUNS[case]
    method, extra = (extra[0], extra[1:]) if extra[0] in (*cli.METHODS, "vi") else ("hmc", extra)
    out = tmp_path / "run"
    with count_compiles() as compiles:
        rc, stdout, stderr = bnn_ppl("run", method, *extra, "--out", str(out))
    assert rc == 2
    assert message in stderr, stderr
    assert "Traceback" not in stderr + stdout
    assert not out.exists()  # nothing written
    assert compiles == []  # refused before anything compiled


# SIGKILL through the command line: the resumed run's draws equal an uninterrupted run's
KILLED = {
    "hmc": HMC_CHECKPOINTED,  # the hmc_run fixture's command: that run is the uninterrupted one
    "nuts": ["nuts", *TINY, "--num-warmup", "10", "--num-samples", "6",
             "--num-chains", "1", "--max-tree-depth", "3", "--checkpoint-every", "2"],
    "atmc": ["atmc", *TINY, "--num-chains", "2",
             "--cycle-length", "4", "--num-warmup", "1", "--num-samples", "6",
             "--batch-size", "50", "--step-size", "1e-3", "--checkpoint-every", "2"],
}  # fmt: skip


@pytest.mark.parametrize(
    "method", ["hmc", pytest.param("nuts", marks=pytest.mark.slow),
               pytest.param("atmc", marks=pytest.mark.slow)],
)  # fmt: skip
def test_a_run_killed_after_a_segment_resumes_bit_for_bit(
    method: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    import signal
    import time

    args = KILLED[method]
    killed = tmp_path / "killed"
    # the child shares the tests' compilation cache: hmc's programs are the hmc_run fixture's
    command = [sys.executable, "-m", "bnn_ppl", "run", *args, "--quiet", "--out", str(killed)]
    proc = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=subprocess_env()
    )
    record = killed / runs.CHECKPOINTS / "record_000001.json"  # the first sampling segment
    deadline = time.monotonic() + 300
    while not record.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL, proc.stderr.read().decode()[-2000:]
    assert record.exists() and not (killed / runs.METRICS).exists()
    out = ok("run", *args, "--out", str(killed))  # the same command again
    assert "reusing the run folder" in out and "resumed after checkpoint segment" in out
    if method == "hmc":
        whole = request.getfixturevalue("hmc_run")
    else:
        whole = tmp_path / "whole"
        ok("run", *args, "--quiet", "--out", str(whole))
    a, b = load_npz(killed / runs.SAMPLES), load_npz(whole / runs.SAMPLES)
    assert set(a) == set(b)
    for site in a:
        np.testing.assert_array_equal(a[site], b[site], err_msg=site)


def test_resume_with_a_different_prior_is_refused(hmc_run: Path, tmp_path: Path) -> None:
    copy = tmp_path / "hmc"
    shutil.copytree(hmc_run, copy)
    with count_compiles() as compiles:
        rc, _, err = bnn_ppl("run", *HMC_CHECKPOINTED, "--prior", "normal:0.5", "--out", str(copy))
    assert rc == 2 and compiles == []
    assert "holds a run with a different configuration" in err
    assert "prior: 'normal:0.3' (config.json) != 'normal:0.5' (this run)" in err
    # the refused run changed nothing
    assert (copy / runs.METRICS).read_bytes() == (hmc_run / runs.METRICS).read_bytes()
    rc, _, err = bnn_ppl("run", *HMC_CHECKPOINTED[:-1], "5", "--out", str(copy))
    assert rc == 2 and "checkpoint_every: 10 (config.json) != 5 (this run)" in err


def test_a_kill_during_the_first_config_write_leaves_a_usable_folder(tmp_path: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / ".config.json.0123456789abcdef.tmp").write_text("{")  # a kill mid-write leaves this
    ok("run", "ensemble", *TINY, "--num-members", "2", "--num-steps", "20",
       "--out", str(out), "--quiet")  # fmt: skip
    assert not list(out.glob("*.tmp")) and (out / runs.METRICS).exists()


def test_rerunning_a_finished_run_keeps_its_results_readable(
    ensemble_run: Path, tmp_path: Path
) -> None:
    """Claiming a finished folder again no longer deletes metrics.json first (a kill during the
    rerun used to lose the finished results); leftover temporaries are removed."""
    copy = tmp_path / "ensemble"
    shutil.copytree(ensemble_run, copy)
    (copy / ".samples.npz.fedcba9876543210.tmp").write_bytes(b"partial")
    assert runs.claim(copy, read_json(copy / runs.CONFIG)) is True
    assert not list(copy.glob("*.tmp"))
    assert runs.load_run(copy).num_draws == 3  # still a finished, verified run


def test_out_folder_that_is_not_a_run_is_refused(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    rc, _, err = bnn_ppl("run", *HMC, "--out", str(tmp_path))
    assert rc == 2 and "is not empty and is not a bnn-ppl run folder" in err
    assert sorted(os.listdir(tmp_path)) == ["notes.txt"]


def test_evaluate_refuses_missing_foreign_and_unfinished_folders(
    hmc_run: Path, tmp_path: Path
) -> None:
    rc, _, err = bnn_ppl("evaluate", str(tmp_path / "nope"))
    assert rc == 2 and f"run folder {tmp_path / 'nope'} does not exist" in err
    rc, _, err = bnn_ppl("evaluate", str(tmp_path))
    assert rc == 2 and "is not a bnn-ppl run folder (it has no config.json)" in err
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    shutil.copy(hmc_run / runs.CONFIG, unfinished / runs.CONFIG)
    rc, _, err = bnn_ppl("evaluate", str(unfinished))
    assert rc == 2 and "holds an unfinished run (no metrics.json)" in err
    assert "Traceback" not in err


def test_evaluate_detects_a_damaged_file(hmc_run: Path, tmp_path: Path) -> None:
    copy = tmp_path / "hmc"
    shutil.copytree(hmc_run, copy)
    data = (copy / runs.PREDICTIONS).read_bytes()
    (copy / runs.PREDICTIONS).write_bytes(data[: len(data) // 2])
    rc, _, err = bnn_ppl("evaluate", str(copy))
    assert rc == 2 and "checksum mismatch" in err


def test_compare_refuses_runs_on_different_datasets(hmc_run: Path, diabetes_run: Path) -> None:
    rc, _, err = bnn_ppl("compare", str(hmc_run), str(diabetes_run))
    assert rc == 2
    assert "cannot compare runs on different test sets" in err
    assert "dataset 'digits'" in err and "dataset 'diabetes'" in err


def test_compare_needs_two_runs(hmc_run: Path) -> None:
    rc, _, err = bnn_ppl("compare", str(hmc_run))
    assert rc == 2 and "compare needs at least two run folders" in err


def test_a_damaged_config_is_named(tmp_path: Path) -> None:
    (tmp_path / runs.CONFIG).write_text("{not json")
    rc, _, err = bnn_ppl("evaluate", str(tmp_path))
    assert rc == 2 and f"{tmp_path / runs.CONFIG} is unreadable" in err


def test_a_refused_option_leaves_the_folder_free_for_the_corrected_command(tmp_path: Path) -> None:
    out = tmp_path / "ensemble"
    rc, _, err = bnn_ppl("run", *ENSEMBLE, "--batch-size", "500", "--out", str(out))
    assert rc == 2 and "larger than the 200 training rows" in err and not out.exists()
    ok("run", *ENSEMBLE, "--out", str(out), "--quiet")  # as the ensemble_run fixture
    assert read_json(out / runs.CONFIG)["arguments"]["batch_size"] is None


def test_sgmcmc_default_batch_is_all_rows_of_a_small_set_and_recorded(tmp_path: Path) -> None:
    out = tmp_path / "sgmcmc"
    # two steps without burn-in: the momentum has not warmed up from zero, which the check says
    with pytest.warns(SGMCMCAccuracyWarning, match="runs cold"):
        ok("run", "atmc", *TINY[:-1], "60", "--num-chains", "1", "--cycle-length", "2",
           "--num-warmup", "0", "--num-samples", "1", "--out", str(out), "--quiet")  # fmt: skip
    assert read_json(out / runs.CONFIG)["arguments"]["batch_size"] == 60  # not 128, clamped
    assert read_json(out / runs.METRICS)["summary"]["batch_size"] == 60


# extreme prior scales the float32 range holds: a correct result, or a clean error naming the
# divergence (never NumPyro's "invalid scale parameter" traceback, never NaN metrics)
DIVERGING = {
    "svi, prior 1e-30": (["svi", "--prior", "normal:1e-30"], "svi diverged: the "),
    "svi, prior 1e-37": (["svi", "--prior", "normal:1e-37"], "svi diverged: the "),
    "ensemble, prior 1e-37": (
        ["ensemble", "--num-members", "2", "--prior", "normal:1e-37"],
        "ensemble diverged: the loss became nan",
    ),
}


@pytest.mark.parametrize("case", list(DIVERGING))
def test_a_diverging_fit_is_a_clean_error(case: str, tmp_path: Path) -> None:
    extra, message = DIVERGING[case]
    steps = ["--num-steps", "20"] + (["--map-steps", "5"] if "svi" in case else [])
    method, *extra = extra
    rc, out, err = bnn_ppl("run", method, *TINY, *steps, *extra, "--out", str(tmp_path / "run"))
    assert rc == 2, out + err
    assert message in err and "less extreme --prior" in err and "Traceback" not in err
    record = read_json(tmp_path / "run" / runs.METRICS)  # the folder says why it has no results
    assert record["status"] == "diverged" and message in record["reason"]
    rc, _, err = bnn_ppl("evaluate", str(tmp_path / "run"))
    assert rc == 2 and "diverged" in err and message in err


def test_a_tiny_prior_scale_gives_the_prior_predictive(tmp_path: Path) -> None:
    """Prior sd 1e-30 pins every weight at ~0: uniform predictions, not an error."""
    out = tmp_path / "ensemble"
    ok("run", "ensemble", *TINY, "--num-members", "2", "--num-steps", "20", "--prior",
       "normal:1e-30", "--out", str(out), "--quiet")  # fmt: skip
    probs = load_npz(out / runs.PREDICTIONS)["probs"]
    np.testing.assert_allclose(probs, 0.1, rtol=1e-5)


# ------------------------------------------------------------------- bugs are not user errors
def _bug(*args: object, **kwargs: object) -> None:
    None + 1  # type: ignore[operator]  # noqa: B018  # an injected bug: a TypeError


def _value_bug(*args: object, **kwargs: object) -> None:
    int("not a number")  # an injected bug: a plain ValueError


@pytest.mark.parametrize("bug", [_bug, _value_bug], ids=["TypeError", "ValueError"])
def test_an_injected_bug_keeps_its_traceback(
    bug: object, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(cli.run, "load_data", bug)  # where `bnn-ppl run` looks it up
    with pytest.raises((TypeError, ValueError)) as info:
        bnn_ppl("run", "svi", *TINY, "--out", str(tmp_path / "run"))
    assert not isinstance(info.value, cli.InputError)  # not passed off as the user's mistake
    # while the library's own validation stays a one-line error with exit status 2
    monkeypatch.undo()
    rc, _, err = bnn_ppl("run", "hmc", "--dataset", "digitz", "--out", str(tmp_path / "run"))
    assert rc == 2 and err.startswith("bnn-ppl: error: unknown dataset 'digitz'")


def test_a_bug_in_the_diagnostics_is_not_reported_as_skipped(
    hmc_run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli.bp.diagnostics, "weight_space", _value_bug)
    with pytest.raises(ValueError, match="invalid literal"):
        bnn_ppl("evaluate", str(hmc_run), "--quiet")


def _python_m(*args: str, bug: bool = False) -> subprocess.CompletedProcess[str]:
    """``python -m bnn_ppl args`` (optionally with a bug injected into the CLI first)."""
    if bug:
        code = (
            "import runpy, sys, bnn_ppl.cli.run as c\n"
            "def bug(*a, **k): return None + 1\n"
            "c.load_data = bug\n"
            f"sys.argv = ['bnn_ppl', *{list(args)!r}]\n"
            "runpy.run_module('bnn_ppl', run_name='__main__')\n"
        )
        command = [sys.executable, "-c", code]
    else:
        command = [sys.executable, "-m", "bnn_ppl", *args]
    return subprocess.run(
        command, capture_output=True, text=True, timeout=300, env=subprocess_env()
    )


def test_python_m_bnn_ppl_runs_the_cli_and_quiet_prints_nothing(
    ensemble_run: Path, tmp_path: Path
) -> None:
    # the ensemble_run fixture's run: the child process reads the programs that run compiled
    # from the tests' persistent compilation cache instead of compiling a run of its own
    proc = _python_m("run", *ENSEMBLE, "--out", str(tmp_path / "ens"), "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "" and proc.stderr == ""  # --quiet: nothing at all on success
    assert (tmp_path / "ens" / runs.METRICS).exists()
    proc = _python_m("run", "hmc", "--temperature", "0", "--out", str(tmp_path / "x"))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("bnn-ppl: error: --temperature must be a finite number > 0")
    assert "Traceback" not in proc.stderr and not (tmp_path / "x").exists()
    proc = _python_m("run", "svi", "--out", str(tmp_path / "x"), bug=True)
    assert proc.returncode == 1 and "bnn-ppl: error" not in proc.stderr
    assert "Traceback" in proc.stderr and "TypeError: unsupported operand" in proc.stderr


def test_a_checkpoint_folder_in_use_is_a_clean_error(hmc_run: Path, tmp_path: Path) -> None:
    fcntl = pytest.importorskip("fcntl")
    copy = tmp_path / "hmc"
    shutil.copytree(hmc_run, copy)
    with open(copy / runs.CHECKPOINTS / "lock", "a") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        rc, _, err = bnn_ppl("run", *HMC_CHECKPOINTED, "--out", str(copy), "--quiet")
    assert rc == 2 and "bnn-ppl: error: checkpoint_dir" in err and "in use by another" in err


@pytest.mark.parametrize("key", ["layout", "files"])
def test_an_incomplete_run_record_is_named(key: str, hmc_run: Path, tmp_path: Path) -> None:
    copy = tmp_path / "hmc"
    shutil.copytree(hmc_run, copy)
    record = read_json(copy / runs.METRICS)
    del record[key]
    (copy / runs.METRICS).write_text(json.dumps(record))
    rc, _, err = bnn_ppl("evaluate", str(copy), "--quiet")  # its checksum no longer matches
    assert rc == 2 and "metrics.json is damaged" in err
    record["checksum"] = runs.record_checksum(record)  # re-signed: complete or not, it says
    (copy / runs.METRICS).write_text(json.dumps(record))
    rc, _, err = bnn_ppl("evaluate", str(copy), "--quiet")
    assert rc == 2 and "is not a complete bnn-ppl run record: missing" in err and key in err


def test_evaluate_refuses_more_bins_than_test_rows(ensemble_run: Path) -> None:
    rc, out, err = bnn_ppl("evaluate", str(ensemble_run), "--num-bins", str(10**12))
    assert rc == 2 and "--num-bins 1000000000000 exceeds the 360 test rows" in err
    assert out == "" and not (ensemble_run / runs.EVALUATION).exists()


def test_regression_default_noise_is_learned_except_for_point_estimates(
    folder: Path, diabetes_run: Path
) -> None:
    """Without --noise, HMC, NUTS and SVI learn the noise sd (HalfNormal(1)); map, ensemble and
    SG-MCMC, whose learned sd comes out too small, fix it by the held-out rule. Both recorded
    (a resume needs them)."""
    assert {m: cli.default_noise(m) for m in cli.METHODS} == {
        m: "halfnormal:1" if m in ("hmc", "nuts", "svi", "reference_hmc") else "heldout"
        for m in cli.METHODS
    }
    assert read_json(diabetes_run / "config.json")["arguments"]["noise"] == "heldout"
    assert read_json(diabetes_run / runs.METRICS)["noise_choice"]["rule"] == "heldout_rmse"
    out = folder / "svi_gap1d"
    ok("run", "svi", "--model", "mlp", "--width", "4", "--dataset", "gap1d", "--max-train", "40",
       "--num-steps", "20", "--map-steps", "20", "--num-samples", "5", "--out", str(out),
       "--quiet")  # fmt: skip
    assert read_json(out / "config.json")["arguments"]["noise"] == "halfnormal:1"
    assert "noise_scale" in load_npz(out / "samples.npz")


@pytest.mark.parametrize(
    ("text", "family", "params"),
    [
        ("halfnormal:0.5", "HalfNormal", {"scale": 0.5}),
        ("halfcauchy:0.1", "HalfCauchy", {"scale": 0.1}),
        ("lognormal:-3,0.5", "LogNormal", {"loc": -3.0, "scale": 0.5}),
        ("inversegamma:3,0.05", "InverseGamma", {"concentration": 3.0, "rate": 0.05}),
    ],
)
def test_noise_takes_each_prior_family_on_the_sd(text: str, family: str, params: dict) -> None:
    from bnn_ppl.cli.parser import parse_run

    o = parse_run(["hmc", "--dataset", "diabetes", "--noise", text, "--out", "unused"]).options
    data = cli.inputs_for(o.model, cli.load_data(o.dataset, max_train=o.max_train))
    prior = cli.build_model(o, data).likelihood.scale
    assert type(prior).__name__ == family
    assert {k: float(getattr(prior, k)) for k in params} == pytest.approx(params)


def test_a_noise_prior_is_the_sampled_sds_prior(folder: Path) -> None:
    """--noise lognormal:-1,0.01: the run says so, samples the noise sd under that prior (so
    close to e^-1 whatever the data say) and records it for a resume."""
    out = folder / "svi_lognormal"
    printed = ok("run", "svi", "--model", "mlp", "--width", "4", "--dataset", "gap1d",
                 "--max-train", "40", "--num-steps", "20", "--map-steps", "20",
                 "--num-samples", "5", "--noise", "lognormal:-1,0.01", "--out", str(out),
                 "--no-progress")  # fmt: skip
    assert "prior normal:0.3, noise lognormal:-1,0.01, T=1 (likelihood)" in printed
    assert read_json(out / "config.json")["arguments"]["noise"] == "lognormal:-1,0.01"
    sd = load_npz(out / "samples.npz")["noise_scale"]
    assert np.all(np.abs(np.log(sd) + 1.0) < 0.1), sd


def test_a_regression_reference_learns_its_noise_by_default(folder: Path) -> None:
    """bnn-ppl run reference_hmc on regression without --noise: a HalfNormal(1) prior on the
    noise sd, recorded, and the noise sd sampled with the weights."""
    out = folder / "reference_gap1d"
    ok("run", "reference_hmc", "--model", "mlp", "--width", "4", "--dataset", "gap1d",
       "--max-train", "40", "--num-chains", "2", "--num-warmup", "20", "--segment-draws", "10",
       "--max-draws", "10", "--out", str(out), "--quiet")  # fmt: skip
    assert read_json(out / "config.json")["arguments"]["noise"] == "halfnormal:1"
    assert "noise_scale" in load_npz(out / "samples.npz")

"""Run folders written from a fitted Posterior (``runs.save_posterior``): what the examples and
the CLI write, and what ``bnn-ppl evaluate`` reads."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from conjugate import data, linear_model

from bnn_ppl import cli, runs
from bnn_ppl import config as cfg
from bnn_ppl.data import Dataset
from bnn_ppl.inference import fit
from bnn_ppl.io import read_json, read_jsonl
from bnn_ppl.likelihoods import prediction_from_fields
from bnn_ppl.metrics.suite import flat_draws
from bnn_ppl.runs.progress import running_metrics


def _dataset() -> Dataset:
    x, y = data(n=40)
    z = np.zeros(x.shape[1], np.float32)
    return Dataset("conjugate", x[:30], y[:30], x[30:], y[30:], 0, z, z + 1, 0.0, 2.0)


@pytest.mark.parametrize(
    "config",
    [cfg.HMCConfig(num_warmup=30, num_samples=20, num_chains=2),
     cfg.EnsembleConfig(num_members=3, num_steps=100, learning_rate=0.05)],
    ids=["hmc", "ensemble"],
)  # fmt: skip
def test_a_posterior_becomes_a_run_folder_that_evaluate_reads(tmp_path, config, capsys):
    d = _dataset()
    post = fit(linear_model(), d, config, jax.random.key(0))
    folder = tmp_path / "run"
    claimed = runs.claim(folder, runs.make_config(config.to_dict(), data=runs.data_identity(d)))
    assert claimed is False
    record = runs.save_posterior(folder, post, y_std=d.y_std, extra={"note": "test"})
    run = runs.load_run(folder, samples=True)
    # Markov chains keep their chains; an ensemble's members are independent draws
    assert (run.chains, run.num_chains, run.num_draws) == (
        (True, 2, 40) if config.method == "hmc" else (False, 1, 3)
    )
    assert record["method"] == config.method and record["note"] == "test"
    flat = flat_draws(prediction_from_fields(dict(post.predictions)), True)
    expected = runs.predictive_metrics(flat, d.y_test, task="regression", y_std=d.y_std)
    assert run.record["metrics"] == pytest.approx(expected, rel=1e-6)
    np.testing.assert_array_equal(run.targets, d.y_test)
    assert runs.load_run(folder).config["data"]["test_sha256"] == runs.array_sha256(d.x_test,
                                                                                   d.y_test)
    # progress.jsonl: the running BMA of a chain ends at the run's metrics; an optimiser's loss
    progress = read_jsonl(folder / runs.PROGRESS)
    assert progress == running_metrics(post, y_std=d.y_std)
    if run.chains:
        assert progress[-1]["test_rmse"] == pytest.approx(expected["rmse"], rel=1e-6)
    else:
        assert progress[-1]["loss"] == pytest.approx(float(post.trace["loss"][:, -1].mean()))
    assert cli.main(["evaluate", str(folder)]) == 0
    assert "rmse" in capsys.readouterr().out


def test_a_posterior_without_test_data_is_refused(tmp_path):
    x, y = data(n=30)
    post = fit(linear_model(), (x, y), cfg.MAPConfig(num_steps=10), jax.random.key(0))
    with pytest.raises(ValueError, match="no test predictions"):
        runs.save_posterior(tmp_path, post)


def test_fit_run_writes_a_folder_evaluate_reads_and_refuses_another_run(tmp_path, capsys):
    from bnn_ppl.inference import fit_run

    d = _dataset()
    config = cfg.EnsembleConfig(num_members=2, num_steps=20, learning_rate=0.05)
    folder = tmp_path / "run"
    post, record = fit_run(folder, linear_model(), d, config, jax.random.key(0),
                           options={"width": 0}, split=3, extra={"note": "test"})  # fmt: skip
    run = runs.load_run(folder)
    assert run.record == record and record["note"] == "test" and record["wall_time_s"] > 0
    assert record["summary"] == {"chains": []}  # ensemble members are not Markov chains
    args = run.config["arguments"]
    assert (args["dataset"], args["method"], args["num_members"], args["width"]) == (
        "conjugate", "ensemble", 2, 0)  # fmt: skip
    assert run.config["data"]["split"] == 3
    flat = flat_draws(prediction_from_fields(dict(post.predictions)), True)
    expected = runs.predictive_metrics(flat, d.y_test, task="regression", y_std=d.y_std)
    assert record["metrics"] == pytest.approx(expected, rel=1e-6)
    assert cli.main(["evaluate", str(folder)]) == 0
    # another seed is another run: refused, naming the difference, before anything is fitted
    with pytest.raises(ValueError, match="rng_key"):
        fit_run(folder, linear_model(), d, config, jax.random.key(1), options={"width": 0})
    with pytest.raises(TypeError, match="bp.data.Dataset"):
        fit_run(tmp_path / "other", linear_model(), (d.x_train, d.y_train), config,
                jax.random.key(0))


def test_fit_run_checkpoints_to_checkpoint_dir_and_a_rerun_resumes_from_it(tmp_path):
    """``checkpoint_dir`` reaches ``fit``: the run is committed there, its draws are those of an
    uncheckpointed fit with the same key, and rerunning the same call reads them back."""
    from bnn_ppl.inference import fit_run

    d, ckpt = _dataset(), tmp_path / "ckpt"
    config = cfg.HMCConfig(num_warmup=20, num_samples=10, num_chains=2)
    post, _ = fit_run(tmp_path / "run", linear_model(), d, config, jax.random.key(0),
                      checkpoint_dir=ckpt)  # fmt: skip
    assert (ckpt / "run.json").is_file()
    plain = fit(linear_model(), d, config, jax.random.key(0))
    for name, value in plain.samples.items():
        np.testing.assert_array_equal(post.samples[name], value)
    committed = {f: f.stat().st_mtime_ns for f in ckpt.rglob("*") if f.name != "lock"}
    again, _ = fit_run(tmp_path / "run", linear_model(), d, config, jax.random.key(0),
                       checkpoint_dir=ckpt)  # fmt: skip
    for name, value in post.samples.items():
        np.testing.assert_array_equal(again.samples[name], value)
    # read back, not sampled again: nothing committed was rewritten
    assert {f: f.stat().st_mtime_ns for f in ckpt.rglob("*") if f.name != "lock"} == committed
    with pytest.raises(ValueError, match="checkpoint"):  # an optimiser has no segments to commit
        fit_run(tmp_path / "map", linear_model(), d, cfg.MAPConfig(num_steps=5),
                jax.random.key(0), checkpoint_dir=tmp_path / "ckpt_map")  # fmt: skip


def test_a_diverged_fit_run_leaves_a_record_saying_so_that_evaluate_reports(tmp_path, capsys):
    """A fit whose draws become NaN raises, and its claimed folder says why (not "unfinished");
    evaluate refuses it with that reason, as a user error (exit 2, no traceback)."""
    from bnn_ppl.divergence import DivergedError
    from bnn_ppl.inference import fit_run

    d, folder = _dataset(), tmp_path / "run"
    config = cfg.SGLDConfig(num_warmup=1, num_samples=2, cycle_length=5, batch_size=10,
                            step_size=1e6)  # fmt: skip
    with pytest.raises(DivergedError) as caught:
        fit_run(folder, linear_model(), d, config, jax.random.key(0))
    record = read_json(folder / runs.METRICS)
    assert record["status"] == "diverged" and record["method"] == "sgld"
    assert record["reason"] == str(caught.value) and record["wall_time_s"] > 0
    with pytest.raises(ValueError, match="diverged .sgld.; there is nothing to evaluate"):
        runs.load_run(folder)
    assert cli.main(["evaluate", str(folder)]) == 2
    err = capsys.readouterr().err
    assert "sgld diverged: the draws" in err and "Traceback" not in err
    # the same run again is allowed (the folder is its own) and diverges the same way
    with pytest.raises(DivergedError):
        fit_run(folder, linear_model(), d, config, jax.random.key(0))
    assert read_json(folder / runs.METRICS)["reason"] == record["reason"]


def test_chain_summary_reads_the_sample_statistics_per_chain():
    from bnn_ppl.inference.run_folder import chain_summary
    from bnn_ppl.posterior import Posterior

    accept = np.array([[0.5, 1.0, 0.9], [0.2, 0.4, 0.6]])
    stats = {
        "acceptance_rate": accept,
        "diverging": np.array([[False, True, True], [False, False, False]]),
        "step_size": np.array([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6]]),
        "n_steps": np.array([[1, 3, 7], [15, 15, 15]]),
    }
    post = Posterior("hmc", {"w": np.zeros((2, 3))}, sample_stats=stats)
    assert chain_summary(post) == [
        {"chain": 0, "accept_prob": pytest.approx(0.8), "divergences": 2, "step_size": 0.3,
         "num_steps": pytest.approx(11 / 3)},
        {"chain": 1, "accept_prob": pytest.approx(0.4), "divergences": 0, "step_size": 0.6,
         "num_steps": 15.0},
    ]  # fmt: skip
    assert chain_summary(Posterior("ensemble", {"w": np.zeros((2, 1))})) == []
    assert chain_summary(Posterior("hmc", {"w": np.zeros((2, 3))})) == []  # no statistics

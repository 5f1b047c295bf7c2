"""``progress.jsonl`` of a checkpointed fit (issue 16): warmup's line and lines every
``progress_every`` draws independent of the segments. (That the test predictions are computed
once, and the Posterior equals fit's, is checked in test_resume's progress test, which runs the
fits anyway.)"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro.infer import HMC, MCMC

import bnn_ppl as bp
from bnn_ppl import config as cfg
from bnn_ppl import predictive as pointwise
from bnn_ppl.inference import fit
from bnn_ppl.inference.checkpoint.fit import ProgressLog
from bnn_ppl.inference.checkpoint.segments import MCMCPlan, run_segments
from bnn_ppl.inference.checkpoint.store import CheckpointStore
from bnn_ppl.models import MLP
from bnn_ppl.posterior import Posterior
from bnn_ppl.runs.progress import running_metrics

X = np.linspace(-1, 1, 16, dtype=np.float32)[:, None]
Y = np.sin(3 * X[:, 0])
C, S = 2, 7  # chains, draws per chain of the synthetic run below


def _model():
    return bp.BNN(MLP(hidden=(), out=1), bp.priors.Normal(1.0), bp.likelihoods.Gaussian(0.2))


def _segment(draws: dict, stats: dict, lo: int, hi: int, seconds: float) -> dict:
    return (
        {f"sample/{k}": v[:, lo:hi] for k, v in draws.items()}
        | {f"extra/{k}": v[:, lo:hi] for k, v in stats.items()}
        | {"time/seconds": np.asarray(seconds)}
    )


def test_progress_every_gives_the_same_points_whatever_the_segments(tmp_path):
    """Lines every ``progress_every`` draws (and at each segment's end), each the running
    metrics of the draws so far; segmenting the same draws otherwise changes only where the
    segment ends (and their wall times) fall."""
    rng = np.random.default_rng(0)
    draws = {
        "Dense_0.kernel": rng.normal(size=(C, S, 1, 1)).astype(np.float32),
        "Dense_0.bias": rng.normal(size=(C, S, 1)).astype(np.float32),
    }
    stats = {
        "accept_prob": rng.uniform(size=(C, S)),
        "diverging": rng.uniform(size=(C, S)) < 0.3,
        "num_steps": rng.integers(1, 9, size=(C, S)),
    }
    x_test, y_test = X[:5], Y[:5]
    post = Posterior(
        "hmc",
        draws,
        sample_stats={"acceptance_rate": stats["accept_prob"], "diverging": stats["diverging"],
                      "n_steps": stats["num_steps"]},
        predictions=pointwise.chain_predictions(_model(), draws, x_test),
        observed={"y_test": y_test},
    )  # fmt: skip
    want = {p["draws"]: p for p in running_metrics(post, every=1)}
    files = {}
    for bounds in ([0, 3, 6, 7], [0, 1, 5, 7], [0, 7]):
        log = ProgressLog(tmp_path / str(bounds), _model(), x_test, y_test, progress_every=2)
        for k, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:], strict=True), start=1):
            log(k, _segment(draws, stats, lo, hi, 10.0 * k), False)
        lines = log.lines
        assert [p["draws"] for p in lines] == sorted({2, 4, 6, *bounds[1:]})
        for line in lines:
            assert line.keys() == want[line["draws"]].keys() | {"segment", "wall_seconds"}
            for key, value in want[line["draws"]].items():
                assert line[key] == pytest.approx(value, rel=1e-6), key
            end = line["draws"] in bounds  # the segment's time is on its last line only
            assert line["wall_seconds"] == (10.0 * line["segment"] if end else None)
        files[tuple(bounds)] = {p["draws"]: p for p in lines if p["draws"] % 2 == 0}  # 2, 4, 6
        assert (tmp_path / str(bounds) / "progress.jsonl").read_text().count("\n") == len(lines)
    same = [
        {t: {**p, "segment": 0, "wall_seconds": 0} for t, p in f.items()} for f in files.values()
    ]
    assert same[0] == same[1] == same[2]
    np.testing.assert_array_equal(log.predictions_so_far()["mean"], post.predictions["mean"])
    # the default: one line per segment, at its end
    log = ProgressLog(tmp_path / "default", _model(), x_test, y_test)
    for k, (lo, hi) in enumerate([(0, 3), (3, 7)], start=1):
        log(k, _segment(draws, stats, lo, hi, 1.0), False)
    assert [(p["segment"], p["draws"]) for p in log.lines] == [(1, 3), (2, 7)]


def test_warmup_statistics_are_those_numpyro_collects(tmp_path):
    """The warmup line: NumPyro's own warmup statistics (collected with every sample site left
    out, and unthinned) and its adapted step size; the resume rebuilds it from the folder."""
    potential = lambda z: 0.5 * jnp.sum(z["w"] ** 2)  # noqa: E731
    fields = ("accept_prob", "diverging", "num_steps", "adapt_state.step_size")
    plan = MCMCPlan(lambda: HMC(potential_fn=potential, trajectory_length=1.0), 20, 6, 2, 2,
                    fields)  # fmt: skip
    init = {"w": jnp.zeros((2, 3))}
    mcmc = MCMC(plan.kernel(), num_warmup=20, num_samples=6, num_chains=2,
                chain_method="vectorized", progress_bar=False)  # fmt: skip
    mcmc.warmup(jax.random.key(0), init_params=init, extra_fields=fields, collect_warmup=True)
    steps = np.asarray(mcmc.get_extra_fields(group_by_chain=True)["num_steps"])
    accept = np.asarray(mcmc.get_extra_fields(group_by_chain=True)["accept_prob"])
    step_size = np.asarray(mcmc.post_warmup_state.adapt_state.step_size)
    lines = []
    for _ in range(2):  # a fresh run, then a read-back of the finished run
        log = ProgressLog(tmp_path, None)
        with CheckpointStore(tmp_path, {"digest": "demo"}) as store:
            run_segments(plan, jax.random.key(0), (), init, store, 2, log)
        lines.append(log.lines)
    warm = lines[0][0]
    assert steps.shape == (2, 20)
    assert warm["phase"] == "warmup" and warm["iterations"] == 20 and warm["draws"] == 0
    assert warm["grad_evals"] == pytest.approx(steps.sum() / 2)
    assert warm["accept_prob"] == pytest.approx(accept.mean())
    assert warm["step_size"] == pytest.approx(step_size.mean())
    assert warm["wall_seconds"] > 0
    assert lines[1] == lines[0]  # the finished run's file is rebuilt, warmup line included
    assert [p["draws"] for p in lines[0][1:]] == [2, 3]  # sampling is thinned; warmup is not
    log = ProgressLog(tmp_path / "none", None)  # no warmup: nothing to collect, time only
    with CheckpointStore(tmp_path / "none", {"digest": "demo"}) as store:
        run_segments(plan._replace(num_warmup=0), jax.random.key(0), (), init, store, 3, log)
    assert log.lines[0]["iterations"] == 0 and log.lines[0]["grad_evals"] is None


def test_progress_every_is_checked_before_anything_runs(tmp_path):
    c = cfg.HMCConfig(num_warmup=5, num_samples=4)
    with pytest.raises(ValueError, match="progress_every needs a checkpoint_dir"):
        fit(_model(), (X, Y), c, jax.random.key(0), progress_every=2)
    with pytest.raises(ValueError, match="progress_every"):
        fit(_model(), (X, Y), c, jax.random.key(0), checkpoint_dir=tmp_path / "a",
            progress_every=0)  # fmt: skip
    with pytest.raises(TypeError, match="progress_every"):
        fit(_model(), (X, Y), c, jax.random.key(0), checkpoint_dir=tmp_path / "a",
            progress_every=1.5)  # fmt: skip
    assert not (tmp_path / "a").exists()


def test_sgmcmc_lines_count_minibatch_gradients_in_full_batch_units(tmp_path):
    """SG-MCMC reports no n_steps: every step is one gradient over batch_size of the 16 rows,
    so warmup's line counts its steps x 8/16 and each draw (a cycle of 3 steps) 3 x 8/16,
    as running_metrics of the finished Posterior does."""
    c = cfg.SGLDConfig(num_warmup=1, num_samples=2, cycle_length=3, batch_size=8, step_size=1e-5)
    every = {"checkpoint_every": 2, "progress_every": 1}  # one sampling segment: two lines
    post = fit(_model(), (X, Y, X[:5], Y[:5]), c, jax.random.key(0), checkpoint_dir=tmp_path,
               **every)  # fmt: skip
    warm, *lines = map(json.loads, (tmp_path / "progress.jsonl").read_text().splitlines())
    assert warm["iterations"] == 3 and warm["grad_evals"] == pytest.approx(1.5)
    assert [(p["draws"], p["grad_evals"]) for p in lines] == [(1, 1.5), (2, 3.0)]
    assert [p["grad_evals"] for p in running_metrics(post, every=1)] == [1.5, 3.0]

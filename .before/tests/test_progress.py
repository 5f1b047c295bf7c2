"""Running metrics (``bnn_ppl.progress``): the cumulative BMA's test metrics over draws and the
optimisers' loss curves, computed from a finished Posterior."""

from __future__ import annotations

import numpy as np
import pytest

from bnn_ppl.likelihoods import GaussianPrediction
from bnn_ppl.metrics.suite import predictive_metrics
from bnn_ppl.posterior import Posterior
from bnn_ppl.progress import chain_point, running_metrics

RNG = np.random.default_rng(0)
C, S, N, K = 2, 7, 11, 3


@pytest.fixture(autouse=True)
def _fresh_rng():
    """Every test draws the same numbers whatever order the tests run in (xdist)."""
    global RNG
    RNG = np.random.default_rng(0)


# float32 rounding: the points' BMA is a float64 running sum (one pass, programs of one shape),
# predictive_metrics' a float32 mean; the metrics are O(0.1-3) and their terms of one sign, so a
# relative tolerance of ~100 float32 eps is scaled by the summed terms' magnitude
REL = 100 * float(np.finfo(np.float32).eps)


def _assert_same_metrics(point, want):
    got = {k[5:]: v for k, v in point.items() if k.startswith("test_")}
    assert set(got) == set(want)
    for k, v in want.items():
        if k == "accuracy":
            assert got[k] == v
        else:
            assert got[k] == pytest.approx(v, rel=REL), k


def _classifier_posterior(thinning=1):
    probs = RNG.dirichlet(np.ones(K), size=(C, S, N))
    stats = {
        "acceptance_rate": RNG.uniform(size=(C, S)),
        "diverging": RNG.uniform(size=(C, S)) < 0.2,
        "n_steps": RNG.integers(1, 20, size=(C, S)),
    }
    return Posterior(
        "hmc",
        {"w": np.zeros((C, S, 2))},
        sample_stats=stats,
        config={"thinning": thinning},
        predictions={"probs": probs},
        observed={"y_test": RNG.integers(0, K, size=N)},
    )


def test_each_point_is_the_bma_of_the_draws_so_far_and_the_last_is_the_full_bma():
    post = _classifier_posterior()
    points = running_metrics(post, every=3)
    assert [p["draws"] for p in points] == [3, 6, 7]  # the last draw is always a point
    probs, y = post.predictions["probs"], post.observed["y_test"]
    for p in points:
        t = p["draws"]
        want = predictive_metrics(probs[:, :t].reshape(C * t, N, K), y, task="classification")
        _assert_same_metrics(p, want)
        stats = {k: v[:, :t] for k, v in post.sample_stats.items()}
        assert p["accept_prob"] == pytest.approx(stats["acceptance_rate"].mean())
        assert p["divergences"] == int(stats["diverging"].sum())
        assert p["grad_evals"] == pytest.approx(stats["n_steps"].sum() / C)
    full = predictive_metrics(probs.reshape(C * S, N, K), y, task="classification")
    _assert_same_metrics(points[-1], full)
    assert len(running_metrics(post)) == S  # default: about 100 points, at most one per draw


def test_thinned_runs_do_not_claim_gradient_evaluations():
    assert all(p["grad_evals"] is None for p in running_metrics(_classifier_posterior(2)))
    point = chain_point(4)  # nothing known but the draws
    assert point == {"draws": 4, "accept_prob": None, "divergences": None, "grad_evals": None}


def test_sgmcmc_draws_cost_a_cycle_of_minibatch_gradients():
    """No n_steps: a draw is a cycle of 10 steps on 5 of 100 rows, 0.5 full-batch gradients."""
    post = Posterior("sgld", {"w": np.zeros((C, S))}, observed={"y": np.zeros(100)},
                     config={"cycle_length": 10, "batch_size": 5})  # fmt: skip
    assert [p["grad_evals"] for p in running_metrics(post, every=3)] == [1.5, 3.0, 3.5]
    full = post.replace(config={"cycle_length": 10, "batch_size": None})  # full batch
    assert running_metrics(full)[-1]["grad_evals"] == 10.0 * S
    assert running_metrics(post.replace(observed={}))[-1]["grad_evals"] is None  # n unknown


def test_regression_points_use_the_mixture_and_the_targets_scale():
    mean, scale = RNG.normal(size=(C, S, N)), RNG.uniform(0.5, 1.0, size=(C, S, N))
    y = RNG.normal(size=N)
    post = Posterior(
        "sgld",
        {"w": np.zeros((C, S))},
        predictions={"mean": mean, "scale": scale},
        observed={"y_test": y},
    )
    points = running_metrics(post, every=4, y_std=2.5)
    for p in points:  # every point: the mixture of the first t draws of each chain
        t = p["draws"]
        pred = GaussianPrediction(mean[:, :t].reshape(-1, N), scale[:, :t].reshape(-1, N))
        _assert_same_metrics(p, predictive_metrics(pred, y, task="regression", y_std=2.5))
    last = points[-1]
    assert last["accept_prob"] is None and last["divergences"] is None


def test_optimisers_give_their_loss_curves():
    svi = Posterior("svi", {"w": np.zeros((1, 3))}, trace={"loss": np.arange(250.0)})
    points = running_metrics(svi)
    assert [p["step"] for p in points[:2]] == [3, 6] and points[-1] == {"step": 250, "loss": 249}
    losses = np.array([[4.0, 3.0, 2.0], [6.0, 5.0, 1.0]])
    ens = Posterior("ensemble", {"w": np.zeros((2, 1))}, trace={"loss": losses})
    assert running_metrics(ens, every=2) == [
        {"step": 2, "loss": 4.0, "member_losses": [3.0, 5.0]},
        {"step": 3, "loss": 1.5, "member_losses": [2.0, 1.0]},
    ]


def test_bad_arguments_are_refused():
    with pytest.raises(TypeError, match="posterior must be a Posterior"):
        running_metrics({"w": np.zeros((1, 2))})
    with pytest.raises(ValueError, match="every"):
        running_metrics(_classifier_posterior(), every=0)


def _predictions(kind):
    """(chain, draw, ...) predictions of every predictive type, and targets."""
    from bnn_ppl.likelihoods import PoissonPrediction, StudentTPrediction

    shape = (C, S, N)
    if kind == "probs":
        return RNG.dirichlet(np.ones(K), size=shape).astype(np.float32), RNG.integers(0, K, N)
    if kind == "poisson":
        return PoissonPrediction(RNG.uniform(0.5, 4.0, shape)), RNG.integers(0, 6, N)
    if kind == "student_t":
        loc, scale = RNG.normal(size=shape), RNG.uniform(0.5, 1.0, shape)
        return StudentTPrediction(loc, scale, RNG.uniform(1.5, 6.0, shape)), RNG.normal(size=N)
    if kind == "gaussian_2d":
        shape = (C, S, N, 2)
        return GaussianPrediction(RNG.normal(size=shape), RNG.uniform(0.5, 1.0, shape)), (
            RNG.normal(size=(N, 2)))  # fmt: skip
    mean = RNG.normal(size=shape).astype(np.float32)
    scale = RNG.uniform(0.5, 1.0, shape).astype(np.float32)
    return GaussianPrediction(mean, scale), RNG.normal(size=N)


@pytest.mark.parametrize("kind", ["probs", "gaussian", "gaussian_2d", "student_t", "poisson"])
def test_prefix_metrics_are_predictive_metrics_of_every_prefix(kind):
    """The streamed metrics of ``progress.jsonl`` (one pass over the draws, no program per
    prefix length) are predictive_metrics of the first t draws of every chain."""
    from bnn_ppl.likelihoods import prediction_fields, prediction_from_fields
    from bnn_ppl.metrics.suite import flat_draws, prefix_metrics

    pred, y = _predictions(kind)
    task = "classification" if kind == "probs" else "regression"
    points = [1, 3, 4, S]
    got = prefix_metrics(pred, y, points, task=task, y_std=1.7)
    for t, metrics in zip(points, got, strict=True):
        fields = {k: np.asarray(v)[:, :t] for k, v in prediction_fields(pred).items()}
        prefix = flat_draws(prediction_from_fields(fields), chains=True)
        want = predictive_metrics(prefix, y, task=task, y_std=1.7)
        _assert_same_metrics({f"test_{k}": v for k, v in metrics.items()}, want)


def test_prefix_metrics_refuse_diverged_draws():
    pred, y = _predictions("gaussian")
    bad = GaussianPrediction(pred.mean.copy(), pred.scale)
    bad.mean[1, 2, 0] = np.nan
    from bnn_ppl.metrics.suite import prefix_metrics

    with pytest.raises(ValueError, match="the draws diverged"):
        prefix_metrics(bad, y, [S], task="regression")

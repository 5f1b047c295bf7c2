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
        assert {k[5:]: v for k, v in p.items() if k.startswith("test_")} == want
        stats = {k: v[:, :t] for k, v in post.sample_stats.items()}
        assert p["accept_prob"] == pytest.approx(stats["acceptance_rate"].mean())
        assert p["divergences"] == int(stats["diverging"].sum())
        assert p["grad_evals"] == pytest.approx(stats["n_steps"].sum() / C)
    full = predictive_metrics(probs.reshape(C * S, N, K), y, task="classification")
    assert {k[5:]: v for k, v in points[-1].items() if k.startswith("test_")} == full
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
    last = running_metrics(post, every=4, y_std=2.5)[-1]
    pred = GaussianPrediction(mean.reshape(-1, N), scale.reshape(-1, N))
    want = predictive_metrics(pred, y, task="regression", y_std=2.5)
    assert last["test_rmse"] == want["rmse"] and last["test_nll"] == want["nll"]
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

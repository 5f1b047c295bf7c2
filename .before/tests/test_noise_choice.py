"""heldout_noise: the cross-validated RMSE of MAP fits, against what linear regression predicts."""

from __future__ import annotations

import jax
import numpy as np

import bnn_ppl as bp
from bnn_ppl.inference import heldout_noise, map_estimate
from bnn_ppl.models import MLP


def _linear(n: int, p: int, sigma: float, seed: int) -> tuple[bp.BNN, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, p)).astype(np.float32)
    y = (x @ rng.normal(size=p) + sigma * rng.normal(size=n)).astype(np.float32)
    model = bp.BNN(MLP(hidden=(), out=1), bp.priors.Normal(10.0), bp.likelihoods.Gaussian())
    return model, x, y


def test_the_heldout_rmse_is_the_noise_plus_the_fits_own_error():
    # Least squares with p inputs fitted on m rows predicts a new row with expected squared
    # error sigma^2 (1 + p/m) (Gaussian inputs: p/(m - p - 1)); the pooled mean of n such
    # squares has relative sd sqrt(2/n), so 4 of those is the tolerance (a wide prior: MAP is
    # least squares to well within it).
    n, p, sigma, folds = 400, 3, 0.5, 5
    model, x, y = _linear(n, p, sigma, seed=0)
    choice = heldout_noise(model, x, y, folds=folds, num_steps=2000, learning_rate=0.05)
    m = n - n // folds
    expected = sigma**2 * (1 + p / (m - p - 1))
    assert abs(choice.rmse**2 / expected - 1) < 4 * np.sqrt(2 / n), (choice.rmse, expected)
    assert choice.noise == 0.5
    assert choice.fold_rmse.shape == (folds,)
    # the pooled figure is the root of the folds' mean squares, weighted by their rows
    sizes = np.array([len(r) for r in np.array_split(np.arange(n), folds)])
    pooled = np.sqrt(np.sum(sizes * choice.fold_rmse**2) / n)
    assert abs(pooled - choice.rmse) <= 1e-6 * choice.rmse
    assert choice.record()["noise"] == choice.noise
    assert choice.record()["fold_rmse"] == [float(r) for r in choice.fold_rmse]


def test_rows_are_predicted_by_fits_that_did_not_see_them():
    # 24 inputs on 60 rows: the training residual of a fit on all rows is far below sigma
    # (expected sigma^2 (1 - p/n) = 0.6 sigma^2), the held-out error far above it (sigma^2 (1 +
    # p/(m - p - 1)) = 2.0 sigma^2): the two rules of choosing the noise the README compares.
    n, p, sigma = 60, 24, 1.0
    model, x, y = _linear(n, p, sigma, seed=1)
    kw = {"num_steps": 3000, "learning_rate": 0.05}
    fit = map_estimate(model, x, y, rng_key=jax.random.key(0), **kw)
    draws = {k: v[None, None] for k, v in fit.params.items()}
    train_rmse = float(bp.metrics.rmse(np.asarray(bp.predict(model, draws, x).mean).ravel(), y))
    choice = heldout_noise(model, x, y, folds=5, **kw)
    assert train_rmse < 0.9 * sigma < 1.1 * sigma < choice.rmse, (train_rmse, choice.rmse)


def test_same_key_same_choice_and_the_key_matters():
    model, x, y = _linear(80, 2, 0.3, seed=2)
    kw = {"folds": 4, "num_steps": 300, "learning_rate": 0.05}
    a = heldout_noise(model, x, y, rng_key=jax.random.key(3), **kw)
    b = heldout_noise(model, x, y, rng_key=jax.random.key(3), **kw)
    c = heldout_noise(model, x, y, rng_key=jax.random.key(4), **kw)
    np.testing.assert_array_equal(a.fold_rmse, b.fold_rmse)
    assert not np.array_equal(a.fold_rmse, c.fold_rmse)  # other folds

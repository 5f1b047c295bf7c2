"""Predictive: per-sample predictions, chunking, chain flattening, BMA."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import pytest
from tolerances import assert_sums_close

import bnn_ppl as bp
from bnn_ppl.models import MLP


def _draws(model, x, s=6):
    return jax.vmap(lambda k: model.init(k, x))(jax.random.split(jax.random.key(0), s))


def test_classification_predict_matches_direct_softmax_for_any_chunking():
    x = np.random.default_rng(0).normal(size=(23, 4)).astype(np.float32)
    model = bp.BNN(MLP(hidden=(5,), out=3), bp.priors.Normal(0.5), bp.likelihoods.Categorical())
    draws = _draws(model, x)
    want = jnp.stack(
        [jax.nn.softmax(model.apply({k: v[i] for k, v in draws.items()}, x)) for i in range(6)]
    )
    for chunk, schunk in [(None, None), (5, 1), (23, 4), (100, 6)]:
        got = bp.predict(model, draws, x, chunk_size=chunk, sample_chunk_size=schunk)
        assert got.shape == (6, 23, 3)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bp.bma(got), want.mean(0), rtol=1e-5)


def test_chain_axis_is_flattened_and_bad_samples_are_explained():
    x = np.zeros((4, 2), np.float32)
    model = bp.BNN(MLP(hidden=(), out=2), bp.priors.Normal(1.0), bp.likelihoods.Categorical())
    draws = _draws(model, x, s=6)
    grouped = jax.tree.map(lambda a: a.reshape(2, 3, *a.shape[1:]), draws)
    np.testing.assert_allclose(bp.predict(model, grouped, x), bp.predict(model, draws, x))
    with pytest.raises(ValueError, match=r"samples lack sites \['Dense_0.bias'\]"):
        bp.predict(model, {"Dense_0.kernel": draws["Dense_0.kernel"]}, x)
    with pytest.raises(ValueError, match="expected \\(num_samples"):
        bp.predict(model, {**draws, "Dense_0.bias": jnp.zeros((6, 3))}, x)
    with pytest.raises(ValueError, match="NaN"):
        bp.predict(model, draws, np.full((4, 2), np.nan))


def test_regression_predict_and_bma_moments():
    x = np.random.default_rng(1).normal(size=(9, 3)).astype(np.float32)
    model = bp.BNN(
        MLP(hidden=(4,), out=1),
        bp.priors.Normal(1.0),
        bp.likelihoods.Gaussian(scale=dist.HalfNormal(1.0)),
    )
    draws = _draws(model, x, s=5)
    pred = bp.predict(model, draws, x, chunk_size=4)
    assert pred.mean.shape == (5, 9) and pred.scale.shape == (5, 9)
    np.testing.assert_allclose(pred.scale[:, 0], draws["noise_scale"], rtol=1e-6)
    mix = bp.bma(pred)
    # moment-match of the equal-weight mixture, by brute force
    m, s = np.asarray(pred.mean, np.float64), np.asarray(pred.scale, np.float64)
    want_var = (s**2 + m**2).mean(0) - m.mean(0) ** 2
    # float32 sums over 5 samples whose terms cancel: means of either sign, and a variance
    # that is a difference of second moments (tests/tolerances.py)
    assert_sums_close(mix.mean, m.mean(0), np.abs(m).mean(0), 5)
    var_terms = (s**2 + m**2).mean(0) + m.mean(0) ** 2
    assert_sums_close(np.asarray(mix.scale, np.float64) ** 2, want_var, var_terms, 2 * 5 + 1)

"""Baselines: mean-field SVI, MAP and deep ensembles, checked against the conjugate answers."""

from __future__ import annotations

import jax
import numpy as np
import optax
import pytest
from conjugate import closed_form, data, linear_model, theta

import bnn_ppl as bp
from bnn_ppl.inference import deep_ensemble, map_estimate, svi_mean_field
from bnn_ppl.models import MLP

STEPS = 4000


def _fit_svi(model, x, y, seed, **kw):
    opt = optax.adam(optax.cosine_decay_schedule(0.05, STEPS, alpha=1e-3))
    return svi_mean_field(model, x, y, num_steps=STEPS, optimizer=opt, num_particles=16,
                          rng_key=jax.random.key(seed), **kw)


def _assert_converged(losses):
    """The ELBO trace has flattened: its last two windows differ by << its noise."""
    last, before = np.asarray(losses[-500:]), np.asarray(losses[-1000:-500])
    assert abs(last.mean() - before.mean()) < 0.25 * last.std() + 1e-6


@pytest.mark.parametrize(
    "temperature,temper", [(1.0, "likelihood"), (0.5, "likelihood"), (0.5, "posterior")]
)
def test_svi_finds_the_optimal_mean_field_gaussian(temperature, temper):
    """The best mean-field Gaussian of a Gaussian posterior N(μ, Λ⁻¹) has mean μ and variances
    1/diag(Λ). Two seeds measure the optimiser's end-of-run noise (≈ 0.02 posterior sd); the
    tolerance (0.05 sd for means, 3% for scales) is asserted to exceed it comfortably."""
    x, y = data()
    model = linear_model(temperature, temper)
    mean, cov = closed_form(x, y, temperature, temper)
    sd_mf = 1.0 / np.sqrt(np.diag(np.linalg.inv(cov)))
    fits = [_fit_svi(model, x, y, seed) for seed in (0, 1)]
    got_means = [theta(f.means()) for f in fits]
    got_scales = [theta(f.scales()) for f in fits]
    for f in fits:
        _assert_converged(f.losses)
    spread = np.abs(got_means[0] - got_means[1]) / sd_mf
    assert spread.max() < 0.025  # optimiser noise, well inside the tolerance below
    for m, s in zip(got_means, got_scales, strict=True):
        np.testing.assert_array_less(np.abs(m - mean) / sd_mf, 0.05)
        np.testing.assert_array_less(np.abs(s / sd_mf - 1.0), 0.03)
    # the mean-field variances are NOT the marginal variances (those are larger): a check
    # against diag(cov) would fail, so the test tells the two apart
    assert np.max(np.abs(got_scales[0] / np.sqrt(np.diag(cov)) - 1.0)) > 0.05


def test_minibatch_svi_scales_the_likelihood_by_n_over_b():
    x, y = data(n=60)
    mean, cov = closed_form(x, y)
    sd_mf = 1.0 / np.sqrt(np.diag(np.linalg.inv(cov)))
    fit = _fit_svi(linear_model(), x, y, 0, batch_size=15)
    # unscaled minibatches would give scales sqrt(60/15) = 2x too large
    np.testing.assert_array_less(np.abs(theta(fit.scales()) / sd_mf - 1.0), 0.15)
    np.testing.assert_array_less(np.abs(theta(fit.means()) - mean) / sd_mf, 0.3)


def test_svi_draws_feed_predict_and_init_from_map():
    x, y = data()
    m = map_estimate(linear_model(), x, y, num_steps=500, learning_rate=0.05)
    fit = svi_mean_field(linear_model(), x, y, num_steps=10, init_loc=m.params, init_scale=1e-3)
    # 10 small steps from the MAP: the means are still close to it
    np.testing.assert_allclose(theta(fit.means()), theta(m.params), atol=0.05)
    draws = fit.sample_posterior(jax.random.key(0), 7)
    assert draws["Dense_0.kernel"].shape == (7, 2, 1)
    assert bp.predict(linear_model(), draws, x).mean.shape == (7, 30)
    with pytest.raises(ValueError, match="init_loc lacks sites"):
        svi_mean_field(linear_model(), x, y, num_steps=10, init_loc={"Dense_0.bias": 0.0})
    with pytest.raises(ValueError, match="batch_size"):
        svi_mean_field(linear_model(), x, y, num_steps=10, batch_size=31)
    # the old name still works, with a DeprecationWarning; both names at once is an error
    with pytest.warns(DeprecationWarning, match="minibatch_size is renamed batch_size"):
        with pytest.raises(ValueError, match="batch_size=31"):
            svi_mean_field(linear_model(), x, y, num_steps=10, minibatch_size=31)
    with pytest.raises(ValueError, match="pass batch_size alone"):
        svi_mean_field(linear_model(), x, y, num_steps=10, batch_size=2, minibatch_size=2)
    with pytest.raises(ValueError, match="init_scale"):
        svi_mean_field(linear_model(), x, y, num_steps=10, init_scale=0.0)


@pytest.mark.parametrize("temperature,temper", [(1.0, "likelihood"), (0.5, "posterior")])
def test_map_is_the_posterior_mode(temperature, temper):
    x, y = data()
    mean, cov = closed_form(x, y, temperature, temper)
    sd = np.sqrt(np.diag(cov))
    full = map_estimate(linear_model(temperature, temper), x, y, num_steps=2000,
                        learning_rate=0.05)
    np.testing.assert_array_less(np.abs(theta(full.params) - mean) / sd, 1e-3)
    mini = map_estimate(
        linear_model(temperature, temper), x, y, num_steps=3000, batch_size=10,
        optimizer=optax.adam(optax.cosine_decay_schedule(0.05, 3000, alpha=1e-3)),
    )
    np.testing.assert_array_less(np.abs(theta(mini.params) - mean) / sd, 0.1)
    assert float(mini.final_loss) == pytest.approx(float(full.final_loss), abs=0.05)


def test_deep_ensemble_members_differ_and_each_reaches_its_map_loss():
    d = bp.data.load("digits")
    x, y = d.x_train[:300], d.y_train[:300]
    model = bp.BNN(MLP(hidden=(8,), out=10), bp.priors.Normal(0.3), bp.likelihoods.Categorical())
    key = jax.random.key(3)
    kw = dict(num_steps=300, learning_rate=0.02)
    ens = deep_ensemble(model, x, y, 3, rng_key=key, **kw)
    assert ens.params["Dense_0.kernel"].shape == (3, 64, 8) and ens.losses.shape == (3, 300)
    k = np.asarray(ens.params["Dense_0.kernel"]).reshape(3, -1)
    assert np.min([np.abs(k[i] - k[j]).max() for i in range(3) for j in range(i)]) > 0.1
    for i, member_key in enumerate(jax.random.split(key, 3)):
        single = map_estimate(model, x, y, rng_key=member_key, **kw)
        np.testing.assert_allclose(ens.final_loss[i], single.final_loss, rtol=1e-4)
        assert float(ens.losses[i, -1]) < 0.5 * float(ens.losses[i, 0])  # it trained
    probs = bp.predict(model, ens.params, d.x_test)
    assert probs.shape == (3, 360, 10)
    assert float(bp.metrics.accuracy(bp.bma(probs), d.y_test)) > 0.8


def test_baseline_argument_errors():
    x, y = data()
    with pytest.raises(ValueError, match="num_members"):
        deep_ensemble(linear_model(), x, y, 0)
    with pytest.raises(ValueError, match="num_steps"):
        map_estimate(linear_model(), x, y, num_steps=0)
    with pytest.raises(ValueError, match="NaN"):
        map_estimate(linear_model(), np.full_like(x, np.nan), y)
    with pytest.raises(TypeError, match="BNN"):
        svi_mean_field(None, x, y)

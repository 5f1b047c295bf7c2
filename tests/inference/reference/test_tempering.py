"""Parallel tempering: every rung samples its tempered posterior, and the β = 1 rung crosses
between modes that plain HMC cannot leave.

Known answers: conjugate regression (``tests/conjugate.py``), whose likelihood-tempered
posterior at every β is Gaussian in closed form; and a one-unit tanh network, whose posterior is
exactly symmetric under the sign flip of the unit's weights, so half its mass has a positive
output weight. Tolerances come from Monte Carlo standard errors (ESS over the chains).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conjugate import assert_matches_gaussian, closed_form, data, linear_model
from flax import linen as nn
from numpyro.diagnostics import effective_sample_size
from numpyro.infer import MCMC

import bnn_ppl as bp
from bnn_ppl.inference import full_batch_potential, hmc
from bnn_ppl.inference.reference.tempering import (
    ParallelTempering,
    geometric_ladder,
    respaced_ladder,
)
from bnn_ppl.models import MLP
from bnn_ppl.validation import InputTypeError, InputValueError


def _run(pot, kernel, num_warmup, num_samples, num_chains, key, fields=()):
    mcmc = MCMC(kernel, num_warmup=num_warmup, num_samples=num_samples, num_chains=num_chains,
                chain_method="vectorized", progress_bar=False, jit_model_args=True)  # fmt: skip
    mcmc.run(jax.random.key(key), *pot.args, extra_fields=fields)
    return mcmc


@pytest.mark.statistical
def test_every_rung_samples_its_tempered_conjugate_posterior():
    x, y = data()
    pot = full_batch_potential(linear_model(), x, y)
    kernel = ParallelTempering(pot, betas=geometric_ladder(4, 0.05), num_steps=6, step_size=0.1)
    mcmc = _run(pot, kernel, 300, 1500, 2, 0, fields=("positions", "swap_rate", "betas"))
    extra = mcmc.get_extra_fields(group_by_chain=True)
    # the flat order is the sites' sorted order: bias, kernel[0], kernel[1]
    flat = np.asarray(extra["positions"], np.float64)
    betas = np.asarray(extra["betas"])  # each ladder respaced in warmup, then fixed
    assert np.all(betas[:, 150:] == betas[:, -1:])  # fixed in sampling
    np.testing.assert_allclose(betas[:, -1, [0, -1]], [[1.0, 0.05]] * 2, rtol=1e-6)
    for chain in range(2):
        for k, beta in enumerate(betas[chain, -1]):
            mean, cov = closed_form(x, y, temperature=1.0 / float(beta))
            assert_matches_gaussian(flat[chain : chain + 1, :, k][..., [1, 2, 0]], mean, cov)
    # z is the β = 1 rung, constrained by MCMC's postprocess_fn into the sites
    samples = mcmc.get_samples(group_by_chain=True)
    np.testing.assert_array_equal(samples["Dense_0.bias"][..., 0], flat[:, :, 0, 0])
    assert np.all(np.asarray(mcmc.get_extra_fields()["swap_rate"])[-1] > 0.2)


def _symmetric_problem():
    x = np.linspace(-1, 1, 40, dtype=np.float32)[:, None]
    y = (2 * np.tanh(3 * x[:, 0]) + 0.1 * np.random.default_rng(0).normal(size=40)).astype(
        np.float32
    )
    model = bp.BNN(MLP(hidden=(1,), out=1, activation=nn.tanh), bp.priors.Normal(2.0),
                   bp.likelihoods.Gaussian(scale=0.1))  # fmt: skip
    return model, x, y


def _sign_draws(num_samples, num_chains, key):
    model, x, y = _symmetric_problem()
    pot = full_batch_potential(model, x, y)
    kernel = ParallelTempering(pot, num_temperatures=8, min_beta=1e-3, num_steps=8)
    mcmc = _run(pot, kernel, 300, num_samples, num_chains, key, fields=("swap_rate",))
    w = np.asarray(mcmc.get_samples(group_by_chain=True)["Dense_1.kernel"])[..., 0, 0]
    return (w > 0).astype(np.float64), np.asarray(mcmc.get_extra_fields()["swap_rate"])[-1]


def test_the_beta_one_rung_takes_both_signs_of_a_symmetric_posterior():
    # flipping the unit's weights and bias (tanh is odd) leaves the posterior as it is; the two
    # signs of the output weight are ~5,000 nats apart (the fit at an output weight of 0),
    # which an HMC chain never crosses (the slow test below shows it), while the β = 1 rung
    # takes both from hotter rungs
    positive, swap_rate = _sign_draws(300, 2, 1)
    assert np.all(positive.min(axis=1) == 0) and np.all(positive.max(axis=1) == 1)
    assert np.all(swap_rate > 0.1)


@pytest.mark.slow
@pytest.mark.statistical
def test_the_beta_one_rung_visits_both_signs_of_a_symmetric_posterior_as_often():
    # half the posterior mass has a positive output weight (the symmetry above); the switches
    # come from swaps, so the sign's ESS is far below the draws' (20-60 of 4,000 measured)
    model, x, y = _symmetric_problem()
    stuck = hmc(model, x, y, rng_key=jax.random.key(0), num_warmup=200, num_samples=500,
                num_chains=2, chain_method="vectorized")  # fmt: skip
    signs = np.sign(np.asarray(stuck.get_samples(group_by_chain=True)["Dense_1.kernel"]))
    assert np.all(signs == signs[:, :1]), "plain HMC crossed: the test proves nothing"
    positive, _ = _sign_draws(2000, 4, 1)
    ess = float(effective_sample_size(positive))
    assert ess > 10, f"ESS of the sign {ess:.0f}: the rungs do not carry states across"
    mcse = np.sqrt(0.25 / ess)
    assert abs(positive.mean() - 0.5) < 4.5 * mcse, (positive.mean(), mcse, ess)


def test_a_respaced_ladder_equalises_the_swap_rejection_between_neighbours():
    betas = jnp.asarray(geometric_ladder(5, 1e-3))
    rates = jnp.array([0.0, 0.0, 0.9, 0.9])  # the two gaps next to beta = 1 reject every swap
    new = np.asarray(respaced_ladder(betas, rates), np.float64)
    assert new[0] == 1.0 and new[-1] == pytest.approx(1e-3) and np.all(np.diff(new) < 0)
    # the cumulative rejection, piecewise linear in log beta, at the new rungs: equal steps
    reject = 1.0 - np.asarray(rates) + 1e-3
    barrier = np.concatenate([[0.0], np.cumsum(reject)])
    at = np.interp(-np.log(new), -np.log(np.asarray(betas, np.float64)), barrier)
    np.testing.assert_allclose(np.diff(at), barrier[-1] / 4, rtol=1e-4)
    assert new[1] > betas[1] and new[2] > betas[2]  # rungs moved into the rejecting gaps


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        ({"betas": [0.5, 0.1]}, InputValueError, "start at 1"),
        ({"betas": [1.0, 0.5, 0.5]}, InputValueError, "fall strictly"),
        ({"betas": [1.0, 0.0]}, InputValueError, "above 0"),
        ({"betas": [1.0]}, InputValueError, "2 or more"),
        ({"min_beta": 1.5}, InputValueError, "min_beta must be below 1"),
        ({"num_temperatures": 1}, InputValueError, "num_temperatures"),
        ({"num_steps": 0}, InputValueError, "num_steps"),
        ({"step_size": -1.0}, InputValueError, "step_size"),
        ({"target_accept_prob": 1.0}, InputValueError, "target_accept_prob"),
    ],
)
def test_bad_settings_are_refused_naming_them(kwargs, error, match):
    x, y = data()
    with pytest.raises(error, match=match):
        ParallelTempering(full_batch_potential(linear_model(), x, y), **kwargs)


def test_a_potential_function_is_refused_for_a_full_batch_potential():
    with pytest.raises(InputTypeError, match="FullBatchPotential"):
        ParallelTempering(lambda z: 0.0)  # type: ignore[arg-type]

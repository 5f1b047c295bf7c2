"""Optimised starts of a reference run (``init_steps``): prior draws moved by Adam first."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from conjugate import closed_form, data, linear_model, theta

from bnn_ppl.inference import full_batch_potential
from bnn_ppl.inference.reference import chains as chain_starts
from bnn_ppl.inference.reference.chains import Starts, optimised_starts, starts_from_arrays


def test_starts_far_out_in_the_prior_are_brought_to_the_posterior_mode():
    """Starts 50 prior sds out (potential ~10^5 above the mode) end at the conjugate
    posterior's mode (its mean), every chain from its own start, within a small fraction of
    the posterior sd; the potentials recorded are the potential at the start and at the end."""
    x, y = data()
    pot = full_batch_potential(linear_model(), x, y)
    draws = pot.init_params(jax.random.key(0), 4, method="prior")
    far = jax.tree.map(lambda a: a + 50.0 * np.sign(a), draws)  # every weight > 50 sd out
    starts = optimised_starts(pot, far, steps=3000, learning_rate=0.2)
    mean, cov = closed_form(x, y)
    sd = np.sqrt(np.diag(cov))
    got = theta(pot.postprocess_fn(starts.params))  # (chains, 3)
    assert got.shape == (4, 3)
    assert np.all(np.abs(got - mean) < 0.05 * sd), (got - mean) / sd
    before = np.asarray(jax.vmap(pot.potential_fn)(far))
    after = np.asarray(jax.vmap(pot.potential_fn)(starts.params))
    np.testing.assert_allclose(starts.prior_potential, before, rtol=1e-6)
    # (float32 sums: the tolerance scales with the magnitude of the summed terms)
    scale = np.abs(pot.log_likelihood(jax.tree.map(lambda a: a[0], starts.params)))
    np.testing.assert_allclose(starts.potential, after, atol=1e-5 * max(float(scale), 1.0))
    assert np.all(before > 1e4 + after)


def test_the_starts_figures_round_trip_through_arrays_and_none_without_them():
    s = Starts(None, np.array([3.0, 4.0]), np.array([1.0, 2.0]), 7, 0.01)
    back = starts_from_arrays({"time/seconds": np.asarray(1.0), **s.arrays()})
    assert back.record() == s.record() == {
        "steps": 7, "learning_rate": 0.01, "gradients": 14,
        "prior_potential": [3.0, 4.0], "potential": [1.0, 2.0],
    }  # fmt: skip
    assert starts_from_arrays({"time/seconds": np.asarray(1.0)}) is None


def test_a_diverged_optimisation_is_an_error_naming_the_chain_and_the_fix(monkeypatch):
    """Starts that end at a non-finite potential are never handed to HMC."""
    x, y = data()
    pot = full_batch_potential(linear_model(), x, y)
    draws = pot.init_params(jax.random.key(0), 3, method="prior")
    fitter = chain_starts.unconstrained_fitter

    def diverging(pot_, optimizer, steps, batch):
        fit = fitter(pot_, optimizer, steps, batch)

        def f(key, u0, data_):
            res = fit(key, u0, data_)
            bad = jax.numpy.where(u0["Dense_0.bias"][0] > 0, jax.numpy.nan, res.final_loss)
            return res._replace(final_loss=bad)

        return f

    monkeypatch.setattr(chain_starts, "unconstrained_fitter", diverging)
    first = np.asarray(draws["Dense_0.bias"][:, 0])
    with pytest.raises(FloatingPointError, match="lower init_learning_rate") as err:
        optimised_starts(pot, draws, steps=10, learning_rate=0.1)
    assert f"chain(s) {np.flatnonzero(first > 0).tolist()} diverged" in str(err.value)

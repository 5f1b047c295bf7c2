"""Weight- and function-space diagnostics: R-hat/ESS through ArviZ, summaries, InferenceData."""

from __future__ import annotations

import arviz as az
import jax
import numpy as np
import pytest

import bnn_ppl as bp
from bnn_ppl.diagnostics import function_space, sampler_summary, to_inference_data, weight_space
from bnn_ppl.models import MLP


def _draws(shift=0.0, seed=0):
    rng = np.random.default_rng(seed)
    k = rng.normal(size=(4, 400, 3, 2)) * 0.5
    b = rng.normal(size=(4, 400, 2)) * 0.5
    # shift one output unit of chain 0 (shifting both logits alike would leave softmax unchanged)
    k[0, ..., 0] += shift
    b[0, :, 0] += shift
    return {"Dense_0.kernel": k.astype(np.float32), "Dense_0.bias": b.astype(np.float32)}


def test_weight_space_rhat_detects_a_shifted_chain_and_equals_arviz():
    good, bad = weight_space(_draws()), weight_space(_draws(shift=3.0))
    assert good.all_rhat().max() < 1.01 and good.fraction_above(1.01) == 0.0
    assert bad.fraction_above(1.1) == 0.5  # the shifted unit's weights, not the other's
    d = _draws(shift=0.3)
    got = weight_space(d)
    flat = d["Dense_0.kernel"].reshape(4, 400, -1).astype(np.float64)
    np.testing.assert_allclose(got.rhat["Dense_0.kernel"].ravel(), az.rhat(flat, method="rank"))
    np.testing.assert_allclose(got.ess_bulk["Dense_0.kernel"].ravel(), az.ess(flat, method="bulk"))
    np.testing.assert_allclose(
        got.ess_tail["Dense_0.kernel"].ravel(), az.ess(flat, method="tail", prob=(0.05, 0.95))
    )
    (layer,) = got.summary()
    assert layer.name == "Dense_0" and layer.size == 8
    assert set(layer.frac_above) == {1.01, 1.05, 1.1}
    assert "Dense_0" in got.table()


def test_function_space_rhat_on_predictions():
    model = bp.BNN(MLP(hidden=(), out=2), bp.priors.Normal(1.0), bp.likelihoods.Categorical())
    x = np.random.default_rng(1).normal(size=(10, 3)).astype(np.float32)
    good = function_space(model, _draws(), x, chunk_size=4)
    assert good.rhat["predictive"].shape == (10, 2)
    assert good.all_rhat().max() < 1.01
    bad = function_space(model, _draws(shift=3.0), x, chunk_size=4)
    assert bad.fraction_above(1.1) > 0.5
    # chunking does not change the answer
    whole = function_space(model, _draws(shift=3.0), x, chunk_size=None)
    np.testing.assert_allclose(whole.rhat["predictive"], bad.rhat["predictive"], rtol=1e-6)


def test_regression_function_space_uses_predictive_means():
    model = bp.BNN(MLP(hidden=(), out=1), bp.priors.Normal(1.0), bp.likelihoods.Gaussian(0.5))
    d = {
        "Dense_0.kernel": _draws()["Dense_0.kernel"][..., :1],
        "Dense_0.bias": _draws()["Dense_0.bias"][..., :1],
    }
    out = function_space(model, d, np.ones((5, 3), np.float32))
    assert out.rhat["predictive"].shape == (5,)


def test_bad_diagnostic_inputs():
    with pytest.raises(ValueError, match="group_by_chain=True"):
        weight_space({"w": np.zeros(10)})
    with pytest.raises(ValueError, match=">= 4"):
        weight_space({"w": np.zeros((2, 3))})
    with pytest.raises(ValueError, match="NaN"):
        weight_space({"w": np.full((2, 10), np.nan)})
    with pytest.raises(ValueError, match="empty"):
        weight_space({})


def test_inference_data_and_sampler_summary_from_a_real_run():
    from conjugate import data, linear_model

    x, y = data()
    mcmc = bp.inference.hmc(
        linear_model(), x, y, num_warmup=50, num_samples=40, num_chains=2, rng_key=jax.random.key(0)
    )
    idata = to_inference_data(mcmc, linear_model(), x)
    assert "Dense_0.kernel" in idata["posterior"].data_vars
    assert idata["function_space"]["mean"].shape[:3] == (2, 40, 30)
    rows = sampler_summary(mcmc)
    assert [r["chain"] for r in rows] == [0, 1]
    assert all(0.0 <= r["accept_prob"] <= 1.0 and r["step_size"] > 0 for r in rows)
    ws = weight_space(mcmc.get_samples(group_by_chain=True))
    assert set(ws.rhat) == {"Dense_0.kernel", "Dense_0.bias"}

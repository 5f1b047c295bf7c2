"""Weight- and function-space diagnostics: R-hat/ESS through ArviZ, summaries, InferenceData.

R-hat is checked against an implementation of Vehtari et al. (2021) written here from the paper
(NumPy + SciPy), not against ArviZ itself, on chains whose answer is known.
"""

from __future__ import annotations

import arviz as az
import jax
import numpy as np
import pytest
import scipy.stats

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


# ------------------------------------------------------------------ an independent R-hat
def _rank_normalise(a):
    """Vehtari et al. (2021), eq. 14: z = Φ⁻¹((r - 3/8) / (S + 1/4)), ranks r over all S draws
    pooled (average ranks for ties)."""
    r = scipy.stats.rankdata(a, method="average").reshape(a.shape)
    return scipy.stats.norm.ppf((r - 0.375) / (a.size + 0.25))


def _split_rhat(a):
    """Split-R-hat (Gelman et al. BDA3, eqs. 11.2-11.4) of ``(chains, draws)``, draws even."""
    m, n = a.shape
    halves = a.reshape(2 * m, n // 2)
    n = n // 2
    between = n * np.var(halves.mean(axis=1), ddof=1)
    within = np.mean(np.var(halves, axis=1, ddof=1))
    var_plus = (n - 1) / n * within + between / n
    return np.sqrt(var_plus / within)


def reference_rhat(a):
    """Rank-normalised split R-hat of one quantity ``(chains, draws)``: the larger of the bulk
    R-hat (rank-normalised draws) and the tail R-hat (rank-normalised folded draws
    ``|θ - median θ|``), Vehtari et al. (2021) section 4.3. Written from the paper, in float64,
    sharing no code with ArviZ."""
    a = np.asarray(a, np.float64)
    bulk = _split_rhat(_rank_normalise(a))
    tail = _split_rhat(_rank_normalise(np.abs(a - np.median(a))))
    return max(bulk, tail)


def _reference(draws):
    """``reference_rhat`` of every entry of a ``(chains, draws, *shape)`` array."""
    flat = np.asarray(draws, np.float64).reshape(draws.shape[0], draws.shape[1], -1)
    return np.array([reference_rhat(flat[:, :, i]) for i in range(flat.shape[2])])


def test_weight_space_rhat_equals_an_independent_implementation_of_the_paper():
    """Same-distribution chains: R-hat ≈ 1; a shifted chain: R-hat >> 1; a chain 3x wider (same
    mean): only the tail (folded) R-hat sees it. Ours must equal the reference in every case
    (both in float64 on the same draws: to rounding)."""
    good, shifted = _draws(), _draws(shift=0.3)
    wide = _draws(seed=2)
    wide["Dense_0.kernel"][1] *= 3.0
    for d in (good, shifted, wide, _draws(shift=3.0)):
        got = weight_space(d)
        for site, draws in d.items():
            np.testing.assert_allclose(got.rhat[site].ravel(), _reference(draws), rtol=1e-10)
    assert _reference(good["Dense_0.kernel"]).max() < 1.01
    ref_shifted = _reference(shifted["Dense_0.kernel"]).reshape(3, 2)
    assert ref_shifted[:, 0].min() > 1.01 and ref_shifted[:, 1].max() < 1.01  # only unit 0
    assert _reference(_draws(shift=3.0)["Dense_0.kernel"]).reshape(3, 2)[:, 0].min() > 1.5
    # the wide chain: the bulk R-hat alone would pass it, the folded one does not
    flat = wide["Dense_0.kernel"].reshape(4, 400, -1).astype(np.float64)
    bulk = [_split_rhat(_rank_normalise(flat[:, :, i])) for i in range(6)]
    assert max(bulk) < 1.05 and _reference(wide["Dense_0.kernel"]).min() > 1.1


def test_weight_space_rhat_detects_a_shifted_chain_and_summarises():
    good, bad = weight_space(_draws()), weight_space(_draws(shift=3.0))
    assert good.all_rhat().max() < 1.01 and good.fraction_above(1.01) == 0.0
    assert bad.fraction_above(1.1) == 0.5  # the shifted unit's weights, not the other's
    d = _draws(shift=0.3)
    got = weight_space(d)
    # our ESS passes the right arguments to ArviZ (flattening, tail quantiles)
    flat = d["Dense_0.kernel"].reshape(4, 400, -1).astype(np.float64)
    np.testing.assert_allclose(got.ess_bulk["Dense_0.kernel"].ravel(), az.ess(flat, method="bulk"))
    np.testing.assert_allclose(
        got.ess_tail["Dense_0.kernel"].ravel(), az.ess(flat, method="tail", prob=(0.05, 0.95))
    )
    (layer,) = got.summary()
    assert layer.name == "Dense_0" and layer.size == 8
    assert set(layer.frac_above) == {1.01, 1.05, 1.1}
    assert "Dense_0" in got.table()


def test_ess_knows_independent_from_autocorrelated_draws():
    """Known answers: independent draws have ESS ≈ the number of draws; an AR(1) chain with
    coefficient ρ has ESS ≈ S (1 - ρ) / (1 + ρ) (= S / 19 for ρ = 0.9). Bounds are wide (the
    estimator's spread over seeds is a few percent for these sizes) but a wrong ESS — the raw
    draw count, or one ignoring autocorrelation — fails them."""
    rng = np.random.default_rng(5)
    chains, n, rho = 4, 4000, 0.9
    iid = rng.normal(size=(chains, n, 1))
    ar = np.empty((chains, n, 1))
    ar[:, 0] = rng.normal(size=(chains, 1))
    for t in range(1, n):
        ar[:, t] = rho * ar[:, t - 1] + np.sqrt(1 - rho**2) * rng.normal(size=(chains, 1))
    s = chains * n
    ess_iid = float(weight_space({"w": iid}).ess_bulk["w"][0])
    ess_ar = float(weight_space({"w": ar}).ess_bulk["w"][0])
    assert 0.85 * s < ess_iid < 1.15 * s
    want = s * (1 - rho) / (1 + rho)
    assert 0.7 * want < ess_ar < 1.4 * want


def _chunked_probs(model, d, x, chunk):
    """bp.predict over chunks of inputs, as function_space computes it: (chains, draws, n, K)."""
    parts = [np.asarray(bp.predict(model, d, x[i : i + chunk])) for i in range(0, len(x), chunk)]
    return np.concatenate(parts, axis=1).reshape(4, 400, len(x), -1)


def test_function_space_rhat_on_predictions():
    model = bp.BNN(MLP(hidden=(), out=2), bp.priors.Normal(1.0), bp.likelihoods.Categorical())
    x = np.random.default_rng(1).normal(size=(10, 3)).astype(np.float32)
    good = function_space(model, _draws(), x, chunk_size=4)
    assert good.rhat["predictive"].shape == (10, 2)
    assert good.all_rhat().max() < 1.01
    bad = function_space(model, _draws(shift=3.0), x, chunk_size=4)
    assert bad.fraction_above(1.1) > 0.5
    # R-hat of the per-draw probabilities equals the independent reference on the same values
    # (bp.predict is tested in test_predictive), chunked or not
    d = _draws(shift=3.0)
    whole = function_space(model, d, x, chunk_size=None)
    for got, chunk in ((bad, 4), (whole, len(x))):
        probs = _chunked_probs(model, d, x, chunk)
        np.testing.assert_allclose(got.rhat["predictive"].ravel(), _reference(probs), rtol=1e-10)
    # chunking changes the probabilities by float32 rounding only: of the logits, whose error
    # scales with the summed terms |x_j W_jk| + |b_k| (softmax moves by at most half as much).
    # (The R-hats themselves may differ by more than rounding: a last-bit change can reorder
    # two tied draws, and R-hat is a function of the ranks.)
    eps = np.finfo(np.float32).eps
    terms = np.einsum("nf,cdfk->cdnk", np.abs(x), np.abs(d["Dense_0.kernel"]))
    tol = 8 * eps * (terms + np.abs(d["Dense_0.bias"])[:, :, None, :] + 1)
    diff = np.abs(_chunked_probs(model, d, x, 4) - _chunked_probs(model, d, x, len(x)))
    assert np.all(diff <= tol)


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

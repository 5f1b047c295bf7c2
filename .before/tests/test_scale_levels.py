"""The noise-scale funnel report: lp gaps that the chains' noise scales account for."""

import numpy as np
import pytest

from bnn_ppl.chain_levels import chain_levels
from bnn_ppl.scale_levels import EXPLAINED, describe_scale_levels, scale_levels
from bnn_ppl.validation import InputValueError

N = 277


def _gaussian_lp(rng, sigmas, draws=400):
    """Chains each at equilibrium around its own noise scale: lp is the Gaussian log-likelihood
    of N residuals drawn at that scale, the log-density of the chains' draws."""
    log_s = np.log(sigmas)[:, None] + 0.05 * rng.standard_normal((len(sigmas), draws))
    s = np.exp(log_s)
    r = s[..., None] * rng.standard_normal(s.shape + (N,))
    lp = -N * np.log(s) - 0.5 * np.sum((r / s[..., None]) ** 2, -1) - 0.5 * N * np.log(2 * np.pi)
    return s, lp


def test_scale_gap_predicts_the_lp_gap_of_chains_at_different_noise_scales():
    rng = np.random.default_rng(0)
    s, lp = _gaussian_lp(rng, np.array([0.004, 0.005, 0.0077]))
    scales = scale_levels({"noise_scale": s}, lp, weight=N)
    levels = chain_levels(lp)
    assert [r.chain for r in scales] == [0, 1, 2] and scales[0].scale_gap == 0.0
    for r, c in zip(scales, levels, strict=True):
        # what is left is the chains' mean SSE/(2 sigma^2) around N/2 (the -N log sigma part
        # is the scale gap exactly): sd sqrt(N/2)/sqrt(draws) each, sqrt(2) that for a gap
        assert abs(r.scale_gap - c.gap) < 6 * np.sqrt(2) * np.sqrt(N / 2 / 400)
    text = describe_scale_levels(scales, levels)
    assert text is not None and "noise_scale" in text and "chain 2" in text and "funnel" in text


def test_chains_apart_at_one_noise_scale_are_not_called_a_funnel():
    rng = np.random.default_rng(1)
    s, lp = _gaussian_lp(rng, np.array([0.01, 0.01, 0.01]))
    lp[2] -= 300.0  # a separate mode: worse fit at the same noise scale
    scales = scale_levels({"noise_scale": s}, lp, weight=N)
    levels = chain_levels(lp)
    assert levels[2].gap_sd > 2 and scales[2].scale_gap < EXPLAINED * levels[2].gap
    assert describe_scale_levels(scales, levels) is None


def test_fixed_noise_gives_no_rows_and_bad_draws_are_refused():
    lp = np.zeros((2, 10))
    assert scale_levels({"w": np.ones((2, 10, 3))}, lp, weight=5) == []
    with pytest.raises(InputValueError, match="weight"):
        scale_levels({}, lp, weight=0)
    with pytest.raises(InputValueError, match="noise_scale"):
        scale_levels({"noise_scale": -np.ones((2, 10))}, lp, weight=5)
    with pytest.raises(InputValueError, match="noise_scale"):
        scale_levels({"noise_scale": np.ones((3, 10))}, lp, weight=5)


@pytest.mark.slow  # a reference_hmc compilation (~10 s of CPU); the functions are tested above
def test_reference_hmc_records_each_chains_noise_scale_level():
    """A learned noise scale: the record has one row per chain, read from the draws."""
    import warnings

    import jax
    import numpyro.distributions as dist

    import bnn_ppl as bp
    from bnn_ppl.inference import reference_hmc
    from bnn_ppl.models import MLP

    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 2)).astype(np.float32)
    y = (x @ np.array([1.0, -0.5]) + 0.3 * rng.normal(size=40)).astype(np.float32)
    noisy = bp.likelihoods.Gaussian(dist.HalfNormal(1.0))
    model = bp.BNN(MLP(hidden=(), out=1), bp.priors.Normal(1.0), noisy, temperature=0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run = reference_hmc(model, (x, y), x_test=x[:4], rng_key=jax.random.key(0),
                            num_warmup=30, segment_draws=10, max_draws=10)  # fmt: skip
    record = run.posterior.config["convergence"]
    rows = record["scale_levels"]
    assert [r["chain"] for r in rows] == [0, 1, 2, 3] and {r["site"] for r in rows} == {
        "noise_scale"
    }
    log_s = np.log(np.asarray(run.posterior.samples["noise_scale"], np.float64)).reshape(4, -1)
    np.testing.assert_allclose([r["log_mean"] for r in rows], log_s.mean(1), rtol=1e-6)
    best = int(np.argmax([c["lp_mean"] for c in record["chain_levels"]]))
    want = 40 / 0.5 * (log_s.mean(1) - log_s.mean(1)[best])  # N / T: the likelihood's weight
    np.testing.assert_allclose([r["scale_gap"] for r in rows], want, rtol=1e-5, atol=1e-9)

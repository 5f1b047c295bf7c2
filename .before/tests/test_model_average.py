"""bnn_ppl.model_average: the one Bayesian model average, whole or merged in parts.

``bp.bma``, the running BMA of ``bnn_ppl.progress`` and the metric suite all go through
:func:`summarize`, :func:`merge` and :func:`result`; these tests check that averaging in parts
is the average of the whole, for every predictive type.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import logsumexp

import bnn_ppl as bp
from bnn_ppl.likelihoods import GaussianPrediction, PoissonPrediction, StudentTPrediction
from bnn_ppl.model_average import log_density, merge, result, summarize
from bnn_ppl.validation import InputValueError

RNG = np.random.default_rng(0)
S, N = 7, 5


@pytest.fixture(autouse=True)
def _fresh_rng():
    """Every test draws the same numbers whatever order the tests run in (xdist)."""
    global RNG
    RNG = np.random.default_rng(0)


def _draws() -> dict[str, object]:
    return {
        "probs": RNG.dirichlet(np.ones(3), size=(S, N)),
        "poisson": PoissonPrediction(RNG.gamma(2.0, size=(S, N))),
        "gaussian": GaussianPrediction(RNG.normal(size=(S, N)), RNG.gamma(2.0, size=(S, N))),
        "student_t": StudentTPrediction(
            RNG.normal(size=(S, N)), RNG.gamma(2.0, size=(S, N)), 1.0 + RNG.gamma(3.0, size=(S, N))
        ),
    }


def _split(pred: object, lo: int, hi: int) -> object:
    if isinstance(pred, np.ndarray):
        return pred[lo:hi]
    return type(pred)(*(a[lo:hi] for a in pred))


def _fields(pred: object) -> list[np.ndarray]:
    return [np.asarray(pred)] if not isinstance(pred, tuple) else [np.asarray(a) for a in pred]


@pytest.mark.parametrize("kind", ["probs", "poisson", "gaussian", "student_t"])
def test_average_in_parts_is_the_average_of_the_whole(kind):
    pred = _draws()[kind]
    whole = bp.bma(pred)
    parts = [summarize(_split(pred, lo, hi)) for lo, hi in ((0, 1), (1, 4), (4, S))]
    merged = merge(merge(parts[0], parts[1]), parts[2])
    assert merged.count == S
    for a, b in zip(_fields(result(merged)), _fields(whole), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5)


def test_mixture_moments_follow_the_law_of_total_variance():
    pred = _draws()["student_t"]
    loc, scale, df = (np.asarray(a, np.float64) for a in pred)
    var = np.where(df > 2, scale**2 * df / (df - 2), np.inf).mean(0) + loc.var(0)
    avg = bp.bma(pred)
    np.testing.assert_allclose(avg.mean, loc.mean(0), rtol=1e-5)
    np.testing.assert_allclose(avg.scale, np.sqrt(var), rtol=1e-5)


def test_merged_variance_is_accurate_in_float32_for_means_far_from_zero():
    # E[m²] - E[m]² would lose the spread (1e-1) of means near 1e4 in float32 entirely, and a
    # plain float32 sum of the means moves each part's mean by several ulps, and the spread
    # with it. What is left is the rounding of each part's mean to float32 (half an ulp, e):
    # Chan's merge is then off by na·ea² + nb·eb² + na·nb/n·(2|δ|·|eb - ea| + (eb - ea)²).
    # 400 columns of their own generator: the order tests run in cannot change the draws.
    rng = np.random.default_rng(20261126)
    means = (1e4 + 0.1 * rng.normal(size=(64, 400))).astype(np.float32)
    pred = GaussianPrediction(jnp.asarray(means), jnp.full(means.shape, 1e-3, jnp.float32))
    na, nb, n = 20, 44, 64
    avg = merge(summarize(_split(pred, 0, na)), summarize(_split(pred, na, n)))
    m = np.asarray(means, np.float64)
    want = 1e-6 + m.var(0)
    e = float(np.spacing(np.float32(1e4))) / 2
    delta = np.abs(m[na:].mean(0) - m[:na].mean(0))
    rounding = (n * e**2 + na * nb / n * (4 * delta * e + 4 * e**2)) / n
    got = np.asarray(result(avg).scale, np.float64) ** 2
    assert np.all(np.abs(got - want) <= rounding + 1e-5 * want)  # + float32 sums of n terms
    assert np.median(np.abs(got / want - 1)) < 1e-3


def test_merging_different_predictions_is_refused():
    d = _draws()
    with pytest.raises(InputValueError, match="cannot average 'probs' predictions with"):
        merge(summarize(d["probs"]), summarize(d["poisson"]))
    with pytest.raises(InputValueError, match="do not match the average"):
        merge(summarize(d["probs"]), summarize(d["probs"][:, :2]))


def test_log_density_is_the_log_of_the_mixture_density():
    logp = np.log(RNG.uniform(0.01, 1.0, size=(S, N, 2)))
    want = logsumexp(logp.sum(-1), axis=0) - np.log(S)
    np.testing.assert_allclose(log_density(jnp.asarray(logp)), want, rtol=1e-5)

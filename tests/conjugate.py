"""Bayesian linear regression as a BNN: data, model and closed-form (tempered) posterior.

A BNN with no hidden layer, a linear output and a Gaussian likelihood with known noise is
conjugate: the posterior is Gaussian with precision ``a·I/σ_p² + (1/T)·ΦᵀΦ/σ²`` (``a = 1/T``
when the whole posterior is tempered, else 1) and mean ``Σ·(1/T)·Φᵀy/σ²``, Φ = [x, 1].
"""

from __future__ import annotations

import numpy as np
from numpyro.diagnostics import effective_sample_size

import bnn_ppl as bp
from bnn_ppl.models import MLP

PRIOR_SCALE, NOISE = 1.0, 0.5


def data(n=30, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 2)).astype(np.float32)
    y = (x @ np.array([0.8, -0.5]) + 0.3 + NOISE * rng.normal(size=n)).astype(np.float32)
    return x, y


def closed_form(x, y, temperature=1.0, temper="likelihood"):
    """Posterior mean and covariance of (kernel[0], kernel[1], bias)."""
    phi = np.concatenate([x, np.ones((len(x), 1))], axis=1).astype(np.float64)
    lik_s = 1.0 / temperature
    prior_s = 1.0 / temperature if temper == "posterior" else 1.0
    precision = prior_s * np.eye(3) / PRIOR_SCALE**2 + lik_s * phi.T @ phi / NOISE**2
    cov = np.linalg.inv(precision)
    mean = cov @ (lik_s * phi.T @ y.astype(np.float64) / NOISE**2)
    return mean, cov


def linear_model(temperature=1.0, temper="likelihood"):
    return bp.BNN(MLP(hidden=(), out=1), bp.priors.Normal(PRIOR_SCALE),
                  bp.likelihoods.Gaussian(scale=NOISE), temperature=temperature, temper=temper)


def theta(params):
    """Stack (..., kernel[0], kernel[1], bias) from site-keyed values, in float64."""
    k = np.asarray(params["Dense_0.kernel"], np.float64)[..., 0]
    b = np.asarray(params["Dense_0.bias"], np.float64)
    return np.concatenate([k, b], axis=-1)


def assert_matches_gaussian(theta, mean, cov, z=4.5):
    """Every mean and covariance entry within z Monte Carlo standard errors; ``theta`` is
    (chains, samples, d)."""
    theta = np.asarray(theta, np.float64)
    d = theta.shape[-1]
    checks = []
    for i in range(d):
        checks.append((f"mean[{i}]", theta[..., i], mean[i]))
        for j in range(i, d):
            f = (theta[..., i] - mean[i]) * (theta[..., j] - mean[j])
            checks.append((f"cov[{i},{j}]", f, cov[i, j]))
    failures = []
    for name, f, want in checks:
        ess = float(effective_sample_size(f))
        # the MCSE below needs an ESS estimate that can be trusted: from about 100 per chain
        # (Vehtari et al. 2021). A gate at 200 failed 2 of 4 seeds of the tempering test's
        # 1,500 draws (min ESS 167-406 over its 72 quantities) and its run under XLA's default
        # optimisations: it tested the seed, not the sampler.
        assert ess > 100, f"{name}: ESS {ess:.0f} is too small to test anything"
        # no credit for antithetic draws: an alternating chain (autocorrelations -0.5, 0.4,
        # -0.3, ... in a hot tempering rung) had its ESS estimated at 5,870 from 1,500 draws,
        # and the MCSE from it was too small (a 4.7-MCSE miss in one of 8 seeds)
        ess = min(ess, f.size)
        mcse = f.std() / np.sqrt(ess)
        if abs(f.mean() - want) > z * mcse:
            failures.append(
                f"{name}: {f.mean():.5f} vs {want:.5f} (MCSE {mcse:.5f}, ESS {ess:.0f})"
            )
    assert not failures, "\n".join(failures)

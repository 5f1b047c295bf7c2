"""Bayesian linear regression as a BNN: data, model and closed-form (tempered) posterior.

A BNN with no hidden layer, a linear output and a Gaussian likelihood with known noise is
conjugate: the posterior is Gaussian with precision ``a·I/σ_p² + (1/T)·ΦᵀΦ/σ²`` (``a = 1/T``
when the whole posterior is tempered, else 1) and mean ``Σ·(1/T)·Φᵀy/σ²``, Φ = [x, 1].
"""

from __future__ import annotations

import numpy as np

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

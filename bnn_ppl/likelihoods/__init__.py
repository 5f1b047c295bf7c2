"""Likelihoods: how the network's output explains the targets.

Example:
    >>> import jax.numpy as jnp
    >>> import bnn_ppl as bp
    >>> lik = bp.likelihoods.Categorical()
    >>> lik.log_prob(jnp.zeros((2, 4)), jnp.array([0, 3]), {}).round(4)   # log(1/4) each
    Array([-1.3863, -1.3863], dtype=float32)
"""

# Notes:
#
# A likelihood turns the network output ``f(x)`` into a per-example log-likelihood and into
# predictions. It may own latent parameters of its own (the Gaussian noise scale with a prior);
# these are sampled like the weights, by HMC, and appear in ``MCMC.get_samples()`` under their
# site names (``"noise_scale"``, ``"df"``). The likelihoods::
#
#     likelihood                   network output         targets               predictive type
#     Categorical()                (n, K): K logits       ints in [0, K)        probabilities (n, K)
#     Bernoulli()                  (n, 1): the logit      ints/bools in {0,1}   probabilities (n, 2)
#     Gaussian(scale)              (n, 1) or (n, d)       floats (n,)/(n, d)    GaussianPrediction
#     HeteroscedasticGaussian()    (n, 2): mean, raw sd   floats (n,)           GaussianPrediction
#     StudentT(df, scale)          (n, 1) or (n, d)       floats (n,)/(n, d)    StudentTPrediction
#     Poisson()                    (n, 1) or (n, d): log  counts >= 0           PoissonPrediction

from bnn_ppl.likelihoods.base import (
    PREDICTION_TYPES,
    GaussianPrediction,
    Likelihood,
    PoissonPrediction,
    Prediction,
    StudentTPrediction,
    conform_targets,
    location,
    prediction_fields,
    prediction_from_fields,
)
from bnn_ppl.likelihoods.classification import Bernoulli, Categorical
from bnn_ppl.likelihoods.counts import Poisson
from bnn_ppl.likelihoods.regression import (
    DF_SITE,
    NOISE_SITE,
    Gaussian,
    HeteroscedasticGaussian,
    StudentT,
)

__all__ = [
    "Likelihood",
    "Categorical",
    "Bernoulli",
    "Gaussian",
    "HeteroscedasticGaussian",
    "StudentT",
    "Poisson",
    "GaussianPrediction",
    "StudentTPrediction",
    "PoissonPrediction",
    "Prediction",
    "PREDICTION_TYPES",
    "prediction_fields",
    "prediction_from_fields",
    "location",
    "conform_targets",
    "NOISE_SITE",
    "DF_SITE",
]

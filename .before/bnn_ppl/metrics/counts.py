"""Count metrics: the exact NLL of the Bayesian model average of per-sample Poisson
predictions (the test NLL of a :class:`bnn_ppl.likelihoods.Poisson` model)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln

from bnn_ppl import model_average
from bnn_ppl.likelihoods.counts import first_non_count
from bnn_ppl.metrics._checks import _check_targets, _check_values, _is_concrete
from bnn_ppl.metrics.regression import check_per_sample
from bnn_ppl.types import Array
from bnn_ppl.validation import InputValueError


def _poisson_logpmf(y: Array, rates: Array) -> Array:
    return jax.scipy.special.xlogy(y, rates) - rates - gammaln(y + 1)


@jax.jit
def _poisson_mixture_kernel(rates: Array, y: Array) -> Array:
    logp = _poisson_logpmf(y[None], rates)
    return -jnp.mean(model_average.log_density(logp))


def poisson_mixture_nll(rates: Array, y: Array) -> Array:
    """NLL of the equal-weight mixture of per-sample Poissons.

    ``-mean_n log (1/S) sum_s Poisson(y_n; rates_sn)``, computed stably with ``logsumexp``;
    for ``(S, n, d)`` inputs each component is a product over the ``d`` counts.

    Parameters
    ----------
    rates : Array, shape (S, n) or (S, n, d)
        Per-sample positive Poisson rates.
    y : Array, shape (n,) or (n, d)
        Counts (non-negative whole numbers); must equal ``rates.shape[1:]``.

    Returns
    -------
    Array
        Scalar.

    Example:
    >>> import numpy as np
    >>> # one component of rate 1: log p(0) = -1, log p(2) = -1 - log 2
    >>> round(float(poisson_mixture_nll(np.ones((1, 2)), np.array([0, 2]))), 4)
    1.3466
    """
    y = _check_targets(y)
    rates = check_per_sample(rates, y, "rates")
    _check_values(rates, "rates", "positive")
    _check_values(y, "y")
    bad = first_non_count(np.asarray(y)) if _is_concrete(y) else None
    if bad is not None:
        raise InputValueError(f"y must hold counts (non-negative whole numbers); got {bad}")
    return _poisson_mixture_kernel(rates, y)

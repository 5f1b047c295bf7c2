"""Posterior predictive: per-sample predictions, streamed, and their Bayesian model average.

:func:`predict` evaluates the network for every parameter draw in ``samples`` (as returned by
``MCMC.get_samples()``, by the SVI guide or by an ensemble: a dict of site name -> array with a
leading sample axis, or two leading axes ``(chains, samples)`` which are flattened). It maps over
chunks of samples and of inputs, so no more than one chunk of activations is alive at a time;
the result itself has one row per sample.

Example:
    >>> import jax, jax.numpy as jnp
    >>> import bnn_ppl as bp
    >>> from bnn_ppl.models import MLP
    >>> model = bp.BNN(MLP(hidden=(8,), out=3), bp.priors.Normal(0.3), bp.likelihoods.Categorical())
    >>> x = jnp.ones((10, 4))
    >>> draws = jax.vmap(lambda k: model.init(k, x))(jax.random.split(jax.random.key(0), 5))
    >>> probs = bp.predict(model, draws, x, chunk_size=4)
    >>> probs.shape, bp.bma(probs).shape
    ((5, 10, 3), (10, 3))
"""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from bnn_ppl import validation
from bnn_ppl.likelihoods import (
    GaussianPrediction,
    PoissonPrediction,
    Prediction,
    StudentTPrediction,
)
from bnn_ppl.model import BNN
from bnn_ppl.types import Array, Params, PRNGKey
from bnn_ppl.validation import InputValueError

__all__ = ["predict", "prior_predictive", "bma", "flatten_samples"]


def flatten_samples(model: BNN, samples: Params, x: Any) -> Params:
    """Check ``samples`` against the model's sites and return them with one leading axis.

    Raises:
        InputValueError: a site is missing, the shapes do not match the model's parameters, a
            site holds no draws, or a draw is NaN/inf.
    """
    sites = model.sites(x)
    missing = [k for k in sites if k not in samples]
    if missing:
        raise InputValueError(
            f"samples lack sites {missing}; expected the keys {list(sites)} "
            "(as returned by MCMC.get_samples())."
        )
    lead = None
    for k, d in sites.items():
        a = samples[k]
        shape, event = tuple(np.shape(a)), tuple(d.event_shape)
        if len(shape) < len(event) + 1 or shape[len(shape) - len(event) :] != event:
            raise InputValueError(
                f"samples[{k!r}] has shape {shape}; expected (num_samples, *{event}) or "
                f"(num_chains, num_samples, *{event})."
            )
        batch = shape[: len(shape) - len(event)]
        if len(batch) > 2:
            raise InputValueError(
                f"samples[{k!r}] has {len(batch)} leading axes; at most 2 allowed."
            )
        if lead is not None and batch != lead:
            raise InputValueError(f"samples[{k!r}] has leading shape {batch}, others have {lead}.")
        if 0 in batch:
            raise InputValueError(f"samples[{k!r}] holds no draws (shape {shape}).")
        # checked on the host: an eager jnp op would compile a program per shape
        if not isinstance(a, jax.core.Tracer) and not np.all(np.isfinite(np.asarray(a))):
            raise InputValueError(
                f"samples[{k!r}] holds NaN/inf values: these draws come from a run that "
                "diverged; check the sampler's summary (bnn_ppl.diagnostics.sampler_summary)."
            )
        lead = batch
    return {k: jnp.asarray(samples[k]).reshape(-1, *d.event_shape) for k, d in sites.items()}


@partial(jax.jit, static_argnames=("model", "chunk_size", "sample_chunk_size", "num_chunks"))
def _predict(
    model: BNN,
    samples: Params,
    xc: Array,
    *,
    chunk_size: int,
    sample_chunk_size: int,
    num_chunks: int,
) -> Any:
    def one_draw(params: Params) -> Any:
        per_chunk = jax.lax.map(lambda xi: model.predict_one(params, xi), xc)
        return jax.tree.map(lambda a: a.reshape(num_chunks * chunk_size, *a.shape[2:]), per_chunk)

    return jax.lax.map(one_draw, samples, batch_size=sample_chunk_size)


def predict(
    model: BNN,
    samples: Params,
    x: Any,
    *,
    chunk_size: int | None = None,
    sample_chunk_size: int | None = None,
) -> Prediction:
    """Per-sample predictive distributions at inputs ``x``.

    Args:
        model: the :class:`~bnn_ppl.BNN` the samples belong to.
        samples: site name -> array with a leading sample axis (or ``(chains, samples)``).
        x: inputs, shape ``(n, ...)``.
        chunk_size: inputs per network call (default: all ``n`` at once).
        sample_chunk_size: draws evaluated together with ``vmap`` (default 1, the lowest memory).

    Returns:
        The likelihood's predictive type with a leading sample axis: classification
        probabilities of shape ``(num_samples, n, num_classes)`` (``(num_samples, n, 2)`` for a
        Bernoulli); a :class:`~bnn_ppl.likelihoods.GaussianPrediction` whose ``mean`` and
        ``scale`` have shape ``(num_samples, n)`` (or ``(num_samples, n, d)``); likewise a
        ``StudentTPrediction`` or ``PoissonPrediction``.
    """
    x = model.check_inputs(x)
    n = x.shape[0]
    chunk = n if chunk_size is None else validation.check_int("chunk_size", chunk_size)
    chunk = min(chunk, n)
    sample_chunk = (
        1
        if sample_chunk_size is None
        else validation.check_int("sample_chunk_size", sample_chunk_size)
    )
    flat = flatten_samples(model, samples, x)
    num_chunks = -(-n // chunk)
    pad = num_chunks * chunk - n
    xp = np.concatenate([x, np.zeros((pad, *x.shape[1:]), x.dtype)]) if pad else x
    xc = jnp.asarray(xp).reshape(num_chunks, chunk, *x.shape[1:])
    out = _predict(
        model, flat, xc, chunk_size=chunk, sample_chunk_size=sample_chunk, num_chunks=num_chunks
    )
    return jax.tree.map(lambda a: a[:, :n], out)


def prior_predictive(
    model: BNN,
    x: Any,
    num_samples: int,
    *,
    rng_key: PRNGKey | None = None,
    chunk_size: int | None = None,
) -> Prediction:
    """Functions drawn from the prior: :func:`predict` at ``num_samples`` prior draws.

    Wilson (2020): the prior that matters is the prior over functions. Hierarchical priors are
    drawn hyper-parameters first.

    Example:
        >>> import jax.numpy as jnp
        >>> import bnn_ppl as bp
        >>> from bnn_ppl.models import MLP
        >>> model = bp.BNN(MLP(hidden=(16,), out=1), bp.priors.Normal(1.0),
        ...                bp.likelihoods.Gaussian(0.1))
        >>> f = bp.prior_predictive(model, jnp.linspace(-2, 2, 50)[:, None], 8)
        >>> f.mean.shape
        (8, 50)
    """
    x = model.check_inputs(x)
    num_samples = validation.check_int("num_samples", num_samples)
    key = jax.random.key(0) if rng_key is None else validation.check_key("rng_key", rng_key)
    draws = jax.vmap(lambda k: model.init(k, x))(jax.random.split(key, num_samples))
    return predict(model, draws, x, chunk_size=chunk_size)


def bma(predictions: Prediction) -> Array | GaussianPrediction | PoissonPrediction:
    """Bayesian model average over the leading sample axis.

    Classification (Categorical, Bernoulli): the mean of the per-sample probabilities, shape
    ``(n, num_classes)``. Gaussian and Student-t: a :class:`GaussianPrediction` with the
    mixture's mean and standard deviation (moment-matched; a Student-t draw with ``df <= 2``
    has infinite variance, so its mixture's scale is inf, and the location stands in for the
    mean, which only exists for ``df > 1``). Poisson: the Poisson of the mixture's mean rate
    (the mixture itself is overdispersed). For the exact mixture likelihood use
    :func:`bnn_ppl.metrics.mixture_nll`, :func:`~bnn_ppl.metrics.student_t_mixture_nll` or
    :func:`~bnn_ppl.metrics.poisson_mixture_nll` on the per-sample predictions.

    Example:
        >>> import numpy as np
        >>> bma(PoissonPrediction(np.array([[1.0, 2.0], [3.0, 4.0]]))).rate
        Array([2., 3.], dtype=float32)
    """
    if isinstance(predictions, PoissonPrediction):
        rates = _check_draws("predictions.rate", predictions.rate)
        if not isinstance(rates, jax.core.Tracer) and np.any(np.asarray(rates) <= 0):
            raise InputValueError("predictions.rate holds values <= 0; Poisson rates are > 0.")
        return PoissonPrediction(jnp.mean(jnp.asarray(rates), axis=0))
    if isinstance(predictions, StudentTPrediction):
        locs = _check_draws("predictions.loc", predictions.loc)
        scales = _check_scales("predictions", locs, predictions.scale)
        dfs = _check_scales("predictions", locs, predictions.df, "df")
        dfs = jnp.asarray(dfs)
        var = jnp.where(dfs > 2, dfs / jnp.where(dfs > 2, dfs - 2, 1.0), jnp.inf)
        return _moments(jnp.asarray(locs), jnp.asarray(scales) ** 2 * var)
    if isinstance(predictions, GaussianPrediction):
        means = _check_draws("predictions.mean", predictions.mean)
        scales = _check_scales("predictions", means, predictions.scale)
        return _moments(jnp.asarray(means), jnp.asarray(scales) ** 2)
    return jnp.mean(jnp.asarray(_check_draws("predictions", predictions)), axis=0)


def _moments(means: Array, variances: Array) -> GaussianPrediction:
    """Mean and standard deviation of the equal-weight mixture of the draws."""
    mean = means.mean(axis=0)
    # law of total variance, written without the cancellation of E[m²] - E[m]²
    var = variances.mean(axis=0) + ((means - mean) ** 2).mean(axis=0)
    return GaussianPrediction(mean, jnp.sqrt(var))


def _check_scales(name: str, means: Any, scales: Any, field: str = "scale") -> Any:
    """A positive field of the prediction with the shape of its location."""
    what = "df" if field == "df" else "scale"
    scales = _check_draws(f"{name}.{field}", scales)
    if np.shape(scales) != np.shape(means):
        raise InputValueError(
            f"{name}.{field} has shape {np.shape(scales)} but the location has "
            f"{np.shape(means)}; they must match."
        )
    if not isinstance(scales, jax.core.Tracer) and np.any(np.asarray(scales) < 0):
        raise InputValueError(f"{name}.{field} holds negative values; a {what} is >= 0.")
    return scales


def _check_draws(name: str, a: Any) -> Any:
    """Per-draw predictions with a leading draw axis: at least one draw, finite (checked on
    the host, so nothing is compiled before an error)."""
    if isinstance(a, jax.core.Tracer):
        return a
    arr = validation.as_array(name, a, min_ndim=2)
    if arr.ndim < 2:
        raise InputValueError(
            f"{name} has shape {arr.shape}; bma averages over a leading axis of draws, e.g. "
            f"(num_samples, n, num_classes) as returned by bp.predict."
        )
    return a

"""Posterior predictive: per-sample predictions, streamed, and their Bayesian model average.

:func:`predict` evaluates the network for every parameter draw in ``samples`` (as returned by
``MCMC.get_samples()``, by the SVI guide or by an ensemble: a dict of site name -> array with a
leading sample axis, or two leading axes ``(chains, samples)`` which are flattened). It maps over
chunks of samples and of inputs, so no more than one chunk of activations is alive at a time;
the result itself has one row per sample. :func:`bma`, their Bayesian model average, is
:mod:`bnn_ppl.model_average`'s (re-exported here).

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
    Prediction,
)
from bnn_ppl.model import BNN
from bnn_ppl.model_average import bma
from bnn_ppl.types import Array, Params, PRNGKey
from bnn_ppl.validation import InputValueError

__all__ = ["predict", "prior_predictive", "bma", "flatten_samples"]  # bma: bnn_ppl.model_average


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
        samples: site name -> array with a leading sample axis (or ``(chains, samples)``,
            merged into one), or a :class:`~bnn_ppl.Posterior`, whose ``(chain, draw)`` axes
            the predictions keep.
        x: inputs, shape ``(n, ...)``.
        chunk_size: inputs per network call (default: all ``n`` at once).
        sample_chunk_size: draws evaluated together with ``vmap`` (default 1, the lowest memory).

    Returns:
        The likelihood's predictive type with a leading sample axis: classification
        probabilities of shape ``(num_samples, n, num_classes)`` (``(num_samples, n, 2)`` for a
        Bernoulli); a :class:`~bnn_ppl.likelihoods.GaussianPrediction` whose ``mean`` and
        ``scale`` have shape ``(num_samples, n)`` (or ``(num_samples, n, d)``); likewise a
        ``StudentTPrediction`` or ``PoissonPrediction``. Given a Posterior, the leading axis
        is ``(chain, draw)`` instead.
    """
    from bnn_ppl.posterior import Posterior

    lead = None
    if isinstance(samples, Posterior):
        lead, samples = (samples.num_chains, samples.num_draws), samples.samples
    x = model.check_inputs(x)
    n = x.shape[0]
    chunk = validation.rows_per_call(chunk_size, n)
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

    def unpad(a: Array) -> Array:
        a = a[:, :n]
        return a if lead is None else a.reshape(*lead, *a.shape[1:])

    return jax.tree.map(unpad, out)


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

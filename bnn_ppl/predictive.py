"""Posterior predictive: per-sample predictions, streamed, and their Bayesian model average."""

# Notes:
#
# :func:`predict` evaluates the network for every parameter draw in ``samples`` (as returned by
# ``MCMC.get_samples()``, by the SVI guide or by an ensemble: a dict of site name -> array with a
# leading sample axis, or two leading axes ``(chains, samples)`` which are flattened). It maps over
# chunks of samples and of inputs, so no more than one chunk of activations is alive at a time;
# the result itself has one row per sample. :func:`bma`, their Bayesian model average, is
# :mod:`bnn_ppl.model_average`'s (re-exported here).

from __future__ import annotations

from collections.abc import Mapping
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
from bnn_ppl.posterior import Posterior
from bnn_ppl.types import Array, Params, PRNGKey
from bnn_ppl.validation import InputTypeError, InputValueError

__all__ = [
    "predict",
    "prior_predictive",
    "bma",
    "flatten_samples",
    "log_likelihood",
    "chain_predictions",
    "attach_data",
]


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

    Example:
        >>> import jax, jax.numpy as jnp
        >>> import bnn_ppl as bp
        >>> from bnn_ppl.models import MLP
        >>> model = bp.BNN(MLP(hidden=(8,), out=3), bp.priors.Normal(0.3),
        ...     bp.likelihoods.Categorical())
        >>> x = jnp.ones((10, 4))
        >>> draws = jax.vmap(lambda k: model.init(k, x))(jax.random.split(jax.random.key(0), 5))
        >>> probs = bp.predict(model, draws, x, chunk_size=4)
        >>> probs.shape, bp.bma(probs).shape
        ((5, 10, 3), (10, 3))
    """
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


# -------------------- pointwise
# Per-row log-likelihoods ``log p(y_i | θ_s)`` for every draw, and a Posterior's data groups.
#
# ``az.loo`` and ``az.waic`` need the matrix of per-row log-likelihoods, one row of the data
# against one posterior draw; NumPyro's ``log_likelihood`` and ``az.from_numpyro`` cannot give it
# for a BNN run on a potential (there is no NumPyro model trace to replay). :func:`log_likelihood`
# computes it from the model's own likelihood (:meth:`bnn_ppl.BNN.log_likelihood`, untempered:
# the temperature shapes the posterior, not the predictive density LOO estimates), mapping over
# draws and over chunks of rows so that one chunk of activations is alive at a time.
# :func:`attach_data` fills a :class:`~bnn_ppl.posterior.Posterior`'s ``observed``,
# ``log_likelihood`` and ``predictions`` groups with it and :func:`bnn_ppl.predict`.

@partial(jax.jit, static_argnames=("model", "n"))
def _rows(model: BNN, flat: Params, xc: Array, yc: Array, n: int) -> Array:
    def one_draw(params: Params) -> Array:
        per_chunk = jax.lax.map(lambda c: model.log_likelihood(params, c[0], c[1]), (xc, yc))
        return per_chunk.reshape(-1)[:n]

    return jax.lax.map(one_draw, flat)


def _leading_axes(model: BNN, samples: Params, x: Any) -> tuple[int, ...]:
    """The draws' leading axes: ``(draw,)`` or ``(chain, draw)``."""
    site, d = next(iter(model.sites(x).items()))
    shape = np.shape(samples[site])
    return shape[: len(shape) - len(d.event_shape)]


def log_likelihood(
    model: BNN, samples: Params, x: Any, y: Any, *, chunk_size: int | None = None
) -> np.ndarray:
    """``log p(y_i | θ)`` for every draw ``θ`` in ``samples`` and every row ``i`` of ``(x, y)``.

    Args:
        model: the :class:`~bnn_ppl.BNN` the draws belong to.
        samples: site -> draws with one or two leading axes (``(draw,)`` or ``(chain, draw)``).
        x, y: inputs and targets (checked as :meth:`bnn_ppl.BNN.check_data` does).
        chunk_size: rows per network call (default all ``n``); memory is one chunk of one draw.

    Returns:
        float32 array of shape ``(*leading_axes, n)``; summed over rows it is
        ``model.log_likelihood(θ, x, y).sum()`` (untempered).

    Example:
        >>> import jax, numpy as np
        >>> import bnn_ppl as bp
        >>> from bnn_ppl.models import MLP
        >>> from bnn_ppl.predictive import log_likelihood
        >>> model = bp.BNN(MLP(hidden=(), out=1), bp.priors.Normal(1.0),
        ...     bp.likelihoods.Gaussian(0.5))
        >>> x, y = np.ones((7, 2), np.float32), np.zeros(7, np.float32)
        >>> keys = jax.random.split(jax.random.key(0), 6).reshape(2, 3)
        >>> draws = jax.vmap(jax.vmap(lambda k: model.init(k, x)))(keys)  # (chain, draw, ...)
        >>> log_likelihood(model, draws, x, y, chunk_size=4).shape
        (2, 3, 7)
    """
    if not isinstance(model, BNN):
        raise InputTypeError(f"model must be a bnn_ppl.BNN, got {type(model).__name__}.")
    x, y = model.check_data(x, y)
    n = x.shape[0]
    chunk = validation.rows_per_call(chunk_size, n)
    flat = flatten_samples(model, samples, x)  # checks the sites' shapes and finiteness
    lead = _leading_axes(model, samples, x)
    num_chunks = -(-n // chunk)
    pad = num_chunks * chunk - n
    if pad:  # padded rows repeat row 0 (valid targets for every likelihood) and are cut off
        x = np.concatenate([x, np.repeat(x[:1], pad, axis=0)])
        y = np.concatenate([y, np.repeat(y[:1], pad, axis=0)])
    xc = jnp.asarray(x).reshape(num_chunks, chunk, *x.shape[1:])
    yc = jnp.asarray(y).reshape(num_chunks, chunk, *y.shape[1:])
    out = np.asarray(_rows(model, flat, xc, yc, n))
    return out.reshape(*lead, n)


def chain_predictions(
    model: BNN, samples: Params, x: Any, *, chunk_size: int | None = None
) -> dict[str, np.ndarray]:
    """:func:`bnn_ppl.predict` at ``x`` for draws ``(chain, draw, ...)``, as a Posterior's
    ``predictions``: ``{"probs": ...}`` or the prediction's fields, each ``(chain, draw, n, ...)``.
    """
    out = predict(model, samples, x, chunk_size=chunk_size)  # checks the draws
    lead = _leading_axes(model, samples, x)
    named = {"probs": out} if not hasattr(out, "_fields") else out._asdict()
    return {k: np.asarray(v).reshape(*lead, *v.shape[1:]) for k, v in named.items()}


def attach_data(
    posterior: Posterior,
    model: BNN,
    x: Any,
    y: Any,
    x_test: Any = None,
    y_test: Any = None,
    *,
    chunk_size: int | None = None,
    predictions: Mapping[str, np.ndarray] | None = None,
) -> Posterior:
    """``posterior`` with its data groups filled for ``model``.

    ``observed`` gets ``"y"`` (and ``"y_test"``) in the likelihood's target shape,
    ``log_likelihood`` the per-row matrices ``(chain, draw, n)`` of :func:`log_likelihood`, and
    ``predictions`` (given ``x_test``) the per-draw predictive distribution of
    :func:`bnn_ppl.predict`: ``"probs"`` for a classifier, ``"mean"`` and ``"scale"`` for a
    Gaussian likelihood, each ``(chain, draw, n_test, ...)``. ``predictions`` given (the
    :func:`chain_predictions` of these draws at ``x_test``, already computed, e.g. by a
    checkpointed ``fit``'s ``progress.jsonl``) are used instead of computing them again.

    Example:
        >>> import numpy as np
        >>> import bnn_ppl as bp
        >>> from bnn_ppl.models import MLP
        >>> from bnn_ppl.posterior import Posterior
        >>> model = bp.BNN(MLP(hidden=(), out=3), bp.priors.Normal(1.0),
        ...                bp.likelihoods.Categorical())
        >>> x, y = np.ones((5, 2), np.float32), np.array([0, 1, 2, 0, 1])
        >>> post = Posterior("hmc", {"Dense_0.kernel": np.zeros((2, 4, 2, 3), np.float32),
        ...                          "Dense_0.bias": np.zeros((2, 4, 3), np.float32)})
        >>> post = attach_data(post, model, x, y, x_test=x[:3])
        >>> post.log_likelihood["y"].shape, post.predictions["probs"].shape
        ((2, 4, 5), (2, 4, 3, 3))
        >>> bool(np.allclose(post.log_likelihood["y"], np.log(1 / 3)))
        True
    """
    if not isinstance(posterior, Posterior):
        raise InputTypeError(f"posterior must be a Posterior, got {type(posterior).__name__}.")
    if y_test is not None and x_test is None:
        raise validation.InputValueError("y_test was given without x_test; pass both.")
    samples = posterior.samples
    _, y = model.check_data(x, y)
    observed = {"y": y}
    loglik = {"y": log_likelihood(model, samples, x, y, chunk_size=chunk_size)}
    if predictions is not None and x_test is None:
        raise validation.InputValueError("predictions were given without x_test; pass both.")
    if x_test is not None:
        if predictions is None:
            predictions = chain_predictions(model, samples, x_test, chunk_size=chunk_size)
        else:
            predictions = _checked_predictions(predictions, posterior, len(x_test))
        if y_test is not None:
            _, y_test = model.check_data(x_test, y_test)
            observed["y_test"] = y_test
            loglik["y_test"] = log_likelihood(model, samples, x_test, y_test, chunk_size=chunk_size)
    return posterior.replace(
        observed={**posterior.observed, **observed},
        log_likelihood={**posterior.log_likelihood, **loglik},
        predictions={**posterior.predictions, **(predictions or {})},
    )


def _checked_predictions(
    predictions: Mapping[str, np.ndarray], posterior: Posterior, n_test: int
) -> dict[str, np.ndarray]:
    """Given predictions as :func:`chain_predictions` returns them for ``posterior``'s draws."""
    want = (posterior.num_chains, posterior.num_draws, n_test)
    out = {k: np.asarray(v) for k, v in predictions.items()}
    bad = {k: v.shape for k, v in out.items() if v.shape[:3] != want}
    if not out or bad:
        raise validation.InputValueError(
            f"predictions must be chain_predictions of the draws at x_test, each (chain, draw, "
            f"n_test, ...) = {want}; got {bad or 'none'}."
        )
    return out

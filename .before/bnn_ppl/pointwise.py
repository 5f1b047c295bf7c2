"""Per-row log-likelihoods ``log p(y_i | θ_s)`` for every draw, and a Posterior's data groups.

``az.loo`` and ``az.waic`` need the matrix of per-row log-likelihoods, one row of the data
against one posterior draw; NumPyro's ``log_likelihood`` and ``az.from_numpyro`` cannot give it
for a BNN run on a potential (there is no NumPyro model trace to replay). :func:`log_likelihood`
computes it from the model's own likelihood (:meth:`bnn_ppl.BNN.log_likelihood`, untempered:
the temperature shapes the posterior, not the predictive density LOO estimates), mapping over
draws and over chunks of rows so that one chunk of activations is alive at a time.
:func:`attach_data` fills a :class:`~bnn_ppl.posterior.Posterior`'s ``observed``,
``log_likelihood`` and ``predictions`` groups with it and :func:`bnn_ppl.predict`.

Example:
    >>> import jax, numpy as np
    >>> import bnn_ppl as bp
    >>> from bnn_ppl.models import MLP
    >>> from bnn_ppl.pointwise import log_likelihood
    >>> model = bp.BNN(MLP(hidden=(), out=1), bp.priors.Normal(1.0), bp.likelihoods.Gaussian(0.5))
    >>> x, y = np.ones((7, 2), np.float32), np.zeros(7, np.float32)
    >>> keys = jax.random.split(jax.random.key(0), 6).reshape(2, 3)
    >>> draws = jax.vmap(jax.vmap(lambda k: model.init(k, x)))(keys)  # (chain, draw, ...)
    >>> log_likelihood(model, draws, x, y, chunk_size=4).shape
    (2, 3, 7)
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from bnn_ppl import validation
from bnn_ppl.model import BNN
from bnn_ppl.posterior import Posterior
from bnn_ppl.predictive import flatten_samples, predict
from bnn_ppl.types import Array, Params
from bnn_ppl.validation import InputTypeError

__all__ = ["log_likelihood", "chain_predictions", "attach_data"]


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

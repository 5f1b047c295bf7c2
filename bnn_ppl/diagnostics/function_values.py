"""The function-space quantities whose convergence R-hat and ESS judge.

Example:
    >>> import numpy as np
    >>> from bnn_ppl.diagnostics.function_values import centred_logits, p_true
    >>> centred_logits(np.array([[1.0, 2.0, 6.0]])).tolist()
    [[-2.0, -1.0, 3.0]]
    >>> p_true(np.array([[0.2, 0.8], [0.6, 0.4]]), np.array([1, 1])).tolist()
    [0.8, 0.4]
"""

# Notes:
#
# "Function-space R-hat" needs a choice of *which* function of the parameters to diagnose, and
# the choice changes the answer (on the same 4 digits chains the share of R-hat > 1.1 was 38 %,
# 23 % and 43 % for the three below). One name per choice:
#
# * ``"probs"`` - every softmax probability, ``(n, K)`` per draw. What Izmailov et al. (2021)
#   diagnosed (classic R-hat on the softmax outputs) and the default here.
# * ``"p_true"`` - the probability of the observed class, ``(n,)`` per draw (needs ``y``): the
#   quantity whose average is the test likelihood, one scalar per row.
# * ``"centred_logits"`` - the logits minus their per-row mean, ``(n, K)`` per draw. The softmax
#   ignores a shift of a row's logits, so the logits themselves are not identified; centring
#   removes exactly that direction (it equals the centred log-probabilities, which is what is
#   computed for a classifier other than ``Categorical``, e.g. ``Bernoulli``). On the log scale,
#   tiny probabilities that ``"probs"`` squeezes against 0 still count.
# * ``"mean"`` - regression (and counts): the predictive location per draw - the Gaussian mean,
#   the Student-t location or the Poisson rate, ``(n,)`` or ``(n, d)``.
# * ``"mean_log_density"`` - regression (needs ``y``): per draw, the predictive location of every
#   row, then every row's log density ``log p(y_i | θ)``, then the likelihood's latent scalars
#   (a learned noise sd, degrees of freedom), flat: ``(n·d + n + L,)``. What a reference with a
#   learned noise must check: the mean can mix while the noise, and so the test density, does
#   not. :func:`quantity_parts` names its slices.
#
# :func:`function_values` evaluates one of them for every draw; :func:`p_true` and
# :func:`centred_logits` are the array-level definitions.

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from bnn_ppl import validation
from bnn_ppl.likelihoods import Categorical, location
from bnn_ppl.model import BNN
from bnn_ppl.predictive import flatten_samples, predict
from bnn_ppl.types import Array, Params
from bnn_ppl.validation import InputValueError

__all__ = [
    "CLASSIFICATION_QUANTITIES",
    "REGRESSION_QUANTITIES",
    "QUANTITIES",
    "PAPERS_QUANTITY",
    "centred_logits",
    "check_quantity",
    "default_quantity",
    "function_values",
    "p_true",
    "quantity_parts",
]

CLASSIFICATION_QUANTITIES = ("probs", "p_true", "centred_logits")
REGRESSION_QUANTITIES = ("mean", "mean_log_density")
NEEDS_TARGETS = ("p_true", "mean_log_density")
"""The quantities that need the test targets ``y``."""
QUANTITIES = CLASSIFICATION_QUANTITIES + REGRESSION_QUANTITIES
PAPERS_QUANTITY = "probs"
"""What Izmailov et al. (2021) computed R-hat on: the softmax outputs."""


def p_true(probs: Any, y: Any) -> np.ndarray:
    """``probs[..., i, y[i]]``: each row's probability of its observed class.

    Args:
        probs: ``(..., n, K)`` class probabilities.
        y: ``(n,)`` integer labels in ``[0, K)``.
    """
    p = validation.as_array("probs", probs, min_ndim=2)
    labels = validation.check_labels("y", validation.as_array("y", y), p.shape[-1])
    if labels.shape != p.shape[-2:-1]:
        raise InputValueError(
            f"y has shape {labels.shape}; it needs one label per row of probs, shape "
            f"{p.shape[-2:-1]}."
        )
    index = np.broadcast_to(labels.astype(np.int64)[:, None], (*p.shape[:-1], 1))
    return np.take_along_axis(p, index, axis=-1)[..., 0]


def centred_logits(logits: Any) -> np.ndarray:
    """``logits - logits.mean(-1, keepdims=True)``: the identified part of the logits (and
    equally of the log-probabilities, which differ from them by a per-row constant)."""
    a = validation.as_array("logits", logits)
    return a - a.mean(axis=-1, keepdims=True)


def default_quantity(model: BNN, has_targets: bool = False) -> str:
    """``"probs"`` for classification (what the papers used); for regression
    ``"mean_log_density"`` when the targets are given (``has_targets``), else ``"mean"``."""
    if model.likelihood.task == "classification":
        return PAPERS_QUANTITY
    return "mean_log_density" if has_targets else "mean"


def quantity_parts(model: BNN, quantity: str, n: int, outputs: int = 1) -> dict[str, slice]:
    """The named slices of one draw's flat ``quantity`` values at ``n`` rows (``outputs``
    per row): ``{"mean": ..., "log_density": ..., <latent site>: ...}`` for
    ``"mean_log_density"``, ``{quantity: everything}`` otherwise.

    >>> import bnn_ppl as bp
    >>> import numpyro.distributions as dist
    >>> from bnn_ppl.models import MLP
    >>> m = bp.BNN(MLP(hidden=(), out=1), bp.priors.Normal(1.0),
    ...            bp.likelihoods.Gaussian(dist.HalfNormal(1.0)))
    >>> quantity_parts(m, "mean_log_density", 3)
    {'mean': slice(0, 3, None), 'log_density': slice(3, 6, None), 'noise_scale': slice(6, 7, None)}
    """
    if quantity != "mean_log_density":
        return {quantity: slice(0, None)}
    parts, start = {}, 0
    for name, size in (("mean", n * outputs), ("log_density", n),
                       *((site, 1) for site in model.likelihood.latent_sites())):  # fmt: skip
        parts[name], start = slice(start, start + size), start + size
    return parts


def check_quantity(model: BNN, quantity: Any, y: Any) -> str:
    """``quantity``, checked: one of :data:`QUANTITIES`, defined for the model's task, with
    labels ``y`` for ``"p_true"``."""
    classification = model.likelihood.task == "classification"
    allowed = CLASSIFICATION_QUANTITIES if classification else REGRESSION_QUANTITIES
    quantity = validation.check_choice("quantity", quantity, QUANTITIES)
    if quantity not in allowed:
        raise InputValueError(
            f"quantity {quantity!r} is not defined for a {model.likelihood.task} model; "
            f"use one of {list(allowed)}."
        )
    if quantity in NEEDS_TARGETS and y is None:
        raise InputValueError(
            f"quantity {quantity!r} needs the test targets: pass y (one per row of x)."
        )
    return quantity


@partial(jax.jit, static_argnames=("model",))
def _logits(model: BNN, flat: Params, x: Array) -> Array:
    return jax.lax.map(lambda params: model.apply(params, x), flat)


def function_values(
    model: BNN,
    samples: Params,
    x: Any,
    quantity: str | None = None,
    *,
    y: Any = None,
    chunk_size: int | None = None,
) -> np.ndarray:
    """One function-space quantity (see the module doc) for every draw, at inputs ``x``.

    Args:
        model: the :class:`~bnn_ppl.BNN` the draws belong to.
        samples: site -> ``(draws, ...)`` or ``(chains, draws, ...)``.
        x: ``(n, ...)`` inputs.
        quantity: ``"probs"``, ``"p_true"``, ``"centred_logits"`` (classification) or
            ``"mean"``, ``"mean_log_density"`` (regression); ``None`` is
            :func:`default_quantity` (without ``y``).
        y: ``(n,)`` labels or targets, for ``"p_true"`` and ``"mean_log_density"`` only.
        chunk_size: inputs per network call (default: all at once).

    Returns:
        float32 NumPy array with the samples' leading axes, then ``(n, K)`` (``probs``,
        ``centred_logits``), ``(n,)`` (``p_true``), the predictive mean's shape or, for
        ``mean_log_density``, ``(n·d + n + L,)`` (:func:`quantity_parts`).

    Example:
        >>> import jax, numpy as np
        >>> import bnn_ppl as bp
        >>> from bnn_ppl.models import MLP
        >>> model = bp.BNN(MLP(hidden=(4,), out=3), bp.priors.Normal(1.0),
        ...                bp.likelihoods.Categorical())
        >>> x = np.ones((5, 2), np.float32)
        >>> draws = jax.vmap(lambda k: model.init(k, x))(jax.random.split(jax.random.key(0), 6))
        >>> draws = {k: v.reshape(2, 3, *v.shape[1:]) for k, v in draws.items()}
        >>> function_values(model, draws, x, "p_true", y=np.zeros(5, int)).shape
        (2, 3, 5)
    """
    quantity = check_quantity(model, default_quantity(model) if quantity is None else quantity, y)
    if quantity == "mean_log_density":
        return _mean_log_density(model, samples, x, y, chunk_size)
    x = model.check_inputs(x)
    labels = None
    if quantity == "p_true":
        labels = validation.as_array("y", y)
        validation.check_same_length("x", x, "y", labels)
    flat = flatten_samples(model, samples, x)
    site = next(iter(model.sites(x)))
    lead = np.shape(samples[site])[: np.ndim(samples[site]) - len(model.sites(x)[site].event_shape)]
    if quantity == "centred_logits" and isinstance(model.likelihood, Categorical):
        chunk = validation.rows_per_call(chunk_size, x.shape[0])
        parts = [
            np.asarray(_logits(model, flat, jnp.asarray(x[i : i + chunk])))
            for i in range(0, x.shape[0], chunk)
        ]
        values = centred_logits(np.concatenate(parts, axis=1))
    else:
        values = np.asarray(location(predict(model, flat, x, chunk_size=chunk_size)))
        if quantity == "p_true":
            values = p_true(values, labels)
        elif quantity == "centred_logits":  # another classifier (Bernoulli): log-probabilities
            values = centred_logits(np.log(np.maximum(values, np.finfo(np.float32).tiny)))
    values = values.astype(np.float32)
    return values.reshape(*lead, *values.shape[1:])


def _mean_log_density(model: BNN, samples: Params, x: Any, y: Any,
                      chunk_size: int | None) -> np.ndarray:  # fmt: skip
    """``"mean_log_density"``: the means, the rows' log densities and the latent scalars."""
    from bnn_ppl.predictive import log_likelihood

    mean = function_values(model, samples, x, "mean", chunk_size=chunk_size)
    density = log_likelihood(model, samples, x, y, chunk_size=chunk_size)
    lead = density.shape[:-1]
    latent = [np.asarray(samples[site], np.float32).reshape(*lead, 1)
              for site in model.likelihood.latent_sites()]  # fmt: skip
    flat = [mean.reshape(*lead, -1), density.reshape(*lead, -1), *latent]
    return np.concatenate(flat, axis=-1).astype(np.float32)

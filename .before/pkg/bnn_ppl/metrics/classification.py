"""Classification metrics of BMA probabilities: accuracy, NLL, Brier; agreement and total
variation between two predictive distributions."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from bnn_ppl.metrics._checks import (
    _check_classification,
    _check_pair,
)
from bnn_ppl.types import Array


@jax.jit
def _accuracy_kernel(probs: Array, labels: Array) -> Array:
    return jnp.mean(jnp.argmax(probs, axis=-1) == labels)


@jax.jit
def _nll_kernel(probs: Array, labels: Array, eps: Array) -> Array:
    p_true = jnp.take_along_axis(probs, labels[:, None], axis=-1)[:, 0]
    return -jnp.mean(jnp.log(jnp.maximum(p_true, eps)))


@jax.jit
def _brier_kernel(probs: Array, labels: Array) -> Array:
    onehot = jax.nn.one_hot(labels, probs.shape[1], dtype=probs.dtype)
    return jnp.mean(jnp.sum((probs - onehot) ** 2, axis=-1))


@jax.jit
def _agreement_kernel(probs_a: Array, probs_b: Array) -> Array:
    return jnp.mean(jnp.argmax(probs_a, axis=-1) == jnp.argmax(probs_b, axis=-1))


@jax.jit
def _total_variation_kernel(probs_a: Array, probs_b: Array) -> Array:
    return jnp.mean(0.5 * jnp.sum(jnp.abs(probs_a - probs_b), axis=-1))


def accuracy(probs: Array, labels: Array) -> Array:
    """Top-1 accuracy: fraction of examples with ``argmax(probs) == label``.

    Parameters
    ----------
    probs : Array, shape (n, K)
        Predictive (model-averaged) class probabilities.
    labels : Array of int, shape (n,)
        True class indices in ``[0, K)``.

    Returns
    -------
    Array
        Scalar in ``[0, 1]``.

    Example:
    >>> import numpy as np
    >>> probs = np.array([[0.9, 0.1], [0.3, 0.7], [0.6, 0.4], [0.2, 0.8]])
    >>> float(accuracy(probs, np.array([0, 1, 1, 1])))
    0.75
    """
    probs, labels = _check_classification(probs, labels)
    return _accuracy_kernel(probs, labels)


def nll(probs: Array, labels: Array, eps: float = 1e-12) -> Array:
    """Mean negative log-likelihood ``-mean_i log p_i(label_i)``.

    This is the (positive) cross-entropy of the predictive distribution,
    lower is better. Probabilities are clipped from below at ``eps`` before
    the logarithm so that a zero probability gives ``-log(eps)`` rather
    than ``inf``.

    Parameters
    ----------
    probs : Array, shape (n, K)
        Predictive (model-averaged) class probabilities.
    labels : Array of int, shape (n,)
        True class indices in ``[0, K)``.
    eps : float, default 1e-12
        Lower clipping value for the probabilities. Note that in float32
        ``log(1e-12)`` is representable, so the clip is effective.

    Returns
    -------
    Array
        Non-negative scalar (for valid probabilities).

    Example:
    >>> import numpy as np
    >>> probs = np.array([[0.5, 0.5], [0.25, 0.75]])
    >>> round(float(nll(probs, np.array([0, 1]))), 4)  # -(log .5 + log .75)/2
    0.4904
    """
    probs, labels = _check_classification(probs, labels)
    return _nll_kernel(probs, labels, jnp.asarray(eps, dtype=probs.dtype))


def brier(probs: Array, labels: Array) -> Array:
    """Multi-class Brier score ``mean_i sum_k (p_ik - onehot(label_i)_k)^2``.

    Ranges from 0 (perfect, confident predictions) to 2 (confidently wrong);
    the uniform prediction scores ``(K - 1) / K``. The squared errors are
    *summed over all K classes* (Brier's original definition). For ``K = 2``
    both classes have the same squared error, ``(p_i1 - y_i)^2``, so this is
    exactly **twice** the binary Brier score of the positive class,
    ``2 * sklearn.metrics.brier_score_loss(labels, probs[:, 1])``.

    Parameters
    ----------
    probs : Array, shape (n, K)
        Predictive (model-averaged) class probabilities.
    labels : Array of int, shape (n,)
        True class indices in ``[0, K)``.

    Returns
    -------
    Array
        Scalar in ``[0, 2]``.

    Example:
    >>> import numpy as np
    >>> probs = np.array([[1.0, 0.0], [0.5, 0.5]])
    >>> float(brier(probs, np.array([0, 1])))  # (0 + 0.5) / 2
    0.25
    """
    probs, labels = _check_classification(probs, labels)
    return _brier_kernel(probs, labels)


def agreement(probs_a: Array, probs_b: Array) -> Array:
    """Top-1 agreement: fraction of examples whose argmax classes coincide.

    The "agreement" of Izmailov et al. (2021), *What Are Bayesian Neural
    Network Posteriors Really Like?*, used to compare an approximate
    predictive distribution with a reference (e.g. HMC) one.

    Parameters
    ----------
    probs_a, probs_b : Array, shape (n, K)
        Two predictive distributions over the same examples.

    Returns
    -------
    Array
        Scalar in ``[0, 1]``; 1 means identical top-1 predictions.

    Example:
    >>> import numpy as np
    >>> a = np.array([[0.9, 0.1], [0.4, 0.6]])
    >>> b = np.array([[0.6, 0.4], [0.7, 0.3]])
    >>> float(agreement(a, b))
    0.5
    """
    probs_a, probs_b = _check_pair(probs_a, probs_b)
    return _agreement_kernel(probs_a, probs_b)


def total_variation(probs_a: Array, probs_b: Array) -> Array:
    """Mean total-variation distance ``mean_i 1/2 sum_k |p_a,ik - p_b,ik|``.

    Parameters
    ----------
    probs_a, probs_b : Array, shape (n, K)
        Two predictive distributions over the same examples.

    Returns
    -------
    Array
        Scalar in ``[0, 1]``; 0 means identical distributions.

    Example:
    >>> import numpy as np
    >>> a = np.array([[1.0, 0.0], [0.5, 0.5]])
    >>> b = np.array([[0.0, 1.0], [0.5, 0.5]])
    >>> float(total_variation(a, b))  # (1 + 0) / 2
    0.5
    """
    probs_a, probs_b = _check_pair(probs_a, probs_b)
    return _total_variation_kernel(probs_a, probs_b)


# --------------------------------------------------------------------------- #
# Regression
# --------------------------------------------------------------------------- #

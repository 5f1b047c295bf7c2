"""Regression metrics in original units: RMSE, Gaussian NLL and the exact mixture NLL of
per-sample Gaussians or Student-t distributions."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax.scipy.special import gammaln

from bnn_ppl import model_average
from bnn_ppl.metrics._checks import (
    _as_float,
    _check_scale_like,
    _check_targets,
    _check_values,
    _check_y_scale,
)
from bnn_ppl.types import Array
from bnn_ppl.validation import InputValueError

_LOG_2PI = math.log(2.0 * math.pi)


def _gaussian_logpdf(y: Array, mean: Array, scale: Array) -> Array:
    z = (y - mean) / scale
    return -0.5 * z**2 - jnp.log(scale) - 0.5 * _LOG_2PI


def _student_t_logpdf(y: Array, loc: Array, scale: Array, df: Array) -> Array:
    z = (y - loc) / scale
    return (
        gammaln((df + 1) / 2)
        - gammaln(df / 2)
        - 0.5 * jnp.log(df * math.pi)
        - jnp.log(scale)
        - (df + 1) / 2 * jnp.log1p(z**2 / df)
    )


def _sum_log_y_scale(y_scale: Array, y: Array) -> Array:
    """``sum_d log(y_scale_d)``: the change-of-units term per example."""
    return jnp.sum(jnp.broadcast_to(jnp.log(y_scale), y.shape[1:]))


@jax.jit
def _rmse_kernel(mean: Array, y: Array, y_scale: Array) -> Array:
    return jnp.sqrt(jnp.mean(((mean - y) * y_scale) ** 2))


@jax.jit
def _gaussian_nll_kernel(mean: Array, scale: Array, y: Array, y_scale: Array) -> Array:
    logp = _gaussian_logpdf(y, mean, scale)  # (n,) or (n, d)
    if logp.ndim == 2:
        logp = jnp.sum(logp, axis=-1)
    return -jnp.mean(logp) + _sum_log_y_scale(y_scale, y)


@jax.jit
def _mixture_nll_kernel(means: Array, scales: Array, y: Array, y_scale: Array) -> Array:
    logp = _gaussian_logpdf(y[None], means, scales)  # (S, n) or (S, n, d)
    return -jnp.mean(model_average.log_density(logp)) + _sum_log_y_scale(y_scale, y)


@jax.jit
def _student_t_mixture_kernel(
    locs: Array, scales: Array, dfs: Array, y: Array, y_scale: Array
) -> Array:
    logp = _student_t_logpdf(y[None], locs, scales, dfs)
    return -jnp.mean(model_average.log_density(logp)) + _sum_log_y_scale(y_scale, y)


@jax.jit
def _gaussian_w2_kernel(
    mean_a: Array, scale_a: Array, mean_b: Array, scale_b: Array, y_scale: Array
) -> Array:
    sq = ((mean_a - mean_b) ** 2 + (scale_a - scale_b) ** 2) * y_scale**2  # (n,) or (n, d)
    if sq.ndim == 2:
        sq = jnp.sum(sq, axis=-1)
    return jnp.mean(jnp.sqrt(sq))


# --------------------------------------------------------------------------- #
# Classification
# --------------------------------------------------------------------------- #
def rmse(mean: Array, y: Array, y_scale: float | Array = 1.0) -> Array:
    """Root mean squared error, optionally converted to original units.

    ``y_scale * sqrt(mean((mean - y)^2))`` with the mean over all elements.
    If the targets were standardised with ``y_std = (y - mu) / y_scale``,
    passing that ``y_scale`` reports the RMSE in the original units.

    Parameters
    ----------
    mean : Array, shape (n,) or (n, d)
        Point predictions (e.g. the predictive mean), same shape as ``y``.
    y : Array, shape (n,) or (n, d)
        Targets.
    y_scale : float or Array, default 1.0
        Positive standardisation scale: a scalar, or (for ``(n, d)``
        targets) an array broadcastable to ``(d,)``.

    Returns
    -------
    Array
        Non-negative scalar.

    Example:
    >>> import numpy as np
    >>> # 2 * sqrt((9 + 16) / 2)
    >>> round(float(rmse(np.array([0.0, 0.0]), np.array([3.0, 4.0]), y_scale=2.0)), 4)
    7.0711
    """
    y = _check_targets(y)
    mean = _check_mean(mean, y)
    y_scale = _check_y_scale(y_scale, y.shape)
    _check_values(mean, "mean")
    _check_values(y, "y")
    _check_values(y_scale, "y_scale", "positive")
    return _rmse_kernel(mean, y, y_scale)


def gaussian_nll(mean: Array, scale: Array, y: Array, y_scale: float | Array = 1.0) -> Array:
    """Mean negative log-likelihood of ``y`` under ``N(mean, scale^2)``.

    ``-mean_n sum_d log N(y_nd; mean_nd, scale_nd^2)``, plus the unit
    conversion term. If the model was fit to standardised targets
    ``y_std = (y - mu) / s``, a density over ``y_std`` converts to one over
    ``y`` by the change of variables ``p(y) = p(y_std) / s``, so

        NLL_original = NLL_standardised + log(s)

    (summed over output dimensions if ``s`` is per-dimension). Pass the
    standardised ``mean``, ``scale`` and ``y`` together with ``y_scale = s``.

    Parameters
    ----------
    mean : Array, shape (n,) or (n, d)
        Predictive means, same shape as ``y``.
    scale : Array
        Positive predictive standard deviations, broadcastable to the shape
        of ``mean`` (e.g. a scalar for homoscedastic noise).
    y : Array, shape (n,) or (n, d)
        Targets.
    y_scale : float or Array, default 1.0
        Positive standardisation scale: a scalar, or (for ``(n, d)``
        targets) an array broadcastable to ``(d,)``.

    Returns
    -------
    Array
        Scalar.

    Example:
    >>> import numpy as np
    >>> # log N(0; 0, 1) = -0.5 log(2 pi) = -0.9189
    >>> round(float(gaussian_nll(np.zeros(3), np.ones(3), np.zeros(3))), 4)
    0.9189
    >>> round(float(gaussian_nll(np.zeros(3), 1.0, np.zeros(3), y_scale=2.0)), 4)
    1.6121
    """
    y = _check_targets(y)
    mean = _check_mean(mean, y)
    scale = _check_scale_like(scale, y.shape, "scale", "mean")
    y_scale = _check_y_scale(y_scale, y.shape)
    _check_values(mean, "mean")
    _check_values(scale, "scale", "positive")
    _check_values(y, "y")
    _check_values(y_scale, "y_scale", "positive")
    return _gaussian_nll_kernel(mean, scale, y, y_scale)


def mixture_nll(means: Array, scales: Array, y: Array, y_scale: float | Array = 1.0) -> Array:
    """NLL of the Bayesian model average as an equal-weight Gaussian mixture.

    With ``S`` posterior samples the BMA predictive density is
    ``p(y_n) = (1/S) sum_s N(y_n; means_sn, scales_sn^2)`` and this returns

        -mean_n log p(y_n) = -mean_n [logsumexp_s log N(y_n; ...) - log S]

    computed stably with ``logsumexp``. For ``(S, n, d)`` inputs each
    component is a product over the ``d`` independent output dimensions
    (log-densities summed over ``d`` before the ``logsumexp``). As in
    :func:`gaussian_nll`, ``log(y_scale)`` (summed over dimensions) is added
    to report the NLL in the original units of standardised targets. The
    UCI "test log-likelihood" reported in papers is minus this value.

    Parameters
    ----------
    means : Array, shape (S, n) or (S, n, d)
        Per-sample predictive means.
    scales : Array
        Per-sample positive predictive standard deviations, broadcastable
        to the shape of ``means``.
    y : Array, shape (n,) or (n, d)
        Targets; must equal ``means.shape[1:]``.
    y_scale : float or Array, default 1.0
        Positive standardisation scale: a scalar, or (for ``(n, d)``
        targets) an array broadcastable to ``(d,)``.

    Returns
    -------
    Array
        Scalar.

    Example:
    >>> import numpy as np
    >>> means = np.array([[-1.0], [1.0]])  # S=2 components, n=1
    >>> scales = np.ones((2, 1))
    >>> # log p(0) = log N(0; 1, 1) = -0.5 - 0.5 log(2 pi)
    >>> round(float(mixture_nll(means, scales, np.zeros(1))), 4)
    1.4189
    """
    y = _check_targets(y)
    means = check_per_sample(means, y, "means")
    scales = _check_scale_like(scales, means.shape, "scales", "means")
    y_scale = _check_y_scale(y_scale, y.shape)
    _check_values(means, "means")
    _check_values(scales, "scales", "positive")
    _check_values(y, "y")
    _check_values(y_scale, "y_scale", "positive")
    return _mixture_nll_kernel(means, scales, y, y_scale)


def gaussian_w2(
    mean_a: Array,
    scale_a: Array,
    mean_b: Array,
    scale_b: Array,
    y_scale: float | Array = 1.0,
) -> Array:
    """Mean 2-Wasserstein distance between two Gaussian predictives, row by row.

    For one-dimensional Gaussians ``W2(N(m_a, s_a^2), N(m_b, s_b^2))^2 = (m_a - m_b)^2 +
    (s_a - s_b)^2`` exactly; for ``(n, d)`` rows with independent output dimensions the squares
    are summed over ``d``. Returns ``mean_n W2_n``, times ``y_scale`` (original units of
    standardised targets). Applied to two Bayesian model averages moment-matched to Gaussians
    (:func:`bnn_ppl.bma`) it measures how far one method's predictive is from a reference's;
    for a non-Gaussian mixture it compares its first two moments only.

    Parameters
    ----------
    mean_a, mean_b : Array, shape (n,) or (n, d)
        The two predictives' means.
    scale_a, scale_b : Array
        Their positive standard deviations, broadcastable to the shape of the means.
    y_scale : float or Array, default 1.0
        Positive standardisation scale: a scalar, or an array broadcastable to ``(d,)``.

    Returns
    -------
    Array
        The mean W2 over rows, a non-negative scalar in ``y_scale``'s units.

    Example:
    >>> import numpy as np
    >>> # rows: sqrt(3^2 + 0^2) = 3 and sqrt(0^2 + 4^2) = 4, averaged, times 2
    >>> float(gaussian_w2(np.array([3.0, 0.0]), np.array([1.0, 5.0]),
    ...                   np.zeros(2), np.ones(2), y_scale=2.0))
    7.0
    """
    mean_a, mean_b = _as_float(mean_a, "mean_a"), _as_float(mean_b, "mean_b")
    if mean_a.shape != mean_b.shape or mean_b.ndim not in (1, 2) or mean_b.size == 0:
        raise InputValueError(
            f"mean_a and mean_b must have one non-empty shape (n,) or (n, d); got {mean_a.shape}"
            f" and {mean_b.shape}"
        )
    scale_a = _check_scale_like(scale_a, mean_b.shape, "scale_a", "mean_b")
    scale_b = _check_scale_like(scale_b, mean_b.shape, "scale_b", "mean_b")
    y_scale = _check_y_scale(y_scale, mean_b.shape)
    for x, name in ((mean_a, "mean_a"), (mean_b, "mean_b")):
        _check_values(x, name)
    for x, name in ((scale_a, "scale_a"), (scale_b, "scale_b"), (y_scale, "y_scale")):
        _check_values(x, name, "positive")
    return _gaussian_w2_kernel(mean_a, scale_a, mean_b, scale_b, y_scale)


def _check_mean(mean: object, y: Array) -> Array:
    """``mean`` as a floating array of ``y``'s shape."""
    mean = _as_float(mean, "mean")
    if mean.shape != y.shape:
        raise InputValueError(
            f"mean must have the same shape as y {y.shape}; got shape {mean.shape}"
        )
    return mean


def check_per_sample(a: object, y: Array, name: str) -> Array:
    """Per-sample predictions ``(S,) + y.shape`` with ``S >= 1`` (as floats)."""
    a = _as_float(a, name)
    if a.ndim != y.ndim + 1 or a.shape[1:] != y.shape:
        raise InputValueError(
            f"{name} must have shape (S,) + y.shape = (S, {', '.join(map(str, y.shape))})"
            f"; got shape {a.shape}"
        )
    if a.shape[0] == 0:
        raise InputValueError(
            f"{name} must contain at least one sample (S >= 1); got shape {a.shape}"
        )
    return a


def student_t_mixture_nll(
    locs: Array, scales: Array, dfs: Array, y: Array, y_scale: float | Array = 1.0
) -> Array:
    """NLL of the Bayesian model average of per-sample Student-t predictions.

    ``-mean_n log (1/S) sum_s t(y_n; df_sn, locs_sn, scales_sn)``, stably with ``logsumexp``;
    as :func:`mixture_nll` (``(S, n, d)`` components are products over ``d``; ``log(y_scale)``
    is added for the original units), with Student-t components: the test NLL of a
    :class:`bnn_ppl.likelihoods.StudentT` model.

    Parameters
    ----------
    locs : Array, shape (S, n) or (S, n, d)
        Per-sample locations.
    scales, dfs : Array
        Per-sample positive scales and degrees of freedom, broadcastable to ``locs``.
    y : Array, shape (n,) or (n, d)
        Targets; must equal ``locs.shape[1:]``.
    y_scale : float or Array, default 1.0
        Positive standardisation scale (as in :func:`mixture_nll`).

    Example:
    >>> import numpy as np
    >>> # one component, df=1 (Cauchy): log p(0) = -log(pi)
    >>> round(float(student_t_mixture_nll(np.zeros((1, 1)), 1.0, 1.0, np.zeros(1))), 4)
    1.1447
    """
    y = _check_targets(y)
    locs = check_per_sample(locs, y, "locs")
    scales = _check_scale_like(scales, locs.shape, "scales", "locs")
    dfs = _check_scale_like(dfs, locs.shape, "dfs", "locs")
    y_scale = _check_y_scale(y_scale, y.shape)
    _check_values(locs, "locs")
    _check_values(scales, "scales", "positive")
    _check_values(dfs, "dfs", "positive")
    _check_values(y, "y")
    _check_values(y_scale, "y_scale", "positive")
    return _student_t_mixture_kernel(locs, scales, dfs, y, y_scale)

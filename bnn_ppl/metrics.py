"""Predictive-performance and calibration metrics.

Every function here is a pure function of *already model-averaged*
predictions and targets, written in :mod:`jax.numpy`. Inputs may be NumPy or
JAX arrays; outputs are JAX scalars or arrays.

Conventions
-----------
Classification
    ``probs`` has shape ``(n, K)``: the predictive class probabilities of the
    Bayesian model average (BMA), i.e. already averaged over posterior
    samples. ``labels`` are integers of shape ``(n,)`` with values in
    ``[0, K)``. Per-sample predictions with a leading sample axis
    ``(S, n, K)`` must be averaged first (``bma`` lives elsewhere in the
    package). The predicted class is ``argmax`` over the last axis; ties go
    to the lowest class index.
Regression
    Predictive means / scales and targets have shape ``(n,)`` or ``(n, d)``.
    For ``(n, d)`` the output dimensions are treated as independent, so
    log-densities are *summed* over ``d`` and *averaged* over ``n``.
    :func:`mixture_nll` takes per-sample means and scales with a leading
    sample axis, ``(S, n)`` or ``(S, n, d)``.
Units
    When targets were standardised, ``y_std = (y - y_mean) / y_scale``,
    pass ``y_scale`` to report :func:`rmse`, :func:`gaussian_nll` and
    :func:`mixture_nll` in the original units of ``y``.
Signs
    Every ``*nll`` function returns a *negative* log-likelihood (lower is
    better, usually positive). The "test log-likelihood" reported in UCI
    benchmarks is minus :func:`mixture_nll`.
Validation
    Every argument is checked and a problem raises :class:`ValueError` naming
    the argument and saying what is wrong. Shapes are checked first, always
    (shapes are static, so this also works under :func:`jax.jit`); empty
    inputs (``n == 0``) are rejected. Checks on *values* are then performed
    only when the argument is concrete, i.e. not a JAX tracer inside a
    transformed function (under ``jit`` the values are unknown):

    * probabilities (``probs``, ``probs_a``, ``probs_b``) must be finite and
      non-negative, and every row must sum to 1 within ``atol = 1e-3``
      (``sqrt(eps)`` for 16-bit floats), loose enough for float32 softmax
      outputs and model averages, tight enough to catch logits,
      log-probabilities and unnormalised scores;
    * labels must lie in ``[0, K)``;
    * regression means, targets and scales must be finite, and ``scale``,
      ``scales`` and ``y_scale`` must be positive.

    The value checks are a few vectorised NumPy reductions over the array
    (negligible next to the metric itself); the explanations of a failure
    are computed only once it has failed.

Arguments that select code paths (``num_bins``, ``binning``) must be static
under :func:`jax.jit`, e.g. bound with :func:`functools.partial`. Each public
function validates its inputs in Python and then calls a small jitted kernel,
so eager calls compile once per input shape instead of dispatching op by op.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import logsumexp

from bnn_ppl.types import Array
from bnn_ppl.validation import InputTypeError, InputValueError

__all__ = [
    "ReliabilityCurve",
    "accuracy",
    "agreement",
    "brier",
    "ece",
    "gaussian_nll",
    "mixture_nll",
    "nll",
    "reliability_curve",
    "rmse",
    "total_variation",
]

_BINNINGS = ("width", "mass")
_LOG_2PI = math.log(2.0 * math.pi)


# --------------------------------------------------------------------------- #
# Validation helpers
# --------------------------------------------------------------------------- #
def _is_concrete(x: object) -> bool:
    """True when ``x`` holds actual values (is not a JAX tracer)."""
    return not isinstance(x, jax.core.Tracer)


def _as_float(x: object, name: str) -> Array:
    """A floating array (ints are promoted). Concrete input stays a NumPy array, checked on the
    host: converting it to a JAX array compiles a program, and no bad input may compile."""
    if not _is_concrete(x):
        arr = jnp.asarray(x)
        return arr if jnp.issubdtype(arr.dtype, jnp.floating) else arr.astype(float)
    if x is None:
        raise InputTypeError(f"{name} must be an array, got None")
    arr = np.asarray(x)
    floating = jnp.issubdtype(arr.dtype, jnp.floating)  # bfloat16 included
    if arr.dtype == object or not (floating or arr.dtype.kind in "iu"):
        raise InputTypeError(f"{name} must be a real numeric array; got dtype {arr.dtype}")
    if not floating:
        return arr.astype(jax.dtypes.canonicalize_dtype(float))
    target = jax.dtypes.canonicalize_dtype(arr.dtype)  # float32 unless jax_enable_x64
    if target != arr.dtype and arr.size:
        big = float(np.max(np.abs(arr)))
        if np.isfinite(big) and big > float(np.finfo(target).max):
            raise InputValueError(
                f"{name} holds values up to {big:.3g}, beyond {target}'s range in which "
                f"bnn_ppl computes; rescale {name} or enable jax_enable_x64"
            )
        arr = arr.astype(target)
    return arr


def _prob_atol(dtype: object) -> float:
    """Tolerance on the row sums of probabilities: 1e-3, or sqrt(eps) if looser."""
    return max(1e-3, math.sqrt(float(jnp.finfo(dtype).eps)))


def _first(mask: np.ndarray) -> tuple[int, ...]:
    """Index (as a tuple of ints) of the first True entry of ``mask``."""
    return tuple(int(i) for i in np.unravel_index(int(np.argmax(mask)), mask.shape))


def _check_values(x: Array, name: str, kind: str = "finite") -> None:
    """Check the *values* of a concrete array; a no-op for JAX tracers.

    The single value check shared by all public functions, run after the
    shape checks. ``kind`` is one of

    ``"finite"``
        no NaN or inf;
    ``"positive"``
        finite and ``> 0`` (scales);
    ``"probs"``
        an ``(n, K)`` matrix whose rows are probability vectors: finite,
        ``>= 0``, each row summing to 1 within :func:`_prob_atol`.

    The success path is two vectorised passes over the array (row sums as a
    BLAS mat-vec, and ``min``; NaN and inf propagate into both, so no boolean
    mask is built). Offenders are located for the message only on failure.
    """
    if not _is_concrete(x):
        return
    a = np.asarray(x)
    if a.size == 0:
        return
    if kind == "probs":
        dtype, atol = a.dtype, _prob_atol(a.dtype)
        if a.dtype not in (np.float32, np.float64):  # 16-bit floats: sum in float32
            a = a.astype(np.float32)
        sums = a @ np.ones(a.shape[-1], a.dtype)  # row sums; NaN / inf propagate
        lo = a.min()
        finite = bool(np.isfinite(lo) and np.isfinite(sums).all())
    else:
        lo, hi = a.min(), a.max()
        finite = bool(np.isfinite(lo) and np.isfinite(hi))
    if not finite:
        bad = ~np.isfinite(a)
        if bad.any():  # otherwise finite entries overflowed a row sum: caught below
            where = f" at index {_first(bad)}" if a.ndim else ""
            raise InputValueError(
                f"{name} must be finite (no NaN or inf); found {a[_first(bad)]}{where} "
                f"({int(bad.sum())} of {a.size} entries are NaN or inf)"
            )
    if kind == "positive" and not lo > 0:
        bad = a <= 0
        where = f" at index {_first(bad)}" if a.ndim else ""
        raise InputValueError(
            f"{name} must be positive (> 0); found {a[_first(bad)]}{where} "
            f"({int(bad.sum())} of {a.size} entries are <= 0)"
        )
    if kind == "positive" and a.dtype == np.float32 and lo < np.finfo(a.dtype).tiny:
        raise InputValueError(
            f"{name} holds {float(lo):.3g}, below the smallest normal float32 "
            f"({float(np.finfo(np.float32).tiny):.3g}) in which bnn_ppl computes; rescale "
            f"{name} or enable jax_enable_x64"
        )
    if kind != "probs":
        return
    hint = (
        "Did you pass logits or log-probabilities? Apply jax.nn.softmax(logits, axis=-1) "
        "(or jnp.exp(log_probs)) first."
    )
    if lo < 0:
        i = np.unravel_index(int(np.argmin(a)), a.shape)
        raise InputValueError(
            f"{name} must be non-negative probabilities; the most negative entry is "
            f"{a[i]:.6g} at index {tuple(int(j) for j in i)} "
            f"({int((a < 0).sum())} of {a.size} entries are negative). {hint}"
        )
    dev = np.abs(sums - 1)
    worst = int(np.argmax(dev))
    if not dev[worst] <= atol:
        msg = (
            f"each row of {name} must sum to 1 (atol={atol:g} for {dtype}); "
            f"{int((dev > atol).sum())} of {a.shape[0]} rows do not, the worst is row {worst}, "
            f"which sums to {sums[worst]:.6g} (off by {dev[worst]:.3g}). {hint}"
        )
        if a.shape[0] > 1 and np.all(np.abs(a.sum(axis=0) - 1) <= atol):
            msg += f" The columns of {name} sum to 1: did you pass it transposed, as (K, n)?"
        raise InputValueError(msg)


def _check_probs(probs: object, name: str = "probs") -> Array:
    """Validate the shape of a ``(n, K)`` probability matrix, ``n, K >= 1``."""
    probs = _as_float(probs, name)
    if probs.ndim != 2:
        raise InputValueError(f"{name} must be 2-D with shape (n, K); got shape {probs.shape}")
    if probs.shape[0] == 0:
        raise InputValueError(
            f"{name} must contain at least one example (n >= 1); got shape {probs.shape}"
        )
    if probs.shape[1] == 0:
        raise InputValueError(
            f"{name} must have at least one class (K >= 1); got shape {probs.shape}"
        )
    return probs


def _check_labels(labels: object, n: int, num_classes: int) -> Array:
    """Validate integer labels of shape ``(n,)`` with values in ``[0, K)``."""
    if not _is_concrete(labels):
        arr = jnp.asarray(labels)
    elif labels is None:
        raise InputTypeError("labels must be an array of class indices, got None")
    else:
        arr = np.asarray(labels)
    if arr.ndim != 1 or arr.shape[0] != n:
        raise InputValueError(
            f"labels must be 1-D with shape (n,) = ({n},) to match probs; got shape {arr.shape}"
        )
    if not jnp.issubdtype(arr.dtype, jnp.integer):
        raise InputValueError(f"labels must have an integer dtype; got {arr.dtype}")
    if _is_concrete(labels):
        lo, hi = int(arr.min()), int(arr.max())
        if lo < 0 or hi >= num_classes:
            raise InputValueError(
                f"labels must lie in [0, K) = [0, {num_classes}); got values in [{lo}, {hi}]"
            )
    return arr


def _check_classification(probs: object, labels: object) -> tuple[Array, Array]:
    probs = _check_probs(probs)
    labels = _check_labels(labels, probs.shape[0], probs.shape[1])
    _check_values(probs, "probs", "probs")
    return probs, labels


def _check_pair(probs_a: object, probs_b: object) -> tuple[Array, Array]:
    probs_a = _check_probs(probs_a, "probs_a")
    probs_b = _check_probs(probs_b, "probs_b")
    if probs_a.shape != probs_b.shape:
        raise InputValueError(
            "probs_a and probs_b must have the same shape (n, K); "
            f"got {probs_a.shape} and {probs_b.shape}"
        )
    _check_values(probs_a, "probs_a", "probs")
    _check_values(probs_b, "probs_b", "probs")
    return probs_a, probs_b


def _check_binning(num_bins: int, binning: str) -> None:
    if isinstance(num_bins, bool) or not isinstance(num_bins, (int, np.integer)):
        raise InputValueError(
            f"num_bins must be a Python int >= 1 (static under jit); got {num_bins!r}"
        )
    if num_bins < 1:
        raise InputValueError(f"num_bins must be >= 1; got {num_bins}")
    if binning not in _BINNINGS:
        raise InputValueError(f"binning must be one of {_BINNINGS}; got {binning!r}")


def _check_targets(y: object) -> Array:
    """Validate regression targets of shape ``(n,)`` or ``(n, d)``."""
    y = _as_float(y, "y")
    if y.ndim not in (1, 2):
        raise InputValueError(f"y must have shape (n,) or (n, d); got shape {y.shape}")
    if y.shape[0] == 0 or y.size == 0:
        raise InputValueError(f"y must be non-empty (n >= 1, d >= 1); got shape {y.shape}")
    return y


def _check_scale_like(
    x: object, target_shape: tuple[int, ...], name: str, target_name: str
) -> Array:
    """Validate that ``x`` broadcasts to ``target_shape`` without enlarging it."""
    x = _as_float(x, name)
    try:
        shape = np.broadcast_shapes(x.shape, target_shape)
    except ValueError:
        shape = None
    if shape != tuple(target_shape):
        raise InputValueError(
            f"{name} must be broadcastable to the shape of {target_name} "
            f"{tuple(target_shape)}; got shape {x.shape}"
        )
    return x


def _check_y_scale(y_scale: object, y_shape: tuple[int, ...]) -> Array:
    """Validate the shape of ``y_scale`` against the per-example target shape.

    ``y_scale`` is a positive scalar or an array broadcastable to the
    per-example target shape ``y_shape[1:]`` (e.g. one std per output
    dimension). Its values are checked by :func:`_check_values`.
    """
    return _check_scale_like(y_scale, tuple(y_shape[1:]), "y_scale", "y[0]")


def _gaussian_logpdf(y: Array, mean: Array, scale: Array) -> Array:
    z = (y - mean) / scale
    return -0.5 * z**2 - jnp.log(scale) - 0.5 * _LOG_2PI


def _sum_log_y_scale(y_scale: Array, y: Array) -> Array:
    """``sum_d log(y_scale_d)``: the change-of-units term per example."""
    return jnp.sum(jnp.broadcast_to(jnp.log(y_scale), y.shape[1:]))


# --------------------------------------------------------------------------- #
# Jitted kernels (inputs already validated)
# --------------------------------------------------------------------------- #
_static_bins = functools.partial(jax.jit, static_argnames=("num_bins", "binning"))


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
    if logp.ndim == 3:
        logp = jnp.sum(logp, axis=-1)
    log_mix = logsumexp(logp, axis=0) - math.log(means.shape[0])  # (n,)
    return -jnp.mean(log_mix) + _sum_log_y_scale(y_scale, y)


# --------------------------------------------------------------------------- #
# Classification
# --------------------------------------------------------------------------- #
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


class ReliabilityCurve(NamedTuple):
    """Per-bin statistics of top-1 confidence versus accuracy.

    All fields are arrays of shape ``(num_bins,)``.

    Attributes
    ----------
    bin_lower, bin_upper : Array
        Bin bounds. For ``binning="width"`` these are the fixed edges
        ``b / num_bins`` and ``(b + 1) / num_bins``; bins are half-open
        ``(lo, hi]`` except the first, which is closed ``[0, hi]``. For
        ``binning="mass"`` they are the smallest and largest confidence that
        fell into the bin (NaN for an empty bin).
    confidence : Array
        Mean top-1 confidence of the examples in the bin (NaN if empty).
    accuracy : Array
        Fraction of examples in the bin whose top-1 prediction is correct
        (NaN if empty).
    count : Array of int
        Number of examples in the bin (0 if empty).
    """

    bin_lower: Array
    bin_upper: Array
    confidence: Array
    accuracy: Array
    count: Array


def _bin_indices(conf: Array, num_bins: int, binning: str) -> Array:
    """Assign each confidence to a bin in ``[0, num_bins)``."""
    n = conf.shape[0]
    if binning == "width":
        # Interior edges k / B (k = 1 .. B-1), correctly rounded to the
        # confidence dtype, so that a confidence equal to an edge is compared
        # exactly with that edge. The bin index is the number of interior edges
        # strictly below c: edges[b] < c <= edges[b + 1] -> b, i.e. (lo, hi];
        # c == 0 lands in bin 0 and c == 1 in bin B - 1.
        inner = jnp.asarray(np.arange(1, num_bins) / num_bins, dtype=conf.dtype)
        return jnp.sum(conf[:, None] > inner[None, :], axis=1, dtype=jnp.int32)
    # Equal mass: split the sorted confidences into num_bins contiguous groups
    # whose sizes differ by at most one (larger groups first, as in
    # numpy.array_split); groups are empty when num_bins > n. n is static.
    sizes = np.full(num_bins, n // num_bins)
    sizes[: n % num_bins] += 1
    sorted_bin = np.repeat(np.arange(num_bins), sizes)  # bin of sorted position
    order = jnp.argsort(conf, stable=True)
    sorted_bin = jnp.asarray(sorted_bin, dtype=jnp.int32)
    return jnp.zeros(n, dtype=jnp.int32).at[order].set(sorted_bin)


def _accurate_segment_sum(values: Array, idx: Array, num_segments: int) -> Array:
    """``segment_sum`` of floats without the error growth of a sequential sum.

    XLA's scatter-add accumulates each segment sequentially, so in float32 a
    bin's summed confidence drifts with its size (the mean is off by ~2e-4 at
    1e5 and ~4e-3 at 1e6 examples in one bin). Here each segment is summed in
    chunks of ``chunk`` consecutive examples, and the chunk sums are then
    reduced pairwise, which keeps the error at float32 rounding level for any
    ``n`` at the same cost (the intermediate has at most ``n + num_segments``
    entries). Integer counts need none of this.
    """
    n = values.shape[0]
    chunk = max(64, num_segments)
    num_chunks = -(-n // chunk)
    seg = (jnp.arange(n, dtype=idx.dtype) // chunk) * num_segments + idx
    partial = jax.ops.segment_sum(values, seg, num_segments=num_chunks * num_segments)
    return jnp.sum(partial.reshape(num_chunks, num_segments), axis=0)


@_static_bins
def _reliability_kernel(
    probs: Array, labels: Array, num_bins: int, binning: str
) -> ReliabilityCurve:
    """Per-bin statistics; the single binning code shared by the public API."""
    conf = jnp.max(probs, axis=-1)
    correct = jnp.argmax(probs, axis=-1) == labels
    idx = _bin_indices(conf, num_bins, binning)

    count = jax.ops.segment_sum(jnp.ones_like(idx), idx, num_segments=num_bins)
    sum_correct = jax.ops.segment_sum(correct.astype(idx.dtype), idx, num_segments=num_bins)
    sum_conf = _accurate_segment_sum(conf, idx, num_bins)
    nonempty = count > 0
    denom = jnp.maximum(count, 1).astype(probs.dtype)
    nan = jnp.asarray(jnp.nan, dtype=probs.dtype)
    mean_conf = jnp.where(nonempty, sum_conf / denom, nan)
    mean_acc = jnp.where(nonempty, sum_correct / denom, nan)

    if binning == "width":
        edges = jnp.asarray(np.arange(num_bins + 1) / num_bins, dtype=probs.dtype)
        lower, upper = edges[:-1], edges[1:]
    else:
        lower = jax.ops.segment_min(conf, idx, num_segments=num_bins)
        upper = jax.ops.segment_max(conf, idx, num_segments=num_bins)
        lower = jnp.where(nonempty, lower, nan)
        upper = jnp.where(nonempty, upper, nan)
    return ReliabilityCurve(lower, upper, mean_conf, mean_acc, count)


@jax.jit
def _ece_from_curve(curve: ReliabilityCurve) -> Array:
    """``sum_b (n_b / n) |acc_b - conf_b|`` over the non-empty bins of ``curve``."""
    gap = jnp.abs(curve.accuracy - curve.confidence)
    weight = curve.count / jnp.sum(curve.count)
    return jnp.sum(jnp.where(curve.count > 0, weight * gap, 0.0))


def reliability_curve(
    probs: Array, labels: Array, num_bins: int = 15, binning: str = "width"
) -> ReliabilityCurve:
    """Reliability diagram data for the top-1 confidence ``max_k p_k``.

    Parameters
    ----------
    probs : Array, shape (n, K)
        Predictive (model-averaged) class probabilities.
    labels : Array of int, shape (n,)
        True class indices in ``[0, K)``.
    num_bins : int, default 15
        Number of bins (static under ``jit``).
    binning : {"width", "mass"}, default "width"
        ``"width"``: equal-width bins on ``[0, 1]``, half-open ``(lo, hi]``
        except the first which also contains 0 (so a confidence of exactly
        1.0 goes into the last bin). ``"mass"``: equal-mass bins; the
        confidences are sorted (stably) and split into ``num_bins``
        contiguous groups whose sizes differ by at most one, the first
        ``n % num_bins`` groups holding the extra example. Tied
        confidences may therefore be split across neighbouring bins.

    Returns
    -------
    ReliabilityCurve
        Per-bin ``bin_lower, bin_upper, confidence, accuracy, count``;
        empty bins have NaN confidence/accuracy and count 0.

    Example:
    >>> import numpy as np
    >>> probs = np.array([[0.9, 0.1], [0.8, 0.2], [0.4, 0.6]])
    >>> curve = reliability_curve(probs, np.array([0, 1, 1]), num_bins=2)
    >>> curve.count.tolist()
    [0, 3]
    >>> [round(float(v), 4) for v in curve.confidence[1:]]
    [0.7667]
    """
    _check_binning(num_bins, binning)
    probs, labels = _check_classification(probs, labels)
    return _reliability_kernel(probs, labels, num_bins=num_bins, binning=binning)


def ece(probs: Array, labels: Array, num_bins: int = 15, binning: str = "width") -> Array:
    """Expected calibration error of the top-1 confidence.

    ``ECE = sum_b (n_b / n) * |acc_b - conf_b|`` over the bins of
    :func:`reliability_curve` (same binning code); empty bins contribute 0.

    Parameters
    ----------
    probs : Array, shape (n, K)
        Predictive (model-averaged) class probabilities.
    labels : Array of int, shape (n,)
        True class indices in ``[0, K)``.
    num_bins : int, default 15
        Number of bins (static under ``jit``).
    binning : {"width", "mass"}, default "width"
        Equal-width or equal-mass bins, see :func:`reliability_curve`.

    Returns
    -------
    Array
        Scalar in ``[0, 1]``.

    Example:
    >>> import numpy as np
    >>> probs = np.array([[0.9, 0.1], [0.8, 0.2], [0.4, 0.6]])
    >>> # one non-empty bin: conf 0.7667, acc 2/3
    >>> round(float(ece(probs, np.array([0, 1, 1]), num_bins=2)), 4)
    0.1
    """
    curve = reliability_curve(probs, labels, num_bins=num_bins, binning=binning)
    return _ece_from_curve(curve)


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
    mean = _as_float(mean, "mean")
    if mean.shape != y.shape:
        raise InputValueError(
            f"mean must have the same shape as y {y.shape}; got shape {mean.shape}"
        )
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
    mean = _as_float(mean, "mean")
    if mean.shape != y.shape:
        raise InputValueError(
            f"mean must have the same shape as y {y.shape}; got shape {mean.shape}"
        )
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
    means = _as_float(means, "means")
    if means.ndim != y.ndim + 1 or means.shape[1:] != y.shape:
        raise InputValueError(
            f"means must have shape (S,) + y.shape = (S, {', '.join(map(str, y.shape))})"
            f"; got shape {means.shape}"
        )
    if means.shape[0] == 0:
        raise InputValueError(
            f"means must contain at least one sample (S >= 1); got shape {means.shape}"
        )
    scales = _check_scale_like(scales, means.shape, "scales", "means")
    y_scale = _check_y_scale(y_scale, y.shape)
    _check_values(means, "means")
    _check_values(scales, "scales", "positive")
    _check_values(y, "y")
    _check_values(y_scale, "y_scale", "positive")
    return _mixture_nll_kernel(means, scales, y, y_scale)

"""Argument checks shared by the metrics (shapes always; values when concrete, on the host)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from bnn_ppl.types import Array
from bnn_ppl.validation import InputTypeError, InputValueError

_BINNINGS = ("width", "mass")


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

"""Input checks, in one place, raised eagerly before anything is traced or compiled."""

# Notes:
#
# Every check raises :class:`InputValueError` (a ``ValueError``: bad value) or
# :class:`InputTypeError` (a ``TypeError``: bad type) with a message that names the argument and
# says how to fix it. Nothing is dropped, clipped or repaired silently.
#
# Both derive from :class:`InputError`, the one exception type bnn_ppl raises for a bad argument,
# file or configuration. ``except ValueError`` / ``except TypeError`` still work; the command line
# catches ``InputError`` alone, so that a bug (any other exception) shows its traceback instead of
# passing for a user error.

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "InputError",
    "InputValueError",
    "InputTypeError",
    "check_positive",
    "check_int",
    "check_number",
    "check_bool",
    "check_choice",
    "check_key",
    "as_array",
    "check_same_length",
    "check_labels",
    "check_batch_size",
    "renamed_argument",
    "check_init_values",
]


class InputError(Exception):
    """Base of every error bnn_ppl raises for a bad argument, file or configuration."""


class InputValueError(InputError, ValueError):
    """A bad value (NaN, out of range, wrong shape, unknown name, ...): a ``ValueError``.

    Example:
        >>> import numpy as np
        >>> from bnn_ppl import validation
        >>> validation.check_positive("temperature", 0.5)
        0.5
        >>> validation.check_positive("temperature", 0.0)
        Traceback (most recent call last):
        ...
        bnn_ppl.validation.InputValueError: temperature must be a finite number > 0, got 0.0. ...
    """


class InputTypeError(InputError, TypeError):
    """A value of the wrong type (``None`` or a str where a number belongs): a ``TypeError``."""


def _is_concrete(a: Any) -> bool:
    """Not a JAX tracer (none exists before JAX is imported; this module imports it lazily)."""
    jax = sys.modules.get("jax")
    return jax is None or not isinstance(a, jax.core.Tracer)


_F32 = np.finfo(np.float32)


def _number_type_ok(value: Any) -> bool:
    if isinstance(value, bool | np.bool_):
        return False
    if isinstance(value, int | float | np.floating | np.integer):
        return True
    # a concrete 0-d array (jnp.float32(0.3), np.array(2.0)) counts as a number
    return (
        hasattr(value, "shape")
        and np.shape(value) == ()
        and _is_concrete(value)
        and np.issubdtype(np.asarray(value).dtype, np.number)
        and not np.issubdtype(np.asarray(value).dtype, np.complexfloating)
    )


def check_number(
    name: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    low_inclusive: bool = True,
    high_inclusive: bool = True,
) -> float:
    """Return ``float(value)`` if it is a finite real number in the given range.

    Raises:
        InputTypeError: ``value`` is not a real number (``None``, a str, a bool, complex, ...).
        InputValueError: NaN, inf, or outside ``[low, high]`` (open ends where not inclusive).

    Example:
        >>> check_number("target_accept_prob", 0.8, low=0, high=1, low_inclusive=False,
        ...              high_inclusive=False)
        0.8
    """
    if not _number_type_ok(value):
        raise InputTypeError(
            f"{name} must be a real number, got {value!r} ({type(value).__name__})."
        )
    v = float(value)
    if not math.isfinite(v):
        raise InputValueError(f"{name} must be a finite number, got {v!r}.")
    too_low = low is not None and (v < low or (v == low and not low_inclusive))
    too_high = high is not None and (v > high or (v == high and not high_inclusive))
    if too_low or too_high:
        if low is not None and high is not None:
            rng = f"in {'[' if low_inclusive else '('}{low}, {high}{']' if high_inclusive else ')'}"
        elif low is not None:
            rng = f"{'>=' if low_inclusive else '>'} {low}"
        else:
            rng = f"{'<=' if high_inclusive else '<'} {high}"
        raise InputValueError(f"{name} must be {rng}, got {v!r}.")
    return v


def check_positive(name: str, value: Any) -> float:
    """Return ``float(value)`` if it is a finite number > 0, else raise.

    The value must also survive float32, the dtype everything is computed in: a denormal such
    as ``1e-320`` (zero in float32) or ``1e39`` (inf in float32) is refused, not rounded.

    Raises:
        InputTypeError: not a real number.
        InputValueError: NaN, inf, ``<= 0``, or not representable as a normal float32.
    """
    if not _number_type_ok(value):
        raise InputTypeError(f"{name} must be a number, got {value!r} ({type(value).__name__}).")
    v = float(value)
    if not math.isfinite(v) or v <= 0:
        raise InputValueError(
            f"{name} must be a finite number > 0, got {v!r}. Pass a positive value for {name}."
        )
    if not float(_F32.tiny) <= v <= float(_F32.max):
        raise InputValueError(
            f"{name}={v!r} cannot be represented in float32 (normal range "
            f"[{float(_F32.tiny):.3g}, {float(_F32.max):.3g}]), in which bnn_ppl computes; "
            f"pass a value in that range."
        )
    return v


def check_chunk_size(value: Any) -> int | str | None:
    """A ``chunk_size`` of the full-batch potential: a positive int, ``None`` (the default rule)
    or ``"auto"`` (the memory rule of :mod:`bnn_ppl.inference.potential.bnn`).

    Example:
        >>> check_chunk_size("auto"), check_chunk_size(None), check_chunk_size(64)
        ('auto', None, 64)
    """
    if isinstance(value, str) and value != "auto":
        raise InputValueError(
            f"chunk_size must be a positive int, None (the default rule) or 'auto' (the "
            f"memory rule), got {value!r}."
        )
    return value if value is None or isinstance(value, str) else check_int("chunk_size", value)


def rows_per_call(chunk_size: Any, n: int) -> int:
    """Rows of ``n`` per network call of a prediction: ``chunk_size`` (at most ``n``), or all
    ``n`` for ``None`` and ``"auto"``. Example: ``rows_per_call("auto", 10) == 10``."""
    chunk = check_chunk_size(chunk_size)
    return n if chunk is None or isinstance(chunk, str) else min(chunk, n)


def check_int(name: str, value: Any, *, minimum: int = 1, maximum: int | None = None) -> int:
    """Return ``value`` as an ``int`` if it is an integer in ``[minimum, maximum]``.

    Counts are never rounded: ``2.5`` chains, ``2.0`` (a float), ``"2"``, ``True`` and ``None``
    are refused with an ``InputTypeError``.

    Example:
        >>> check_int("num_chains", 2)
        2
        >>> check_int("num_chains", 2.5)
        Traceback (most recent call last):
        ...
        bnn_ppl.validation.InputTypeError: num_chains must be an int, got 2.5 (float). ...
    """
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
        hint = ""
        if isinstance(value, float | np.floating) and math.isfinite(value) and value == int(value):
            hint = f" Pass {int(value)}."
        elif isinstance(value, str):
            hint = " Convert it with int(...)."
        hint = hint or " Pass a whole number."
        raise InputTypeError(
            f"{name} must be an int, got {value!r} ({type(value).__name__}).{hint}"
        )
    v = int(value)
    if v < minimum or (maximum is not None and v > maximum):
        bound = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
        raise InputValueError(f"{name} must be an int {bound}, got {v}.")
    return v


def check_bool(name: str, value: Any) -> bool:
    """Return ``value`` if it is a bool (``True``/``False``), else raise ``InputTypeError``."""
    if not isinstance(value, bool | np.bool_):
        raise InputTypeError(
            f"{name} must be True or False, got {value!r} ({type(value).__name__})."
        )
    return bool(value)


def check_key(name: str, key: Any) -> Any:
    """Return ``key`` if it is one JAX random key: a typed key (``jax.random.key(0)``) or a raw
    ``uint32`` key of shape ``(2,)`` (``jax.random.PRNGKey(0)``); else raise.

    An int seed is refused rather than converted, so that the same seed cannot silently mean two
    different streams in two places (write ``jax.random.key(seed)``).
    """
    import jax

    if isinstance(key, jax.core.Tracer):
        return key
    if hasattr(key, "dtype") and jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        if np.shape(key) != ():
            raise InputValueError(
                f"{name} must be one key, got an array of keys of shape {np.shape(key)}; pass "
                f"{name}[0] or split it yourself."
            )
        return key
    if hasattr(key, "dtype") and np.dtype(key.dtype) == np.uint32 and np.shape(key) == (2,):
        return key
    raise InputTypeError(
        f"{name} must be a JAX random key such as jax.random.key(0), got {key!r} "
        f"({type(key).__name__})."
    )


def check_choice(name: str, value: Any, choices: Sequence[str]) -> str:
    """Raise ``ValueError`` unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise InputValueError(f"{name} must be one of {sorted(choices)}, got {value!r}.")
    return value


def as_array(name: str, a: Any, *, min_ndim: int = 1) -> np.ndarray:
    """Convert ``a`` to a NumPy array and check that it is non-empty, real and finite.

    Values must also survive the conversion to what JAX computes in (float32 and int32 unless
    ``jax_enable_x64`` is on): ``1e39`` would become inf and an int64 above 2**31 would wrap
    around, so both are refused rather than changed.

    Raises:
        InputTypeError: ``a`` is ``None``, traced, complex or not numeric.
        InputValueError: ``a`` is empty, has fewer than ``min_ndim`` dimensions, holds NaN/inf
            or values out of the computing dtype's range.
    """
    if a is None:
        raise InputTypeError(f"{name} must be an array, got None.")
    if not _is_concrete(a):
        raise InputTypeError(
            f"{name} must be a concrete array, not a traced value (call outside jit)."
        )
    arr = np.asarray(a)
    if np.issubdtype(arr.dtype, np.complexfloating):
        raise InputTypeError(
            f"{name} is complex (dtype {arr.dtype}); bnn_ppl works on real data. Pass the real "
            f"part (np.real({name})) or split real and imaginary parts into features."
        )
    if arr.dtype == object or not (
        np.issubdtype(arr.dtype, np.number) or np.issubdtype(arr.dtype, np.bool_)
    ):
        raise InputTypeError(f"{name} must be a numeric array, got dtype {arr.dtype}.")
    if arr.ndim < min_ndim:
        raise InputValueError(
            f"{name} must have at least {min_ndim} dimension(s), got shape {arr.shape}."
        )
    if arr.size == 0 or (arr.ndim and arr.shape[0] == 0):
        raise InputValueError(f"{name} is empty (shape {arr.shape}); pass at least one example.")
    import jax

    x64 = bool(jax.config.jax_enable_x64)
    if np.issubdtype(arr.dtype, np.floating):
        if not np.all(np.isfinite(arr)):
            bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
            raise InputValueError(
                f"{name} contains {bad} NaN/inf value(s); remove or impute them before fitting "
                "(bnn_ppl never drops or repairs data silently)."
            )
        if not x64 and arr.dtype.itemsize > 4 and np.max(np.abs(arr)) > _F32.max:
            raise InputValueError(
                f"{name} holds values up to {float(np.max(np.abs(arr))):.3g}, beyond float32's "
                f"range ({float(_F32.max):.3g}) in which JAX computes: they would become inf. "
                f"Rescale {name} (standardise it) or enable jax_enable_x64."
            )
    elif np.issubdtype(arr.dtype, np.integer) and not x64 and arr.dtype.itemsize > 4:
        info = np.iinfo(np.int32)
        lo, hi = int(arr.min()), int(arr.max())
        if lo < info.min or hi > info.max:
            raise InputValueError(
                f"{name} holds integers in [{lo}, {hi}], outside int32's range in which JAX "
                f"computes: they would wrap around. Re-index them or enable jax_enable_x64."
            )
    return arr


def check_same_length(name_a: str, a: np.ndarray, name_b: str, b: np.ndarray) -> None:
    """Raise ``ValueError`` unless ``a`` and ``b`` have the same leading (example) dimension."""
    if a.shape[0] != b.shape[0]:
        raise InputValueError(
            f"{name_a} and {name_b} must have the same number of rows (examples): "
            f"{name_a} has {a.shape[0]}, {name_b} has {b.shape[0]}."
        )


def check_labels(name: str, y: np.ndarray, num_classes: int) -> np.ndarray:
    """Check integer class labels in ``[0, num_classes)`` with shape ``(n,)``."""
    if y.ndim != 1:
        raise InputValueError(f"{name} must be a 1-D array of class indices, got shape {y.shape}.")
    if not np.issubdtype(y.dtype, np.integer):
        if np.issubdtype(y.dtype, np.floating) and np.all(np.mod(y, 1) == 0):
            raise InputTypeError(
                f"{name} must hold integer class indices, got dtype {y.dtype}; "
                f"convert with {name}.astype(int)."
            )
        raise InputTypeError(f"{name} must hold integer class indices, got dtype {y.dtype}.")
    lo, hi = int(y.min()), int(y.max())
    if lo < 0 or hi >= num_classes:
        raise InputValueError(
            f"{name} must lie in [0, {num_classes}) for a network with {num_classes} outputs, "
            f"got values in [{lo}, {hi}]. Check the labels or the network's output size."
        )
    return y


def check_batch_size(
    name: str, batch_size: Any, num_data: int | None, minimum: int = 1
) -> int | None:
    """``None`` (full batch) or an int in ``[minimum, num_data]`` (``num_data=None``: no upper
    bound known yet); a larger batch is refused, never clamped to the data."""
    if batch_size is None:
        return None
    batch_size = check_int(name, batch_size, minimum=minimum)
    if num_data is not None and batch_size > num_data:
        raise InputValueError(
            f"{name}={batch_size} is larger than the number of training rows ({num_data}); "
            f"pass {name} <= {num_data}, or {name}=None for full-batch gradients."
        )
    return batch_size


def renamed_argument(old: str, old_value: Any, new: str, new_value: Any) -> Any:
    """The value of an argument renamed from ``old`` to ``new`` (both default ``None``): the old
    name still works, with a ``DeprecationWarning``; both at once is an error."""
    if old_value is None:
        return new_value
    if new_value is not None:
        raise InputValueError(f"{old} is the old name of {new}; pass {new} alone.")
    import warnings

    warnings.warn(f"{old} is renamed {new}; pass {new}=...", DeprecationWarning, stacklevel=3)
    return old_value


def check_init_values(name: str, values: Any, model: Any, x: Any) -> dict[str, Any]:
    """Constrained initial values for every site of ``model``: finite, of the site's shape and
    inside its support. Returns them as arrays."""
    if not isinstance(values, Mapping):
        raise InputTypeError(
            f"{name} must be a dict site -> array (e.g. map_estimate(...).params), got "
            f"{type(values).__name__}."
        )
    sites = model.sites(x)
    missing = sorted(set(sites) - set(values))
    extra = sorted(set(values) - set(sites))
    if missing:
        raise InputValueError(f"{name} lacks sites {missing}; pass a value for every site.")
    if extra:
        raise InputValueError(
            f"{name} has sites the model does not have: {extra}; its sites are {list(sites)}."
        )
    import jax.numpy as jnp

    out = {}
    for k, d in sites.items():
        v = as_array(f"{name}[{k!r}]", values[k], min_ndim=0)
        if v.shape != tuple(d.event_shape):
            raise InputValueError(
                f"{name}[{k!r}] has shape {v.shape}, the site has {tuple(d.event_shape)}."
            )
        if not bool(np.all(d.support(jnp.asarray(v)))):
            raise InputValueError(f"{name}[{k!r}] lies outside the site's support {d.support}.")
        out[k] = jnp.asarray(v)
    return out

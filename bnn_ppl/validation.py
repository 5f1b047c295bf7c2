"""Input checks, in one place, raised eagerly before anything is traced or compiled.

Every check raises ``ValueError`` (bad value) or ``TypeError`` (bad type) with a message that
names the argument and says how to fix it. Nothing is dropped, clipped or repaired silently.

Example:
    >>> import numpy as np
    >>> from bnn_ppl import validation
    >>> validation.check_positive("temperature", 0.5)
    0.5
    >>> validation.check_positive("temperature", 0.0)
    Traceback (most recent call last):
    ...
    ValueError: temperature must be a finite number > 0, got 0.0. ...
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np


def _is_concrete(a: Any) -> bool:
    return not isinstance(a, jax.core.Tracer)


def check_positive(name: str, value: Any) -> float:
    """Return ``float(value)`` if it is a finite number > 0, else raise ``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.floating | np.integer):
        if not (hasattr(value, "shape") and np.shape(value) == () and _is_concrete(value)):
            raise TypeError(f"{name} must be a number, got {type(value).__name__}.")
    v = float(value)
    if not math.isfinite(v) or v <= 0:
        raise ValueError(
            f"{name} must be a finite number > 0, got {v!r}. Pass a positive value for {name}."
        )
    return v


def check_choice(name: str, value: Any, choices: Sequence[str]) -> str:
    """Raise ``ValueError`` unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {sorted(choices)}, got {value!r}.")
    return value


def as_array(name: str, a: Any, *, min_ndim: int = 1) -> np.ndarray:
    """Convert ``a`` to a NumPy array and check that it is non-empty and finite.

    Raises:
        TypeError: ``a`` is ``None`` or not numeric.
        ValueError: ``a`` is empty, has fewer than ``min_ndim`` dimensions or holds NaN/inf.
    """
    if a is None:
        raise TypeError(f"{name} must be an array, got None.")
    if not _is_concrete(a):
        raise TypeError(f"{name} must be a concrete array, not a traced value (call outside jit).")
    arr = np.asarray(a)
    if arr.dtype == object or not (
        np.issubdtype(arr.dtype, np.number) or np.issubdtype(arr.dtype, np.bool_)
    ):
        raise TypeError(f"{name} must be a numeric array, got dtype {arr.dtype}.")
    if arr.ndim < min_ndim:
        raise ValueError(
            f"{name} must have at least {min_ndim} dimension(s), got shape {arr.shape}."
        )
    if arr.size == 0 or arr.shape[0] == 0:
        raise ValueError(f"{name} is empty (shape {arr.shape}); pass at least one example.")
    if np.issubdtype(arr.dtype, np.floating) and not np.all(np.isfinite(arr)):
        bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
        raise ValueError(
            f"{name} contains {bad} NaN/inf value(s); remove or impute them before fitting "
            "(bnn_ppl never drops or repairs data silently)."
        )
    return arr


def check_same_length(name_a: str, a: np.ndarray, name_b: str, b: np.ndarray) -> None:
    """Raise ``ValueError`` unless ``a`` and ``b`` have the same leading (example) dimension."""
    if a.shape[0] != b.shape[0]:
        raise ValueError(
            f"{name_a} and {name_b} must have the same number of rows (examples): "
            f"{name_a} has {a.shape[0]}, {name_b} has {b.shape[0]}."
        )


def check_labels(name: str, y: np.ndarray, num_classes: int) -> np.ndarray:
    """Check integer class labels in ``[0, num_classes)`` with shape ``(n,)``."""
    if y.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of class indices, got shape {y.shape}.")
    if not np.issubdtype(y.dtype, np.integer):
        if np.issubdtype(y.dtype, np.floating) and np.all(np.mod(y, 1) == 0):
            raise TypeError(
                f"{name} must hold integer class indices, got dtype {y.dtype}; "
                f"convert with {name}.astype(int)."
            )
        raise TypeError(f"{name} must hold integer class indices, got dtype {y.dtype}.")
    lo, hi = int(y.min()), int(y.max())
    if lo < 0 or hi >= num_classes:
        raise ValueError(
            f"{name} must lie in [0, {num_classes}) for a network with {num_classes} outputs, "
            f"got values in [{lo}, {hi}]. Check the labels or the network's output size."
        )
    return y

"""Step-size schedules for SG-MCMC.

A schedule is a pure function of the step counter, optax-style: ``schedule(t) -> step size``,
jit- and trace-friendly (``t`` may be a traced integer).

* :func:`constant` - ``h_t = h0``.
* :func:`polynomial_decay` - ``h_t = h0 · (1 + t/b)^(-γ)``: Welling & Teh's ``a (b + t)^(-γ)``
  with ``a = h0 · b^γ``, written so that ``h0`` is the first step size. For ``γ ∈ (0.5, 1]``
  the Robbins-Monro conditions ``Σ h_t = ∞``, ``Σ h_t² < ∞`` hold.
* :func:`cyclical_cosine` - ``h_t = h0 · ½[1 + cos(π · mod(t, n) / n)]`` (Zhang et al. 2020,
  used by the ATMC paper): ``h0`` at every cycle start ``t ≡ 0 (mod n)``, falling to
  ``h0 · ½[1 - cos(π/n)] ≈ h0 · π²/(4n²)`` at the last step of the cycle, ``t ≡ n - 1``.

Every kernel in :mod:`bnn_ppl.inference` keeps its step counter ``i`` in its state: the number
of steps taken since ``init``, **warmup included** (SG-MCMC warmup is burn-in with the same
dynamics, so cycles run straight through it). Step number ``t`` (0-based) uses ``schedule(t)``;
afterwards the counter is ``i = t + 1``. Keeping only the sample at the end of each cycle is
:mod:`bnn_ppl.inference.cycles`.

Example:
    >>> from bnn_ppl.inference.schedules import cyclical_cosine
    >>> h = cyclical_cosine(0.1, cycle_length=4)
    >>> [round(float(h(t)), 4) for t in range(5)]
    [0.1, 0.0854, 0.05, 0.0146, 0.1]
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from bnn_ppl import validation
from bnn_ppl.inference.cycles import check_cycle_length
from bnn_ppl.types import Array
from bnn_ppl.validation import InputTypeError, InputValueError

__all__ = [
    "Schedule",
    "constant",
    "polynomial_decay",
    "cyclical_cosine",
    "as_schedule",
]

Schedule = Callable[[Any], Array]
"""``schedule(t) -> step size`` for an integer step counter ``t`` (0-based)."""


def constant(h0: float) -> Schedule:
    """``h_t = h0`` for every ``t``.

    Example:
        >>> round(float(constant(0.01)(1000)), 6)
        0.01
    """
    h0 = validation.check_positive("h0", h0)

    def schedule(t: Any) -> Array:
        return jnp.full(jnp.shape(t), h0, dtype=jnp.result_type(float))

    schedule.h0 = h0  # type: ignore[attr-defined]  # checked: as_schedule need not call it
    return schedule


def polynomial_decay(h0: float, gamma: float = 0.55, b: float = 1.0) -> Schedule:
    """``h_t = h0 · (1 + t/b)^(-gamma)`` (Welling & Teh 2011's ``a (b + t)^(-γ)``, ``a = h0·b^γ``).

    Args:
        h0: the first step size, ``h_0``.
        gamma: decay exponent, ``>= 0`` (``(0.5, 1]`` for the Robbins-Monro conditions).
        b: steps over which the decay sets in (``h_b = h0 · 2^(-γ)``), ``> 0``.

    Example:
        >>> h = polynomial_decay(0.1, gamma=1.0, b=10.0)
        >>> [round(float(h(t)), 4) for t in (0, 10, 30)]
        [0.1, 0.05, 0.025]
    """
    h0 = validation.check_positive("h0", h0)
    b = validation.check_positive("b", b)
    gamma = validation.check_number("gamma", gamma, low=0.0)

    def schedule(t: Any) -> Array:
        t = jnp.asarray(t, jnp.result_type(float))
        return h0 * (1.0 + t / b) ** (-gamma)

    schedule.h0 = h0  # type: ignore[attr-defined]
    return schedule


def cyclical_cosine(h0: float, cycle_length: int) -> Schedule:
    """``h_t = h0 · ½[1 + cos(π · mod(t, n) / n)]``, ``n = cycle_length`` (Zhang et al. 2020).

    ``h_t = h0`` at cycle starts (``t ≡ 0 mod n``); the last step of each cycle (``t ≡ n - 1``)
    has ``h0 · ½[1 - cos(π/n)] ≈ h0 · π²/(4n²)``. Keep the sample after it with
    :func:`~bnn_ppl.inference.cycles.keep_cycle_ends`.

    Example:
        >>> h = cyclical_cosine(1.0, cycle_length=100)
        >>> float(h(0)), float(h(100)), float(h(99)) < 3e-4
        (1.0, 1.0, True)
    """
    h0 = validation.check_positive("h0", h0)
    n = check_cycle_length(cycle_length)

    def schedule(t: Any) -> Array:
        phase = jnp.mod(jnp.asarray(t), n).astype(jnp.result_type(float)) / n
        # ½[1 + cos(πφ)] = cos²(πφ/2): no cancellation near the cycle end
        return h0 * jnp.cos(0.5 * math.pi * phase) ** 2

    schedule.h0 = h0  # type: ignore[attr-defined]
    return schedule


def as_schedule(step_size: float | Schedule) -> Schedule:
    """A schedule from a number (:func:`constant`) or a callable (checked at ``t = 0``).

    A number must be finite and ``> 0``. A callable must map an integer ``t`` to a scalar (its
    shape is checked abstractly, with ``jax.eval_shape``) and give a finite step size ``> 0`` at
    ``t = 0``; the schedules of this module carry their ``h0`` and are not evaluated.
    """
    if callable(step_size):
        try:
            out = jax.eval_shape(step_size, jax.ShapeDtypeStruct((), jnp.int32))
        except Exception as err:  # a schedule that cannot run on t = 0 is a bad argument
            raise InputTypeError(
                f"step_size must be a number or a schedule t -> h_t; calling it on an integer t "
                f"failed with {type(err).__name__}: {err}"
            ) from err
        if getattr(out, "shape", None) != ():
            raise InputValueError(
                f"step_size schedule must return a scalar, got {out} for a scalar t."
            )
        h0 = getattr(step_size, "h0", None)
        validation.check_positive("step_size(0)", step_size(0) if h0 is None else h0)
        return step_size
    if step_size is None or isinstance(step_size, str | bool):
        raise InputTypeError(
            f"step_size must be a positive number or a schedule t -> h_t, got {step_size!r}."
        )
    return constant(validation.check_positive("step_size", step_size))

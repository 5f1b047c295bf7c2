"""Step-size schedules for SG-MCMC.

Example:
    >>> from bnn_ppl.inference.sgmcmc.schedules import cyclical_cosine
    >>> h = cyclical_cosine(0.1, cycle_length=4)
    >>> [round(float(h(t)), 4) for t in range(5)]
    [0.1, 0.0854, 0.05, 0.0146, 0.1]
"""

# Notes:
#
# A schedule is a pure function of the step counter, optax-style: ``schedule(t) -> step size``,
# jit- and trace-friendly (``t`` may be a traced integer).
#
# * :func:`constant` - ``h_t = h0``.
# * :func:`polynomial_decay` - ``h_t = h0 · (1 + t/b)^(-γ)``: Welling & Teh's ``a (b + t)^(-γ)``
#   with ``a = h0 · b^γ``, written so that ``h0`` is the first step size. For ``γ ∈ (0.5, 1]``
#   the Robbins-Monro conditions ``Σ h_t = ∞``, ``Σ h_t² < ∞`` hold.
# * :func:`cyclical_cosine` - ``h_t = h0 · ½[1 + cos(π · mod(t, n) / n)]`` (Zhang et al. 2020,
#   used by the ATMC paper): ``h0`` at every cycle start ``t ≡ 0 (mod n)``, falling to
#   ``h0 · ½[1 - cos(π/n)] ≈ h0 · π²/(4n²)`` at the last step of the cycle, ``t ≡ n - 1``.
#
# Every kernel in :mod:`bnn_ppl.inference` keeps its step counter ``i`` in its state: the number
# of steps taken since ``init``, **warmup included** (SG-MCMC warmup is burn-in with the same
# dynamics, so cycles run straight through it). Step number ``t`` (0-based) uses ``schedule(t)``;
# afterwards the counter is ``i = t + 1``. Keeping only the sample at the end of each cycle is
# :mod:`bnn_ppl.inference.sgmcmc.schedules`.

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from bnn_ppl import validation
from bnn_ppl.types import Array, PyTree
from bnn_ppl.validation import InputTypeError, InputValueError

__all__ = [
    "Schedule",
    "constant",
    "polynomial_decay",
    "cyclical_cosine",
    "as_schedule",
    "check_cycle_length",
    "cycle_end_indices",
    "keep_cycle_ends",
    "cycle_end_samples",
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
    :func:`~bnn_ppl.inference.sgmcmc.schedules.keep_cycle_ends`.

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
    schedule.cycle_length = n  # type: ignore[attr-defined]
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


# -------------------- cycles
# Keeping only the sample at the end of each step-size cycle (cyclical SG-MCMC).
#
# With a cyclical schedule (:func:`~bnn_ppl.inference.sgmcmc.schedules.cyclical_cosine`) the ATMC
# paper
# and Zhang et al. 2020 keep one sample per cycle: the one after the cycle's last, smallest step.
#
# Every kernel in :mod:`bnn_ppl.inference` (SGLD, SGHMC, SGNHT, ATMC) keeps its counter ``i``
# in its state: the number of steps taken since ``init``, **warmup included**. Step number ``t``
# (0-based) uses ``schedule(t)``; afterwards the counter is ``i = t + 1``. The sample at the end
# of a cycle is the state after the cycle's last step, ``t ≡ n - 1 (mod n)``, i.e. the state
# whose counter is ``i ≡ 0 (mod n)``. With ``MCMC(num_warmup=W, num_samples=S, thinning=τ)``,
# the ``k``-th collected sample of a chain has counter ``W + S mod τ + (k + 1)·τ`` (NumPyro keeps
# the last of every ``τ`` steps, aligned to the end). :func:`cycle_end_indices` turns that into
# the positions of the cycle-end samples, and :func:`keep_cycle_ends` does the same from the
# counters themselves: the kernels collect the counter by default (field ``"i"`` of
# ``mcmc.get_extra_fields()``), which works whatever the warmup, thinning or earlier runs;
# :func:`cycle_end_samples` applies it to a finished ``MCMC``. To collect only the cycle ends in
# the first place (memory: one sample per cycle), run ``MCMC(num_warmup=k·n, num_samples=c·n,
# thinning=n)``: the collected counters are then exactly ``(k+1)·n, ..., (k+c)·n``.

def check_cycle_length(cycle_length: Any) -> int:
    """``cycle_length`` as an int ``>= 1`` (a float, bool, str or None is refused)."""
    return validation.check_int("cycle_length", cycle_length, minimum=1)


def cycle_end_indices(
    num_samples: int, cycle_length: int, *, num_warmup: int = 0, thinning: int = 1
) -> np.ndarray:
    """Positions, among one chain's collected samples, of the samples that end a cycle.

    A run of ``MCMC(num_warmup=W, num_samples=S, thinning=τ)`` from ``init`` collects
    ``S // τ`` samples; the ``k``-th is the state after step counter ``W + S mod τ + (k+1)·τ``
    (see the module docstring). Cycle ends are the counters divisible by ``cycle_length``.
    Every cycle that ends inside the sampling phase contributes exactly one index, provided
    the collected counters hit it; if ``τ`` does not divide ``cycle_length`` (or the offset is
    misaligned) some cycle ends are not collected, which raises a warning.

    Example:
        >>> cycle_end_indices(num_samples=12, cycle_length=4, num_warmup=4).tolist()
        [3, 7, 11]
        >>> cycle_end_indices(num_samples=12, cycle_length=4, num_warmup=4, thinning=2).tolist()
        [1, 3, 5]
    """
    n = check_cycle_length(cycle_length)
    num_samples = validation.check_int("num_samples", num_samples, minimum=1)
    num_warmup = validation.check_int("num_warmup", num_warmup, minimum=0)
    thinning = validation.check_int("thinning", thinning, minimum=1)
    counters = (
        num_warmup + num_samples % thinning + thinning * np.arange(1, num_samples // thinning + 1)
    )
    idx = np.flatnonzero(counters % n == 0)
    # cycle ends inside the collected window (first collected step .. last step)
    first = num_warmup + num_samples % thinning + 1
    expected = (num_warmup + num_samples) // n - (first - 1) // n
    if idx.size != expected:
        warnings.warn(
            f"only {idx.size} of the {expected} cycle ends in the sampling phase are among the "
            f"collected samples (thinning={thinning}, cycle_length={n}, num_warmup={num_warmup}"
            f"); choose a thinning that divides cycle_length and num_warmup.",
            stacklevel=2,
        )
    return idx


def keep_cycle_ends(samples: PyTree, iterations: Any, cycle_length: int) -> PyTree:
    """Keep the samples whose step counter ends a cycle (``i % cycle_length == 0``, ``i > 0``).

    ``iterations`` is the kernels' counter as collected by ``MCMC`` (``"i"`` in
    ``mcmc.get_extra_fields(group_by_chain=...)``), in the layout of ``samples``: shape
    ``(N,)`` for ``get_samples()`` (chains concatenated), or ``(chains, S)`` for
    ``get_samples(group_by_chain=True)``, where all chains share the counter and the sample
    axis (axis 1) is selected. Works whatever the warmup, thinning or earlier runs were.

    Example:
        >>> import numpy as np
        >>> s = {"w": np.arange(8.0)}
        >>> keep_cycle_ends(s, iterations=np.arange(1, 9), cycle_length=4)["w"].tolist()
        [3.0, 7.0]
    """
    n = check_cycle_length(cycle_length)
    it = np.asarray(iterations)
    if it.ndim == 2:
        if not (it == it[:1]).all():
            raise InputValueError("iterations differ between chains; pass one chain's samples.")
        idx, axis = np.flatnonzero((it[0] % n == 0) & (it[0] > 0)), 1
    elif it.ndim == 1:
        idx, axis = np.flatnonzero((it % n == 0) & (it > 0)), 0
    else:
        raise InputValueError(
            f"iterations must be 1-D or 2-D (chains, samples), got shape {it.shape}."
        )

    def take(a: Any) -> np.ndarray:
        a = np.asarray(a)
        if a.shape[: axis + 1] != it.shape[: axis + 1]:
            raise InputValueError(
                f"a sample leaf of shape {a.shape} does not match iterations of shape {it.shape}."
            )
        return np.take(a, idx, axis=axis)

    return jax.tree.map(take, samples)


def cycle_end_samples(mcmc: Any, cycle_length: int, group_by_chain: bool = False) -> PyTree:
    """``mcmc.get_samples(group_by_chain)`` at cycle ends only (see :func:`keep_cycle_ends`).

    ``mcmc`` is a ``numpyro.infer.MCMC`` run with one of this library's SG-MCMC kernels (they
    collect the step counter ``"i"`` by default).

    Example:
        >>> from bnn_ppl.inference.sgmcmc.schedules import cycle_end_indices
        >>> cycle_end_indices(num_samples=10, cycle_length=4, num_warmup=2).tolist()
        [1, 5, 9]
    """
    extra = mcmc.get_extra_fields(group_by_chain=group_by_chain)
    if "i" not in extra:
        raise InputValueError(
            "the MCMC run did not collect the step counter 'i'; run an SG-MCMC kernel of "
            "bnn_ppl.inference (it collects 'i' by default) or pass extra_fields=('i',)."
        )
    return keep_cycle_ends(
        mcmc.get_samples(group_by_chain=group_by_chain), extra["i"], cycle_length
    )

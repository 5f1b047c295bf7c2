"""Minibatch index streams, inside the compiled loop: independent batches, or epochs.

Two ways to pick the ``b`` rows of each step from ``n``:

* **independent** (:func:`independent_init`, :func:`independent_batch`; the SG-MCMC default):
  every batch is ``b`` rows drawn uniformly *with replacement*, independently of every other
  batch. The minibatch gradient noise is then independent from step to step (white), which is
  what the SG-MCMC samplers' theory assumes: SGHMC's noise correction ``h·σ²/2`` and the
  thermostats of SGNHT and ATMC compensate a noise of covariance ``h·σ²`` per unit time, and
  with white noise that is exactly the heat the position receives. Drawing with replacement
  also makes the two halves of a batch independent, so their difference is an unbiased estimate
  of the gradient-noise variance (:func:`~bnn_ppl.inference.gradient_estimator` with
  ``noise=True``). Each draw costs ``O(b)``, whatever ``n``.
* **epoch** (:func:`epoch_init`, :func:`next_batch`): a random permutation of the rows, handed
  out ``b`` at a time, redrawn when fewer than ``b`` rows are left (the ``n mod b`` leftover
  rows wait for the next permutation; none is dropped). This is what optimisers use (MAP and
  ensembles here). For samplers it is *wrong* with thermostats: within an epoch the batches
  partition the data, so consecutive gradient errors are anti-correlated (an epoch's errors sum
  to about zero). The momentum is kicked by each error, but the position, which integrates
  them, receives less heat than the per-batch noise that the thermostats (and the noise
  estimate) compensate: ATMC and SGNHT run cold. Measured on conjugate regression, ``n = 500``:
  with the paper's thermostat ATMC had 0.69-0.79 of the exact variance with ``b = 10`` and
  0.976 with ``b = 50`` (issue 15's audit); with the noise estimate 0.24 and 0.10; with
  independent batches 0.99-1.06 and 1.00-1.02.

Every batch of either scheme is a uniformly random sample of rows, so a minibatch estimate
scaled by ``n / b`` is unbiased.

Example:
    >>> import jax
    >>> from bnn_ppl.inference.minibatch import independent_init, independent_batch
    >>> state = independent_init(jax.random.key(0))
    >>> idx, state = independent_batch(state, batch_size=4, n=10)
    >>> idx.shape, bool((idx >= 0).all() & (idx < 10).all())
    ((4,), True)
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from bnn_ppl.types import Array, PRNGKey

__all__ = [
    "SCHEMES",
    "IndependentState",
    "independent_init",
    "independent_batch",
    "EpochState",
    "epoch_init",
    "next_batch",
]

SCHEMES = ("independent", "epoch")
"""The names of the two schemes (``gradient_estimator(..., sampling=...)``)."""


class IndependentState(NamedTuple):
    """The ``key`` of the next batch."""

    key: PRNGKey


def independent_init(key: PRNGKey) -> IndependentState:
    """Start a stream of independent batches."""
    return IndependentState(key)


def independent_batch(
    state: IndependentState, batch_size: int, n: int
) -> tuple[Array, IndependentState]:
    """``batch_size`` row indices drawn uniformly with replacement from ``[0, n)``."""
    key, sub = jax.random.split(state.key)
    return jax.random.randint(sub, (batch_size,), 0, n), IndependentState(key)


class EpochState(NamedTuple):
    """Where the stream is: ``key`` for the next permutation, the current ``perm`` of the rows
    and the ``position`` of the next unused entry in it."""

    key: PRNGKey
    perm: Array
    position: Array


def epoch_init(key: PRNGKey, n: int) -> EpochState:
    """Start a stream of epochs over ``n`` rows."""
    key, sub = jax.random.split(key)
    return EpochState(key, jax.random.permutation(sub, n), jnp.zeros((), jnp.int32))


def next_batch(state: EpochState, batch_size: int) -> tuple[Array, EpochState]:
    """The next ``batch_size`` row indices, and the advanced state (jit- and scan-friendly)."""
    n = state.perm.shape[0]

    def reshuffle(s: EpochState) -> EpochState:
        key, sub = jax.random.split(s.key)
        return EpochState(key, jax.random.permutation(sub, n), jnp.zeros((), jnp.int32))

    state = jax.lax.cond(state.position + batch_size > n, reshuffle, lambda s: s, state)
    idx = jax.lax.dynamic_slice(state.perm, (state.position,), (batch_size,))
    return idx, state._replace(position=state.position + batch_size)

"""Minibatch index streams inside the compiled loop: which rows a stochastic step reads.

* independent (:func:`independent_init`, :func:`independent_batch`; the SG-MCMC default): ``b``
  rows drawn with replacement, independently each step, so the gradient noise is white, as the
  SG-MCMC noise corrections and thermostats assume, and a batch's two halves are independent.
* epoch (:func:`epoch_init`, :func:`next_batch`; MAP and ensembles): a permutation handed out
  ``b`` rows at a time. Its anti-correlated errors make thermostatted samplers run cold.

Either way each batch is a uniform sample of rows: a minibatch sum scaled by ``n / b`` is unbiased.
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
    """``batch_size`` row indices drawn uniformly with replacement from ``[0, n)``.

    Example:
        >>> import jax
        >>> from bnn_ppl.inference.potential.minibatch import independent_init, independent_batch
        >>> state = independent_init(jax.random.key(0))
        >>> idx, state = independent_batch(state, batch_size=4, n=10)
        >>> idx.shape, bool((idx >= 0).all() & (idx < 10).all())
        ((4,), True)
    """
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

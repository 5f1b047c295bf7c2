"""Minibatch index streams: without replacement within an epoch, inside the compiled loop.

An :class:`EpochState` carries a random permutation of the ``n`` rows and a position in it;
:func:`next_batch` hands out the next ``b`` indices and draws a fresh permutation when fewer than
``b`` rows of the current one are left. Every batch is a uniformly random subset of size ``b``
(so a minibatch estimate scaled by ``n / b`` is unbiased), and within an epoch no row repeats.
The leftover ``n mod b`` rows of an epoch simply wait for the next permutation: over epochs
every row is used equally often in expectation; none is dropped from the data.

Example:
    >>> import jax
    >>> from bnn_ppl.inference.minibatch import epoch_init, next_batch
    >>> state = epoch_init(jax.random.key(0), n=10)
    >>> idx, state = next_batch(state, batch_size=4)
    >>> idx.shape
    (4,)
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from bnn_ppl.types import Array, PRNGKey

__all__ = ["EpochState", "epoch_init", "next_batch"]


class EpochState(NamedTuple):
    """Where the stream is: ``key`` for the next permutation, the current ``perm`` of the rows
    and the ``position`` of the next unused entry in it."""

    key: PRNGKey
    perm: Array
    position: Array


def epoch_init(key: PRNGKey, n: int) -> EpochState:
    """Start a stream over ``n`` rows."""
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

"""Type aliases shared across bnn_ppl (one place, so signatures read the same everywhere)."""

from __future__ import annotations

from typing import Any

import jax

Array = jax.Array
"""A JAX array (NumPy arrays are accepted wherever an ``Array`` is read)."""

PyTree = Any
"""A nested structure of arrays (dicts, lists, tuples, NamedTuples)."""

PRNGKey = jax.Array
"""A JAX random key, from ``jax.random.key`` (typed) or ``jax.random.PRNGKey`` (raw)."""

Params = dict[str, jax.Array]
"""Network parameters keyed by their dotted path, e.g. ``{"Dense_0.kernel": ..., ...}``.

This flat layout is the layout of NumPyro sample sites, of ``MCMC.get_samples()``
(with a leading sample axis) and of everything in ``bnn_ppl`` that consumes samples.
"""

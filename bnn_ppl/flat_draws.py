"""Random draws that XLA compiles quickly: drawn flat, one vmapped call per group, reshaped.

XLA:CPU compiles a random draw of a 4- or 5-axis shape slowly: a ``jax.random.normal`` of a
3x3x16x16 convolution kernel's shape took 2.7 s to compile, of its 1-axis flattening 0.12 s,
with the same values (``jax_threefry_partitionable``, JAX's default: the counters are the
linear index). And a program that draws every parameter of a network with its own key holds
one random-number program per parameter (a ResNet-20: 107). Here every draw is made flat and
reshaped, and draws of one group and size by one vmapped call: the same values (bit for bit at
XLA's default optimisation; at most an ulp apart at level 0, where XLA:CPU rounds a vector
loop's tail differently), a ResNet-20's prior draw and SG-MCMC noise compiling 5-6x faster
(``benchmarks/init_draw.py``, RESULTS.md).

Used by :meth:`bnn_ppl.BNN.init` (:func:`prior_draws`) and the SG-MCMC kernels' noise
(:func:`bnn_ppl.inference.sgmcmc_base.normal_like`).

Example:
    >>> import jax
    >>> keys = jax.random.split(jax.random.key(0), 2)
    >>> normal = lambda group, size: lambda k: jax.random.normal(k, (size,))
    >>> a, b = grouped_flat_draws(list(keys), [(3, 3), (9,)], ["normal", "normal"], normal)
    >>> a.shape, b.shape
    ((3, 3), (9,))
    >>> bool((a == jax.random.normal(keys[0], (3, 3))).all())
    True
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist

__all__ = ["flat_prior", "grouped_flat_draws", "prior_draws"]


def grouped_flat_draws(
    keys: Sequence[Any],
    shapes: Sequence[tuple[int, ...]],
    groups: Sequence[Hashable],
    flat_draw: Callable[[Hashable, int], Callable[[Any], jax.Array]],
) -> list[jax.Array]:
    """One draw per key: ``flat_draw(group, size)(key)``, ``size`` entries reshaped to its
    shape; draws whose group and size agree are made by one vmapped call."""
    batches: dict[tuple[Hashable, int], list[int]] = {}
    for i, (shape, group) in enumerate(zip(shapes, groups, strict=True)):
        batches.setdefault((group, math.prod(shape)), []).append(i)
    out: list[Any] = [None] * len(shapes)
    for (group, size), index in batches.items():
        draws = jax.vmap(flat_draw(group, size))(jnp.stack([keys[i] for i in index]))
        for j, i in enumerate(index):
            out[i] = draws[j].reshape(shapes[i])
    return out


def flat_prior(d: dist.Distribution) -> dist.Distribution | None:
    """The distribution of ``d``'s elements flattened to one axis, where ``d`` is a scalar
    distribution expanded over its event (``Independent(ExpandedDistribution(base))``, the form
    of a site's prior), else ``None``."""
    if not (isinstance(d, dist.Independent) and isinstance(d.base_dist, dist.ExpandedDistribution)):
        return None
    base = d.base_dist.base_dist
    size = int(np.prod(d.event_shape))
    if d.batch_shape or base.batch_shape or base.event_shape or size == 0:
        return None
    return base.expand((size,))


def prior_draws(
    sites: Mapping[str, dist.Distribution], keys: Mapping[str, Any], skip: set[str]
) -> dict[str, jax.Array]:
    """``sites[name].sample(keys[name])`` for each site not in ``skip`` whose prior is one
    scalar distribution with scalar parameters over its elements (:func:`flat_prior`), drawn by
    :func:`grouped_flat_draws`; sites with the same distribution and parameters (the same
    arithmetic: a ResNet-20's 107 sites have 13) form one group. Other sites are left out."""
    names, groups = [], []
    for name, d in sites.items():
        leaves, treedef = jax.tree.flatten(d)
        scalar = all(isinstance(v, int | float | np.number) for v in leaves)
        if name in skip or not scalar or flat_prior(d) is None:
            continue
        names.append(name)
        groups.append((str(treedef), tuple((type(v), v) for v in leaves)))
    site_of = dict(zip(groups, names, strict=True))  # a site of each group: the same prior
    draws = grouped_flat_draws(
        [keys[n] for n in names],
        [sites[n].event_shape for n in names],
        groups,
        lambda group, size: flat_prior(sites[site_of[group]]).sample,  # type: ignore[union-attr]
    )
    return dict(zip(names, draws, strict=True))

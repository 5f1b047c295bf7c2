"""Random draws that XLA compiles quickly: drawn flat, one vmapped call per group, reshaped."""

# Notes:
#
# XLA:CPU compiles a random draw of a 4- or 5-axis shape slowly: a ``jax.random.normal`` of a
# 3x3x16x16 convolution kernel's shape took 2.7 s to compile, of its 1-axis flattening 0.12 s,
# with the same values (``jax_threefry_partitionable``, JAX's default: the counters are the
# linear index). And a program that draws every parameter of a network with its own key holds
# one random-number program per parameter (a ResNet-20: 107). Here every draw is made flat and
# reshaped, and draws of one group and size by one vmapped call: the same values (bit for bit at
# XLA's default optimisation; at most an ulp apart at level 0, where XLA:CPU rounds a vector
# loop's tail differently), a ResNet-20's prior draw and SG-MCMC noise compiling 5-6x faster
# (``benchmarks/init_draw.py``, RESULTS.md).
#
# Used by :meth:`bnn_ppl.BNN.init` (:func:`prior_draws`), the SG-MCMC kernels' noise
# (:func:`bnn_ppl.inference.sgmcmc.kernel.normal_like`), and NumPyro's own draws where we call them:
# the initial values of mean-field SVI and of a NumPyro model's potential
# (:func:`init_to_prior_draw`, NumPyro's ``init_to_sample`` drawn flat) and the mean-field guide's
# draws (:class:`flat_normal_draws`, ``Normal`` sites drawn flat), each with NumPyro's values.

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from numpyro.distributions import constraints
from numpyro.infer.initialization import init_to_sample
from numpyro.primitives import Messenger

__all__ = [
    "FlatNormal",
    "flat_normal_draws",
    "flat_prior",
    "grouped_flat_draws",
    "init_to_prior_draw",
    "prior_draws",
]


PREFIX_STABLE: tuple[type, ...] = (
    dist.Normal,
    dist.Laplace,
    dist.Cauchy,
    dist.Logistic,
    dist.Uniform,
)
"""Scalar distributions whose ``expand((n,)).sample(key)`` is element by element a function of
``jax.random``'s draw of that shape: with JAX's partitionable Threefry (the default) the first
``m`` of ``n`` values are the draw of ``m`` values from the same key."""

PAD_BUDGET = 1 << 22
"""The most values (over all keys) one call of :func:`grouped_flat_draws` draws beyond those
asked for, when it draws different sizes by one call and keeps each key's first values."""


def _buckets(sizes: dict[int, int]) -> list[tuple[int, list[int]]]:
    """Indices (``sizes``: index -> size) in buckets ``(size to draw, indices)``: the largest
    first, each bucket growing while the values drawn beyond those asked for stay within
    :data:`PAD_BUDGET`."""
    out: list[tuple[int, list[int]]] = []
    for i in sorted(sizes, key=lambda i: -sizes[i]):
        if out:
            top, index = out[-1]
            asked = sum(sizes[j] for j in index) + sizes[i]
            if top * (len(index) + 1) - asked <= PAD_BUDGET:
                index.append(i)
                continue
        out.append((sizes[i], [i]))
    return out


def grouped_flat_draws(
    keys: Sequence[Any],
    shapes: Sequence[tuple[int, ...]],
    groups: Sequence[Hashable],
    flat_draw: Callable[[Hashable, int], Callable[[Any], jax.Array]],
    prefix_stable: Callable[[Hashable], bool] = lambda group: False,
) -> list[jax.Array]:
    """One draw per key: ``flat_draw(group, size)(key)``, ``size`` entries reshaped to its
    shape; draws whose group and size agree are made by one vmapped call. Where
    ``prefix_stable(group)`` (the first ``m`` values of a draw of ``n`` are the draw of ``m``,
    as for :data:`PREFIX_STABLE` distributions) draws of different sizes share that call too:
    each key draws the largest size and keeps its first values (at most :data:`PAD_BUDGET`
    values drawn in vain per call), the same values with one random-number program instead of
    one per size.

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
    batches: dict[Hashable, dict[int, int]] = {}
    for i, (shape, group) in enumerate(zip(shapes, groups, strict=True)):
        size = math.prod(shape)
        batch = (group, None) if prefix_stable(group) and size else (group, size)
        batches.setdefault(batch, {})[i] = size
    out: list[Any] = [None] * len(shapes)
    for (group, _), sizes in batches.items():
        for size, index in _buckets(sizes):
            draws = jax.vmap(flat_draw(group, size))(jnp.stack([keys[i] for i in index]))
            for j, i in enumerate(index):
                out[i] = draws[j, : sizes[i]].reshape(shapes[i])
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
    :func:`grouped_flat_draws`; sites with the same scalar distribution and parameters (the
    same arithmetic) form one group, drawn by one call per size, or by one call for all sizes
    where the distribution is one of :data:`PREFIX_STABLE` (and JAX's Threefry is
    partitionable, its default). Other sites are left out."""
    names, groups, bases = [], [], {}
    for name, d in sites.items():
        flat = flat_prior(d) if name not in skip else None
        if flat is None:
            continue
        base = flat.base_dist
        leaves, treedef = jax.tree.flatten(base)
        if not all(isinstance(v, int | float | np.number) for v in leaves):
            continue
        group = (type(base), str(treedef), tuple((type(v), v) for v in leaves))
        names.append(name)
        groups.append(group)
        bases[group] = base
    stable = bool(jax.config.jax_threefry_partitionable)
    draws = grouped_flat_draws(
        [keys[n] for n in names],
        [sites[n].event_shape for n in names],
        groups,
        lambda group, size: bases[group].expand((size,)).sample,
        prefix_stable=lambda group: stable and group[0] in PREFIX_STABLE,
    )
    return dict(zip(names, draws, strict=True))


def init_to_prior_draw(site: dict | None = None) -> Any:
    """NumPyro's ``init_to_sample`` (a draw from each site's prior), with the same values, but
    a site whose prior is one scalar distribution over real elements (:func:`flat_prior`) drawn
    flat: XLA compiles that draw quickly, and ``init_to_sample`` draws eagerly, so each
    shape of a CNN's kernels is a program of its own (a ResNet-20's mean-field SVI set-up
    compiled 26 of them, 23 s on a CPU). Any other site is ``init_to_sample``'s.

    Example:
        >>> import jax, numpyro, numpyro.distributions as dist
        >>> from numpyro.infer.util import initialize_model
        >>> def model():
        ...     numpyro.sample("w", dist.Normal(0.0, 1.0).expand((3, 3, 2, 4)).to_event(4))
        >>> a, b = (initialize_model(jax.random.key(0), model, init_strategy=s)[0].z["w"]
        ...         for s in (init_to_prior_draw, numpyro.infer.init_to_sample))
        >>> bool((a == b).all())
        True
    """
    if site is None:
        return functools.partial(init_to_prior_draw)  # NumPyro takes strategies as partials
    drawn = site["type"] == "sample" and not site["is_observed"] and site["value"] is None
    flat = flat_prior(site["fn"]) if drawn else None
    if flat is None or flat.support is not constraints.real:
        return init_to_sample(site)
    sample_shape = tuple(site["kwargs"].get("sample_shape") or ())
    draw = flat(sample_shape=sample_shape, rng_key=site["kwargs"].get("rng_key"))
    return jnp.reshape(draw, sample_shape + site["fn"].event_shape)


class FlatNormal(dist.Normal):
    """``dist.Normal`` whose draws are made flat and reshaped: the same values, quicker to
    compile for a many-axis shape (a convolution kernel's). Everything else is ``Normal``'s
    (its log density, its KL divergences, its pytree)."""

    def sample(self, key: Any, sample_shape: tuple[int, ...] = ()) -> jax.Array:
        shape = tuple(sample_shape) + self.batch_shape + self.event_shape
        eps = jax.random.normal(key, (math.prod(shape),)).reshape(shape)
        return self.loc + eps * self.scale


def _drawn_flat(d: dist.Distribution) -> dist.Distribution | None:
    """``d`` with its ``Normal`` base drawing flat (:class:`FlatNormal`), through
    ``Independent`` and ``ExpandedDistribution`` wrappers; ``None`` for anything else."""
    if type(d) is dist.Normal:
        return FlatNormal(d.loc, d.scale)
    if isinstance(d, dist.Independent):
        base = _drawn_flat(d.base_dist)
        return None if base is None else dist.Independent(base, d.reinterpreted_batch_ndims)
    if isinstance(d, dist.ExpandedDistribution):
        base = _drawn_flat(d.base_dist)
        return None if base is None else dist.ExpandedDistribution(base, d.batch_shape)
    return None


class flat_normal_draws(Messenger):  # noqa: N801 - a NumPyro effect handler, named like theirs
    """A NumPyro effect handler: the ``Normal`` sample sites drawn inside it (a mean-field
    guide's: ``AutoNormal`` draws every site as ``Normal(loc, scale).to_event(...)``) are drawn
    by :class:`FlatNormal`: the same values, and their programs compile quickly (a
    ResNet-20's mean-field SVI step: ``benchmarks/init_draw.py``). Observed sites, sites with a
    value and other distributions are left alone.

    Example:
        >>> import jax, numpyro, numpyro.distributions as dist
        >>> from numpyro import handlers
        >>> def guide():
        ...     return numpyro.sample("w", dist.Normal(0.0, 1.0).expand((3, 3, 2, 4)).to_event(4))
        >>> a = handlers.seed(guide, 0)()
        >>> with flat_normal_draws():
        ...     b = handlers.seed(guide, 0)()
        >>> bool((a == b).all())
        True
    """

    def process_message(self, msg: dict) -> None:
        if msg["type"] != "sample" or msg["is_observed"] or msg["value"] is not None:
            return
        flat = _drawn_flat(msg["fn"])
        if flat is not None:
            msg["fn"] = flat

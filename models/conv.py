"""A drop-in ``lax.conv_general_dilated`` whose gradient XLA:CPU runs fast inside loops."""

# Notes:
#
# Inside a ``while`` body (a chunked potential's ``lax.scan``, an HMC trajectory, an optimiser
# loop) XLA:CPU leaves the *backward* convolutions that JAX emits (kernel gradients with
# ``dim_labels=f01b_i01o->01bf``, input gradients with ``b01f_01oi->b01f``) in those layouts and
# runs them on a slow generic path; outside a loop it rewrites them to the channels-last form
# its convolution library handles (``b01f_01io->b01f``). Upstream: jax-ml/jax#12868. Measured
# here (``benchmarks/hmc_overhead.py``, see ``benchmarks/RESULTS.md``): LeNet-5 HMC on 2,000
# MNIST-sized rows took 1.48 s per gradient with ``lax.conv_general_dilated`` and 0.35 s with
# this function.
#
# :func:`conv_general_dilated` computes exactly the same values and gradients. On the CPU
# backend it is a ``jax.custom_vjp`` whose backward pass evaluates JAX's own transpose of the
# convolution with every convolution rewritten as transpose -> channels-last convolution ->
# transpose; XLA then sees only channels-last convolutions, in or out of loops. On other
# backends it *is* ``lax.conv_general_dilated``. Forward-mode differentiation (``jax.jvp``,
# ``jax.hessian``) is not defined on CPU, as for any ``custom_vjp``; pass
# ``conv_general_dilated=jax.lax.conv_general_dilated`` to the model's convolutions if you need
# it.
#
# The zoo's convolutional models (LeNet-5, ResNet20FRN, ResNetPP's ``WNConv``, CNN-LSTM) use it;
# any Flax ``nn.Conv`` takes it as ``nn.Conv(..., conv_general_dilated=conv_general_dilated)``.

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend import core as jex_core

__all__ = ["conv_general_dilated"]


def _channels_last(
    lhs: jax.Array,
    rhs: jax.Array,
    *,
    dimension_numbers: lax.ConvDimensionNumbers,
    **params: Any,
) -> jax.Array:
    """``lax.conv_general_dilated`` computed as transposes around a channels-last convolution."""
    dn = dimension_numbers
    nd = lhs.ndim
    lhs_perm = (dn.lhs_spec[0], *dn.lhs_spec[2:], dn.lhs_spec[1])  # (N, spatial..., C)
    rhs_perm = (*dn.rhs_spec[2:], dn.rhs_spec[1], dn.rhs_spec[0])  # (spatial..., I, O)
    out_perm = (dn.out_spec[0], *dn.out_spec[2:], dn.out_spec[1])
    spatial = tuple(range(1, nd - 1))
    canonical = lax.ConvDimensionNumbers(
        lhs_spec=(0, nd - 1, *spatial), rhs_spec=(nd - 1, nd - 2, *range(nd - 2)),
        out_spec=(0, nd - 1, *spatial),
    )  # fmt: skip
    keep = (
        "window_strides", "padding", "lhs_dilation", "rhs_dilation", "feature_group_count",
        "batch_group_count", "precision", "preferred_element_type",
    )  # fmt: skip
    out = lax.conv_general_dilated(
        jnp.transpose(lhs, lhs_perm),
        jnp.transpose(rhs, rhs_perm),
        dimension_numbers=canonical,
        **{k: params[k] for k in keep if k in params},
    )
    return jnp.transpose(out, tuple(int(i) for i in np.argsort(out_perm)))


def _eval_channels_last(jaxpr: Any, consts: Sequence[Any], *args: Any) -> list[Any]:
    """Evaluate a (flat) jaxpr, computing every convolution with :func:`_channels_last`."""
    env: dict[Any, Any] = {}

    def read(v: Any) -> Any:
        return v.val if isinstance(v, jex_core.Literal) else env[v]

    env.update(zip(jaxpr.constvars, consts, strict=True))
    env.update(zip(jaxpr.invars, args, strict=True))
    for eqn in jaxpr.eqns:
        ins = [read(v) for v in eqn.invars]
        if eqn.primitive is lax.conv_general_dilated_p:
            outs = [_channels_last(*ins, **eqn.params)]
        else:
            outs = eqn.primitive.bind(*ins, **eqn.params)
            outs = outs if eqn.primitive.multiple_results else [outs]
        env.update(zip(eqn.outvars, outs, strict=True))
    return [read(v) for v in jaxpr.outvars]


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _conv(lhs: jax.Array, rhs: jax.Array, kw: tuple) -> jax.Array:
    return lax.conv_general_dilated(lhs, rhs, **dict(kw))


def _conv_fwd(lhs: jax.Array, rhs: jax.Array, kw: tuple) -> tuple[jax.Array, tuple]:
    return _conv(lhs, rhs, kw), (lhs, rhs)


def _conv_bwd(kw: tuple, res: tuple, g: jax.Array) -> tuple[jax.Array, jax.Array]:
    lhs, rhs = res
    _, vjp = jax.vjp(lambda a, b: lax.conv_general_dilated(a, b, **dict(kw)), lhs, rhs)
    closed = jax.make_jaxpr(vjp)(g)
    d_lhs, d_rhs = _eval_channels_last(closed.jaxpr, closed.consts, g)
    return d_lhs, d_rhs


_conv.defvjp(_conv_fwd, _conv_bwd)


def _hashable(v: Any) -> Any:
    if isinstance(v, list | tuple) and not hasattr(v, "_fields"):  # keep ConvDimensionNumbers
        return tuple(_hashable(e) for e in v)
    return v


def conv_general_dilated(
    lhs: jax.Array,
    rhs: jax.Array,
    window_strides: Sequence[int],
    padding: str | Sequence[tuple[int, int]],
    lhs_dilation: Sequence[int] | None = None,
    rhs_dilation: Sequence[int] | None = None,
    dimension_numbers: Any = None,
    feature_group_count: int = 1,
    batch_group_count: int = 1,
    precision: Any = None,
    preferred_element_type: Any = None,
) -> jax.Array:
    """``lax.conv_general_dilated`` with loop-friendly gradients on XLA:CPU (same arguments).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from bnn_ppl.models.conv import conv_general_dilated
        >>> x, w = jnp.ones((2, 8, 8, 3)), jnp.ones((3, 3, 3, 4))
        >>> dn = ("NHWC", "HWIO", "NHWC")
        >>> f = lambda w, conv: jnp.sum(conv(x, w, (1, 1), "SAME", dimension_numbers=dn) ** 2)
        >>> g1 = jax.grad(f)(w, conv_general_dilated)
        >>> g0 = jax.grad(f)(w, jax.lax.conv_general_dilated)
        >>> bool(jnp.allclose(g0, g1))
        True
    """
    kw = dict(
        window_strides=window_strides,
        padding=padding,
        lhs_dilation=lhs_dilation,
        rhs_dilation=rhs_dilation,
        dimension_numbers=dimension_numbers,
        feature_group_count=feature_group_count,
        batch_group_count=batch_group_count,
        precision=precision,
        preferred_element_type=preferred_element_type,
    )
    if jax.default_backend() != "cpu":
        return lax.conv_general_dilated(lhs, rhs, **kw)
    return _conv(lhs, rhs, tuple((k, _hashable(v)) for k, v in kw.items()))

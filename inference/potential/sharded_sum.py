"""The sharded, chunked sum at the heart of every full-batch potential."""

# Notes:
#
# :func:`sharded_chunked_sum` turns a per-chunk function ``chunk_fn(params, batch, mask) ->
# scalar`` into ``f(params, data, mask) -> scalar``: the sum of ``chunk_fn`` over every chunk of
# ``data`` (any pytree of arrays whose leading axis is the row axis, sharded on the 1-D mesh axis
# ``"data"``), each device scanning its own chunks and the per-device sums meeting in one
# ``psum``. The gradient in ``params`` is computed in the same single pass (a ``jax.custom_vjp``:
# each chunk's forward and backward run back to back and only the running value and gradient are
# carried), so memory holds one chunk's activations whatever the number of rows, and no forward
# pass is recomputed (``jax.checkpoint`` would: 1.35x slower for an MLP). With one chunk per
# device there is no loop at all (a loop body's convolution gradients are slow on XLA:CPU,
# jax-ml/jax#12868).
#
# Vectorized chains (a ``jax.vmap`` over ``params``) of a network with a convolution run one
# chain after another (``chain_batching``, :func:`sequential`): vmapped over its kernel, a
# convolution becomes a grouped one, 9.5x three one-chain ResNet-20 gradients on an H200.
#
# Both :func:`bnn_ppl.inference.full_batch_potential` (a ``BNN``) and
# :func:`bnn_ppl.inference.model_potential` (any NumPyro model) are built on it.

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from bnn_ppl import config, validation
from bnn_ppl.types import Array, PyTree

__all__ = [
    "ShardedData",
    "CHAIN_BATCHING",
    "DATA_AXIS",
    "DEFAULT_MAX_CHUNK",
    "chain_batched",
    "device_rows",
    "bytes_per_row",
    "has_convolution",
    "traced_bytes",
    "pad_rows",
    "sequential",
    "sharded_chunked_sum",
]

DATA_AXIS = "data"
CHAIN_BATCHING = config.CHAIN_BATCHING
DEFAULT_MAX_CHUNK = 1024



class ShardedData(NamedTuple):
    """Padded data, sharded on the batch axis over the mesh.

    ``mask[i]`` is False for padding rows. All three arrays have ``num_devices * num_chunks *
    chunk_size`` rows.
    """

    x: Array
    y: Array
    mask: Array


def device_rows(n: int, num_devices: int, chunk_size: int | None) -> tuple[int, int]:
    """``(chunk, num_chunks)``: balanced chunks of at most ``chunk_size`` rows (default 1024)
    such that ``num_devices * num_chunks * chunk >= n`` with under one padded row per chunk
    and device."""
    per_device = -(-n // num_devices)
    max_chunk = DEFAULT_MAX_CHUNK if chunk_size is None else chunk_size
    num_chunks = -(-per_device // max_chunk)
    return -(-per_device // num_chunks), num_chunks


def pad_rows(a: np.ndarray, total: int) -> np.ndarray:
    """``a`` with rows appended up to ``total`` rows, by repeating its own rows cyclically.

    Padding rows are masked out of every sum; they copy real rows (not zeros) so that the
    network never sees an input that no real row is: a function that is NaN or infinite at an
    all-zero row (a log, a division) cannot reach the value *or the gradient* through the
    padding (a masked NaN still turns a gradient into NaN: ``0 * NaN``).
    """
    n = a.shape[0]
    if total <= n:
        return a
    if n == 0:
        return np.zeros((total, *a.shape[1:]), a.dtype)
    return np.concatenate([a, a[np.arange(total - n) % n]])


@jax.custom_jvp
def params_only(a: Array) -> Array:
    """Identity that refuses to be differentiated (the chunked gradient covers parameters)."""
    return a


@params_only.defjvp
def _params_only_jvp(primals: tuple, tangents: tuple) -> tuple:
    raise NotImplementedError(
        "the chunked potential is differentiable in the parameters only; for gradients with "
        "respect to the data build it with chunk_size >= the rows per device (one chunk)."
    )


def _sub_jaxprs(eqn: Any) -> Iterator[Any]:
    """The jaxprs (or closed jaxprs) an equation holds in its parameters (a loop's body, a
    ``pjit``'s callee, a ``shard_map``'s body, a ``custom_vjp``'s function)."""
    for v in eqn.params.values():
        for sub in v if isinstance(v, (list, tuple)) else (v,):
            if hasattr(sub, "eqns") or hasattr(getattr(sub, "jaxpr", None), "eqns"):
                yield sub


def has_convolution(jaxpr: Any) -> bool:
    """Whether a jaxpr (or closed jaxpr), or any jaxpr nested in it, has a convolution."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    return any(
        eqn.primitive.name == "conv_general_dilated" or any(map(has_convolution, _sub_jaxprs(eqn)))
        for eqn in jaxpr.eqns
    )


def traced_bytes(jaxpr: Any) -> int:
    """Bytes of every value a jaxpr (or closed jaxpr, and the jaxprs nested in it) computes."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    total = 0
    for eqn in jaxpr.eqns:
        for v in eqn.outvars:
            shape, dtype = getattr(v.aval, "shape", None), getattr(v.aval, "dtype", None)
            if shape is not None and isinstance(dtype, np.dtype):  # (not a PRNG key's type)
                total += int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        total += sum(map(traced_bytes, _sub_jaxprs(eqn)))
    return total


def bytes_per_row(jaxpr_for: Callable[[int], Any]) -> int:
    """Bytes of the values one more row adds: ``traced_bytes`` of ``jaxpr_for(2)`` (a jaxpr
    traced for 2 rows) less that of ``jaxpr_for(1)``; at least 1."""
    return max(1, traced_bytes(jaxpr_for(2)) - traced_bytes(jaxpr_for(1)))


def sequential(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn(params, *args)`` that a ``jax.vmap`` runs one batch element after another
    (``jax.custom_batching.sequential_vmap``: unbatched arguments are shared), and that stays
    differentiable in ``params`` (``custom_vmap`` alone has no reverse mode; the step-size
    rule's Hessian-vector products need it): its VJP is ``fn``'s own, batched sequentially
    too. ``args`` (data, masks, row indices) get no cotangent: callers refuse derivatives in
    the data first (:func:`params_only`)."""
    mapped = jax.custom_batching.sequential_vmap(fn)

    def vjp_params(params: PyTree, ct: Any, *args: Any) -> PyTree:
        return jax.vjp(lambda p: fn(p, *args), params)[1](ct)[0]

    mapped_vjp = jax.custom_batching.sequential_vmap(vjp_params)

    @jax.custom_vjp
    def f(params: PyTree, *args: Any) -> Any:
        return mapped(params, *args)

    def f_fwd(params: PyTree, *args: Any) -> tuple[Any, tuple]:
        return mapped(params, *args), (params, args)

    def f_bwd(res: tuple, ct: Any) -> tuple:
        params, args = res
        return (mapped_vjp(params, ct, *args), *(None for _ in args))

    f.defvjp(f_fwd, f_bwd)
    return f


def convolution_check(fn: Callable[..., Any]) -> Callable[..., bool]:
    """``check(*args) -> bool``: whether ``fn(*args)`` has a convolution (traced once per
    argument shapes, abstractly: nothing runs)."""
    seen: dict[str, bool] = {}

    def check(*args: Any) -> bool:
        specs = jax.tree.map(lambda a: jax.ShapeDtypeStruct(np.shape(a), a.dtype), args)
        key = str(jax.tree.structure(specs)) + str(jax.tree.leaves(specs))
        if key not in seen:
            seen[key] = has_convolution(jax.make_jaxpr(fn)(*specs))
        return seen[key]

    return check


def chain_batched(fn: Callable[..., Any], chain_batching: str) -> Callable[..., Any]:
    """``fn(params, *args)`` as ``chain_batching`` says a ``jax.vmap`` over chains should run
    it (see :func:`sharded_chunked_sum`): ``fn`` itself, or :func:`sequential` (``fn``), the
    latter with ``"auto"`` when ``fn`` has a convolution. Used where no chunk loop is (the
    minibatch potentials)."""
    validation.check_choice("chain_batching", chain_batching, CHAIN_BATCHING)
    if chain_batching == "vectorized":
        return fn
    one_by_one = sequential(fn)
    has_conv = convolution_check(fn) if chain_batching == "auto" else None

    def call(params: PyTree, *args: Any) -> Any:
        if has_conv is not None and not has_conv(params, *args):
            return fn(params, *args)
        return one_by_one(params, *jax.tree.map(params_only, args))

    return call


def sharded_chunked_sum(
    chunk_fn: Callable[[PyTree, PyTree, Array], Array],
    mesh: Mesh,
    num_chunks: int,
    dtype: Any = jnp.float32,
    chain_batching: str = "auto",
) -> Callable[[PyTree, PyTree, Array], Array]:
    """``f(params, data, mask)``: the sum of ``chunk_fn(params, batch, mask_batch)`` over chunks.

    Args:
        chunk_fn: the (masked) sum over one chunk of rows; must return a scalar of ``dtype``
            and give padded rows (``mask`` False) no weight.
        mesh: a 1-D mesh with axis ``"data"``; ``data`` and ``mask`` are split on it.
        num_chunks: chunks per device; every device holds ``num_chunks * chunk`` rows.
        dtype: the accumulation dtype.
        chain_batching: what ``jax.vmap`` over ``params`` (vectorized chains) does:
            ``"vectorized"`` batches ``chunk_fn``'s arithmetic (JAX's own rules);
            ``"sequential"`` evaluates the value and gradient for one parameter set after
            another (``jax.custom_batching.sequential_vmap``: a ``lax.map``), each exactly the
            one-chain program; ``"auto"`` (default): sequential when ``chunk_fn`` has a convolution,
            whose batched form (a grouped convolution, one group per chain) is slow: three
            vmapped ResNet-20 gradients took 9.5x as long as three one after another on one
            H200, 2.9x on a CPU (``benchmarks/RESULTS.md``).

    With ``num_chunks > 1``, or on the sequential path, ``f`` is differentiable in ``params``
    only (differentiating in ``data`` raises ``NotImplementedError``); otherwise it is
    ordinary autodiff.

    Example:
        >>> import jax, jax.numpy as jnp, numpy as np
        >>> from jax.sharding import Mesh
        >>> mesh = Mesh(np.asarray(jax.devices()[:1]), (DATA_AXIS,))
        >>> f = sharded_chunked_sum(lambda w, b, m: jnp.sum(jnp.where(m, w * b["x"], 0.0)),
        ...                         mesh, num_chunks=3)
        >>> x = jnp.arange(6.0)
        >>> float(f(2.0, {"x": x}, x < 5)), float(jax.grad(f)(2.0, {"x": x}, x < 5))
        (20.0, 10.0)
    """
    acc = jnp.dtype(dtype)
    validation.check_choice("chain_batching", chain_batching, CHAIN_BATCHING)

    def chunks(a: Array) -> Array:
        return a.reshape(num_chunks, a.shape[0] // num_chunks, *a.shape[1:])

    def local_value_and_grad(params: PyTree, data: PyTree, mask: Array) -> tuple[Array, PyTree]:
        # value and gradient in ONE pass over the chunks: only the running sums are carried
        if num_chunks == 1:
            return jax.value_and_grad(chunk_fn)(params, data, mask)

        def body(carry: tuple, batch: tuple[PyTree, Array]) -> tuple[tuple, None]:
            total, grad = carry
            v, g = jax.value_and_grad(chunk_fn)(params, *batch)
            return (total + v, jax.tree.map(jnp.add, grad, g)), None

        init = (jnp.zeros((), acc), jax.tree.map(jnp.zeros_like, params))
        batches = (jax.tree.map(chunks, data), chunks(mask))
        return jax.lax.scan(body, init, batches)[0]

    def local_value(params: PyTree, data: PyTree, mask: Array) -> Array:
        if num_chunks == 1:
            return chunk_fn(params, data, mask)

        def body(total: Array, batch: tuple[PyTree, Array]) -> tuple[Array, None]:
            return total + chunk_fn(params, *batch), None

        batches = (jax.tree.map(chunks, data), chunks(mask))
        return jax.lax.scan(body, jnp.zeros((), acc), batches)[0]

    def one_pass_sum(value: Callable, value_and_grad: Callable) -> Callable:
        """The sum as a ``custom_vjp`` whose forward pass is ``value_and_grad``: the gradient
        in the parameters only, so the data are closed over (differentiating in the data is
        refused earlier: params_only)."""

        def total(params: PyTree, data: PyTree, mask: Array) -> Array:
            @jax.custom_vjp
            def f(params: PyTree) -> Array:
                return value(params, data, mask)

            def f_fwd(params: PyTree) -> tuple[Array, PyTree]:
                return value_and_grad(params, data, mask)

            def f_bwd(grad: PyTree, ct: Array) -> tuple[PyTree]:
                return (jax.tree.map(lambda g: (ct * g).astype(g.dtype), grad),)

            f.defvjp(f_fwd, f_bwd)
            return f(params)

        return total

    scanned_sum = one_pass_sum(local_value, local_value_and_grad)
    # each chain's value and gradient exactly as one chain's, one chain after another
    # (the value needs no reverse mode of its own: one_pass_sum differentiates through the
    # value-and-gradient pass)
    sequential_sum = one_pass_sum(
        jax.custom_batching.sequential_vmap(local_value), sequential(local_value_and_grad)
    )

    chunk_has_conv = convolution_check(chunk_fn)

    def runs_sequentially(params: PyTree, data: PyTree, mask: Array) -> bool:
        if chain_batching != "auto":
            return chain_batching == "sequential"
        rows = mask.shape[0] // num_chunks  # one chunk's arguments

        def spec(a: Any) -> jax.ShapeDtypeStruct:
            return jax.ShapeDtypeStruct((rows, *a.shape[1:]), a.dtype)

        return chunk_has_conv(params, jax.tree.map(spec, data), spec(mask))

    def local(params: PyTree, data: PyTree, mask: Array) -> Array:
        if runs_sequentially(params, data, mask):
            data, mask = jax.tree.map(params_only, (data, mask))
            return jax.lax.psum(sequential_sum(params, data, mask), DATA_AXIS)
        if num_chunks == 1:
            return jax.lax.psum(chunk_fn(params, data, mask), DATA_AXIS)
        return jax.lax.psum(scanned_sum(params, data, mask), DATA_AXIS)

    sharded = jax.shard_map(
        local,
        mesh=mesh,
        in_specs=(P(), P(DATA_AXIS), P(DATA_AXIS)),
        out_specs=P(),
        # the network is user code: a scan inside it (an RNN, say) whose carry starts as a
        # constant would fail shard_map's varying-axes type check; the psum above is explicit
        check_vma=False,
    )
    if num_chunks == 1:
        return sharded
    return lambda params, data, mask: sharded(params, jax.tree.map(params_only, data), mask)

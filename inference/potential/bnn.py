"""The full-batch potential: the tempered negative log joint, sharded over devices, chunked."""

# Notes:
#
# :func:`full_batch_potential` puts the data on a 1-D ``jax.sharding.Mesh`` over the given devices
# (``NamedSharding`` on the batch axis) and returns a :class:`FullBatchPotential` whose
# ``potential_fn(params) -> scalar`` is what NumPyro's ``HMC``/``NUTS`` take. Inside:
#
# * each device sums the log-likelihood of its shard in chunks of at most ``chunk_size`` rows
#   with ``lax.scan``, and the per-device sums meet in one ``psum`` (``jax.shard_map``). The
#   gradient is computed in the same single pass (a ``jax.custom_vjp``: each chunk's forward and
#   backward run back to back and only the running value and gradient are carried), so the
#   gradient too holds one chunk of activations at a time, memory does not grow with the data,
#   and no forward pass is recomputed (``jax.checkpoint`` would: 1.35x slower for an MLP);
# * rows are padded so that every device holds the same whole number of chunks, and padded rows
#   are masked out (``jnp.where``): the value and gradient equal the unpadded ones; no row is
#   ever dropped. Padding rows repeat real rows (:func:`pad_rows`), so a network that is NaN at
#   an all-zero input cannot poison the gradient through the padding either;
# * the log prior is computed once, outside the sharded part;
# * with one chunk per device there is no loop at all;
# * parameters live in unconstrained space (the likelihood's noise scale through a log
#   transform, with its Jacobian); ``postprocess_fn`` maps samples back.
#
# On the CPU backend, the backward convolutions of any loop body run on a slow path
# (jax-ml/jax#12868); the zoo's ConvNets avoid it with :mod:`bnn_ppl.models.conv`, which your own
# Flax convolutions can use too (``nn.Conv(..., conv_general_dilated=...)``).
#
# Data as arguments, not constants
# --------------------------------
# A jitted function that *closes over* an array embeds it in the compiled program as a constant.
# ``potential_fn`` does close over the data (the signature NumPyro wants is ``potential_fn(z)``),
# which is fine for small data but copies large data into the program. For large data use
# ``potential_fn_gen(data)``, which takes the data as an argument, through
# :class:`bnn_ppl.inference.HMC` / :class:`bnn_ppl.inference.NUTS` (or
# :func:`bnn_ppl.inference.hmc`),
# which pass ``pot.data`` as a jit argument of NumPyro's sampling loop.

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from numpyro.distributions import constraints
from numpyro.distributions.transforms import Transform

from bnn_ppl import validation
from bnn_ppl.inference.potential.distributed import check_process_local, place_process_local
from bnn_ppl.inference.potential.sharded_sum import (
    CHAIN_BATCHING,
    DATA_AXIS,
    DEFAULT_MAX_CHUNK,
    ShardedData,
    bytes_per_row,
    chain_batched,
    has_convolution,
    pad_rows,
    sharded_chunked_sum,
)
from bnn_ppl.inference.potential.sharded_sum import device_rows as _device_rows
from bnn_ppl.model import BNN
from bnn_ppl.types import Array, Params, PRNGKey
from bnn_ppl.validation import InputTypeError, InputValueError

__all__ = [
    "ShardedData",
    "FullBatchPotential",
    "full_batch_potential",
    "DATA_AXIS",
    "CHUNK_RULES",
    "default_devices",
    "mesh_devices",
    "accumulation_dtype",
    "MEMORY_RULES",
    "RECORDED_RULES",
    "PROBE_ROWS",
    "SAFETY",
    "CPU_CHUNK_BYTES",
    "CPU_MIN_CHUNK",
    "activation_bytes_per_row",
    "choose_chunk",
    "cpu_chunk",
    "EARLIER_CPU_CHUNK",
    "chunk_for_memory",
    "free_device_bytes",
    "memory_chunk",
]


def is_real(support: Any) -> bool:
    """Whether a NumPyro support is the real line (an unconstrained site, no transform)."""
    return support is constraints.real or (
        isinstance(support, constraints.independent) and support.base_constraint is constraints.real
    )


@dataclass(frozen=True, eq=False)
class FullBatchPotential:
    """A BNN's tempered potential on a fixed dataset. Build with :func:`full_batch_potential`.

    Attributes:
        model: the :class:`~bnn_ppl.BNN`.
        data: the padded, sharded data (:class:`ShardedData`).
        mesh: the 1-D device mesh, axis name ``"data"``.
        num_data: number of real (unpadded) rows.
        chunk_size: rows per chunk; ``num_chunks`` chunks per device.
        dtype: dtype in which the log-likelihood is accumulated.
        chunk_rule: what chose ``chunk_size``, a key of
            :data:`bnn_ppl.inference.potential.bnn.CHUNK_RULES` (e.g. ``"cpu working set"``).
        chain_batching: ``"vectorized"``, ``"sequential"`` or ``"auto"`` (what vectorized
            chains do: :func:`full_batch_potential`).
    """

    model: BNN
    data: ShardedData
    mesh: Mesh
    num_data: int
    chunk_size: int
    num_chunks: int
    dtype: Any
    _x_spec: jax.ShapeDtypeStruct
    chunk_rule: str = field(default="chunk_size", kw_only=True)
    chain_batching: str = field(default="auto", kw_only=True)

    # ------------------------------------------------------------------ structure
    @cached_property
    def transforms(self) -> dict[str, Transform | None]:
        """Per site, the bijection to its support, or ``None`` where the support is all reals."""
        return {
            k: (None if is_real(d.support) else t)
            for (k, d), t in zip(
                self.model.sites(self._x_spec).items(),
                self.model.transforms(self._x_spec).values(),
                strict=True,
            )
        }

    @cached_property
    def outside_network(self) -> tuple[str, ...]:
        """The sites that are not network parameters: hierarchical priors' scales and the
        likelihood's latents (a learned noise sd), in sampling order."""
        weights = self.model.priors(self._x_spec)
        return tuple(k for k in self.model.sites(self._x_spec) if k not in weights)

    @property
    def num_params(self) -> int:
        """Number of scalar parameters HMC moves (the flat dimension)."""
        return self.model.num_params(self._x_spec)

    @property
    def num_devices(self) -> int:
        return self.mesh.devices.size

    # ------------------------------------------------------------- constraining
    def constrain(self, unconstrained: Params) -> tuple[Params, Array]:
        """Map unconstrained values to the sites' supports; also return the log |Jacobian|."""
        params, log_det = {}, jnp.zeros(())
        for k, t in self.transforms.items():
            u = unconstrained[k]
            if t is None:
                params[k] = u
            else:
                params[k] = t(u)
                log_det = log_det + jnp.sum(t.log_abs_det_jacobian(u, params[k]))
        return params, log_det

    def postprocess_fn(self, unconstrained: Params) -> Params:
        """Unconstrained sample -> constrained values (for ``MCMC(postprocess_fn=...)``)."""
        return self.constrain(unconstrained)[0]

    def unconstrain(self, params: Params) -> Params:
        """Constrained values -> unconstrained ones (the inverse of ``postprocess_fn``)."""
        return {
            k: (params[k] if t is None else t.inv(params[k])) for k, t in self.transforms.items()
        }

    def init_params(
        self, key: PRNGKey, num_chains: int | None = None, method: str = "prior"
    ) -> Params:
        """Unconstrained initial values for HMC (leading axis ``num_chains`` if given).

        ``method="prior"`` draws from the prior; ``"network"`` uses the network's initialisers
        (see :meth:`bnn_ppl.BNN.init`).
        """

        key = validation.check_key("key", key)
        validation.check_choice("method", method, ("prior", "network"))
        if num_chains is not None:
            num_chains = validation.check_int("num_chains", num_chains)

        return self._init_draw(key, num_chains, method)

    @cached_property
    def _init_draw(self) -> Callable[[PRNGKey, int | None, str], Params]:
        """:meth:`init_params`'s draw as one compiled program per ``(num_chains, method)``
        (drawn op by op it compiled a few dozen small programs on a new network's first run)."""

        def draw(key: PRNGKey, num_chains: int | None, method: str) -> Params:
            def one(k: PRNGKey) -> Params:
                return self.unconstrain(self.model.init(k, self._x_spec, method=method))

            if num_chains is None:
                return one(key)
            return jax.vmap(one)(jax.random.split(key, num_chains))

        return jax.jit(draw, static_argnums=(1, 2))

    # ------------------------------------------------------------------ density
    @cached_property
    def _sharded_log_likelihood(self) -> Callable[[Params, ShardedData], Array]:
        model, acc = self.model, self.dtype

        def chunk_ll(params: Params, batch: tuple[Array, Array], mb: Array) -> Array:
            ll = model.log_likelihood(params, *batch).astype(acc)
            return jnp.sum(jnp.where(mb, ll, jnp.zeros((), acc)))

        total = sharded_chunked_sum(
            chunk_ll, self.mesh, self.num_chunks, acc, chain_batching=self.chain_batching
        )
        return lambda params, data: total(params, (data.x, data.y), data.mask)

    def log_likelihood(self, params: Params, data: ShardedData | None = None) -> Array:
        """Untempered total log-likelihood of constrained ``params`` on the data."""
        return self._sharded_log_likelihood(params, self.data if data is None else data)

    @property
    def args(self) -> tuple[ShardedData]:
        """What ``mcmc.run(key, *pot.args, ...)`` passes to :meth:`potential_fn_gen`."""
        return (self.data,)

    def potential_fn_gen(self, data: ShardedData | None = None) -> Callable[[Params], Array]:
        """``potential_fn`` with the data given as an argument (keeps them out of constants).

        ``data=None`` uses :attr:`data` (closed over, like :attr:`potential_fn`).
        """
        model = self.model
        data = self.data if data is None else data

        def potential_fn(unconstrained: Params) -> Array:
            params, log_det = self.constrain(unconstrained)
            log_prior = model.log_prior(params, self._x_spec).astype(self.dtype)
            log_lik = self._sharded_log_likelihood(params, data)
            return -(
                model.prior_scale * log_prior
                + model.likelihood_scale * log_lik
                + log_det.astype(self.dtype)
            )

        return potential_fn

    @cached_property
    def _batch_log_likelihood(self) -> Callable[[Params, Array, Array, Array], Array]:
        """``f(params, idx, x, y)``: the summed log-likelihood of rows ``idx``; vectorized chains
        of a ConvNet run it one after another (``chain_batching``; its convolution check is
        traced once per potential)."""
        model, acc = self.model, self.dtype

        def batch_log_lik(params: Params, idx: Array, x: Array, y: Array) -> Array:
            return jnp.sum(model.log_likelihood(params, x[idx], y[idx]).astype(acc))

        return chain_batched(batch_log_lik, self.chain_batching)

    def minibatch_potential_fn_gen(
        self, data: ShardedData | None = None
    ) -> Callable[[Params, Array], Array]:
        """Unbiased minibatch estimate of the potential: ``f(unconstrained, idx) -> scalar``.

        ``idx`` holds ``b`` row indices in ``[0, num_data)`` (padding rows lie beyond
        ``num_data`` and are never picked); the batch log-likelihood is scaled by
        ``num_data / b``, the prior counted once, with the same tempering as the full potential.
        """
        model, n = self.model, self.num_data
        data = self.data if data is None else data
        batch_log_lik = self._batch_log_likelihood

        def potential_fn(unconstrained: Params, idx: Array) -> Array:
            params, log_det = self.constrain(unconstrained)
            log_prior = model.log_prior(params, self._x_spec).astype(self.dtype)
            log_lik = batch_log_lik(params, idx, data.x, data.y) * (n / idx.shape[0])
            return -(
                model.prior_scale * log_prior
                + model.likelihood_scale * log_lik
                + log_det.astype(self.dtype)
            )

        return potential_fn

    @property
    def potential_fn(self) -> Callable[[Params], Array]:
        """``potential_fn(unconstrained_params) -> scalar``: the tempered negative log joint.

        Closes over :attr:`data` (see the module docstring for large data).
        """
        return self.potential_fn_gen(self.data)

    @cached_property
    def value_and_grad(self) -> Callable[[Params], tuple[Array, Params]]:
        """Jitted ``(potential, gradient)`` with the data passed as an argument."""
        f = jax.jit(lambda u, data: jax.value_and_grad(self.potential_fn_gen(data))(u))
        return lambda u: f(u, self.data)


def compute_dtype(dtype: Any) -> jnp.dtype:
    """The dtype an input or target array is computed in: bools stay bools, integers become
    int32 (int64 with ``jax_enable_x64``), floats float32 (float64 with ``jax_enable_x64`` for
    float64 data). :func:`bnn_ppl.validation.as_array` has already refused values that this
    conversion would change."""
    dtype = np.dtype(dtype)
    x64 = bool(jax.config.jax_enable_x64)
    if dtype == np.bool_:
        return jnp.dtype(jnp.bool_)
    if np.issubdtype(dtype, np.integer):
        return jnp.dtype(jnp.int64 if x64 and dtype.itemsize > 4 else jnp.int32)
    return jnp.dtype(jnp.float64 if x64 and dtype == np.float64 else jnp.float32)


def full_batch_potential(
    model: BNN,
    x: Any,
    y: Any,
    *,
    devices: Sequence[jax.Device] | None = None,
    chunk_size: int | Literal["auto"] | None = None,
    dtype: Any = None,
    vectorized_chains: int = 1,
    chain_batching: Literal["auto", "vectorized", "sequential"] = "auto",
) -> FullBatchPotential:
    """Build the sharded, chunked full-batch potential of ``model`` on ``(x, y)``.

    Args:
        model: a :class:`~bnn_ppl.BNN`.
        x: inputs, shape ``(n, ...)``; finite.
        y: targets, ``(n,)`` class indices or ``(n,)``/``(n, d)`` regression targets.
        devices: devices of the mesh (default: :func:`default_devices`, those of
            ``jax.devices()`` that get a whole chunk of rows each). When they
            belong to several processes (after ``jax.distributed.initialize``), ``x`` and ``y``
            are this process's block of rows
            (:func:`bnn_ppl.inference.potential.distributed.process_rows`)
            and every process must make the same call; see
            :mod:`bnn_ppl.inference.potential.distributed`.
        chunk_size: the most rows one network call sees on a device. Chunks are balanced
            (e.g. 700 rows per device with ``chunk_size=512`` make 2 chunks of 350), which
            keeps the padding below one row per chunk and device. With one chunk per device
            (``chunk_size`` >= rows per device) there is no loop, but the gradient then holds
            every row's activations at once. ``None`` (default): on the CPU backend the
            rows whose activations take about 8 MiB (:func:`cpu_chunk`: the network's traced
            intermediates per row, times ``vectorized_chains``; at least 32 rows);
            on other devices the memory rule of :mod:`bnn_ppl.inference.potential.bnn` (one chunk
            per device if it fits in half the free device memory, else the largest chunk that
            does; it compiles the gradient for one 512-row probe chunk). ``"auto"``: the
            memory rule on any backend. :attr:`FullBatchPotential.chunk_rule` says which rule
            chose the chunk.
        dtype: accumulation dtype of the log-likelihood (default float32; ``jnp.float64``
            needs ``jax.config.update("jax_enable_x64", True)``).
        vectorized_chains: how many chains will evaluate the potential at once, vmapped
            (``num_chains`` with ``chain_method="vectorized"``; default 1). The CPU and memory
            rules read it: each chain holds its own activations, so a chunk is sized for all
            of them (unless they run one after another, below).
            :func:`~bnn_ppl.inference.hmc`, ``fit`` and the reference recipe pass their
            ``num_chains``.
        chain_batching: what a ``jax.vmap`` over chains (vectorized HMC/NUTS or SG-MCMC,
            deep ensembles; the minibatch potential too) does: ``"vectorized"`` batches the
            network, ``"sequential"`` runs the one-chain program chain after chain, ``"auto"``
            (default) is sequential for a network with a convolution (batched, 9.5x slower
            for a ResNet-20 on an H200; see :func:`~bnn_ppl.inference.potential.sharded_sum.
            sharded_chunked_sum`). Sequential: differentiable in the parameters only.

    Returns:
        A :class:`FullBatchPotential`.

    Raises:
        ValueError, TypeError: bad data (empty, NaN/inf, mismatched lengths, labels out of
            range, wrong target shape), bad ``chunk_size``, ``dtype``, ``vectorized_chains``
            or ``chain_batching``; all before any compilation.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> import bnn_ppl as bp
        >>> from bnn_ppl.models import MLP
        >>> from bnn_ppl.inference import full_batch_potential
        >>> data = bp.data.load("digits")
        >>> model = bp.BNN(MLP(hidden=(16,), out=10), bp.priors.Normal(0.3),
        ...                bp.likelihoods.Categorical())
        >>> pot = full_batch_potential(model, data.x_train, data.y_train, chunk_size=512)
        >>> pot.num_params, pot.chunk_size, pot.num_chunks
        (1210, 479, 3)
        >>> params = pot.init_params(jax.random.key(0))
        >>> bool(jnp.isfinite(pot.potential_fn(params)))
        True
    """
    if not isinstance(model, BNN):
        raise InputTypeError(f"model must be a bnn_ppl.BNN, got {type(model).__name__}.")

    check_process_local("x", x)
    check_process_local("y", y)
    x, y = model.check_data(x, y)
    chunk_size = validation.check_chunk_size(chunk_size)
    vectorized_chains = validation.check_int("vectorized_chains", vectorized_chains)
    validation.check_choice("chain_batching", chain_batching, CHAIN_BATCHING)
    acc = accumulation_dtype(dtype)
    devices = mesh_devices(x.shape[0], chunk_size, devices)

    # x and y each keep their own kind: integer inputs (token ids) stay integers, and float
    # targets stay floats whatever the inputs are
    x_dtype, y_dtype = compute_dtype(x.dtype), compute_dtype(y.dtype)

    x_row = jax.ShapeDtypeStruct((1, *x.shape[1:]), x_dtype)
    chunk_size, rule = choose_chunk(
        model, x_row, jax.ShapeDtypeStruct((1, *y.shape[1:]), y_dtype), acc, devices,
        -(-x.shape[0] // len(devices)), chunk_size, vectorized_chains, chain_batching,
    )  # fmt: skip
    if len({d.process_index for d in devices}) > 1:
        # several processes (jax.distributed): x, y are this process's block of rows; the
        # global layout is the single-process one (see bnn_ppl.inference.potential.distributed)

        mesh, data, n, chunk, num_chunks = place_process_local(
            x.astype(x_dtype), y.astype(y_dtype), devices, chunk_size, fingerprint=(str(acc),)
        )
    else:
        n = x.shape[0]
        chunk, num_chunks = _device_rows(n, len(devices), chunk_size)
        padded = len(devices) * num_chunks * chunk

        def pad(a: np.ndarray) -> np.ndarray:
            return pad_rows(a, padded)

        mesh = Mesh(np.asarray(devices), (DATA_AXIS,))
        sharding = NamedSharding(mesh, P(DATA_AXIS))
        data = ShardedData(
            x=jax.device_put(pad(x.astype(x_dtype)), sharding),
            y=jax.device_put(pad(y.astype(y_dtype)), sharding),
            mask=jax.device_put(np.arange(padded) < n, sharding),
        )
    return FullBatchPotential(
        model=model,
        data=data,
        mesh=mesh,
        num_data=n,
        chunk_size=chunk,
        num_chunks=num_chunks,
        dtype=acc,
        _x_spec=x_row,
        chunk_rule=rule,
        chain_batching=chain_batching,
    )


def accumulation_dtype(dtype: Any) -> jnp.dtype:
    """The dtype a potential accumulates its sums in: ``dtype``, float32 when ``None``; an
    :class:`~bnn_ppl.validation.InputError` for a non-floating dtype, or float64 without 64-bit
    JAX."""
    acc = jnp.dtype(jnp.float32 if dtype is None else dtype)
    if not jnp.issubdtype(acc, jnp.floating):
        raise InputTypeError(f"dtype must be a floating dtype, got {acc}.")
    if acc == jnp.float64 and not jax.config.jax_enable_x64:
        raise InputValueError(
            "dtype=float64 needs 64-bit JAX: call jax.config.update('jax_enable_x64', True) "
            "before creating arrays."
        )
    return acc


def mesh_devices(
    num_rows: int, chunk_size: int | str | None, devices: Sequence[jax.Device] | None
) -> list[jax.Device]:
    """The devices a potential's mesh holds: ``devices``, or :func:`default_devices` when
    ``None``; an :class:`~bnn_ppl.validation.InputError` when the list is empty, or when the
    memory rule (``chunk_size="auto"``) would meet devices of several processes."""
    devices = default_devices(num_rows, chunk_size) if devices is None else list(devices)
    if not devices:
        raise InputValueError(
            "devices is empty; pass at least one device, or None (default_devices)."
        )
    if chunk_size == "auto" and len({d.process_index for d in devices}) > 1:
        raise InputValueError(
            "chunk_size='auto' is not supported with devices of several processes (each "
            "process's free memory may differ); pass an int."
        )
    return devices


def default_devices(num_rows: int, chunk_size: int | str | None) -> list[jax.Device]:
    """The devices a potential shards ``num_rows`` rows over when none are given: those of
    ``jax.devices()`` that get a whole chunk of rows each, i.e. the first ``num_rows // chunk``
    (at least one), where the chunk is known before the data are placed: an int ``chunk_size``,
    or the CPU backend's default of :data:`DEFAULT_MAX_CHUNK` rows. A device with less than a
    chunk adds a collective to every gradient and saves no work (2,000 rows on 4 simulated CPU
    devices: 1.14x the CPU time per gradient of one device, ``benchmarks/numpyro_end_to_end.py``).
    On an accelerator (where a device with a partial chunk still shortens every device's
    chunk), with the memory rule (``chunk_size="auto"``) and with devices of several
    processes: every device.

    Example:
        >>> from bnn_ppl.inference.potential.bnn import default_devices
        >>> len(default_devices(100, 1024))
        1
    """
    devices = jax.devices()
    if len({d.process_index for d in devices}) > 1 or chunk_size == "auto":
        return devices
    if devices[0].platform != "cpu":
        return devices
    chunk = DEFAULT_MAX_CHUNK if chunk_size is None else int(chunk_size)
    return devices[: min(len(devices), max(1, num_rows // chunk))]


# -------------------- chunking
# How many rows one chunk of the full-batch potential holds.
#
# On the CPU backend the default chunk holds about CPU_CHUNK_BYTES of activations (the
# network's traced intermediates of one row, times the vectorized chains; at least
# CPU_MIN_CHUNK rows): small enough to stay in cache, large enough for XLA to spread a chunk's
# matrix products over the cores. Per gradient on 2 CPU cores (``benchmarks/cpu_chunk.py``),
# against the earlier fixed 1024 rows: an MLP(50, 50) on 200,000 rows 1.8x faster, LeNet-5 on
# 4,096 images 1.35x, a ResNet-FRN on 256 images 1.9x (the earlier rule: one chunk of 256);
# with 4 vectorized chains the MLP's 1,653-row chunk is within 7 % of the best fixed size.
#
# On a GPU, a loop over small chunks leaves the device idle: on one H200 an MLP's full-batch
# gradient over 60,000 rows took 5.25 ms in chunks of 1017 rows and 1.11 ms in one chunk; a CNN-LSTM
# 247 ms vs 77 ms; a ResNet-20 679 ms with chunks of 511 rows, 448 ms with chunks of 10,000 (fixed
# chunk sizes, ``benchmarks/gpu.py``). So on an accelerator the default is the largest chunk that
# fits in free device memory, found thus:
#
# 1. compile the value and gradient of the potential for ONE probe chunk (at most
#    :data:`PROBE_ROWS` rows, no loop) and read XLA's temporary memory
#    (``compiled.memory_analysis().temp_size_in_bytes``): bytes per row = temporary bytes / probe
#    rows (the fixed part, e.g. the parameters' gradient, is counted per row too: an
#    overestimate), plus one row of data (a chunk sliced out of the data may be copied);
# 2. read the free memory of the devices (``memory_stats()``: ``bytes_limit - bytes_in_use``,
#    the least over the devices);
# 3. :func:`chunk_for_memory`: the resident data (every row of the device) are taken from
#    ``safety * free``, and the chunk is as many rows as the rest holds, at most every row of the
#    device (one chunk, no loop), at least 1.
#
# Vectorized chains (``chain_method="vectorized"``, the drivers' default) evaluate the potential
# for every chain at once, each with its own activations: ``full_batch_potential(...,
# vectorized_chains=C)`` counts C times the probe's bytes per row (the library's drivers pass
# their ``num_chains``). Built for one chain and run with three, a ResNet-20's 25,000-row chunks
# (51 GiB each on one H200) made XLA's autotuner fail with ``CUDA_ERROR_ILLEGAL_ADDRESS``, which
# left the device unusable for the rest of the process.
#
# ``safety`` (default :data:`SAFETY` = 0.5) leaves room for what the probe does not see: the
# sampler's state (momentum, previous gradient, a mass matrix), the loop's carried gradient,
# XLA's fragmentation, and other programs on the device. Where a device reports no memory
# statistics (the CPU backend, some plugins) the rule falls back to 1024 rows.
#
# The chunk, and so the order in which float32 sums are rounded, then depends on the memory free
# when the potential is built: for results identical to the last bit across machines or runs
# beside other work, pass an int ``chunk_size``.

PROBE_ROWS = 512
SAFETY = 0.5

CPU_CHUNK_BYTES = 8 * 2**20
"""The CPU rule's activation bytes per chunk (:func:`cpu_chunk`)."""
CPU_MIN_CHUNK = 32
"""The CPU rule's fewest rows per chunk (a ResNet's rows take megabytes each)."""
EARLIER_CPU_CHUNK = 1024
"""The CPU default before the CPU rule: a fixed chunk of at most this many rows (checkpoints
written then recorded no chunk, and resume with it)."""

#: What :attr:`~bnn_ppl.inference.FullBatchPotential.chunk_rule` can say, and what it means.
CHUNK_RULES = {
    "chunk_size": "the chunk_size argument",
    "cpu working set": (
        "chunk_size=None on the CPU backend: the rows whose activations take about 8 MiB "
        "(at least 32)"
    ),
    "fits in memory": "the memory rule: every row of a device in one chunk",
    "largest that fits": "the memory rule: the largest chunk that fits in free device memory",
    "no memory stats": "the memory rule, but a device reports no free memory: at most 1024 rows",
    "several processes": "chunk_size=None with devices of several processes: at most 1024 rows",
}
#: The rules that read free device memory (the chunk may differ between runs).
MEMORY_RULES = ("fits in memory", "largest that fits", "no memory stats")
#: The rules whose chunk a checkpoint records, so that a resume builds with it again: the
#: memory rules, and the CPU rule (it may choose otherwise in another version).
RECORDED_RULES = (*MEMORY_RULES, "cpu working set")


def chunk_for_memory(
    rows_per_device: int,
    bytes_per_row: int,
    free_bytes: int,
    safety: float = SAFETY,
    *,
    resident_bytes: int = 0,
) -> int:
    """The most rows per chunk such that ``chunk * bytes_per_row <= safety * free_bytes -
    resident_bytes``, clipped to ``[1, rows_per_device]``.

    Args:
        rows_per_device: rows each device holds (the chunk never exceeds it: one chunk).
        bytes_per_row: device memory one more row of a chunk needs (>= 1).
        free_bytes: free device memory (>= 0).
        safety: the share of ``free_bytes`` the potential may use, in ``(0, 1]``.
        resident_bytes: memory taken from that share first (the data themselves).

    Returns:
        The chunk size, an int in ``[1, rows_per_device]`` (1 when nothing fits: the smallest
        program, whose failure, if any, is XLA's out-of-memory error).

    Raises:
        ValueError, TypeError: a count that is not a positive int, negative memory, or
            ``safety`` outside ``(0, 1]``.

    Example:
        >>> chunk_for_memory(60_000, bytes_per_row=6_000, free_bytes=100 * 2**30)
        60000
        >>> chunk_for_memory(50_000, bytes_per_row=2 * 2**20, free_bytes=100 * 2**30)
        25600
        >>> chunk_for_memory(50_000, bytes_per_row=2 * 2**20, free_bytes=2**20)
        1
    """
    rows_per_device = validation.check_int("rows_per_device", rows_per_device)
    bytes_per_row = validation.check_int("bytes_per_row", bytes_per_row)
    free_bytes = validation.check_int("free_bytes", free_bytes, minimum=0)
    resident_bytes = validation.check_int("resident_bytes", resident_bytes, minimum=0)
    safety = validation.check_positive("safety", safety)
    if safety > 1:
        raise InputValueError(f"safety must be in (0, 1], got {safety}: a share of free memory.")
    budget = safety * free_bytes - resident_bytes
    return max(1, min(rows_per_device, math.floor(budget / bytes_per_row)))


def free_device_bytes(devices: Sequence[Any]) -> int | None:
    """The least free memory over ``devices`` (``bytes_limit - bytes_in_use`` of
    ``device.memory_stats()``), or ``None`` when a device does not report both."""
    free = []
    for d in devices:
        stats = d.memory_stats()
        if not stats or "bytes_limit" not in stats or "bytes_in_use" not in stats:
            return None
        free.append(max(0, int(stats["bytes_limit"]) - int(stats["bytes_in_use"])))
    return min(free) if free else None


def memory_chunk(
    rows_per_device: int,
    compile_probe: Callable[[int], Any],
    devices: Sequence[Any],
    *,
    data_bytes_per_row: int,
    free_bytes: int | None = None,
    safety: float = SAFETY,
    probe_rows: int = PROBE_ROWS,
    chains: int = 1,
) -> tuple[int, str]:
    """``(max_chunk, rule)`` by the memory rule (module docstring); ``rule`` is a key of
    :data:`CHUNK_RULES`.

    Args:
        rows_per_device: rows each device holds.
        compile_probe: ``rows -> jax.stages.Compiled``: the potential's value and gradient
            compiled for one chunk of ``rows`` rows on one device.
        devices: the devices of the mesh (their free memory is read unless ``free_bytes``).
        data_bytes_per_row: bytes of one row of the data (inputs, targets, mask).
        free_bytes: free device memory to assume instead of reading it (tests; a share of a
            device you mean to leave to other work).
        safety, probe_rows: the share of free memory the potential may use; rows of the probe.
        chains: chains that evaluate the potential at once, vmapped (``chain_method=
            "vectorized"``): each holds its own activations, so a row of a chunk costs
            ``chains`` times the probe's temporary bytes (the data are shared).
    """
    free = free_device_bytes(devices) if free_bytes is None else free_bytes
    if free is None:
        return DEFAULT_MAX_CHUNK, "no memory stats"
    rows = min(probe_rows, rows_per_device)
    analysis = compile_probe(rows).memory_analysis()
    if analysis is None:
        return DEFAULT_MAX_CHUNK, "no memory stats"
    per_row = chains * -(-int(analysis.temp_size_in_bytes) // rows) + data_bytes_per_row
    chunk = chunk_for_memory(
        rows_per_device, per_row, free, safety, resident_bytes=rows_per_device * data_bytes_per_row
    )
    return chunk, ("fits in memory" if chunk == rows_per_device else "largest that fits")


def potential_probe(
    model: BNN, x_row: jax.ShapeDtypeStruct, y_row: jax.ShapeDtypeStruct, dtype: Any, device: Any
) -> Callable[[int], Any]:
    """``rows -> Compiled``: the value and gradient of ``model``'s full-batch potential for one
    chunk of ``rows`` rows on ``device`` (``x_row``/``y_row``: one row's shape and dtype).
    Nothing is run and no data are placed: only shapes are lowered."""
    mesh = Mesh(np.asarray([device]), (DATA_AXIS,))
    sharding = NamedSharding(mesh, P(DATA_AXIS))

    def compile_probe(rows: int) -> Any:
        def spec(row: Any) -> jax.ShapeDtypeStruct:
            return jax.ShapeDtypeStruct((rows, *row.shape[1:]), row.dtype, sharding=sharding)

        data = ShardedData(spec(x_row), spec(y_row), spec(jax.ShapeDtypeStruct((1,), bool)))
        pot = FullBatchPotential(model, data, mesh, rows, rows, 1, dtype, x_row)  # type: ignore[arg-type]
        u = jax.eval_shape(lambda: pot.init_params(jax.random.key(0)))
        f = jax.jit(lambda u, d: jax.value_and_grad(pot.potential_fn_gen(d))(u))
        return f.lower(u, data).compile()

    return compile_probe


def _likelihood_jaxpr(
    model: BNN, x_row: jax.ShapeDtypeStruct, y_row: jax.ShapeDtypeStruct, rows: int = 1
) -> Any:
    """The jaxpr of ``model``'s log-likelihood of ``rows`` rows (traced, not run)."""
    params = jax.eval_shape(lambda k: model.init(k, x_row, method="network"), jax.random.key(0))
    x, y = (jax.ShapeDtypeStruct((rows, *r.shape[1:]), r.dtype) for r in (x_row, y_row))
    return jax.make_jaxpr(model.log_likelihood)(params, x, y)


def activation_bytes_per_row(
    model: BNN, x_row: jax.ShapeDtypeStruct, y_row: jax.ShapeDtypeStruct
) -> int:
    """Bytes of the intermediate values one more row adds to ``model``'s log-likelihood (its
    jaxpr traced for 2 rows and for 1, nothing compiled or run; at least 1)."""
    return bytes_per_row(lambda rows: _likelihood_jaxpr(model, x_row, y_row, rows))


def cpu_chunk(rows_per_device: int, bytes_per_row: int, chains: int = 1) -> int:
    """The CPU rule's chunk: ``CPU_CHUNK_BYTES // (chains * bytes_per_row)`` rows, at least
    :data:`CPU_MIN_CHUNK`, at most ``rows_per_device`` (one chunk).

    Example:
        >>> cpu_chunk(200_000, bytes_per_row=1262)  # an MLP(50, 50)'s row: 1.2 KiB
        6647
        >>> cpu_chunk(200_000, bytes_per_row=1262, chains=4), cpu_chunk(500, 1262)
        (1661, 500)
        >>> cpu_chunk(4096, bytes_per_row=1_879_885)  # a ResNet's row: 1.8 MiB
        32
    """
    rows = CPU_CHUNK_BYTES // max(1, chains * bytes_per_row)
    return min(rows_per_device, max(CPU_MIN_CHUNK, rows))


def model_has_convolution(
    model: BNN, x_row: jax.ShapeDtypeStruct, y_row: jax.ShapeDtypeStruct
) -> bool:
    """Whether ``model``'s log-likelihood of one row has a convolution (traced, not run)."""
    return has_convolution(_likelihood_jaxpr(model, x_row, y_row))


def choose_chunk(
    model: BNN,
    x_row: jax.ShapeDtypeStruct,
    y_row: jax.ShapeDtypeStruct,
    dtype: Any,
    devices: Sequence[Any],
    rows_per_device: int,
    chunk_size: int | str | None,
    chains: int = 1,
    chain_batching: str = "vectorized",
) -> tuple[int | None, str]:
    """``(max_chunk, rule)`` for :func:`~bnn_ppl.inference.full_batch_potential`'s validated
    ``chunk_size`` (an int, ``None`` or ``"auto"``); ``max_chunk=None`` means 1024 rows
    (several processes: each process's memory or activations may differ).
    ``chains``: vectorized chains, as in :func:`memory_chunk`; chains that run one after
    another (``chain_batching="sequential"``, or ``"auto"`` for a network with a convolution:
    :func:`model_has_convolution`) hold one chain's activations at a time."""
    if chunk_size not in (None, "auto"):
        return chunk_size, "chunk_size"  # type: ignore[return-value]
    if len({d.process_index for d in devices}) > 1:
        return None, "several processes"
    if chains > 1 and (
        chain_batching == "sequential"
        or (chain_batching == "auto" and model_has_convolution(model, x_row, y_row))
    ):
        chains = 1
    if chunk_size is None and devices[0].platform == "cpu":
        per_row = activation_bytes_per_row(model, x_row, y_row)
        return cpu_chunk(rows_per_device, per_row, chains), "cpu working set"
    data_bytes = 1 + sum(
        int(np.prod(r.shape[1:], dtype=np.int64)) * np.dtype(r.dtype).itemsize
        for r in (x_row, y_row)
    )
    probe = potential_probe(model, x_row, y_row, dtype, devices[0])
    return memory_chunk(
        rows_per_device, probe, devices, data_bytes_per_row=data_bytes, chains=chains
    )

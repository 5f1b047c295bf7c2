"""The full-batch potential: the tempered negative log joint, sharded over devices, chunked.

:func:`full_batch_potential` puts the data on a 1-D ``jax.sharding.Mesh`` over the given devices
(``NamedSharding`` on the batch axis) and returns a :class:`FullBatchPotential` whose
``potential_fn(params) -> scalar`` is what NumPyro's ``HMC``/``NUTS`` take. Inside:

* each device sums the log-likelihood of its shard in chunks of at most ``chunk_size`` rows
  with ``lax.scan``, and the per-device sums meet in one ``psum`` (``jax.shard_map``). The
  gradient is computed in the same single pass (a ``jax.custom_vjp``: each chunk's forward and
  backward run back to back and only the running value and gradient are carried), so the
  gradient too holds one chunk of activations at a time, memory does not grow with the data,
  and no forward pass is recomputed (``jax.checkpoint`` would: 1.35x slower for an MLP);
* rows are padded so that every device holds the same whole number of chunks, and padded rows
  are masked out (``jnp.where``): the value and gradient equal the unpadded ones; no row is
  ever dropped. Padding rows repeat real rows (:func:`pad_rows`), so a network that is NaN at
  an all-zero input cannot poison the gradient through the padding either;
* the log prior is computed once, outside the sharded part;
* with one chunk per device there is no loop at all;
* parameters live in unconstrained space (the likelihood's noise scale through a log
  transform, with its Jacobian); ``postprocess_fn`` maps samples back.

On the CPU backend, the backward convolutions of any loop body run on a slow path
(jax-ml/jax#12868); the zoo's ConvNets avoid it with :mod:`bnn_ppl.models.conv`, which your own
Flax convolutions can use too (``nn.Conv(..., conv_general_dilated=...)``).

Data as arguments, not constants
--------------------------------
A jitted function that *closes over* an array embeds it in the compiled program as a constant.
``potential_fn`` does close over the data (the signature NumPyro wants is ``potential_fn(z)``),
which is fine for small data but copies large data into the program. For large data use
``potential_fn_gen(data)``, which takes the data as an argument, through
:class:`bnn_ppl.inference.HMC` / :class:`bnn_ppl.inference.NUTS` (or :func:`bnn_ppl.inference.hmc`),
which pass ``pot.data`` as a jit argument of NumPyro's sampling loop.

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

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from numpyro.distributions import constraints
from numpyro.distributions.transforms import Transform

from bnn_ppl import validation
from bnn_ppl.inference.sharded_sum import (
    CHAIN_BATCHING,
    DATA_AXIS,
    chain_batched,
    pad_rows,
    sharded_chunked_sum,
)
from bnn_ppl.inference.sharded_sum import device_rows as _device_rows
from bnn_ppl.model import BNN
from bnn_ppl.types import Array, Params, PRNGKey
from bnn_ppl.validation import InputTypeError, InputValueError

__all__ = ["ShardedData", "FullBatchPotential", "full_batch_potential", "DATA_AXIS"]


class ShardedData(NamedTuple):
    """Padded data, sharded on the batch axis over the mesh.

    ``mask[i]`` is False for padding rows. All three arrays have ``num_devices * num_chunks *
    chunk_size`` rows.
    """

    x: Array
    y: Array
    mask: Array


def _is_real(support: Any) -> bool:
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
            :data:`bnn_ppl.inference.chunking.CHUNK_RULES` (e.g. ``"cpu default"``).
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
            k: (None if _is_real(d.support) else t)
            for (k, d), t in zip(
                self.model.sites(self._x_spec).items(),
                self.model.transforms(self._x_spec).values(),
                strict=True,
            )
        }

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

        def one(k: PRNGKey) -> Params:
            return self.unconstrain(self.model.init(k, self._x_spec, method=method))

        if num_chains is None:
            return one(key)
        return jax.vmap(one)(jax.random.split(key, num_chains))

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
        devices: devices of the mesh (default ``jax.devices()``, i.e. all of them). When they
            belong to several processes (after ``jax.distributed.initialize``), ``x`` and ``y``
            are this process's block of rows (:func:`bnn_ppl.inference.distributed.process_rows`)
            and every process must make the same call; see :mod:`bnn_ppl.inference.distributed`.
        chunk_size: the most rows one network call sees on a device. Chunks are balanced
            (e.g. 700 rows per device with ``chunk_size=512`` make 2 chunks of 350), which
            keeps the padding below one row per chunk and device. With one chunk per device
            (``chunk_size`` >= rows per device) there is no loop, but the gradient then holds
            every row's activations at once. ``None`` (default): 1024 on the CPU backend;
            on other devices the memory rule of :mod:`bnn_ppl.inference.chunking` (one chunk
            per device if it fits in half the free device memory, else the largest chunk that
            does; it compiles the gradient for one 512-row probe chunk). ``"auto"``: the
            memory rule on any backend. :attr:`FullBatchPotential.chunk_rule` says which rule
            chose the chunk.
        dtype: accumulation dtype of the log-likelihood (default float32; ``jnp.float64``
            needs ``jax.config.update("jax_enable_x64", True)``).
        vectorized_chains: how many chains will evaluate the potential at once, vmapped
            (``num_chains`` with ``chain_method="vectorized"``; default 1). Only the memory
            rule reads it: each chain holds its own activations, so it fits a chunk in memory
            for all of them (unless they run one after another, below).
            :func:`~bnn_ppl.inference.hmc`, ``fit`` and the reference recipe pass their
            ``num_chains``.
        chain_batching: what a ``jax.vmap`` over chains (vectorized HMC/NUTS or SG-MCMC,
            deep ensembles; the minibatch potential too) does: ``"vectorized"`` batches the
            network, ``"sequential"`` runs the one-chain program chain after chain, ``"auto"``
            (default) is sequential for a network with a convolution (batched, 9.5x slower
            for a ResNet-20 on an H200; see :func:`~bnn_ppl.inference.sharded_sum.
            sharded_chunked_sum`). Sequential: differentiable in the parameters only.

    Returns:
        A :class:`FullBatchPotential`.

    Raises:
        ValueError, TypeError: bad data (empty, NaN/inf, mismatched lengths, labels out of
            range, wrong target shape), bad ``chunk_size``, ``dtype``, ``vectorized_chains``
            or ``chain_batching``; all before any compilation.
    """
    if not isinstance(model, BNN):
        raise InputTypeError(f"model must be a bnn_ppl.BNN, got {type(model).__name__}.")
    from bnn_ppl.inference.process_layout import check_process_local

    check_process_local("x", x)
    check_process_local("y", y)
    x, y = model.check_data(x, y)
    chunk_size = validation.check_chunk_size(chunk_size)
    vectorized_chains = validation.check_int("vectorized_chains", vectorized_chains)
    validation.check_choice("chain_batching", chain_batching, CHAIN_BATCHING)
    acc = jnp.dtype(jnp.float32 if dtype is None else dtype)
    if not jnp.issubdtype(acc, jnp.floating):
        raise InputTypeError(f"dtype must be a floating dtype, got {acc}.")
    if acc == jnp.float64 and not jax.config.jax_enable_x64:
        raise InputValueError(
            "dtype=float64 needs 64-bit JAX: call jax.config.update('jax_enable_x64', True) "
            "before creating arrays."
        )
    devices = list(jax.devices() if devices is None else devices)
    if not devices:
        raise InputValueError(
            "devices is empty; pass at least one device (default: jax.devices())."
        )
    if chunk_size == "auto" and len({d.process_index for d in devices}) > 1:
        raise InputValueError(
            "chunk_size='auto' is not supported with devices of several processes (each "
            "process's free memory may differ); pass an int."
        )

    # x and y each keep their own kind: integer inputs (token ids) stay integers, and float
    # targets stay floats whatever the inputs are
    x_dtype, y_dtype = compute_dtype(x.dtype), compute_dtype(y.dtype)
    from bnn_ppl.inference.chunking import choose_chunk

    x_row = jax.ShapeDtypeStruct((1, *x.shape[1:]), x_dtype)
    chunk_size, rule = choose_chunk(
        model, x_row, jax.ShapeDtypeStruct((1, *y.shape[1:]), y_dtype), acc, devices,
        -(-x.shape[0] // len(devices)), chunk_size, vectorized_chains, chain_batching,
    )  # fmt: skip
    if len({d.process_index for d in devices}) > 1:
        # several processes (jax.distributed): x, y are this process's block of rows; the
        # global layout is the single-process one (see bnn_ppl.inference.distributed)
        from bnn_ppl.inference.distributed import place_process_local

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

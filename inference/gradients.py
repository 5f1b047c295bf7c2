"""Minibatch gradients of the potential, and the NumPyro ``MCMCKernel`` glue of the SG-MCMC kernels.

Gradient estimator
------------------
:func:`gradient_estimator` turns a :class:`~bnn_ppl.inference.FullBatchPotential` into a
:class:`GradientEstimator`: ``init(key)`` starts an index stream, and ``batch(stream)`` returns
``grad_fn`` for the next minibatch plus the advanced stream, where ``grad_fn(position) ->
(potential estimate, gradient)``. The estimate is unbiased for the tempered potential
``U(θ) = -[s_p log p(θ) + s_l log p(D | θ) + log|J|]`` (the one HMC samples, with the
temperature of the :class:`~bnn_ppl.BNN`): the batch log-likelihood is scaled by ``N / b``,
the prior counted once (:meth:`FullBatchPotential.minibatch_potential_fn_gen`). Batches are
drawn without replacement within each epoch (:mod:`bnn_ppl.inference.minibatch`), inside the
compiled loop; the data stay on device, sharded as in the full-batch potential. With
``batch_size=None`` ``grad_fn`` is the exact full-batch gradient (sharded, chunked).

``grad_fn`` is built per step from the batch indices; a kernel's pure ``step(rng_key, state,
grad_fn, step_size)`` calls it where its integrator needs a gradient and never sees the data.

Kernel glue
-----------
:class:`SGMCMCKernel` is the ``numpyro.infer.mcmc.MCMCKernel`` base of :class:`SGLD`,
:class:`SGHMC`, :class:`SGNHT` and :class:`ATMC`. It owns the potential, the data plumbing
(``MCMC(kernel, ..., jit_model_args=True).run(key, *pot.args, init_params=...)`` passes the
sharded data as an argument of NumPyro's compiled loop; ``run(key, init_params=...)`` closes
over them), the step-size schedule and the step counter, and vmaps over chains for
``chain_method="vectorized"``. Its state is :class:`SGMCMCState`: the sample field ``z`` is the
position (unconstrained parameters), ``i`` the step counter (both collected by default), and
``info`` the kernel's ``Info`` record of the last step (collect it with
``extra_fields=("info",)`` or single fields such as ``"info.step_size"``).

Example:
    >>> import jax, jax.numpy as jnp
    >>> import bnn_ppl as bp
    >>> from bnn_ppl.models import MLP
    >>> from bnn_ppl.inference import full_batch_potential, gradient_estimator
    >>> data = bp.data.load("digits")
    >>> model = bp.BNN(MLP(hidden=(8,), out=10), bp.priors.Normal(0.3),
    ...                bp.likelihoods.Categorical())
    >>> pot = full_batch_potential(model, data.x_train, data.y_train)
    >>> est = gradient_estimator(pot, batch_size=100)
    >>> stream = est.init(jax.random.key(0))
    >>> grad_fn, stream = est.batch(stream)
    >>> u, g = grad_fn(pot.init_params(jax.random.key(1)))
    >>> g["Dense_0.kernel"].shape
    (64, 8)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.infer.mcmc import MCMCKernel
from numpyro.util import identity, is_prng_key

from bnn_ppl.inference.minibatch import epoch_init, next_batch
from bnn_ppl.inference.potential import FullBatchPotential, ShardedData, full_batch_potential
from bnn_ppl.inference.schedules import Schedule, as_schedule
from bnn_ppl.model import BNN
from bnn_ppl.types import Array, Params, PRNGKey, PyTree
from bnn_ppl.validation import InputTypeError, InputValueError

__all__ = [
    "GradFn",
    "GradientEstimator",
    "gradient_estimator",
    "full_batch_estimator",
    "SGMCMCState",
    "SGMCMCKernel",
    "normal_like",
    "tree_mean",
]

GradFn = Callable[[Params], tuple[Array, Params]]
"""``grad_fn(position) -> (potential estimate, gradient of the potential)``."""


class GradientEstimator(NamedTuple):
    """A stream of per-step gradient functions.

    ``init(key) -> stream`` starts the index stream (``None`` for full batch);
    ``batch(stream) -> (grad_fn, stream)`` gives the gradient function of the next batch.
    """

    init: Callable[[PRNGKey], Any]
    batch: Callable[[Any], tuple[GradFn, Any]]
    batch_size: int | None


def gradient_estimator(
    potential: FullBatchPotential,
    data: ShardedData | None = None,
    batch_size: int | None = None,
) -> GradientEstimator:
    """Minibatch (or full-batch) gradients of ``potential`` on ``data`` (default: its own).

    Args:
        potential: the tempered potential.
        data: the sharded data (pass the jit argument here; ``None`` closes over
            ``potential.data``).
        batch_size: rows per batch, ``1 <= batch_size <= num_data``; ``None``: full batch.
    """
    if not isinstance(potential, FullBatchPotential):
        raise InputTypeError(
            f"potential must be a FullBatchPotential, got {type(potential).__name__}."
        )
    batch_size = _check_batch_size(batch_size, potential.num_data)
    if batch_size is None:
        full = jax.value_and_grad(potential.potential_fn_gen(data))
        return GradientEstimator(init=lambda key: None, batch=lambda s: (full, s), batch_size=None)
    mini = jax.value_and_grad(potential.minibatch_potential_fn_gen(data))
    n = potential.num_data

    def init(key: PRNGKey) -> Any:
        return epoch_init(key, n)

    def batch(stream: Any) -> tuple[GradFn, Any]:
        idx, stream = next_batch(stream, batch_size)
        return (lambda position: mini(position, idx)), stream

    return GradientEstimator(init=init, batch=batch, batch_size=batch_size)


def full_batch_estimator(potential_fn: Callable[[Any], Array]) -> GradientEstimator:
    """Exact gradients of a plain ``potential_fn(position) -> scalar`` (e.g. a test target).

    Example:
        >>> import jax.numpy as jnp
        >>> est = full_batch_estimator(lambda z: 0.5 * jnp.sum(z["x"] ** 2))
        >>> grad_fn, _ = est.batch(est.init(None))
        >>> grad_fn({"x": jnp.array([1.0, 2.0])})[1]["x"].tolist()
        [1.0, 2.0]
    """
    full = jax.value_and_grad(potential_fn)
    return GradientEstimator(init=lambda key: None, batch=lambda s: (full, s), batch_size=None)


def _check_batch_size(batch_size: Any, num_data: int) -> int | None:
    if batch_size is None:
        return None
    if isinstance(batch_size, bool) or not isinstance(batch_size, int | np.integer):
        raise InputTypeError(f"batch_size must be a positive int or None, got {batch_size!r}.")
    if not 1 <= batch_size <= num_data:
        raise InputValueError(
            f"batch_size must lie in [1, {num_data}] (the number of training rows), got "
            f"{batch_size}; use batch_size=None for full-batch gradients."
        )
    return int(batch_size)


# --------------------------------------------------------------------------- tree helpers
def normal_like(rng_key: PRNGKey, tree: PyTree) -> PyTree:
    """Independent standard normals in the structure, shapes and dtypes of ``tree``."""
    leaves, treedef = jax.tree.flatten(tree)
    keys = jax.random.split(rng_key, len(leaves))
    return jax.tree.unflatten(
        treedef,
        [
            jax.random.normal(k, jnp.shape(x), jnp.result_type(x))
            for k, x in zip(keys, leaves, strict=True)
        ],
    )


def tree_mean(tree: PyTree) -> Array:
    """Mean of all scalars in ``tree`` (every leaf's entries weighted equally)."""
    leaves = jax.tree.leaves(tree)
    total = sum(jnp.sum(x) for x in leaves)
    return total / sum(jnp.size(x) for x in leaves)


# --------------------------------------------------------------------------- MCMC glue
class SGMCMCState(NamedTuple):
    """State of an SG-MCMC kernel inside ``numpyro.infer.MCMC``.

    ``i``: steps taken since ``init`` (warmup included), the schedule's next ``t``;
    ``kernel_state``: the kernel's own state (``SGLDState``, ``ATMCState``, ...);
    ``info``: the kernel's ``Info`` record of the last step (zeros before the first);
    ``stream``: the minibatch index stream (``None`` for full batch);
    ``rng_key``: the chain's key. ``z`` (the sample field) is ``kernel_state.position``.
    """

    i: Array
    kernel_state: Any
    info: Any
    stream: Any
    rng_key: PRNGKey

    @property
    def z(self) -> Params:
        """The position (unconstrained parameters): MCMC's sample field."""
        return self.kernel_state.position


Step = Callable[[PRNGKey, Any, GradFn, Array], tuple[Any, Any]]


class SGMCMCKernel(MCMCKernel):
    """Base of the SG-MCMC kernels: potential, data, schedule and chains; see the module doc.

    Subclasses set :attr:`_init_fn` (``position -> kernel state``) and :attr:`_step`
    (``step(rng_key, state, grad_fn, step_size) -> (state, info)``) in ``__init__``.

    Args:
        potential: a :class:`~bnn_ppl.inference.FullBatchPotential`, or a
            :class:`~bnn_ppl.BNN` with ``x`` and ``y`` (the potential is then built here with
            ``chunk_size`` and ``devices``), or ``None`` with ``potential_fn``.
        x, y: the data, only with a ``BNN``.
        potential_fn: a plain ``potential_fn(position) -> scalar`` instead of a potential
            (full batch only; positions are then whatever ``init_params`` is).
        batch_size: rows per gradient (``None``: full batch).
        step_size: a number or a schedule ``t -> h_t`` (:mod:`bnn_ppl.inference.schedules`).
        chunk_size, devices: as in :func:`~bnn_ppl.inference.full_batch_potential`.
        init_method: how ``init_params=None`` is filled from the potential (``"prior"`` or
            ``"network"``).
    """

    sample_field = "z"
    model = None  # no NumPyro model: the kernel runs on a potential (ArviZ reads this)
    _init_fn: Callable[[Params], Any]
    _step: Step

    def __init__(
        self,
        potential: FullBatchPotential | BNN | None = None,
        x: Any = None,
        y: Any = None,
        *,
        potential_fn: Callable[[Any], Array] | None = None,
        batch_size: int | None = None,
        step_size: float | Schedule = 1e-3,
        chunk_size: int | None = None,
        devices: Sequence[jax.Device] | None = None,
        init_method: str = "prior",
    ):
        if isinstance(potential, BNN):
            if x is None or y is None:
                raise InputValueError("a BNN needs its data: pass x and y.")
            potential = full_batch_potential(
                potential, x, y, chunk_size=chunk_size, devices=devices
            )
        elif x is not None or y is not None:
            raise InputValueError(
                "x and y go with a BNN; a FullBatchPotential already has its data."
            )
        if potential is None and potential_fn is None:
            raise InputValueError("pass a FullBatchPotential, a BNN with x and y, or potential_fn.")
        if potential is not None and potential_fn is not None:
            raise InputValueError("pass either a potential (or BNN) or potential_fn, not both.")
        if potential is not None and not isinstance(potential, FullBatchPotential):
            raise InputTypeError(
                "potential must be a FullBatchPotential or a bnn_ppl.BNN, got "
                f"{type(potential).__name__}."
            )
        if potential_fn is not None and batch_size is not None:
            raise InputValueError(
                "batch_size needs a FullBatchPotential (it draws rows of its data); a plain "
                "potential_fn gives full-batch gradients only."
            )
        self.potential = potential
        self.potential_fn = potential_fn
        self.batch_size = _check_batch_size(
            batch_size, potential.num_data if potential is not None else 1
        )
        self.schedule = as_schedule(step_size)
        self.init_method = init_method
        self._vectorized = False
        self._sample_fn = None

    # ---------------------------------------------------------------------- plumbing
    @property
    def initial_step_size(self) -> float:
        """``h_0 = schedule(0)``."""
        return float(self.schedule(0))

    def _estimator(self, model_args: tuple) -> GradientEstimator:
        if self.potential is None:
            return full_batch_estimator(self.potential_fn)
        data = model_args[0] if model_args else None
        return gradient_estimator(self.potential, data, self.batch_size)

    def _one_step(self, state: SGMCMCState, est: GradientEstimator) -> SGMCMCState:
        key, step_key = jax.random.split(state.rng_key)
        grad_fn, stream = est.batch(state.stream)
        dtype = jnp.result_type(jax.tree.leaves(state.kernel_state.position)[0])
        h = jnp.asarray(self.schedule(state.i), dtype)
        kernel_state, info = self._step(step_key, state.kernel_state, grad_fn, h)
        return SGMCMCState(state.i + 1, kernel_state, info, stream, key)

    # ---------------------------------------------------------------- MCMCKernel API
    @property
    def default_fields(self) -> tuple[str, ...]:
        return ("z", "i")

    def init(
        self,
        rng_key: PRNGKey,
        num_warmup: int,
        init_params: Any,
        model_args: tuple,
        model_kwargs: dict,
    ) -> SGMCMCState:
        if init_params is None and self.potential is None:
            raise InputValueError("init_params are required with potential_fn.")
        est = self._estimator(model_args)

        def one(key: PRNGKey, params: Any) -> SGMCMCState:
            key, init_key, stream_key = jax.random.split(key, 3)
            if params is None:
                params = self.potential.init_params(init_key, method=self.init_method)
            kernel_state = self._init_fn(params)
            stream = est.init(stream_key)
            zero = SGMCMCState(jnp.zeros((), jnp.int32), kernel_state, None, stream, key)
            info_shape = jax.eval_shape(lambda s: self._one_step(s, est).info, zero)
            info = jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype), info_shape)
            return zero._replace(info=info)

        self._vectorized = not is_prng_key(rng_key)
        self._sample_fn = self.sample
        if self._vectorized:
            if init_params is None:
                return jax.vmap(lambda k: one(k, None))(rng_key)
            return jax.vmap(one)(rng_key, init_params)
        return one(rng_key, init_params)

    def sample(self, state: SGMCMCState, model_args: tuple, model_kwargs: dict) -> SGMCMCState:
        est = self._estimator(model_args)
        if self._vectorized:
            return jax.vmap(lambda s: self._one_step(s, est))(state)
        return self._one_step(state, est)

    def postprocess_fn(self, model_args: tuple, model_kwargs: dict) -> Callable:
        return identity if self.potential is None else self.potential.postprocess_fn

    def get_diagnostics_str(self, state: SGMCMCState) -> str:
        return f"step size {float(state.info.step_size):.2e}"

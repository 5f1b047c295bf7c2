"""MAP estimation by optax on the BNN's potential, and deep ensembles of MAP solutions."""

# Notes:
#
# :func:`map_estimate` minimises the same tempered potential that HMC samples (full batch through
# the sharded, chunked potential, or an unbiased minibatch estimate of it), so "MAP" here is the
# mode of exactly the posterior HMC targets. :func:`deep_ensemble` trains ``num_members`` MAP
# solutions at once with ``jax.vmap`` over initialisations and batch orders, and returns their
# parameters in the layout of ``MCMC.get_samples()`` (site -> array with a leading member axis),
# so :func:`bnn_ppl.predict`, :func:`bnn_ppl.bma` and every metric treat an ensemble like a set of
# posterior samples (Wilson 2020: deep ensembles as an approximate Bayesian model average).

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from bnn_ppl import validation
from bnn_ppl.divergence import check_finite_result
from bnn_ppl.inference.potential.bnn import FullBatchPotential, ShardedData, full_batch_potential
from bnn_ppl.inference.potential.minibatch import epoch_init, next_batch
from bnn_ppl.inference.progress_bar import LoopTick, check_progress_bar, loop_bar
from bnn_ppl.inference.svi import default_optimizer
from bnn_ppl.model import BNN
from bnn_ppl.network import NnxNetwork
from bnn_ppl.types import Array, Params, PRNGKey
from bnn_ppl.validation import InputTypeError, InputValueError

__all__ = ["MAPResult", "map_estimate", "deep_ensemble"]


class MAPResult(NamedTuple):
    """An optimisation result.

    ``params`` are constrained values keyed by site (with a leading member axis for an
    ensemble); ``losses`` the potential (tempered negative log joint; a minibatch estimate of it
    when minibatching) at every step; ``final_loss`` the full-batch potential at the end.
    """

    params: Params
    losses: Array
    final_loss: Array


def map_fitter(
    pot: FullBatchPotential,
    optimizer: optax.GradientTransformation,
    num_steps: int,
    batch_size: int | None,
    tick: LoopTick | None = None,
) -> Callable[[PRNGKey, Params, ShardedData], MAPResult]:
    """A pure function ``(key, unconstrained init, data) -> MAPResult`` (vmap-able); ``tick``
    as in :func:`unconstrained_fitter`."""
    optimise = unconstrained_fitter(pot, optimizer, num_steps, batch_size, tick)

    def fit(key: PRNGKey, u0: Params, data: ShardedData) -> MAPResult:
        res = optimise(key, u0, data)
        return res._replace(params=pot.postprocess_fn(res.params))

    return fit


def unconstrained_fitter(
    pot: FullBatchPotential,
    optimizer: optax.GradientTransformation,
    num_steps: int,
    batch_size: int | None,
    tick: LoopTick | None = None,
) -> Callable[[PRNGKey, Params, ShardedData], MAPResult]:
    """:func:`map_fitter` with ``MAPResult.params`` left unconstrained (HMC's coordinates);
    ``tick(step, loss)`` is called inside the loop (a progress bar:
    :func:`~bnn_ppl.inference.progress_bar.loop_bar`)."""

    def fit(key: PRNGKey, u0: Params, data: ShardedData) -> MAPResult:
        full = pot.potential_fn_gen(data)
        if batch_size is None:

            def loss_and_grad(u: Params, stream: Any) -> tuple[Array, Params, Any]:
                value, grad = jax.value_and_grad(full)(u)
                return value, grad, stream

            stream0 = None
        else:
            mini = pot.minibatch_potential_fn_gen(data)

            def loss_and_grad(u: Params, stream: Any) -> tuple[Array, Params, Any]:
                idx, stream = next_batch(stream, batch_size)
                value, grad = jax.value_and_grad(mini)(u, idx)
                return value, grad, stream

            stream0 = epoch_init(key, pot.num_data)

        def step(carry: tuple, i: Any) -> tuple[tuple, Array]:
            u, opt_state, stream = carry
            value, grad, stream = loss_and_grad(u, stream)
            updates, opt_state = optimizer.update(grad, opt_state, u)
            if tick is not None:
                tick(i, value)
            return (optax.apply_updates(u, updates), opt_state, stream), value

        steps = None if tick is None else jnp.arange(num_steps)
        (u, _, _), losses = jax.lax.scan(
            step, (u0, optimizer.init(u0), stream0), steps, length=num_steps
        )
        return MAPResult(u, losses, full(u))

    return fit


def _setup(
    model: BNN,
    x: Any,
    y: Any,
    num_steps: int,
    batch_size: int | None,
    optimizer: optax.GradientTransformation | None,
    learning_rate: float,
    init_method: str,
    rng_key: PRNGKey | None,
    devices: Sequence[jax.Device] | None,
    chunk_size: int | None,
    vectorized: int = 1,
    chain_batching: str = "auto",
) -> tuple[FullBatchPotential, Callable, PRNGKey]:
    """Check every argument (before anything is compiled), then build the potential (for
    ``vectorized`` fits at once) and fit."""
    if not isinstance(model, BNN):
        raise InputTypeError(f"model must be a bnn_ppl.BNN, got {type(model).__name__}.")
    x, y = model.check_data(x, y)
    num_steps = validation.check_int("num_steps", num_steps)
    batch_size = validation.check_batch_size("batch_size", batch_size, len(x))
    learning_rate = validation.check_positive("learning_rate", learning_rate)
    validation.check_choice("init_method", init_method, ("prior", "network"))
    if rng_key is not None:
        validation.check_key("rng_key", rng_key)
    if optimizer is None:
        optimizer = default_optimizer(learning_rate, num_steps)
    elif not isinstance(optimizer, optax.GradientTransformation):
        raise InputTypeError(
            f"optimizer must be an optax.GradientTransformation (e.g. optax.adam(1e-3)), got "
            f"{type(optimizer).__name__}."
        )
    pot = full_batch_potential(
        model, x, y, devices=devices, chunk_size=chunk_size, vectorized_chains=vectorized,
        chain_batching=chain_batching,
    )  # fmt: skip
    key = jax.random.key(0) if rng_key is None else rng_key

    def make_fit(tick: LoopTick | None) -> Callable:
        return map_fitter(pot, optimizer, num_steps, batch_size, tick)

    return pot, make_fit, key


def map_estimate(
    model: BNN,
    x: Any,
    y: Any,
    *,
    num_steps: int = 2000,
    optimizer: optax.GradientTransformation | None = None,
    learning_rate: float = 1e-2,
    batch_size: int | None = None,
    init_params: Params | None = None,
    init_method: str = "prior",
    rng_key: PRNGKey | None = None,
    devices: Sequence[jax.Device] | None = None,
    chunk_size: int | None = None,
    minibatch_size: int | None = None,
    progress_bar: bool | None = None,
) -> MAPResult:
    """The posterior mode by optax, on the same potential HMC samples.

    Args:
        model, x, y: the BNN and its data (validated before anything compiles).
        num_steps: optimisation steps.
        optimizer: optax transformation (default: Adam with a cosine schedule from
            ``learning_rate``).
        batch_size: rows per step (default full batch); batches are drawn without
            replacement within each epoch, inside the compiled loop.
        init_params: constrained initial values (default: drawn with ``init_method``).
        init_method: ``"prior"`` or ``"network"`` (see :meth:`bnn_ppl.BNN.init`).
        rng_key: random key (default ``jax.random.key(0)``).
        devices, chunk_size: as in :func:`~bnn_ppl.inference.full_batch_potential`.
        minibatch_size: the old name of ``batch_size`` (deprecated).
        progress_bar: a bar of the steps with the loss on stderr (default: when stderr is a
            terminal and ``CI`` is not set; :mod:`~bnn_ppl.inference.progress_bar`).
    """
    progress_bar = check_progress_bar(progress_bar)
    init = (
        None
        if init_params is None
        else validation.check_init_values("init_params", init_params, model, x)
    )
    pot, make_fit, key = _setup(
        model,
        x,
        y,
        num_steps,
        validation.renamed_argument("minibatch_size", minibatch_size, "batch_size", batch_size),
        optimizer,
        learning_rate,
        init_method,
        rng_key,
        devices,
        chunk_size,
    )
    init_key, fit_key = jax.random.split(key)
    u0 = pot.init_params(init_key, method=init_method) if init is None else pot.unconstrain(init)
    with loop_bar(num_steps, "map", progress_bar) as tick:
        result = jax.jit(make_fit(tick))(fit_key, u0, pot.data)
    check_finite_result("map_estimate", result.losses, result.params)
    return result


def deep_ensemble(
    model: BNN,
    x: Any,
    y: Any,
    num_members: int,
    *,
    num_steps: int = 2000,
    optimizer: optax.GradientTransformation | None = None,
    learning_rate: float = 1e-2,
    batch_size: int | None = None,
    init_method: str = "prior",
    rng_key: PRNGKey | None = None,
    devices: Sequence[jax.Device] | None = None,
    chunk_size: int | None = None,
    minibatch_size: int | None = None,
    chain_batching: str = "auto",
    progress_bar: bool | None = None,
) -> MAPResult:
    """``num_members`` MAP solutions from distinct initialisations, trained in parallel (vmap).

    Member ``i`` is exactly :func:`map_estimate` with ``rng_key=jax.random.split(rng_key,
    num_members)[i]``. Arguments as in :func:`map_estimate`; ``chain_batching`` as in
    :func:`~bnn_ppl.inference.full_batch_potential` (what the vmap over members does:
    ``"auto"`` trains a ConvNet's members one after another inside the compiled program). The
    result's ``params`` have a leading member axis, the layout of ``MCMC.get_samples()``.
    ``progress_bar``: one bar of the steps with the members' mean loss (default as in
    :func:`map_estimate`).

    Raises:
        InputValueError: ``num_members < 1``, ``init_method="network"`` with an nnx network (whose
            initial values do not depend on the key, so every member would be the same), any
            bad argument (before anything compiles), or a member whose optimisation diverged.

    Example:
        >>> import jax
        >>> import bnn_ppl as bp
        >>> from bnn_ppl.models import MLP
        >>> from bnn_ppl.inference import deep_ensemble
        >>> data = bp.data.load("digits")
        >>> model = bp.BNN(MLP(hidden=(16,), out=10), bp.priors.Normal(0.3),
        ...                bp.likelihoods.Categorical())
        >>> ens = deep_ensemble(model, data.x_train, data.y_train, num_members=3, num_steps=300,
        ...                     batch_size=128, rng_key=jax.random.key(0))
        >>> ens.params["Dense_0.kernel"].shape, ens.losses.shape
        ((3, 64, 16), (3, 300))
        >>> probs = bp.predict(model, ens.params, data.x_test)          # (3, 360, 10)
        >>> float(bp.metrics.accuracy(bp.bma(probs), data.y_test)) > 0.9
        True
    """
    num_members = validation.check_int("num_members", num_members)
    progress_bar = check_progress_bar(progress_bar)
    if not isinstance(model, BNN):
        raise InputTypeError(f"model must be a bnn_ppl.BNN, got {type(model).__name__}.")
    if init_method == "network" and isinstance(model.network, NnxNetwork):
        raise InputValueError(
            "init_method='network' gives every member the same start for an nnx network; "
            "use init_method='prior' for a deep ensemble."
        )
    pot, make_fit, key = _setup(
        model,
        x,
        y,
        num_steps,
        validation.renamed_argument("minibatch_size", minibatch_size, "batch_size", batch_size),
        optimizer,
        learning_rate,
        init_method,
        rng_key,
        devices,
        chunk_size,
        num_members,  # trained at once (vmap): the memory rule counts every member
        chain_batching,
    )
    keys = jax.random.split(key, num_members)
    split = jax.vmap(jax.random.split)(keys)
    u0 = jax.vmap(lambda k: pot.init_params(k, method=init_method))(split[:, 0])
    with loop_bar(num_steps, "ensemble", progress_bar, members=num_members) as tick:
        fit = make_fit(tick)
        result = jax.jit(jax.vmap(fit, in_axes=(0, 0, None)))(split[:, 1], u0, pot.data)
    check_finite_result("deep_ensemble", result.losses, result.params)
    return result

"""HMC and NUTS on the full-batch potential, as real NumPyro kernels and ``MCMC`` objects.

Two ways in:

1. Build NumPyro's own kernel on ``pot.potential_fn`` (the data are then constants of the
   compiled program - fine for small data)::

       mcmc = MCMC(numpyro.infer.HMC(potential_fn=pot.potential_fn, trajectory_length=1.0),
                   num_warmup=200, num_samples=200, postprocess_fn=pot.postprocess_fn)
       mcmc.run(key, init_params=pot.init_params(key2))

2. Use :class:`HMC` / :class:`NUTS` below: NumPyro's kernels (subclasses, so every NumPyro
   feature works) that take the data as a *jit argument* of the sampling loop, passed through
   ``mcmc.run(key, *pot.args, ...)`` with ``MCMC(..., jit_model_args=True)``. This keeps large
   data out of the program's constants. :func:`hmc` and :func:`nuts` do all of it with
   Izmailov et al.'s defaults and return the finished ``MCMC``.

Several chains: ``chain_method="vectorized"`` (vmap over chains; each potential call is still
sharded over the data mesh) or ``"sequential"``. ``chain_method="parallel"`` pmaps chains over
devices, which clashes with a potential that already shards the data over those devices: it is
refused here.

Example:
    >>> import jax
    >>> import bnn_ppl as bp
    >>> from bnn_ppl.models import MLP
    >>> from bnn_ppl.inference import hmc
    >>> data = bp.data.load("diabetes")
    >>> model = bp.BNN(MLP(hidden=(8,), out=1), bp.priors.Normal(1.0),
    ...                bp.likelihoods.Gaussian(scale=0.7))
    >>> mcmc = hmc(model, data.x_train, data.y_train, num_warmup=20, num_samples=10,
    ...            rng_key=jax.random.key(0))
    >>> mcmc.get_samples()["Dense_0.kernel"].shape
    (10, 10, 8)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpyro.infer
from numpyro.infer import MCMC
from numpyro.infer.hmc import HMCState
from numpyro.infer.hmc import hmc as _numpyro_hmc

from bnn_ppl import validation
from bnn_ppl.inference.hmc_checks import (
    CHAIN_METHODS,
    CheckedMCMC,
    LeapfrogLimitWarning,
    as_key,
    check_finished,
    check_hmc_kwargs,
    check_nuts_kwargs,
    check_run_args,
)
from bnn_ppl.inference.potential import FullBatchPotential, full_batch_potential
from bnn_ppl.model import BNN
from bnn_ppl.types import PRNGKey
from bnn_ppl.validation import InputTypeError

__all__ = [
    "HMC",
    "NUTS",
    "hmc",
    "nuts",
    "default_trajectory_length",
    "CheckedMCMC",
    "LeapfrogLimitWarning",
    "CHAIN_METHODS",
]


class _OnPotential:
    """Mixin: run NumPyro's HMC machinery on ``potential.potential_fn_gen(data)``.

    NumPyro's ``hmc()`` supports a potential generator that receives the model arguments;
    here the "model arguments" are the sharded data, so with ``jit_model_args=True`` they are
    arguments of the compiled loop rather than constants.
    """

    potential: FullBatchPotential

    def _init_state(
        self, rng_key: Any, model_args: tuple, model_kwargs: dict, init_params: Any
    ) -> Any:
        if self._init_fn is None:
            self._init_fn, self._sample_fn = _numpyro_hmc(
                potential_fn_gen=self.potential.potential_fn_gen,
                kinetic_fn=self._kinetic_fn,
                algo=self._algo,
            )
        self._potential_fn_gen = self.potential.potential_fn_gen
        return init_params

    def postprocess_fn(self, model_args: tuple, model_kwargs: dict) -> Any:
        return self.potential.postprocess_fn


def _check_potential(potential: Any) -> FullBatchPotential:
    if not isinstance(potential, FullBatchPotential):
        raise InputTypeError(
            f"potential must be a FullBatchPotential (bnn_ppl.inference.full_batch_potential), "
            f"got {type(potential).__name__}."
        )
    return potential


class HMC(_OnPotential, numpyro.infer.HMC):
    """NumPyro's ``HMC`` on a :class:`~bnn_ppl.inference.FullBatchPotential`, with a bounded
    step size.

    Takes every keyword of ``numpyro.infer.HMC`` except ``model``/``potential_fn``/
    ``init_strategy``, plus ``max_num_steps`` (default 1024), all checked before anything
    compiles (:mod:`bnn_ppl.inference.hmc_checks`). Run it with
    ``MCMC(kernel, ..., jit_model_args=True).run(key, *pot.args, init_params=...)``.

    Differences from NumPyro's kernel:

    * With a ``trajectory_length`` the step size is kept in
      ``[trajectory_length / max_num_steps, trajectory_length]`` (:meth:`bound_step_size`,
      applied to the state after ``init`` and after every ``sample``): every iteration takes
      between 1 and ``max_num_steps`` leapfrog steps. NumPyro alone lets dual averaging push the
      step size to float32's maximum when every proposal is accepted, after which
      ``ceil(trajectory_length / step_size)`` is 0: no step, acceptance 1.0, a chain that never
      moves. Or to a tiny value, after which one iteration never ends. A fixed step size outside
      that range is refused.
    * ``HMC(pot, num_steps=k)`` without ``trajectory_length`` means "k steps of ``step_size``".
      (NumPyro's default ``trajectory_length=2π`` would silently override ``step_size`` with
      2π/k.)
    """

    def __init__(self, potential: FullBatchPotential, **kwargs: Any):
        _check_potential(potential)
        if kwargs.get("num_steps") is not None and "trajectory_length" not in kwargs:
            kwargs["trajectory_length"] = None
        kwargs = check_hmc_kwargs(kwargs)
        self.max_num_steps: int = kwargs.pop("max_num_steps")
        self.potential = potential
        super().__init__(potential_fn=potential.potential_fn, **kwargs)

    def bound_step_size(self, state: HMCState) -> HMCState:
        """``state`` with its step size clipped to ``[L / (max_num_steps - 1/2), L]``, where
        ``L = state.trajectory_length``: then ``ceil(L / step)`` (NumPyro's number of leapfrog
        steps) lies in ``[1, max_num_steps]``. A state without a trajectory length (fixed
        ``num_steps``) is returned as is. Uses only the documented fields of ``HMCState`` and
        ``HMCAdaptState`` (``step_size``: the step size of the next iteration)."""
        length = state.trajectory_length
        if length is None:
            return state
        low = length / (self.max_num_steps - 0.5)
        step = jnp.minimum(jnp.maximum(state.adapt_state.step_size, low), length)
        return state._replace(adapt_state=state.adapt_state._replace(step_size=step))

    def init(
        self,
        rng_key: Any,
        num_warmup: int,
        init_params: Any = None,
        model_args: tuple = (),
        model_kwargs: dict | None = None,
    ) -> HMCState:
        state = super().init(rng_key, num_warmup, init_params, model_args, model_kwargs or {})
        return self.bound_step_size(state)

    def sample(self, state: HMCState, model_args: tuple, model_kwargs: dict) -> HMCState:
        return self.bound_step_size(super().sample(state, model_args, model_kwargs))


class NUTS(_OnPotential, numpyro.infer.NUTS):
    """NumPyro's ``NUTS`` on a :class:`~bnn_ppl.inference.FullBatchPotential` (see :class:`HMC`);
    ``max_tree_depth`` at most 15, every keyword checked before anything compiles."""

    def __init__(self, potential: FullBatchPotential, **kwargs: Any):
        _check_potential(potential)
        kwargs = check_nuts_kwargs(kwargs)
        self.potential = potential
        super().__init__(potential_fn=potential.potential_fn, **kwargs)


def default_trajectory_length(model: BNN, x: Any) -> float:
    """Izmailov et al.'s fixed trajectory length: ``(π/2) · σ_prior · √T``.

    A quarter period of the harmonic oscillator whose width is the prior's: σ_prior is the
    largest marginal prior standard deviation over the weights (for a fan-in scaled
    prior, of the layer with the widest prior). The √T factor applies when the
    whole posterior is tempered (``temper="posterior"``), which shrinks the prior's scale too;
    with ``temper="likelihood"`` the prior's width is untouched.
    """
    sites = model.sites(x)
    sigma = max(p.stddev(tuple(sites[k].event_shape)) for k, p in model.priors(x).items())
    t = model.temperature if model.temper == "posterior" else 1.0
    return 0.5 * math.pi * sigma * math.sqrt(t)


def _run(
    kernel_cls: type[HMC] | type[NUTS],
    kernel_kwargs: dict[str, Any],
    model: BNN,
    x: Any,
    y: Any,
    rng_key: Any,
    devices: Sequence[jax.Device] | None,
    chunk_size: int | None,
    dtype: Any,
    **run_args: Any,
) -> MCMC:
    """Check the run's arguments, build the potential and the kernel, run, check the chains."""
    run = check_run_args(**run_args)
    key = as_key(rng_key)  # jax.random.key(0) for None compiles: after every check
    pot = full_batch_potential(model, x, y, devices=devices, chunk_size=chunk_size, dtype=dtype)
    mcmc = CheckedMCMC(
        kernel_cls(pot, **kernel_kwargs),
        num_warmup=run["num_warmup"],
        num_samples=run["num_samples"],
        num_chains=run["num_chains"],
        chain_method=run["chain_method"],
        thinning=run["thinning"],
        progress_bar=run["progress_bar"],
        jit_model_args=True,
    )
    init_key, run_key = jax.random.split(key)
    chains = run["num_chains"]
    init = pot.init_params(init_key, chains if chains > 1 else None, method=run["init_method"])
    mcmc.run(run_key, *pot.args, init_params=init, extra_fields=run["extra_fields"])
    adapted_hmc = kernel_cls is HMC and kernel_kwargs["adapt_step_size"]
    check_finished(mcmc, kernel_kwargs["max_num_steps"] if adapted_hmc else None)
    return mcmc


def _check_model(model: Any) -> BNN:
    if not isinstance(model, BNN):
        raise InputTypeError(f"model must be a bnn_ppl.BNN, got {type(model).__name__}.")
    return model


def hmc(
    model: BNN,
    x: Any,
    y: Any,
    *,
    rng_key: PRNGKey | None = None,
    num_warmup: int = 200,
    num_samples: int = 200,
    num_chains: int = 1,
    chain_method: str = "vectorized",
    thinning: int = 1,
    trajectory_length: float | None = None,
    step_size: float = 1e-2,
    adapt_step_size: bool = True,
    adapt_mass_matrix: bool = True,
    target_accept_prob: float = 0.8,
    max_num_steps: int = 1024,
    init_method: str = "prior",
    devices: Sequence[jax.Device] | None = None,
    chunk_size: int | None = None,
    dtype: Any = None,
    progress_bar: bool = False,
    extra_fields: tuple[str, ...] = ("accept_prob", "diverging", "num_steps"),
) -> MCMC:
    """Full-batch HMC with a fixed trajectory length; returns the finished ``MCMC``.

    The step size is adapted in warmup by dual averaging (towards ``target_accept_prob``) and the
    number of leapfrog steps follows as ``ceil(trajectory_length / step_size)``, kept between 1
    and ``max_num_steps`` (see :class:`HMC`); the trajectory length defaults to
    :func:`default_trajectory_length`.

    Every argument is checked before anything compiles (a bad one is an
    :class:`~bnn_ppl.validation.InputError` naming it). After the run every chain is checked
    (:func:`bnn_ppl.diagnostics.check_chains`): one that did not move is a
    :class:`~bnn_ppl.diagnostics.StuckChainWarning`, a step size held at its floor a
    :class:`LeapfrogLimitWarning`.

    Args:
        model, x, y: the BNN and its data (validated before anything compiles).
        rng_key: random key (default ``jax.random.key(0)``); the same key gives the same samples.
        num_warmup, num_samples, num_chains, chain_method, thinning: as in ``numpyro.infer.MCMC``
            (``chain_method`` is ``"vectorized"`` or ``"sequential"``; ``thinning`` at most
            ``num_samples``).
        trajectory_length, step_size, adapt_step_size, adapt_mass_matrix, target_accept_prob:
            as in ``numpyro.infer.HMC`` (``step_size`` is the initial value when adapted;
            ``target_accept_prob`` in (0, 1)).
        max_num_steps: the most leapfrog steps one iteration may take (1 to 2**20).
        init_method: ``"prior"`` or ``"network"`` (see :meth:`bnn_ppl.BNN.init`).
        devices, chunk_size, dtype: as in :func:`~bnn_ppl.inference.full_batch_potential`.
        progress_bar: show NumPyro's progress bar (slower: one dispatch per iteration).
        extra_fields: HMC state fields to collect, for ``mcmc.get_extra_fields()``.

    Returns:
        The ``numpyro.infer.MCMC`` (a :class:`CheckedMCMC`) after ``run``: ``get_samples()``,
        ``print_summary()`` (which also says whether each chain moved) and
        ``arviz.from_numpyro`` work as usual. Its kernel is ``mcmc.sampler`` and the potential
        ``mcmc.sampler.potential``.
    """
    _check_model(model)
    if trajectory_length is None:
        trajectory_length = default_trajectory_length(model, validation.as_array("x", x))
    kernel_kwargs = check_hmc_kwargs(
        dict(
            trajectory_length=trajectory_length,
            step_size=step_size,
            adapt_step_size=adapt_step_size,
            adapt_mass_matrix=adapt_mass_matrix,
            target_accept_prob=target_accept_prob,
            max_num_steps=max_num_steps,
        )
    )
    return _run(
        HMC, kernel_kwargs, model, x, y, rng_key, devices, chunk_size, dtype,
        num_warmup=num_warmup, num_samples=num_samples, num_chains=num_chains,
        chain_method=chain_method, thinning=thinning, init_method=init_method,
        progress_bar=progress_bar, extra_fields=extra_fields,
    )  # fmt: skip


def nuts(
    model: BNN,
    x: Any,
    y: Any,
    *,
    rng_key: PRNGKey | None = None,
    num_warmup: int = 200,
    num_samples: int = 200,
    num_chains: int = 1,
    chain_method: str = "vectorized",
    thinning: int = 1,
    max_tree_depth: int = 10,
    step_size: float = 1e-2,
    adapt_mass_matrix: bool = True,
    target_accept_prob: float = 0.8,
    init_method: str = "prior",
    devices: Sequence[jax.Device] | None = None,
    chunk_size: int | None = None,
    dtype: Any = None,
    progress_bar: bool = False,
    extra_fields: tuple[str, ...] = ("accept_prob", "diverging", "num_steps"),
) -> MCMC:
    """Full-batch NUTS; arguments as in :func:`hmc` plus ``max_tree_depth`` (1 to 15).

    Each NUTS iteration costs up to ``2**max_tree_depth`` gradients: lower it for big networks.
    As with :func:`hmc`, every argument is checked before anything compiles and every finished
    chain is checked for not moving.
    """
    _check_model(model)
    kernel_kwargs = check_nuts_kwargs(
        dict(
            max_tree_depth=max_tree_depth,
            step_size=step_size,
            adapt_mass_matrix=adapt_mass_matrix,
            target_accept_prob=target_accept_prob,
        )
    )
    return _run(
        NUTS, kernel_kwargs, model, x, y, rng_key, devices, chunk_size, dtype,
        num_warmup=num_warmup, num_samples=num_samples, num_chains=num_chains,
        chain_method=chain_method, thinning=thinning, init_method=init_method,
        progress_bar=progress_bar, extra_fields=extra_fields,
    )  # fmt: skip

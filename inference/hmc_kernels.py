"""NumPyro's HMC and NUTS kernels on a :class:`~bnn_ppl.inference.FullBatchPotential`.

:class:`HMC` and :class:`NUTS` are NumPyro's kernels (subclasses, so every NumPyro feature
works) that take the data as a *jit argument* of the sampling loop, passed through
``mcmc.run(key, *pot.args, ...)`` with ``MCMC(..., jit_model_args=True)``: large data stay out of
the program's constants. Every keyword is checked before anything compiles
(:mod:`bnn_ppl.inference.hmc_checks`), and :class:`HMC` keeps every iteration between 1 and
``max_num_steps`` leapfrog steps and can follow an adapted metric with its trajectory length.
:func:`bnn_ppl.inference.hmc` and :func:`~bnn_ppl.inference.nuts` build and run them.

Example:
    >>> import jax
    >>> import bnn_ppl as bp
    >>> from numpyro.infer import MCMC
    >>> from bnn_ppl.models import MLP
    >>> from bnn_ppl.inference import HMC, full_batch_potential
    >>> data = bp.data.load("diabetes")
    >>> model = bp.BNN(MLP(hidden=(8,), out=1), bp.priors.Normal(1.0),
    ...                bp.likelihoods.Gaussian(scale=0.7))
    >>> pot = full_batch_potential(model, data.x_train, data.y_train)
    >>> mcmc = MCMC(HMC(pot, trajectory_length=1.0), num_warmup=20, num_samples=10,
    ...             progress_bar=False, jit_model_args=True)
    >>> mcmc.run(jax.random.key(0), *pot.args, init_params=pot.init_params(jax.random.key(1)))
    >>> mcmc.get_samples()["Dense_0.kernel"].shape
    (10, 10, 8)
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpyro.infer
from numpyro.infer.hmc import HMCState
from numpyro.infer.hmc import hmc as _numpyro_hmc

from bnn_ppl.inference.hmc_checks import check_hmc_kwargs, check_nuts_kwargs
from bnn_ppl.inference.potential import FullBatchPotential
from bnn_ppl.validation import InputTypeError

__all__ = ["HMC", "NUTS", "check_potential"]


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


def check_potential(potential: Any) -> FullBatchPotential:
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
    * ``metric_trajectory_length`` (default ``None``: unused): the trajectory length once the
      metric is no longer the identity (after the first mass-matrix adaptation window, or from
      the start with an ``inverse_mass_matrix``); ``trajectory_length`` then applies only while
      the metric is the identity (:meth:`follow_metric`). A trajectory length is a time *in the
      metric*: Izmailov et al.'s (π/2)·σ_prior is a quarter period of the prior with an identity
      mass matrix, while with the posterior's variances as inverse mass matrix a quarter period
      of every (Gaussian) direction is π/2, whatever its width.
    * ``HMC(pot, num_steps=k)`` without ``trajectory_length`` means "k steps of ``step_size``".
      (NumPyro's default ``trajectory_length=2π`` would silently override ``step_size`` with
      2π/k.)
    """

    def __init__(self, potential: FullBatchPotential, **kwargs: Any):
        check_potential(potential)
        if kwargs.get("num_steps") is not None and "trajectory_length" not in kwargs:
            kwargs["trajectory_length"] = None
        kwargs = check_hmc_kwargs(kwargs)
        self.max_num_steps: int = kwargs.pop("max_num_steps")
        self.metric_trajectory_length: float | None = kwargs.pop("metric_trajectory_length", None)
        self.identity_trajectory_length: float | None = kwargs.get("trajectory_length")
        self.dense_mass: bool = kwargs.get("dense_mass", False)
        self.potential = potential
        super().__init__(potential_fn=potential.potential_fn, **kwargs)

    def follow_metric(self, state: HMCState) -> HMCState:
        """``state`` with the trajectory length of its metric: ``metric_trajectory_length`` once
        ``state.adapt_state.inverse_mass_matrix`` is not the identity, else
        ``trajectory_length`` (NumPyro starts from the identity and replaces it at the end of
        each slow adaptation window). Unchanged without a ``metric_trajectory_length``."""
        if self.metric_trajectory_length is None or state.trajectory_length is None:
            return state
        m = state.adapt_state.inverse_mass_matrix
        if self.dense_mass:
            identity = jnp.all(m == jnp.eye(m.shape[-1], dtype=m.dtype), axis=(-2, -1))
        else:
            identity = jnp.all(m == 1, axis=-1)
        length = jnp.where(identity, self.identity_trajectory_length, self.metric_trajectory_length)
        length = length.astype(jnp.result_type(state.trajectory_length))
        return state._replace(trajectory_length=length)

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
        return self.bound_step_size(self.follow_metric(state))

    def sample(self, state: HMCState, model_args: tuple, model_kwargs: dict) -> HMCState:
        state = super().sample(state, model_args, model_kwargs)
        return self.bound_step_size(self.follow_metric(state))


class NUTS(_OnPotential, numpyro.infer.NUTS):
    """NumPyro's ``NUTS`` on a :class:`~bnn_ppl.inference.FullBatchPotential` (see :class:`HMC`);
    ``max_tree_depth`` at most 15, every keyword checked before anything compiles."""

    def __init__(self, potential: FullBatchPotential, **kwargs: Any):
        check_potential(potential)
        kwargs = check_nuts_kwargs(kwargs)
        self.potential = potential
        super().__init__(potential_fn=potential.potential_fn, **kwargs)

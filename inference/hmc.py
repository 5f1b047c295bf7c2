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
import numpyro.infer
from numpyro.infer import MCMC
from numpyro.infer.hmc import hmc as _numpyro_hmc

from bnn_ppl import validation
from bnn_ppl.inference.potential import FullBatchPotential, full_batch_potential
from bnn_ppl.model import BNN
from bnn_ppl.types import PRNGKey
from bnn_ppl.validation import InputTypeError, InputValueError

__all__ = ["HMC", "NUTS", "hmc", "nuts", "default_trajectory_length", "CHAIN_METHODS"]

CHAIN_METHODS = ("vectorized", "sequential")


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


class HMC(_OnPotential, numpyro.infer.HMC):
    """NumPyro's ``HMC`` on a :class:`~bnn_ppl.inference.FullBatchPotential`.

    Takes every keyword of ``numpyro.infer.HMC`` except ``model``/``potential_fn``. Run it with
    ``MCMC(kernel, ..., jit_model_args=True).run(key, *pot.args, init_params=...)``.

    One difference: ``HMC(pot, num_steps=k)`` without ``trajectory_length`` means "k steps of
    ``step_size``" here. (NumPyro's default ``trajectory_length=2π`` would silently override
    ``step_size`` with 2π/k.)
    """

    def __init__(self, potential: FullBatchPotential, **kwargs: Any):
        if not isinstance(potential, FullBatchPotential):
            raise InputTypeError(f"potential must be a FullBatchPotential, got {type(potential)}.")
        if kwargs.get("num_steps") is not None and "trajectory_length" not in kwargs:
            kwargs["trajectory_length"] = None
        self.potential = potential
        super().__init__(potential_fn=potential.potential_fn, **kwargs)


class NUTS(_OnPotential, numpyro.infer.NUTS):
    """NumPyro's ``NUTS`` on a :class:`~bnn_ppl.inference.FullBatchPotential` (see :class:`HMC`)."""

    def __init__(self, potential: FullBatchPotential, **kwargs: Any):
        if not isinstance(potential, FullBatchPotential):
            raise InputTypeError(f"potential must be a FullBatchPotential, got {type(potential)}.")
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
    kernel_cls: type,
    model: BNN,
    x: Any,
    y: Any,
    *,
    rng_key: PRNGKey | None,
    num_warmup: int,
    num_samples: int,
    num_chains: int,
    chain_method: str,
    thinning: int,
    init_method: str,
    devices: Sequence[jax.Device] | None,
    chunk_size: int | None,
    dtype: Any,
    progress_bar: bool,
    extra_fields: tuple[str, ...],
    kernel_kwargs: dict[str, Any],
) -> MCMC:
    validation.check_choice("chain_method", chain_method, CHAIN_METHODS)
    for name, v in (
        ("num_samples", num_samples),
        ("num_chains", num_chains),
        ("thinning", thinning),
    ):
        validation.check_positive(name, v)
    if num_warmup < 0:
        raise InputValueError(f"num_warmup must be >= 0, got {num_warmup}.")
    pot = full_batch_potential(model, x, y, devices=devices, chunk_size=chunk_size, dtype=dtype)
    key = jax.random.key(0) if rng_key is None else rng_key
    init_key, run_key = jax.random.split(key)
    mcmc = MCMC(
        kernel_cls(pot, **kernel_kwargs),
        num_warmup=num_warmup,
        num_samples=num_samples,
        num_chains=num_chains,
        chain_method=chain_method,
        thinning=thinning,
        progress_bar=progress_bar,
        jit_model_args=True,
    )
    init = pot.init_params(init_key, num_chains if num_chains > 1 else None, method=init_method)
    mcmc.run(run_key, *pot.args, init_params=init, extra_fields=extra_fields)
    return mcmc


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
    init_method: str = "prior",
    devices: Sequence[jax.Device] | None = None,
    chunk_size: int | None = None,
    dtype: Any = None,
    progress_bar: bool = False,
    extra_fields: tuple[str, ...] = ("accept_prob", "diverging", "num_steps"),
) -> MCMC:
    """Full-batch HMC with a fixed trajectory length; returns the finished ``MCMC``.

    The step size is adapted in warmup by dual averaging (towards ``target_accept_prob``) and the
    number of leapfrog steps follows as ``ceil(trajectory_length / step_size)``; the trajectory
    length defaults to :func:`default_trajectory_length`.

    Args:
        model, x, y: the BNN and its data (validated before anything compiles).
        rng_key: random key (default ``jax.random.key(0)``); the same key gives the same samples.
        num_warmup, num_samples, num_chains, chain_method, thinning: as in ``numpyro.infer.MCMC``
            (``chain_method`` is ``"vectorized"`` or ``"sequential"``).
        trajectory_length, step_size, adapt_step_size, adapt_mass_matrix, target_accept_prob:
            as in ``numpyro.infer.HMC`` (``step_size`` is the initial value when adapted).
        init_method: ``"prior"`` or ``"network"`` (see :meth:`bnn_ppl.BNN.init`).
        devices, chunk_size, dtype: as in :func:`~bnn_ppl.inference.full_batch_potential`.
        progress_bar: show NumPyro's progress bar (slower: one dispatch per iteration).
        extra_fields: HMC state fields to collect, for ``mcmc.get_extra_fields()``.

    Returns:
        The ``numpyro.infer.MCMC`` after ``run``: ``get_samples()``, ``print_summary()`` and
        ``arviz.from_numpyro`` work as usual. Its kernel is ``mcmc.sampler`` and the potential
        ``mcmc.sampler.potential``.
    """
    tl = (
        default_trajectory_length(model, validation.as_array("x", x))
        if trajectory_length is None
        else validation.check_positive("trajectory_length", trajectory_length)
    )
    return _run(
        HMC,
        model,
        x,
        y,
        rng_key=rng_key,
        num_warmup=num_warmup,
        num_samples=num_samples,
        num_chains=num_chains,
        chain_method=chain_method,
        thinning=thinning,
        init_method=init_method,
        devices=devices,
        chunk_size=chunk_size,
        dtype=dtype,
        progress_bar=progress_bar,
        extra_fields=extra_fields,
        kernel_kwargs=dict(
            trajectory_length=tl,
            step_size=step_size,
            adapt_step_size=adapt_step_size,
            adapt_mass_matrix=adapt_mass_matrix,
            target_accept_prob=target_accept_prob,
        ),
    )


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
    """Full-batch NUTS; arguments as in :func:`hmc` plus ``max_tree_depth``.

    Each NUTS iteration costs up to ``2**max_tree_depth`` gradients: lower it for big networks.
    """
    return _run(
        NUTS,
        model,
        x,
        y,
        rng_key=rng_key,
        num_warmup=num_warmup,
        num_samples=num_samples,
        num_chains=num_chains,
        chain_method=chain_method,
        thinning=thinning,
        init_method=init_method,
        devices=devices,
        chunk_size=chunk_size,
        dtype=dtype,
        progress_bar=progress_bar,
        extra_fields=extra_fields,
        kernel_kwargs=dict(
            max_tree_depth=max_tree_depth,
            step_size=step_size,
            adapt_mass_matrix=adapt_mass_matrix,
            target_accept_prob=target_accept_prob,
        ),
    )

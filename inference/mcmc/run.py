"""HMC and NUTS on the full-batch potential, as real NumPyro kernels and ``MCMC`` objects."""

# Notes:
#
# Two ways in:
#
# 1. Build NumPyro's own kernel on ``pot.potential_fn`` (the data are then constants of the
#    compiled program - fine for small data)::
#
#        mcmc = MCMC(numpyro.infer.HMC(potential_fn=pot.potential_fn, trajectory_length=1.0),
#                    num_warmup=200, num_samples=200, postprocess_fn=pot.postprocess_fn)
#        mcmc.run(key, init_params=pot.init_params(key2))
#
# 2. Use :class:`HMC` / :class:`NUTS` (:mod:`bnn_ppl.inference.mcmc.kernels`): NumPyro's kernels
#    (subclasses, so every NumPyro feature works) that take the data as a *jit argument* of the
#    sampling loop, passed through ``mcmc.run(key, *pot.args, ...)`` with
#    ``MCMC(..., jit_model_args=True)``. This keeps large data out of the program's constants.
#    :func:`hmc_kernel` builds the HMC kernel with the library's defaults (for your own
#    ``MCMC``); :func:`run_mcmc` (what ``fit`` runs for an HMC or NUTS config) does all of it and
#    returns the finished ``MCMC``, after checking every argument before anything compiles and
#    every chain after the run (:mod:`bnn_ppl.inference.mcmc.checks`). The older :func:`hmc` and
#    :func:`nuts` do the same from keyword arguments and are deprecated.
#
# Several chains: ``chain_method="vectorized"`` (vmap over chains; each potential call is still
# sharded over the data mesh) or ``"sequential"``. ``chain_method="parallel"`` pmaps chains over
# devices, which clashes with a potential that already shards the data over those devices: it is
# refused here.

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from numpyro.infer import MCMC

from bnn_ppl import validation
from bnn_ppl.config import HMCConfig, MCMCConfig, NUTSConfig
from bnn_ppl.inference.mcmc.checks import (
    CHAIN_METHODS,
    CheckedMCMC,
    LeapfrogLimitWarning,
    TreeDepthWarning,
    as_key,
    check_finished,
    check_hmc_kwargs,
    check_nuts_kwargs,
    check_run_args,
)
from bnn_ppl.inference.mcmc.kernels import HMC, NUTS, check_potential
from bnn_ppl.inference.potential.bnn import FullBatchPotential, full_batch_potential
from bnn_ppl.model import BNN
from bnn_ppl.types import PRNGKey
from bnn_ppl.validation import InputTypeError

__all__ = [
    "HMC",
    "NUTS",
    "hmc",
    "nuts",
    "default_trajectory_length",
    "hmc_kernel",
    "QUARTER_PERIOD",
    "CheckedMCMC",
    "LeapfrogLimitWarning",
    "TreeDepthWarning",
    "CHAIN_METHODS",
    "DEFAULT_EXTRA_FIELDS",
    "hmc_kwargs",
    "mcmc_kernel",
    "run_mcmc",
]


DEFAULT_EXTRA_FIELDS = (
    "accept_prob",
    "diverging",
    "num_steps",
    "energy",
    "potential_energy",
    "adapt_state.step_size",
)
"""Fields :func:`hmc` and :func:`nuts` collect per draw: ArviZ's ``acceptance_rate``,
``diverging``, ``n_steps`` (and NUTS's ``tree_depth``), ``energy``, ``lp`` and ``step_size``."""


def default_trajectory_length(model: BNN, x: Any) -> float:
    """Izmailov et al.'s fixed trajectory length: ``(π/2) · σ_prior · √T``.

    A quarter period of the harmonic oscillator whose width is the prior's, with an identity
    mass matrix: σ_prior is the largest marginal prior standard deviation over the weights (for
    a fan-in scaled prior, of the layer with the widest prior). The √T factor applies when the
    whole posterior is tempered (``temper="posterior"``), which shrinks the prior's scale too;
    with ``temper="likelihood"`` the prior's width is untouched. (:func:`hmc` uses it while the
    metric is the identity, and :data:`QUARTER_PERIOD` in the adapted metric.)
    """
    sites = model.sites(x)
    sigma = max(p.stddev(tuple(sites[k].event_shape)) for k, p in model.priors(x).items())
    t = model.temperature if model.temper == "posterior" else 1.0
    return 0.5 * math.pi * sigma * math.sqrt(t)


QUARTER_PERIOD = 0.5 * math.pi
"""The default trajectory length once the mass matrix is adapted: with the posterior's
(estimated) variances as inverse mass matrix, every Gaussian direction has period 2π."""


def hmc_kwargs(
    model: BNN,
    x: Any,
    trajectory_length: float | None,
    step_size: float,
    adapt_step_size: bool,
    adapt_mass_matrix: bool,
    target_accept_prob: float,
    max_num_steps: int,
    dense_mass: bool = False,
) -> dict[str, Any]:
    """:func:`hmc`'s kernel keywords, checked; ``trajectory_length=None`` is the default pair
    (Izmailov et al.'s length in the identity metric, :data:`QUARTER_PERIOD` once adapted)."""
    kwargs: dict[str, Any] = dict(
        trajectory_length=trajectory_length,
        step_size=step_size,
        adapt_step_size=adapt_step_size,
        adapt_mass_matrix=adapt_mass_matrix,
        target_accept_prob=target_accept_prob,
        max_num_steps=max_num_steps,
        dense_mass=dense_mass,
    )
    kwargs = check_hmc_kwargs(kwargs)  # a None length skips the fixed-step checks
    if trajectory_length is None:  # the rest is checked: now the default lengths
        kwargs["trajectory_length"] = default_trajectory_length(model, x)
        if kwargs["adapt_mass_matrix"]:
            kwargs["metric_trajectory_length"] = QUARTER_PERIOD
        kwargs = check_hmc_kwargs(kwargs)
    return kwargs


def hmc_kernel(
    potential: FullBatchPotential,
    *,
    trajectory_length: float | None = None,
    step_size: float = 1e-2,
    adapt_step_size: bool = True,
    adapt_mass_matrix: bool = True,
    target_accept_prob: float = 0.8,
    max_num_steps: int = 1024,
) -> HMC:
    """The :class:`HMC` kernel :func:`hmc` runs, with the same defaults, for
    your own ``MCMC`` (or :func:`~bnn_ppl.inference.run_segments`): one place for the defaults.

    Example:
        >>> import jax
        >>> import bnn_ppl as bp
        >>> from bnn_ppl.models import MLP
        >>> from bnn_ppl.inference import full_batch_potential
        >>> from bnn_ppl.inference.mcmc.run import hmc_kernel
        >>> data = bp.data.load("diabetes")
        >>> model = bp.BNN(MLP(hidden=(8,), out=1), bp.priors.Normal(0.3),
        ...                bp.likelihoods.Gaussian(scale=0.7))
        >>> kernel = hmc_kernel(full_batch_potential(model, data.x_train, data.y_train))
        >>> round(kernel.identity_trajectory_length, 3), round(kernel.metric_trajectory_length, 3)
        (0.471, 1.571)
    """
    check_potential(potential)
    x = np.zeros((1, *potential.data.x.shape[1:]), potential.data.x.dtype)  # shapes only
    kwargs = hmc_kwargs(
        potential.model,
        x,
        trajectory_length,
        step_size,
        adapt_step_size,
        adapt_mass_matrix,
        target_accept_prob,
        max_num_steps,
    )
    return HMC(potential, **kwargs)


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
    chain_batching: str,
    **run_args: Any,
) -> MCMC:
    """Check the run's arguments, build the potential and the kernel, run, check the chains."""
    run = check_run_args(**run_args)
    key = as_key(rng_key)  # jax.random.key(0) for None compiles: after every check
    vectorized = run["num_chains"] if run["chain_method"] == "vectorized" else 1
    pot = full_batch_potential(
        model, x, y, devices=devices, chunk_size=chunk_size, dtype=dtype,
        vectorized_chains=vectorized, chain_batching=chain_batching,
    )  # fmt: skip
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
    mcmc.progress_bar = run["progress_bar"]  # (NumPyro turns it off whenever CI is set)
    init_key, run_key = jax.random.split(key)
    chains = run["num_chains"]
    init = pot.init_params(init_key, chains if chains > 1 else None, method=run["init_method"])
    mcmc.run(run_key, *pot.args, init_params=init, extra_fields=run["extra_fields"])
    adapted_hmc = kernel_cls is HMC and kernel_kwargs["adapt_step_size"]
    depth = kernel_kwargs.get("max_tree_depth") if kernel_cls is NUTS else None
    check_finished(mcmc, kernel_kwargs["max_num_steps"] if adapted_hmc else None, depth)
    return mcmc


def _deprecated(name: str, config: str) -> None:
    warnings.warn(
        f"bnn_ppl.inference.{name}() is deprecated; use bnn_ppl.fit(model, (x, y), "
        f"{config}(...), rng_key) (devices= and dtype= are fit's keywords), or NumPyro's MCMC "
        f"with bnn_ppl.inference.{name.upper()} on a full_batch_potential.",
        DeprecationWarning,
        stacklevel=3,
    )


def mcmc_kernel(model: BNN, x: Any, c: MCMCConfig) -> tuple[type[HMC] | type[NUTS], dict[str, Any]]:
    """The kernel class and its checked keywords for an :class:`~bnn_ppl.config.HMCConfig` or
    :class:`~bnn_ppl.config.NUTSConfig` (``x``: the inputs, for HMC's default trajectory)."""
    adapt, dense = c.mass_matrix != "identity", c.mass_matrix == "dense"
    if isinstance(c, HMCConfig):
        kwargs = hmc_kwargs(
            model, validation.as_array("x", x) if c.trajectory_length is None else None,
            c.trajectory_length, c.step_size, c.adapt_step_size, adapt, c.target_accept_prob,
            c.max_num_steps, dense,
        )  # fmt: skip
        return HMC, kwargs
    if not isinstance(c, NUTSConfig):
        raise InputTypeError(f"config must be an HMCConfig or NUTSConfig, got {type(c).__name__}.")
    common = dict(step_size=c.step_size, adapt_mass_matrix=adapt,
                  target_accept_prob=c.target_accept_prob)  # fmt: skip
    return NUTS, check_nuts_kwargs(
        dict(max_tree_depth=c.max_tree_depth, **common) | ({"dense_mass": True} if dense else {})
    )


def run_mcmc(
    model: BNN, x: Any, y: Any, c: MCMCConfig, rng_key: PRNGKey, *,
    devices: Sequence[jax.Device] | None = None, dtype: Any = None, progress_bar: bool = False,
) -> MCMC:  # fmt: skip
    """The finished ``MCMC`` of :func:`~bnn_ppl.inference.fit` for an HMC or NUTS config:
    vectorized chains, :data:`DEFAULT_EXTRA_FIELDS`, every chain checked for not moving."""
    _check_model(model)
    kernel_cls, kernel_kwargs = mcmc_kernel(model, x, c)
    return _run(
        kernel_cls, kernel_kwargs, model, x, y, rng_key, devices, c.chunk_size, dtype,
        c.chain_batching, num_warmup=c.num_warmup, num_samples=c.num_samples,
        num_chains=c.num_chains, chain_method="vectorized", thinning=c.thinning,
        init_method=c.init_method, progress_bar=progress_bar, extra_fields=DEFAULT_EXTRA_FIELDS,
    )  # fmt: skip


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
    dense_mass: bool = False,
    target_accept_prob: float = 0.8,
    max_num_steps: int = 1024,
    init_method: str = "prior",
    devices: Sequence[jax.Device] | None = None,
    chunk_size: int | None = None,
    dtype: Any = None,
    chain_batching: str = "auto",
    progress_bar: bool | None = None,
    extra_fields: tuple[str, ...] = DEFAULT_EXTRA_FIELDS,
) -> MCMC:
    """Full-batch HMC with a fixed trajectory length; returns the finished ``MCMC``.

    The step size is adapted in warmup by dual averaging (towards ``target_accept_prob``) and the
    number of leapfrog steps follows as ``ceil(trajectory_length / step_size)``, kept between 1
    and ``max_num_steps`` (see :class:`HMC`: a step size that would need more keeps its value
    and the trajectory is shortened to ``max_num_steps`` steps).

    Defaults, and why. A trajectory length is a time in the metric (the inverse mass matrix).
    By default a diagonal mass matrix is adapted and the trajectory is a quarter period *in the
    current metric*: Izmailov et al.'s (π/2)·σ_prior·√T (:func:`default_trajectory_length`)
    while the metric is the identity, as in their paper, then π/2 (:data:`QUARTER_PERIOD`)
    once it holds the posterior's variances. Izmailov et al. adapt no mass matrix; keeping their
    length with an adapted one (the old default) made it a fraction σ_prior of a quarter period:
    3 leapfrog steps per iteration on digits with a N(0, 0.3²) prior (function-space ESS 11 of
    1200 draws, R-hat 1.31), and on a posterior close to its prior a step size that ran away to
    3.4e38 (0 steps: a frozen chain). Without adaptation (``adapt_mass_matrix=False``: Izmailov
    et al. exactly) the fixed length resonated on a Gaussian posterior (ESS 18-37 of 1200) and
    cost 2.7x the gradients per effective draw on diabetes; the default was the best or within
    10 % of it on every problem measured (``benchmarks/hmc_defaults.py``; table in the README). An
    explicit ``trajectory_length`` is used throughout, in whatever metric is current (NumPyro's
    meaning).

    Every argument is checked before anything compiles (a bad one is an
    :class:`~bnn_ppl.validation.InputError` naming it). After the run every chain is checked
    (:func:`bnn_ppl.diagnostics.check_chains`): one that did not move is a
    :class:`~bnn_ppl.diagnostics.StuckChainWarning`, a trajectory shortened to ``max_num_steps``
    steps of the adapted step size a :class:`LeapfrogLimitWarning`.

    Args:
        model, x, y: the BNN and its data (validated before anything compiles).
        rng_key: random key (default ``jax.random.key(0)``); the same key gives the same samples.
        num_warmup, num_samples, num_chains, chain_method, thinning: as in ``numpyro.infer.MCMC``
            (``chain_method`` is ``"vectorized"`` or ``"sequential"``; ``thinning`` at most
            ``num_samples``).
        trajectory_length, step_size, adapt_step_size, adapt_mass_matrix, target_accept_prob:
            as in ``numpyro.infer.HMC`` (``step_size`` is the initial value when adapted;
            ``target_accept_prob`` in (0, 1)).
        dense_mass: adapt a dense mass matrix (the posterior's covariance) instead of a
            diagonal one; the trajectory is then a quarter period in that metric too. Worth it
            for strongly correlated posteriors of up to a few thousand parameters (one Cholesky
            per adaptation window, a matrix-vector product per leapfrog step).
        max_num_steps: the most leapfrog steps one iteration may take (1 to 2**20).
        init_method: ``"prior"`` or ``"network"`` (see :meth:`bnn_ppl.BNN.init`).
        devices, chunk_size, dtype, chain_batching: as in
            :func:`~bnn_ppl.inference.full_batch_potential` (``chain_batching``: what
            vectorized chains do; ``"auto"`` runs a ConvNet's chains one after another).
        progress_bar: show NumPyro's progress bar on stderr (warmup and sampling, with the step
            size, acceptance rate and divergences; one dispatch per iteration, the same
            draws). Default: when stderr is a terminal and ``CI`` is not set.
        extra_fields: HMC state fields to collect, for ``mcmc.get_extra_fields()``; the default
            (:data:`DEFAULT_EXTRA_FIELDS`) is what :func:`~bnn_ppl.inference.from_mcmc`
            turns into ArviZ's sample statistics (``energy`` gives BFMI and
            ``az.plot_energy``).

    Returns:
        The ``numpyro.infer.MCMC`` (a :class:`CheckedMCMC`) after ``run``: ``get_samples()``,
        ``print_summary()`` (which also says whether each chain moved) and
        ``arviz.from_numpyro`` work as usual. Its kernel is ``mcmc.sampler`` and the potential
        ``mcmc.sampler.potential``.

    Example:
        >>> import jax
        >>> import bnn_ppl as bp
        >>> from bnn_ppl.models import MLP
        >>> from bnn_ppl.inference import hmc
        >>> data = bp.data.load("diabetes")
        >>> model = bp.BNN(MLP(hidden=(8,), out=1), bp.priors.Normal(1.0),
        ...                bp.likelihoods.Gaussian(scale=0.7))
        >>> mcmc = hmc(model, data.x_train, data.y_train, num_warmup=100, num_samples=10,
        ...            rng_key=jax.random.key(0))
        >>> mcmc.get_samples()["Dense_0.kernel"].shape
        (10, 10, 8)
        >>> [row["moving"] for row in bp.diagnostics.sampler_summary(mcmc)]
        [True]
    """
    _deprecated("hmc", "HMCConfig")
    _check_model(model)
    kernel_kwargs = hmc_kwargs(
        model,
        validation.as_array("x", x) if trajectory_length is None else None,
        trajectory_length,
        step_size,
        adapt_step_size,
        adapt_mass_matrix,
        target_accept_prob,
        max_num_steps,
        dense_mass,
    )
    return _run(
        HMC, kernel_kwargs, model, x, y, rng_key, devices, chunk_size, dtype, chain_batching,
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
    chain_batching: str = "auto",
    progress_bar: bool | None = None,
    extra_fields: tuple[str, ...] = DEFAULT_EXTRA_FIELDS,
) -> MCMC:
    """Full-batch NUTS; arguments as in :func:`hmc` plus ``max_tree_depth`` (1 to 15).

    Each NUTS iteration costs up to ``2**max_tree_depth`` gradients: lower it for big networks.
    As with :func:`hmc`, every argument is checked before anything compiles and every finished
    chain is checked for not moving; a chain whose trees reached ``max_tree_depth`` on most
    draws gets a :class:`~bnn_ppl.inference.mcmc.checks.TreeDepthWarning`.
    """
    _deprecated("nuts", "NUTSConfig")
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
        NUTS, kernel_kwargs, model, x, y, rng_key, devices, chunk_size, dtype, chain_batching,
        num_warmup=num_warmup, num_samples=num_samples, num_chains=num_chains,
        chain_method=chain_method, thinning=thinning, init_method=init_method,
        progress_bar=progress_bar, extra_fields=extra_fields,
    )  # fmt: skip

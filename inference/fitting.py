"""One driver from a model and data to a :class:`~bnn_ppl.Posterior`: :func:`fit`.

(The module is ``fitting`` so that the function ``fit`` never shadows a module name.)

Every method is configured by its dataclass from :mod:`bnn_ppl.config` and ends in the same
record, so scripts, the examples and the command line compare methods through one path::

    HMCConfig / NUTSConfig      -> hmc() / nuts()                 chains of draws
    ReferenceHMCConfig          -> reference_hmc()                hmc() until converged
    SGLD/SGHMC/SGNHT/ATMCConfig -> the SG-MCMC kernels in MCMC    one draw per cycle end
    SVIConfig                   -> [map_estimate ->] svi_mean_field -> guide draws (one chain)
    MAPConfig / EnsembleConfig  -> map_estimate / deep_ensemble   members as chains

The recipes live here once: MAP-initialised SVI (``SVIConfig.map_steps``), the SG-MCMC
cyclical cosine schedule with one draw per cycle end and, when ``step_size`` is not given, the
recommended step size measured at a MAP estimate; an SG-MCMC fit warns about, and keeps in
``config["accuracy"]``, what :func:`~bnn_ppl.inference.accuracy_summary` finds. Given test
inputs, the Posterior also holds the predictions at them and per-row log-likelihoods of the
training (and test) targets, so :meth:`~bnn_ppl.Posterior.to_inference_data` supports
``az.loo``.

Example:
    >>> import jax, numpy as np
    >>> import bnn_ppl as bp
    >>> from bnn_ppl.config import MAPConfig
    >>> from bnn_ppl.inference import fit
    >>> from bnn_ppl.models import MLP
    >>> x = np.linspace(-1, 1, 20, dtype=np.float32)[:, None]
    >>> model = bp.BNN(MLP(hidden=(), out=1), bp.priors.Normal(1.0), bp.likelihoods.Gaussian(0.1))
    >>> post = fit(model, (x, 2 * x[:, 0]), MAPConfig(num_steps=300, learning_rate=0.1),
    ...            jax.random.key(0))
    >>> post.method, post.num_chains, post.num_draws, post.log_likelihood["y"].shape
    ('map', 1, 1, (1, 1, 20))
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import numpy as np
from numpyro.infer import MCMC

from bnn_ppl import validation
from bnn_ppl.compile_cache import use_persistent_cache
from bnn_ppl.config import (
    Config,
    EnsembleConfig,
    HMCConfig,
    MAPConfig,
    NUTSConfig,
    ReferenceHMCConfig,
    SVIConfig,
    _MCMCConfig,
    _SGMCMCConfig,
)
from bnn_ppl.data import Dataset
from bnn_ppl.divergence import DivergedError
from bnn_ppl.inference.progress_bar import check_progress_bar
from bnn_ppl.model import BNN
from bnn_ppl.posterior import Posterior
from bnn_ppl.types import PRNGKey
from bnn_ppl.validation import InputTypeError, InputValueError

__all__ = ["FitData", "fit"]


class FitData(NamedTuple):
    """What :func:`fit` fits to (``x``, ``y``) and, optionally, evaluates at (``y_std``: the
    targets' scale, for test metrics in original units)."""

    x: Any
    y: Any
    x_test: Any = None
    y_test: Any = None
    y_std: float = 1.0


def _fit_data(data: Any) -> FitData:
    if isinstance(data, Dataset):
        return FitData(data.x_train, data.y_train, data.x_test, data.y_test, float(data.y_std))
    if isinstance(data, tuple) and len(data) in (2, 3, 4):
        return FitData(*data)
    raise InputTypeError(
        "data must be a bp.data.Dataset or a tuple (x, y) / (x, y, x_test) / "
        f"(x, y, x_test, y_test), got {type(data).__name__}"
        + (f" of length {len(data)}" if isinstance(data, tuple) else "")
        + "."
    )


def _numpy(tree: Any) -> dict[str, np.ndarray]:
    return {k: np.asarray(v) for k, v in tree.items()}


def _mcmc(model: BNN, d: FitData, c: _MCMCConfig, key: PRNGKey, bar: bool) -> Posterior:
    from bnn_ppl.inference.mcmc.run import hmc, nuts
    from bnn_ppl.inference.results import from_mcmc

    common = {
        "rng_key": key,
        "num_warmup": c.num_warmup,
        "num_samples": c.num_samples,
        "num_chains": c.num_chains,
        "thinning": c.thinning,
        "step_size": c.step_size,
        "adapt_mass_matrix": c.adapt_mass_matrix,
        "target_accept_prob": c.target_accept_prob,
        "init_method": c.init_method,
        "chunk_size": c.chunk_size,
        "chain_batching": c.chain_batching,
        "progress_bar": bar,
    }
    if isinstance(c, HMCConfig):
        mcmc = hmc(
            model,
            d.x,
            d.y,
            trajectory_length=c.trajectory_length,
            adapt_step_size=c.adapt_step_size,
            max_num_steps=c.max_num_steps,
            **common,
        )
    else:
        assert isinstance(c, NUTSConfig)
        mcmc = nuts(model, d.x, d.y, max_tree_depth=c.max_tree_depth, **common)
    return from_mcmc(mcmc, method=c.method, config=c.to_dict())


def _map_kwargs(
    c: MAPConfig | SVIConfig, num_steps: int, key: PRNGKey, bar: bool
) -> dict[str, Any]:
    """The optimiser settings of ``c`` as keywords of :func:`map_estimate`."""
    return {
        "num_steps": num_steps,
        "learning_rate": c.learning_rate,
        "batch_size": c.batch_size,
        "init_method": c.init_method,
        "rng_key": key,
        "chunk_size": c.chunk_size,
        "progress_bar": bar,
    }


def _map(model: BNN, d: FitData, c: MAPConfig, key: PRNGKey, bar: bool) -> Posterior:
    from bnn_ppl.inference.ensemble import deep_ensemble, map_estimate
    from bnn_ppl.inference.results import from_map

    kwargs = _map_kwargs(c, c.num_steps, key, bar)
    if isinstance(c, EnsembleConfig):
        result = deep_ensemble(
            model, d.x, d.y, c.num_members, chain_batching=c.chain_batching, **kwargs
        )
    else:
        result = map_estimate(model, d.x, d.y, **kwargs)
    return from_map(result, method=c.method, config=c.to_dict())


def _svi(model: BNN, d: FitData, c: SVIConfig, key: PRNGKey, bar: bool) -> Posterior:
    from bnn_ppl.inference.ensemble import map_estimate
    from bnn_ppl.inference.results import from_svi
    from bnn_ppl.inference.svi import svi_mean_field

    map_key, svi_key, draw_key = jax.random.split(key, 3)
    init_loc, extra = None, {}
    if c.map_steps > 0:
        found = map_estimate(model, d.x, d.y, **_map_kwargs(c, c.map_steps, map_key, bar))
        init_loc, extra = found.params, {"map_final_loss": float(found.final_loss)}
    result = svi_mean_field(
        model,
        d.x,
        d.y,
        num_steps=c.num_steps,
        learning_rate=c.learning_rate,
        init_scale=c.init_scale,
        init_loc=init_loc,
        batch_size=c.batch_size,
        num_particles=c.num_particles,
        rng_key=svi_key,
        progress_bar=bar,
    )
    post = from_svi(result, draw_key, c.num_samples, config=c.to_dict() | extra)
    sites = model.sites(d.x)  # the guide may hold auxiliary sites: keep the model's
    return post.replace(samples={k: v for k, v in post.samples.items() if k in sites})


def _sgmcmc_setup(
    model: BNN, d: FitData, c: _SGMCMCConfig, key: PRNGKey, bar: bool = False
) -> tuple:
    """``(kernel factory, potential, init params, run key, extra config)`` of an SG-MCMC fit
    (``bar`` shows the MAP's progress).

    The recipe: every chain starts at its own MAP estimate (``map_steps`` Adam steps from its
    own prior draw: a prior draw is orders of magnitude above the typical set's potential, and
    the energy it releases would outlast the burn-in); the step size is the given one or
    :func:`~bnn_ppl.inference.recommended_step_size` at the larger of the scales measured at
    the first chain's MAP and after one pilot cycle from there, and the momentum kernels'
    least friction is :func:`~bnn_ppl.inference.recommended_friction` at that step; the
    schedule is the cyclical cosine from it."""
    from bnn_ppl import inference
    from bnn_ppl.inference.sgmcmc.schedules import cyclical_cosine

    kernel_cls = {"sgld": inference.SGLD, "sghmc": inference.SGHMC, "sgnht": inference.SGNHT,
                  "atmc": inference.ATMC}[c.method]  # fmt: skip
    pot = inference.full_batch_potential(  # chains are vectorized
        model, d.x, d.y, chunk_size=c.chunk_size, vectorized_chains=c.num_chains,
        chain_batching=c.chain_batching,
    )  # fmt: skip
    batch = validation.check_batch_size("batch_size", c.batch_size, pot.num_data)
    map_key, scale_key, pilot_key, run_key = jax.random.split(key, 4)
    n, chains = c.cycle_length, c.num_chains
    map_kwargs = {"num_steps": c.map_steps, "batch_size": batch, "init_method": c.init_method,
                  "rng_key": map_key, "chunk_size": c.chunk_size,
                  "progress_bar": bar}  # fmt: skip
    if chains > 1:
        found = inference.deep_ensemble(model, d.x, d.y, chains,
                                        chain_batching=c.chain_batching, **map_kwargs)  # fmt: skip
    else:
        found = inference.map_estimate(model, d.x, d.y, **map_kwargs)
    init = pot.unconstrain(found.params)
    name = c.method.upper()
    step, extra = c.step_size, {}

    def first(tree: Any) -> Any:
        return jax.tree.map(lambda a: a[0], tree) if chains > 1 else tree

    def rule(scales: Any) -> float:
        h = inference.recommended_step_size(name, scales)
        if name == "SGNHT":  # its diffusion is tied to the step: its Euler bias with it
            a = inference.recommended_friction(name, h)["diffusion"]
            h = inference.recommended_step_size(name, scales, diffusion=a)
        return h

    if step is None:
        k1, k2 = jax.random.split(scale_key)
        at_map = inference.gradient_scales(pot, first(init), batch, rng_key=k1)
        # the gradient noise at a mode can be far below the chain's (a classifier's MAP
        # fits its batches almost exactly): one pilot cycle from the MAP at the MAP's step,
        # then the scales where it ends; the smaller step of the two, and the chains go on
        # from where the pilot ended
        init = _pilot_cycle(kernel_cls, pot, batch, rule(at_map), n, chains, init, pilot_key)
        along = inference.gradient_scales(pot, first(init), batch, rng_key=k2)
        scales = inference.GradientScales(max(at_map.curvature, along.curvature),
                                          max(at_map.noise, along.noise), batch)  # fmt: skip
        step = rule(scales)
        check_noise_feasible(name, scales, step, c)
        extra = {"step_size_used": step, "scales": scales._asdict(),
                 "scales_at_map": at_map._asdict()}  # fmt: skip
    friction = inference.recommended_friction(name, step)
    extra = {k: (float(v) if isinstance(v, np.floating | float) else v) for k, v in extra.items()}
    for field in ("scales", "scales_at_map"):
        extra[field] = {k: (None if v is None else float(v))
                        for k, v in extra.get(field, {}).items()} or None  # fmt: skip
    extra["friction_used"] = friction or None

    def kernel() -> Any:
        return kernel_cls(pot, batch_size=batch, step_size=cyclical_cosine(step, n), **friction)

    return kernel, pot, init, run_key, extra


# how many times smaller than the curvature allows the gradient noise may force the step
NOISE_STEP_LIMIT = {"SGLD": 100.0, "SGHMC": 10.0, "SGNHT": 10.0, "ATMC": 10.0}


def check_noise_feasible(sampler: str, scales: Any, step: float, c: _SGMCMCConfig) -> None:
    """Warn (:class:`~bnn_ppl.inference.SGMCMCAccuracyWarning`), before sampling, when the
    minibatch noise forces the step more than :data:`NOISE_STEP_LIMIT` times below what the
    curvature allows: to keep the noise's share of the heat in bounds the run then spans that
    many times less time and cannot reach its stationary law in the configured cycles. Names
    the batch size at which the noise no longer binds (the noise variance falls as ``1/b``)."""
    import warnings

    from bnn_ppl.inference.sgmcmc.accuracy import SGMCMCAccuracyWarning
    from bnn_ppl.inference.sgmcmc.step_size import GradientScales, recommended_step_size

    if sampler == "SGLD":  # no momentum: the variance builds as 1 - exp(-2λt) from the MAP
        spans = 2 * scales.curvature * c.num_warmup * c.cycle_length * step / 2
        if spans < 4:
            cycles = int(math.ceil(c.num_warmup * 4 / max(spans, 1e-12)))
            warnings.warn(
                f"SGLD at step size {step:.3g}: {c.num_warmup} burn-in cycles of "
                f"{c.cycle_length} steps span {spans / 2:.2g} relaxation times of the stiffest "
                "direction (at least 2 are needed for its variance to build up from the MAP), "
                f"so the draws are not yet stationary. Use num_warmup={cycles} or more, or a "
                "larger batch_size (SGLD's step shrinks with the gradient noise).",
                SGMCMCAccuracyWarning,
                stacklevel=4,
            )
    if not scales.noise or scales.batch_size is None:
        return
    free = recommended_step_size(sampler, GradientScales(scales.curvature, 0.0, None))
    limit = NOISE_STEP_LIMIT[sampler]
    if free <= limit * step:
        return
    # SGLD: h ∝ 1/(λ + σ²); the momentum kernels: h ∝ 1/σ (σ² ∝ 1/b)
    power = 1.0 if sampler == "SGLD" else 2.0
    need = int(math.ceil(scales.batch_size * (free / (limit * step)) ** power))
    warnings.warn(
        f"{sampler} at batch_size={scales.batch_size}: the minibatch gradient noise "
        f"(σ²_max = {scales.noise:.3g}, curvature λ_max = {scales.curvature:.3g}) forces the "
        f"step size to {step:.3g}, {free / step:.0f} times below the {free:.3g} the curvature "
        f"allows, so {c.num_warmup} burn-in cycles of {c.cycle_length} steps span too little "
        f"time to reach the posterior. Use batch_size={need} or more (or None: the full "
        "batch), or many more cycles.",
        SGMCMCAccuracyWarning,
        stacklevel=4,
    )


def _pilot_cycle(kernel_cls: Any, pot: Any, batch: int | None, step: float, n: int,
                 chains: int, init: Any, key: PRNGKey) -> Any:
    """Every chain's position after one cycle of ``n`` burn-in steps from ``init`` at the
    cycle-start step ``step`` (its accuracy is not judged: the scales are measured where it
    ends, and the run's own step follows from them)."""
    import warnings

    from bnn_ppl.inference.sgmcmc.accuracy import SGMCMCAccuracyWarning
    from bnn_ppl.inference.sgmcmc.schedules import cyclical_cosine

    friction = _friction(kernel_cls.__name__, step)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SGMCMCAccuracyWarning)  # (construction warnings)
        kernel = kernel_cls(pot, batch_size=batch, step_size=cyclical_cosine(step, n),
                            **friction)  # fmt: skip
    mcmc = MCMC(kernel, num_warmup=n, num_samples=1, num_chains=chains,
                chain_method="vectorized", progress_bar=False, jit_model_args=True)  # fmt: skip
    mcmc.run(key, *pot.args, init_params=init)
    return mcmc.last_state.z


def _friction(name: str, step: float) -> dict[str, float]:
    from bnn_ppl.inference.sgmcmc.step_size import recommended_friction

    return recommended_friction(name.upper(), step)


def sgmcmc_posterior(c: _SGMCMCConfig, samples: dict, extra: dict) -> Posterior:
    """The Posterior of SG-MCMC cycle-end ``samples`` (refused if not finite)."""
    for name, value in samples.items():
        if not np.all(np.isfinite(value)):
            raise DivergedError(
                c.method, f"the draws of {name!r}", value, np.argwhere(~np.isfinite(value))[0]
            )
    return Posterior(c.method, samples, config=c.to_dict() | extra)


def _sgmcmc(model: BNN, d: FitData, c: _SGMCMCConfig, key: PRNGKey, bar: bool) -> Posterior:
    from bnn_ppl.inference.sgmcmc.accuracy import accuracy_summary
    from bnn_ppl.inference.sgmcmc.cycles import cycle_end_samples

    kernel, pot, init, run_key, extra = _sgmcmc_setup(model, d, c, key, bar)
    n = c.cycle_length
    mcmc = MCMC(
        kernel(),
        num_warmup=c.num_warmup * n,
        num_samples=c.num_samples * n,
        thinning=n,  # the last step of every cycle, and only it
        num_chains=c.num_chains,
        chain_method="vectorized",
        progress_bar=False,
        jit_model_args=True,
        progress_rate=n,  # (with the bar: one update per cycle)
    )
    mcmc.progress_bar = bar  # (NumPyro turns it off whenever CI is set)
    mcmc.run(run_key, *pot.args, init_params=init)
    samples = _numpy(cycle_end_samples(mcmc, n, group_by_chain=True))
    # what the statistics of every sampling step show went wrong: warned and kept
    return sgmcmc_posterior(c, samples, extra | {"accuracy": accuracy_summary(mcmc)})


def _reference(
    model: BNN,
    d: FitData,
    c: ReferenceHMCConfig,
    key: PRNGKey,
    checkpoint_dir: Any,
    on_check: Callable[[Any], Any] | None = None,
    bar: bool = False,
) -> Posterior:
    from bnn_ppl.inference.reference.recipe import reference_hmc

    run = reference_hmc(model, (d.x, d.y), x_test=d.x_test, y_test=d.y_test, config=c,
                        rng_key=key, checkpoint_dir=checkpoint_dir,
                        on_check=on_check, progress_bar=bar)  # fmt: skip
    return run.posterior


def fit(
    model: BNN,
    data: Any,
    config: Config,
    rng_key: PRNGKey,
    *,
    checkpoint_dir: str | os.PathLike | None = None,
    checkpoint_every: int | None = None,
    progress_every: int | None = None,
    on_check: Callable[[Any], Any] | None = None,
    progress_bar: bool | None = None,
) -> Posterior:
    """Fit ``model`` to ``data`` with the method ``config`` names; see the module docstring.

    Args:
        model: a :class:`~bnn_ppl.BNN`.
        data: a :class:`~bnn_ppl.data.Dataset` (fit to its training split, evaluated on its
            test split) or a tuple ``(x, y)``, ``(x, y, x_test)`` or ``(x, y, x_test, y_test)``.
        config: one of the dataclasses of :mod:`bnn_ppl.config`; it fixes the method.
        rng_key: ``jax.random.key(seed)``; the same key gives the same Posterior.
        checkpoint_dir: MCMC and SG-MCMC only: commit the run to this folder after warmup and
            every ``checkpoint_every`` draws per chain, and resume from it if it holds this
            run (bit-exact: the same draws as an uninterrupted run); a folder of a run with
            other settings, data, seed or network is refused naming what differs
            (:mod:`bnn_ppl.inference.checkpoint.fit`). Warmup's cost, then after each
            segment the running metrics (with test targets: the BMA's test metrics over the
            draws so far) get lines in ``progress.jsonl`` there
            (:mod:`bnn_ppl.inference.checkpoint.progress_log`). A ``ReferenceHMCConfig`` run commits
            every segment of ``segment_draws`` draws instead (no ``checkpoint_every``,
            ``progress_every`` or ``progress.jsonl``; :func:`~bnn_ppl.inference.reference_hmc`).
        checkpoint_every: draws per chain (SG-MCMC: cycles) per segment; default a tenth of
            the draws.
        progress_every: with ``checkpoint_dir``: a ``progress.jsonl`` line every that many
            draws per chain (SG-MCMC: cycles), computed from each segment's draws after it
            (the segment's end is always a line); default one line per segment.
        on_check: ``ReferenceHMCConfig`` only: called with each
            :class:`~bnn_ppl.inference.ConvergenceCheck` as it is made (e.g. ``lambda check:
            print(check.describe())``; :func:`~bnn_ppl.inference.reference_hmc`).
        progress_bar: live bars on stderr: NumPyro's for MCMC warmup and sampling (step
            size, acceptance, divergences) and for SVI (loss); bars with the loss for MAP and
            ensembles (and the MAP that sets an SG-MCMC step size), with the kinetic
            temperature for SG-MCMC steps, with the share of converged test values for a
            reference run's draws. ``None`` (default): on when stderr is a terminal and the
            environment variable ``CI`` is not set. The bar changes no result.

    Compiled programs are kept in JAX's persistent compilation cache
    (:func:`bnn_ppl.compile_cache.use_persistent_cache`: ``~/.cache/bnn_ppl/jax``, moved or
    turned off by ``BNN_PPL_CACHE_DIR``), so a rerun or a resume does not compile them again.

    Returns:
        A :class:`~bnn_ppl.Posterior` whose ``config`` is ``config.to_dict()`` (plus what the
        method chose, e.g. the SG-MCMC step size), with the observed data, per-row
        log-likelihoods and, given ``x_test``, predictions.

    Raises:
        TypeError: ``config`` is not a config dataclass, ``data`` of the wrong kind.
        ValueError: bad data (see the methods), or a run whose draws are not finite.
    """
    if not isinstance(model, BNN):
        raise InputTypeError(f"model must be a bp.BNN, got {type(model).__name__}.")
    if not isinstance(config, Config) or not config.method:
        raise InputTypeError(
            "config must be one of bnn_ppl.config's dataclasses (HMCConfig, NUTSConfig, "
            f"SVIConfig, MAPConfig, EnsembleConfig, SGLDConfig, ...), got {type(config).__name__}."
        )
    key = validation.check_key("rng_key", rng_key)
    bar = check_progress_bar(progress_bar)
    if on_check is not None and not isinstance(config, ReferenceHMCConfig):
        raise InputValueError(
            f"on_check applies to ReferenceHMCConfig runs (their convergence checks), not to "
            f"{type(config).__name__}; leave it out."
        )
    if checkpoint_dir is not None or checkpoint_every is not None or progress_every is not None:
        from bnn_ppl.inference.checkpoint.fit import check_checkpoint_args

        checkpoint_every = check_checkpoint_args(
            config, checkpoint_dir, checkpoint_every, progress_every
        )
    d = _fit_data(data)
    if d.y_test is not None and d.x_test is None:
        raise InputValueError("data has y_test but no x_test; give both or neither.")
    # every array is checked before anything runs: a bad test set must not cost a finished run
    model.check_data(d.x, d.y)
    if d.x_test is not None:
        x_test = model.check_inputs(d.x_test, "x_test")
        if d.y_test is not None:
            y_test = validation.as_array("y_test", d.y_test)
            validation.check_same_length("x_test", x_test, "y_test", y_test)
            model.likelihood.check_targets(y_test, model.output_shape(x_test))
    use_persistent_cache()  # a rerun or a resume reads its compiled programs back
    if checkpoint_dir is not None and not isinstance(config, ReferenceHMCConfig):
        from bnn_ppl.inference.checkpoint.fit import fit_checkpointed

        # (with its data: the test predictions progress.jsonl computed are reused)
        return fit_checkpointed(
            model, d, config, key, checkpoint_dir, checkpoint_every, progress_every, bar
        )
    if isinstance(config, ReferenceHMCConfig):
        if d.x_test is None:
            raise InputValueError(
                "ReferenceHMCConfig checks convergence at test inputs: give data as a Dataset "
                "or (x, y, x_test[, y_test])."
            )
        post = _reference(model, d, config, key, checkpoint_dir, on_check, bar)
    elif isinstance(config, _MCMCConfig):
        post = _mcmc(model, d, config, key, bar)
    elif isinstance(config, SVIConfig):
        post = _svi(model, d, config, key, bar)
    elif isinstance(config, MAPConfig):
        post = _map(model, d, config, key, bar)
    elif isinstance(config, _SGMCMCConfig):
        post = _sgmcmc(model, d, config, key, bar)
    else:  # a Config subclass defined elsewhere
        raise InputTypeError(f"fit has no method for {type(config).__name__}.")
    return post.with_data(model, d.x, d.y, d.x_test, d.y_test, chunk_size=config.chunk_size)

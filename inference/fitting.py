"""One driver from a model, data and a config to a :class:`~bnn_ppl.Posterior`: :func:`fit`.

:data:`RUNNERS` maps each :mod:`bnn_ppl.config` type to its runner: HMC/NUTS
(:func:`~bnn_ppl.inference.mcmc.run.run_mcmc`), the SG-MCMC recipe
(:func:`~bnn_ppl.inference.sgmcmc.recipe.run_sgmcmc`), MAP-initialised SVI, MAP, deep ensembles
and reference runs. Every method ends in the same record, with the data groups attached
(:func:`~bnn_ppl.predictive.attach_data`). The module is ``fitting`` so that the function
``fit`` never shadows a module name.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax

from bnn_ppl import validation
from bnn_ppl.compile_cache import use_persistent_cache
from bnn_ppl.config import (
    ATMCConfig,
    Config,
    EnsembleConfig,
    HMCConfig,
    MAPConfig,
    MCMCConfig,
    NUTSConfig,
    ReferenceHMCConfig,
    SGHMCConfig,
    SGLDConfig,
    SGMCMCConfig,
    SGNHTConfig,
    SVIConfig,
)
from bnn_ppl.data import Dataset
from bnn_ppl.inference.checkpoint.fit import check_checkpoint_args, fit_checkpointed
from bnn_ppl.inference.ensemble import deep_ensemble, map_estimate
from bnn_ppl.inference.mcmc.run import run_mcmc
from bnn_ppl.inference.progress_bar import check_progress_bar
from bnn_ppl.inference.reference.recipe import reference_hmc
from bnn_ppl.inference.results import from_map, from_mcmc, from_svi
from bnn_ppl.inference.sgmcmc.recipe import run_sgmcmc
from bnn_ppl.inference.svi import svi_mean_field
from bnn_ppl.model import BNN
from bnn_ppl.posterior import Posterior
from bnn_ppl.predictive import attach_data
from bnn_ppl.types import PRNGKey
from bnn_ppl.validation import InputTypeError, InputValueError

__all__ = ["FitData", "RUNNERS", "fit"]


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


class _Run(NamedTuple):
    """What a runner gets besides the model: the checked data, config and key, and where the
    potential lives (``devices``, ``dtype``; HMC, NUTS and SG-MCMC only)."""

    d: FitData
    config: Config
    key: PRNGKey
    devices: Sequence[jax.Device] | None
    dtype: Any
    on_check: Callable[[Any], Any] | None
    checkpoint_dir: Any
    bar: bool


def _mcmc(model: BNN, r: _Run) -> Posterior:
    c = r.config
    mcmc = run_mcmc(model, r.d.x, r.d.y, c, r.key, devices=r.devices, dtype=r.dtype,
                    progress_bar=r.bar)  # fmt: skip
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


def _map(model: BNN, r: _Run) -> Posterior:
    c, d = r.config, r.d
    result = map_estimate(model, d.x, d.y, **_map_kwargs(c, c.num_steps, r.key, r.bar))
    return from_map(result, method=c.method, config=c.to_dict())


def _ensemble(model: BNN, r: _Run) -> Posterior:
    c, d = r.config, r.d
    result = deep_ensemble(
        model, d.x, d.y, c.num_members, chain_batching=c.chain_batching,
        **_map_kwargs(c, c.num_steps, r.key, r.bar),
    )  # fmt: skip
    return from_map(result, method=c.method, config=c.to_dict())


def _svi(model: BNN, r: _Run) -> Posterior:
    c, d = r.config, r.d
    map_key, svi_key, draw_key = jax.random.split(r.key, 3)
    init_loc, extra = None, {}
    if c.map_steps > 0:
        found = map_estimate(model, d.x, d.y, **_map_kwargs(c, c.map_steps, map_key, r.bar))
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
        progress_bar=r.bar,
    )
    post = from_svi(result, draw_key, c.num_samples, config=c.to_dict() | extra)
    sites = model.sites(d.x)  # the guide may hold auxiliary sites: keep the model's
    return post.replace(samples={k: v for k, v in post.samples.items() if k in sites})


def _sgmcmc(model: BNN, r: _Run) -> Posterior:
    return run_sgmcmc(model, r.d.x, r.d.y, r.config, r.key, devices=r.devices, dtype=r.dtype,
                      progress_bar=r.bar)  # fmt: skip


def _reference(model: BNN, r: _Run) -> Posterior:
    d = r.d
    if d.x_test is None:
        raise InputValueError(
            "ReferenceHMCConfig checks convergence at test inputs: give data as a Dataset "
            "or (x, y, x_test[, y_test])."
        )
    run = reference_hmc(model, (d.x, d.y), x_test=d.x_test, y_test=d.y_test, config=r.config,
                        rng_key=r.key, checkpoint_dir=r.checkpoint_dir,
                        on_check=r.on_check, progress_bar=r.bar)  # fmt: skip
    return run.posterior


RUNNERS: dict[type[Config], Callable[[BNN, _Run], Posterior]] = {
    HMCConfig: _mcmc,
    NUTSConfig: _mcmc,
    MAPConfig: _map,
    EnsembleConfig: _ensemble,
    SVIConfig: _svi,
    SGLDConfig: _sgmcmc,
    SGHMCConfig: _sgmcmc,
    SGNHTConfig: _sgmcmc,
    ATMCConfig: _sgmcmc,
    ReferenceHMCConfig: _reference,
}
"""The runner of each config type (a subclass of a config uses its nearest listed base)."""
PLACED = (MCMCConfig, SGMCMCConfig)
"""The configs whose potential ``fit``'s ``devices`` and ``dtype`` place."""


def _runner(config: Config) -> Callable[[BNN, _Run], Posterior]:
    for cls in type(config).__mro__:
        if cls in RUNNERS:
            return RUNNERS[cls]
    raise InputTypeError(f"fit has no method for {type(config).__name__}.")


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
    devices: Sequence[jax.Device] | None = None,
    dtype: Any = None,
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
            (:mod:`bnn_ppl.inference.checkpoint.fit`). A ``ReferenceHMCConfig`` run commits
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
        devices, dtype: HMC, NUTS and SG-MCMC only: the devices the data are sharded over
            (default: those of ``jax.devices()`` that get a whole chunk of rows each,
            :func:`~bnn_ppl.inference.potential.bnn.default_devices`) and the dtype the
            log-likelihood is summed in, as in
            :func:`~bnn_ppl.inference.full_batch_potential`.
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
        ValueError: bad data (see the methods), a run whose draws are not finite, or a
            process of several (``jax.distributed``: ``fit`` runs in one process).

    Example:
        >>> import jax, numpy as np
        >>> import bnn_ppl as bp
        >>> from bnn_ppl.config import MAPConfig
        >>> from bnn_ppl.inference import fit
        >>> from bnn_ppl.models import MLP
        >>> x = np.linspace(-1, 1, 20, dtype=np.float32)[:, None]
        >>> model = bp.BNN(MLP(hidden=(), out=1), bp.priors.Normal(1.0),
        ...     bp.likelihoods.Gaussian(0.1))
        >>> post = fit(model, (x, 2 * x[:, 0]), MAPConfig(num_steps=300, learning_rate=0.1),
        ...            jax.random.key(0))
        >>> post.method, post.num_chains, post.num_draws, post.log_likelihood["y"].shape
        ('map', 1, 1, (1, 1, 20))
    """
    if not isinstance(model, BNN):
        raise InputTypeError(f"model must be a bp.BNN, got {type(model).__name__}.")
    if not isinstance(config, Config) or not config.method:
        raise InputTypeError(
            "config must be one of bnn_ppl.config's dataclasses (HMCConfig, NUTSConfig, "
            f"SVIConfig, MAPConfig, EnsembleConfig, SGLDConfig, ...), got {type(config).__name__}."
        )
    key = validation.check_key("rng_key", rng_key)
    if jax.process_count() > 1:
        raise InputValueError(
            f"bp.fit runs in one process, and this is one of {jax.process_count()} "
            "(jax.distributed; fit is not built for it: its Posterior would hold this "
            "process's rows only). On "
            "several hosts build the potential from each process's rows (full_batch_potential "
            "or model_potential) and run NumPyro's MCMC on bnn_ppl.inference.HMC or NUTS (the "
            "documentation's 'Run on several hosts')."
        )
    bar = check_progress_bar(progress_bar)
    if on_check is not None and not isinstance(config, ReferenceHMCConfig):
        raise InputValueError(
            f"on_check applies to ReferenceHMCConfig runs (their convergence checks), not to "
            f"{type(config).__name__}; leave it out."
        )
    run = _runner(config)
    if (devices is not None or dtype is not None) and not isinstance(config, PLACED):
        what = "devices" if devices is not None else "dtype"
        raise InputValueError(
            f"{what} applies to HMC, NUTS and the SG-MCMC methods, not {config.method!r}; "
            f"leave {what} out."
        )
    if checkpoint_dir is not None or checkpoint_every is not None or progress_every is not None:
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
        # (with its data: the test predictions progress.jsonl computed are reused)
        return fit_checkpointed(
            model, d, config, key, checkpoint_dir, checkpoint_every, progress_every, bar,
            devices=devices, dtype=dtype,
        )  # fmt: skip
    post = run(model, _Run(d, config, key, devices, dtype, on_check, checkpoint_dir, bar))
    return attach_data(post, model, d.x, d.y, d.x_test, d.y_test, chunk_size=config.chunk_size)

""":func:`~bnn_ppl.inference.fit` with ``checkpoint_dir``: MCMC and SG-MCMC runs that survive
a kill.

The method's config becomes an :class:`~bnn_ppl.inference.resume.MCMCPlan` with the same
kernel, keys and initial parameters the uninterrupted :func:`~bnn_ppl.inference.fit` uses, and
:func:`~bnn_ppl.inference.resume.run_segments` runs it in a
:class:`~bnn_ppl.inference.checkpoint_store.CheckpointStore` keyed by the run's fingerprint
(:mod:`bnn_ppl.inference.fingerprint`): a rerun with the same arguments resumes after the
newest intact segment, a rerun of a finished run reads its draws back, and a rerun with another
config, data, seed or network is refused naming the differing field. The folder also holds
``progress.jsonl``: warmup's cost, then the running metrics after each segment, or every
``progress_every`` draws (:mod:`~bnn_ppl.inference.progress_log`).

Example:
    >>> import jax, numpy as np, tempfile
    >>> import bnn_ppl as bp
    >>> from bnn_ppl.config import HMCConfig
    >>> from bnn_ppl.inference import fit
    >>> from bnn_ppl.models import MLP
    >>> x = np.linspace(-1, 1, 20, dtype=np.float32)[:, None]
    >>> model = bp.BNN(MLP(hidden=(), out=1), bp.priors.Normal(1.0), bp.likelihoods.Gaussian(0.1))
    >>> folder, config = tempfile.mkdtemp(), HMCConfig(num_warmup=50, num_samples=10)
    >>> post = fit(model, (x, 2 * x[:, 0]), config, jax.random.key(0),
    ...            checkpoint_dir=folder, checkpoint_every=5)
    >>> again = fit(model, (x, 2 * x[:, 0]), config, jax.random.key(0), checkpoint_dir=folder)
    >>> bool(np.array_equal(post.samples["Dense_0.kernel"], again.samples["Dense_0.kernel"]))
    True
"""

from __future__ import annotations

import math
import os
import warnings
from typing import Any

import jax

from bnn_ppl import validation
from bnn_ppl.config import (
    Config,
    HMCConfig,
    NUTSConfig,
    ReferenceHMCConfig,
    _MCMCConfig,
    _SGMCMCConfig,
)
from bnn_ppl.model import BNN
from bnn_ppl.posterior import Posterior
from bnn_ppl.types import PRNGKey
from bnn_ppl.validation import InputTypeError, InputValueError

__all__ = ["check_checkpoint_args", "check_checkpoint_dir", "fit_checkpointed"]


def check_checkpoint_dir(checkpoint_dir: Any) -> None:
    """A folder path (it may not exist yet), not a file; else an InputError naming it."""
    if not isinstance(checkpoint_dir, str | os.PathLike):
        raise InputTypeError(
            f"checkpoint_dir must be a folder path, got {type(checkpoint_dir).__name__}."
        )
    if os.path.exists(checkpoint_dir) and not os.path.isdir(checkpoint_dir):
        raise InputValueError(f"checkpoint_dir {os.fspath(checkpoint_dir)} is not a folder.")


def check_checkpoint_args(
    config: Config, checkpoint_dir: Any, checkpoint_every: Any, progress_every: Any = None
) -> int | None:
    """Check :func:`~bnn_ppl.inference.fit`'s checkpoint arguments before anything runs;
    return ``checkpoint_every`` (default: a tenth of the draws per chain, at least 1; ``None``
    for a :class:`~bnn_ppl.config.ReferenceHMCConfig`, which commits every segment)."""
    reference = isinstance(config, ReferenceHMCConfig)
    if not isinstance(config, _MCMCConfig | _SGMCMCConfig) and not reference:
        raise InputValueError(
            f"checkpoint_dir applies to MCMC and SG-MCMC methods, not {config.method!r}; "
            "drop checkpoint_dir and checkpoint_every."
        )
    if reference and (checkpoint_every is not None or progress_every is not None):
        what = "checkpoint_every" if checkpoint_every is not None else "progress_every"
        raise InputValueError(
            f"{what} does not apply to a ReferenceHMCConfig run: it commits every segment of "
            "segment_draws draws per chain; set segment_draws instead."
        )
    if checkpoint_dir is None:
        what = "checkpoint_every" if checkpoint_every is not None else "progress_every"
        raise InputValueError(f"{what} needs a checkpoint_dir.")
    if progress_every is not None:
        validation.check_int("progress_every", progress_every)
    check_checkpoint_dir(checkpoint_dir)
    if reference:
        return None
    if checkpoint_every is None:
        draws = config.num_samples
        if isinstance(config, _MCMCConfig):
            draws //= config.thinning
        return max(1, math.ceil(draws / 10))
    return validation.check_int("checkpoint_every", checkpoint_every)


def _mcmc_plan(model: BNN, d: Any, c: _MCMCConfig, key: PRNGKey) -> tuple:
    from bnn_ppl.inference.hmc_checks import check_nuts_kwargs
    from bnn_ppl.inference.hmc_drivers import DEFAULT_EXTRA_FIELDS, HMC, NUTS, _hmc_kwargs
    from bnn_ppl.inference.potential import full_batch_potential
    from bnn_ppl.inference.resume import MCMCPlan

    common = dict(
        step_size=c.step_size,
        adapt_mass_matrix=c.adapt_mass_matrix,
        target_accept_prob=c.target_accept_prob,
    )
    if isinstance(c, HMCConfig):
        kwargs = _hmc_kwargs(
            model, validation.as_array("x", d.x), c.trajectory_length, c.step_size,
            c.adapt_step_size, c.adapt_mass_matrix, c.target_accept_prob, c.max_num_steps,
        )  # fmt: skip
        kernel_cls: Any = HMC
    else:
        assert isinstance(c, NUTSConfig)
        kwargs, kernel_cls = (
            check_nuts_kwargs(dict(max_tree_depth=c.max_tree_depth, **common)),
            NUTS,
        )
    pot = full_batch_potential(  # chains are vectorized (resume.py)
        model, d.x, d.y, chunk_size=c.chunk_size, vectorized_chains=c.num_chains,
        chain_batching=c.chain_batching,
    )  # fmt: skip
    init_key, run_key = jax.random.split(key)  # as hmc() and nuts() split it
    chains = c.num_chains
    init = pot.init_params(init_key, chains if chains > 1 else None, method=c.init_method)
    plan = MCMCPlan(
        lambda: kernel_cls(pot, **kwargs),
        c.num_warmup,
        c.num_samples,
        chains,
        c.thinning,
        DEFAULT_EXTRA_FIELDS,
    )
    return plan, pot, init, run_key, {}


def _sgmcmc_plan(model: BNN, d: Any, c: _SGMCMCConfig, key: PRNGKey) -> tuple:
    from bnn_ppl.inference.fitting import _sgmcmc_setup
    from bnn_ppl.inference.resume import MCMCPlan

    kernel, pot, init, run_key, extra = _sgmcmc_setup(model, d, c, key)
    n = c.cycle_length
    plan = MCMCPlan(kernel, c.num_warmup * n, c.num_samples * n, c.num_chains, n, ("stats",))
    return plan, pot, init, run_key, extra


def fit_checkpointed(
    model: BNN,
    d: Any,
    config: Config,
    key: PRNGKey,
    checkpoint_dir: str | os.PathLike,
    checkpoint_every: int,
    progress_every: int | None = None,
) -> Posterior:
    """The Posterior :func:`~bnn_ppl.inference.fit` returns (data attached), run (or resumed)
    in ``checkpoint_dir``; ``d`` is the checked :class:`~bnn_ppl.inference.FitData`."""
    from bnn_ppl.inference.checkpoint_store import CheckpointStore
    from bnn_ppl.inference.cycles import keep_cycle_ends
    from bnn_ppl.inference.fingerprint import recorded_chunk, resume_chunk, run_fingerprint
    from bnn_ppl.inference.fitting import sgmcmc_posterior
    from bnn_ppl.inference.progress_log import ProgressLog
    from bnn_ppl.inference.resume import run_segments
    from bnn_ppl.inference.sgmcmc_accuracy import SGMCMCAccuracyWarning, stats_accuracy_summary
    from bnn_ppl.inference.to_posterior import from_draws
    from bnn_ppl.metrics.efficiency import sgmcmc_gradients_per_draw

    sg = isinstance(config, _SGMCMCConfig)
    make = _sgmcmc_plan if sg else _mcmc_plan
    chosen, resumed = resume_chunk(config, checkpoint_dir)
    plan, pot, init, run_key, extra = make(model, d, chosen, key)
    one = jax.tree.map(lambda a: a[0], init) if config.num_chains > 1 else init
    memory = recorded_chunk(pot, resumed)
    fingerprint = run_fingerprint(
        config.to_dict(), d.x, d.y, key, pot.potential_fn, one, memory_chunk=memory
    )
    # SG-MCMC: one minibatch gradient per step, in full-batch gradients (progress.jsonl)
    per_step = sgmcmc_gradients_per_draw(1, config.batch_size, pot.num_data) if sg else None
    log = ProgressLog(
        checkpoint_dir,
        model,
        d.x_test,
        d.y_test,
        thinning=1 if sg else config.thinning,
        cycle_length=config.cycle_length if sg else None,
        chunk_size=config.chunk_size,
        y_std=d.y_std,
        progress_every=progress_every,
        gradients_per_step=per_step,
    )
    with CheckpointStore(checkpoint_dir, fingerprint) as store:
        draws = run_segments(plan, run_key, pot.args, init, store, checkpoint_every, log)
        log.write()  # (complete already, unless a kill came between a commit and its line)
    # how the run went (not part of the fingerprint): resumed after which segment, if any
    progress = {"segments": draws.segments, "resumed_after_segment": draws.resumed_from}
    with warnings.catch_warnings():  # (the kernel's construction warned already)
        warnings.simplefilter("ignore", SGMCMCAccuracyWarning)
        kernel = plan.kernel()  # what reads the draws' statistics
    if sg:
        samples = keep_cycle_ends(draws.samples, draws.extra["i"], config.cycle_length)
        # the last draw's (the run's last step's) statistics cover every sampling step
        stats = {k[6:]: v[:, -1] for k, v in draws.extra.items() if k.startswith("stats.")}
        # (None: a run finished by a version that did not keep them)
        accuracy = stats_accuracy_summary(kernel, stats) if stats else None
        post = sgmcmc_posterior(config, samples, extra | progress | {"accuracy": accuracy})
    else:
        from bnn_ppl.chain_health import check_chains

        check_chains(draws.samples, draws.extra)  # warns, as hmc() and nuts() do, if stuck
        meta = {
            "num_warmup": plan.num_warmup,
            "num_samples": plan.num_samples,
            "num_chains": plan.num_chains,
            "thinning": plan.thinning,
        }
        post = from_draws(
            draws.samples,
            draws.extra,
            kernel,
            method=config.method,
            config=meta | config.to_dict() | progress,
        )
    # the test predictions progress.jsonl computed, segment by segment, are not computed again
    return post.with_data(
        model, d.x, d.y, d.x_test, d.y_test, chunk_size=config.chunk_size,
        predictions=log.predictions_so_far(),
    )  # fmt: skip

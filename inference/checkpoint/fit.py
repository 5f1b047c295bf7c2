""":func:`~bnn_ppl.inference.fit` with ``checkpoint_dir``: MCMC and SG-MCMC runs that survive
a kill.
"""

# Notes:
#
# The method's config becomes an :class:`~bnn_ppl.inference.checkpoint.segments.MCMCPlan` with the
# same
# kernel, keys and initial parameters the uninterrupted :func:`~bnn_ppl.inference.fit` uses, and
# :func:`~bnn_ppl.inference.checkpoint.segments.run_segments` runs it in a
# :class:`~bnn_ppl.inference.checkpoint.store.CheckpointStore` keyed by the run's fingerprint
# (:mod:`bnn_ppl.inference.checkpoint.store`): a rerun with the same arguments resumes after the
# newest intact segment, a rerun of a finished run reads its draws back, and a rerun with another
# config, data, seed or network is refused naming the differing field. The folder also holds
# ``progress.jsonl``: warmup's cost, then the running metrics after each segment, or every
# ``progress_every`` draws (:mod:`~bnn_ppl.inference.checkpoint.fit`).

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from bnn_ppl import io, predictive, validation
from bnn_ppl.config import (
    Config,
    MCMCConfig,
    NUTSConfig,
    ReferenceHMCConfig,
    SGMCMCConfig,
)
from bnn_ppl.diagnostics.chain_health import check_chains
from bnn_ppl.inference.checkpoint.segments import MCMCPlan, run_segments
from bnn_ppl.inference.checkpoint.store import (
    CheckpointStore,
    recorded_chunk,
    resume_chunk,
    run_fingerprint,
)
from bnn_ppl.inference.mcmc.checks import warn_if_saturated
from bnn_ppl.inference.mcmc.run import DEFAULT_EXTRA_FIELDS, mcmc_kernel
from bnn_ppl.inference.potential.bnn import full_batch_potential
from bnn_ppl.inference.results import NUMPYRO_STATS, from_draws
from bnn_ppl.inference.sgmcmc.accuracy import SGMCMCAccuracyWarning, stats_accuracy_summary
from bnn_ppl.inference.sgmcmc.recipe import burn_in_extension, sgmcmc_posterior, sgmcmc_setup
from bnn_ppl.inference.sgmcmc.schedules import keep_cycle_ends
from bnn_ppl.metrics.efficiency import sgmcmc_gradients_per_draw
from bnn_ppl.model import BNN
from bnn_ppl.posterior import Posterior
from bnn_ppl.predictive import attach_data
from bnn_ppl.runs.progress import chain_point, chain_points
from bnn_ppl.types import PRNGKey
from bnn_ppl.validation import InputTypeError, InputValueError

__all__ = [
    "check_checkpoint_args",
    "check_checkpoint_dir",
    "fit_checkpointed",
    "ProgressLog",
    "FILE",
]


def check_checkpoint_dir(checkpoint_dir: Any) -> None:
    """A folder path (it may not exist yet), not a file; else an InputError naming it.

    Example:
        >>> import jax, numpy as np, tempfile
        >>> import bnn_ppl as bp
        >>> from bnn_ppl.config import HMCConfig
        >>> from bnn_ppl.inference import fit
        >>> from bnn_ppl.models import MLP
        >>> x = np.linspace(-1, 1, 20, dtype=np.float32)[:, None]
        >>> model = bp.BNN(MLP(hidden=(), out=1), bp.priors.Normal(1.0),
        ...     bp.likelihoods.Gaussian(0.1))
        >>> folder, config = tempfile.mkdtemp(), HMCConfig(num_warmup=50, num_samples=10)
        >>> post = fit(model, (x, 2 * x[:, 0]), config, jax.random.key(0),
        ...            checkpoint_dir=folder, checkpoint_every=5)
        >>> again = fit(model, (x, 2 * x[:, 0]), config, jax.random.key(0), checkpoint_dir=folder)
        >>> bool(np.array_equal(post.samples["Dense_0.kernel"], again.samples["Dense_0.kernel"]))
        True
    """
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
    if not isinstance(config, MCMCConfig | SGMCMCConfig) and not reference:
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
        if isinstance(config, MCMCConfig):
            draws //= config.thinning
        return max(1, math.ceil(draws / 10))
    return validation.check_int("checkpoint_every", checkpoint_every)


def _mcmc_plan(model: BNN, d: Any, c: MCMCConfig, key: PRNGKey, placement: dict) -> tuple:
    kernel_cls, kwargs = mcmc_kernel(model, d.x, c)
    pot = full_batch_potential(  # chains are vectorized (checkpoint/segments.py)
        model, d.x, d.y, chunk_size=c.chunk_size, vectorized_chains=c.num_chains,
        chain_batching=c.chain_batching, **placement,
    )  # fmt: skip
    init_key, run_key = jax.random.split(key)  # as run_mcmc splits it
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


def _sgmcmc_plan(model: BNN, d: Any, c: SGMCMCConfig, key: PRNGKey, placement: dict) -> tuple:
    kernel, pot, init, run_key, extra = sgmcmc_setup(model, d.x, d.y, c, key, **placement)
    n = c.cycle_length
    burn = extra["num_warmup_used"]  # (an automatic one: extended as run_sgmcmc extends it)
    extend = burn_in_extension(c, burn, run_key)
    plan = MCMCPlan(kernel, burn * n, c.num_samples * n, c.num_chains, n, ("stats",), extend)
    return plan, pot, init, run_key, extra


def fit_checkpointed(
    model: BNN,
    d: Any,
    config: Config,
    key: PRNGKey,
    checkpoint_dir: str | os.PathLike,
    checkpoint_every: int,
    progress_every: int | None = None,
    progress_bar: bool = False,
    *,
    devices: Sequence[jax.Device] | None = None,
    dtype: Any = None,
) -> Posterior:
    """The Posterior :func:`~bnn_ppl.inference.fit` returns (data attached), run (or resumed)
    in ``checkpoint_dir``; ``d`` is the checked :class:`~bnn_ppl.inference.FitData`."""
    sg = isinstance(config, SGMCMCConfig)
    make = _sgmcmc_plan if sg else _mcmc_plan
    chosen, resumed = resume_chunk(config, checkpoint_dir)
    placement = {"devices": devices, "dtype": dtype}
    if sg:  # (the bar shows the MAP that sets the step size)
        placement["progress_bar"] = progress_bar
    plan, pot, init, run_key, extra = make(model, d, chosen, key, placement)
    one = jax.tree.map(lambda a: a[0], init) if config.num_chains > 1 else init
    memory = recorded_chunk(pot, resumed)
    fingerprint = run_fingerprint(
        config.to_dict(), d.x, d.y, key, pot.potential_fn, one, memory_chunk=memory,
        devices=pot.mesh.devices.size,
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
        draws = run_segments(plan, run_key, pot.args, init, store, checkpoint_every, log,
                             progress_bar=progress_bar, on_extend=log.burn_in)  # fmt: skip
        log.write()  # (complete already, unless a kill came between a commit and its line)
    # how the run went (not part of the fingerprint): resumed after which segment, if any
    progress = {"segments": draws.segments, "resumed_after_segment": draws.resumed_from}
    with warnings.catch_warnings():  # (the kernel's construction warned already)
        warnings.simplefilter("ignore", SGMCMCAccuracyWarning)
        kernel = plan.kernel()  # what reads the draws' statistics
    if sg:
        # the windows before the last were burn-in (an automatic one, extended)
        burn = extra["num_warmup_used"] + (draws.windows - 1) * config.num_samples
        extra = extra | {"num_warmup_used": burn}
        kernel.record_burn_in(burn * config.cycle_length)  # (the burn-in the advice names)
        samples = keep_cycle_ends(draws.samples, draws.extra["i"], config.cycle_length)
        # the last draw's (the run's last step's) statistics cover every sampling step
        stats = {k[6:]: v[:, -1] for k, v in draws.extra.items() if k.startswith("stats.")}
        # (None: a run finished by a version that did not keep them)
        accuracy = stats_accuracy_summary(kernel, stats) if stats else None
        post = sgmcmc_posterior(config, samples, extra | progress | {"accuracy": accuracy})
    else:
        check_chains(draws.samples, draws.extra)  # warns, as hmc() and nuts() do, if stuck
        if isinstance(config, NUTSConfig):  # as nuts() does: most trees cut at the depth
            sizes = draws.extra.get("adapt_state.step_size")  # (chain, draw)
            last = None if sizes is None else [row[-1] for row in sizes]
            warn_if_saturated(draws.extra.get("num_steps"), config.max_tree_depth, last)
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
    return attach_data(
        post, model, d.x, d.y, d.x_test, d.y_test, chunk_size=config.chunk_size,
        predictions=log.predictions_so_far(),
    )  # fmt: skip


# -------------------- progress_log
# ``progress.jsonl`` of a checkpointed :func:`~bnn_ppl.inference.fit`: warmup's cost, then
# the running metrics of the sampling segments, written as the run goes.
#
# The first line (``segment`` 0, ``"phase": "warmup"``) is warmup's: its ``iterations`` per chain
# (SG-MCMC: steps), ``wall_seconds`` (compilation included), ``grad_evals`` (leapfrog steps per
# chain over all warmup iterations; SG-MCMC: its steps x ``gradients_per_step``), ``accept_prob``
# and ``divergences`` over them, and the adapted ``step_size`` (mean over chains); what a kernel
# does not report is ``None`` (SG-MCMC: the acceptance, divergences and step size). Each later
# line is :func:`bnn_ppl.runs.progress.chain_point` over
# all draws so far (draws per chain, mean acceptance probability, divergences, gradient
# evaluations per chain, and, when the data have test targets, the running BMA's test metrics)
# with its ``segment`` and ``wall_seconds`` (the segment's sampling time, compilation included, on
# the segment's last line; ``None`` on the others, and for a segment a killed process committed
# without it). A segment gives one line, at its end, or with ``progress_every`` a line at every
# multiple of ``progress_every`` draws per chain it holds and one at its end: each computed after
# the segment from its draws (no extra compilation; each point costs a pass over the test
# predictions of the draws so far). The test predictions of each segment's draws are computed
# once, when the segment is committed, and kept (``chains x draws x n_test`` values per output):
# the finished Posterior's ``predictions`` are these (:meth:`ProgressLog.predictions_so_far`).
# An SG-MCMC automatic burn-in extended by a window of sampling segments marks that window's
# lines ``"phase": "burn-in"``, and the draws, running metrics and predictions start afresh
# after it (:meth:`ProgressLog.burn_in`).
#
# The file is a function of the committed segments (warmup's statistics, the draws and recorded
# wall times) and ``progress_every``: it is rewritten whole through :mod:`bnn_ppl.io`'s atomic
# writer after each commit, and a resumed run rebuilds the lines of the segments it finds
# committed before it appends its own. So a resumed run's file never repeats a line and equals
# an uninterrupted run's except ``wall_seconds``.

FILE = "progress.jsonl"
_STATS = ("accept_prob", "diverging", "num_steps")  # what chain_point reads


class ProgressLog:
    """The ``on_segment`` callback of :func:`~bnn_ppl.inference.checkpoint.segments.run_segments`
    that keeps
    ``<folder>/progress.jsonl``; ``cycle_length`` (SG-MCMC) keeps cycle-end draws only;
    ``progress_every`` adds a line every that many draws per chain (default: one line per
    segment, at its end); ``gradients_per_step`` (SG-MCMC: batch rows / training rows) is a
    step's cost in full-batch gradients, from which ``grad_evals`` is counted.

    Example:
        >>> import jax, json, numpy as np, os, tempfile
        >>> import bnn_ppl as bp
        >>> from bnn_ppl.config import HMCConfig
        >>> from bnn_ppl.inference import fit
        >>> from bnn_ppl.models import MLP
        >>> x = np.linspace(-1, 1, 20, dtype=np.float32)[:, None]
        >>> model = bp.BNN(MLP(hidden=(), out=1), bp.priors.Normal(1.0),
        ...     bp.likelihoods.Gaussian(0.1))
        >>> folder = tempfile.mkdtemp()
        >>> post = fit(model, (x, 2 * x[:, 0], x[:5], 2 * x[:5, 0]), HMCConfig(num_warmup=10,
        ...            num_samples=4), jax.random.key(0), checkpoint_dir=folder, checkpoint_every=2,
        ...            progress_every=1)
        >>> with open(os.path.join(folder, "progress.jsonl")) as f:
        ...     lines = [json.loads(line) for line in f]
        >>> [(p["segment"], p["draws"]) for p in lines]
        [(0, 0), (1, 1), (1, 2), (2, 3), (2, 4)]
        >>> sorted(k for k in lines[1] if "test" in k)
        ['test_mean_sq_std_residual', 'test_nll', 'test_rmse']
        >>> lines[0]["phase"], lines[0]["iterations"], lines[0]["grad_evals"] > 0
        ('warmup', 10, True)
    """

    def __init__(
        self,
        folder: str | os.PathLike,
        model: BNN,
        x_test: Any = None,
        y_test: Any = None,
        *,
        thinning: int = 1,
        cycle_length: int | None = None,
        chunk_size: int | None = None,
        y_std: float = 1.0,
        progress_every: int | None = None,
        gradients_per_step: float | None = None,
    ):
        self.path = os.path.join(os.fspath(folder), FILE)
        self.model, self.chunk_size = model, chunk_size
        self.x_test, self.y_test = (x_test, y_test) if y_test is not None else (None, None)
        self.thinning, self.cycle_length, self.y_std = thinning, cycle_length, y_std
        self.every, self.per_step = progress_every, gradients_per_step
        self.draws = 0
        self.predictions: list[dict[str, np.ndarray]] = []
        self.stats: list[dict[str, np.ndarray]] = []
        self.lines: list[dict[str, Any]] = []

    def __call__(self, segment: int, arrays: dict[str, np.ndarray], replayed: bool) -> None:
        """Add segment ``segment``'s lines (0: warmup's); write the file unless ``replayed``."""
        seconds = arrays.get("time/seconds")
        seconds = None if seconds is None else float(seconds)
        if segment == 0:
            point = _warmup_point(arrays)
            if point["grad_evals"] is None and self.per_step and point["iterations"] is not None:
                point["grad_evals"] = point["iterations"] * self.per_step
            self.lines.append({"segment": 0, **point, "wall_seconds": seconds})
        else:
            self._add_segment(segment, arrays, seconds)
        if not replayed:
            self.write()

    def _add_segment(self, segment: int, arrays: dict[str, np.ndarray], seconds: Any) -> None:
        samples = {k[7:]: v for k, v in arrays.items() if k.startswith("sample/")}
        extra = {k[6:]: v for k, v in arrays.items() if k.startswith("extra/")}
        if self.cycle_length is not None:
            samples = keep_cycle_ends(samples, extra["i"], self.cycle_length)
        first, n = self.draws, next(iter(samples.values())).shape[1]
        self.draws += n
        self.stats.append({NUMPYRO_STATS[k]: v for k, v in extra.items() if k in _STATS})
        if self.x_test is not None and n > 0:
            self.predictions.append(
                predictive.chain_predictions(
                    self.model, samples, self.x_test, chunk_size=self.chunk_size
                )
            )
        predictions, stats = _joined(self.predictions), _joined(self.stats)
        per_draw = None
        if self.per_step is not None and self.cycle_length is not None:
            per_draw = self.per_step * self.cycle_length
        points = chain_points(
            _line_draws(first, self.draws, self.every),
            predictions,
            self.y_test,
            stats,
            thinning=self.thinning,
            y_std=self.y_std,
            gradients_per_draw=per_draw,
        )
        for point in points:
            # the segment's sampling time belongs to its last line
            wall = seconds if point["draws"] == self.draws else None
            self.lines.append({"segment": segment, **point, "wall_seconds": wall})

    def burn_in(self, segment: int) -> None:
        """The draws of the lines so far, to segment ``segment``, became burn-in (an extended
        burn-in: :func:`~bnn_ppl.inference.checkpoint.segments.run_segments`' ``on_extend``):
        their lines get ``"phase": "burn-in"``, and the draws, running metrics and
        predictions start afresh with the next segment (written with its line)."""
        for line in self.lines:
            if 0 < line["segment"] <= segment:
                line["phase"] = "burn-in"
        self.draws = 0
        self.predictions, self.stats = [], []

    def predictions_so_far(self) -> dict[str, np.ndarray] | None:
        """The test predictions of every segment's draws, ``(chain, draw, n_test, ...)`` as a
        Posterior's ``predictions`` (``None`` without test targets: none were computed)."""
        return _joined(self.predictions) if self.x_test is not None else None

    def write(self) -> None:
        """Write the lines so far (atomically), unless the file already holds exactly them."""
        io.write_jsonl(self.path, self.lines)


def _joined(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    if not parts:
        return {}
    return {k: np.concatenate([p[k] for p in parts], axis=1) for k in parts[0]}


def _line_draws(first: int, last: int, every: int | None) -> list[int]:
    """Draws per chain of the lines of a segment holding draws ``first + 1 .. last``: every
    multiple of ``every`` among them, and ``last``."""
    if every is None:
        return [last]
    return sorted({*range(first + every - first % every, last + 1, every), last})


def _warmup_point(arrays: dict[str, np.ndarray]) -> dict[str, Any]:
    """Warmup's line: ``draws`` 0, its ``iterations`` (per chain), the :func:`chain_point`
    statistics over them, and the adapted ``step_size`` (mean over chains; ``None`` for a
    kernel without one)."""
    stats = {NUMPYRO_STATS[k[6:]]: v for k, v in arrays.items() if k[6:] in _STATS}
    iterations, step_size = arrays.get("time/iterations"), arrays.get("state/step_size")
    return {
        "phase": "warmup",
        "iterations": None if iterations is None else int(iterations),
        **chain_point(0, sample_stats=stats),
        "step_size": None if step_size is None else float(np.mean(step_size)),
    }

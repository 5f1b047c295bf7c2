"""Reference posteriors: HMC run until its test predictions have demonstrably converged."""

# Notes:
#
# * **Chains.** ``num_chains`` (default 4) chains of full-batch HMC, each started from an
#   independent draw from the prior. Prior draws are over-dispersed relative to the posterior,
#   which is what R-hat needs to be meaningful (Gelman & Rubin); starting every chain at a MAP
#   estimate plus jitter would let chains that never left one mode agree and pass.
# * **Starts far out.** On a sharp likelihood a prior draw can start so far from the posterior
#   that warmup adapts the step size and metric to where the chain is stuck, and it never
#   arrives. ``init_steps`` > 0 first moves every prior draw by that many full-batch Adam steps
#   on the run's potential (:mod:`bnn_ppl.inference.reference.chains`; each chain still starts from
#   its own draw and ends in its own basin); the potentials before and after are in the
#   record's ``"starts"``. Off by default.
# * **Kernel.** :func:`~bnn_ppl.inference.hmc` with its step size adapted in warmup (dual
#   averaging to acceptance 0.8) and a fixed trajectory length: Izmailov et al.'s
#   (π/2)·σ_prior·√T (:func:`~bnn_ppl.inference.default_trajectory_length`), a quarter period
#   of the prior with an identity mass matrix. ``mass_matrix="diagonal"`` (the default) also
#   adapts a diagonal mass matrix and keeps the trajectory a quarter period *in that metric*
#   (π/2 once it holds the posterior's variances); ``"identity"`` is Izmailov et al. exactly.
#   ``"dense"`` adapts the full covariance (NumPyro's ``dense_mass=True``): a correlated posterior
#   (an MLP on a small UCI set) needs it, where the diagonal metric leaves the step size at its
#   floor and chains stuck. ``benchmarks/reference_mass_matrix.py`` and the stored UCI references
#   measured them (README, "Reference posteriors").
#   ``num_temperatures=K`` (K >= 2) moves each chain by parallel tempering instead
#   (:class:`~bnn_ppl.inference.ParallelTempering`: a ladder of K likelihood temperatures,
#   ``leapfrog_steps`` per sweep, swaps between neighbours; the chain is its ``β = 1`` rung), for
#   posteriors whose modes an HMC chain cannot cross; everything below is the same, and the
#   record's ``"tempering"`` holds each chain's final ladder, the swap rate of every neighbour
#   pair and the pairs that stall (:mod:`bnn_ppl.inference.reference.kernels`).
# * **Stopping rule.** After warmup the chains are sampled in segments of ``segment_draws``
#   draws (NumPyro's ``MCMC`` continued from its ``last_state``: nothing is re-adapted). After
#   every segment the checked quantity (:mod:`bnn_ppl.diagnostics.function_values`: by default every
#   softmax probability, or the predictive mean, at ``x_test``) is evaluated for the new draws,
#   and the rank-normalised split R-hat and bulk ESS (Vehtari et al. 2021, through ArviZ) of all
#   draws so far are computed for each test quantity. The run has converged when at least
#   ``min_share`` (0.99) of them have R-hat <= ``max_rhat`` (1.01) *and* at least ``min_share``
#   have bulk ESS >= ``min_ess`` (400). Quantities that take one value in every draw of every
#   chain (a probability that is exactly 0 or 1 in float32) have no R-hat; they are counted as
#   converged and reported (``constant``; :mod:`bnn_ppl.inference.reference.stopping`). Otherwise
#   sampling continues until the budget ends: ``max_draws`` draws per chain, or ``max_seconds``
#   of wall time (compilation included). The time is checked between segments: the run stops
#   before a segment that, at the previous segment's pace, would end past ``max_seconds``
#   (:func:`~bnn_ppl.inference.reference.chains.segment_fits`). With a ``max_seconds`` warmup
#   also runs in segments of ``segment_draws`` iterations, checked the same way
#   (:mod:`bnn_ppl.inference.reference.chains`: the same adaptation, bit for bit). So a run
#   stays within its budget unless a segment takes longer than the one before it, or the first
#   sampling segment (which always follows a finished warmup) does not fit. A budget that ends
#   during warmup stops the run there, with no draw sampled: ``warmup_cut_short``, ``warmup_done``
# of
#   ``num_warmup``, never converged (its draws are warmup's last segment, for a look).
# * **Chains that do not move.** After every segment each chain is checked
#   (:func:`bnn_ppl.diagnostics.chain_health.check_chains`, on the latest segment joined with
#   earlier ones up to at least 20 draws per chain, so short segments are judged too): frozen,
#   stuck on repeated draws, or *crawling* (a step size orders of magnitude below the other
#   chains', or moves per draw a negligible fraction of theirs, though it "accepts" every
#   proposal). The step size is fixed after warmup, so more draws cannot mend such a chain: the
#   run stops (``"chains_not_moving"``), not
#   converged, and the record and the warning name the chain.
# * **Memory.** Every draw and the checked quantity stay in memory (``chains x draws x n x K``
#   float32 probabilities: 576 MB for 4 chains x 10,000 draws on digits' 360 test rows).
# * **Checkpoints.** With a ``checkpoint_dir`` the state after warmup and every segment's draws
#   and state are committed there, and the same call again (after a kill, or with a larger
#   budget) replays the committed segments through the stopping rule and continues from the
#   last state read back: the draws of an uninterrupted run, bit for bit
#   (:mod:`bnn_ppl.inference.reference.checkpoint`).
# * **Honesty.** The result (:class:`ReferenceRun`) carries every check's figures and says why
#   it stopped; a run that did not converge has ``converged=False`` and raises a
#   :class:`ReferenceNotConvergedWarning` with its last figures. It never reports convergence
#   it did not reach. The record also holds each chain's health (``chain_health``) and its
#   log-posterior level (:func:`bnn_ppl.diagnostics.chain_levels.chain_levels`: mean ``lp``, its
# gap below
#   the best chain and its drift between the halves of the draws), and the warning names chains
#   that sit apart or still drift (chains tens of nats apart are in different modes or not yet
#   in the typical set: more draws alone will not converge them). Mixing chains stopped by the
#   budget say how far they are: ``"projection"`` (:mod:`bnn_ppl.inference.reference.stopping`);
# every
#   run lists the values that fail the rule, worst first, with the chain furthest from the
#   others on each (``"laggards"``, the first :data:`~bnn_ppl.diagnostics.slow_values.LISTED`, and
#   ``"laggards_count"``; :mod:`bnn_ppl.diagnostics.slow_values`), and the warning says it in a
# sentence.

from __future__ import annotations

import dataclasses
import math
import os
import time
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from bnn_ppl import validation
from bnn_ppl.config import ReferenceHMCConfig
from bnn_ppl.data import Dataset
from bnn_ppl.diagnostics.chain_health import MIN_DRAWS, warn_if_stuck
from bnn_ppl.diagnostics.chain_levels import chain_levels, describe_levels
from bnn_ppl.diagnostics.function_values import (
    check_quantity,
    default_quantity,
    function_values,
    quantity_parts,
)
from bnn_ppl.diagnostics.scale_levels import describe_scale_levels, scale_levels
from bnn_ppl.diagnostics.slow_values import LISTED, describe_laggards, laggards
from bnn_ppl.inference.checkpoint.fit import check_checkpoint_dir
from bnn_ppl.inference.progress_bar import check_progress_bar, segment_bar
from bnn_ppl.inference.reference.chains import (
    Chains,
    health_record,
    segment_fits,
    segment_health,
)
from bnn_ppl.inference.reference.checkpoint import CheckpointedChains
from bnn_ppl.inference.reference.stopping import (
    ConvergenceCheck,
    check_convergence,
    not_converged_message,
    project_run,
)
from bnn_ppl.inference.results import from_draws
from bnn_ppl.model import BNN
from bnn_ppl.posterior import Posterior
from bnn_ppl.types import PRNGKey
from bnn_ppl.validation import InputTypeError, InputValueError

__all__ = [
    "ConvergenceCheck",
    "ReferenceNotConvergedWarning",
    "ReferenceRun",
    "check_convergence",
    "reference_hmc",
]


class ReferenceNotConvergedWarning(UserWarning):
    """A reference run whose budget ended before its stopping rule was met.

    Example:
        >>> import warnings
        >>> import jax, numpy as np
        >>> import bnn_ppl as bp
        >>> from bnn_ppl.models import MLP
        >>> from bnn_ppl.inference import reference_hmc, ReferenceNotConvergedWarning
        >>> rng = np.random.default_rng(0)
        >>> x = rng.normal(size=(30, 2)).astype(np.float32)
        >>> y = (x @ np.array([0.8, -0.5]) + 0.5 * rng.normal(size=30)).astype(np.float32)
        >>> model = bp.BNN(MLP(hidden=(), out=1), bp.priors.Normal(1.0),
        ...     bp.likelihoods.Gaussian(0.5))
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("error", ReferenceNotConvergedWarning)
        ...     run = reference_hmc(model, (x, y), x_test=x[:5], rng_key=jax.random.key(0),
        ...                         num_warmup=200, segment_draws=200)
        >>> run.converged, run.stop_reason, run.posterior.num_chains
        (True, 'converged', 4)
        >>> run.checks[-1].share_rhat_ok >= 0.99 and run.checks[-1].ess_bulk_min >= 400
        True
    """


class ReferenceRun(NamedTuple):
    """What :func:`reference_hmc` returns.

    ``posterior``: every post-warmup draw, its sample statistics and ``config`` (the settings,
    plus ``"convergence"``: the last check, ``converged``, ``stop_reason``, every check,
    ``chain_levels`` and ``chains_apart``, ``projection``, ``laggards``, see the module doc);
    ``values``: the checked ``quantity`` at ``x_test``, ``(chains, draws, n, ...)``;
    ``checks``: one :class:`ConvergenceCheck` per segment; ``converged``; ``stop_reason``:
    ``"converged"``, ``"max_draws"``, ``"max_seconds"`` or ``"chains_not_moving"``;
    ``warmup_done`` of ``num_warmup`` warmup iterations; ``warmup_cut_short``: the time budget
    ended warmup (then there are no checks, and ``posterior`` holds warmup's last segment, not
    a posterior sample); ``warmup_seconds``: warmup's wall time (with the first segment's,
    unless the warmup ran in segments); ``resumed_after``: with a ``checkpoint_dir``, the
    segment (0: warmup) the run resumed after (``None``: it started afresh).
    """

    posterior: Posterior
    values: np.ndarray
    quantity: str
    checks: tuple[ConvergenceCheck, ...]
    converged: bool
    stop_reason: str
    warmup_done: int = 0
    warmup_cut_short: bool = False
    warmup_seconds: float = math.nan
    resumed_after: int | None = None

    @property
    def segments(self) -> int:
        return len(self.checks)

    @property
    def draws(self) -> int:
        """Post-warmup draws per chain."""
        return self.checks[-1].draws if self.checks else 0

    @property
    def seconds(self) -> float:
        return self.checks[-1].seconds if self.checks else self.warmup_seconds

    @property
    def gradients(self) -> int:
        return self.checks[-1].gradients if self.checks else 0


def _settings(config: Any, settings: dict[str, Any]) -> ReferenceHMCConfig:
    if config is None:
        config = ReferenceHMCConfig()
    elif not isinstance(config, ReferenceHMCConfig):
        raise InputTypeError(f"config must be a ReferenceHMCConfig, got {type(config).__name__}.")
    fields = {f.name for f in dataclasses.fields(ReferenceHMCConfig)}
    unknown = sorted(set(settings) - fields)
    if unknown:
        raise InputTypeError(
            f"reference_hmc got unexpected argument(s) {unknown}; its settings are "
            f"{sorted(fields)} (the fields of ReferenceHMCConfig)."
        )
    return dataclasses.replace(config, **settings)


def _pace(checks: list[ConvergenceCheck]) -> float | None:
    """Seconds per draw of the last segment (``None`` after the first, whose time holds
    warmup and compilation)."""
    if len(checks) < 2:
        return None
    a, b = checks[-2], checks[-1]
    return (b.seconds - a.seconds) / (b.draws - a.draws)


def _json(d: dict[str, Any]) -> dict[str, Any]:
    """``d`` with its non-finite floats as ``None`` (JSON has no NaN)."""
    return {k: (v if not isinstance(v, float) or math.isfinite(v) else None) for k, v in d.items()}


def _outputs(model: BNN, quantity: str, values: np.ndarray, n: int) -> int:
    """Locations per row in ``"mean_log_density"`` values (its mean part's size over ``n``)."""
    if quantity != "mean_log_density":
        return 1
    return (int(np.prod(values.shape[2:])) - n - len(model.likelihood.latent_sites())) // n


def _part_figures(values: np.ndarray, check: ConvergenceCheck, c: ReferenceHMCConfig,
                  parts: dict[str, slice]) -> dict[str, Any] | None:  # fmt: skip
    """The rule's figures on each named part of the checked values, over the draws ``check``
    saw (its burn-in left out); ``None`` for a quantity of one part."""
    if len(parts) < 2:
        return None
    seen = values[:, int(c.burn_in * check.draws): check.draws]
    flat = seen.reshape(*seen.shape[:2], -1)
    return {k: _json(check_convergence(flat[..., s], max_rhat=c.max_rhat, min_share=c.min_share,
                                       min_ess=c.min_ess))
            for k, s in parts.items()}  # fmt: skip


def reference_hmc(
    model: BNN,
    data: Any,
    *,
    x_test: Any,
    y_test: Any = None,
    rng_key: PRNGKey | None = None,
    config: ReferenceHMCConfig | None = None,
    checkpoint_dir: str | os.PathLike | None = None,
    on_check: Callable[[ConvergenceCheck], Any] | None = None,
    progress_bar: bool | None = None,
    **settings: Any,
) -> ReferenceRun:
    """Run HMC in segments until the test predictions converge or the budget ends.

    Args:
        model: a :class:`~bnn_ppl.BNN`.
        data: ``(x, y)`` or a :class:`~bnn_ppl.data.Dataset` (its training split).
        x_test: ``(n, ...)`` inputs at which convergence is checked.
        y_test: ``(n,)`` labels, needed for ``quantity="p_true"`` only.
        rng_key: ``jax.random.key(seed)`` (default ``key(0)``); the same key, data and settings
            give the same draws.
        config: a :class:`~bnn_ppl.config.ReferenceHMCConfig` (default: its defaults).
        checkpoint_dir: a folder to commit the run to (warmup, then every segment) and to
            resume it from: the same call again after a kill continues after the newest intact
            segment with the same draws; a larger budget or other thresholds continue a
            finished run; other data, seed, model or draw-determining settings are refused
            naming the field (:mod:`bnn_ppl.inference.reference.checkpoint`).
        on_check: called with each :class:`ConvergenceCheck` as soon as it is made (after
            every segment; on a resume, the replayed segments' checks first), e.g.
            ``lambda check: print(check.describe(), flush=True)`` to follow a run of hours;
            its return value is ignored, and an exception it raises ends the run (the
            committed segments of a checkpointed run stay committed).
        progress_bar: a bar on stderr of the draws per chain up to ``max_draws``, advanced
            after each segment, with the shares of test values that meet the R-hat and ESS
            thresholds; default: when stderr is a terminal and ``CI`` is not set.
        **settings: any of its fields, overriding ``config``: ``num_chains`` (4),
            ``num_warmup`` (500), ``segment_draws`` (200), ``max_draws`` (10000 per chain),
            ``max_seconds`` (None), ``max_rhat`` (1.01), ``min_share`` (0.99), ``min_ess``
            (400), ``burn_in`` (0: the share of each chain's draws, from the first, left out of
            every check and of the result), ``quantity``, ``mass_matrix`` ("diagonal", "dense"
            or "identity"), ``trajectory_length``, ``step_size``, ``target_accept_prob``,
            ``max_num_steps``, ``chunk_size``; ``init_steps`` (0) and ``init_learning_rate``
            (3e-3): Adam steps from each prior draw before warmup; parallel tempering:
            ``num_temperatures`` (None: plain HMC), ``min_beta`` (1e-3), ``leapfrog_steps``
            (16), ``adapt_ladder`` (True).

    Returns:
        A :class:`ReferenceRun`; ``converged`` is ``True`` only if the last check met the
        stopping rule. A run that ran out of budget first also warns
        (:class:`ReferenceNotConvergedWarning`).

    Raises:
        InputError: a bad setting (a threshold out of range, a budget <= 0, ...), data or
            ``x_test`` of the wrong shape, ``p_true`` without ``y_test`` - all before anything
            is compiled.
    """
    c = _settings(config, settings)
    if not isinstance(model, BNN):
        raise InputTypeError(f"model must be a bp.BNN, got {type(model).__name__}.")
    if isinstance(data, Dataset):
        data = (data.x_train, data.y_train)
    if not isinstance(data, tuple) or len(data) != 2:
        raise InputTypeError("data must be a tuple (x, y) or a bp.data.Dataset.")
    x, y = model.check_data(*data)
    x_test = model.check_inputs(x_test, "x_test")
    if x_test.shape[1:] != x.shape[1:]:
        raise InputValueError(
            f"x_test has rows of shape {x_test.shape[1:]} but x has {x.shape[1:]}; the test "
            "inputs must look like the training inputs."
        )
    quantity = check_quantity(model, c.quantity or default_quantity(model, y_test is not None),
                              y_test)  # fmt: skip
    if y_test is not None:
        y_test = validation.as_array("y_test", y_test)
        validation.check_same_length("x_test", x_test, "y_test", y_test)
        model.likelihood.check_targets(y_test, model.output_shape(x_test))
    key = validation.check_key("rng_key", rng_key) if rng_key is not None else None
    bar_on = check_progress_bar(progress_bar)
    if on_check is not None and not callable(on_check):
        raise InputTypeError(
            "on_check must be a callable taking a ConvergenceCheck (e.g. lambda check: "
            f"print(check.describe())), got {type(on_check).__name__}."
        )
    if checkpoint_dir is not None:
        check_checkpoint_dir(checkpoint_dir)

    start = time.monotonic()
    if checkpoint_dir is None:
        chains = Chains(model, x, y, c, key)
    else:
        chains = CheckpointedChains(model, x, y, c, key, checkpoint_dir)
    deadline = None if c.max_seconds is None else start + c.max_seconds
    parts: list[Posterior] = []
    values: list[np.ndarray] = []
    checks: list[ConvergenceCheck] = []
    earlier: list[Any] = []  # the segments before the latest (chain health joins them)
    draws = gradients = 0
    passes = 0  # consecutive checks that met the rule (the last ``passes`` ones)
    with chains, segment_bar(c.max_draws, "reference_hmc: warmup", bar_on) as bar:
        warm, segment = chains.start(deadline)
        bar.set_description_str("reference_hmc", refresh=False)
        reason = "max_seconds" if warm.cut_short else ""
        while True:
            part = from_draws(segment.samples, segment.extra, chains.mcmc.sampler,
                              method=ReferenceHMCConfig.method)  # fmt: skip
            parts.append(part)
            values.append(function_values(model, part.samples, x_test, quantity, y=y_test,
                                          chunk_size=c.chunk_size))  # fmt: skip
            health = segment_health(segment, earlier)
            earlier = [*earlier[-MIN_DRAWS:], segment]  # (at most MIN_DRAWS segments needed)
            if reason:  # warmup cut short: its last segment is all there is
                break
            draws += part.num_draws
            gradients += chains.kernel.gradients(segment.extra, part.num_draws)
            if not checks:
                chains.kernel.after_first_segment(segment.state)
            first = int(c.burn_in * draws)  # each chain's draws before it: burn-in
            if chains.parts is None:  # the checked values' parts, each held to the rule
                chains.parts = quantity_parts(model, quantity, len(x_test),
                                              _outputs(model, quantity, values[0], len(x_test)))
            figures = chains.check(values, first)  # (a checkpointed run: kept in checks.json)
            # (checkpointed: the committed time, so that a rerun replays the same decisions)
            seconds = time.monotonic() - start if segment.seconds is None else segment.seconds
            checks.append(ConvergenceCheck(len(checks) + 1, draws, gradients, seconds, **figures))
            bar.update(part.num_draws)
            bar.set_postfix_str(
                f"R-hat ok {figures['share_rhat_ok']:.0%}, ESS ok {figures['share_ess_ok']:.0%}"
            )
            if on_check is not None:
                on_check(checks[-1])
            n = min(c.segment_draws, c.max_draws - draws)  # the next segment's draws, if any
            passes = passes + 1 if figures["converged"] else 0
            if not all(h.moving for h in health):
                reason = "chains_not_moving"  # the step size is fixed now: more draws won't help
                warn_if_stuck(health)
            elif passes > c.confirm_segments:  # met, and met again after confirm_segments more
                reason = "converged"
            elif draws >= c.max_draws:
                reason = "max_draws"
            elif not segment_fits(seconds, _pace(checks), n, c.max_seconds):
                reason = "max_seconds"  # (the next segment, at the last one's pace, would pass it)
            else:  # continue the chains where they stopped, with the adapted step size and metric
                segment = chains.next(n)
                continue
            break

    converged = reason == "converged"
    first = int(c.burn_in * draws)  # the burn-in left out of the last check and of the result

    def kept(arrays: list[Any]) -> Any:
        return np.concatenate(arrays, axis=1)[:, first:]

    stats = {k: kept([p.sample_stats[k] for p in parts]) for k in parts[0].sample_stats}
    lp = stats["lp"]
    levels = chain_levels(lp)
    apart = describe_levels(levels)
    samples = {k: kept([p.samples[k] for p in parts]) for k in parts[0].samples}
    scales = scale_levels(samples, lp, weight=np.size(y) * model.likelihood_scale)
    funnel = describe_scale_levels(scales, levels)  # chains apart because at different noise
    kept_values = kept(values)
    projection = None  # the draws the rule would need: for mixing chains stopped by the budget
    if checks and reason in ("max_draws", "max_seconds") and not apart and lp.shape[1] >= 8:
        projection = project_run(kept_values, checks, c)
    lags = laggards(kept_values, max_rhat=c.max_rhat, min_ess=c.min_ess) if checks else []
    n_test = len(x_test)
    parts = chains.parts or quantity_parts(model, quantity, n_test,
                                           _outputs(model, quantity, kept_values, n_test))
    all_values = np.concatenate(values, axis=1)
    confirmation = None  # the check that first met the rule in the last run of passes, and the last
    if passes:
        pair = (checks[-passes], checks[-1])
        confirmation = {"confirm_segments": c.confirm_segments, "confirmed": converged,
                        **{k: {**_json(ch._asdict()),
                               "parts": _part_figures(all_values, ch, c, parts)}
                           for k, ch in zip(("passed", "last"), pair, strict=True)}}  # fmt: skip
    last = checks[-1]._asdict() if checks else dict.fromkeys(ConvergenceCheck._fields)
    record = {
        **_json(last),
        "converged": converged,
        "stop_reason": reason,
        "warmup_done": warm.warmup_done,
        "warmup_cut_short": warm.cut_short,
        "starts": None if warm.starts is None else warm.starts.record(),
        "chain_health": health_record(health),
        "chain_levels": [c._asdict() for c in levels],
        "chains_apart": apart,
        "scale_levels": [s._asdict() for s in scales],
        "scale_funnel": funnel,
        "quantity": quantity,
        "burn_in_draws": first,
        "parts": {k: [v.start, v.stop] for k, v in parts.items()}
                 if len(parts) > 1 else None,
        "last_parts": _part_figures(all_values, checks[-1], c, parts) if checks else None,
        "confirmation": confirmation,
        "projection": None if projection is None else _json(projection._asdict()),
        "laggards": [_json(g._asdict()) for g in lags[:LISTED]],  # the worst failing values
        "laggards_count": len(lags),
        **chains.kernel.record(segment.state),
        "resumed_after_segment": chains.resumed_after,
        "checks": [_json(ch._asdict()) for ch in checks],
    }  # fmt: skip
    posterior = Posterior(
        ReferenceHMCConfig.method,
        samples,
        stats,
        config={**c.to_dict(), "kernel": chains.kernel.name, "convergence": record},
    )  # fmt: skip
    if not converged:
        note = chains.kernel.problem(segment.state)
        text = not_converged_message(
            c,
            reason,
            warm,
            checks,
            health,
            quantity,
            apart,
            funnel,
            note,
            projection,
            chains.resumed_after,
            describe_laggards(lags, last["size"], max_rhat=c.max_rhat, min_ess=c.min_ess)
            if lags
            else None,
        )
        if passes:
            text += (f" The rule was met at check {checks[-passes].segment} but not yet "
                     f"confirmed by {c.confirm_segments} further segment(s): the budget ended "
                     "first.")
        warnings.warn(ReferenceNotConvergedWarning(text), stacklevel=2)
    return ReferenceRun(posterior, kept_values, quantity, tuple(checks),
                        converged, reason, warm.warmup_done, warm.cut_short, warm.seconds,
                        chains.resumed_after)  # fmt: skip

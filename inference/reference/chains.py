"""The chains of a reference run: built, warmed up within a time budget, sampled in segments."""

# Notes:
#
# :func:`~bnn_ppl.inference.reference_hmc` decides *when to stop*; this module moves the chains,
# on NumPyro's public ``MCMC`` API only (the continuation NumPyro documents for
# ``post_warmup_state``):
#
# * :class:`Chains` - the run's chains in memory: :meth:`~Chains.start` warms them up and runs
#   the first segment, :meth:`~Chains.next` one more; each gives a :class:`Segment` (numpy
#   draws, extra fields and the kernel's summary of the last state: its step size and the
#   kernel's own figures), which is also what
#   :class:`~bnn_ppl.inference.reference.checkpoint.CheckpointedChains` commits and replays.
# * :func:`build_chains` - the kernel the config asks for
#   (:func:`~bnn_ppl.inference.reference.kernels.chain_kernel`: the checked
#   :class:`~bnn_ppl.inference.HMC` kernel :func:`hmc` would build, or parallel tempering), its
#   ``MCMC`` (``num_warmup`` warmup iterations, vectorized chains), the chains' initial
#   parameters (independent prior draws) and the run's key, split as :func:`hmc` splits it.
# * :func:`warm_up` - warmup, and the first sampling segment. Without a deadline it is one
#   ``MCMC.run`` (warmup and the first segment together, as :func:`hmc` runs them). With one,
#   warmup runs in segments of ``warmup_segment`` iterations from the kernel's public ``init``:
#   NumPyro adapts while the state's iteration counter is below the ``num_warmup`` the kernel was
#   set up for, so a segment continued from the last state carries on the same adaptation
#   schedule - the draws are bit for bit those of the one-piece run - and the deadline is checked
#   between segments: warmup stops before a segment that, at the previous segment's pace,
#   would end past it (:func:`segment_fits`). A warmup cut short by the deadline runs no
#   sampling segment; with
#   ``first_segment=False`` warmup runs alone (in one ``MCMC.run`` without a deadline) and
#   ``Warmup.state`` is the state it ends in.
# * :func:`continue_chains` - more draws from a given state (nothing re-adapted).
# * :func:`segment_fits` - whether one more segment, at the last one's pace, ends within the
#   time budget (warmup and the sampling loop both stop before one that would not).
# * :func:`segment_health` - :func:`bnn_ppl.diagnostics.chain_health.check_chains` on one segment:
# frozen,
#   stuck or crawling chains.

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import numpy as np

from bnn_ppl.config import ReferenceHMCConfig
from bnn_ppl.diagnostics.chain_health import MIN_DRAWS, ChainHealth, check_chains
from bnn_ppl.inference.checkpoint.segments import joined_arrays, segment_arrays
from bnn_ppl.inference.ensemble import unconstrained_fitter
from bnn_ppl.inference.mcmc.checks import CheckedMCMC, as_key
from bnn_ppl.inference.potential.bnn import FullBatchPotential, full_batch_potential
from bnn_ppl.inference.reference.kernels import ChainKernel, chain_kernel
from bnn_ppl.inference.reference.stopping import check_convergence
from bnn_ppl.inference.svi import default_optimizer
from bnn_ppl.model import BNN

__all__ = [
    "Chains",
    "Segment",
    "Warmup",
    "as_segment",
    "build_chains",
    "continue_chains",
    "health_record",
    "segment_arrays_of",
    "segment_fits",
    "segment_health",
    "warm_up",
    "STARTS_PREFIX",
    "Starts",
    "optimised_starts",
    "starts_from_arrays",
]


class Warmup(NamedTuple):
    """How warmup went: ``warmup_done`` iterations of ``num_warmup``; ``cut_short``: the
    deadline passed first (no sampling segment was run; ``mcmc`` holds the last warmup
    segment's draws); ``seconds``: its wall time (with the first segment, when run together);
    ``state``: the chains' state at its end, when it ran without the first segment;
    ``starts``: with ``init_steps``, the chains' optimised starts
    (:class:`~bnn_ppl.inference.reference.chains.Starts`; read back from a checkpoint without their
    parameters)."""

    warmup_done: int
    cut_short: bool
    seconds: float
    state: Any = None
    starts: Starts | None = None


class Segment(NamedTuple):
    """One segment of draws: ``samples`` and flattened ``extra`` fields, ``(chain, draw, ...)``
    numpy arrays; ``state``: the kernel's summary of the state after it
    (:meth:`~bnn_ppl.inference.reference.kernels.ChainKernel.summary`: ``step_size`` per chain,
    fixed after warmup, and the kernel's figures); ``seconds``: the wall time the run had
    committed at its end (a checkpointed run: a rerun replays the same figure), ``None`` in
    memory (read at the check)."""

    samples: dict[str, np.ndarray]
    extra: dict[str, np.ndarray]
    state: dict[str, np.ndarray]
    seconds: float | None = None

    @property
    def step_size(self) -> np.ndarray:
        return self.state["step_size"]


def segment_arrays_of(mcmc: CheckedMCMC, kernel: ChainKernel) -> dict[str, np.ndarray]:
    """The last ``MCMC.run``'s draws and extra fields (``"sample/<site>"``,
    ``"extra/<field>"``), with ``kernel``'s summary of its last state (``"state/<name>"``):
    what a checkpointed run commits per segment."""
    summary = kernel.summary(mcmc.last_state)
    return segment_arrays(mcmc) | {f"state/{k}": np.asarray(v) for k, v in summary.items()}


def as_segment(arrays: dict[str, np.ndarray], seconds: float | None = None) -> Segment:
    """The :class:`Segment` of :func:`segment_arrays_of`'s arrays (or the same read back)."""
    samples, extra = joined_arrays([arrays])
    state = {k[6:]: v for k, v in arrays.items() if k.startswith("state/")}
    return Segment(samples, extra, state, seconds)


def build_chains(
    model: BNN, x: Any, y: Any, c: ReferenceHMCConfig, rng_key: Any
) -> tuple[CheckedMCMC, FullBatchPotential, Any, jax.Array]:
    """``(mcmc, potential, initial parameters, run key)`` for ``c``'s chains (checked data).

    Example:
        >>> import jax, numpy as np
        >>> import bnn_ppl as bp
        >>> from bnn_ppl.config import ReferenceHMCConfig
        >>> from bnn_ppl.models import MLP
        >>> x = np.random.default_rng(0).normal(size=(20, 2)).astype(np.float32)
        >>> model = bp.BNN(MLP(hidden=(), out=1), bp.priors.Normal(1.0),
        ...     bp.likelihoods.Gaussian(0.5))
        >>> c = ReferenceHMCConfig(num_warmup=40, segment_draws=10, max_seconds=1e-6)
        >>> mcmc, pot, init, key = build_chains(model, x, x[:, 0], c, jax.random.key(0))
        >>> fields = chain_kernel(c).extra_fields
        >>> done = warm_up(mcmc, pot, init, key, c, fields, deadline=0.0)  # the deadline has passed
        >>> done.warmup_done, done.cut_short     # one warmup segment, then it stopped
        (10, True)
    """
    kernel = chain_kernel(c)
    pot = full_batch_potential(
        model, x, y, chunk_size=c.chunk_size, vectorized_chains=c.num_chains,
        chain_batching=c.chain_batching,
    )  # fmt: skip
    mcmc = CheckedMCMC(
        kernel.build(model, x, pot), num_warmup=c.num_warmup,
        num_samples=min(c.segment_draws, c.max_draws), num_chains=c.num_chains,
        chain_method="vectorized", progress_bar=False, jit_model_args=True,
    )  # fmt: skip
    init_key, run_key = jax.random.split(as_key(rng_key))  # as hmc() splits it
    return mcmc, pot, kernel.init_params(pot, init_key), run_key


def continue_chains(mcmc: CheckedMCMC, pot: FullBatchPotential, state: Any, n: int,
                    fields: tuple[str, ...]) -> None:  # fmt: skip
    """``n`` more iterations per chain from ``state`` (warmup ones while its counter is below
    ``num_warmup``), the continuation NumPyro documents for ``post_warmup_state``, collecting
    the extra ``fields``."""
    mcmc.num_samples = n
    mcmc.post_warmup_state = state
    mcmc.run(state.rng_key, *pot.args, extra_fields=fields)


def warm_up(
    mcmc: CheckedMCMC,
    pot: FullBatchPotential,
    init: Any,
    run_key: jax.Array,
    c: ReferenceHMCConfig,
    fields: tuple[str, ...],
    deadline: float | None,
    first_segment: bool = True,
) -> Warmup:
    """Warm the chains up and run the first sampling segment (unless ``first_segment`` is
    False: then ``Warmup.state`` is warmup's last state), unless ``deadline`` (a
    ``time.monotonic()`` value; ``None``: none) passes between two warmup segments of
    ``c.segment_draws`` iterations; ``fields``: the extra fields to collect. With
    ``c.init_steps`` the starts ``init`` are optimised first
    (:func:`~bnn_ppl.inference.reference.chains.optimised_starts`; its time is warmup's)."""
    start = time.monotonic()
    starts = None
    if c.init_steps:
        starts = optimised_starts(pot, init, c.init_steps, c.init_learning_rate)
        init = starts.params
    if first_segment and (deadline is None or c.num_warmup == 0):
        mcmc.run(run_key, *pot.args, init_params=init, extra_fields=fields)
        return Warmup(c.num_warmup, False, time.monotonic() - start, starts=starts)
    # the state MCMC.run would start from: one key per chain, the kernel set up for num_warmup
    keys = jax.random.split(run_key, c.num_chains)
    state = mcmc.sampler.init(keys, c.num_warmup, init, pot.args, {})
    size = c.num_warmup if deadline is None else c.segment_draws
    done, pace = 0, None  # pace: seconds per iteration of the last segment (not the first's:
    while done < c.num_warmup:  # it compiles)
        n, began = min(size, c.num_warmup - done), time.monotonic()
        continue_chains(mcmc, pot, state, n, fields)
        state, done = mcmc.last_state, done + n
        if deadline is None or done == c.num_warmup:
            continue
        jax.block_until_ready(state)
        now = time.monotonic()
        if not segment_fits(now, pace, min(size, c.num_warmup - done), deadline):
            return Warmup(done, True, now - start, starts=starts)
        pace = (now - began) / n
    if not first_segment:
        jax.block_until_ready(state)
        return Warmup(done, False, time.monotonic() - start, state, starts)
    continue_chains(mcmc, pot, state, min(c.segment_draws, c.max_draws), fields)
    return Warmup(done, False, time.monotonic() - start, starts=starts)


def segment_fits(now: float, pace: float | None, n: int, end: float | None) -> bool:
    """Whether ``n`` more iterations at ``pace`` seconds each, started at ``now``, end by
    ``end`` (the budget's end, on ``now``'s clock; ``None``: no budget). Without a pace (only
    the first segment run, whose time includes compilation): whether any time is left.

    >>> segment_fits(90.0, 1.0, 10, 100.0), segment_fits(90.0, 1.5, 10, 100.0)
    (True, False)
    >>> segment_fits(90.0, None, 10, 100.0), segment_fits(100.0, None, 10, 100.0)
    (True, False)
    """
    if end is None:
        return True
    return now < end if pace is None else now + pace * n <= end


class Chains:
    """A run's chains, kept in memory: built by :func:`build_chains`; :meth:`start` warms them
    up (:func:`warm_up`) and returns the first segment, :meth:`next` runs one more; ``kernel``
    is what moves them (:func:`~bnn_ppl.inference.reference.kernels.chain_kernel`). A context
    manager, as its checkpointed subclass is (nothing to hold here)."""

    resumed_after: int | None = None  # (a checkpointed run: the segment it resumed after)
    parts: dict[str, slice] | None = None  # the checked values' parts, each held to the rule

    def __init__(self, model: BNN, x: Any, y: Any, c: ReferenceHMCConfig, rng_key: Any):
        self.c, self.kernel = c, chain_kernel(c)
        self.mcmc, self.pot, self.init, self.run_key = build_chains(model, x, y, c, rng_key)

    def __enter__(self) -> Chains:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def start(self, deadline: float | None) -> tuple[Warmup, Segment]:
        """Warmup and the first segment (warmup's last segment, if the deadline cut it)."""
        fields = self.kernel.extra_fields
        warm = warm_up(self.mcmc, self.pot, self.init, self.run_key, self.c, fields, deadline)
        return warm, as_segment(segment_arrays_of(self.mcmc, self.kernel))

    def next(self, n: int) -> Segment:
        """``n`` more draws per chain, continued from where the chains stopped."""
        continue_chains(self.mcmc, self.pot, self.mcmc.last_state, n, self.kernel.extra_fields)
        return as_segment(segment_arrays_of(self.mcmc, self.kernel))

    def check(self, values: list[np.ndarray], first: int) -> dict[str, Any]:
        """The stopping rule (:func:`~bnn_ppl.inference.reference.stopping.check_convergence`) on
        the checked values of every segment so far (one ``(chains, draws, ...)`` array each),
        each chain's first ``first`` draws left out."""
        return rule_check(np.concatenate(values, axis=1), first, self.c, self.parts)


RULE_FIELDS = ("max_rhat", "min_share", "min_ess")
"""The :class:`~bnn_ppl.config.ReferenceHMCConfig` fields the stopping rule reads."""


def rule_settings(c: ReferenceHMCConfig, parts: dict[str, slice] | None = None) -> dict[str, Any]:
    """``c``'s stopping-rule thresholds (:data:`RULE_FIELDS`), by name, and the checked
    values' ``parts`` (as ``[start, stop]`` lists) when there are several."""
    settings = {k: getattr(c, k) for k in RULE_FIELDS}
    if parts and len(parts) > 1:
        settings["parts"] = {k: [v.start, v.stop] for k, v in parts.items()}
    return settings


def rule_check(values: np.ndarray, first: int, c: ReferenceHMCConfig,
               parts: dict[str, slice] | None = None) -> dict[str, Any]:  # fmt: skip
    """``c``'s stopping rule on ``values[:, first:]`` (each of several ``parts`` held to it)."""
    rule = {k: getattr(c, k) for k in RULE_FIELDS}
    return check_convergence(values[:, first:], **rule,
                             parts=parts if parts and len(parts) > 1 else None)  # fmt: skip


def segment_health(segment: Segment, earlier: Sequence[Segment] = ()) -> list[ChainHealth]:
    """:func:`~bnn_ppl.diagnostics.chain_health.check_chains` (no warning) on the latest
    ``segment``, joined with as many of the ``earlier`` segments (oldest first) as it takes to
    reach :data:`~bnn_ppl.diagnostics.chain_health.MIN_DRAWS` draws per chain: a segment
    shorter than that would leave repeated or frozen draws unjudged."""
    window = [segment]
    for part in reversed(earlier):
        if sum(next(iter(p.samples.values())).shape[1] for p in window) >= MIN_DRAWS:
            break
        window.insert(0, part)
    if len(window) == 1:
        return check_chains(segment.samples, segment.extra, segment.step_size, warn=False)

    def join(arrays: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        keys = [k for k in arrays[-1] if all(k in a for a in arrays)]
        return {k: np.concatenate([a[k] for a in arrays], axis=1) for k in keys}

    return check_chains(join([p.samples for p in window]), join([p.extra for p in window]),
                        segment.step_size, warn=False)  # fmt: skip


def health_record(health: list[ChainHealth]) -> list[dict[str, Any]]:
    """JSON-ready rows: chain, moving, problems and relative movement (``None`` if NaN)."""
    return [{"chain": h.chain, "moving": h.moving, "problems": list(h.problems),
             "relative_movement": None if np.isnan(h.relative_movement)
             else h.relative_movement} for h in health]  # fmt: skip


# -------------------- starts
# Where a reference run's chains start: independent prior draws, optionally optimised first.
#
# :func:`~bnn_ppl.inference.reference_hmc` starts every chain from an independent prior draw:
# over-dispersed starts are what make R-hat meaningful. On a sharp likelihood a prior draw can
# be so far out (energy with the noise fixed at 0.05: potential ~10⁷ against ~−600 in the
# posterior) that HMC's warmup does not bring it in: the chain's step size and mass matrix are
# adapted to where it is stuck, and it stays there (``chains_not_moving``; README, "Reference
# posteriors"). :func:`optimised_starts` moves each prior draw by ``steps`` full-batch Adam
# steps on the run's own potential first (the optimiser of
# :func:`~bnn_ppl.inference.map_estimate`, here unconstrained:
# :func:`~bnn_ppl.inference.ensemble.unconstrained_fitter`; Adam with its learning rate
# cosine-decayed to 1 %), all chains at once (``jax.vmap``), so warmup begins where the
# posterior's mass is.
#
# What this keeps and what it gives up: each chain still starts from its own prior draw, and
# the optimisations from different draws end in different basins (the chains' potentials after
# it differ by tens of nats on energy), so chains that would sample different modes still
# disagree and R-hat still sees it; what is lost is the over-dispersion *within* a basin - a
# start at a mode is inside the typical set's shell rather than outside it. Starting HMC from
# optimised solutions is the recipe of Sommer et al. (2024, "Microcanonical Langevin Ensembles"),
# who start each chain from a deep-ensemble member. The potentials before and after are kept
# (:class:`Starts`) and written to the run's record, so a reader sees how far each start moved.

STARTS_PREFIX = "starts/"
"""The prefix of the :class:`Starts` arrays a checkpointed run commits with its warmup."""


class Starts(NamedTuple):
    """The chains' starts after :func:`optimised_starts`: ``params`` (unconstrained,
    ``(chains, ...)``), the potential at each chain's prior draw (``prior_potential``) and after
    ``steps`` Adam steps at ``learning_rate`` (``potential``), ``(chains,)`` each."""

    params: Any
    prior_potential: np.ndarray
    potential: np.ndarray
    steps: int
    learning_rate: float

    def record(self) -> dict[str, Any]:
        """JSON-ready figures: ``steps``, ``learning_rate``, ``gradients`` (``steps`` per chain)
        and both potentials per chain."""
        return {
            "steps": self.steps,
            "learning_rate": self.learning_rate,
            "gradients": self.steps * len(self.potential),
            "prior_potential": [float(v) for v in self.prior_potential],
            "potential": [float(v) for v in self.potential],
        }

    def arrays(self) -> dict[str, np.ndarray]:
        """The figures as arrays (:data:`STARTS_PREFIX` names), for a checkpoint's warmup record
        (the parameters are not kept: warmup's final state replaces them)."""
        return {
            f"{STARTS_PREFIX}prior_potential": np.asarray(self.prior_potential),
            f"{STARTS_PREFIX}potential": np.asarray(self.potential),
            f"{STARTS_PREFIX}steps": np.asarray(self.steps),
            f"{STARTS_PREFIX}learning_rate": np.asarray(self.learning_rate),
        }


def starts_from_arrays(arrays: dict[str, np.ndarray]) -> Starts | None:
    """The :class:`Starts` figures read back from :meth:`Starts.arrays` (``params=None``), or
    ``None`` when ``arrays`` holds none (a run without ``init_steps``)."""
    if f"{STARTS_PREFIX}potential" not in arrays:
        return None
    a = {k[len(STARTS_PREFIX) :]: v for k, v in arrays.items() if k.startswith(STARTS_PREFIX)}
    return Starts(None, np.asarray(a["prior_potential"]), np.asarray(a["potential"]),
                  int(a["steps"]), float(a["learning_rate"]))  # fmt: skip


def optimised_starts(
    pot: FullBatchPotential, init: Any, steps: int, learning_rate: float
) -> Starts:
    """Each chain's start (``init``: unconstrained, ``(chains, ...)``) moved by ``steps``
    full-batch Adam steps on ``pot``'s potential (learning rate ``learning_rate``,
    cosine-decayed to 1 %), all chains at once; deterministic (no key).

    Example:
        >>> import jax, numpy as np
        >>> import bnn_ppl as bp
        >>> from bnn_ppl.inference import full_batch_potential
        >>> from bnn_ppl.models import MLP
        >>> x = np.random.default_rng(0).normal(size=(50, 2)).astype(np.float32)
        >>> y = x @ np.array([1.0, -2.0], np.float32)
        >>> model = bp.BNN(MLP(hidden=(), out=1), bp.priors.Normal(10.0),
        ...     bp.likelihoods.Gaussian(0.1))
        >>> pot = full_batch_potential(model, x, y)
        >>> prior_draws = pot.init_params(jax.random.key(0), 3, method="prior")
        >>> starts = optimised_starts(pot, prior_draws, steps=500, learning_rate=0.05)
        >>> bool(np.all(starts.potential < starts.prior_potential))
        True
        >>> starts.record()["steps"], len(starts.record()["potential"])
        (500, 3)
    """
    fit = unconstrained_fitter(pot, default_optimizer(learning_rate, steps), steps, None)

    def one(u0: Any, data: Any) -> tuple[Any, jax.Array, jax.Array]:
        res = fit(jax.random.key(0), u0, data)  # (full batch: the key is not used)
        return res.params, pot.potential_fn_gen(data)(u0), res.final_loss

    params, before, after = jax.jit(jax.vmap(one, in_axes=(0, None)))(init, pot.data)
    after = np.asarray(after)
    bad = np.flatnonzero(~np.isfinite(after))
    if bad.size:
        raise FloatingPointError(
            f"the optimised starts of chain(s) {bad.tolist()} diverged (potential "
            f"{after[bad].tolist()} after {steps} Adam steps at learning rate {learning_rate}): "
            "lower init_learning_rate."
        )
    return Starts(params, np.asarray(before), after, int(steps), float(learning_rate))

"""The stopping rule of a reference run: have the test predictions converged?

Example:
    >>> import numpy as np
    >>> f = np.random.default_rng(0).normal(size=(4, 500, 10))
    >>> check_convergence(f)["converged"]
    True
"""

# Notes:
#
# :func:`check_convergence` takes the checked quantity's draws, ``(chains, draws, ...)``, and
# computes for each test quantity the rank-normalised split R-hat and the bulk ESS (Vehtari et al.
# 2021, through ArviZ). The rule is met when at least ``min_share`` of the quantities have R-hat
# <= ``max_rhat`` *and* at least ``min_share`` have bulk ESS >= ``min_ess`` (with ``parts``,
# within each part too: the means, the log densities and the noise sd). Quantities that take
# one value in every draw of every chain (a probability exactly 0 or 1 in float32) have no R-hat:
# they count as converged and are reported (``constant``). :class:`ConvergenceCheck` is one
# check's figures, as :func:`~bnn_ppl.inference.reference_hmc` records them after each segment.

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from bnn_ppl.config import ReferenceHMCConfig
from bnn_ppl.diagnostics.chain_health import ChainHealth
from bnn_ppl.diagnostics.summary import rhat_bulk_ess, unknown_as_failing, varying_values
from bnn_ppl.validation import InputValueError

if TYPE_CHECKING:  # annotations only (chains imports this module)
    from bnn_ppl.inference.reference.chains import Warmup

__all__ = [
    "ConvergenceCheck",
    "check_convergence",
    "describe_recipe",
    "quantity_figures",
    "Projection",
    "project_convergence",
    "committed_note",
    "not_converged_message",
]


class ConvergenceCheck(NamedTuple):
    """The figures of one check, after segment ``segment`` (1-based).

    ``draws`` per chain and ``gradients`` (leapfrog steps of the sampling phase, all chains)
    so far; ``seconds`` of wall time since the start; ``size`` test quantities, of which
    ``constant`` take a single value everywhere; ``share_rhat_ok`` / ``share_ess_ok``: the
    share with R-hat <= the threshold / bulk ESS >= the threshold; ``rhat_max`` (NaN when every
    quantity is constant), ``ess_bulk_min`` and ``ess_bulk_median`` over the others.
    """

    segment: int
    draws: int
    gradients: int
    seconds: float
    size: int
    constant: int
    rhat_max: float
    share_rhat_ok: float
    ess_bulk_min: float
    ess_bulk_median: float
    share_ess_ok: float
    converged: bool

    def describe(self) -> str:
        """One line of text."""
        return (
            f"segment {self.segment}: {self.draws} draws/chain, R-hat <= threshold for "
            f"{self.share_rhat_ok:.1%} of {self.size} (max {self.rhat_max:.3f}), bulk ESS >= "
            f"threshold for {self.share_ess_ok:.1%} (min {self.ess_bulk_min:.0f}, median "
            f"{self.ess_bulk_median:.0f}), {self.gradients} gradients, {self.seconds:.0f} s"
        )


def quantity_figures(values: Any) -> tuple[np.ndarray, np.ndarray, int]:
    """The R-hat and bulk ESS of every quantity of ``(chains, draws, ...)`` values that is not
    constant (flattened), and how many are constant (one value in every draw of every chain:
    no R-hat; the rule counts them as converged).

    >>> rhat, ess, constant = quantity_figures(np.zeros((4, 50, 3)))
    >>> rhat.size, constant
    (0, 3)
    """
    a = np.asarray(values)
    varying, index = varying_values(a)
    constant = int(np.prod(a.shape[2:], dtype=int)) - index.size
    if not index.size:
        return np.zeros(0), np.zeros(0), constant
    rhat, ess = rhat_bulk_ess(varying)
    return rhat, ess, constant


def check_convergence(
    values: Any,
    *,
    max_rhat: float = 1.01,
    min_share: float = 0.99,
    min_ess: float = 400.0,
    parts: Mapping[str, slice] | None = None,
) -> dict[str, Any]:
    """The stopping rule on ``(chains, draws, ...)`` values: the :class:`ConvergenceCheck`
    fields ``size``, ``constant``, ``rhat_max``, ``share_rhat_ok``, ``ess_bulk_min``,
    ``ess_bulk_median``, ``share_ess_ok`` and ``converged`` (see the module doc).

    ``parts`` (name -> slice of the flattened values, e.g. the means, the log densities and
    a learned noise sd of :func:`~bnn_ppl.diagnostics.function_values.quantity_parts`): the
    rule must then hold within *every* part as well, so that one value of its own (the noise
    sd) that has not mixed cannot hide among many that have.

    Example:
        >>> import numpy as np
        >>> f = np.random.default_rng(0).normal(size=(4, 500, 10))
        >>> r = check_convergence(f)
        >>> r["converged"], r["size"]
        (True, 10)
        >>> f[0] += 1.0  # one chain elsewhere
        >>> check_convergence(f)["converged"]
        False
    """
    c = ReferenceHMCConfig(max_rhat=max_rhat, min_share=min_share, min_ess=min_ess)
    a = np.asarray(values)
    rhat, ess, constant = quantity_figures(a)
    size = int(np.prod(a.shape[2:], dtype=int))
    # NaN R-hat or ESS (not computable) fails both comparisons: never counted as converged
    share_rhat = (int(np.sum(rhat <= c.max_rhat)) + constant) / size
    share_ess = (int(np.sum(ess >= c.min_ess)) + constant) / size
    converged = share_rhat >= c.min_share and share_ess >= c.min_share
    if parts and converged:
        flat = a.reshape(*a.shape[:2], -1)
        rule = {"max_rhat": max_rhat, "min_share": min_share, "min_ess": min_ess}
        converged = all(check_convergence(flat[..., s], **rule)["converged"]
                        for s in parts.values())  # fmt: skip
    return {
        "size": size,
        "constant": constant,
        "rhat_max": float(np.max(rhat)) if rhat.size else math.nan,
        "share_rhat_ok": share_rhat,
        "ess_bulk_min": float(np.min(ess)) if ess.size else math.nan,
        "ess_bulk_median": float(np.median(ess)) if ess.size else math.nan,
        "share_ess_ok": share_ess,
        "converged": converged,
    }


def describe_recipe(c: ReferenceHMCConfig) -> str:
    """The reference recipe of ``c`` in one line (what a script prints above its results).

    >>> describe_recipe(ReferenceHMCConfig(max_seconds=300))[:47]
    '4 chains from prior draws, 500 warmup, segments'
    """
    what = "predictions" if c.quantity is None else f"{c.quantity!r} values"
    budget = "" if c.max_seconds is None else f" or {c.max_seconds:g} s"
    burn = f" (each chain's first {c.burn_in:.0%} left out)" if c.burn_in else ""
    return (f"{c.num_chains} chains from prior draws, {c.num_warmup} warmup, segments of "
            f"{c.segment_draws} draws until >= {c.min_share:.0%} of the test {what}{burn} have "
            f"R-hat <= {c.max_rhat:g} and bulk ESS >= {c.min_ess:g}, at most {c.max_draws} "
            f"draws/chain{budget}")  # fmt: skip


# -------------------- projection
# How far a reference run is from its stopping rule: the draws it would need at its rate.
#
# A run that stops at its budget says it did not converge; a user then needs to know what budget
# would do. :func:`project_convergence` answers from the draws the run has: for chains that mix
# (no chain apart, none stuck) the variance of a chain's mean falls as ``1/n``, so for every test
# quantity
#
# * the bulk ESS grows in proportion to the draws: ``n · min_ess / ess`` draws reach ``min_ess``;
# * ``R-hat² - 1`` (the between-chain share of the variance of split chains, ``(τ - 1)/n'`` for an
#   integrated autocorrelation time ``τ``) falls as ``1/n``: ``n · (R̂² - 1) / (max_rhat² - 1)``
#   draws reach ``max_rhat``.
#
# The rule needs ``min_share`` of the quantities to pass, so the projection takes the quantity at
# that quantile (the ``k + 1``-th worst, where ``k`` may fail), for R-hat and for ESS, and the
# larger of the two. With ``burn_in`` the kept draws are a share of the chain, so the chain needs
# ``kept / (1 - burn_in)`` draws. The projection is made twice, from all kept draws and from the
# first half of them (:class:`Projection` ``draws_needed`` and ``draws_needed_at_half``): where
# the chains cross between regions of function space rarely, each longer look finds slower
# mixing and the projection grows with the chains - then it is unstable and may grow further,
# and says so (``growing``; on converged yacht runs read back early it also flagged two
# overestimates: it says the estimate is unstable, not which way).

# a projection from all kept draws this much above the one from their first half is "growing"
GROWTH = 1.5
# a projection beyond this many times the draws so far is an order of magnitude, not a budget
FAR = 10.0


class Projection(NamedTuple):
    """Draws per chain (burn-in included) at which the stopping rule would be met.

    ``draws``: per chain now; ``draws_for_rhat`` / ``draws_for_ess``: what R-hat / ESS alone
    need; ``draws_needed``: the larger (``draws`` when the rule is met); ``draws_needed_at_half``:
    the same projection from the first half of the kept draws (NaN when too few);
    ``growing``: the rule not met and ``draws_needed`` above :data:`GROWTH` times that (the
    chains keep finding slower mixing: unstable). ``gradients_needed`` and
    ``seconds_needed`` scale the run's own gradients and sampling time per draw (NaN when not
    given).
    """

    draws: int
    draws_for_rhat: float
    draws_for_ess: float
    draws_needed: float
    draws_needed_at_half: float
    growing: bool
    gradients_needed: float
    seconds_needed: float

    def describe(self) -> str:
        """One line of text."""
        extra = ""
        if math.isfinite(self.gradients_needed):
            extra += f", {self.gradients_needed:.3g} gradients"
        if math.isfinite(self.seconds_needed):
            extra += f", ~{self.seconds_needed / 3600:.3g} h of sampling at this run's pace"
        text = (f"at this run's rate the rule would be met after about "
                f"{self.draws_needed:,.0f} draws per chain{extra} (R-hat needs "
                f"{self.draws_for_rhat:,.0f}, bulk ESS {self.draws_for_ess:,.0f})")  # fmt: skip
        factor = self.draws_needed / self.draws
        if factor > FAR:
            text += f"; an extrapolation over a factor of {factor:.0f}: an order of magnitude"
        if self.growing:
            text += (f"; unstable: from the first half of the kept draws it was "
                     f"{self.draws_needed_at_half:,.0f}, so longer looks found slower mixing "
                     "(rare crossings between regions of function space?) and it may grow "
                     "further")  # fmt: skip
        return text


def _needed(values: np.ndarray, c: ReferenceHMCConfig) -> tuple[float, float]:
    """Kept draws per chain that R-hat and ESS each need, from ``(chains, n, q)`` kept values."""
    n = values.shape[1]
    rhat, ess, _ = quantity_figures(values)
    if not rhat.size:  # every quantity constant: converged
        return float(n), float(n)
    # the rule lets floor((1 - min_share) * size) quantities fail (constant ones pass)
    fail = int(math.floor((1 - c.min_share) * values.shape[-1] + 1e-9))
    rhat, ess = unknown_as_failing(rhat, ess)
    r = np.sort(rhat)[::-1][min(fail, rhat.size - 1)]
    e = np.sort(ess)[min(fail, ess.size - 1)]
    for_rhat = n * max(1.0, (r**2 - 1) / (c.max_rhat**2 - 1)) if r > c.max_rhat else n
    for_ess = n * max(1.0, c.min_ess / e) if e > 0 else math.inf
    return float(for_rhat), float(for_ess)


def project_convergence(
    values: Any,
    *,
    burn_in: float = 0.0,
    max_rhat: float = 1.01,
    min_share: float = 0.99,
    min_ess: float = 400.0,
    gradients_per_draw: float = math.nan,
    seconds_per_draw: float = math.nan,
) -> Projection:
    """Project the draws per chain at which the stopping rule would be met (module doc).

    ``values``: the checked quantity's *kept* draws, ``(chains, draws, ...)`` (after the
    burn-in); ``burn_in``: the share of each chain left out before them, so that the
    projection counts whole chains; the thresholds are the rule's
    (:func:`~bnn_ppl.inference.reference.stopping.check_convergence`). ``gradients_per_draw`` and
    ``seconds_per_draw`` (all chains, sampling phase) turn the draws into gradients and time.
    Valid for chains that mix; chains apart in log posterior or stuck need a fix, not draws.

    Example:
        >>> import numpy as np
        >>> rng = np.random.default_rng(0)
        >>> def ar1(n, rho=0.9):  # 4 chains, 50 quantities, autocorrelation time (1+rho)/(1-rho)
        ...     e = rng.normal(size=(4, n, 50))
        ...     x = np.zeros_like(e)
        ...     x[:, 0] = e[:, 0]
        ...     for t in range(1, n):
        ...         x[:, t] = rho * x[:, t - 1] + np.sqrt(1 - rho**2) * e[:, t]
        ...     return x
        >>> p = project_convergence(ar1(400))
        >>> 1000 < p.draws_needed < 5000   # 400 bulk ESS needs ~1,900 draws per chain here
        True
    """
    c = ReferenceHMCConfig(max_rhat=max_rhat, min_share=min_share, min_ess=min_ess,
                           burn_in=burn_in)  # fmt: skip
    a = np.asarray(values)
    if a.ndim < 2 or a.shape[0] < 2 or a.shape[1] < 8:
        raise InputValueError(
            f"values must be (chains >= 2, draws >= 8, ...), got shape {a.shape}: pass the "
            "checked quantity's kept draws of at least two chains."
        )
    a = a.reshape(*a.shape[:2], -1)
    kept = a.shape[1]
    whole = 1.0 / (1.0 - c.burn_in)  # chain draws per kept draw
    for_rhat, for_ess = (whole * x for x in _needed(a, c))
    needed = max(for_rhat, for_ess)
    draws = int(round(kept * whole))
    half = math.nan
    if kept >= 16:  # the same projection from the first half of the kept draws
        half = whole * max(_needed(a[:, : kept // 2], c))
    return Projection(
        draws=draws,
        draws_for_rhat=for_rhat,
        draws_for_ess=for_ess,
        draws_needed=needed,
        draws_needed_at_half=half,
        growing=bool(math.isfinite(half) and needed > max(draws, GROWTH * half)),
        gradients_needed=needed * gradients_per_draw,
        seconds_needed=needed * seconds_per_draw,
    )


def project_run(values: Any, checks: Any, config: ReferenceHMCConfig) -> Projection:
    """:func:`project_convergence` for a reference run: its kept ``values``, its
    :class:`~bnn_ppl.inference.reference.stopping.ConvergenceCheck` list (for its gradients per draw
    and its sampling time per draw between the first and the last check) and its config."""
    last = checks[-1]
    first = checks[0]
    per_draw = math.nan
    if last.draws > first.draws:
        per_draw = (last.seconds - first.seconds) / (last.draws - first.draws)
    return project_convergence(values, burn_in=config.burn_in, max_rhat=config.max_rhat,
                               min_share=config.min_share, min_ess=config.min_ess,
                               gradients_per_draw=last.gradients / last.draws,
                               seconds_per_draw=per_draw)  # fmt: skip


# -------------------- messages
# What a reference run says when it stops before its rule is met.
#
# :func:`not_converged_message` is the text of
# :class:`~bnn_ppl.inference.ReferenceNotConvergedWarning`: the last check's figures against
# the rule, then the most specific reason and fix the record supports - warmup cut short by the
# budget, a chain that does not move (rerun: the step size is fixed after warmup), chains at
# different levels (and whether a noise-scale funnel explains it), or, for mixing chains, the
# budget the rule would need (:mod:`bnn_ppl.inference.reference.stopping`).

def not_converged_message(c: ReferenceHMCConfig, reason: str, warm: Warmup,
                          checks: list[ConvergenceCheck], health: list[ChainHealth],
                          quantity: str, apart: str | None, funnel: str | None = None,
                          note: str | None = None,
                          projection: Projection | None = None,
                          resumed_after: int | None = None,
                          lags: str | None = None) -> str:  # fmt: skip
    """The text of the :class:`ReferenceNotConvergedWarning` (``note``: the kernel's, e.g. a
    stalled tempering ladder; ``projection``: the draws the rule would need;
    ``resumed_after``: the checkpoint segment a resumed run continued after, for the budget's
    note; ``lags``: :func:`~bnn_ppl.diagnostics.slow_values.describe_laggards`'s sentence)."""
    if warm.cut_short:
        return (
            f"reference_hmc stopped at its budget (max_seconds={c.max_seconds}) during warmup: "
            f"{warm.warmup_done} of {c.num_warmup} warmup iterations in {warm.seconds:.0f} s, "
            "no draw sampled. The draws returned are warmup's last segment, not a posterior "
            "sample: raise max_seconds or lower num_warmup."
        )
    head = (f"reference_hmc stopped ({reason}) before converging: {checks[-1].describe()}; "
            f"needed R-hat <= {c.max_rhat} and bulk ESS >= {c.min_ess} for {c.min_share:.0%} "
            f"of the {quantity!r} values. ")  # fmt: skip
    head += f"{note} " if note else ""
    head += f"{lags} " if lags else ""
    if reason == "chains_not_moving":
        bad = "; ".join(f"chain {h.chain}: {', '.join(h.problems)}" for h in health if not h.moving)
        fix = ("another seed or a longer warmup" if c.init_steps or c.tempering else
               "init_steps (each prior draw optimised before warmup, for starts too far out "
               "for warmup to bring in), another seed or a longer warmup")  # fmt: skip
        return head + (f"Not every chain moves ({bad}); the step size is fixed after warmup, so "
                       f"more draws will not fix that: rerun with {fix}.")  # fmt: skip
    if apart and funnel:
        return head + (f"The chains are not at one level: {apart}. Why: {funnel} (README, "
                       "'Reference posteriors').")  # fmt: skip
    if apart:
        return head + (f"The chains are not at one level: {apart} (not samples of one "
                       "distribution; more draws will not fix that - see README, 'Reference "
                       "posteriors').")  # fmt: skip
    budget = committed_note(c, checks, warm, resumed_after) if reason == "max_seconds" else ""
    if projection is not None:
        return head + f"Raise max_draws / max_seconds: {projection.describe()}." + budget
    return head + "Raise max_draws / max_seconds." + budget


def committed_note(c: ReferenceHMCConfig, checks: list[ConvergenceCheck], warm: Warmup,
                   resumed_after: int | None) -> str:  # fmt: skip
    """For a resumed checkpointed run stopped by ``max_seconds``: the time earlier calls
    committed, which counts against the budget (a rerun replays the same decisions), and the
    ``max_seconds`` that gives this many seconds more. Empty otherwise.

    Example:
        >>> from bnn_ppl.config import ReferenceHMCConfig
        >>> from bnn_ppl.inference.reference.chains import Warmup
        >>> from bnn_ppl.inference.reference.stopping import ConvergenceCheck
        >>> check = ConvergenceCheck(1, 500, 10_000, 8_000.0, 3, 0, 1.05, 0.5, 50.0, 200.0, 0.6,
        ...                          False)
        >>> c = ReferenceHMCConfig(max_seconds=8_100)
        >>> print(committed_note(c, [check], Warmup(100, False, 60.0), resumed_after=1))
         max_seconds=8100 is the whole run's budget: the 8,000 s committed by earlier calls on
        this checkpoint_dir (warmup and 1 segment(s)) count against it, so this call had 100 s;
        for S more seconds pass max_seconds=8000 + S.
        >>> committed_note(c, [check], Warmup(100, False, 60.0), resumed_after=None)
        ''
    """
    if resumed_after is None or c.max_seconds is None:
        return ""
    done = min(resumed_after, len(checks))  # (a smaller budget stops before the last commit)
    before = checks[done - 1].seconds if done else warm.seconds
    return (f" max_seconds={c.max_seconds:g} is the whole run's budget: the {before:,.0f} s "
            f"committed by earlier calls on this checkpoint_dir (warmup and {done} "
            f"segment(s)) count against it, so this call had "
            f"{max(0.0, c.max_seconds - before):,.0f} s; for S more seconds pass "
            f"max_seconds={before:.0f} + S.")  # fmt: skip

"""What a reference run says when it stops before its rule is met.

:func:`not_converged_message` is the text of
:class:`~bnn_ppl.inference.ReferenceNotConvergedWarning`: the last check's figures against
the rule, then the most specific reason and fix the record supports - warmup cut short by the
budget, a chain that does not move (rerun: the step size is fixed after warmup), chains at
different levels (and whether a noise-scale funnel explains it), or, for mixing chains, the
budget the rule would need (:mod:`bnn_ppl.inference.projection`).
"""

from __future__ import annotations

from bnn_ppl.chain_health import ChainHealth
from bnn_ppl.config import ReferenceHMCConfig
from bnn_ppl.inference.projection import Projection
from bnn_ppl.inference.reference_chains import Warmup
from bnn_ppl.inference.stopping_rule import ConvergenceCheck

__all__ = ["committed_note", "not_converged_message"]


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
    note; ``lags``: :func:`~bnn_ppl.slow_values.describe_laggards`'s sentence)."""
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
        >>> from bnn_ppl.inference.reference_chains import Warmup
        >>> from bnn_ppl.inference.stopping_rule import ConvergenceCheck
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

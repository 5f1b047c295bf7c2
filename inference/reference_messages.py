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

__all__ = ["not_converged_message"]


def not_converged_message(c: ReferenceHMCConfig, reason: str, warm: Warmup,
                          checks: list[ConvergenceCheck], health: list[ChainHealth],
                          quantity: str, apart: str | None, funnel: str | None = None,
                          note: str | None = None,
                          projection: Projection | None = None) -> str:  # fmt: skip
    """The text of the :class:`ReferenceNotConvergedWarning` (``note``: the kernel's, e.g. a
    stalled tempering ladder; ``projection``: the draws the rule would need)."""
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
    if projection is not None:
        return head + f"Raise max_draws / max_seconds: {projection.describe()}."
    return head + "Raise max_draws / max_seconds."

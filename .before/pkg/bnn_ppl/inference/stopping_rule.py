"""The stopping rule of a reference run: have the test predictions converged?

:func:`check_convergence` takes the checked quantity's draws, ``(chains, draws, ...)``, and
computes for each test quantity the rank-normalised split R-hat and the bulk ESS (Vehtari et al.
2021, through ArviZ). The rule is met when at least ``min_share`` of the quantities have R-hat
<= ``max_rhat`` *and* at least ``min_share`` have bulk ESS >= ``min_ess``. Quantities that take
one value in every draw of every chain (a probability exactly 0 or 1 in float32) have no R-hat:
they count as converged and are reported (``constant``). :class:`ConvergenceCheck` is one
check's figures, as :func:`~bnn_ppl.inference.reference_hmc` records them after each segment.

Example:
    >>> import numpy as np
    >>> f = np.random.default_rng(0).normal(size=(4, 500, 10))
    >>> check_convergence(f)["converged"]
    True
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from bnn_ppl.config import ReferenceHMCConfig
from bnn_ppl.diagnostics import rhat_bulk_ess, varying_values

__all__ = ["ConvergenceCheck", "check_convergence", "describe_recipe", "quantity_figures"]


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
    values: Any, *, max_rhat: float = 1.01, min_share: float = 0.99, min_ess: float = 400.0
) -> dict[str, Any]:
    """The stopping rule on ``(chains, draws, ...)`` values: the :class:`ConvergenceCheck`
    fields ``size``, ``constant``, ``rhat_max``, ``share_rhat_ok``, ``ess_bulk_min``,
    ``ess_bulk_median``, ``share_ess_ok`` and ``converged`` (see the module doc).

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
    return {
        "size": size,
        "constant": constant,
        "rhat_max": float(np.max(rhat)) if rhat.size else math.nan,
        "share_rhat_ok": share_rhat,
        "ess_bulk_min": float(np.min(ess)) if ess.size else math.nan,
        "ess_bulk_median": float(np.median(ess)) if ess.size else math.nan,
        "share_ess_ok": share_ess,
        "converged": share_rhat >= c.min_share and share_ess >= c.min_share,
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

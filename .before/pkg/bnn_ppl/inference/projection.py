"""How far a reference run is from its stopping rule: the draws it would need at its rate.

A run that stops at its budget says it did not converge; a user then needs to know what budget
would do. :func:`project_convergence` answers from the draws the run has: for chains that mix
(no chain apart, none stuck) the variance of a chain's mean falls as ``1/n``, so for every test
quantity

* the bulk ESS grows in proportion to the draws: ``n · min_ess / ess`` draws reach ``min_ess``;
* ``R-hat² - 1`` (the between-chain share of the variance of split chains, ``(τ - 1)/n'`` for an
  integrated autocorrelation time ``τ``) falls as ``1/n``: ``n · (R̂² - 1) / (max_rhat² - 1)``
  draws reach ``max_rhat``.

The rule needs ``min_share`` of the quantities to pass, so the projection takes the quantity at
that quantile (the ``k + 1``-th worst, where ``k`` may fail), for R-hat and for ESS, and the
larger of the two. With ``burn_in`` the kept draws are a share of the chain, so the chain needs
``kept / (1 - burn_in)`` draws. The projection is made twice, from all kept draws and from the
first half of them (:class:`Projection` ``draws_needed`` and ``draws_needed_at_half``): where
the chains cross between regions of function space rarely, each longer look finds slower
mixing and the projection grows with the chains - then it is unstable and may grow further,
and says so (``growing``; on converged yacht runs read back early it also flagged two
overestimates: it says the estimate is unstable, not which way).

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

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from bnn_ppl.config import ReferenceHMCConfig
from bnn_ppl.diagnostics import unknown_as_failing
from bnn_ppl.inference.stopping_rule import quantity_figures
from bnn_ppl.validation import InputValueError

__all__ = ["Projection", "project_convergence"]

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
    (:func:`~bnn_ppl.inference.stopping_rule.check_convergence`). ``gradients_per_draw`` and
    ``seconds_per_draw`` (all chains, sampling phase) turn the draws into gradients and time.
    Valid for chains that mix; chains apart in log posterior or stuck need a fix, not draws.
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
    :class:`~bnn_ppl.inference.stopping_rule.ConvergenceCheck` list (for its gradients per draw
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

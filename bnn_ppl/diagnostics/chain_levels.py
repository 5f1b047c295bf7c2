"""Are the chains at the same log-posterior level? A per-chain report of where each chain sits."""

# Notes:
#
# Chains that sample one distribution have the same distribution of the log posterior density
# ``lp``: their mean ``lp`` differs by little more than its Monte Carlo error. Chains that sit
# tens of nats apart (each in its own mode, or some still climbing out of the prior) are not
# samples of one distribution, however many draws they add; a function-space R-hat far above 1
# says *that* they disagree, this says *how*. :func:`chain_levels` reports, per chain:
#
# * ``lp_mean`` and ``lp_sd``: the chain's mean and standard deviation of ``lp``;
# * ``gap``: how far the chain's mean ``lp`` is below the highest chain's, in nats, and
#   ``gap_sd``: the same in units of the typical within-chain standard deviation (the median
#   over chains: a climbing chain's own spread, inflated by its trend, does not hide it);
# * ``drift_sd``: the mean ``lp`` of the chain's second half of draws minus its first half, in
#   the same units: a chain still climbing (warmup too short, or the chain not yet in the
#   typical set) has a drift well above 0.
#
# On chains that sample one posterior both are Monte Carlo error, ~``1/sqrt(ESS)``: 4 x 1000
# HMC draws of the conjugate regression (ESS > 200 per chain) give gaps and drifts below 0.2,
# a tenth of the default threshold of 2 (``tests/test_chain_levels.py``).
#
# :func:`describe_levels` turns the chains that are more than ``threshold`` standard deviations
# apart or drifting into one line of text (``None`` when there are none);
# :func:`bnn_ppl.inference.reference_hmc` puts both into its record and its not-converged warning.

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from bnn_ppl.validation import InputValueError

__all__ = ["ChainLevel", "chain_levels", "describe_levels"]


class ChainLevel(NamedTuple):
    """One chain's log-posterior level (see the module doc)."""

    chain: int
    lp_mean: float
    lp_sd: float
    gap: float
    gap_sd: float
    drift_sd: float


def chain_levels(lp: Any) -> list[ChainLevel]:
    """Per-chain level of ``lp``, ``(chains, draws)`` log posterior densities (ArviZ's ``lp``
    sample statistic, ``-potential_energy``), at least 2 draws per chain.

    Example:
        >>> import numpy as np
        >>> from bnn_ppl.diagnostics.chain_levels import chain_levels, describe_levels
        >>> rng = np.random.default_rng(0)
        >>> lp = rng.normal(size=(3, 400)) * 10.0
        >>> lp[2] -= 300.0                                  # chain 2 in a worse mode
        >>> [round(c.gap) for c in chain_levels(lp)]
        [0, 0, 300]
        >>> describe_levels(chain_levels(lp))
        'chain 2 sits 300 nats (30.1 within-chain sd) below chain 1 in log posterior'
    """
    a = np.asarray(lp, np.float64)
    if a.ndim != 2 or a.shape[1] < 2:
        raise InputValueError(
            f"lp must have shape (chains, draws) with at least 2 draws, got {a.shape}: pass "
            "posterior.sample_stats['lp']."
        )
    mean, sd = a.mean(axis=1), a.std(axis=1, ddof=1)
    # the typical chain's sd, not the root-mean-square: a chain still climbing has a spread
    # inflated by its own trend, which would otherwise hide that trend (and the others' gaps)
    typical = float(np.median(sd))
    typical = typical if typical > 0 else 1.0  # frozen chains: report the gaps in nats
    half = a.shape[1] // 2
    drift = (a[:, half:].mean(axis=1) - a[:, :half].mean(axis=1)) / typical
    gap = mean.max() - mean
    return [ChainLevel(c, float(mean[c]), float(sd[c]), float(gap[c]), float(gap[c] / typical),
                       float(drift[c])) for c in range(a.shape[0])]  # fmt: skip


def describe_levels(levels: list[ChainLevel], threshold: float = 2.0) -> str | None:
    """One line naming the chains more than ``threshold`` typical within-chain sds below the
    highest chain, or drifting by more than that between their halves; ``None`` if none."""
    best = max(levels, key=lambda c: c.lp_mean).chain
    parts = [f"chain {c.chain} sits {c.gap:.0f} nats ({c.gap_sd:.1f} within-chain sd) below "
             f"chain {best} in log posterior" for c in levels if c.gap_sd > threshold]  # fmt: skip
    drifting = [c for c in levels if abs(c.drift_sd) > threshold]
    if drifting:
        parts.append(
            "still drifting (second half minus first half of the draws, in within-chain sd): "
            + ", ".join(f"chain {c.chain} {c.drift_sd:+.1f}" for c in drifting)
        )
    return "; ".join(parts) or None

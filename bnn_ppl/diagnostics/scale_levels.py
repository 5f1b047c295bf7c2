"""Do the chains sit at different noise scales? The funnel behind chains hundreds of nats apart."""

# Notes:
#
# A regression BNN with a learned Gaussian noise scale ``σ`` (``bp.likelihoods.Gaussian()`` with a
# prior) has, for a fixed ``σ``, a likelihood part of the log posterior of about
# ``-N log σ - SSE/(2σ²)``, and a chain at equilibrium around that ``σ`` keeps ``SSE/σ²`` near its
# typical value, so its mean ``lp`` is ``-N log σ`` plus terms that barely depend on ``σ``. A
# network that can fit its ``N`` training rows ever more closely (a 50-unit MLP on UCI yacht's 277
# rows) gives a posterior in which ``σ`` can shrink together with the residuals: a funnel. HMC
# adapts one step size to the curvature ``~1/σ²`` where each chain happens to be, and moves along
# the funnel very slowly, so chains from dispersed starts settle at *different* noise scales and
# their mean ``lp`` differs by ``N · Δ log σ`` — 180 nats for a factor 1.9 in ``σ`` on yacht — which
# :func:`bnn_ppl.diagnostics.chain_levels.chain_levels` reports as chains far apart. They are not
# in separate
# modes of the network; they are at different heights of one funnel.
#
# :func:`scale_levels` reports, per chain and per positive scalar site (``"noise_scale"`` by
# default), the mean and sd of ``log σ`` and ``scale_gap``: the nats of log posterior that the
# chain's ``σ`` accounts for below the highest chain, ``(N / T) · (mean log σ_c - mean log σ_best)``
# (``N / T``: the likelihood's weight, rows over temperature). :func:`describe_scale_levels` says,
# for the chains that sit apart, how much of their gap that explains; ``reference_hmc`` adds both
# to its record (``scale_levels``, ``scale_funnel``) and its not-converged warning.

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from bnn_ppl.diagnostics.chain_levels import ChainLevel
from bnn_ppl.validation import InputValueError

__all__ = ["ScaleLevel", "describe_scale_levels", "scale_levels"]

EXPLAINED = 0.5
"""A chain's gap counts as the funnel's when ``scale_gap`` accounts for at least this share."""


class ScaleLevel(NamedTuple):
    """One chain's level of one scale site (see the module doc)."""

    chain: int
    site: str
    log_mean: float
    log_sd: float
    scale_gap: float


def scale_levels(
    samples: Mapping[str, Any], lp: Any, *, weight: float, sites: Sequence[str] = ("noise_scale",)
) -> list[ScaleLevel]:
    """Per chain, the level of each of ``sites`` found in ``samples`` (``(chains, draws)`` or
    ``(chains, draws, 1)`` positive draws) and the nats of ``lp`` (``(chains, draws)``) that it
    accounts for below the highest chain, with ``weight`` the likelihood's weight ``N / T``.
    Sites absent from ``samples`` (a fixed noise scale) give no rows.

    Example:
        >>> import numpy as np
        >>> from bnn_ppl.diagnostics.chain_levels import chain_levels
        >>> from bnn_ppl.diagnostics.scale_levels import describe_scale_levels, scale_levels
        >>> rng = np.random.default_rng(0)
        >>> log_s = np.array([-5.5, -5.3, -4.9])[:, None] + 0.05 * rng.normal(size=(3, 400))
        >>> lp = -277 * log_s + 10 * rng.normal(size=(3, 400))  # lp follows -N log(sigma)
        >>> levels = scale_levels({"noise_scale": np.exp(log_s)}, lp, weight=277)
        >>> [round(s.scale_gap) for s in levels]
        [0, 56, 166]
        >>> describe_scale_levels(levels, chain_levels(lp))[:60]
        'the chains sit at different noise_scale: chain 0 0.00408, ch'
    """
    if not weight > 0:
        raise InputValueError(f"weight must be > 0 (rows over temperature), got {weight}.")
    lp = np.asarray(lp, np.float64)
    best = int(np.argmax(lp.mean(axis=1)))
    rows = []
    for site in sites:
        if site not in samples:
            continue
        s = np.asarray(samples[site], np.float64)
        s = s.reshape(s.shape[:2] + (-1,))
        if s.shape[:2] != lp.shape or s.shape[2] != 1 or not np.all(s > 0):
            raise InputValueError(
                f"samples[{site!r}] must be positive scalar draws of shape {lp.shape} like lp, "
                f"got {np.shape(samples[site])}."
            )
        log_s = np.log(s[..., 0])
        mean, sd = log_s.mean(axis=1), log_s.std(axis=1, ddof=1)
        gap = weight * (mean - mean[best])
        rows += [ScaleLevel(c, site, float(mean[c]), float(sd[c]), float(gap[c]))
                 for c in range(len(mean))]  # fmt: skip
    return rows


def describe_scale_levels(
    scales: list[ScaleLevel], levels: list[ChainLevel], threshold: float = 2.0
) -> str | None:
    """One line saying that the chains more than ``threshold`` within-chain sds apart in ``lp``
    sit at different scales that account for most of their gap, or ``None`` when no such chain's
    gap is mostly (``EXPLAINED``) the scale's."""
    apart = [c for c in levels if c.gap_sd > threshold]
    out = []
    for site in dict.fromkeys(s.site for s in scales):
        rows = {s.chain: s for s in scales if s.site == site}
        explained = [c for c in apart if rows[c.chain].scale_gap >= EXPLAINED * c.gap]
        if not explained:
            continue
        values = ", ".join(f"chain {c} {np.exp(r.log_mean):.3g}" for c, r in rows.items())
        gaps = ", ".join(f"{rows[c.chain].scale_gap:.0f} of chain {c.chain}'s {c.gap:.0f}"
                         for c in explained)  # fmt: skip
        out.append(
            f"the chains sit at different {site}: {values} (geometric means); N/T times the "
            f"difference in log {site} accounts for {gaps} nats of gap: the chains are at "
            f"different heights of one funnel in {site} (a network that fits its training rows "
            f"ever closer as {site} shrinks), not in separate modes - fix it (e.g. "
            "Gaussian(scale=...)), give it an informative prior, or use ParallelTempering"
        )
    return "; ".join(out) or None

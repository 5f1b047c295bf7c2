"""Which test values hold a set of chains back, and which chain disagrees on them."""

# Notes:
#
# The stopping rule (:mod:`bnn_ppl.inference.reference.stopping`) reports shares: "94 % of the 103
# predictive means have R-hat <= 1.01". A user deciding what to do next needs the rest: *which*
# quantities fail, by how much, and whether one chain is the odd one out on them. A single
# chain furthest from the others on most failing quantities is a chain in another region of
# function space that has not yet crossed back (more draws, or another seed if it never does);
# failing quantities with no common chain are slow mixing everywhere (more draws, or a better
# metric).
#
# :func:`laggards` lists every non-constant quantity that fails either threshold, worst first
# by the factor of draws it would need (the larger of ``(R̂² - 1) / (max_rhat² - 1)`` and
# ``min_ess / ess``, as :mod:`bnn_ppl.inference.reference.stopping` projects), each with the chain
# whose
# mean is furthest from the mean of the other chains, in units of the quantity's pooled standard
# deviation, and whether that chain stayed *apart* all along: its mean beyond every other chain's
# in each of :data:`BLOCKS` consecutive blocks of the draws. A mixing chain's block means
# interleave with the others' (for exchangeable blocks, all ten of one chain beyond all thirty
# of three others has probability 1 in C(40, 10) ≈ 10⁹); a chain apart in every block has not
# crossed into the others' region of function space in the draws checked, and more draws of
# the same length may not fix that. :func:`describe_laggards` says it in one sentence.

from __future__ import annotations

from collections import Counter
from typing import Any, NamedTuple

import numpy as np

from bnn_ppl.diagnostics.summary import rhat_bulk_ess, unknown_as_failing, varying_values
from bnn_ppl.validation import InputValueError

__all__ = ["LISTED", "Laggard", "describe_laggards", "laggards"]

SHOWN = 5  # quantities named in the sentence
BLOCKS = 10
"""Consecutive blocks of the draws in which a chain must be apart for :attr:`Laggard.apart`."""
LISTED = 20
"""How many failing values (the worst) a record lists: a reference run's ``"laggards"``,
``bnn-ppl evaluate``'s ``evaluation.json``."""


class Laggard(NamedTuple):
    """One quantity that fails the rule: its ``index`` in the quantity's shape (the test row,
    and the class for probabilities), ``rhat`` and ``ess_bulk``, ``factor`` (the draws it
    would need, as a multiple of the draws checked), and ``chain``, the chain whose mean is
    furthest from the other chains' mean, ``offset`` of it in pooled standard deviations, and
    ``apart``: in each of :data:`BLOCKS` consecutive blocks of the draws that chain's mean lay
    beyond (on the offset's side of) every other chain's block mean (False with fewer than two
    draws per block)."""

    index: tuple[int, ...]
    rhat: float
    ess_bulk: float
    factor: float
    chain: int
    offset: float
    apart: bool


def laggards(values: Any, *, max_rhat: float = 1.01, min_ess: float = 400.0,
             limit: int | None = None) -> list[Laggard]:  # fmt: skip
    """The quantities of ``(chains, draws, ...)`` ``values`` that fail ``max_rhat`` or
    ``min_ess``, worst first (module doc); at most ``limit`` of them. Constant quantities (one
    value everywhere) never fail, as in the rule.

    Example:
        >>> import numpy as np
        >>> f = np.random.default_rng(0).normal(size=(4, 500, 3, 2))
        >>> f[2, :, 1, 0] += 0.5  # chain 2 elsewhere on one quantity
        >>> [(lag.index, lag.chain, round(lag.offset, 1), lag.apart) for lag in laggards(f)]
        [((1, 0), 2, 0.5, True)]
        >>> print(describe_laggards(laggards(f), size=6))
        1 of 6 values fail R-hat <= 1.01 or bulk ESS >= 400: [1, 0] (R-hat 1.03, bulk ESS ...,
        chain 2 at +0.5 sd from the others, apart in every block); chain 2 is the furthest from the
        others on 1 of 1, and apart from them in every tenth of the draws on 1 (it has not crossed
        to their region there: more draws may not fix that).
    """
    a = np.asarray(values, dtype=np.float64)
    if a.ndim < 2 or a.shape[0] < 2:
        raise InputValueError(
            f"values must be (chains >= 2, draws, ...), got shape {a.shape}: R-hat and the odd "
            "chain out need at least two chains."
        )
    f, varying = varying_values(a)  # constant values never fail, as in the rule
    if not varying.size:
        return []
    rhat, ess = unknown_as_failing(*rhat_bulk_ess(f))
    factor = np.maximum((rhat**2 - 1) / (max_rhat**2 - 1), min_ess / np.maximum(ess, 1e-300))
    bad = np.flatnonzero((rhat > max_rhat) | (ess < min_ess))
    bad = bad[np.argsort(-factor[bad], kind="stable")][:limit]
    means, sd = f.mean(axis=1), f.reshape(-1, f.shape[-1]).std(axis=0)  # (chains, q), (q,)
    k = a.shape[0]
    others = (means.sum(axis=0) - means) / (k - 1)  # each chain's "rest"
    offsets = (means - others) / np.where(sd > 0, sd, 1.0)
    shape, per = a.shape[2:], f.shape[1] // BLOCKS
    blocks = f[:, : per * BLOCKS].reshape(k, BLOCKS, per, -1).mean(axis=2) if per >= 2 else None
    out = []
    for q in bad:
        chain = int(np.argmax(np.abs(offsets[:, q])))
        index = tuple(int(i) for i in np.unravel_index(varying[q], shape)) if shape else ()
        apart = False
        if blocks is not None:  # the chain's every block mean beyond every other chain's
            side = np.sign(offsets[chain, q]) * blocks[:, :, q]
            apart = bool(side[chain].min() > np.delete(side, chain, axis=0).max())
        out.append(Laggard(index, float(rhat[q]), float(ess[q]), float(factor[q]), chain,
                           float(offsets[chain, q]), apart))  # fmt: skip
    return out


def _rhat_text(rhat: float) -> str:
    """Two decimals, as R-hat near 1 needs; three figures (``inf`` too) for chains far apart."""
    return f"{rhat:.2f}" if rhat < 100 else f"{rhat:.3g}"


def describe_laggards(lags: list[Laggard], size: int, *, max_rhat: float = 1.01,
                      min_ess: float = 400.0) -> str:  # fmt: skip
    """One sentence on ``lags`` (all of a run's failing quantities, from :func:`laggards`) out
    of ``size`` quantities: how many fail, the worst few, and the chain most often furthest
    from the others."""
    if not lags:
        return (f"every one of the {size} values meets R-hat <= {max_rhat} and bulk ESS >= "
                f"{min_ess:g}")  # fmt: skip
    named = "; ".join(
        f"{list(lag.index)} (R-hat {_rhat_text(lag.rhat)}, bulk ESS {lag.ess_bulk:.0f}, chain "
        f"{lag.chain} at {lag.offset:+.1f} sd from the others"
        f"{', apart in every block' if lag.apart else ''})" for lag in lags[:SHOWN]
    )
    more = f" and {len(lags) - SHOWN} more" if len(lags) > SHOWN else ""
    chain, count = Counter(lag.chain for lag in lags).most_common(1)[0]
    apart = sum(lag.apart for lag in lags if lag.chain == chain)
    stayed = (f", and apart from them in every tenth of the draws on {apart} (it has not "
              "crossed to their region there: more draws may not fix that)") if apart else ""
    return (f"{len(lags)} of {size} values fail R-hat <= {max_rhat} or bulk ESS >= "
            f"{min_ess:g}: {named}{more}; chain {chain} is the furthest from the others on "
            f"{count} of {len(lags)}{stayed}.")  # fmt: skip

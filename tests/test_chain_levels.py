"""bnn_ppl.chain_levels: chains at different log-posterior levels, or still drifting, are
named with their gap in nats and in within-chain standard deviations; chains of one
distribution are not."""

from __future__ import annotations

import numpy as np
import pytest

from bnn_ppl.chain_levels import chain_levels, describe_levels
from bnn_ppl.validation import InputValueError


def _lp(chains=4, draws=500, seed=0):
    return 5.0 * np.random.default_rng(seed).normal(size=(chains, draws)) - 100.0


def test_chains_of_one_distribution_are_not_named():
    levels = chain_levels(_lp())
    assert [c.chain for c in levels] == [0, 1, 2, 3]
    assert all(c.gap_sd < 0.5 and abs(c.drift_sd) < 0.5 for c in levels)
    assert max(c.gap for c in levels) == pytest.approx(
        max(c.lp_mean for c in levels) - min(c.lp_mean for c in levels))
    assert describe_levels(levels) is None


def test_a_chain_in_a_worse_mode_and_a_climbing_chain_are_named():
    lp = _lp()
    lp[1] -= 60.0  # 12 within-chain sd below the others
    lp[3] += np.linspace(-20.0, 20.0, lp.shape[1])  # still climbing
    levels = chain_levels(lp)
    assert levels[1].gap == pytest.approx(60.0, abs=1.0)
    assert levels[3].drift_sd > 2.0 and abs(levels[0].drift_sd) < 0.5
    text = describe_levels(levels)
    assert text.startswith("chain 1 sits 61 nats (")  # 60 plus the draws' own spread
    assert "still drifting" in text and "chain 3 +" in text and "chain 0 +" not in text


def test_frozen_chains_report_gaps_in_nats_and_bad_shapes_are_refused():
    lp = np.zeros((2, 10))
    lp[1] = -7.0
    assert chain_levels(lp)[1].gap == 7.0 and chain_levels(lp)[1].gap_sd == 7.0
    with pytest.raises(InputValueError, match="lp must have shape"):
        chain_levels(np.zeros(10))
    with pytest.raises(InputValueError, match="at least 2 draws"):
        chain_levels(np.zeros((3, 1)))

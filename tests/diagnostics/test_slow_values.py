"""The failing values of a reference run (``bnn_ppl.diagnostics.slow_values``): which quantities
fail the rule, in which order, and which chain disagrees on them, on values whose answer is
known by construction."""

from __future__ import annotations

import numpy as np
import pytest

from bnn_ppl.diagnostics.slow_values import describe_laggards, laggards
from bnn_ppl.inference.reference.stopping import check_convergence


def _iid(shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape)


def test_the_shifted_quantities_are_named_worst_first_with_the_odd_chain():
    f = _iid((4, 1000, 6, 3))
    f[1, :, 4, 2] += 1.0  # chain 1 a full sd away: the worst
    f[3, :, 0, 1] -= 0.4  # chain 3 a little away
    lags = laggards(f)
    assert [(g.index, g.chain) for g in lags] == [((4, 2), 1), ((0, 1), 3)]
    assert lags[0].factor > lags[1].factor > 1
    # the offset is the chain's mean minus the others', in pooled sd (the shift widens the sd)
    sd = f[:, :, 4, 2].std()
    assert lags[0].offset == pytest.approx(1.0 / sd, abs=5 * 1 / np.sqrt(1000) / sd)
    assert lags[1].offset < 0
    # the same figures as the rule's: R-hat above the threshold where the chain is apart
    assert lags[0].rhat > 1.01 and laggards(f, limit=1) == lags[:1]
    # what fails here is what the rule counts as failing
    figures = check_convergence(f)
    assert round((1 - figures["share_rhat_ok"]) * 18) == len(lags)


def test_constant_values_never_fail_and_mixing_chains_have_none():
    f = _iid((4, 1000, 5))
    assert laggards(f) == []
    f[:, :, 2] = 0.0  # a probability of exactly 0 everywhere: no R-hat, not a laggard
    f[0, :, 3] += 2.0
    assert [g.index for g in laggards(f)] == [(3,)]
    assert laggards(np.zeros((4, 100, 3))) == []


def test_chains_each_stuck_at_its_own_value_have_an_infinite_rhat_said_as_such():
    # no variance within any chain, different values between them: R-hat is infinite (not the
    # largest float, whose square overflows), and the sentence says "inf"
    # (64 draws: each half-chain's mean of its equal z-scores is exact, so the variance within
    # is exactly 0; with 100, rounding leaves ~1e-32 and R-hat ~3e16: said as such, not in
    # 17 digits)
    for draws, said in ((64, "R-hat inf"), (100, "R-hat 3.22e+16")):
        f = np.repeat(np.arange(4.0)[:, None, None], draws, axis=1) * np.ones((1, 1, 2))
        with np.errstate(all="raise"):
            lags = laggards(f)
        assert [g.index for g in lags] == [(0,), (1,)]
        assert all(g.rhat > 1e16 for g in lags) and (draws != 64 or lags[0].rhat == np.inf)
        assert said in describe_laggards(lags, 2), describe_laggards(lags, 2)


def test_too_few_draws_fail_on_ess_and_the_factor_is_the_projection_s():
    f = _iid((4, 50, 2))  # 200 independent draws: bulk ESS ~200 < 400 on both
    lags = laggards(f)
    assert {g.index for g in lags} == {(0,), (1,)}
    # the larger of what R-hat and ESS each need (bnn_ppl.inference.reference.stopping)
    for g in lags:
        assert g.ess_bulk < 400
        want = max((g.rhat**2 - 1) / (1.01**2 - 1), 400 / g.ess_bulk)
        assert g.factor == pytest.approx(want) and g.factor >= 400 / g.ess_bulk


def test_the_sentence_counts_the_chain_most_often_apart():
    f = _iid((4, 1000, 8))
    for q in (1, 3, 5):
        f[2, :, q] += 0.8
    f[0, :, 7] += 0.8
    lags = laggards(f)
    text = describe_laggards(lags, size=8)
    assert text.startswith("4 of 8 values fail R-hat <= 1.01 or bulk ESS >= 400: ")
    assert text.endswith("chain 2 is the furthest from the others on 3 of 4, and apart from "
                         "them in every tenth of the draws on 3 (it has not crossed to their "
                         "region there: more draws may not fix that).")
    assert "chain 0 at +" in text
    many = describe_laggards(lags * 2, size=16)
    assert "and 3 more" in many
    assert describe_laggards([], size=8).startswith("every one of the 8 values")


@pytest.mark.parametrize("shape", [(1, 100, 3), (100,), (4, 3, 2)])
def test_too_few_chains_or_draws_are_refused_naming_values(shape):
    with pytest.raises(ValueError, match="values"):
        laggards(np.random.default_rng(0).normal(size=shape))


def test_apart_is_a_chain_that_never_crossed_not_one_that_switched_or_mixes_slowly():
    """``apart``: the odd chain beyond every other chain in each of the 10 blocks. A chain
    shifted throughout is apart; one shifted for the first half only (it crossed) is not, nor
    are chains that all mix slowly (AR(1) with autocorrelation time ~200 draws, no shift)."""
    rng = np.random.default_rng(1)
    f = rng.normal(size=(4, 2000, 3))
    f[1, :, 0] += 1.0  # never crossed
    f[1, :1000, 1] += 2.0  # crossed halfway: R-hat fails, but the chain is not apart
    lags = {g.index: g for g in laggards(f)}
    assert lags[(0,)].chain == 1 and lags[(0,)].apart
    assert lags[(1,)].chain == 1 and lags[(1,)].rhat > 1.01 and not lags[(1,)].apart
    # slow mixing everywhere, no chain elsewhere: fails ESS, apart nowhere
    rho, e = 0.99, rng.normal(size=(4, 4000, 20))
    x = np.zeros_like(e)
    x[:, 0] = e[:, 0]
    for t in range(1, 4000):
        x[:, t] = rho * x[:, t - 1] + np.sqrt(1 - rho**2) * e[:, t]
    slow = laggards(x)
    assert len(slow) == 20 and not any(g.apart for g in slow)
    # too few draws for two per block: never called apart
    assert not any(g.apart for g in laggards(f[:, :19]))

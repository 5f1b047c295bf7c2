"""bnn_ppl.diagnostics.chain_levels: chains at different log-posterior levels, or still drifting,
are
named with their gap in nats and in within-chain standard deviations; chains of one
distribution are not."""

from __future__ import annotations

import warnings

import jax
import numpy as np
import pytest
from conjugate import closed_form, data, linear_model
from numpyro.diagnostics import effective_sample_size

from bnn_ppl.diagnostics.chain_health import StuckChainWarning
from bnn_ppl.diagnostics.chain_levels import chain_levels, describe_levels
from bnn_ppl.inference import full_batch_potential, hmc
from bnn_ppl.validation import InputValueError


def _lp(chains=4, draws=500, seed=0):
    return 5.0 * np.random.default_rng(seed).normal(size=(chains, draws)) - 100.0


def test_chains_of_one_distribution_are_not_named():
    levels = chain_levels(_lp())
    assert [c.chain for c in levels] == [0, 1, 2, 3]
    assert all(c.gap_sd < 0.5 and abs(c.drift_sd) < 0.5 for c in levels)
    assert max(c.gap for c in levels) == pytest.approx(
        max(c.lp_mean for c in levels) - min(c.lp_mean for c in levels)
    )
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


# ------------------------------------------------------- real chains, posterior known
@pytest.mark.statistical
@pytest.mark.timeout(300)
def test_long_converged_chains_are_not_named_and_chains_forced_elsewhere_are():
    """The threshold (2 pooled within-chain sd) on HMC chains of the conjugate regression
    (tests/conjugate.py): 4 x 1000 well-mixed draws are not named - their gaps and drifts are
    within Monte Carlo error, a tenth of the threshold - while one chain of the same draws moved
    to another level (a copy of the posterior 5 sd away in the bias: a chain in another mode),
    or still arriving (an offset shrinking from 4 sd to 0: a chain climbing in), is named. The
    log posterior of every draw is the model's own potential."""
    x, y = data()
    model = linear_model()
    with warnings.catch_warnings():
        warnings.simplefilter("error", StuckChainWarning)
        mcmc = hmc(model, x, y, rng_key=jax.random.key(0), num_warmup=300, num_samples=1000,
                   num_chains=4)  # fmt: skip
    draws = {k: np.asarray(v) for k, v in mcmc.get_samples(group_by_chain=True).items()}
    pot = full_batch_potential(model, x, y)
    lp_of = jax.jit(jax.vmap(jax.vmap(lambda p: -pot.potential_fn(p))))

    lp = np.asarray(lp_of(draws), np.float64)
    np.testing.assert_allclose(lp, -np.asarray(mcmc.get_extra_fields(group_by_chain=True)[
        "potential_energy"]), rtol=1e-5)  # fmt: skip
    levels = chain_levels(lp)
    ess = np.array([float(effective_sample_size(lp[c][None, :, None])[0]) for c in range(4)])
    assert ess.min() > 200  # well mixed: the test stands on chains that sample the posterior
    best = max(levels, key=lambda c: c.lp_mean).chain
    for c in levels:  # gaps and drifts are Monte Carlo error: sd sqrt(1/ESS_c + 1/ESS_best)
        assert c.gap_sd <= 4.5 * np.sqrt(1 / ess[c.chain] + 1 / ess[best]), c
        assert abs(c.drift_sd) <= 4.5 * np.sqrt(4 / ess[c.chain]), c
        assert c.gap_sd < 0.1 * 2.0 and abs(c.drift_sd) < 0.15 * 2.0  # far from the threshold
    assert describe_levels(levels) is None

    sd_bias = float(np.sqrt(closed_form(x, y)[1][2, 2]))
    elsewhere = {k: v.copy() for k, v in draws.items()}
    elsewhere["Dense_0.bias"][3] += 5.0 * sd_bias  # chain 3: the posterior's shape, elsewhere
    levels = chain_levels(np.asarray(lp_of(elsewhere), np.float64))
    assert levels[3].gap > 12.0 and levels[3].gap_sd > 2.0 and abs(levels[3].drift_sd) < 0.5
    assert describe_levels(levels).startswith("chain 3 sits ")
    assert [c.chain for c in levels if c.gap_sd > 0.2 or abs(c.drift_sd) > 0.3] == [3]

    arriving = {k: v.copy() for k, v in draws.items()}  # chain 2: still climbing in
    arriving["Dense_0.bias"][2] += np.linspace(4.0, 0.0, 1000)[:, None] * sd_bias
    levels = chain_levels(np.asarray(lp_of(arriving), np.float64))
    assert levels[2].drift_sd > 2.0
    assert [c.chain for c in levels if c.gap_sd > 2.0 or abs(c.drift_sd) > 2.0] == [2]
    assert "still drifting" in describe_levels(levels) and "chain 2 +" in describe_levels(levels)

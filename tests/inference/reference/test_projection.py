"""The draws a reference run would need (inference/reference/stopping.py), against chains whose
autocorrelation is known: AR(1) chains with coefficient rho have integrated autocorrelation
time tau = (1 + rho) / (1 - rho), so m chains reach a bulk ESS of E after E * tau / m draws
each, and split R-hat squared minus one is (tau - 1) / n' for halves of n' draws."""

import numpy as np
import pytest
from scipy import signal, stats

from bnn_ppl.inference.reference.stopping import check_convergence, project_convergence

RHO = 0.9
TAU = (1 + RHO) / (1 - RHO)  # 19


def ar1(rng, n, *, quantities=100, chains=4, rho=RHO):
    """``(chains, n, quantities)`` stationary AR(1) chains with unit variance:
    ``x_t = rho x_{t-1} + sqrt(1 - rho^2) e_t``, started from a unit normal ``x_{-1}``."""
    e = rng.normal(size=(chains, n, quantities))
    before = rng.normal(size=(chains, 1, quantities))
    return signal.lfilter([np.sqrt(1 - rho**2)], [1.0, -rho], e, axis=1, zi=rho * before)[0]


def test_projection_of_the_median_quantity_matches_the_autocorrelation_time():
    # min_share=0.5: the projection follows the median quantity, whose figures have small noise
    p = project_convergence(ar1(np.random.default_rng(0), 600), min_share=0.5)
    assert p.draws == 600 and not p.growing
    # bulk ESS: 400 = 4 * n / tau at n = 1,900; the median of 100 ESS estimates of 4 x 600
    # draws is within a few percent (its sd ~3 %)
    assert p.draws_for_ess == pytest.approx(400 * TAU / 4, rel=0.15)
    # R-hat: R^2 - 1 = (tau - 1)/n' * chi2_7/7 for 8 split halves of n' = n/2 draws, so the
    # median quantity reaches 1.01 at n = 2 (tau - 1)/(1.01^2 - 1) * median(chi2_7)/7 (1,624;
    # 1,791 with the mean); the median of 100 has an sd of ~7 %
    median = 2 * (TAU - 1) / (1.01**2 - 1) * stats.chi2(7).median() / 7
    assert 0.8 * median < p.draws_for_rhat < 1.2 * 2 * (TAU - 1) / (1.01**2 - 1)
    assert p.draws_needed == max(p.draws_for_rhat, p.draws_for_ess)


def test_chains_of_the_projected_length_meet_the_rule_and_half_as_long_do_not():
    # the rule's own 99 % share over 200 quantities, projected from 400 draws per chain: the
    # projection is an estimate, good to well within a factor of 2 (20 of 20 seeds checked
    # when this test was written: 1.5x always met the rule, 0.5x never)
    rng = np.random.default_rng(101)
    p = project_convergence(ar1(rng, 400, quantities=200))
    n = int(p.draws_needed)
    assert 4 * 400 < n < 20 * 400 and p.draws_for_rhat > 400 and p.draws_for_ess > 400
    assert check_convergence(ar1(rng, int(1.5 * n), quantities=200))["converged"]
    assert not check_convergence(ar1(rng, n // 2, quantities=200))["converged"]


def test_met_rule_needs_no_more_draws_and_burn_in_counts_whole_chains():
    white = np.random.default_rng(2).normal(size=(4, 1000, 20))
    p = project_convergence(white)
    assert p.draws_needed == p.draws == 1000 and not p.growing
    chains = ar1(np.random.default_rng(3), 300, quantities=20)
    plain = project_convergence(chains)
    # the same kept draws after a burn-in of half of each chain: twice the chain
    halved = project_convergence(chains, burn_in=0.5)
    assert halved.draws == 600
    np.testing.assert_allclose([halved.draws_needed, halved.draws_for_rhat, halved.draws_for_ess],
                               [2 * plain.draws_needed, 2 * plain.draws_for_rhat,
                                2 * plain.draws_for_ess], rtol=1e-12)  # fmt: skip
    # gradients and seconds scale the projected draws
    priced = project_convergence(chains, gradients_per_draw=8.0, seconds_per_draw=0.5)
    assert priced.gradients_needed == 8.0 * priced.draws_needed
    assert priced.seconds_needed == 0.5 * priced.draws_needed
    assert np.isnan(plain.gradients_needed) and "gradients" not in plain.describe()
    assert "h of sampling" in priced.describe()


def test_a_late_excursion_makes_the_projection_grow_and_calls_it_unstable():
    # white-noise chains meet the rule over the first half of the draws; in the last quarter
    # chain 0 sits 2 sd off for every quantity (a crossing to another region seen late)
    values = np.random.default_rng(4).normal(size=(4, 4000, 20))
    values[0, 3000:] += 2.0
    p = project_convergence(values)
    assert p.draws_needed_at_half == 2000  # the first half alone: met at its length
    assert p.draws_needed > 1.5 * p.draws_needed_at_half and p.growing
    assert "unstable" in p.describe() and "may grow further" in p.describe()
    assert "extrapolation" not in p.describe()  # 7.7 times the draws so far
    far = p._replace(draws_needed=12 * p.draws)
    assert "an extrapolation over a factor of 12: an order of magnitude" in far.describe()


@pytest.mark.parametrize("shape", [(4,), (1, 100, 3), (4, 5, 3)])
def test_too_few_chains_or_draws_are_refused(shape):
    with pytest.raises(ValueError, match="values must be"):
        project_convergence(np.zeros(shape))


def test_thresholds_are_checked_like_the_rule():
    with pytest.raises(ValueError, match="max_rhat"):
        project_convergence(np.zeros((4, 50, 2)), max_rhat=0.9)

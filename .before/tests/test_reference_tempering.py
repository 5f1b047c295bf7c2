"""The reference recipe with parallel tempering (``reference_hmc(..., num_temperatures=K)``):
the same stopping rule, budget, chain checks and record as with HMC, and the ladder's figures.

On conjugate Bayesian linear regression (tests/conjugate.py) the recipe with a 3-rung ladder
must stop *because* it converged, and the ``β = 1`` rungs' draws must match the closed-form
posterior (every mean and covariance entry of the weights, and the predictive mean at every
test input) within 4.5 Monte Carlo standard errors, as ``tests/test_reference.py`` checks HMC.
A ladder whose swaps fail is named; bad tempering settings are refused before compiling.
(Checkpoint and resume with tempering: ``tests/test_reference_checkpoint.py``.)
"""

from __future__ import annotations

import warnings

import jax
import numpy as np
import pytest
from conftest import count_compiles
from conjugate import closed_form, data, linear_model, theta
from test_reference import _moment_failures, _test_inputs, _within_mcse

from bnn_ppl.chain_health import StuckChainWarning
from bnn_ppl.config import ReferenceHMCConfig
from bnn_ppl.inference import ReferenceNotConvergedWarning, fit, reference_hmc
from bnn_ppl.inference.reference_kernels import STALLED_SWAP_RATE, chain_kernel

KEY = jax.random.key(3)


@pytest.mark.statistical
def test_recipe_with_tempering_stops_converged_and_matches_the_closed_form():
    x, y = data()
    xt = _test_inputs()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ReferenceNotConvergedWarning)
        warnings.simplefilter("error", StuckChainWarning)
        run = reference_hmc(linear_model(), (x, y), x_test=xt, rng_key=KEY, num_warmup=200,
                            segment_draws=100, max_draws=2000, num_temperatures=3,
                            leapfrog_steps=4)  # fmt: skip
    assert run.converged and run.stop_reason == "converged"
    assert [c.converged for c in run.checks] == [False] * (run.segments - 1) + [True]
    config = run.posterior.config
    assert config["kernel"] == "ParallelTempering" and config["num_temperatures"] == 3
    record = config["convergence"]
    assert all(h["moving"] for h in record["chain_health"]) and record["chains_apart"] is None
    # the ladder: every chain's own, respaced in warmup, from 1 down to min_beta
    ladder = record["tempering"]
    betas, rates = np.asarray(ladder["betas"]), np.asarray(ladder["swap_rates"])
    assert betas.shape == (4, 3) and rates.shape == (4, 2) and ladder["num_temperatures"] == 3
    np.testing.assert_allclose(betas[:, [0, -1]], [[1.0, 1e-3]] * 4, rtol=1e-5)
    assert np.all(np.diff(betas, axis=1) < 0)
    assert np.all(rates > STALLED_SWAP_RATE) and ladder["stalled_pairs"] == []
    assert ladder["stalled"] is None
    # every sweep: 3 rungs x 4 leapfrog steps per chain
    assert run.gradients == 4 * run.draws * 3 * 4 and "n_steps" not in run.posterior.sample_stats
    assert run.posterior.sample_stats["lp"].shape == (4, run.draws)

    mean, cov = closed_form(x, y)
    failures = _moment_failures(theta(run.posterior.samples), mean, cov)
    phi = np.concatenate([xt, np.ones((len(xt), 1))], axis=1).astype(np.float64)
    for n, want in enumerate(phi @ mean):
        failures.append(_within_mcse(f"E f(x_test[{n}])", run.values[..., n], want))
    assert not [f for f in failures if f], failures


def test_the_record_names_the_pairs_whose_swaps_stall():
    kernel = chain_kernel(ReferenceHMCConfig(num_chains=2, num_temperatures=3))
    summary = {"betas": np.array([[1.0, 0.5, 0.01], [1.0, 0.3, 0.01]]),
               "swap_rate": np.array([[0.3, 0.2], [0.004, 0.25]])}  # fmt: skip
    ladder = kernel.record(summary)["tempering"]
    assert ladder["betas"] == summary["betas"].tolist() and ladder["num_temperatures"] == 3
    assert ladder["swap_rates"] == summary["swap_rate"].tolist()
    assert ladder["stalled_pairs"] == [
        {"chain": 1, "pair": [0, 1], "betas": [1.0, 0.3], "swap_rate": 0.004}
    ]
    assert ladder["stalled"] == "rungs 0-1 in chain(s) 1 (beta 1 -> 0.3, swap rate <= 0.004)"
    assert "stalls (rungs 0-1 in chain(s) 1 (" in kernel.problem(summary)
    summary["swap_rate"][1, 0] = 0.5
    assert kernel.record(summary)["tempering"]["stalled"] is None
    assert kernel.problem(summary) is None


@pytest.mark.slow  # ~15-25 s on 2 busy cores (its own compilation); the record's text is above
def test_a_ladder_whose_swaps_fail_is_named_in_the_record_and_the_warning():
    """Two rungs, 1 and 1e-6 (the prior), not respaced: on 300 rows a prior draw's likelihood
    is hundreds of nats worse than the posterior's, so no swap is accepted. Through fit(): the
    same recipe."""
    x, y = data(n=300)
    c = ReferenceHMCConfig(num_warmup=50, segment_draws=10, max_draws=20, num_temperatures=2,
                           min_beta=1e-6, adapt_ladder=False, leapfrog_steps=4)  # fmt: skip
    with pytest.warns(ReferenceNotConvergedWarning, match="tempering ladder stalls") as caught:
        post = fit(linear_model(), (x, y, _test_inputs()), c, KEY)
    ladder = post.config["convergence"]["tempering"]
    assert [s["chain"] for s in ladder["stalled_pairs"]] == [0, 1, 2, 3]
    assert all(s["pair"] == [0, 1] and s["swap_rate"] < STALLED_SWAP_RATE
               for s in ladder["stalled_pairs"])  # fmt: skip
    assert ladder["stalled"].startswith("rungs 0-1 in chain(s) 0, 1, 2, 3 (beta 1 -> 1e-06, ")
    assert "raise num_temperatures" in str(caught[0].message)
    np.testing.assert_allclose(ladder["betas"], [[1.0, 1e-6]] * 4, rtol=1e-5)  # not respaced


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"num_temperatures": 0}, "num_temperatures must be an int >= 1"),
        ({"num_temperatures": 2.5}, "num_temperatures"),
        ({"num_temperatures": 3, "min_beta": 1.0}, "min_beta"),
        ({"num_temperatures": 3, "min_beta": 0.0}, "min_beta"),
        ({"num_temperatures": 3, "leapfrog_steps": 0}, "leapfrog_steps"),
        ({"num_temperatures": 3, "adapt_ladder": "yes"}, "adapt_ladder"),
        (
            {"num_temperatures": 3, "mass_matrix": "dense"},
            "mass_matrix='dense' applies to plain HMC only",
        ),
        (
            {"num_temperatures": 3, "trajectory_length": 1.0},
            "trajectory_length=1.0 applies to plain HMC only.*num_temperatures=None",
        ),
        (
            {"num_temperatures": 3, "max_num_steps": 64},
            "max_num_steps=64 applies to plain HMC only",
        ),
        ({"num_temperature": 3}, "num_temperature"),
    ],
)
def test_bad_tempering_settings_are_refused_before_compiling(kwargs, match):
    x, y = data()
    with count_compiles() as compiles, pytest.raises((ValueError, TypeError), match=match):
        reference_hmc(linear_model(), (x, y), x_test=_test_inputs(), **kwargs)
    assert compiles == []


def test_one_temperature_is_plain_hmc():
    assert not ReferenceHMCConfig(num_temperatures=1).tempering
    assert not ReferenceHMCConfig().tempering and ReferenceHMCConfig(num_temperatures=2).tempering
    # (mass_matrix and trajectory_length stay HMC's to set)
    ReferenceHMCConfig(num_temperatures=1, mass_matrix="dense", trajectory_length=1.0)

"""A chain that does not move is reported loudly, never as success; and hmc() cannot freeze.

Issue 14 (item 4b): ``hmc()`` at its old defaults (a diagonal mass matrix adapted, Izmailov et
al.'s trajectory length) on a posterior close to its prior let dual averaging push the step
size to float32's maximum: ``ceil(trajectory_length / 3.4e38)`` is 0 leapfrog steps, every
"proposal" is the current point, and the run reported acceptance 1.0 with 0 divergences while
no chain ever moved.
"""

from __future__ import annotations

import io
import warnings
from contextlib import redirect_stdout

import jax
import numpy as np
import numpyro
import pytest
from conjugate import data, linear_model
from numpyro.infer import MCMC

import bnn_ppl as bp
from bnn_ppl.diagnostics import StuckChainWarning, sampler_summary
from bnn_ppl.diagnostics.chain_health import (
    ABSURD_STEP_SIZE,
    CRAWL_RATIO,
    MIN_DRAWS,
    STEP_RATIO,
    STUCK_FRACTION,
    check_chains,
)
from bnn_ppl.inference import SGLD, full_batch_potential, hmc
from bnn_ppl.inference.mcmc.run import LeapfrogLimitWarning, hmc_kernel
from bnn_ppl.models import MLP


def _chains(chains=3, draws=40, seed=0):
    rng = np.random.default_rng(seed)
    return {"a": rng.normal(size=(chains, draws, 2)), "b": {"c": rng.normal(size=(chains, draws))}}


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StuckChainWarning)
        return fn(*args, **kwargs)


# ---------------------------------------------------------------- the checks, on known draws
def test_moving_chains_pass_and_frozen_or_stuck_ones_are_named():
    s = _chains()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning at all for healthy chains
        healthy = check_chains(s)
    assert [h.moving for h in healthy] == [True] * 3
    assert all(h.identical_fraction == 0.0 and h.problems == () for h in healthy)

    s["a"][1] = s["a"][1, :1]  # chain 1 frozen in every leaf
    s["b"]["c"][1] = s["b"]["c"][1, 0]
    # chain 2 repeats its draw on 60 % of transitions (a rejection-heavy chain), chain 0 on 40 %
    for c, frac in ((2, 0.6), (0, 0.4)):
        repeat = np.zeros(40, bool)
        repeat[1 : 1 + round(frac * 39)] = True
        for t in np.flatnonzero(repeat):
            s["a"][c, t] = s["a"][c, t - 1]
            s["b"]["c"][c, t] = s["b"]["c"][c, t - 1]
    with pytest.warns(StuckChainWarning, match=r"2 of 3 chain\(s\) did not move") as rec:
        health = check_chains(s)
    assert [h.moving for h in health] == [True, False, False]
    assert health[1].identical_fraction == 1.0
    assert health[1].problems == ("frozen: all 40 draws are identical",)
    assert health[2].identical_fraction == pytest.approx(23 / 39)
    assert health[2].problems[0].startswith("stuck: 59%")
    assert health[0].identical_fraction == pytest.approx(16 / 39)
    assert 16 / 39 < STUCK_FRACTION < 23 / 39
    assert "chain 1: frozen" in str(rec[0].message) and "chain 2: stuck" in str(rec[0].message)


def test_a_change_in_one_leaf_is_a_move():
    s = _chains(chains=1)
    s["a"][0] = s["a"][0, :1]  # "a" frozen, "b.c" moving: the chain moved
    (h,) = check_chains(s)
    assert h.moving and h.identical_fraction == 0.0


@pytest.mark.parametrize(
    "step",
    [3.4028235e38, ABSURD_STEP_SIZE, float("nan"), float("inf"), 0.0, -0.1, 1e-39],
    ids=str,
)
def test_absurd_step_sizes_are_flagged(step):
    s = _chains(chains=2)
    ok = _quiet(check_chains, s, step_size=np.array([0.05, 0.05]))
    assert all(h.moving for h in ok)
    health = _quiet(check_chains, s, step_size=np.array([0.05, step]))
    assert health[0].moving and not health[1].moving
    assert health[1].problems[0].startswith("absurd step size")
    # the same from a step size recorded per iteration (an extra field)
    per_iter = np.full((2, 40), 0.05)
    per_iter[1, 7] = step
    health = _quiet(check_chains, s, {"adapt_state.step_size": per_iter})
    assert [h.moving for h in health] == [True, False]


def test_zero_leapfrog_steps_and_non_finite_draws_are_flagged():
    s = _chains(chains=2)
    steps = np.full((2, 40), 5)
    steps[0, 3] = 0
    health = _quiet(check_chains, s, {"num_steps": steps})
    assert health[0].problems == ("0 leapfrog steps on 1 of 40 iterations",)
    assert health[0].zero_step_iterations == 1 and health[1].zero_step_iterations == 0
    assert health[1].moving
    s["a"][1, 5, 0] = np.nan
    health = _quiet(check_chains, s)
    assert health[1].problems == ("NaN/inf draws",)


def test_sgmcmc_info_records_are_read_field_by_field():
    """An SG-MCMC run collected with extra_fields=("info",) gives a record, not an array."""
    from collections import namedtuple

    Info = namedtuple("Info", ["step_size", "potential_energy"])
    info = Info(np.full((2, 40), 1e-3), np.zeros((2, 40)))
    info.step_size[1, -1] = np.inf
    health = _quiet(check_chains, _chains(chains=2), {"info": info, "i": np.zeros((2, 40))})
    assert [h.moving for h in health] == [True, False]


def test_too_few_draws_are_not_judged_but_the_other_checks_still_apply():
    """With 6 draws a healthy chain repeats 3 of 5 draws by chance (5.8 % at acceptance 0.8):
    below MIN_DRAWS the draws give no verdict, said so by ``judged``; the same repeats in a
    chain of MIN_DRAWS draws, and an absurd step size at any length, are still reported."""
    s = _chains(chains=2, draws=6)
    s["a"][:, 1:4], s["b"]["c"][:, 1:4] = s["a"][:, :1], s["b"]["c"][:, :1]  # 3 of 5 repeated
    s["a"][1], s["b"]["c"][1] = s["a"][1, 0], s["b"]["c"][1, 0]  # chain 1: all 6 identical
    with warnings.catch_warnings():
        warnings.simplefilter("error", StuckChainWarning)
        few = check_chains(s)
    assert [h.identical_fraction for h in few] == [0.6, 1.0]
    assert [(h.moving, h.judged, h.problems) for h in few] == [(True, False, ())] * 2
    with pytest.warns(StuckChainWarning, match="absurd step size"):
        (h, _) = check_chains(s, step_size=np.array([np.inf, 0.1]))
    assert not h.moving and not h.judged

    s = _chains(chains=1, draws=MIN_DRAWS)
    for leaf in (s["a"], s["b"]["c"]):
        leaf[:, 1::2] = leaf[:, ::2]  # every other transition repeated: just over half
    (h,) = _quiet(check_chains, s)
    assert h.judged and not h.moving and h.problems[0].startswith("stuck")
    assert h.identical_fraction == pytest.approx(10 / 19) and 10 / 19 >= STUCK_FRACTION


def test_a_crawling_chain_is_named_by_its_step_size_and_its_moves():
    """A step size collapsed to a tiny value: every proposal "accepted", no two draws identical,
    and the chain barely moves. Named by its step size against the others', and by its moves."""
    s = _chains(chains=4, draws=200)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # healthy chains: no false alarm from either figure
        healthy = check_chains(s, step_size=np.array([0.05, 0.04, 0.06, 0.05]))
    assert all(h.moving and 0.5 < h.relative_movement < 2.0 for h in healthy)
    rng = np.random.default_rng(1)  # chain 2: a random walk of steps 1e-4 (others move ~1.4)
    s["a"][2] = s["a"][2, 0] + np.cumsum(1e-4 * rng.normal(size=(200, 2)), axis=0)
    s["b"]["c"][2] = s["b"]["c"][2, 0] + np.cumsum(1e-4 * rng.normal(size=200))
    with pytest.warns(StuckChainWarning, match=r"1 of 4 chain\(s\) did not move \(chain 2: crawl"):
        health = check_chains(s)  # the draws alone
    assert [h.moving for h in health] == [True, True, False, True]
    assert health[2].identical_fraction == 0.0 and health[2].relative_movement < CRAWL_RATIO
    assert health[2].relative_movement == pytest.approx(1e-4 / np.sqrt(2), rel=0.2)  # 1e-4 / 1.4
    assert health[2].problems[0].startswith("crawling: moves ")
    steps = np.array([0.05, 0.04, 5e-6, 0.05])
    health = _quiet(check_chains, s, step_size=steps)
    assert health[2].problems == ("crawling: step size 5e-06 is 1.0e-04 of the other chains' "
                                  "median",)  # fmt: skip
    # the step size alone names it too (e.g. draws thinned so far that it seems to move)
    health = _quiet(check_chains, _chains(chains=4), {"adapt_state.step_size": np.tile(
        steps[:, None], (1, 40))})  # fmt: skip
    assert [h.moving for h in health] == [True, True, False, True]
    assert 1e-3 == STEP_RATIO  # the threshold the figures above are three decades from


@pytest.mark.slow  # ~8-20 s (compilation); the default suite keeps the synthetic test above and
# tests/test_reference.py's real run with one chain's step collapsed
@pytest.mark.timeout(300)
def test_hmc_with_one_chains_step_size_collapsed_is_reported_as_crawling():
    """A real run: chain 2's step size forced 1e-5 times the others' (as if its dual averaging
    had collapsed). It accepts every proposal and repeats no draw - the frozen and stuck checks
    pass it - but it is named, and the chains beside it are not. (The healthy controls of real
    runs are every test that runs hmc() or reference_hmc() with StuckChainWarning an error.)"""
    x, y = data()
    pot = full_batch_potential(linear_model(), x, y)
    kernel = hmc_kernel(pot, trajectory_length=0.5, step_size=0.05, adapt_step_size=False,
                        adapt_mass_matrix=False)  # fmt: skip
    mcmc = MCMC(kernel, num_warmup=0, num_samples=60, num_chains=3, chain_method="vectorized",
                progress_bar=False, jit_model_args=True)  # fmt: skip
    init = pot.init_params(jax.random.key(1), 3)
    state = kernel.init(jax.random.split(jax.random.key(0), 3), 0, init, pot.args, {})
    step = state.adapt_state.step_size
    mcmc.post_warmup_state = state._replace(
        adapt_state=state.adapt_state._replace(step_size=step.at[2].multiply(1e-5))
    )
    mcmc.run(state.rng_key, *pot.args, extra_fields=("accept_prob", "num_steps"))
    with pytest.warns(StuckChainWarning) as caught:
        rows = sampler_summary(mcmc)
    (message,) = [str(w.message) for w in caught]
    assert "1 of 3 chain(s) did not move (chain 2: crawling: step size 5e-07 is 1.0e-05" in message
    assert [r["moving"] for r in rows] == [True, True, False]
    crawler = rows[2]
    assert crawler["accept_prob"] > 0.99 and crawler["relative_movement"] < CRAWL_RATIO
    assert crawler["identical_fraction"] < STUCK_FRACTION  # the frozen/stuck checks pass it
    assert all(0.2 < r["relative_movement"] < 5 for r in rows[:2])


def test_bad_samples_are_refused():
    with pytest.raises(ValueError, match="empty"):
        check_chains({})
    with pytest.raises(ValueError, match="group_by_chain"):
        check_chains({"w": np.zeros(10)})
    with pytest.raises(ValueError, match="group_by_chain"):
        check_chains({"w": np.zeros((2, 10)), "v": np.zeros((2, 9))})
    (h,) = check_chains({"w": np.zeros((1, 1, 3))})  # one draw: only the other checks apply
    assert np.isnan(h.identical_fraction) and h.moving


# ---------------------------------------------------------------- real runs
@pytest.mark.timeout(300)
def test_numpyros_frozen_run_is_reported_as_not_moving():
    """NumPyro's own HMC with a step size of 3e38: 0 leapfrog steps, acceptance 1.0,
    0 divergences: the summary must say the chains did not move."""
    x, y = data()
    pot = full_batch_potential(linear_model(), x, y)
    kernel = numpyro.infer.HMC(
        potential_fn=pot.potential_fn,
        step_size=3e38,
        adapt_step_size=False,
        adapt_mass_matrix=False,
        trajectory_length=1.0,
    )
    mcmc = MCMC(
        kernel,
        num_warmup=5,
        num_samples=20,
        num_chains=2,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(
        jax.random.key(0),
        init_params=pot.init_params(jax.random.key(1), num_chains=2),
        extra_fields=("accept_prob", "diverging", "num_steps"),
    )
    with pytest.warns(StuckChainWarning, match="2 of 2"):
        rows = sampler_summary(mcmc)
    for r in rows:
        assert r["accept_prob"] == 1.0 and r["divergences"] == 0  # what used to pass for success
        assert r["moving"] is False and r["num_steps"] == 0
        assert "frozen" in r["warning"] and "0 leapfrog steps on 20 of 20" in r["warning"]
        assert "absurd step size 3e+38" in r["warning"]


@pytest.mark.timeout(300)
def test_sgld_runs_are_checked_too():
    x, y = data()
    pot = full_batch_potential(linear_model(), x, y)

    def run(step):
        mcmc = MCMC(
            SGLD(pot, step_size=step),
            num_warmup=10,
            num_samples=20,
            num_chains=2,
            chain_method="vectorized",
            progress_bar=False,
            jit_model_args=True,
        )
        init = pot.init_params(jax.random.key(0), num_chains=2)
        mcmc.run(jax.random.key(1), *pot.args, init_params=init, extra_fields=("info",))
        return mcmc

    with warnings.catch_warnings():
        warnings.simplefilter("error", StuckChainWarning)
        rows = sampler_summary(run(1e-4))
    assert all(r["moving"] and r["step_size"] == pytest.approx(1e-4) for r in rows)
    # a step of 1e-30 changes no float32 parameter of order 1: every draw is the first
    with pytest.warns(StuckChainWarning, match="frozen"):
        rows = sampler_summary(run(1e-30))
    assert [r["moving"] for r in rows] == [False, False]


@pytest.mark.timeout(300)
def test_hmc_warns_when_its_chains_did_not_move_and_print_summary_says_so():
    """A fixed step of 1.0 on a posterior of width ~0.1: every proposal is rejected."""
    x, y = data()
    with pytest.warns(StuckChainWarning, match="did not move") as rec:
        mcmc = hmc(
            linear_model(),
            x,
            y,
            num_warmup=5,
            num_samples=20,
            num_chains=2,
            trajectory_length=1.0,
            step_size=1.0,
            adapt_step_size=False,
            adapt_mass_matrix=False,
        )
    stuck = [r for r in rec if issubclass(r.category, StuckChainWarning)]
    assert stuck[0].filename == __file__  # the warning points at the call of hmc()
    out = io.StringIO()
    with redirect_stdout(out), pytest.warns(StuckChainWarning):
        mcmc.print_summary()
    assert out.getvalue().count("NOT MOVING: frozen") == 2


@pytest.mark.timeout(300)
def test_leapfrog_steps_are_bounded_and_a_held_step_size_is_reported():
    x, y = data()
    with pytest.warns(LeapfrogLimitWarning, match="max_num_steps=3"):
        mcmc = _quiet(
            hmc,
            linear_model(),
            x,
            y,
            rng_key=jax.random.key(3),
            num_warmup=60,
            num_samples=20,
            trajectory_length=3.0,
            max_num_steps=3,
            extra_fields=("num_steps", "adapt_state.step_size", "trajectory_length"),
        )
    fields = {k: np.asarray(v) for k, v in mcmc.get_extra_fields().items()}
    assert np.all(fields["num_steps"] == 3)
    # the adapted step size is kept; the trajectory is shortened to 3 of its steps
    assert np.all(fields["trajectory_length"] <= 3.0)
    assert np.any(fields["trajectory_length"] < 3.0)
    np.testing.assert_allclose(fields["trajectory_length"],
                               np.minimum(3.0, 2.5 * fields["adapt_state.step_size"]), rtol=1e-6)


def _near_prior_model():
    """Two data rows and a narrow prior: the posterior is close to the prior."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 2)).astype(np.float32)
    y = np.sin(x[:, 0]).astype(np.float32)
    model = bp.BNN(MLP(hidden=(10,), out=1), bp.priors.Normal(0.3), bp.likelihoods.Gaussian(0.5))
    return model, x, y


@pytest.mark.timeout(600)
@pytest.mark.parametrize("old_default", [False, True], ids=["defaults", "old-defaults"])
def test_hmc_does_not_freeze_on_a_posterior_close_to_its_prior(old_default):
    """Issue 14 item 4b: this run froze (step size 3.4e38, 0 leapfrog steps, acceptance 1.0)
    at the old defaults: mass matrix adapted, (π/2)·σ_prior throughout. With the step-size
    guard even the old defaults move; the new default also changes the trajectory length to
    π/2 once the metric is adapted."""
    model, x, y = _near_prior_model()
    length = bp.inference.default_trajectory_length(model, x)  # 0.47: (π/2)·0.3
    kwargs = {"trajectory_length": length} if old_default else {}
    with warnings.catch_warnings():
        warnings.simplefilter("error", StuckChainWarning)
        mcmc = hmc(
            model, x, y, num_warmup=1000, num_samples=50, num_chains=2, rng_key=jax.random.key(0),
            extra_fields=("num_steps", "adapt_state.step_size", "trajectory_length"), **kwargs,
        )  # fmt: skip
    extra = mcmc.get_extra_fields()
    want = np.float32(length if old_default else np.pi / 2)
    assert np.all(np.asarray(extra["trajectory_length"]) == want)
    assert np.all(np.asarray(extra["num_steps"]) >= 1)
    assert np.all(np.asarray(extra["adapt_state.step_size"]) <= want)
    rows = sampler_summary(mcmc)
    assert all(r["moving"] and r["identical_fraction"] < STUCK_FRACTION for r in rows)

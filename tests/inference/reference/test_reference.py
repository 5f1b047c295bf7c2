"""The reference-run recipe (bnn_ppl.inference.reference_hmc): its stopping rule, on a model
whose posterior is known, and its refusals.

On conjugate Bayesian linear regression (tests/conjugate.py) the recipe at its default
thresholds must stop *because* it converged (R-hat <= 1.01 and bulk ESS >= 400 for >= 99 % of
the test predictions, recomputed here independently) and its draws must match the closed-form
posterior: every mean and covariance entry of the weights, and the predictive mean at every
test input, within 4.5 Monte Carlo standard errors (MCSE = sd / sqrt(ESS), ESS from the chains).
A budget too small to converge must say so: ``converged=False``, the figures, and a
:class:`ReferenceNotConvergedWarning`.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import count_compiles, fake_sampling_clock
from conjugate import NOISE, closed_form, data, linear_model, theta
from numpyro.diagnostics import effective_sample_size
from scipy import stats

import bnn_ppl as bp
from bnn_ppl.config import ReferenceHMCConfig
from bnn_ppl.diagnostics import convergence
from bnn_ppl.diagnostics.chain_health import StuckChainWarning
from bnn_ppl.diagnostics.function_values import QUANTITIES, function_values
from bnn_ppl.diagnostics.slow_values import describe_laggards, laggards
from bnn_ppl.inference import HMC, ReferenceNotConvergedWarning, fit, reference_hmc
from bnn_ppl.inference.reference.recipe import check_convergence
from bnn_ppl.io import load_npz, read_json
from bnn_ppl.models import MLP

KEY = jax.random.key(3)
REFERENCES = Path(__file__).resolve().parents[3] / "examples" / "references"
CATALOGUE = Path(__file__).resolve().parents[3] / "docs" / "references"  # a page per data set


def _within_mcse(name, f, want, z=4.5):
    """``f``: (chains, draws) draws of a statistic whose expectation is ``want``."""
    ess = float(effective_sample_size(np.asarray(f)[..., None])[0])
    assert ess > 100, f"{name}: ESS {ess:.0f} is too small to test anything"
    mcse = f.std() / np.sqrt(ess)
    return None if abs(f.mean() - want) <= z * mcse else f"{name}: {f.mean():.5f} vs {want:.5f}"


def _moment_failures(th, mean, cov):
    """Each mean and covariance entry of the (chains, draws, 3) weights not within MCSE."""
    failures = []
    for i in range(3):
        failures.append(_within_mcse(f"mean[{i}]", th[..., i], mean[i]))
        for j in range(i, 3):
            f = (th[..., i] - mean[i]) * (th[..., j] - mean[j])
            failures.append(_within_mcse(f"cov[{i},{j}]", f, cov[i, j]))
    return failures


def _test_inputs():
    return np.random.default_rng(7).normal(size=(8, 2)).astype(np.float32)


@pytest.mark.statistical
def test_recipe_stops_converged_and_matches_the_closed_form():
    x, y = data()
    xt = _test_inputs()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ReferenceNotConvergedWarning)
        warnings.simplefilter("error", StuckChainWarning)  # no chain named crawling or stuck
        run = reference_hmc(linear_model(), (x, y), x_test=xt, rng_key=KEY, num_warmup=200,
                            segment_draws=100, max_draws=3000)  # fmt: skip
    assert run.converged and run.stop_reason == "converged"
    record = run.posterior.config["convergence"]
    assert all(h["moving"] and h["problems"] == [] for h in record["chain_health"])
    assert record["chains_apart"] is None  # converged chains: none named apart or drifting
    assert record["projection"] is None  # nothing to project: the rule is met
    # it stopped at the first check that confirmed a pass (one segment later), and recorded both
    assert run.checks[-1].converged and run.checks[-2].converged
    confirmation = record["confirmation"]
    assert confirmation["confirmed"] and confirmation["confirm_segments"] == 1
    assert confirmation["passed"]["segment"] == run.segments - 1
    assert confirmation["last"]["segment"] == run.segments
    assert run.posterior.num_draws == run.draws == 100 * run.segments
    assert run.posterior.config["convergence"]["converged"] is True

    # the figures are the predictions' own: recomputed from the draws, independently of the run
    values = function_values(linear_model(), run.posterior.samples, xt)
    np.testing.assert_array_equal(values, run.values)
    conv = convergence({"f": values})
    assert np.mean(conv.rhat["f"] <= 1.01) >= 0.99 and np.mean(conv.ess_bulk["f"] >= 400) >= 0.99
    assert run.checks[-1].ess_bulk_min == pytest.approx(float(conv.ess_bulk["f"].min()))

    mean, cov = closed_form(x, y)
    th = theta(run.posterior.samples)  # (chains, draws, 3)
    failures = _moment_failures(th, mean, cov)
    phi = np.concatenate([xt, np.ones((len(xt), 1))], axis=1).astype(np.float64)
    for n, want in enumerate(phi @ mean):  # the predictive mean at each test input
        failures.append(_within_mcse(f"E f(x_test[{n}])", values[..., n], want))
    assert not [f for f in failures if f], failures


@pytest.mark.statistical
def test_optimised_starts_still_converge_to_the_closed_form_posterior():
    """``init_steps``: every chain's prior draw moved by Adam to near the mode before warmup.
    The record says how far each start moved, and the chains, started in one basin, still
    sample the closed-form posterior (the optimisation adds no bias: mean and covariance
    within MCSE)."""
    x, y = data()
    xt = _test_inputs()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ReferenceNotConvergedWarning)
        run = reference_hmc(linear_model(), (x, y), x_test=xt, rng_key=KEY, num_warmup=200,
                            segment_draws=100, max_draws=3000, init_steps=1000,
                            init_learning_rate=0.05)  # fmt: skip
    assert run.converged
    starts = run.posterior.config["convergence"]["starts"]
    assert starts["steps"] == 1000 and starts["gradients"] == 4000
    assert all(a < b for a, b in zip(starts["potential"], starts["prior_potential"], strict=True))
    # at the mode the potentials of the four starts agree (one basin here)
    assert np.ptp(starts["potential"]) < 1e-3 * max(abs(v) for v in starts["potential"]) + 1e-3
    mean, cov = closed_form(x, y)
    failures = _moment_failures(theta(run.posterior.samples), mean, cov)
    assert not [f for f in failures if f], failures
    # without init_steps the record says so (10 draws: not confirmed, and it says that too)
    with pytest.warns(ReferenceNotConvergedWarning, match="not yet confirmed"):
        short = reference_hmc(linear_model(), (x, y), x_test=xt, rng_key=KEY, num_warmup=10,
                              segment_draws=10, max_draws=10, max_rhat=10.0, min_ess=1)
    assert short.posterior.config["convergence"]["starts"] is None


def _correlated_data(n=30, seed=1):
    """Two features with correlation ~0.998: the weights' posterior is a long thin ridge."""
    rng = np.random.default_rng(seed)
    a = rng.normal(size=n)
    x = np.stack([a, a + 0.07 * rng.normal(size=n)], axis=1).astype(np.float32)
    y = (x @ np.array([0.8, -0.5]) + 0.3 + NOISE * rng.normal(size=n)).astype(np.float32)
    return x, y


@pytest.mark.slow  # ~20 s of CPU (four segment compilations), beyond the default suite's budget
@pytest.mark.statistical
def test_dense_mass_matrix_converges_on_a_correlated_posterior_and_matches_the_closed_form():
    """``mass_matrix="dense"`` adapts the posterior's covariance: on a ridge (weight correlation
    about -0.99) it stops converged and its mean and covariance match the closed form. (Measured
    with these settings: dense converged after 300 draws/chain and 1,800 gradients, 1.5 leapfrog
    steps per draw; diagonal after 700 and 34,300; identity after 200 and 18,800.)"""
    x, y = _correlated_data()
    mean, cov = closed_form(x, y)
    assert cov[0, 1] / np.sqrt(cov[0, 0] * cov[1, 1]) < -0.98
    xt = _test_inputs()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ReferenceNotConvergedWarning)
        run = reference_hmc(linear_model(), (x, y), x_test=xt, rng_key=KEY, num_warmup=200,
                            segment_draws=100, max_draws=2000, mass_matrix="dense")  # fmt: skip
    assert run.converged and run.posterior.config["mass_matrix"] == "dense"
    assert float(run.posterior.sample_stats["n_steps"].mean()) < 4  # the metric took the ridge
    th = theta(run.posterior.samples)
    failures = _moment_failures(th, mean, cov)
    assert not [f for f in failures if f], failures


def test_a_budget_too_small_warns_and_reports_its_figures():
    x, y = data()
    xt = _test_inputs()
    settings = dict(num_warmup=50, segment_draws=10, max_draws=20)
    seen = []  # on_check: each check as it is made
    with pytest.warns(ReferenceNotConvergedWarning, match="max_draws") as record:
        run = reference_hmc(linear_model(), (x, y), x_test=xt, rng_key=KEY, on_check=seen.append,
                            **settings)  # fmt: skip
    assert seen == list(run.checks) and [c.draws for c in seen] == [10, 20]
    assert "R-hat" in str(record[0].message) and "bulk ESS" in str(record[0].message)
    assert not run.converged and run.stop_reason == "max_draws"
    assert run.segments == 2 and run.draws == 20 and run.posterior.num_draws == 20
    last = run.checks[-1]
    assert not last.converged and last.ess_bulk_min < 400 and last.size == len(xt)
    assert np.isfinite([last.rhat_max, last.ess_bulk_min, last.share_rhat_ok]).all()
    assert last.gradients == int(run.posterior.sample_stats["n_steps"].sum()) > 0
    assert run.posterior.config["convergence"]["stop_reason"] == "max_draws"
    assert len(run.posterior.config["convergence"]["checks"]) == 2
    levels = run.posterior.config["convergence"]["chain_levels"]  # each chain's lp level
    assert [c["chain"] for c in levels] == [0, 1, 2, 3]
    lp = run.posterior.sample_stats["lp"]
    np.testing.assert_allclose([c["lp_mean"] for c in levels], lp.mean(axis=1), rtol=1e-6)
    assert "chains_apart" in run.posterior.config["convergence"]
    # a fixed noise scale: no noise-scale levels, no funnel (test_scale_levels has a learned one)
    assert run.posterior.config["convergence"]["scale_levels"] == []
    assert run.posterior.config["convergence"]["scale_funnel"] is None
    # how far it is: the draws the rule would need at this run's rate (tests/test_projection.py
    # checks the projection against known autocorrelation times), priced in gradients and time
    projection = run.posterior.config["convergence"]["projection"]
    assert projection["draws"] == 20 and projection["draws_needed"] > 20
    assert projection["gradients_needed"] == pytest.approx(
        projection["draws_needed"] * last.gradients / last.draws)
    assert projection["seconds_needed"] > 0
    assert "would be met after about" in str(record[0].message)
    # which values fail, worst first, each with its odd chain: the laggards of the kept values
    conv = run.posterior.config["convergence"]
    want = laggards(run.values, max_rhat=1.01, min_ess=400)
    assert conv["laggards_count"] == len(want) > 0 and conv["laggards"][0]["ess_bulk"] < 400
    assert [tuple(g["index"]) for g in conv["laggards"]] == [g.index for g in want]
    assert describe_laggards(want, len(xt)) in str(record[0].message)
    assert np.sum(np.array([g.ess_bulk for g in want]) < 400) == round(
        (1 - last.share_ess_ok) * len(xt))

    # the same key gives the same draws, segments included - also with a time budget, under
    # which warmup runs in segments of segment_draws iterations (5 here) to check it between
    # them: continued from the last state, the adaptation is the one-piece warmup's, bit for bit
    # (burn_in leaves each chain's first half out of every check and of the result: the
    # draws are the same, the checks are those of the second halves)
    with pytest.warns(ReferenceNotConvergedWarning):
        again = reference_hmc(linear_model(), (x, y), x_test=xt, rng_key=KEY, max_seconds=1e6,
                              burn_in=0.5, **settings)  # fmt: skip
    for k, v in run.posterior.samples.items():
        np.testing.assert_array_equal(v[:, 10:], again.posterior.samples[k])
    np.testing.assert_array_equal(run.values[:, 10:], again.values)
    np.testing.assert_array_equal(run.posterior.sample_stats["lp"][:, 10:],
                                  again.posterior.sample_stats["lp"])  # fmt: skip
    for check, end in zip(again.checks, (10, 20), strict=True):
        want = check_convergence(run.values[:, end // 2 : end])
        assert check.draws == end and {k: getattr(check, k) for k in want} == want
    assert again.posterior.config["convergence"]["burn_in_draws"] == 10
    assert run.warmup_done == again.warmup_done == 50 and not again.warmup_cut_short


def test_a_chain_whose_step_size_collapses_stops_the_run_and_is_named(monkeypatch):
    """Chain 1's step size forced to 1e-6 after warmup (as if its adaptation had collapsed):
    it accepts every proposal and barely moves. The run stops after the first segment - the
    step size is fixed now, more draws cannot help - is not converged, and names the chain."""
    warmup = 200
    adjust = HMC.adjust

    def collapse(self, state):
        after = (state.i >= warmup) & (jnp.arange(jnp.size(state.i)) == 1)
        step = jnp.where(after, 1e-6, state.adapt_state.step_size)
        return adjust(self, state._replace(adapt_state=state.adapt_state._replace(step_size=step)))

    monkeypatch.setattr(HMC, "adjust", collapse)
    x, y = data()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = reference_hmc(linear_model(), (x, y), x_test=_test_inputs(), rng_key=KEY,
                            num_warmup=warmup, segment_draws=20, max_draws=100,
                            max_num_steps=64)  # fmt: skip
    assert not run.converged and run.stop_reason == "chains_not_moving" and run.segments == 1
    health = run.posterior.config["convergence"]["chain_health"]
    assert [h["moving"] for h in health] == [True, False, True, True]
    assert health[1]["problems"][0].startswith("crawling: step size 1e-06")
    text = {w.category.__name__: str(w.message) for w in caught}
    assert "chain 1: crawling" in text["StuckChainWarning"]
    assert "Not every chain moves (chain 1: crawling" in text["ReferenceNotConvergedWarning"]
    assert "rerun with init_steps" in text["ReferenceNotConvergedWarning"]  # (the fix to try)
    # no projection of draws: more draws will not move a crawling chain
    assert run.posterior.config["convergence"]["projection"] is None
    assert "would be met after" not in text["ReferenceNotConvergedWarning"]


def test_a_time_budget_cuts_warmup_short_and_the_run_is_never_converged():
    """max_seconds is checked between warmup segments too: a budget spent during warmup stops
    it there, no draw is sampled, and the record says so (through fit(), the same recipe)."""
    x, y = data()
    xt = _test_inputs()
    c = ReferenceHMCConfig(num_warmup=50, segment_draws=10, max_draws=20, max_seconds=1e-3)
    with pytest.warns(ReferenceNotConvergedWarning, match="during warmup: 10 of 50 warmup"):
        post = fit(linear_model(), (x, y, xt), c, KEY)
    record = post.config["convergence"]
    assert record["converged"] is False and record["stop_reason"] == "max_seconds"
    assert record["warmup_cut_short"] is True and record["warmup_done"] == 10
    assert record["draws"] is None and record["checks"] == []  # no check: nothing sampled
    assert post.method == "reference_hmc" and post.num_draws == 10  # warmup's last segment
    assert post.predictions["mean"].shape == (4, 10, len(xt))
    assert record["projection"] is None  # no check, nothing to project from


@pytest.fixture
def fake_clock(monkeypatch):
    """A clock on which every warmup iteration and every draw takes 10 s (and nothing else
    takes any time): the run's start, warmup's segments and the sampling segments all read it."""
    import bnn_ppl.inference.reference.chains as chains
    import bnn_ppl.inference.reference.recipe as reference

    return fake_sampling_clock(monkeypatch, 10.0, (reference, chains), chains)


@pytest.mark.parametrize("max_seconds, segments", [(850.0, 3), (900.0, 4)])
def test_the_time_budget_stops_before_a_segment_that_would_pass_it(fake_clock, max_seconds,
                                                                    segments):  # fmt: skip
    """Warmup (50 iterations) and the first segment of 10 draws end at 600 s, each later
    segment takes 100 s: with 850 s the run stops after 3 segments (800 s; a 4th would end at
    900 s), where "while any time is left" ran a 4th to 900 s; with 900 s the 4th fits
    exactly and is run. Nothing is sampled past the budget."""
    x, y = data()
    with pytest.warns(ReferenceNotConvergedWarning, match=r"stopped \(max_seconds\)"):
        run = reference_hmc(linear_model(), (x, y), x_test=_test_inputs(), rng_key=KEY,
                            num_warmup=50, segment_draws=10, max_draws=100,
                            max_seconds=max_seconds)  # fmt: skip
    assert run.stop_reason == "max_seconds" and not run.converged and not run.warmup_cut_short
    assert [c.seconds for c in run.checks] == [600.0 + 100.0 * k for k in range(segments)]
    assert run.checks[-1].seconds <= max_seconds and run.posterior.num_draws == 10 * segments


@pytest.mark.parametrize("max_seconds, done", [(250.0, 20), (300.0, 30)])
def test_warmup_stops_before_a_segment_that_would_pass_the_budget(fake_clock, max_seconds,
                                                                   done):  # fmt: skip
    """Warmup segments of 10 iterations take 100 s each: with 250 s warmup stops after 2
    (200 s; a 3rd would end at 300 s), with 300 s the 3rd fits exactly and a 4th does not."""
    x, y = data()
    with pytest.warns(ReferenceNotConvergedWarning, match=f"during warmup: {done} of 50"):
        run = reference_hmc(linear_model(), (x, y), x_test=_test_inputs(), rng_key=KEY,
                            num_warmup=50, segment_draws=10, max_draws=20,
                            max_seconds=max_seconds)  # fmt: skip
    assert run.warmup_cut_short and run.warmup_done == done
    assert run.warmup_seconds == 10.0 * done <= max_seconds


def test_warmup_cut_short_with_level_chains_projects_nothing(monkeypatch):
    # warmup's last segment is no posterior sample: even when its chains sit level (forced
    # here; these 10 draws are usually still drifting) there is no check to project from
    import bnn_ppl.inference.reference.recipe as reference

    monkeypatch.setattr(reference, "describe_levels", lambda levels: None)
    x, y = data()
    c = ReferenceHMCConfig(num_warmup=50, segment_draws=10, max_draws=20, max_seconds=1e-3)
    with pytest.warns(ReferenceNotConvergedWarning, match="during warmup"):
        post = fit(linear_model(), (x, y, _test_inputs()), c, KEY)
    record = post.config["convergence"]
    assert record["warmup_cut_short"] is True and record["projection"] is None


def test_a_noise_sd_that_has_not_mixed_fails_the_rule_among_means_that_have():
    """One value of its own (the noise sd) cannot hide among 100 means: with ``parts`` each
    part is held to the rule."""
    rng = np.random.default_rng(1)
    f = rng.normal(size=(4, 500, 101))
    f[0, :, 100] += 3.0  # chain 0's noise sd sits elsewhere
    assert check_convergence(f)["converged"]  # 100 of 101 values meet it: >= 99 %
    parts = {"mean": slice(0, 100), "noise_scale": slice(100, 101)}
    assert not check_convergence(f, parts=parts)["converged"]
    f[0, :, 100] -= 3.0
    assert check_convergence(f, parts=parts)["converged"]


def _learned_noise_model():
    import numpyro.distributions as dist

    return bp.BNN(MLP(hidden=(), out=1), bp.priors.Normal(1.0),
                  bp.likelihoods.Gaussian(dist.HalfNormal(1.0)))  # fmt: skip


def test_a_learned_noise_reference_checks_means_log_densities_and_the_noise():
    """With the test targets, a regression reference checks each row's predictive mean, each
    row's log density and the learned noise sd, each part held to the rule; the record gives
    each part's figures."""
    from bnn_ppl.predictive import log_likelihood

    x, y = data()
    xt, yt = x[:6], y[:6]
    model = _learned_noise_model()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ReferenceNotConvergedWarning)
        run = reference_hmc(model, (x, y), x_test=xt, y_test=yt, rng_key=KEY, num_warmup=100,
                            segment_draws=50, max_draws=100, min_ess=50, max_rhat=1.05)  # fmt: skip
    assert run.quantity == "mean_log_density" and run.values.shape == (4, run.draws, 13)
    samples = run.posterior.samples
    np.testing.assert_allclose(run.values[..., :6], function_values(model, samples, xt, "mean"))
    np.testing.assert_allclose(run.values[..., 6:12], log_likelihood(model, samples, xt, yt),
                               rtol=1e-6)  # fmt: skip
    np.testing.assert_array_equal(run.values[..., 12], samples["noise_scale"])
    record = run.posterior.config["convergence"]
    assert record["parts"] == {"mean": [0, 6], "log_density": [6, 12], "noise_scale": [12, 13]}
    noise = record["last_parts"]["noise_scale"]
    want = check_convergence(samples["noise_scale"][..., None], max_rhat=1.05, min_ess=50)
    assert noise == pytest.approx(want)


def test_a_pass_the_budget_leaves_unconfirmed_is_not_converged():
    """The rule met at the last segment the budget allows is not confirmed: not converged,
    the pass recorded, and the warning says so."""
    x, y = data()
    settings = dict(num_warmup=100, segment_draws=100, max_draws=100, min_ess=20, max_rhat=1.2)
    with pytest.warns(ReferenceNotConvergedWarning, match="not yet confirmed"):
        run = reference_hmc(linear_model(), (x, y), x_test=_test_inputs(), rng_key=KEY,
                            **settings)  # fmt: skip
    assert run.checks[-1].converged and not run.converged and run.stop_reason == "max_draws"
    confirmation = run.posterior.config["convergence"]["confirmation"]
    assert confirmation["confirmed"] is False and confirmation["passed"]["segment"] == 1
    # without a confirming segment the same pass is a convergence
    with warnings.catch_warnings():
        warnings.simplefilter("error", ReferenceNotConvergedWarning)
        run = reference_hmc(linear_model(), (x, y), x_test=_test_inputs(), rng_key=KEY,
                            confirm_segments=0, **settings)  # fmt: skip
    assert run.converged and run.segments == 1


def test_check_convergence_on_known_chains():
    rng = np.random.default_rng(0)
    f = rng.normal(size=(4, 500, 20))
    assert check_convergence(f)["converged"]
    shifted = f.copy()
    shifted[0, :, :2] += 1.0  # 10 % of the quantities disagree between chains
    r = check_convergence(shifted)
    assert not r["converged"] and r["share_rhat_ok"] == pytest.approx(0.9)
    # a share of 90 % allows those two (their ESS is still >= 400: each chain mixes well)
    assert check_convergence(shifted, min_share=0.9)["converged"]
    short = rng.normal(size=(4, 50, 20))  # 200 draws: ESS < 400 everywhere
    assert check_convergence(short)["share_ess_ok"] == 0.0
    loose = check_convergence(short, max_rhat=1.1, min_ess=100)
    assert loose["converged"] and loose["share_ess_ok"] == 1.0
    # a quantity with one value everywhere (a float32 probability of exactly 1) has no R-hat:
    # counted as converged and reported
    with_constant = np.concatenate([f, np.ones((4, 500, 1))], axis=-1)
    r = check_convergence(with_constant)
    assert r["converged"] and r["constant"] == 1 and r["size"] == 21


def test_quantities_agree_with_function_values():
    assert QUANTITIES == bp.config.QUANTITIES


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"max_rhat": 1.0}, "max_rhat"),
        ({"max_rhat": float("nan")}, "max_rhat"),
        ({"min_share": 0.0}, "min_share"),
        ({"min_share": 1.5}, "min_share"),
        ({"min_ess": 0}, "min_ess"),
        ({"burn_in": 1.0}, "burn_in"),
        ({"burn_in": -0.1}, "burn_in"),
        ({"max_draws": 0}, "max_draws"),
        ({"max_seconds": 0.0}, "max_seconds"),
        ({"max_seconds": -1.0}, "max_seconds"),
        ({"num_chains": 1}, "num_chains"),
        ({"segment_draws": 2}, "segment_draws"),
        ({"mass_matrix": "full"}, "mass_matrix"),
        ({"quantity": "logits"}, "quantity"),
        ({"quantity": "probs"}, "not defined for a regression model"),
        ({"init_method": "median"}, "init_method"),
        ({"init_steps": -1}, "init_steps"),
        ({"init_steps": 1.5}, "init_steps"),
        ({"init_learning_rate": 0.0}, "init_learning_rate"),
        ({"init_steps": 10, "num_temperatures": 2}, "init_steps=10 applies to plain HMC only"),
        ({"max_draw": 10}, "max_draw"),
        ({"x_test": np.zeros((5, 3), np.float32)}, "x_test"),
        ({"x_test": np.zeros(5, np.float32)}, "x_test"),
        ({"config": {"max_draws": 10}}, "config"),
        ({"on_check": "print"}, "on_check must be a callable"),
        ({"quantity": "mean_log_density"}, "needs the test targets"),
        ({"confirm_segments": -1}, "confirm_segments"),
    ],
)
def test_bad_settings_are_refused_before_compiling(kwargs, match):
    x, y = data()
    kwargs = {"x_test": _test_inputs(), **kwargs}
    with count_compiles() as compiles, pytest.raises((ValueError, TypeError), match=match):
        reference_hmc(linear_model(), (x, y), **kwargs)
    assert compiles == []


def test_p_true_needs_labels_and_fit_needs_test_inputs():
    d = bp.data.load("digits")
    model = bp.BNN(MLP(hidden=(), out=10), bp.priors.Normal(0.3), bp.likelihoods.Categorical())
    with count_compiles() as compiles:
        with pytest.raises(ValueError, match="pass y"):
            reference_hmc(model, d, x_test=d.x_test, quantity="p_true")
        with pytest.raises(ValueError, match="y_test"):
            reference_hmc(model, d, x_test=d.x_test, y_test=d.y_test[:5], quantity="p_true")
        with pytest.raises(ValueError, match="test inputs"):
            fit(model, (d.x_train, d.y_train), ReferenceHMCConfig(), KEY)
    assert compiles == []


@pytest.mark.parametrize("record", sorted(p.name for p in REFERENCES.glob("*.json")))
def test_stored_references_load_and_their_metrics_reproduce(record):
    """Every stored run: its verdict consistent with its figures, its file intact, its metrics
    recomputed. A run stored unconverged says so plainly (``converged: false`` and the budget
    that stopped it) and is listed as such in the catalogue, never as a reference."""
    rec = read_json(REFERENCES / record)
    last = rec["recipe"]["convergence"]
    share = rec["recipe"]["min_share"]
    converged = rec["converged"]
    assert converged is last["converged"] and rec["stop_reason"] == last["stop_reason"]
    assert (rec["stop_reason"] == "converged") is converged
    if converged:  # the figures meet the rule (a run whose figures meet it is not converged
        # when a chain did not move, or warmup was cut short: then it has no figures)
        assert last["share_rhat_ok"] >= share and last["share_ess_ok"] >= share
    else:
        assert rec["stop_reason"] in ("max_draws", "max_seconds", "chains_not_moving")
    stem = record.removesuffix(".json")
    rows = [r for page in sorted(CATALOGUE.glob("*.md")) for r in page.read_text().splitlines()
            if r.startswith(f"| `{stem}` |")]  # fmt: skip
    assert len(rows) == 1, f"the catalogue (docs/references/) lists {stem} {len(rows)} times"
    # the generated catalogue (docs/_generate.py) gives a stopped run's verdict as "no (reason)"
    assert ("| no (" in rows[0] or "**not converged**" in rows[0]) is not converged, rows[0]
    arrays = load_npz(REFERENCES / rec["predictions"]["file"], sha256=rec["predictions"]["sha256"])
    y = arrays["y_test"]
    if "probs" in arrays:
        got = {"nll": bp.metrics.nll(arrays["probs"], y),
               "accuracy": bp.metrics.accuracy(arrays["probs"], y)}  # fmt: skip
    else:
        nll = float(bp.metrics.gaussian_nll(arrays["mean"], arrays["scale"], y))
        rmse = float(bp.metrics.rmse(arrays["mean"], y))
        got = {"gaussian_nll": nll, "rmse": rmse}
        if "y_std" in arrays:  # UCI: also in the target's own units
            y_std = float(arrays["y_std"])
            got |= {"rmse_original": rmse * y_std, "test_ll_original": -nll - np.log(y_std)}
        if "mean_sq_std_residual" in rec["metrics"]:  # E[(y - m)^2 / s^2]: 1 is calibrated
            got["mean_sq_std_residual"] = float(
                np.mean((y - arrays["mean"]) ** 2 / arrays["scale"] ** 2))
        if "log_density" in arrays:  # the mixture's density at each row, in the target's units
            got["test_ll_mixture_original"] = float(np.mean(arrays["log_density"])
                                                    - np.log(float(arrays["y_std"])))  # fmt: skip
    if converged and last.get("confirmation"):  # a confirmed pass: both checks meet the rule
        for check in ("passed", "last"):
            assert last["confirmation"][check]["converged"] is True
    assert set(got) == set(rec["metrics"])
    # float32 sums and differences: a tolerance scaled by the terms' magnitude (a log density
    # near 0 in the target's units is a difference of two terms of a few nats each)
    size = {k: abs(float(v)) for k, v in got.items()}
    if "y_std" in arrays and "probs" not in arrays:
        log_std = abs(float(np.log(float(arrays["y_std"]))))
        size["test_ll_original"] = abs(got["gaussian_nll"]) + log_std
        if "log_density" in arrays:
            size["test_ll_mixture_original"] = float(np.mean(np.abs(arrays["log_density"])))
            size["test_ll_mixture_original"] += log_std
    for k, v in got.items():
        assert float(v) == pytest.approx(rec["metrics"][k], rel=1e-6, abs=1e-6 * size[k]), k


def _stored(stem):
    rec = read_json(REFERENCES / f"{stem}.json")
    return rec, load_npz(
        REFERENCES / rec["predictions"]["file"], sha256=rec["predictions"]["sha256"]
    )


YACHT_REFERENCES = ("uci_yacht_split0_noise0.05", "uci_yacht_split0_noise0.05_init",
                    "uci_yacht_split0_noise0.05_init_s1")  # fmt: skip


def test_independent_yacht_references_agree_within_monte_carlo_error():
    """Three converged runs of one model from different starts (prior draws, seed 0; optimised
    starts, seeds 0 and 1) give one predictive. For every pair the Gaussian W2 between the two
    BMAs is below each reference's own chain-against-the-rest floor, the predictive sds agree
    within 10 %, and no row's BMA means differ by more than a t threshold for Monte Carlo
    standard errors estimated from four chain BMAs (3 degrees of freedom each, ~6 for the
    difference; two-sided 1 %, Bonferroni over every row of every pair)."""
    stored = {stem: _stored(stem) for stem in YACHT_REFERENCES}
    first_rec = stored[YACHT_REFERENCES[0]][0]
    for stem, (rec, _) in stored.items():
        assert rec["converged"], stem
        assert rec["model"] == first_rec["model"] and rec["data"] == first_rec["data"], stem
    for stem in YACHT_REFERENCES[1:]:  # the replicates' starts were optimised
        assert stored[stem][0]["recipe"]["convergence"]["starts"]["steps"] == 20000, stem

    def mcse(arrays):
        cm = arrays["chain_mean"]
        return cm.std(0, ddof=1) / np.sqrt(len(cm))

    def w2(m1, s1, m2, s2):
        return float(np.mean(np.sqrt((m1 - m2) ** 2 + (s1 - s2) ** 2)))

    def floor(arrays):  # chain 0's BMA against the other chains' mean BMA
        cm, cs = arrays["chain_mean"], arrays["chain_scale"]
        return w2(cm[0], cs[0], cm[1:].mean(0), cs[1:].mean(0))

    pairs = [(a, b) for i, a in enumerate(YACHT_REFERENCES) for b in YACHT_REFERENCES[i + 1 :]]
    rows = len(stored[YACHT_REFERENCES[0]][1]["mean"])
    threshold = stats.t.ppf(1 - 0.01 / (2 * rows * len(pairs)), 6)
    for name_a, name_b in pairs:
        a, b = stored[name_a][1], stored[name_b][1]
        np.testing.assert_array_equal(a["y_test"], b["y_test"])
        z = (a["mean"] - b["mean"]) / np.sqrt(mcse(a) ** 2 + mcse(b) ** 2)
        assert np.all(np.abs(z) < threshold), (name_a, name_b, z)
        assert np.all(np.abs(a["scale"] / b["scale"] - 1) < 0.10), (name_a, name_b)
        distance = w2(a["mean"], a["scale"], b["mean"], b["scale"])
        assert distance < min(floor(a), floor(b)), (name_a, name_b, distance)


STORED_DRAWS = sorted(p.name for p in REFERENCES.glob("*.json")
                      if "stored_draws" in read_json(p))  # fmt: skip


def test_references_with_stored_draws_are_stored():
    assert STORED_DRAWS, "no stored reference keeps its draws (examples/reference.py writes them)"


@pytest.mark.parametrize("record", STORED_DRAWS)
def test_a_stored_reference_re_checks_with_arviz_from_its_stored_draws(record):
    """R-hat and bulk ESS of each part of the checked values, recomputed by ArviZ itself from
    the per-chain thinned draws in the ``.npz``, equal the record's; the record's full-draw
    figures say the same of the noise sd, and the stored draws stay within their size budget."""
    import arviz as az

    rec = read_json(REFERENCES / record)
    arrays = load_npz(REFERENCES / rec["predictions"]["file"], sha256=rec["predictions"]["sha256"])
    stored = rec["stored_draws"]
    assert stored["dtype"] in ("float16", "float32") and stored["arrays"]
    size = 0
    for name in stored["arrays"]:
        a = arrays[name]
        assert a.dtype == np.dtype(stored["dtype"]) and a.shape[:2] == (rec["recipe"]["num_chains"],
                                                          stored["draws_per_chain"])  # fmt: skip
        size += a.nbytes
        flat = a.astype(np.float64).reshape(*a.shape[:2], -1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            rhat = np.asarray(az.rhat(flat, method="rank")).reshape(-1)
            ess = np.asarray(az.ess(flat, method="bulk")).reshape(-1)
        want = stored["figures"][name.removeprefix("draws_")]
        assert float(np.max(rhat)) == pytest.approx(want["rhat_max"], rel=1e-9)
        assert float(np.min(ess)) == pytest.approx(want["ess_bulk_min"], rel=1e-9)
        assert float(np.mean(rhat <= rec["recipe"]["max_rhat"])) == want["share_rhat_ok"]
        assert float(np.mean(ess >= rec["recipe"]["min_ess"])) == want["share_ess_ok"]
    assert size <= 256 * 1024


def test_the_stored_records_stay_within_their_size_budget():
    """Every record in examples/references together: at most 25 MB (each new one keeps its
    thinned draws within 256 KiB, so 80 UCI records stay under it)."""
    total = sum(p.stat().st_size for p in REFERENCES.iterdir() if p.is_file())
    assert total <= 25 * 10**6, f"examples/references holds {total / 1e6:.1f} MB"


def test_stored_draws_keep_float32_beyond_float16s_range():
    """A log density beyond float16's range (a very narrow predictive) is stored as float32,
    within the same byte budget, and the record says so; in range it is float16."""
    import importlib.util
    from types import SimpleNamespace

    path = Path(__file__).resolve().parents[3] / "examples" / "reference.py"
    spec = importlib.util.spec_from_file_location("reference_example", path)
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)
    n, chains, draws = 3, 2, 40
    model = SimpleNamespace(likelihood=SimpleNamespace(latent_sites=lambda: ("noise_scale",)))
    rng = np.random.default_rng(0)
    values = rng.normal(size=(chains, draws, 2 * n + 1))
    config = {"max_rhat": 1.01, "min_share": 0.99, "min_ess": 400}
    for scale, dtype in ((1.0, np.float16), (1e6, np.float32)):
        run = SimpleNamespace(values=values * scale, quantity="mean_log_density",
                              posterior=SimpleNamespace(config=config))  # fmt: skip
        arrays, record = ref.stored_draws(model, run, n)
        assert record["dtype"] == np.dtype(dtype).name
        assert all(a.dtype == dtype and np.all(np.isfinite(a)) for a in arrays.values())
        np.testing.assert_allclose(arrays["draws_log_density"], values[..., n : 2 * n] * scale,
                                   rtol=1e-3)  # fmt: skip

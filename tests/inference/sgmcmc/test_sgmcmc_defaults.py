"""The SG-MCMC fit recipe at its defaults (``step_size=None``, default burn-in): the posterior
variance of conjugate regression within Monte Carlo error for every kernel, the momentum
kernels' kinetic temperature within ±10 % of 1 on real data, and the checks that warn."""

from __future__ import annotations

import dataclasses
import math
import os
import warnings
from pathlib import Path

import jax
import numpy as np
import pytest
from conjugate import closed_form, data, linear_model, theta
from numpyro.diagnostics import effective_sample_size
from numpyro.infer import MCMC

import bnn_ppl as bp
from bnn_ppl import config as cfg
from bnn_ppl.inference import (
    ATMC,
    SGHMC,
    SGNHT,
    SGMCMCAccuracyWarning,
    fit,
    recommended_friction,
)
from bnn_ppl.inference.sgmcmc.schedules import cyclical_cosine
from bnn_ppl.models import MLP

UCI = os.environ.get("BNN_PPL_DATA") or str(
    Path(__file__).resolve().parents[4] / "shared" / "data" / "uci"
)
Z = 4.0  # tolerance in standard errors
KEY = jax.random.key(0)


def _variance_ratio(method, batch, chains, cycles):
    x, y = data(n=500)
    mean, cov = closed_form(x, y)
    c = cfg.CONFIGS[method](num_samples=cycles, num_chains=chains, batch_size=batch,
                            cycle_length=200)  # fmt: skip
    post = fit(linear_model(), (x, y), c, KEY)
    per_chain = theta(post.samples)  # (chains, cycle ends, 3)
    draws = per_chain.reshape(-1, 3)
    var = draws.var(0, ddof=1)
    # MCSE: the larger of a sample variance's of independent Gaussian draws, 2σ⁴/(n-1), and
    # the spread of the chains' own estimates (which holds correlated cycle ends too)
    iid = np.diag(cov) * math.sqrt(2 / (len(draws) - 1))
    chains_se = (((per_chain - mean) ** 2).mean(1)).std(0, ddof=1) / math.sqrt(chains)
    return var, np.diag(cov), np.maximum(iid, chains_se)


def _cases():
    for method in ("sgld", "sghmc", "sgnht", "atmc"):
        for batch in (32, 128):
            slow = () if (method, batch) == ("sgld", 128) else (pytest.mark.slow,)
            yield pytest.param(method, batch, marks=slow, id=f"{method}-{batch}")


@pytest.mark.statistical
@pytest.mark.parametrize("method,batch", list(_cases()))
def test_default_fit_has_the_exact_posterior_variance(method, batch):
    """Nothing to warn about (warnings are errors in the suite), and the variance within MCSE;
    SGLD at batch 32 (its cycle ends are strongly correlated: a cycle spans 0.1 relaxation
    times) with 64 chains, for an MCSE of about 10 %."""
    chains = 64 if (method, batch) == ("sgld", 32) else 8
    var, exact, se = _variance_ratio(method, batch, chains=chains, cycles=25)
    assert np.all(np.abs(var - exact) < Z * se), (method, batch, var / exact, se / exact)


def test_sgld_automatic_burn_in_spans_three_relaxation_times():
    """SGLD at batch 32 of 500 rows: its step (∝ 1/σ²) is small, and the automatic burn-in
    takes as many cycles as three relaxation times of the stiffest direction need."""
    x, y = data(n=500)
    c = cfg.SGLDConfig(num_samples=2, batch_size=32, cycle_length=200)
    post = fit(linear_model(), (x, y), c, KEY)
    used, per_cycle = post.config["num_warmup_used"], post.config["relaxations_per_cycle"]
    assert used > 2 and (used - 1) * per_cycle < 3 <= used * per_cycle, (used, per_cycle)


def test_sgld_whose_given_burn_in_cannot_reach_the_posterior_warns_before_sampling():
    """The same with num_warmup=2 given: respected, and the fit says before sampling that 2
    cycles span less than two relaxation times, naming the automatic burn-in's cycles."""
    x, y = data(n=500)
    c = cfg.SGLDConfig(num_warmup=2, num_samples=2, batch_size=32, cycle_length=200)
    with pytest.warns(SGMCMCAccuracyWarning) as caught:
        post = fit(linear_model(), (x, y), c, KEY)
    told = [str(w.message) for w in caught
            if "not yet stationary. Use num_warmup=" in str(w.message)]  # fmt: skip
    assert told, [str(w.message) for w in caught]
    need = int(told[0].split("Use num_warmup=")[1].split()[0])
    assert need > 2 and need * post.config["relaxations_per_cycle"] >= 3
    assert post.config["num_warmup_used"] == 2


# data set: (options, outputs, likelihood)
MATRIX = {
    "diabetes": ({}, 1, lambda: bp.likelihoods.Gaussian(0.5)),
    "digits": ({}, 10, bp.likelihoods.Categorical),
    "iris": ({}, 3, bp.likelihoods.Categorical),
    "uci/boston": ({"split": 0, "data_dir": UCI}, 1, lambda: bp.likelihoods.Gaussian(0.5)),
}
CHEAP = {("diabetes", 64, 16, "atmc"), ("iris", None, 16, "sghmc")}
# cells whose run warns today (strict: the test says so when they stop warning)
KNOWN_WARNING: dict[tuple, str] = {}


def _matrix():
    for name in MATRIX:
        for batch in (64 if name == "diabetes" else 32, None):
            for width in (16, 64):
                for method in ("sghmc", "sgnht", "atmc"):
                    case = (name, batch, width, method)
                    marks = () if case in CHEAP else (pytest.mark.slow,)
                    if case in KNOWN_WARNING:
                        marks += (pytest.mark.xfail(strict=True, reason=KNOWN_WARNING[case]),)
                    yield pytest.param(*case, marks=marks, id="-".join(map(str, case)))


@pytest.mark.parametrize("name,batch,width,method", list(_matrix()))
def test_default_fit_runs_at_kinetic_temperature_one(name, batch, width, method):
    """The README's fit (cycles of 200 steps, default burn-in) on each problem: every sampling
    step's mean kinetic temperature within ±10 % of 1, and nothing for the check to warn
    about (warnings are errors in the suite)."""
    options, out, likelihood = MATRIX[name]
    d = bp.data.load(name, **options)
    model = bp.BNN(MLP(hidden=(width,), out=out), bp.priors.Normal(1.0), likelihood())
    c = cfg.CONFIGS[method](cycle_length=200, num_samples=5, batch_size=batch)
    post = fit(model, d, c, KEY)
    acc = post.config["accuracy"]
    assert abs(acc["kinetic_temperature"] - 1) < 0.1, acc
    assert acc["problems"] == []


def _settling(**options):
    """From a MAP of a few Adam steps the chain is still descending when sampling starts."""
    d = bp.data.load("diabetes")
    model = bp.BNN(MLP(hidden=(16,), out=1), bp.priors.Normal(1.0), bp.likelihoods.Gaussian(0.5))
    c = cfg.ATMCConfig(cycle_length=100, num_samples=5, batch_size=64, map_steps=20, **options)
    return fit(model, d, c, KEY)


def test_a_run_still_settling_warns_with_a_longer_burn_in():
    """With num_warmup given, the potential energy's drift over the sampling steps warns,
    naming a burn-in longer than the run's."""
    with pytest.warns(SGMCMCAccuracyWarning):
        post = _settling(num_warmup=2)
    problem = [p for p in post.config["accuracy"]["problems"] if "stationary" in p][0]
    assert "num_warmup=" in problem and "(this run: 2)" in problem
    cycles = int(problem.split("num_warmup=")[1].split()[0])
    assert cycles > 2


def test_the_automatic_burn_in_extends_until_the_draws_are_stationary():
    """The same run with the automatic burn-in: the drifting cycles become burn-in, and the
    draws kept are stationary (nothing warns; warnings are errors in the suite)."""
    post = _settling()
    assert post.config["num_warmup_used"] >= 2 + 5, post.config["num_warmup_used"]
    assert post.config["accuracy"]["problems"] == []


def test_a_batch_too_small_for_any_step_size_warns_before_sampling_naming_one():
    """SGLD at a batch of 2 of 500 rows: the noise forces the step far below the curvature's
    bound; the fit warns before sampling and names a batch size at which it does not."""
    x, y = data(n=500)
    c = cfg.SGLDConfig(num_warmup=1, num_samples=2, cycle_length=20, batch_size=2, map_steps=50)
    with pytest.warns(SGMCMCAccuracyWarning) as caught:
        fit(linear_model(), (x, y), c, KEY)
    first = [str(w.message) for w in caught if "Use batch_size=" in str(w.message)][0]
    assert first.startswith("SGLD at batch_size=2")
    need = int(first.split("Use batch_size=")[1].split()[0])
    assert need > 2
    with warnings.catch_warnings():
        warnings.simplefilter("error", SGMCMCAccuracyWarning)
        try:
            fit(linear_model(), (x, y), dataclasses.replace(c, batch_size=need), KEY)
        except SGMCMCAccuracyWarning as e:  # only the after-sampling checks may speak
            assert not str(e).startswith("SGLD at batch_size="), str(e)


def test_recommended_friction_ties_the_momentum_time_to_the_step():
    assert recommended_friction("SGHMC", 1e-3) == {"friction": pytest.approx(100.0)}
    assert recommended_friction("SGNHT", 1e-3) == {"diffusion": pytest.approx(10.0)}
    assert recommended_friction("ATMC", 1.0) == {"momentum_noise": 1.0}  # never below 1
    assert recommended_friction("SGLD", 1e-3) == {}


@pytest.mark.parametrize("cls,field,per_step", [
    (SGHMC, "friction", 0.1), (SGNHT, "diffusion", 0.01), (ATMC, "momentum_noise", 0.1),
])  # fmt: skip
def test_kernel_classes_default_to_the_recommended_friction_at_their_first_step(
    cls, field, per_step
):
    """Used directly with NumPyro's MCMC, a momentum kernel's least friction is the one fit
    uses: recommended_friction at the schedule's h0 (a number or a cyclical schedule), never
    below 1; a given one is kept."""
    u = lambda z: 0.5 * (z**2).sum()  # noqa: E731
    h0 = 1e-3
    for step in (h0, cyclical_cosine(h0, 50)):
        kernel = cls(potential_fn=u, step_size=step)
        assert getattr(kernel, field) == pytest.approx(per_step / h0)
        assert {field: getattr(kernel, field)} == recommended_friction(cls.__name__, h0)
    assert getattr(cls(potential_fn=u, step_size=1.0), field) == 1.0
    assert getattr(cls(potential_fn=u, step_size=h0, **{field: 3.0}), field) == 3.0
    # and the sampler runs at it: a standard normal's variance within MCSE at the default
    mcmc = MCMC(cls(potential_fn=u, step_size=0.05), num_warmup=500, num_samples=20_000,
                progress_bar=False)  # fmt: skip
    mcmc.run(jax.random.key(1), init_params=np.zeros(4, np.float32))
    z = np.asarray(mcmc.get_samples())
    ess = float(np.min(effective_sample_size(z[None])))
    assert abs(z.var() - 1) < Z * math.sqrt(2 / ess), (z.var(), ess)


# ------------------------------------------------------------- sites outside the network
def _learned_noise_model(scale=1.0):
    import numpyro.distributions as dist

    return bp.BNN(MLP(hidden=(), out=1), bp.priors.Normal(1.0),
                  bp.likelihoods.Gaussian(scale=dist.HalfNormal(scale)))  # fmt: skip


def test_latent_curvature_of_a_learned_noise_sd_is_its_closed_form():
    """At s = log σ the potential's curvature along s is 2 Σr²/σ² + 2σ²/a² (likelihood and
    HalfNormal(a) prior; the Jacobian's s is linear), r the residuals at the weights."""
    from bnn_ppl.inference.potential.bnn import full_batch_potential
    from bnn_ppl.inference.sgmcmc.recipe import latent_curvatures

    x, y = data(n=60, seed=2)
    model, a = _learned_noise_model(0.7), 0.7
    pot = full_batch_potential(model, x, y)
    params = {
        "Dense_0.kernel": np.array([[0.5], [-0.2]], np.float32),
        "Dense_0.bias": np.array([0.1], np.float32),
        "noise_scale": np.float32(0.4),
    }
    got = latent_curvatures(pot, pot.unconstrain(params))
    r = y.astype(np.float64) - (x.astype(np.float64) @ [0.5, -0.2] + 0.1)
    want = 2 * np.sum(r**2) / 0.4**2 + 2 * 0.4**2 / a**2
    assert list(got) == ["noise_scale"]
    # float32: the curvature sums 60 rows' terms of this size
    assert got["noise_scale"] == pytest.approx(want, rel=1e-5 * math.sqrt(60) * 10)


def test_sgmcmc_fit_warns_when_a_learned_noise_sd_cannot_relax_in_the_sampled_cycles():
    """A step size far below what σ's coordinate needs: its draws are where the chains began,
    and the fit says so (warning and record), naming the site and the cycles it needs."""
    x, y = data(n=60, seed=2)
    c = cfg.SGLDConfig(step_size=1e-6, num_warmup=2, num_samples=10, num_chains=2,
                       cycle_length=50, batch_size=None, map_steps=200)  # fmt: skip
    with pytest.warns(SGMCMCAccuracyWarning) as caught:
        post = fit(_learned_noise_model(), (x, y), c, KEY)
    texts = [str(w.message) for w in caught if "'noise_scale' is barely" in str(w.message)]
    assert len(texts) == 1 and "heldout_noise" in texts[0]
    per_cycle = post.config["latent_relaxations_per_cycle"]["noise_scale"]
    assert 10 * per_cycle < 1  # the ten cycles span less than one relaxation time
    assert f"{math.ceil(20 / per_cycle):,} at least" in texts[0]
    assert texts[0] in post.config["accuracy"]["problems"]


def test_sgmcmc_fit_samples_a_learned_noise_sd_that_relaxes_without_warning():
    """Linear regression (σ's curvature comparable to the weights'): the default recipe samples
    σ with no warning, and its draws' mean is the residual sd within four posterior sds."""
    x, y = data(n=500, seed=3)
    c = cfg.SGLDConfig(num_samples=60, num_chains=2, batch_size=128)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SGMCMCAccuracyWarning)
        post = fit(_learned_noise_model(), (x, y), c, KEY)
    assert all(20 <= 60 * v for v in post.config["latent_relaxations_per_cycle"].values())
    sigma = np.asarray(post.samples["noise_scale"], np.float64)
    phi = np.concatenate([x, np.ones((len(x), 1))], axis=1).astype(np.float64)
    beta = np.linalg.lstsq(phi, y.astype(np.float64), rcond=None)[0]
    ols = np.sqrt(np.sum((y - phi @ beta) ** 2) / (len(y) - 3))
    # σ's posterior sd is about σ/√(2n); the draws' mean is within 4 of it
    assert abs(sigma.mean() - ols) < 4 * ols / math.sqrt(2 * len(y))


def test_latent_problems_flag_chains_whose_draws_of_a_hyper_site_disagree():
    from bnn_ppl.inference.sgmcmc.recipe import latent_problems

    rng = np.random.default_rng(0)
    c = cfg.SGLDConfig(num_samples=20, num_chains=2)
    apart = np.stack([0.2 + 0.01 * rng.normal(size=20), 0.3 + 0.01 * rng.normal(size=20)])
    mixed = 0.25 + 0.01 * rng.normal(size=(2, 20))
    extra = {"latent_relaxations_per_cycle": {"Dense_0.prior_scale": 10.0}}
    (problem,) = latent_problems(c, {"Dense_0.prior_scale": apart}, extra)
    assert "'Dense_0.prior_scale' disagree" in problem and "a prior without one" in problem
    assert latent_problems(c, {"Dense_0.prior_scale": mixed}, extra) == []


def test_check_accuracy_flags_a_learned_noise_sd_whose_chains_stay_apart():
    """SGLD inside numpyro's MCMC at a step far too small for σ: two chains started at σ 0.2
    and 0.8 keep them, and check_accuracy (on the run, not only fit) says so."""
    from numpyro.infer import MCMC

    from bnn_ppl.inference import SGLD, check_accuracy
    from bnn_ppl.inference.potential.bnn import full_batch_potential

    x, y = data(n=60, seed=2)
    pot = full_batch_potential(_learned_noise_model(), x, y)
    assert pot.outside_network == ("noise_scale",)
    init = pot.init_params(jax.random.key(0), num_chains=2)
    init["noise_scale"] = np.log(np.array([0.2, 0.8], np.float32))  # unconstrained: log σ
    mcmc = MCMC(SGLD(pot, step_size=1e-7), num_warmup=10, num_samples=40, num_chains=2,
                chain_method="vectorized", progress_bar=False)  # fmt: skip
    mcmc.run(jax.random.key(1), *pot.args, init_params=init)
    with warnings.catch_warnings(record=True) as caught:  # (also: the weights still settle)
        warnings.simplefilter("always")
        problems = check_accuracy(mcmc)
    (problem,) = [p for p in problems if "noise_scale" in p]
    assert any(str(w.message) == problem for w in caught)
    import re

    means = [float(v) for v in re.search(r"chain means ([\d.]+), ([\d.]+)", problem).groups()]
    assert means == pytest.approx([0.2, 0.8], abs=0.05) and "heldout_noise" in problem

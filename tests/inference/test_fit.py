"""``fit``: one driver, every method, one Posterior; the configs that drive it.

Known answers come from conjugate Bayesian linear regression (``tests/conjugate.py``):
tolerances from Monte Carlo standard errors, as in ``test_hmc.py`` and ``test_baselines.py``.
"""

from __future__ import annotations

import dataclasses
import json
import warnings

import jax
import numpy as np
import pytest
from conftest import count_compiles
from conjugate import assert_matches_gaussian, closed_form, data, linear_model, theta

import bnn_ppl as bp
from bnn_ppl import config as cfg
from bnn_ppl.inference import SGMCMCAccuracyWarning, fit, hmc
from bnn_ppl.models import MLP

KEY = jax.random.key(0)


def _split(n_test=10):
    x, y = data(n=30 + n_test)
    return x[:30], y[:30], x[30:], y[30:]


@pytest.mark.statistical
def test_fit_nuts_recovers_the_conjugate_posterior_and_fills_every_group():
    x, y, xt, yt = _split()
    post = fit(
        linear_model(),
        (x, y, xt, yt),
        cfg.NUTSConfig(num_warmup=300, num_samples=1000, num_chains=4, max_tree_depth=5),
        jax.random.key(2),
    )
    mean, cov = closed_form(x, y)
    assert_matches_gaussian(theta(post.samples), mean, cov)
    assert post.method == "nuts" and (post.num_chains, post.num_draws) == (4, 1000)
    assert {"energy", "acceptance_rate", "diverging", "tree_depth", "lp"} <= set(post.sample_stats)
    assert post.log_likelihood["y"].shape == (4, 1000, 30)
    assert post.log_likelihood["y_test"].shape == (4, 1000, 10)
    assert post.predictions["mean"].shape == (4, 1000, 10)
    # the predictive mean of each draw is its linear function of the test inputs
    th = theta(post.samples)
    lin = np.einsum("cdk,nk->cdn", th[..., :2], xt.astype(np.float64)) + th[..., 2:3]
    np.testing.assert_allclose(post.predictions["mean"], lin, rtol=1e-4, atol=1e-4)
    assert post.config == cfg.NUTSConfig(
        num_warmup=300, num_samples=1000, num_chains=4, max_tree_depth=5
    ).to_dict() | {k: post.config[k] for k in ("kernel", "thinning")}


def test_fit_hmc_is_the_chain_hmc_draws():
    x, y = data()
    c = cfg.HMCConfig(num_warmup=20, num_samples=30, num_chains=2)
    post = fit(linear_model(), (x, y), c, KEY)
    mcmc = hmc(linear_model(), x, y, rng_key=KEY, num_warmup=20, num_samples=30, num_chains=2)
    for name, value in mcmc.get_samples(group_by_chain=True).items():
        np.testing.assert_array_equal(post.samples[name], np.asarray(value))
    assert post.predictions == {}  # no test inputs, no predictions
    # fit's devices= places the potential as hmc()'s did (one device here: the same draws), and
    # mass_matrix="identity" is hmc()'s adapt_mass_matrix=False
    placed = fit(linear_model(), (x, y), c, KEY, devices=jax.devices()[:1])
    assert placed == post
    c = cfg.HMCConfig(num_warmup=20, num_samples=30, mass_matrix="identity")
    fixed = fit(linear_model(), (x, y), c, KEY)
    mcmc = hmc(linear_model(), x, y, rng_key=KEY, num_warmup=20, num_samples=30,
               adapt_mass_matrix=False)  # fmt: skip
    for name, value in mcmc.get_samples(group_by_chain=True).items():
        np.testing.assert_array_equal(fixed.samples[name], np.asarray(value))


def test_fit_with_chunk_size_auto_takes_the_memory_rule_through_every_step():
    """``chunk_size="auto"`` reaches the potential (on the CPU, which reports no free memory,
    the rule falls back to 1024 rows: the draws of ``None``) and the predictions (all rows
    per call), and the config records it."""
    x, y, xt, yt = _split()
    c = cfg.HMCConfig(num_warmup=10, num_samples=10, chunk_size="auto")
    post = fit(linear_model(), (x, y, xt, yt), c, KEY)
    base = fit(linear_model(), (x, y, xt, yt), dataclasses.replace(c, chunk_size=None), KEY)
    for name, value in base.samples.items():
        np.testing.assert_array_equal(post.samples[name], value)
    np.testing.assert_array_equal(post.predictions["mean"], base.predictions["mean"])
    assert post.config["chunk_size"] == "auto"
    with pytest.raises(bp.InputError, match="chunk_size must be a positive int, None .* 'auto'"):
        cfg.HMCConfig(chunk_size="big")


def test_fit_svi_with_the_map_recipe_finds_the_mean_field_optimum():
    """Draws from the fitted guide: their mean is the posterior mean and their sd the
    mean-field sd 1/sqrt(diag Λ), within the optimiser's end-of-run error measured in
    test_baselines (0.05 sd for means, 3% for scales) plus 4.5 MCSE of the draws."""
    x, y = data()
    n = 4000
    c = cfg.SVIConfig(num_steps=2000, learning_rate=0.05, map_steps=300, num_particles=16,
                      num_samples=n)  # fmt: skip
    post = fit(linear_model(), (x, y), c, KEY)
    assert post.method == "svi" and (post.num_chains, post.num_draws) == (1, n)
    assert np.isfinite(post.config["map_final_loss"])
    assert post.trace["loss"].shape == (2000,)
    mean, cov = closed_form(x, y)
    sd_mf = 1.0 / np.sqrt(np.diag(np.linalg.inv(cov)))
    th = theta(post.samples)[0]
    np.testing.assert_array_less(np.abs(th.mean(0) - mean) / sd_mf, 0.05 + 4.5 / np.sqrt(n))
    np.testing.assert_array_less(np.abs(th.std(0) / sd_mf - 1), 0.03 + 4.5 / np.sqrt(2 * n))


def test_fit_map_and_ensemble_put_members_on_the_chain_axis():
    x, y = data()
    mean, cov = closed_form(x, y)
    # the MAP of a Gaussian posterior is its mean: after 1000 Adam steps within 1% of a sd
    post = fit(linear_model(), (x, y), cfg.MAPConfig(num_steps=1000, learning_rate=0.05), KEY)
    assert (post.method, post.num_chains, post.num_draws) == ("map", 1, 1)
    sd = np.sqrt(np.diag(cov))
    np.testing.assert_array_less(np.abs(theta(post.samples)[0, 0] - mean), 0.01 * sd)
    ens = fit(linear_model(), (x, y), cfg.EnsembleConfig(num_members=3, num_steps=1000,
                                                         learning_rate=0.05), KEY)  # fmt: skip
    assert (ens.method, ens.num_chains, ens.num_draws) == ("ensemble", 3, 1)
    assert ens.trace["loss"].shape == (3, 1000)


@pytest.mark.parametrize("method", ["sgld", "atmc"])
def test_fit_sgmcmc_measures_its_step_size_and_keeps_one_draw_per_cycle(method, tmp_path):
    x, y = data()
    c = cfg.CONFIGS[method](num_warmup=1, num_samples=5, num_chains=2, cycle_length=20,
                            batch_size=10)  # fmt: skip
    if method == "sgld":  # one burn-in cycle of 20 steps at SGLD's small step: told before sampling
        with pytest.warns(SGMCMCAccuracyWarning, match="not yet stationary"):
            post = fit(linear_model(), (x, y), c, KEY)
    else:
        post = fit(linear_model(), (x, y), c, KEY)
    assert (post.method, post.num_chains, post.num_draws) == (method, 2, 5)
    step = post.config["step_size_used"]
    assert step > 0 and post.config["step_size"] is None
    assert post.config["scales"]["curvature"] > 0
    # the chains moved: the cycle-end draws differ
    assert np.all(np.std(theta(post.samples), axis=1) > 0)
    # a given step size is used as is and nothing is measured
    given = fit(linear_model(), (x, y), dataclasses.replace(c, step_size=step), KEY)
    assert given.config["scales"] is None and given.config["step_size"] == step
    # what check_accuracy finds in every sampling step (2 chains x 5 cycles x 20) is kept
    report = post.config["accuracy"]
    assert report["steps"] == 200 and isinstance(report["problems"], list)
    assert np.isfinite(report["noise_share"])
    if method == "atmc":
        assert report["kinetic_temperature"] > 0 and "beta_mean" in report
        # a checkpointed run stores the Info too and reports the same
        seg = fit(linear_model(), (x, y), dataclasses.replace(c, step_size=step), KEY,
                  checkpoint_dir=tmp_path, checkpoint_every=5)  # fmt: skip
        got, want = dict(seg.config["accuracy"]), dict(given.config["accuracy"])
        assert got.pop("problems") == want.pop("problems")
        assert got == pytest.approx(want, rel=1e-5)


@pytest.mark.parametrize("method,factor", [("sghmc", 10), ("sgnht", 20), ("atmc", 10)])
def test_fit_reports_an_inaccurate_sgmcmc_run_and_not_one_at_its_recommended_step(method, factor):
    # conjugate regression, batches of 5 of 30 rows, 4 cycles of 50 steps after one burn-in
    x, y = data()
    c = cfg.CONFIGS[method](num_warmup=1, num_samples=4, cycle_length=50, batch_size=5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # at the recommended step size: nothing to report
        fine = fit(linear_model(), (x, y), c, KEY)
    assert fine.config["accuracy"]["problems"] == []
    assert fine.config["accuracy"]["capped_steps"] == 0
    # ten times that step (SGNHT's is for a 1 % Euler bias, the check's bound is 5 %: twenty):
    # the friction is at its cap, or SGNHT cold by hξ/2, at each cycle start, which the draws
    # (at the cycle ends, where the step size is ~0) do not show; the steps do
    big = dataclasses.replace(c, step_size=factor * fine.config["step_size_used"])
    with pytest.warns(SGMCMCAccuracyWarning):
        post = fit(linear_model(), (x, y), big, KEY)
    report = post.config["accuracy"]
    assert report["problems"] and report["steps"] == 200
    assert report["capped_steps"] > 0 or "hξ/2" in report["problems"][-1]


def test_a_fitted_posterior_round_trips_and_arviz_reads_it(tmp_path):
    import arviz as az

    x, y, xt, yt = _split()
    post = fit(linear_model(), (x, y, xt, yt), cfg.HMCConfig(num_warmup=50, num_samples=50,
                                                            num_chains=2), KEY)  # fmt: skip
    post.save(tmp_path / "posterior.nc")
    back = bp.Posterior.load(tmp_path / "posterior.nc")
    assert back == post
    assert cfg.from_dict({k: v for k, v in back.config.items() if k not in ("kernel",)}) == (
        cfg.HMCConfig(num_warmup=50, num_samples=50, num_chains=2)
    )
    # (a short run of a tiny model: ArviZ may warn of a large Pareto k; this checks the read)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Estimated shape parameter of Pareto")
        loo = az.loo(back.to_inference_data(), var_name="y")
    assert np.isfinite(float(loo["elpd"] if isinstance(loo, dict) else loo.elpd))


# ------------------------------------------------------------------------- configs
@pytest.mark.parametrize("name", sorted(cfg.CONFIGS))
def test_every_config_round_trips_through_json(name):
    c = cfg.CONFIGS[name]()
    record = json.loads(json.dumps(c.to_dict()))
    assert record["method"] == name
    assert cfg.from_dict(record) == c


@pytest.mark.parametrize(
    "build,field",
    [
        (lambda: cfg.HMCConfig(num_samples=0), "num_samples"),
        (lambda: cfg.HMCConfig(num_warmup=-1), "num_warmup"),
        (lambda: cfg.HMCConfig(step_size=float("nan")), "step_size"),
        (lambda: cfg.HMCConfig(trajectory_length=0.0), "trajectory_length"),
        (lambda: cfg.NUTSConfig(target_accept_prob=1.5), "target_accept_prob"),
        (lambda: cfg.NUTSConfig(max_tree_depth=2.5), "max_tree_depth"),
        (lambda: cfg.SVIConfig(learning_rate=-1.0), "learning_rate"),
        (lambda: cfg.SVIConfig(num_samples=True), "num_samples"),
        (lambda: cfg.EnsembleConfig(num_members=0), "num_members"),
        (lambda: cfg.MAPConfig(batch_size=0), "batch_size"),
        (lambda: cfg.ATMCConfig(cycle_length=0), "cycle_length"),
        (lambda: cfg.SGLDConfig(step_size=float("inf")), "step_size"),
        (lambda: cfg.HMCConfig(init_method="zeros"), "init_method"),
        (lambda: cfg.HMCConfig(chunk_size=0), "chunk_size"),
        (lambda: cfg.from_dict({"method": "hmc", "num_sample": 3}), "num_sample"),
        (lambda: cfg.from_dict({"method": "bogus"}), "method"),
    ],
)
def test_a_bad_setting_is_refused_naming_the_field(build, field):
    with pytest.raises(bp.InputError, match=field):
        build()


@pytest.mark.parametrize(
    "data_,match",
    [
        (lambda x, y: (x, y, x[:, :1]), "x_test"),
        (lambda x, y: (x, y, x, y[:5]), "y_test"),
        (lambda x, y: (x, y, None, y), "y_test"),
        (lambda x, y: (x, np.full_like(y, np.nan)), "y"),
        (lambda x, y: [x, y], "data"),
    ],
)
def test_fit_refuses_bad_data_before_compiling(data_, match):
    x, y = data()
    with count_compiles() as compiles, pytest.raises(bp.InputError, match=match):
        fit(linear_model(), data_(x, y), cfg.HMCConfig(num_warmup=5, num_samples=5), KEY)
    assert compiles == []


@pytest.mark.parametrize("config", [cfg.HMCConfig(), cfg.MAPConfig()])
def test_fit_in_one_of_several_processes_is_refused_before_compiling(monkeypatch, config):
    """Under jax.distributed fit's Posterior would hold the process's own rows only: refused,
    naming the documented way (MCMC on a potential of every process's rows)."""
    x, y = data()
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    with count_compiles() as compiles, pytest.raises(bp.InputError, match="one of 2") as e:
        fit(linear_model(), (x, y), config, KEY)
    assert "full_batch_potential" in str(e.value) and "several hosts" in str(e.value)
    assert compiles == []


def test_fit_refuses_what_is_not_a_config_or_a_bnn():
    x, y = data()
    with pytest.raises(TypeError, match="config"):
        fit(linear_model(), (x, y), {"method": "hmc"}, KEY)
    with pytest.raises(TypeError, match="model"):
        fit(MLP(out=1), (x, y), cfg.HMCConfig(), KEY)
    with pytest.raises(TypeError, match="rng_key"):
        fit(linear_model(), (x, y), cfg.HMCConfig(), 0)
    # on_check is a reference run's (its convergence checks): refused before compiling
    with count_compiles() as compiles, pytest.raises(ValueError, match="on_check applies to "
                                                     "ReferenceHMCConfig runs .* HMCConfig"):
        fit(linear_model(), (x, y), cfg.HMCConfig(), KEY, on_check=print)
    # devices and dtype place a sampler's potential: refused for the optimisers, naming them
    with count_compiles() as compiles, pytest.raises(ValueError, match="devices applies to HMC"):
        fit(linear_model(), (x, y), cfg.MAPConfig(), KEY, devices=jax.devices())
    with pytest.raises(ValueError, match="mass_matrix must be one of"):
        cfg.NUTSConfig(mass_matrix="full")
    assert compiles == []
    # a record written before mass_matrix existed still loads
    old = cfg.from_dict({"method": "hmc", "adapt_mass_matrix": False})
    assert old == cfg.HMCConfig(mass_matrix="identity")

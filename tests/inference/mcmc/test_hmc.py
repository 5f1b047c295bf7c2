"""HMC/NUTS on the potential, against the closed-form posterior of Bayesian linear regression.

A BNN with no hidden layer, a linear output and a Gaussian likelihood with known noise is
conjugate: the (tempered) posterior is Gaussian with known mean and covariance. Tolerances come
from Monte Carlo standard errors: for a statistic f, MCSE = sd(f) / sqrt(ESS(f)), with the ESS
estimated from the chains; we ask for agreement within 4.5 MCSE for every mean and covariance
entry (27 checks: a false alarm about once in 5,000 runs, while a sampler error of a few percent
of a posterior standard deviation is caught).
"""

from __future__ import annotations

import io
from contextlib import redirect_stdout

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import pytest
from conjugate import PRIOR_SCALE, assert_matches_gaussian, closed_form, data, linear_model, theta
from numpyro.diagnostics import effective_sample_size
from numpyro.infer import MCMC

import bnn_ppl as bp
from bnn_ppl.inference import full_batch_potential, hmc, nuts
from bnn_ppl.models import MLP


@pytest.mark.statistical
@pytest.mark.parametrize(
    "temperature,temper", [(1.0, "likelihood"), (0.5, "likelihood"), (0.5, "posterior")]
)
def test_hmc_recovers_conjugate_posterior(temperature, temper):
    x, y = data()
    mcmc = hmc(
        linear_model(temperature, temper),
        x,
        y,
        rng_key=jax.random.key(1),
        num_warmup=400,
        num_samples=1500,
        num_chains=4,
    )
    assert int(mcmc.get_extra_fields()["diverging"].sum()) == 0
    mean, cov = closed_form(x, y, temperature, temper)
    assert_matches_gaussian(theta(mcmc.get_samples(group_by_chain=True)), mean, cov)


@pytest.mark.statistical
def test_nuts_recovers_conjugate_posterior():
    x, y = data(seed=3)
    mcmc = nuts(
        linear_model(),
        x,
        y,
        rng_key=jax.random.key(2),
        num_warmup=300,
        num_samples=1000,
        num_chains=4,
        max_tree_depth=5,
    )
    mean, cov = closed_form(x, y, 1.0, "likelihood")
    assert_matches_gaussian(theta(mcmc.get_samples(group_by_chain=True)), mean, cov)


def test_tempering_is_detectable():
    """The check above has power: the T=0.5 posterior is not accepted as the T=1 one."""
    x, y = data()
    mcmc = hmc(
        linear_model(0.5, "posterior"),
        x,
        y,
        rng_key=jax.random.key(1),
        num_warmup=400,
        num_samples=1500,
        num_chains=4,
    )
    mean, cov = closed_form(x, y, 1.0, "likelihood")
    with pytest.raises(AssertionError, match="cov"):
        assert_matches_gaussian(theta(mcmc.get_samples(group_by_chain=True)), mean, cov)


def test_users_can_build_numpyro_kernels_on_the_potential():
    """The issue's recipe: NumPyro's own HMC on pot.potential_fn, real MCMC features work."""
    x, y = data()
    pot = full_batch_potential(linear_model(), x, y, chunk_size=8)
    kernel = numpyro.infer.HMC(
        potential_fn=pot.potential_fn, trajectory_length=1.0, adapt_step_size=True
    )
    mcmc = MCMC(
        kernel,
        num_warmup=100,
        num_samples=200,
        num_chains=2,
        chain_method="vectorized",
        postprocess_fn=pot.postprocess_fn,
        progress_bar=False,
    )
    mcmc.run(jax.random.key(0), init_params=pot.init_params(jax.random.key(1), num_chains=2))
    samples = mcmc.get_samples()
    assert samples["Dense_0.kernel"].shape == (400, 2, 1)
    mean, _ = closed_form(x, y, 1.0, "likelihood")
    # the posterior mean within 4.5 Monte Carlo standard errors (was a fixed atol=0.1)
    th = theta(mcmc.get_samples(group_by_chain=True))  # (chains, draws, 3)
    for i in range(3):
        ess = float(np.ravel(effective_sample_size(th[..., i]))[0])
        assert ess > 50, f"theta[{i}]: ESS {ess:.0f} is too small to test anything"
        mcse = th[..., i].std() / np.sqrt(ess)
        assert abs(th[..., i].mean() - mean[i]) < 4.5 * mcse, (i, th[..., i].mean(), mean[i], mcse)
    out = io.StringIO()
    with redirect_stdout(out):
        mcmc.print_summary()
    assert "Dense_0.kernel[0,0]" in out.getvalue() and "r_hat" in out.getvalue()


# 30 warmup iterations are too short for dual averaging (chains get stuck, and hmc() says so;
# the 8-step cap shortens their trajectories, and it says so); this test is about reproducibility
@pytest.mark.filterwarnings("ignore::bnn_ppl.diagnostics.chain_health.StuckChainWarning")
@pytest.mark.filterwarnings("ignore::bnn_ppl.inference.mcmc.checks.LeapfrogLimitWarning")
def test_same_seed_same_samples_and_noise_prior_is_constrained():
    import numpyro.distributions as dist

    x, y = data()
    model = bp.BNN(
        MLP(hidden=(3,), out=1),
        bp.priors.Normal(1.0),
        bp.likelihoods.Gaussian(scale=dist.HalfNormal(1.0)),
    )
    # (at most 8 leapfrog steps a draw: the default trajectory is hundreds of tiny steps here)
    kw = dict(rng_key=jax.random.key(7), num_warmup=30, num_samples=20, num_chains=2,
              max_num_steps=8)  # fmt: skip
    a = hmc(model, x, y, **kw).get_samples()
    b = hmc(model, x, y, **kw).get_samples()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    assert np.all(np.asarray(a["noise_scale"]) > 0)  # postprocessed to the constrained value
    c = hmc(model, x, y, **{**kw, "rng_key": jax.random.key(8)}).get_samples()
    assert not np.array_equal(a["Dense_0.kernel"], c["Dense_0.kernel"])


def test_hmc_argument_errors():
    x, y = data()
    model = linear_model()
    with pytest.raises(ValueError, match="chain_method"), pytest.warns(
        DeprecationWarning, match=r"hmc\(\) is deprecated; use bnn_ppl.fit"
    ):
        hmc(model, x, y, chain_method="parallel")
    with pytest.raises(ValueError, match="trajectory_length"):
        hmc(model, x, y, trajectory_length=-1.0)
    with pytest.raises(ValueError, match="num_samples"):
        hmc(model, x, y, num_samples=0)
    with pytest.raises(TypeError, match="FullBatchPotential"):
        bp.inference.HMC(model, trajectory_length=1.0)


def test_default_trajectory_length_follows_prior_and_temperature():
    x, _ = data()
    tl = bp.inference.default_trajectory_length
    assert tl(linear_model(), x) == pytest.approx(0.5 * np.pi * PRIOR_SCALE)
    assert tl(linear_model(0.25, "posterior"), x) == pytest.approx(0.25 * np.pi * PRIOR_SCALE)
    assert tl(linear_model(0.25, "likelihood"), x) == pytest.approx(0.5 * np.pi * PRIOR_SCALE)
    lap = bp.BNN(MLP(hidden=(), out=1), bp.priors.Laplace(1.0), bp.likelihoods.Gaussian(1.0))
    assert tl(lap, x) == pytest.approx(0.5 * np.pi * np.sqrt(2.0))


def test_arviz_reads_the_mcmc():
    import arviz as az

    x, y = data()
    mcmc = hmc(linear_model(), x, y, num_warmup=20, num_samples=30, num_chains=2)
    idata = az.from_numpyro(mcmc)
    post = idata["posterior"]
    assert "Dense_0.kernel" in post.data_vars
    assert post["Dense_0.kernel"].shape[:2] == (2, 30)
    assert "diverging" in idata["sample_stats"].data_vars
    assert jnp.isfinite(jnp.asarray(az.rhat(idata)["Dense_0.bias"].values)).all()


def _state(step, inverse_mass_matrix, length):
    """An HMCState with only the fields the kernel's guards read filled in."""
    from numpyro.infer.hmc import HMCState
    from numpyro.infer.hmc_util import HMCAdaptState

    adapt = HMCAdaptState(jnp.asarray(step, jnp.float32), jnp.asarray(inverse_mass_matrix),
                          None, None, None, None, None, None)  # fmt: skip
    return HMCState(None, None, None, None, None, None, jnp.asarray(length, jnp.float32), None,
                    None, None, None, adapt, None)  # fmt: skip


def test_hmc_kernel_follows_the_metric_and_bounds_the_step_size():
    """hmc()'s kernel: Izmailov et al.'s length while the metric is the identity, π/2 once it
    is adapted; the step size at most L, and a step size below L / (max_num_steps - 1/2) kept
    with the trajectory shortened to max_num_steps steps, per chain."""
    from bnn_ppl.inference.mcmc.run import hmc_kernel

    x, y = data()
    model = bp.BNN(MLP(hidden=(), out=1), bp.priors.Normal(0.3), bp.likelihoods.Gaussian(0.5))
    kernel = hmc_kernel(full_batch_potential(model, x, y), max_num_steps=100)
    izmailov = np.float32(0.5 * np.pi * 0.3)
    assert kernel.identity_trajectory_length == pytest.approx(0.5 * np.pi * 0.3)
    assert kernel.metric_trajectory_length == pytest.approx(0.5 * np.pi)

    def guarded(step, m):
        s = kernel.bound_step_size(kernel.follow_metric(_state(step, m, izmailov)))
        return np.asarray(s.trajectory_length), np.asarray(s.adapt_state.step_size)

    length, step = guarded([3.4e38, 3.4e38], [[1.0, 1.0, 1.0], [0.01, 1.0, 1.0]])  # 2 chains
    np.testing.assert_array_equal(length, [izmailov, np.float32(np.pi / 2)])
    np.testing.assert_array_equal(step, length)  # a runaway step size is held at L: 1 step
    length, step = guarded([1e-12, 1e-12], [[1.0, 1.0, 1.0], [0.01, 1.0, 1.0]])
    np.testing.assert_array_equal(step, np.float32(1e-12))  # a vanishing one is kept,
    assert np.all(np.ceil(length / step) == 100)  # the trajectory shortened to 100 of its steps
    # and the next iteration starts again from the metric's full length (also without an
    # adapted metric, where the length is the one given)
    m = [[1.0, 1.0, 1.0], [0.01, 1.0, 1.0]]
    s = kernel.adjust(_state([0.05, 0.05], m, [1e-10, 1e-10]))
    np.testing.assert_array_equal(s.trajectory_length, [izmailov, np.float32(np.pi / 2)])
    fixed = hmc_kernel(full_batch_potential(model, x, y), trajectory_length=0.7,
                       adapt_mass_matrix=False)  # fmt: skip
    s = fixed.adjust(_state([0.05, 1e-12], m, [1e-10, 1e-10]))
    assert np.asarray(s.trajectory_length)[0] == np.float32(0.7)
    assert np.ceil(np.asarray(s.trajectory_length)[1] / 1e-12) == 1024
    length, step = guarded([0.05, 0.05], [[1.0, 1.0, 1.0], [0.01, 1.0, 1.0]])
    np.testing.assert_array_equal(step, np.float32(0.05))  # inside the range: untouched
    # without mass-matrix adaptation the metric stays the identity: Izmailov et al.'s length
    assert hmc_kernel(full_batch_potential(model, x, y), adapt_mass_matrix=False)\
        .metric_trajectory_length is None  # fmt: skip


@pytest.mark.timeout(300)
def test_hmc_kernel_runs_the_chain_hmc_runs():
    """hmc_kernel builds the kernel hmc() runs (for your own MCMC): the same chain, bit for bit."""
    from bnn_ppl.inference.mcmc.run import hmc_kernel

    x, y = data()
    model = linear_model()
    key = jax.random.key(3)
    a = hmc(model, x, y, rng_key=key, num_warmup=30, num_samples=10).get_samples()
    pot = full_batch_potential(model, x, y)
    init_key, run_key = jax.random.split(key)
    mcmc = MCMC(hmc_kernel(pot), num_warmup=30, num_samples=10, progress_bar=False,
                jit_model_args=True)  # fmt: skip
    mcmc.run(run_key, *pot.args, init_params=pot.init_params(init_key))
    b = mcmc.get_samples()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])


@pytest.mark.parametrize("kind", ["HMC", "NUTS"])
def test_kernels_are_numpyros_on_its_public_api(kind):
    """bnn_ppl's HMC/NUTS give numpyro.infer.HMC/NUTS's draws, also with every private
    attribute NumPyro's constructor set deleted (they run NumPyro's public ``hmc()``); without
    init_params they start from pot.init_params (what MCMC.run does after warmup). Ours move one
    raveled vector where NumPyro's move the parameter tree: the same arithmetic per element and
    the same momentum draws, so the draws agree to float32 rounding (XLA may fuse the sums of
    the two programs differently; over 30 iterations of NUTS that rounding grows to ~1e-3
    relative, hence the tolerance)."""
    import bnn_ppl.inference as bi

    x, y = data()
    pot = full_batch_potential(linear_model(), x, y)
    # (a length the adapted step size stays below: HMC's step-size bounds never act)
    kw = {"trajectory_length": 10.0, "step_size": 0.1} if kind == "HMC" else {"max_tree_depth": 3}
    theirs = getattr(numpyro.infer, kind)(potential_fn=pot.potential_fn, **kw)
    ours = getattr(bi, kind)(pot, **kw)
    assert isinstance(ours, getattr(numpyro.infer, kind))
    for name in [n for n in vars(theirs) if n.startswith("_")]:
        delattr(ours, name)
    fields = ("accept_prob", "num_steps", "energy", "adapt_state.step_size")
    run = dict(num_warmup=20, num_samples=10, num_chains=2, chain_method="vectorized")
    init = pot.init_params(jax.random.key(1), num_chains=2)
    a = MCMC(theirs, **run, postprocess_fn=pot.postprocess_fn, progress_bar=False)
    a.run(jax.random.key(0), init_params=init, extra_fields=fields)
    b = MCMC(ours, **run, progress_bar=False)
    b.run(jax.random.key(0), *pot.args, init_params=init, extra_fields=fields)
    for got, want in [
        (b.get_samples(), a.get_samples()),
        (b.get_extra_fields(), a.get_extra_fields()),
    ]:
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=3e-3, atol=1e-5, err_msg=k)
    assert "steps of size" in ours.get_diagnostics_str(jax.tree.map(lambda v: v[0], b.last_state))
    c = MCMC(ours, **run, progress_bar=False, jit_model_args=True)
    c.run(jax.random.key(2), *pot.args)
    w = np.asarray(c.get_samples(group_by_chain=True)["Dense_0.kernel"])
    assert w.shape == (2, 10, 2, 1) and np.all(np.isfinite(w)) and np.any(w[0] != w[1])


def test_runs_continuing_from_a_state_are_one_longer_run():
    """NumPyro's MCMC.run calls ``kernel.init`` on every run (its result is discarded when the
    run continues from a state); ours traces NumPyro's init only when num_warmup changes. Three
    continued runs are still exactly the chain of one run three times as long."""
    from bnn_ppl.inference import HMC

    x, y = data()
    pot = full_batch_potential(linear_model(), x, y)
    kernel = HMC(pot, num_steps=3, step_size=0.05, adapt_step_size=False)
    calls = []
    init = kernel.init
    kernel.init = lambda *a, **k: calls.append(1) or init(*a, **k)
    mcmc = MCMC(kernel, num_warmup=5, num_samples=4, jit_model_args=True, progress_bar=False)
    key = jax.random.key(0)
    mcmc.run(key, *pot.args)
    parts = [mcmc.get_samples()]
    mcmc.post_warmup_state = mcmc.last_state
    for _ in range(2):
        mcmc.run(mcmc.post_warmup_state.rng_key, *pot.args)
        mcmc.post_warmup_state = mcmc.last_state
        parts.append(mcmc.get_samples())
    assert len(calls) == 3  # NumPyro's MCMC.run: one init per run
    one = MCMC(
        HMC(pot, num_steps=3, step_size=0.05, adapt_step_size=False),
        num_warmup=5,
        num_samples=12,
        jit_model_args=True,
        progress_bar=False,
    )
    one.run(key, *pot.args)
    for a, *b in zip(*(jax.tree.leaves(p) for p in (one.get_samples(), *parts)), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.concatenate(b))


def test_run_after_warmup_does_not_compile_init_again():
    """``MCMC.run`` after ``MCMC.warmup`` calls the kernel's ``init`` with ``init_params=None``
    and discards the state. The initial values are then drawn by a program of their own, and
    ``init``'s program (NumPyro's ``init_kernel``: a gradient) is the one compiled for warmup's
    given values: on an H200 the second compilation of a ResNet's gradient had doubled the
    sampling loop's set-up."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 3)).astype(np.float32)
    y = rng.normal(size=40).astype(np.float32)
    model = bp.BNN(MLP(hidden=(4,), out=1), bp.priors.Normal(1.0), bp.likelihoods.Gaussian(0.5))
    pot = full_batch_potential(model, x, y)
    kernel = bp.inference.HMC(pot, num_steps=2, step_size=1e-3, adapt_step_size=False)
    mcmc = MCMC(kernel, num_warmup=2, num_samples=2, jit_model_args=True, progress_bar=False)
    key = jax.random.key(3)
    names: list[str] = []

    def lowered(event: str, duration: float, **kwargs: object) -> None:
        if event == "/jax/core/compile/jaxpr_to_mlir_module_duration":
            names.append(str(kwargs.get("fun_name")))

    jax.monitoring.register_event_duration_secs_listener(lowered)
    try:
        mcmc.warmup(key, *pot.args, init_params=pot.init_params(jax.random.key(0)))
        in_warmup = list(names)
        names.clear()
        mcmc.run(key, *pot.args)
    finally:
        jax.monitoring.unregister_event_duration_listener(lowered)
    assert any("_compiled_states" in n for n in in_warmup), in_warmup
    assert not any("_compiled_states" in n for n in names), names
    assert any("_draw_init_params" in n for n in names), names
    # the draws continue from warmup's state, as NumPyro documents
    assert np.all(np.isfinite(jax.tree.leaves(mcmc.get_samples())[0]))

"""SG-MCMC kernels: the gradient estimator, argument checks, warnings and the MCMC interface.

Stationary distributions are tested in ``test_sgmcmc_stationary.py`` and ATMC's integrator in
``test_atmc_integrator.py``. Here:

* the minibatch gradient estimator is unbiased (an epoch's batches average to the full gradient
  exactly, tempering included; independent batches average to it within MCSE) and its noise
  variance estimate is unbiased for the batch gradient's variance;
* :func:`gradient_scales` measures the curvature and noise of conjugate regression exactly, and
  :func:`recommended_step_size` follows its formulas;
* every constructor refuses bad arguments with ``InputValueError``/``InputTypeError`` before
  anything is compiled, a batch larger than the data included; settings that cannot be
  accurate warn, and :func:`check_accuracy` reports runs that were not;
* the kernels run inside ``numpyro.infer.MCMC`` (samples, ``print_summary``, extra fields,
  chains, data as arguments of the compiled loop), their state a NamedTuple of arrays.
"""

from __future__ import annotations

import io
import math
import warnings
from contextlib import redirect_stdout

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import pytest
from conftest import count_compiles
from conjugate import NOISE, closed_form, data, linear_model
from numpyro.infer import MCMC
from tolerances import assert_same_draw

import bnn_ppl as bp
from bnn_ppl.inference import (
    ATMC,
    SGHMC,
    SGLD,
    SGNHT,
    SGMCMCAccuracyWarning,
    check_accuracy,
    full_batch_potential,
    gradient_estimator,
    gradient_scales,
    recommended_step_size,
)
from bnn_ppl.inference.results import flat_fields
from bnn_ppl.inference.sgmcmc.accuracy import accuracy_summary, stats_accuracy_summary
from bnn_ppl.inference.sgmcmc.schedules import cyclical_cosine
from bnn_ppl.inference.sgmcmc.step_size import GradientScales
from bnn_ppl.models import MLP
from bnn_ppl.validation import InputTypeError, InputValueError


def gaussian_potential(z):
    return 0.5 * jnp.sum(z["x"] ** 2)


# ------------------------------------------------------------------ gradient estimator
@pytest.mark.parametrize("temperature,temper", [(1.0, "likelihood"), (0.3, "posterior"),
                                                (0.5, "likelihood")])  # fmt: skip
def test_an_epoch_of_minibatch_gradients_averages_to_the_full_gradient(temperature, temper):
    x, y = data(n=30, seed=2)
    pot = full_batch_potential(linear_model(temperature, temper), x, y)
    u = pot.init_params(jax.random.key(0))
    full_value, full_grad = pot.value_and_grad(u)
    est = gradient_estimator(pot, batch_size=10, sampling="epoch")
    stream = est.init(jax.random.key(1))

    @jax.jit
    def next_gradient(u, stream):
        grad_fn, stream = est.batch(stream)
        return grad_fn(u), stream

    values, grads, rows = [], [], []
    for _ in range(3):  # one epoch: the three batches partition the 30 rows
        rows.append(np.asarray(stream.perm[stream.position : stream.position + 10]))
        estimate, stream = next_gradient(u, stream)
        values.append(estimate.potential_energy)
        grads.append(estimate.grad)
    assert sorted(np.concatenate(rows).tolist()) == list(range(30))
    assert np.mean(values) == pytest.approx(float(full_value), rel=1e-5)
    for k in full_grad:
        np.testing.assert_allclose(
            np.mean([g[k] for g in grads], axis=0), full_grad[k], rtol=1e-5, atol=1e-5
        )
    # full batch: the exact gradient
    est = gradient_estimator(pot)
    grad_fn, stream = est.batch(est.init(jax.random.key(2)))
    assert stream is None
    np.testing.assert_allclose(grad_fn(u).potential_energy, full_value, rtol=1e-6)


@pytest.mark.statistical
@pytest.mark.parametrize("batch_size", [10, 7])  # 7: halves of 3 and 4 rows
def test_independent_batches_and_their_noise_estimate_are_unbiased(batch_size):
    """Independent batches (rows with replacement): the mean over many batches of the gradient is
    the full gradient, of the half-batch noise estimate the batch gradient's variance, which is
    (N²/b) times the rows' population variance of ∇log p(y_i | θ) (with replacement exactly)."""
    n, k = 30, 20_000
    x, y = data(n=n, seed=2)
    pot = full_batch_potential(linear_model(0.5, "posterior"), x, y)
    u = pot.init_params(jax.random.key(0))
    full_grad = pot.value_and_grad(u)[1]
    est = gradient_estimator(pot, batch_size=batch_size, noise=True)

    @jax.jit
    def draw(key):
        grad_fn, _ = est.batch(est.init(key))
        e = grad_fn(u)
        return e.grad, e.noise_variance

    grads, var_est = jax.lax.map(draw, jax.random.split(jax.random.key(1), k))
    one_row = gradient_estimator(pot, batch_size=1)
    per_row = jax.vmap(lambda i: jax.grad(pot.minibatch_potential_fn_gen())(u, i[None]))(
        jnp.arange(n)
    )  # prior + N ∇ℓ_i: its population variance over rows / b is the batch gradient's
    assert one_row.batch_size == 1
    for key in full_grad:
        g = np.asarray(grads[key], np.float64)
        v = np.asarray(var_est[key], np.float64)
        mcse = g.std(0) / math.sqrt(k)
        assert np.all(np.abs(g.mean(0) - full_grad[key]) < 4.5 * mcse), key
        want = np.asarray(per_row[key], np.float64).var(0) / batch_size
        np.testing.assert_allclose(g.var(0), want, rtol=5 * math.sqrt(2 / k) * 3)
        assert np.all(np.abs(v.mean(0) - want) < 4.5 * v.std(0) / math.sqrt(k)), key


def test_rows_are_drawn_uniformly_with_replacement():
    from bnn_ppl.inference.potential.minibatch import independent_batch, independent_init

    state, counts = independent_init(jax.random.key(0)), np.zeros(7)
    for _ in range(2000):
        idx, state = independent_batch(state, 5, 7)
        np.add.at(counts, np.asarray(idx), 1)
    expected = 2000 * 5 / 7
    chi2 = float(np.sum((counts - expected) ** 2 / expected))
    assert chi2 < 22.5  # chi-square with 6 dof: P(> 22.5) = 0.001


# ------------------------------------------------------------------ scales and step sizes
def test_gradient_scales_measure_curvature_and_noise_of_conjugate_regression():
    n, b = 500, 50
    x, y = data(n=n, seed=4)
    pot = full_batch_potential(linear_model(), x, y)
    mean, cov = closed_form(x, y)
    mode = {"Dense_0.kernel": jnp.asarray(mean[:2, None], jnp.float32),
            "Dense_0.bias": jnp.asarray(mean[2:], jnp.float32)}  # fmt: skip
    k = 2000
    scales = gradient_scales(pot, mode, b, rng_key=jax.random.key(0), num_batches=k)
    assert scales.curvature == pytest.approx(np.linalg.eigvalsh(np.linalg.inv(cov)).max(), 1e-3)
    phi = np.concatenate([x, np.ones((n, 1))], 1).astype(np.float64)
    per_row = n * phi * (phi @ mean - y)[:, None] / NOISE**2  # N ∇ℓ_i at the mode
    noise = per_row.var(0).max() / b
    assert scales.noise == pytest.approx(noise, rel=4.5 * math.sqrt(2 / k))
    assert scales.batch_size == b
    full = gradient_scales(pot, mode, rng_key=jax.random.key(0))
    assert full.noise == 0.0 and full.batch_size is None


def test_recommended_step_sizes_follow_their_formulas():
    s = GradientScales(curvature=400.0, noise=1e4, batch_size=10)
    assert recommended_step_size("SGLD", s) == pytest.approx(0.02 / (400 + 1e4))
    assert recommended_step_size("SGHMC", s) == pytest.approx(min(0.1 / 20, math.sqrt(0.05 / 1e4)))
    assert recommended_step_size("ATMC", s) == pytest.approx(min(0.005, math.sqrt(0.069 / 1e4)))
    h = recommended_step_size("SGNHT", s)
    b = h * 1e4 / 2
    assert h * max(1 + b, b / 0.1) / 2 == pytest.approx(0.01, rel=1e-6)  # cold by hξ/2 = 1 %
    quiet = GradientScales(100.0, 0.0, None)
    for name in ("SGHMC", "SGNHT", "ATMC"):
        assert recommended_step_size(name, quiet) == pytest.approx(0.01)  # 0.1 / ω_max
    assert recommended_step_size("ATMC", quiet, mass=4.0) == pytest.approx(0.02)
    with pytest.raises(InputValueError, match="sampler"):
        recommended_step_size("NUTS", s)
    with pytest.raises(InputTypeError, match="GradientScales"):
        recommended_step_size("SGLD", (1.0, 2.0, None))


# ------------------------------------------------------------------ arguments
@pytest.fixture(scope="module")
def small_potential():
    x, y = data(n=30)
    return full_batch_potential(linear_model(), x, y)


ALL = (SGLD, SGHMC, SGNHT, ATMC)
BAD_COMMON = [
    # argument, bad value, error type
    ("step_size", float("nan"), InputValueError),
    ("step_size", float("inf"), InputValueError),
    ("step_size", 0.0, InputValueError),
    ("step_size", -1e-3, InputValueError),
    ("step_size", None, InputTypeError),
    ("step_size", "0.01", InputTypeError),
    ("step_size", True, InputTypeError),
    ("step_size", lambda t: -0.1, InputValueError),  # a schedule must start > 0
    ("step_size", lambda t: jnp.ones(2), InputValueError),  # and be a scalar
    ("batch_size", 31, InputValueError),  # more rows than the data have
    ("batch_size", 0, InputValueError),
    ("batch_size", -5, InputValueError),
    ("batch_size", 2.5, InputTypeError),
    ("batch_size", 10.0, InputTypeError),  # counts are never rounded
    ("batch_size", "10", InputTypeError),
    ("batch_size", True, InputTypeError),
    ("sampling", "shuffle", InputValueError),
    ("init_method", "zeros", InputValueError),
]
BAD_SPECIFIC = {
    SGLD: [("decay", 1.0, InputValueError), ("decay", float("nan"), InputValueError),
           ("decay", -0.1, InputValueError), ("decay", None, InputTypeError),
           ("epsilon", 0.0, InputValueError), ("preconditioning", 1, InputTypeError),
           ("noise_estimate", "yes", InputTypeError), ("noise_decay", 1.0, InputValueError)],
    SGHMC: [("friction", 0.0, InputValueError), ("friction", float("inf"), InputValueError),
            ("friction", "1", InputTypeError), ("mass", -1.0, InputValueError),
            ("noise_estimate", 1e6, InputValueError), ("noise_estimate", -0.1, InputValueError),
            ("noise_estimate", "exact", InputValueError), ("noise_estimate", None, InputTypeError),
            ("noise_share", 0.0, InputValueError), ("noise_share", 1.5, InputValueError),
            ("noise_decay", float("nan"), InputValueError)],
    SGNHT: [("diffusion", 0.0, InputValueError), ("diffusion", float("nan"), InputValueError),
            ("diffusion", "1", InputTypeError), ("mass", 0.0, InputValueError),
            ("diagonal", "no", InputTypeError), ("noise_estimate", 0, InputTypeError),
            ("noise_share", -0.5, InputValueError)],
    ATMC: [("momentum_noise", -1.0, InputValueError), ("momentum_noise", 0.0, InputValueError),
           ("momentum_noise", float("inf"), InputValueError), ("mass", 0.0, InputValueError),
           ("mass", True, InputTypeError), ("c", 0.0, InputValueError),
           ("c", "fast", InputTypeError), ("noise_estimate", None, InputTypeError),
           ("noise_share", float("nan"), InputValueError),
           ("noise_decay", -1.0, InputValueError)],
}  # fmt: skip
CASES = [(cls, *case) for cls in ALL for case in BAD_COMMON + BAD_SPECIFIC[cls]]


def _case_id(case: tuple) -> str:  # stable across processes (pytest-xdist): no addresses
    cls, arg, value, _ = case
    return (
        f"{cls.__name__}-{arg}-{'schedule' if callable(value) else repr(value)}-{CASES.index(case)}"
    )


@pytest.mark.parametrize("cls,arg,value,error", CASES, ids=[_case_id(c) for c in CASES])
def test_every_argument_is_checked_before_compiling(cls, arg, value, error, small_potential):
    with count_compiles() as compiles, pytest.raises(error, match=arg.split("_")[0]):
        cls(small_potential, **{arg: value})
    assert compiles == []


def test_batch_larger_than_the_data_names_both_numbers(small_potential):
    for cls in ALL:
        with pytest.raises(InputValueError, match=r"batch_size=31 .* training rows \(30\)"):
            cls(small_potential, batch_size=31)
    with pytest.raises(InputValueError, match=r"batch_size=31"):
        gradient_estimator(small_potential, batch_size=31)
    # the noise estimate needs two halves; without it a batch of one row is fine
    with pytest.raises(InputValueError, match="batch_size must be an int >= 2"):
        ATMC(small_potential, batch_size=1)
    with pytest.warns(SGMCMCAccuracyWarning, match="noise_estimate=False"):
        ATMC(small_potential, batch_size=1, noise_estimate=False, momentum_noise=1.0)


def test_structural_argument_errors(small_potential):
    model = linear_model()
    x, y = data(n=30)
    with pytest.raises(ValueError, match="pass x and y"):
        SGNHT(model)
    with pytest.raises(ValueError, match="already has its data"):
        ATMC(small_potential, x, y)
    with pytest.raises(ValueError, match="not both"):
        ATMC(small_potential, potential_fn=gaussian_potential)
    with pytest.raises(ValueError, match="full-batch gradients only"):
        ATMC(potential_fn=gaussian_potential, batch_size=4)
    with pytest.raises(TypeError, match="FullBatchPotential"):
        ATMC(object())
    with pytest.raises(TypeError, match="potential_fn must be callable"):
        ATMC(potential_fn=3.0)
    with pytest.raises(ValueError, match="batch_size=31"):
        ATMC(model, x, y, batch_size=31)
    with pytest.raises(InputValueError, match="chunk_size and devices go with a BNN"):
        SGLD(small_potential, chunk_size=8)
    with pytest.raises(InputTypeError, match="ShardedData"):
        gradient_estimator(small_potential, data=(x, y))
    for bad, error in ((0, InputValueError), (2.0, InputTypeError), (None, InputTypeError)):
        with pytest.raises(error, match="num_batches"):
            gradient_scales(small_potential, small_potential.init_params(jax.random.key(0)),
                            rng_key=jax.random.key(0), num_batches=bad)  # fmt: skip
    with pytest.raises(ValueError, match="init_params are required"):
        MCMC(
            ATMC(potential_fn=gaussian_potential), num_warmup=1, num_samples=1, progress_bar=False
        ).run(jax.random.key(0))
    with pytest.raises(InputValueError, match="num_warmup"):
        MCMC(SGLD(potential_fn=gaussian_potential, preconditioning=True), num_warmup=0,
             num_samples=1, progress_bar=False).run(jax.random.key(0),
                                                    init_params={"x": jnp.ones(2)})  # fmt: skip


# ------------------------------------------------------------------ warnings
def test_settings_that_cannot_be_accurate_warn(small_potential):
    for cls in (SGNHT, ATMC, SGHMC, SGLD):
        with pytest.warns(SGMCMCAccuracyWarning, match="sampling='epoch'"):
            cls(small_potential, batch_size=10, sampling="epoch")
    for cls in (SGNHT, ATMC):
        with pytest.warns(SGMCMCAccuracyWarning, match="noise_estimate=False"):
            cls(small_potential, batch_size=10, noise_estimate=False)
        with pytest.warns(SGMCMCAccuracyWarning, match="noise_share=0.9"):
            cls(small_potential, batch_size=10, noise_share=0.9)
    with pytest.warns(UserWarning, match="noise_estimate=0"):
        SGHMC(small_potential, batch_size=10, noise_estimate=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the defaults, and full batch, say nothing
        for cls in ALL:
            cls(small_potential, batch_size=10)
            cls(small_potential, sampling="epoch", noise_estimate=cls is SGHMC and "auto")


def test_check_accuracy_reports_runs_that_were_not_accurate(small_potential):
    def run(kernel, **kw):
        mcmc = MCMC(kernel, num_warmup=50, num_samples=200, progress_bar=False,
                    jit_model_args=True, **kw)  # fmt: skip
        mcmc.run(jax.random.key(0), *small_potential.args,
                 init_params=small_potential.init_params(jax.random.key(1)))  # fmt: skip
        return mcmc

    # a fine run: nothing to say
    fine = MCMC(ATMC(potential_fn=gaussian_potential, step_size=0.1), num_warmup=200,
                num_samples=1000, progress_bar=False)  # fmt: skip
    fine.run(jax.random.key(0), init_params={"x": jnp.zeros(2)})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert check_accuracy(fine) == []
    # ... and not one that stopped before its thermostat settled (from a prior draw, 0.25 time
    # units at a least friction of 1 per unit time), though only its last draw is collected
    early = run(ATMC(small_potential, batch_size=10, step_size=1e-3, momentum_noise=1.0),
                thinning=200)  # fmt: skip
    with pytest.warns(SGMCMCAccuracyWarning, match="kinetic temperature"):
        check_accuracy(early)
    # SGNHT at a large step: cold by hξ/2 (here ≈ 0.25 on a unit Gaussian)
    mcmc = MCMC(SGNHT(potential_fn=gaussian_potential, step_size=0.5), num_warmup=50,
                num_samples=200, progress_bar=False)  # fmt: skip
    mcmc.run(jax.random.key(0), init_params={"x": jnp.zeros(2)}, extra_fields=("info",))
    with pytest.warns(SGMCMCAccuracyWarning, match="cold by about"):
        check_accuracy(mcmc)
    # ... and the same check as a JSON-able record (what fit keeps in config["accuracy"]): the
    # statistics the state carries are those of the Info of every sampling step
    with pytest.warns(SGMCMCAccuracyWarning, match="cold by about"):
        report = accuracy_summary(mcmc)
    info = mcmc.get_extra_fields()["info"]
    assert any("cold by about" in m for m in report["problems"])
    assert report["steps"] == 200  # (and capped: the friction cut to 1/h = 2)
    assert report["capped_steps"] == int(np.sum(info.capped > 0)) > 0
    assert report["kinetic_temperature"] == pytest.approx(float(np.mean(info.kinetic_temperature)))
    assert report["xi_mean"] == pytest.approx(float(np.mean(info.xi_mean)))
    assert report["noise_share"] == pytest.approx(float(np.max(info.noise_share)))
    assert report["noise_share_mean"] == pytest.approx(float(np.mean(info.noise_share)))
    # SGHMC whose gradient noise exceeds what friction can absorb at this step: hot
    with pytest.warns(SGMCMCAccuracyWarning):
        problems = check_accuracy(run(SGHMC(small_potential, batch_size=2, step_size=0.05)))
    assert "exceeded what the friction can absorb" in problems[0]
    assert "runs hot" in problems[1]
    with pytest.raises(InputTypeError, match="SG-MCMC kernel"):
        check_accuracy(object())


def test_the_burn_in_advice_names_the_recorded_burn_in_and_one_chains_steps():
    """A run still descending from a far start is told to burn in longer: ``num_warmup`` plus
    one chain's sampling steps (two chains pooled), naming the run's burn-in. After
    ``record_burn_in`` (steps discarded after ``num_warmup`` too) the advice names that one,
    also from a kernel that never ran (a checkpointed fit's statistics read back); the next
    ``MCMC.run`` records its ``num_warmup`` again."""
    kernel = SGLD(potential_fn=gaussian_potential, step_size=1e-3)
    mcmc = MCMC(kernel, num_warmup=10, num_samples=300, num_chains=2, chain_method="vectorized",
                progress_bar=False)  # fmt: skip
    far = {"x": jnp.full((2, 50), 10.0)}  # U = 2500 per chain, its stationary spread ≈ 5

    def advice(problems):
        told = [p for p in problems if "not yet stationary" in p]
        assert len(told) == 1, problems
        return told[0].split("Burn in longer: ")[1]

    mcmc.run(jax.random.key(0), init_params=far)
    assert kernel.burn_in == 10
    with pytest.warns(SGMCMCAccuracyWarning, match="not yet stationary"):
        assert advice(check_accuracy(mcmc)) == "num_warmup=310 steps (this run: 10)."
    kernel.record_burn_in(100)
    assert kernel.burn_in == 100
    with pytest.warns(SGMCMCAccuracyWarning, match="not yet stationary"):
        assert advice(check_accuracy(mcmc)) == "num_warmup=400 steps (this run: 100)."
    fresh = SGLD(potential_fn=gaussian_potential, step_size=1e-3)
    fresh.record_burn_in(100)
    fields = {k[6:]: v for k, v in flat_fields({"stats": mcmc.last_state.stats}).items()}
    with pytest.warns(SGMCMCAccuracyWarning, match="not yet stationary"):
        report = stats_accuracy_summary(fresh, fields)
    assert advice(report["problems"]) == "num_warmup=400 steps (this run: 100)."
    mcmc.run(jax.random.key(1), init_params=far)
    assert kernel.burn_in == 10
    with pytest.raises(InputValueError, match="num_steps"):
        kernel.record_burn_in(-1)
    with pytest.raises(InputTypeError, match="num_steps"):
        kernel.record_burn_in(2.5)


@pytest.mark.parametrize("cls", [SGHMC, SGNHT, ATMC])
def test_check_accuracy_sees_every_step_of_a_cycle_not_only_its_end(cls, small_potential):
    # a cyclical step size 6 times too large, one draw kept per cycle: at the kept cycle ends
    # the step size is ~0 and the Info looks fine; the large steps at each cycle start are not
    n, h0 = 50, 0.03
    mcmc = MCMC(cls(small_potential, batch_size=2, step_size=cyclical_cosine(h0, n)),
                num_warmup=n, num_samples=4 * n, thinning=n, progress_bar=False,
                jit_model_args=True)  # fmt: skip
    mcmc.run(jax.random.key(0), *small_potential.args, extra_fields=("info", "stats"),
             init_params=small_potential.init_params(jax.random.key(1)))  # fmt: skip
    ends = mcmc.get_extra_fields()["info"]
    assert float(np.max(ends.noise_share)) < 0.1  # what the old check read: nothing wrong
    with pytest.warns(SGMCMCAccuracyWarning):
        report = accuracy_summary(mcmc)
    assert any("fell short" in m or "exceeded" in m for m in report["problems"])
    assert report["steps"] == 4 * n and 0 < report["capped_steps"] < 4 * n
    assert report["noise_share"] > 0.105
    # the collected statistics of the last draw are the last state's
    stats = mcmc.get_extra_fields()["stats"]
    assert int(stats.steps[-1]) == 4 * n and stats.steps.tolist() == [n, 2 * n, 3 * n, 4 * n]


# ------------------------------------------------------------------ the MCMC interface
KERNELS = {
    "SGLD": lambda pot, **kw: SGLD(pot, step_size=1e-4, **kw),
    "pSGLD": lambda pot, **kw: SGLD(pot, step_size=1e-4, preconditioning=True, **kw),
    "SGHMC": lambda pot, **kw: SGHMC(pot, step_size=1e-2, **kw),
    "SGNHT": lambda pot, **kw: SGNHT(pot, step_size=1e-2, **kw),
    "ATMC": lambda pot, **kw: ATMC(pot, step_size=1e-2, **kw),
    "ATMC-relativistic": lambda pot, **kw: ATMC(pot, step_size=1e-2, c=1.0, **kw),
}


def _noise_model():
    """Linear regression with a HalfNormal prior on the noise: one constrained site."""
    return bp.BNN(MLP(hidden=(), out=1), bp.priors.Normal(1.0),
                  bp.likelihoods.Gaussian(scale=dist.HalfNormal(1.0)))  # fmt: skip


@pytest.mark.parametrize("name", list(KERNELS))
def test_kernels_run_inside_numpyro_mcmc(name):
    x, y = data(n=40, seed=1)
    pot = full_batch_potential(_noise_model(), x, y)
    mcmc = MCMC(
        KERNELS[name](pot, batch_size=10),
        num_warmup=50,
        num_samples=40,
        num_chains=2,
        chain_method="vectorized",
        progress_bar=False,
        jit_model_args=True,
    )
    init = pot.init_params(jax.random.key(0), num_chains=2)
    mcmc.run(jax.random.key(1), *pot.args, init_params=init,
             extra_fields=("info", "z.noise_scale"))  # fmt: skip
    samples = mcmc.get_samples()
    assert samples["Dense_0.kernel"].shape == (80, 2, 1)
    assert samples["noise_scale"].shape == (80,)
    # postprocess_fn maps to the constrained space
    extra = mcmc.get_extra_fields()
    np.testing.assert_allclose(samples["noise_scale"], np.exp(extra["z.noise_scale"]), rtol=1e-5)
    assert np.all(np.isfinite(samples["Dense_0.kernel"]))
    info = extra["info"]
    assert type(info).__name__.endswith("Info")
    for field, value in info._asdict().items():
        assert np.all(np.isfinite(value)), field
    assert np.all(extra["i"].reshape(2, 40) == np.arange(51, 91))
    out = io.StringIO()
    with redirect_stdout(out):
        mcmc.print_summary()
    assert "noise_scale" in out.getvalue() and "n_eff" in out.getvalue()
    # the progress bar's diagnostics of one chain
    one_chain = jax.tree.map(lambda a: a[0], mcmc.last_state)
    assert "step size" in mcmc.sampler.get_diagnostics_str(one_chain)
    # the state is a NamedTuple of arrays (checkpointable as a pytree), step size in the Info
    assert all(isinstance(a, jax.Array) for a in jax.tree.leaves(mcmc.last_state))
    assert type(mcmc.last_state.kernel_state).__name__.endswith("State")
    np.testing.assert_allclose(info.step_size, mcmc.sampler.schedule(0), rtol=1e-6)


def test_a_bnn_with_data_builds_its_potential_and_init_params_default_to_the_prior():
    d = bp.data.load("digits")
    model = bp.BNN(MLP(hidden=(8,), out=10), bp.priors.Normal(0.3), bp.likelihoods.Categorical())
    kernel = ATMC(model, d.x_train[:200], d.y_train[:200], batch_size=50, step_size=1e-3)
    assert kernel.potential.num_data == 200
    mcmc = MCMC(kernel, num_warmup=10, num_samples=20, progress_bar=False)
    mcmc.run(jax.random.key(0))  # init_params drawn from the prior, data closed over
    assert mcmc.get_samples()["Dense_0.kernel"].shape == (20, 64, 8)


def test_data_as_arguments_and_closure_give_the_same_chain():
    x, y = data(n=40, seed=3)
    pot = full_batch_potential(_noise_model(), x, y)
    init = pot.init_params(jax.random.key(0))
    runs = []
    for jit_args in (True, False):
        mcmc = MCMC(ATMC(pot, batch_size=8, step_size=1e-2), num_warmup=10, num_samples=20,
                    progress_bar=False, jit_model_args=jit_args)  # fmt: skip
        args = pot.args if jit_args else ()
        mcmc.run(jax.random.key(4), *args, init_params=init)
        runs.append(mcmc.get_samples())
    for k in runs[0]:
        np.testing.assert_allclose(runs[0][k], runs[1][k], rtol=1e-5, atol=1e-6)
    # and the same seed gives the same samples
    again = MCMC(ATMC(pot, batch_size=8, step_size=1e-2), num_warmup=10, num_samples=20,
                 progress_bar=False, jit_model_args=True)  # fmt: skip
    again.run(jax.random.key(4), *pot.args, init_params=init)
    for k in runs[0]:
        np.testing.assert_array_equal(runs[0][k], again.get_samples()[k])


@pytest.mark.parametrize("batch_size", [None, 100])
def test_data_are_arguments_not_constants_of_the_sample_program(batch_size):
    rng = np.random.default_rng(0)
    # 40k rows: the program with the two half batches of the noise estimate is ~170 kB of text
    x = rng.normal(size=(40_000, 20)).astype(np.float32)
    y = (x[:, 0] + 0.1 * rng.normal(size=40_000)).astype(np.float32)
    model = bp.BNN(MLP(hidden=(4,), out=1), bp.priors.Normal(1.0), bp.likelihoods.Gaussian(0.5))
    pot = full_batch_potential(model, x, y)
    kernel = ATMC(pot, batch_size=batch_size, step_size=1e-3)
    state = kernel.init(jax.random.key(0), 0, pot.init_params(jax.random.key(1)), pot.args, {})
    as_args = jax.jit(lambda s, d: kernel.sample(s, (d,), {})).lower(state, pot.data).as_text()
    closed = jax.jit(lambda s: kernel.sample(s, (), {})).lower(state).as_text()
    assert len(as_args) < x.nbytes / 10
    assert len(closed) > x.nbytes  # the closure embeds them (documented behaviour)


def test_arviz_reads_the_mcmc():
    import arviz as az

    x, y = data(n=30)
    pot = full_batch_potential(linear_model(), x, y)
    mcmc = MCMC(
        ATMC(pot, step_size=0.01),
        num_warmup=20,
        num_samples=30,
        num_chains=2,
        chain_method="vectorized",
        progress_bar=False,
        jit_model_args=True,
    )
    mcmc.run(jax.random.key(0), *pot.args, init_params=pot.init_params(jax.random.key(1), 2))
    idata = az.from_numpyro(mcmc)
    assert idata["posterior"]["Dense_0.kernel"].shape[:2] == (2, 30)
    assert "i" in idata["sample_stats"].data_vars


def test_normal_like_is_each_leafs_own_normal_draw():
    """The SG-MCMC noise draws every leaf flat, one vmapped call per (size, dtype), quicker to
    compile: the values must be those of ``jax.random.normal(keys[i], shape, dtype)`` per leaf
    (to float32 rounding; bit for bit at XLA's default optimisation, see ``test_model.py``)."""
    from bnn_ppl.inference.sgmcmc.kernel import normal_like

    tree = {
        "conv": jnp.zeros((3, 3, 4, 4)),
        "conv2": jnp.zeros((3, 3, 4, 4)),  # same size: one vmapped call
        "dense": jnp.zeros((16, 3)),  # 48 entries, another group
        "bias": jnp.zeros((3,)),
        "scalar": jnp.zeros(()),
        "half": jnp.zeros((1, 3), jnp.bfloat16),  # the size of "bias", another dtype
    }
    key = jax.random.key(5)
    leaves, treedef = jax.tree.flatten(tree)
    keys = jax.random.split(key, len(leaves))
    want = jax.tree.unflatten(
        treedef,
        [jax.random.normal(k, x.shape, x.dtype) for k, x in zip(keys, leaves, strict=True)],
    )
    for got in (normal_like(key, tree), jax.jit(normal_like)(key, tree)):
        for name in tree:
            g, w = got[name], want[name]
            assert g.shape == w.shape and g.dtype == w.dtype, name
            assert_same_draw(g, w, err_msg=name)
    # and distinct leaves of one group get distinct draws
    assert not np.allclose(normal_like(key, tree)["conv"], normal_like(key, tree)["conv2"])

"""NumPyro's own draws made flat (``bnn_ppl.flat_draws``): the initial values of mean-field SVI
and of a NumPyro model's potential (``init_to_prior_draw``) and the mean-field guide's draws
(``flat_normal_draws``, ``MeanFieldGuide``) must be exactly NumPyro's, and must be drawn flat
(XLA:CPU compiles a many-axis random draw slowly: ``benchmarks/init_draw.py``).

(``BNN.init``'s and the SG-MCMC noise's flat draws are tested in ``test_model.py`` and
``test_sgmcmc.py``.)
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import optax
import pytest
from numpyro import handlers
from numpyro.infer import SVI, Trace_ELBO, TraceMeanField_ELBO
from numpyro.infer.autoguide import AutoNormal
from numpyro.infer.initialization import init_to_sample
from numpyro.optim import optax_to_numpyro
from tolerances import assert_same_draw

import bnn_ppl as bp
from bnn_ppl.flat_draws import FlatNormal, flat_normal_draws, init_to_prior_draw
from bnn_ppl.inference import svi_mean_field
from bnn_ppl.inference.potential.numpyro_model import model_potential
from bnn_ppl.inference.svi import MeanFieldGuide
from bnn_ppl.models import MLP

KERNEL = (3, 3, 2, 4)  # a convolution kernel's shape: the draw XLA:CPU compiles slowly


def random_bits_shapes(fn: Any, *args: Any) -> list[tuple[int, ...]]:
    """The shape of every random-bits draw in ``fn``'s program (nested programs included)."""
    shapes: list[tuple[int, ...]] = []

    def walk(jaxpr: Any) -> None:
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "random_bits":
                shapes.append(tuple(eqn.params["shape"]))
            for v in eqn.params.values():
                inner = getattr(v, "jaxpr", v)
                if hasattr(inner, "eqns"):
                    walk(inner)

    walk(jax.make_jaxpr(fn)(*args).jaxpr)
    return shapes


def model() -> None:
    numpyro.sample("kernel", dist.Normal(0.0, 0.5).expand(KERNEL).to_event(4))
    numpyro.sample("laplace", dist.Laplace(0.0, 0.3).expand((2, 5)).to_event(2))
    numpyro.sample("scale", dist.HalfNormal(1.0))  # positive: init_to_sample's own path
    with numpyro.plate("rows", 3):
        numpyro.sample("local", dist.Normal(0.0, 1.0))  # a batch shape: init_to_sample's too
    numpyro.sample("obs", dist.Normal(0.0, 1.0), obs=jnp.zeros(()))


def site(d: dist.Distribution, key: Any) -> dict:
    return {"type": "sample", "name": "s", "fn": d, "is_observed": False, "value": None,
            "args": (), "kwargs": {"rng_key": key, "sample_shape": ()}}  # fmt: skip


@pytest.mark.parametrize("key", [0, 7])
def test_init_to_prior_draw_gives_init_to_samples_values(key):
    from numpyro.infer.util import initialize_model

    k = jax.random.key(key)
    want = initialize_model(k, model, init_strategy=init_to_sample)[0].z
    got = initialize_model(k, model, init_strategy=init_to_prior_draw)[0].z
    assert set(got) == set(want) == {"kernel", "laplace", "scale", "local"}
    for name in want:
        assert_same_draw(got[name], want[name])


@pytest.mark.parametrize(
    "d, flat",
    [
        (dist.Normal(0.0, 0.5).expand(KERNEL).to_event(4), True),
        (dist.Laplace(0.0, 0.3).expand(KERNEL).to_event(4), True),
        (dist.HalfNormal(1.0).expand(KERNEL).to_event(4), False),  # not real: NumPyro's draw
        (dist.StudentT(3.0, 0.0, 1.0).expand(KERNEL).to_event(4), True),
    ],
)
def test_init_to_prior_draw_draws_scalar_priors_over_reals_flat(d, flat):
    key = jax.random.key(3)
    assert_same_draw(init_to_prior_draw(site(d, key)), init_to_sample(site(d, key)))
    shapes = random_bits_shapes(lambda k: init_to_prior_draw(site(d, k)), key)
    assert shapes and all(len(s) == 1 for s in shapes) == flat, shapes


def guide() -> dict:
    loc, scale = jnp.linspace(-1.0, 1.0, 72).reshape(KERNEL), jnp.full(KERNEL, 0.3)
    return {
        "kernel": numpyro.sample("kernel", dist.Normal(loc, scale).to_event(4)),
        "expanded": numpyro.sample("expanded", dist.Normal(0.0, 2.0).expand(KERNEL)),
        "scalar": numpyro.sample("scalar", dist.Normal(1.0, 0.1)),
        "laplace": numpyro.sample("laplace", dist.Laplace(0.0, 1.0).expand(KERNEL)),
        "obs": numpyro.sample("obs", dist.Normal(0.0, 1.0), obs=jnp.ones(())),
    }


def test_flat_normal_draws_keeps_the_values_and_draws_normal_sites_flat():
    want = handlers.trace(handlers.seed(guide, 5)).get_trace()
    with flat_normal_draws():
        got = handlers.trace(handlers.seed(guide, 5)).get_trace()
    for name in ("kernel", "expanded", "scalar", "laplace", "obs"):
        assert_same_draw(got[name]["value"], want[name]["value"])
        np.testing.assert_allclose(
            jnp.sum(got[name]["fn"].log_prob(got[name]["value"])),
            jnp.sum(want[name]["fn"].log_prob(want[name]["value"])),
            rtol=1e-6,
        )

    def innermost(d: dist.Distribution) -> dist.Distribution:
        return innermost(d.base_dist) if hasattr(d, "base_dist") else d

    flat_sites = {n for n, s in got.items() if type(innermost(s["fn"])) is FlatNormal}
    assert flat_sites == {"kernel", "expanded", "scalar"}  # not the Laplace, not the observed

    def draw(k: Any) -> dict:
        with flat_normal_draws():
            return handlers.seed(guide, k)()

    shapes = random_bits_shapes(draw, jax.random.key(0))
    assert sorted(shapes) == sorted([(72,), (72,), (1,), KERNEL]), shapes  # the Laplace's own


@pytest.mark.parametrize(
    "temperature, temper",
    [(1.0, "likelihood"), (0.5, "posterior")],  # analytic KL / Monte Carlo
)
def test_svi_mean_field_is_numpyros_autonormal_svi(temperature, temper):
    """The same ELBO trace, fitted parameters and posterior draws as NumPyro's ``AutoNormal``
    with ``init_to_sample`` (what ``svi_mean_field`` used before its draws were made flat): in
    particular the analytic KL of ``TraceMeanField_ELBO`` still applies to the guide's
    ``FlatNormal`` sites (a Monte Carlo fallback would change the losses)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(12, 3)).astype(np.float32)
    y = (x @ np.array([1.0, -0.5, 0.2]) + 0.1 * rng.normal(size=12)).astype(np.float32)
    model = bp.BNN(MLP(hidden=(4,), out=1), bp.priors.Normal(1.0), bp.likelihoods.Gaussian(0.3),
                   temperature=temperature, temper=temper)  # fmt: skip
    key, steps = jax.random.key(2), 30
    fit = svi_mean_field(model, x, y, num_steps=steps, rng_key=key)
    assert isinstance(fit.guide, MeanFieldGuide)
    ref_guide = AutoNormal(model, init_loc_fn=init_to_sample, init_scale=1e-2)
    elbo = TraceMeanField_ELBO() if temperature == 1.0 else Trace_ELBO()
    opt = optax.adam(optax.cosine_decay_schedule(1e-2, steps, alpha=0.01))
    ref = SVI(model, ref_guide, optax_to_numpyro(opt), elbo).run(key, steps, x, y,
                                                                progress_bar=False)  # fmt: skip
    # sums over rows and sites: a tolerance of a few float32 eps of their magnitude
    tol = 8 * np.finfo(np.float32).eps * float(np.max(np.abs(ref.losses)))
    np.testing.assert_allclose(fit.losses, ref.losses, rtol=0, atol=tol)
    for k in ref.params:
        np.testing.assert_allclose(fit.params[k], ref.params[k], rtol=1e-5, atol=1e-6)
    draws = fit.sample_posterior(jax.random.key(9), 5)
    ref_draws = ref_guide.sample_posterior(jax.random.key(9), ref.params, sample_shape=(5,))
    for k in ref_draws:
        np.testing.assert_allclose(draws[k], ref_draws[k], rtol=1e-5, atol=1e-6)


def test_a_numpyro_models_prior_initial_values_are_init_to_samples():
    def regression(x: Any, y: Any = None) -> None:
        w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand((2, 3, 1, 2)).to_event(4))
        sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
        with numpyro.plate("data", x.shape[0]):
            numpyro.sample("y", dist.Normal(x @ w.reshape(12)[:3], sigma), obs=y)

    x = np.random.default_rng(1).normal(size=(10, 3)).astype(np.float32)
    pot = model_potential(regression, data={"x": x, "y": np.zeros(10, np.float32)})
    got = pot.init_params(jax.random.key(4), method="prior")
    want = pot.init_params(jax.random.key(4), method=init_to_sample)
    for k in want:
        assert_same_draw(got[k], want[k])


def test_prefix_stable_draws_of_different_sizes_share_one_call(monkeypatch):
    """Where the first values of a longer draw are the shorter draw (``prefix_stable``), keys
    of different sizes are drawn by one call of the largest size, each keeping its own values;
    a call draws at most PAD_BUDGET values in vain, or the sizes are split over calls."""
    import bnn_ppl.flat_draws as fd

    calls = []

    def normal(group, size):
        calls.append(size)
        return lambda k: jax.random.normal(k, (size,))

    keys = list(jax.random.split(jax.random.key(0), 3))
    shapes = [(4, 5), (7,), (2, 3, 2)]
    own = [jax.random.normal(k, (math.prod(s),)).reshape(s)
           for k, s in zip(keys, shapes, strict=True)]  # fmt: skip
    for budget, want in [(fd.PAD_BUDGET, [20]), (10, [20, 7])]:
        monkeypatch.setattr(fd, "PAD_BUDGET", budget)
        calls.clear()
        out = fd.grouped_flat_draws(keys, shapes, ["n"] * 3, normal, prefix_stable=lambda g: True)
        assert calls == want  # 20 and 12 values: 8 in vain; with the 7: 21 > 10
        for got, ref in zip(out, own, strict=True):
            np.testing.assert_array_equal(got, ref)
    calls.clear()
    fd.grouped_flat_draws(keys, shapes, ["n"] * 3, normal)
    assert sorted(calls) == [7, 12, 20]  # not prefix-stable: one call per size


@pytest.mark.parametrize("d", [dist.Normal(0.1, 0.3), dist.Laplace(0.0, 0.5), dist.Cauchy(0.0, 1.0),
                               dist.Logistic(0.0, 1.0), dist.Uniform(-1.0, 2.0)])  # fmt: skip
def test_prefix_stable_distributions_are(d):
    from bnn_ppl.flat_draws import PREFIX_STABLE

    assert isinstance(d, PREFIX_STABLE)
    key = jax.random.key(5)
    np.testing.assert_array_equal(d.expand((1000,)).sample(key)[:37], d.expand((37,)).sample(key))

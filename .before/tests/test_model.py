"""The BNN as a NumPyro model: sites, tempering, validation, linen/nnx."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import pytest
from conftest import count_compiles
from flax import nnx
from numpyro import handlers
from numpyro.infer import Predictive
from numpyro.infer.util import log_density
from tolerances import assert_same_draw, assert_sums_close, prior_magnitude

import bnn_ppl as bp
from bnn_ppl.model import MAX_LIKELIHOOD_SCALE
from bnn_ppl.models import MLP, NnxMLP


def _model(**kw):
    return bp.BNN(
        MLP(hidden=(4,), out=3), bp.priors.Normal(0.5), bp.likelihoods.Categorical(), **kw
    )


def _xy(n=12):
    rng = np.random.default_rng(0)
    return rng.normal(size=(n, 5)).astype(np.float32), (np.arange(n) % 3).astype(np.int32)


def test_every_parameter_is_a_sample_site_with_its_prior():
    x, y = _xy()
    model = _model()
    tr = handlers.trace(handlers.seed(model, 0)).get_trace(x, y)
    latent = {k: s for k, s in tr.items() if s["type"] == "sample" and not s["is_observed"]}
    assert set(latent) == {"Dense_0.kernel", "Dense_0.bias", "Dense_1.kernel", "Dense_1.bias"}
    assert latent["Dense_0.kernel"]["value"].shape == (5, 4)
    assert tr["y"]["is_observed"] and tr["y"]["fn"].batch_shape == (12,)


@pytest.mark.parametrize("temper", ["likelihood", "posterior"])
def test_temperature_scales_the_numpyro_log_joint(temper):
    x, y = _xy()
    params = _model().init(jax.random.key(0), x)
    base = _model()
    cold = _model(temperature=0.25, temper=temper)
    log_prior = base.log_prior(params, x)
    rows = base.log_likelihood(params, jnp.asarray(x), jnp.asarray(y))
    log_lik = rows.sum()
    prior_t = 4.0 if temper == "posterior" else 1.0
    want = prior_t * log_prior + 4.0 * log_lik
    got, _ = log_density(cold, (x, y), {}, params)
    # float32 sums of 39 prior terms (either sign) and 12 rows (tests/tolerances.py)
    prior_mag, lik_mag = prior_magnitude(base, params, x), float(np.abs(rows).sum())
    n = base.num_params(x) + len(x)
    assert_sums_close(got, want, prior_t * prior_mag + 4.0 * lik_mag, n)
    got_base = log_density(base, (x, y), {}, params)[0]
    assert_sums_close(got_base, log_prior + log_lik, prior_mag + lik_mag, n)


def test_predictive_draws_from_the_prior_predictive():
    x, _ = _xy()
    draws = Predictive(_model(), num_samples=3)(jax.random.key(0), x)
    assert draws["y"].shape == (3, 12) and draws["Dense_0.kernel"].shape == (3, 5, 4)
    assert jnp.all((draws["y"] >= 0) & (draws["y"] < 3))


def test_constructor_validation():
    net, prior, lik = MLP(hidden=(2,), out=1), bp.priors.Normal(1.0), bp.likelihoods.Gaussian(1.0)
    for t in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="temperature must be a finite number > 0"):
            bp.BNN(net, prior, lik, temperature=t)
    with pytest.raises(ValueError, match=r"temper must be one of \['likelihood', 'posterior'\]"):
        bp.BNN(net, prior, lik, temper="prior")
    with pytest.raises(TypeError, match="network must be a flax"):
        bp.BNN(lambda x: x, prior, lik)
    with pytest.raises(TypeError, match="prior must be"):
        bp.BNN(net, 0.3, lik)
    with pytest.raises(TypeError, match="likelihood must be"):
        bp.BNN(net, prior, "gaussian")
    with pytest.raises(ValueError, match="scale must be"):
        bp.likelihoods.Gaussian(scale=0.0)
    with pytest.raises(ValueError, match="positive support"):
        bp.likelihoods.Gaussian(scale=dist.Normal(0.0, 1.0))


def test_model_call_validates_concrete_data_before_compiling():
    model = _model()
    x, y = _xy()
    # the key is made before counting: an int seed compiles threefry's seeding on first use,
    # which passed only when an earlier test in the same process had compiled it already
    key = jax.random.key(0)
    with count_compiles() as compiles:
        with pytest.raises(ValueError, match="NaN"):
            handlers.seed(model, key)(np.where(x > 1, np.nan, x), y)
        with pytest.raises(ValueError, match=r"y must lie in \[0, 3\)"):
            handlers.seed(model, key)(x, y + 1)
        with pytest.raises(ValueError, match="same number of rows"):
            handlers.seed(model, key)(x, y[:-1])
        with pytest.raises(ValueError, match="no prior for parameters"):
            bp.BNN(
                MLP(hidden=(4,), out=3),
                {"Dense_0": bp.priors.Normal(1.0)},
                bp.likelihoods.Categorical(),
            ).sites(x)
    assert compiles == []


def test_a_temperature_too_cold_for_float32_is_refused_before_compiling():
    x, y = _xy()
    n = len(x)
    cold = bp.BNN(MLP(hidden=(4,), out=3), bp.priors.Normal(1.0), bp.likelihoods.Categorical(),
                  temperature=n / MAX_LIKELIHOOD_SCALE / 2)  # fmt: skip
    ok = bp.BNN(MLP(hidden=(4,), out=3), bp.priors.Normal(1.0), bp.likelihoods.Categorical(),
                temperature=n / MAX_LIKELIHOOD_SCALE)  # fmt: skip
    ok.check_data(x, y)  # n/T at the limit is accepted
    from bnn_ppl.inference import full_batch_potential

    with count_compiles() as compiles:
        with pytest.raises(ValueError, match=r"too cold for float32 .* use temperature >= "):
            cold.check_data(x, y)
        with pytest.raises(ValueError, match="too cold for float32"):
            full_batch_potential(cold, x, y)
    assert compiles == []


def test_batch_statistics_are_refused():
    import flax.linen as nn

    class WithBN(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.BatchNorm(use_running_average=True)(nn.Dense(2)(x))

    model = bp.BNN(WithBN(), bp.priors.Normal(1.0), bp.likelihoods.Gaussian(1.0))
    with pytest.raises(ValueError, match="batch_stats"):
        model.sites(np.zeros((1, 3), np.float32))


def test_nnx_model_runs_in_numpyro():
    x, y = _xy()
    model = bp.BNN(
        NnxMLP(5, hidden=(4,), out=3, rngs=nnx.Rngs(0)),
        bp.priors.Normal(0.5),
        bp.likelihoods.Categorical(),
    )
    tr = handlers.trace(handlers.seed(model, 0)).get_trace(x, y)
    assert tr["layers.0.kernel"]["value"].shape == (5, 4)
    init = model.init(jax.random.key(0), x, method="network")
    np.testing.assert_array_equal(init["layers.0.bias"], np.zeros(4))  # nnx's own initial values


def test_init_methods():
    x, _ = _xy()
    model = _model()
    prior_draw = model.init(jax.random.key(0), x)
    net_draw = model.init(jax.random.key(0), x, method="network")
    assert set(prior_draw) == set(net_draw)
    np.testing.assert_array_equal(net_draw["Dense_0.bias"], np.zeros(4))  # flax zeros init
    assert float(jnp.std(prior_draw["Dense_0.kernel"])) == pytest.approx(0.5, rel=0.4)
    with pytest.raises(ValueError, match="method"):
        model.init(jax.random.key(0), x, method="zeros")


@pytest.mark.parametrize(
    "prior, quick, resnet",
    [
        (bp.priors.Normal(0.5), True, True),
        (bp.priors.Normal(1.0, fan_in=True), True, True),  # a scale per layer: separate groups
        (bp.priors.Laplace(0.3), True, False),  # (its ResNet case: 6-11 s of CPU, no new path)
        (bp.priors.StudentT(3.0, 0.5), False, False),  # other distributions: site by site
        (bp.priors.ScaleMixtureNormal(0.5, 1.0, 0.1), False, False),
        (bp.priors.Hierarchical(), False, False),  # hyper-parameters: site by site, in order
    ],
)
def test_init_draws_are_each_sites_own_draw(prior, quick, resnet):
    """``init`` draws sites with the same scalar prior flat and together (quicker to compile),
    and must give what each site's own ``sample`` with its own key gives: the same random
    numbers, equal to float32 rounding (bit for bit at XLA's default optimisation; at the
    suite's level 0 one element in a thousand was 1 ulp off, XLA:CPU rounding a vectorised
    loop's tail differently)."""
    from bnn_ppl.flat_draws import prior_draws
    from bnn_ppl.models import ResNet20FRN

    rng = np.random.default_rng(0)
    mlp = bp.BNN(MLP(hidden=(5, 5), out=1), prior, bp.likelihoods.Gaussian())
    cnn = bp.BNN(ResNet20FRN(out=3, width=2, blocks_per_stage=1), prior,
                 bp.likelihoods.Categorical())  # fmt: skip
    cases = [(mlp, rng.normal(size=(8, 3)))]
    if resnet:  # a ResNet's many same-shaped sites (its draw is slow to compile site by site)
        cases.append((cnn, rng.normal(size=(2, 8, 8, 3))))
    for model, x in cases:
        x = x.astype(np.float32)
        key = jax.random.key(11)
        names = list(model.sites(x))
        keys = dict(zip(names, jax.random.split(key, len(names) + 1)[1:], strict=True))
        one_by_one = model._sample_sites(x, lambda name, d, keys=keys: d.sample(keys[name]))
        for draw in (model.init(key, x), jax.jit(lambda k, m=model, x=x: m.init(k, x))(key)):
            assert set(draw) == set(one_by_one)
            for name in draw:
                assert_same_draw(draw[name], one_by_one[name], err_msg=name)
        drawn = prior_draws(model.sites(x), keys, skip=set())
        if quick:
            assert set(drawn) == set(one_by_one)  # every site took the quick path

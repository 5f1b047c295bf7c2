"""Priors: families, path matching, unmatched/unused errors, parsing."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats as st
from tolerances import assert_sums_close

import bnn_ppl as bp
from bnn_ppl.priors import Laplace, Normal, StudentT, from_string, resolve

SHAPES = {
    "Dense_0.kernel": (4, 3),
    "Dense_0.bias": (3,),
    "Dense_1.kernel": (3, 2),
    "Dense_1.bias": (2,),
}


@pytest.mark.parametrize(
    "prior,ref",
    [
        (Normal(0.3), st.norm(0, 0.3)),
        (Laplace(0.2), st.laplace(0, 0.2)),
        (StudentT(3.0, 0.5), st.t(3.0, 0, 0.5)),
    ],
)
def test_families_have_the_right_density_and_stddev(prior, ref):
    w = np.linspace(-1, 1, 6).reshape(2, 3)
    d = prior.distribution((2, 3))
    assert d.event_shape == (2, 3) and d.batch_shape == ()
    # a float32 sum of 6 log-densities of either sign (tests/tolerances.py)
    terms = ref.logpdf(w)
    assert_sums_close(d.log_prob(jnp.asarray(w)), terms.sum(), np.abs(terms).sum(), w.size)
    assert prior.stddev((2, 3)) == pytest.approx(ref.std())


def test_single_prior_applies_everywhere():
    assert set(resolve(Normal(1.0), SHAPES).values()) == {Normal(1.0)}


def test_patterns_prefix_glob_and_first_match_wins():
    spec = {"Dense_0": Laplace(1.0), "*.bias": Normal(0.01), "*": Normal(0.1)}
    got = resolve(spec, SHAPES)
    assert got["Dense_0.kernel"] == Laplace(1.0)
    assert got["Dense_0.bias"] == Laplace(1.0)  # "Dense_0" comes first
    assert got["Dense_1.bias"] == Normal(0.01)
    assert got["Dense_1.kernel"] == Normal(0.1)
    assert resolve({"Dense_1.kernel": Normal(2.0), "*": Normal(1.0)}, SHAPES)[
        "Dense_1.kernel"
    ] == Normal(2.0)
    # a prefix must end at a dot: "Dense_1" does not match "Dense_10.kernel"
    shapes = {"Dense_10.kernel": (2, 2), "Dense_1.kernel": (2, 2)}
    assert resolve({"Dense_1": Normal(1.0), "*": Normal(2.0)}, shapes)["Dense_10.kernel"] == Normal(
        2.0
    )


def test_unmatched_parameters_are_an_error_listing_them():
    with pytest.raises(ValueError) as e:
        resolve({"Dense_0": Normal(1.0)}, SHAPES)
    assert "no prior for parameters ['Dense_1.kernel', 'Dense_1.bias']" in str(e.value)
    with pytest.raises(ValueError, match="Dense_1.bias"):
        resolve(
            lambda path, shape: Normal(1.0) if "kernel" in path or path == "Dense_0.bias" else None,
            SHAPES,
        )


def test_patterns_matching_nothing_are_an_error():
    with pytest.raises(ValueError, match=r"\['Dense_9'\] match no parameter"):
        resolve({"Dense_9": Normal(1.0), "*": Normal(1.0)}, SHAPES)
    with pytest.raises(ValueError, match="shadowed"):
        resolve({"*": Normal(1.0), "Dense_0": Normal(2.0)}, SHAPES)


def test_callable_priors_see_path_and_shape():
    seen = {}

    def rule(path, shape):
        seen[path] = shape
        return Normal(1.0 / np.sqrt(shape[0])) if path.endswith("kernel") else Normal(1.0)

    got = resolve(rule, SHAPES)
    assert seen == SHAPES
    assert got["Dense_0.kernel"].scale == pytest.approx(0.5)


def test_bad_priors_and_scales():
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="scale must be a finite number > 0"):
            Normal(bad)
    with pytest.raises(ValueError, match="df"):
        StudentT(0.0, 1.0)
    with pytest.raises(TypeError, match=r"prior\['\*'\] must be a bnn_ppl prior"):
        resolve({"*": 0.1}, SHAPES)
    with pytest.raises(TypeError, match="prior must be"):
        resolve(0.1, SHAPES)


def test_from_string():
    assert from_string("normal:0.3") == Normal(0.3)
    assert from_string("Laplace:0.1") == Laplace(0.1)
    assert from_string("student_t:3,0.1") == StudentT(3.0, 0.1)
    with pytest.raises(ValueError, match=r"unknown prior 'gauss'; known priors: \['laplace'"):
        from_string("gauss:1")
    with pytest.raises(ValueError, match="takes 2 to 3 numbers"):
        from_string("student_t:0.1")
    with pytest.raises(ValueError, match="must be numbers"):
        from_string("normal:abc")
    with pytest.raises(ValueError, match="scale must be"):
        from_string("normal:-1")


def test_model_describe_shows_each_leaf_and_its_prior():
    from bnn_ppl.models import MLP

    model = bp.BNN(
        MLP(hidden=(3,), out=2),
        {"Dense_0.kernel": Laplace(1.0), "*": Normal(0.5)},
        bp.likelihoods.Categorical(),
    )
    table = model.describe(np.zeros((1, 4)))
    assert "Dense_0.kernel  (4, 3)  Laplace(scale=1.0)" in table
    assert "Dense_1.bias    (2,)    Normal(scale=0.5)" in table


# ---------------------------------------------------------------- issue 4: more families


def test_logistic_scale_mixture_and_group_laplace_densities():
    from bnn_ppl.priors import GroupLaplace, Logistic, ScaleMixtureNormal

    w = np.random.default_rng(0).normal(size=(3, 4)) * 2
    cases = [
        (Logistic(0.4), st.logistic(0, 0.4).logpdf(w), st.logistic(0, 0.4).std()),
        (GroupLaplace(), st.laplace(0, 5.0).logpdf(w), st.laplace(0, 5.0).std()),
        (
            ScaleMixtureNormal(0.3, 1.0, 0.01),
            np.log(0.3 * st.norm(0, 1.0).pdf(w) + 0.7 * st.norm(0, 0.01).pdf(w)),
            np.sqrt(0.3 * 1.0 + 0.7 * 1e-4),
        ),
    ]
    for prior, terms, sd in cases:
        d = prior.distribution((3, 4))
        assert d.event_shape == (3, 4)
        # a float32 sum of 12 log-densities of either sign (tests/tolerances.py)
        assert_sums_close(d.log_prob(jnp.asarray(w)), terms.sum(), np.abs(terms).sum(), w.size)
        assert prior.stddev((3, 4)) == pytest.approx(sd, rel=1e-6)
    with pytest.raises(ValueError, match="pi must be in"):
        ScaleMixtureNormal(1.5, 1.0, 0.1)


def test_fan_in_scaling_gives_he_scales_per_layer():
    from bnn_ppl.models import MLP

    model = bp.BNN(MLP(hidden=(9,), out=2), Normal(2.0, fan_in=True), bp.likelihoods.Categorical())
    x = np.zeros((1, 4), np.float32)
    sites = model.sites(x)
    scales = {k: float(d.base_dist.base_dist.scale) for k, d in sites.items()}
    assert scales == pytest.approx(
        {
            "Dense_0.kernel": 1.0,
            "Dense_0.bias": 2.0,
            "Dense_1.kernel": 2.0 / 3.0,
            "Dense_1.bias": 2.0,
        }
    )
    assert bp.priors.fan_in((3, 3, 8, 16)) == 72  # conv kernel: kh * kw * cin
    assert from_string("normal:2,fan_in") == Normal(2.0, fan_in=True)
    assert from_string("logistic:0.5") == bp.priors.Logistic(0.5)


def test_weight_norm_direction_density_and_exact_samples():
    from bnn_ppl.priors import WeightNormDirection

    prior = WeightNormDirection()
    d = prior.distribution((5, 3))  # 3 features of dimension 5
    v = np.random.default_rng(1).normal(size=(5, 3))
    s = np.sum(v**2, axis=0) - 1.0  # per feature; the - 1 can cancel
    want = np.sum(-0.5 * 5 * s**2)
    # float32 sums (tests/tolerances.py): to first order -2.5 s^2 moves by 5 |s| times the
    # error of s, whose terms total sum v^2 + 1; 3 features x (5 squares and the 1) + 3 terms
    magnitude = np.sum(2.5 * s**2 + 5 * np.abs(s) * (np.sum(v**2, axis=0) + 1.0))
    assert_sums_close(d.log_prob(jnp.asarray(v)), want, magnitude, 3 * 6 + 3)
    # samples: the radius r = |v_f| has density r^(d-1) exp(-(d/2)(r^2-1)^2); compare E[r^2]
    draws = np.asarray(d.sample(jax.random.key(0), (4000,)), np.float64)
    assert draws.shape == (4000, 5, 3)
    r2 = (draws**2).sum(axis=1).ravel()
    grid = np.linspace(1e-4, 3, 200_001)
    dens = grid**4 * np.exp(-2.5 * (grid**2 - 1) ** 2)
    want_r2 = np.trapezoid(grid**2 * dens, grid) / np.trapezoid(dens, grid)
    assert abs(r2.mean() - want_r2) < 4 * r2.std() / np.sqrt(r2.size)
    # directions are uniform: the mean of the unit vectors is ~0
    u = draws / np.sqrt((draws**2).sum(axis=1, keepdims=True))
    assert np.abs(u.mean(axis=0)).max() < 4 / np.sqrt(4000)


def test_atmc_priors_target_directions_scales_and_the_rest():
    from bnn_ppl.priors import GroupLaplace, WeightNormDirection, atmc

    shapes = {"WNConv_0.direction": (3, 3, 2, 4), "WNConv_0.scale": (4,), "WNConv_0.bias": (4,)}
    got = resolve(atmc(b=5.0), shapes)
    assert got["WNConv_0.direction"] == WeightNormDirection()
    assert got["WNConv_0.scale"] == GroupLaplace(5.0)
    assert got["WNConv_0.bias"] == Normal(1.0)
    # a catch-all "*" with nothing left to match is not an error
    assert resolve(atmc(), {"a.direction": (2, 2), "a.scale": (2,)})


def test_hierarchical_prior_adds_a_sampled_per_layer_scale():
    import numpyro.distributions as dist
    from numpyro import handlers

    from bnn_ppl.models import MLP
    from bnn_ppl.priors import Hierarchical

    prior = Hierarchical(scale_prior=dist.HalfNormal(0.5))
    model = bp.BNN(MLP(hidden=(3,), out=2), prior, bp.likelihoods.Categorical())
    x = np.zeros((2, 4), np.float32)
    sites = list(model.sites(x))
    assert sites[:2] == ["Dense_0.prior_scale", "Dense_1.prior_scale"]  # hyper sites first
    params = model.init(jax.random.key(0), x)
    assert float(params["Dense_0.prior_scale"]) > 0
    # log prior = hyper densities + conditional densities given the sampled scales
    terms = []
    for i in range(2):
        scale = float(params[f"Dense_{i}.prior_scale"])
        terms.append(np.ravel(st.halfnorm(0, 0.5).logpdf(scale)))
        for w in ("kernel", "bias"):
            terms.append(np.ravel(st.norm(0, scale).logpdf(np.asarray(params[f"Dense_{i}.{w}"]))))
    terms = np.concatenate(terms)
    # a float32 sum of log-densities of either sign (tests/tolerances.py)
    assert_sums_close(model.log_prior(params, x), terms.sum(), np.abs(terms).sum(), terms.size)
    tr = handlers.trace(handlers.seed(model, 1)).get_trace(x)
    assert tr["Dense_0.prior_scale"]["type"] == "sample"
    per_param = bp.BNN(
        MLP(hidden=(3,), out=2), Hierarchical(per="parameter"), bp.likelihoods.Categorical()
    )
    assert "Dense_0.kernel.prior_scale" in per_param.sites(x)
    with pytest.raises(ValueError, match="positive support"):
        Hierarchical(scale_prior=dist.Normal(0, 1))
    with pytest.raises(ValueError, match="family"):
        Hierarchical(family="cauchy")


def test_prior_predictive_draws_functions():
    from bnn_ppl.models import MLP

    model = bp.BNN(
        MLP(hidden=(32,), out=1, activation=jnp.tanh), Normal(1.0), bp.likelihoods.Gaussian(0.1)
    )
    x = np.linspace(-2, 2, 41)[:, None].astype(np.float32)
    f = bp.prior_predictive(model, x, 64, rng_key=jax.random.key(0))
    g = bp.prior_predictive(model, x, 64, rng_key=jax.random.key(0))
    np.testing.assert_array_equal(f.mean, g.mean)
    assert f.mean.shape == (64, 41)
    # prior functions vary: the spread across draws is of the order of the prior's output scale
    assert 0.3 < float(jnp.std(f.mean[:, 20])) < 10.0


def test_the_potential_names_the_sites_outside_the_network_in_sampling_order():
    """Hierarchical scales first, the likelihood's learned noise sd last; network parameters
    are not among them (what the SG-MCMC checks of slow sites read)."""
    import numpyro.distributions as dist

    from bnn_ppl.inference.potential.bnn import full_batch_potential
    from bnn_ppl.models import MLP
    from bnn_ppl.priors import Hierarchical

    model = bp.BNN(MLP(hidden=(3,), out=1), Hierarchical(scale_prior=dist.HalfNormal(0.5)),
                   bp.likelihoods.Gaussian(scale=dist.HalfNormal(1.0)))  # fmt: skip
    x, y = np.zeros((6, 2), np.float32), np.zeros(6, np.float32)
    pot = full_batch_potential(model, x, y)
    assert pot.outside_network == ("Dense_0.prior_scale", "Dense_1.prior_scale", "noise_scale")
    fixed = bp.BNN(MLP(hidden=(3,), out=1), bp.priors.Normal(1.0), bp.likelihoods.Gaussian(0.5))
    assert full_batch_potential(fixed, x, y).outside_network == ()

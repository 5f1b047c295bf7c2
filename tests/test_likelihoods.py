"""The Bernoulli, Student-t, heteroscedastic Gaussian and Poisson likelihoods of ``BNN``.

Each one's potential (sharded, chunked, padded) equals a log joint written out by hand and
NumPyro's ``potential_energy`` of the BNN model, in float64 and both temper modes, with learned
likelihood parameters log-transformed; linear models reach the MAP of scikit-learn's logistic
and Poisson regressions; predictions have the documented types; metrics equal scipy's
densities; bad targets and network widths are refused before anything is compiled.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import pytest
import scipy.optimize
import scipy.special
import scipy.stats
from conftest import count_compiles
from jax.scipy.special import gammaln
from numpyro.infer import Predictive
from numpyro.infer.util import potential_energy

import bnn_ppl as bp
from bnn_ppl import InputError, runs
from bnn_ppl.inference import full_batch_potential
from bnn_ppl.likelihoods import (
    Bernoulli,
    GaussianPrediction,
    HeteroscedasticGaussian,
    Poisson,
    PoissonPrediction,
    StudentT,
    StudentTPrediction,
)
from bnn_ppl.models import MLP

N, D, PRIOR = 13, 2, 0.8
_rng = np.random.default_rng(0)
X = _rng.normal(size=(N, D))
TARGETS = {
    "binary": (X[:, 0] + 0.5 * _rng.normal(size=N) > 0).astype(np.int32),
    "counts": _rng.poisson(np.exp(0.5 * X[:, 0])).astype(np.int32),
    "real": np.sin(X[:, 0]) + 0.3 * _rng.standard_t(3, size=N),
}
LIKELIHOODS = {
    "bernoulli": (lambda: Bernoulli(), 1, "binary"),
    "poisson": (lambda: Poisson(), 1, "counts"),
    "student_t": (lambda: StudentT(df=3.0, scale=0.5), 1, "real"),
    "student_t_learned": (
        lambda: StudentT(df=dist.Gamma(2.0, 0.1), scale=dist.HalfNormal(1.0)),
        1,
        "real",
    ),
    "heteroscedastic": (lambda: HeteroscedasticGaussian(), 2, "real"),
}


def _model(name: str, **kw) -> bp.BNN:
    make, out, _ = LIKELIHOODS[name]
    net = MLP(hidden=(3,), out=out, activation=jnp.tanh)
    return bp.BNN(net, bp.priors.Normal(PRIOR), make(), **kw)


# ------------------------------------------------------------------------ the hand-written joint
def _normal_lp(v, scale):
    return -0.5 * (v / scale) ** 2 - jnp.log(scale) - 0.5 * jnp.log(2 * jnp.pi)


def _student_t_lp(y, loc, scale, df):
    z = (y - loc) / scale
    return (
        gammaln((df + 1) / 2)
        - gammaln(df / 2)
        - 0.5 * jnp.log(df * jnp.pi)
        - jnp.log(scale)
        - (df + 1) / 2 * jnp.log1p(z**2 / df)
    )


def _hand_log_lik(name, f, y, p):
    """Per-row log-likelihood of network output ``f`` ``(n, out)``, by the textbook formula."""
    if name == "bernoulli":
        return y * f[:, 0] - jnp.logaddexp(0.0, f[:, 0])
    if name == "poisson":
        return y * f[:, 0] - jnp.exp(f[:, 0]) - gammaln(y + 1.0)
    if name == "student_t":
        return _student_t_lp(y, f[:, 0], 0.5, 3.0)
    if name == "student_t_learned":
        return _student_t_lp(y, f[:, 0], p["noise_scale"], p["df"])
    scale = jnp.log1p(jnp.exp(f[:, 1])) + 1e-6
    return _normal_lp(y - f[:, 0], scale)


def _hand_potential(name, u, *, x, y, temperature, temper):
    """-[prior_t log p(θ) + (1/T) log p(D|θ) + log|J|], with θ = exp(u) for the positive sites."""
    p = dict(u)
    log_prior, log_det = 0.0, 0.0
    for k in ("noise_scale", "df"):
        if k in u:
            p[k] = jnp.exp(u[k])
            log_det += u[k]
    if "noise_scale" in p:  # HalfNormal(1)
        log_prior += jnp.log(2.0) + _normal_lp(p["noise_scale"], 1.0)
    if "df" in p:  # Gamma(2, rate 0.1)
        log_prior += 2 * jnp.log(0.1) - gammaln(2.0) + jnp.log(p["df"]) - 0.1 * p["df"]
    h = jnp.tanh(x @ p["Dense_0.kernel"] + p["Dense_0.bias"])
    f = h @ p["Dense_1.kernel"] + p["Dense_1.bias"]
    for k in ("Dense_0.kernel", "Dense_0.bias", "Dense_1.kernel", "Dense_1.bias"):
        log_prior += jnp.sum(_normal_lp(p[k], PRIOR))
    log_lik = jnp.sum(_hand_log_lik(name, f, y, p))
    prior_t = 1 / temperature if temper == "posterior" else 1.0
    return -(prior_t * log_prior + log_lik / temperature + log_det)


@pytest.mark.parametrize("name", list(LIKELIHOODS))
def test_potential_equals_hand_written_joint_and_numpyro_potential_energy(x64, name):
    y = TARGETS[LIKELIHOODS[name][2]]
    for temper in ("likelihood", "posterior"):
        model = _model(name, temperature=0.5, temper=temper)
        # 13 rows in chunks of 4: 4 chunks, 3 padded rows
        pot = full_batch_potential(model, X, y, chunk_size=4, dtype=jnp.float64)
        assert pot.num_chunks * pot.chunk_size > N
        u = jax.tree.map(lambda a: a.astype(jnp.float64), pot.init_params(jax.random.key(3)))
        value, grad = pot.value_and_grad(u)
        hand = partial(_hand_potential, name, x=jnp.asarray(X), y=jnp.asarray(y, jnp.float64))
        want, want_grad = jax.value_and_grad(hand)(u, temperature=0.5, temper=temper)
        theirs = potential_energy(model, (X, y), {}, u)
        np.testing.assert_allclose(value, want, rtol=1e-10)
        np.testing.assert_allclose(theirs, want, rtol=1e-10)
        for k in u:
            np.testing.assert_allclose(grad[k], want_grad[k], rtol=1e-8, atol=1e-10)
    # learned sites are sampled unconstrained and mapped back through exp
    for k in set(u) & {"df", "noise_scale"}:
        np.testing.assert_allclose(pot.postprocess_fn(u)[k], np.exp(u[k]))


# ------------------------------------------------------------------------------ known answers
def _map(model, x, y):
    """The MAP of a linear model, by L-BFGS on our float64 potential (weights are unconstrained)."""
    pot = full_batch_potential(model, x, y, chunk_size=7, dtype=jnp.float64)
    u0 = jax.tree.map(lambda a: jnp.zeros(a.shape, jnp.float64), pot.init_params(jax.random.key(0)))
    flat, unravel = jax.flatten_util.ravel_pytree(u0)
    vg = jax.jit(lambda v: pot.value_and_grad(unravel(v)))

    def fun(v):
        value, grad = vg(jnp.asarray(v))
        return float(value), np.asarray(jax.flatten_util.ravel_pytree(grad)[0])

    options = {"gtol": 1e-10, "ftol": 1e-14, "maxiter": 1000}
    res = scipy.optimize.minimize(
        fun, np.zeros(flat.size), jac=True, method="L-BFGS-B", options=options
    )
    p = unravel(jnp.asarray(res.x))
    return np.append(np.asarray(p["Dense_0.kernel"])[:, 0], p["Dense_0.bias"][0])


def test_bernoulli_linear_model_map_is_sklearn_logistic_regression(x64):
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(1)
    x = rng.normal(size=(60, 3))
    y = (x @ [1.5, -1.0, 0.5] + 0.3 + rng.logistic(size=60) > 0).astype(np.int32)
    model = bp.BNN(MLP(hidden=(), out=1), bp.priors.Normal(PRIOR), Bernoulli())
    ours = _map(model, x, y)
    # sklearn minimises C * sum(log loss) + |w|² / 2: a Normal(0, s) prior is C = s²; the
    # constant column makes the intercept a penalised weight, as our bias is
    clf = LogisticRegression(C=PRIOR**2, fit_intercept=False, tol=1e-12, max_iter=10_000)
    clf.fit(np.column_stack([x, np.ones(len(x))]), y)
    np.testing.assert_allclose(ours, clf.coef_[0], rtol=1e-5, atol=1e-6)


def test_poisson_linear_model_map_is_sklearn_poisson_regressor(x64):
    from sklearn.linear_model import PoissonRegressor

    rng = np.random.default_rng(2)
    x = rng.normal(size=(80, 2))
    y = rng.poisson(np.exp(x @ [0.6, -0.4] + 0.5))
    model = bp.BNN(MLP(hidden=(), out=1), bp.priors.Normal(PRIOR), Poisson())
    ours = _map(model, x, y)
    # sklearn minimises mean deviance / 2 + alpha |w|² / 2 = [sum(μ - y log μ) + c] / n + ...:
    # a Normal(0, s) prior is alpha = 1 / (n s²)
    reg = PoissonRegressor(alpha=1 / (len(x) * PRIOR**2), fit_intercept=False, tol=1e-12,
                           max_iter=10_000)  # fmt: skip
    reg.fit(np.column_stack([x, np.ones(len(x))]), y)
    np.testing.assert_allclose(ours, reg.coef_, rtol=1e-5, atol=1e-6)


# -------------------------------------------------------------------------------- predictions
def _draws(model, x, s=4):
    return jax.vmap(lambda k: model.init(k, x))(jax.random.split(jax.random.key(5), s))


def test_predictions_have_the_documented_types_and_bma_averages_them():
    x = X.astype(np.float32)
    expect = {
        "bernoulli": np.ndarray,
        "poisson": PoissonPrediction,
        "student_t_learned": StudentTPrediction,
        "heteroscedastic": GaussianPrediction,
    }
    for name, kind in expect.items():
        model = _model(name)
        draws = _draws(model, x)
        out = jax.vmap(model.apply, in_axes=(0, None))(draws, x)
        pred = bp.predict(model, draws, x, chunk_size=5)
        avg = bp.bma(pred)
        if kind is np.ndarray:  # Bernoulli: [P(y=0), P(y=1)] per row
            assert pred.shape == (4, N, 2)
            np.testing.assert_allclose(pred.sum(-1), 1.0, rtol=1e-6)
            np.testing.assert_allclose(pred[..., 1], jax.nn.sigmoid(out[..., 0]), rtol=1e-6)
            np.testing.assert_allclose(avg, pred.mean(0), rtol=1e-6)
        else:
            assert isinstance(pred, kind) and all(np.shape(a) == (4, N) for a in pred)
        if kind is PoissonPrediction:
            assert isinstance(avg, PoissonPrediction)
            np.testing.assert_allclose(avg.rate, np.mean(pred.rate, 0), rtol=1e-6)
        if kind is StudentTPrediction:  # the mixture's mean and sd (df > 2 here, else inf)
            loc, sc, df = (np.asarray(a, np.float64) for a in pred)
            var = np.where(df > 2, sc**2 * df / (df - 2), np.inf).mean(0) + loc.var(0)
            np.testing.assert_allclose(avg.mean, loc.mean(0), rtol=1e-5)
            np.testing.assert_allclose(avg.scale, np.sqrt(var), rtol=1e-5)
        if kind is GaussianPrediction:  # a scale per row, from the network's second output
            np.testing.assert_allclose(pred.scale, jax.nn.softplus(out[..., 1]) + 1e-6, rtol=1e-5)
        # the run record scores every type
        y = TARGETS[LIKELIHOODS[name][2]]
        metrics = runs.predictive_metrics(pred, y, task=model.likelihood.task)
        assert all(np.isfinite(v) for v in metrics.values())
        want = {"rmse", "nll"} | (set() if kind is PoissonPrediction else {"mean_sq_std_residual"})
        if kind is np.ndarray:
            want = {"accuracy", "nll", "ece", "brier"}
        assert set(metrics) == want


def test_numpyro_predictive_samples_targets_of_each_likelihood():
    x = X.astype(np.float32)
    for name in LIKELIHOODS:
        draws = Predictive(_model(name), num_samples=3)(jax.random.key(0), x)["y"]
        assert draws.shape == (3, N)
        if name == "bernoulli":
            assert set(np.unique(draws)) <= {0, 1}
        if name == "poisson":
            assert np.all(draws >= 0) and np.all(np.asarray(draws) % 1 == 0)


# ------------------------------------------------------------------------------------ metrics
def test_metrics_equal_scipy():
    rng = np.random.default_rng(4)
    s, n = 5, 9
    loc, scale = rng.normal(size=(s, n)), rng.uniform(0.3, 2, size=(s, n))
    df = rng.uniform(0.5, 6, size=(s, n))
    y = rng.normal(size=n) * 2
    want = -np.mean(np.log(scipy.stats.t.pdf(y, df, loc, scale).mean(0))) + np.log(1.7)
    got = bp.metrics.student_t_mixture_nll(loc, scale, df, y, y_scale=1.7)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    rate, counts = rng.uniform(0.2, 5, size=(s, n)), rng.poisson(2.0, size=n)
    want = -np.mean(np.log(scipy.stats.poisson.pmf(counts, rate).mean(0)))
    np.testing.assert_allclose(bp.metrics.poisson_mixture_nll(rate, counts), want, rtol=1e-5)
    # Bernoulli: the classification NLL of the (n, 2) BMA probabilities
    p1 = rng.uniform(0.05, 0.95, size=(s, n))
    labels = rng.integers(0, 2, size=n)
    probs = np.stack([1 - p1, p1], -1)
    want = -np.mean(np.log(scipy.stats.bernoulli.pmf(labels, p1).mean(0)))
    np.testing.assert_allclose(bp.metrics.nll(bp.bma(probs), labels), want, rtol=1e-5)
    # and every likelihood's per-row log_prob is scipy's log density
    f = rng.normal(size=(n, 2))
    sigmoid = scipy.special.expit(f[:, 0])
    cases = [
        (Bernoulli(), f[:, :1], labels, scipy.stats.bernoulli.logpmf(labels, sigmoid)),
        (Poisson(), f[:, :1], counts, scipy.stats.poisson.logpmf(counts, np.exp(f[:, 0]))),
        (StudentT(2.5, 0.7), f[:, :1], y, scipy.stats.t.logpdf(y, 2.5, f[:, 0], 0.7)),
        (HeteroscedasticGaussian(min_scale=0.0), f, y,
         scipy.stats.norm.logpdf(y, f[:, 0], np.log1p(np.exp(f[:, 1])))),
    ]  # fmt: skip
    for lik, out, target, want in cases:
        got = lik.log_prob(jnp.asarray(out, jnp.float32), jnp.asarray(target), {})
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=type(lik).__name__)


def test_metric_inputs_are_validated():
    with pytest.raises(ValueError, match="counts"):
        bp.metrics.poisson_mixture_nll(np.ones((2, 3)), np.array([0, 1.5, 2]))
    with pytest.raises(ValueError, match="rates"):
        bp.metrics.poisson_mixture_nll(np.zeros((2, 3)), np.array([0, 1, 2]))
    with pytest.raises(ValueError, match="dfs"):
        bp.metrics.student_t_mixture_nll(np.ones((2, 3)), 1.0, -1.0, np.zeros(3))
    with pytest.raises(ValueError, match="locs"):
        bp.metrics.student_t_mixture_nll(np.ones((3,)), 1.0, 1.0, np.zeros(3))


# ---------------------------------------------------------------------------------- bad input
Y_BIN = TARGETS["binary"]
Y_REAL = TARGETS["real"].astype(np.float32)


@pytest.mark.parametrize(
    "likelihood,out,y,error,match",
    [
        (Bernoulli(), 1, np.where(Y_BIN == 1, 2, 0), ValueError, r"binary labels in \{0, 1\}"),
        (Bernoulli(), 1, -Y_BIN, ValueError, r"y\[\d+\] = -1"),
        (Bernoulli(), 1, Y_BIN.astype(np.float32), TypeError, r"y.astype\(int\)"),
        (Bernoulli(), 1, Y_REAL, TypeError, "binary labels"),
        (Bernoulli(), 2, Y_BIN, ValueError, r"one output .* got \(13, 2\)"),
        (Bernoulli(), 1, np.stack([Y_BIN, Y_BIN], 1), ValueError, r"y has shape \(13, 2\)"),
        (Poisson(), 1, -TARGETS["counts"] - 1, ValueError, r"counts .* y\[0\] = -"),
        (Poisson(), 1, Y_REAL, ValueError, "non-negative whole numbers"),
        (Poisson(), 1, Y_BIN.astype(bool), TypeError, "counts"),
        (Poisson(), 2, TARGETS["counts"], ValueError, "network has 2 outputs"),
        (StudentT(), 1, Y_BIN, TypeError, "floating point for a StudentT"),
        (StudentT(), 3, Y_REAL, ValueError, "network has 3 outputs"),
        (HeteroscedasticGaussian(), 1, Y_REAL, ValueError, r"two outputs .* got \(13, 1\)"),
        (HeteroscedasticGaussian(), 3, Y_REAL, ValueError, r"two outputs .* got \(13, 3\)"),
        (HeteroscedasticGaussian(), 2, Y_BIN, TypeError, "floating point"),
    ],
)
def test_bad_targets_and_widths_are_refused_before_compiling(likelihood, out, y, error, match):
    model = bp.BNN(MLP(hidden=(), out=out), bp.priors.Normal(1.0), likelihood)
    with count_compiles() as compiles:
        with pytest.raises(error, match=match) as info:
            full_batch_potential(model, X.astype(np.float32), y)
        with pytest.raises(error, match=match):
            model.check_data(X.astype(np.float32), y)
    assert isinstance(info.value, InputError)
    assert compiles == []


def test_good_target_variants_are_accepted():
    x = X.astype(np.float32)
    # booleans and (n, 1) labels for a Bernoulli; whole floats as counts for a Poisson
    bern = bp.BNN(MLP(hidden=(), out=1), bp.priors.Normal(1.0), Bernoulli())
    assert bern.check_data(x, Y_BIN.astype(bool))[1].dtype == np.int32
    assert bern.check_data(x, Y_BIN[:, None])[1].shape == (N,)
    pois = bp.BNN(MLP(hidden=(), out=1), bp.priors.Normal(1.0), Poisson())
    assert pois.check_data(x, TARGETS["counts"].astype(np.float32))[1].shape == (N,)


@pytest.mark.parametrize(
    "make,match",
    [
        (lambda: StudentT(df=0.0), "df"),
        (lambda: StudentT(df=float("nan")), "df"),
        (lambda: StudentT(scale=-1.0), "scale"),
        (lambda: StudentT(df=dist.Normal(0.0, 1.0)), "StudentT df prior must have positive"),
        (lambda: StudentT(scale=dist.HalfNormal(jnp.ones(2))), "StudentT scale prior must be a"),
        (lambda: HeteroscedasticGaussian(min_scale=-1e-3), "min_scale"),
        (lambda: HeteroscedasticGaussian(min_scale="a"), "min_scale"),
    ],
)
def test_bad_likelihood_arguments_are_refused(make, match):
    with pytest.raises(InputError, match=match):
        make()

"""The Posterior record: conversions from every method, per-row log-likelihoods, ArviZ, files."""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import logsumexp
from scipy.stats import norm
from tolerances import assert_sums_close

import bnn_ppl as bp
from bnn_ppl.inference import (
    SGLD,
    deep_ensemble,
    from_map,
    from_mcmc,
    from_svi,
    hmc,
    map_estimate,
    nuts,
    svi_mean_field,
)
from bnn_ppl.models import MLP
from bnn_ppl.posterior import Posterior
from bnn_ppl.predictive import attach_data, log_likelihood
from bnn_ppl.validation import InputTypeError, InputValueError

SCALE = 0.5
N, N_TEST = 30, 10


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(N + N_TEST, 2)).astype(np.float32)
    y = (x @ np.array([1.0, -2.0]) + 0.3 + SCALE * rng.normal(size=N + N_TEST)).astype(np.float32)
    model = bp.BNN(MLP(hidden=(), out=1), bp.priors.Normal(1.0), bp.likelihoods.Gaussian(SCALE))
    return model, x[:N], y[:N], x[N:], y[N:]


@pytest.fixture(scope="module")
def hmc_posterior(problem):
    model, x, y, xt, yt = problem
    mcmc = hmc(model, x, y, num_warmup=100, num_samples=50, num_chains=2, rng_key=jax.random.key(1))
    return attach_data(from_mcmc(mcmc, config={"seed": 1, "data": "toy"}), model, x, y, xt, yt)


def _numpy_loglik(post: Posterior, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """log N(y_i | x_i w + b, SCALE^2) per (chain, draw, row), in float64 NumPy."""
    w = post.samples["Dense_0.kernel"].astype(np.float64)[..., 0]  # (chain, draw, 2)
    b = post.samples["Dense_0.bias"].astype(np.float64)  # (chain, draw, 1)
    mean = np.einsum("cdk,nk->cdn", w, x.astype(np.float64)) + b
    return norm.logpdf(y.astype(np.float64), mean, SCALE)


def test_hmc_posterior_fields(hmc_posterior, problem):
    post = hmc_posterior
    assert post.method == "hmc" and (post.num_chains, post.num_draws) == (2, 50)
    assert post.samples["Dense_0.kernel"].shape == (2, 50, 2, 1)
    assert set(post.sample_stats) == {
        "acceptance_rate", "diverging", "energy", "step_size", "n_steps", "lp"
    }  # fmt: skip
    assert post.sample_stats["diverging"].dtype == np.bool_
    assert post.config["seed"] == 1 and post.config["num_samples"] == 50
    assert post.log_likelihood["y"].shape == (2, 50, N)
    assert post.log_likelihood["y_test"].shape == (2, 50, N_TEST)
    assert post.predictions["mean"].shape == (2, 50, N_TEST)
    np.testing.assert_array_equal(post.observed["y"], problem[2])
    np.testing.assert_array_equal(post.observed["y_test"], problem[4])


def test_predict_on_a_posterior_keeps_its_chain_and_draw_axes(hmc_posterior, problem):
    """bp.predict(model, posterior, x) is (chain, draw, n): the flattened dict's predictions
    reshaped, and what the posterior's own predictions hold."""
    model, _, _, xt, _ = problem
    kept = bp.predict(model, hmc_posterior, xt, chunk_size=3)  # 4 chunks, 2 rows padded
    flat = bp.predict(model, hmc_posterior.flat_samples(), xt)
    assert kept.mean.shape == (2, 50, N_TEST)
    np.testing.assert_array_equal(np.asarray(kept.mean).reshape(100, N_TEST), flat.mean)
    np.testing.assert_allclose(kept.mean, hmc_posterior.predictions["mean"], rtol=1e-6)


def test_save_load_round_trip_is_exact(hmc_posterior, tmp_path):
    path = tmp_path / "run" / "posterior.nc"
    hmc_posterior.save(path)
    loaded = Posterior.load(path)
    assert loaded == hmc_posterior
    for group in ("samples", "sample_stats", "log_likelihood", "observed", "predictions"):
        for k, v in getattr(hmc_posterior, group).items():
            assert getattr(loaded, group)[k].dtype == v.dtype, (group, k)
    assert loaded.config == hmc_posterior.config
    assert os.listdir(path.parent) == ["posterior.nc"]  # no temporary file left
    umask = os.umask(0)
    os.umask(umask)
    assert os.stat(path).st_mode & 0o777 == 0o666 & ~umask
    # the equality can fail: one changed draw, or a changed config, is another Posterior
    changed = dict(hmc_posterior.samples)
    changed["Dense_0.bias"] = changed["Dense_0.bias"].copy()
    changed["Dense_0.bias"][1, 7, 0] += 1e-6
    assert hmc_posterior.replace(samples=changed) != loaded
    assert hmc_posterior.replace(config={"seed": 2}) != loaded


def test_arviz_diagnostics_on_a_loaded_posterior(hmc_posterior, tmp_path):
    import arviz as az
    import matplotlib

    matplotlib.use("Agg")
    path = tmp_path / "posterior.nc"
    hmc_posterior.save(path)
    idata = Posterior.load(path).to_inference_data()
    summary = az.summary(idata)
    assert len(summary) == 3  # kernel (2 entries) and bias
    assert np.all(np.isfinite(summary["mean"].to_numpy(dtype=float)))
    bfmi = az.bfmi(idata)["energy"].values
    assert bfmi.shape == (2,) and np.all(np.isfinite(bfmi)) and np.all(bfmi > 0)
    az.plot_energy(idata)
    import matplotlib.pyplot as plt

    plt.close("all")


@pytest.mark.filterwarnings("ignore:Estimated shape parameter of Pareto")  # 100 draws: few
def test_loo_agrees_with_numpy(hmc_posterior, problem):
    import arviz as az

    _, x, y, xt, yt = problem
    ll = _numpy_loglik(hmc_posterior, x, y)  # independent of bnn_ppl.predictive
    # per-row log-likelihoods: float32 evaluation of a few terms per row against float64
    np.testing.assert_allclose(hmc_posterior.log_likelihood["y"], ll, rtol=1e-5, atol=1e-5)
    ll_test = _numpy_loglik(hmc_posterior, xt, yt)
    np.testing.assert_allclose(hmc_posterior.log_likelihood["y_test"], ll_test, atol=1e-5)
    result = az.loo(hmc_posterior.to_inference_data(), var_name="y")
    assert result.n_data_points == N and result.n_samples == 100
    s = ll.shape[0] * ll.shape[1]
    lppd = np.sum(logsumexp(ll.reshape(s, N), axis=0) - np.log(s))  # p_loo = lppd - elpd_loo
    assert_sums_close(result.elpd + result.p, lppd, np.abs(ll).mean((0, 1)).sum(), N)
    assert result.elpd < lppd  # LOO is below the in-sample density


def test_rows_sum_to_the_models_log_likelihood(hmc_posterior, problem):
    model, x, y, _, _ = problem
    draw = {k: v[1, 17] for k, v in hmc_posterior.samples.items()}
    total = float(model.log_likelihood(draw, jnp.asarray(x), jnp.asarray(y)).sum())
    rows = hmc_posterior.log_likelihood["y"][1, 17]
    assert_sums_close(rows.sum(), total, np.abs(rows).sum(), N)
    with pytest.raises(AssertionError):  # the tolerance sees one dropped row
        assert_sums_close(rows[1:].sum(), total, np.abs(rows).sum(), N)
    # chunked rows (30 = 4 chunks of 8 with 2 padded rows) give the same matrix
    chunked = log_likelihood(model, hmc_posterior.samples, x, y, chunk_size=8)
    np.testing.assert_allclose(chunked, hmc_posterior.log_likelihood["y"], rtol=1e-6, atol=1e-6)
    flat = log_likelihood(model, hmc_posterior.flat_samples(), x, y)
    assert flat.shape == (100, N)


def test_classifier_log_likelihood_and_predictions():
    model = bp.BNN(MLP(hidden=(), out=3), bp.priors.Normal(1.0), bp.likelihoods.Categorical())
    rng = np.random.default_rng(0)
    x = rng.normal(size=(12, 4)).astype(np.float32)
    y = rng.integers(0, 3, size=12)
    keys = jax.random.split(jax.random.key(0), 6).reshape(3, 2)
    draws = jax.vmap(jax.vmap(lambda k: model.init(k, x)))(keys)
    post = attach_data(Posterior("hmc", draws), model, x, y, x[:5], y[:5])
    logits = np.einsum("cdki,nk->cdni", post.samples["Dense_0.kernel"], x)
    logits = logits + post.samples["Dense_0.bias"][:, :, None]
    logp = logits - logsumexp(logits, axis=-1, keepdims=True)
    expected = np.take_along_axis(logp, y[None, None, :, None], axis=-1)[..., 0]
    np.testing.assert_allclose(post.log_likelihood["y"], expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(post.predictions["probs"], np.exp(logp[:, :, :5]), atol=1e-6)


def test_nuts_tree_depth(problem):
    model, x, y, _, _ = problem
    post = from_mcmc(nuts(model, x, y, num_warmup=30, num_samples=20, max_tree_depth=4))
    assert post.method == "nuts"
    steps, depth = post.sample_stats["n_steps"], post.sample_stats["tree_depth"]
    assert np.all(2 ** (depth - 1) <= steps) and np.all(steps <= 2**depth - 1)
    assert depth.max() <= 4


def test_svi_map_ensemble_and_sgld(problem, tmp_path):
    model, x, y, xt, yt = problem
    svi = svi_mean_field(model, x, y, num_steps=30, rng_key=jax.random.key(0))
    post = from_svi(svi, jax.random.key(1), 40)
    assert post.method == "svi" and (post.num_chains, post.num_draws) == (1, 40)
    assert post.trace["loss"].shape == (30,) and post.config["num_draws"] == 40

    mp = from_map(map_estimate(model, x, y, num_steps=20))
    assert mp.method == "map" and (mp.num_chains, mp.num_draws) == (1, 1)
    assert mp.trace["loss"].shape == (1, 20) and mp.sample_stats["lp"].shape == (1, 1)

    ens = deep_ensemble(model, x, y, num_members=3, num_steps=20)
    post = attach_data(from_map(ens), model, x, y, xt, yt)
    assert post.method == "ensemble" and (post.num_chains, post.num_draws) == (3, 1)
    np.testing.assert_array_equal(
        post.samples["Dense_0.kernel"][:, 0], ens.params["Dense_0.kernel"]
    )
    np.testing.assert_array_equal(post.sample_stats["lp"][:, 0], -np.asarray(ens.final_loss))
    post.save(tmp_path / "ensemble.nc")
    assert Posterior.load(tmp_path / "ensemble.nc") == post  # the optimization group too

    from numpyro.infer import MCMC

    mcmc = MCMC(SGLD(model, x, y, step_size=1e-4), num_warmup=20, num_samples=30, num_chains=2,
                chain_method="vectorized", progress_bar=False)  # fmt: skip
    mcmc.run(jax.random.key(0), extra_fields=("info",))
    post = from_mcmc(mcmc)
    assert post.method == "sgld" and (post.num_chains, post.num_draws) == (2, 30)
    assert set(post.sample_stats) == {"step_size", "lp"}
    np.testing.assert_array_equal(
        post.sample_stats["lp"], -np.asarray(mcmc.get_extra_fields(True)["info"].potential_energy)
    )


def _draws(chains=2, draws=5):
    return {"w": np.zeros((chains, draws, 3), np.float32), "b": np.zeros((chains, draws))}


BAD = {
    "mismatched chain axes": (
        dict(samples={"w": np.zeros((2, 5, 3)), "b": np.zeros((3, 5))}), InputValueError, "'b'"
    ),
    "no chain axis": (dict(samples={"w": np.zeros(5)}), InputValueError, "samples['w']"),
    "NaN sample": (
        dict(samples={**_draws(), "b": np.where(np.eye(2, 5) > 0, np.nan, 0.0)}),
        InputValueError, "samples['b'] holds NaN",
    ),
    "inf sample": (dict(samples={"w": np.full((1, 2), np.inf)}), InputValueError, "NaN/inf"),
    "no samples": (dict(samples={}), InputValueError, "samples is empty"),
    "samples not a dict": (dict(samples=[np.zeros((2, 5))]), InputTypeError, "samples"),
    "object samples": (dict(samples={"w": np.array([[None]])}), InputTypeError, "samples['w']"),
    "non-JSON config": (dict(config={"key": jax.random.key(0)}), InputTypeError, "config"),
    "NaN in config": (dict(config={"lr": float("nan")}), InputTypeError, "config"),
    "config not a dict": (dict(config=[("a", 1)]), InputTypeError, "config"),
    "stat of wrong shape": (
        dict(sample_stats={"energy": np.zeros((2, 4))}), InputValueError, "sample_stats['energy']"
    ),
    "NumPyro stat name": (
        dict(sample_stats={"accept_prob": np.zeros((2, 5))}), InputValueError, "accept_prob"
    ),
    "log-lik rows differ from observed": (
        dict(log_likelihood={"y": np.zeros((2, 5, 7))}, observed={"y": np.zeros(8)}),
        InputValueError, "log_likelihood['y']",
    ),
    "NaN log-lik": (
        dict(log_likelihood={"y": np.full((2, 5, 3), np.nan)}), InputValueError, "log_likelihood"
    ),
    "prediction without draw axis": (
        dict(predictions={"mean": np.zeros((2, 3))}), InputValueError, "predictions['mean']"
    ),
    "empty method": (dict(method=""), InputTypeError, "method"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(BAD))
def test_bad_inputs_are_refused(case):
    changes, error, words = BAD[case]
    kwargs = {"method": "hmc", "samples": _draws(), **changes}
    with pytest.raises(error, match=words.replace("[", r"\[").replace("(", r"\(")):
        Posterior(**kwargs)


def test_minus_inf_log_likelihood_is_allowed():
    post = Posterior("hmc", _draws(), log_likelihood={"y": np.full((2, 5, 3), -np.inf)})
    assert np.isneginf(post.log_likelihood["y"]).all()


def test_arrays_are_copied_and_read_only():
    w = np.zeros((2, 5, 3))
    post = Posterior("hmc", {"w": w})
    w[0, 0, 0] = 1.0
    assert post.samples["w"][0, 0, 0] == 0.0
    with pytest.raises(ValueError):
        post.samples["w"][0, 0, 0] = 2.0


def test_a_failed_save_leaves_the_old_file(hmc_posterior, tmp_path, monkeypatch):
    import xarray as xr

    path = tmp_path / "posterior.nc"
    old = Posterior("hmc", _draws(), config={"version": "old"})
    old.save(path)
    before = path.read_bytes()

    def half_then_fail(self, filepath, **kwargs):
        with open(filepath, "wb") as f:
            f.write(b"\x89HDF\r\n\x1a\n" + b"\0" * 100)  # a partial file under the temp name
        raise OSError("disk full")

    monkeypatch.setattr(xr.DataTree, "to_netcdf", half_then_fail)
    with pytest.raises(OSError, match="disk full"):
        hmc_posterior.save(path)
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["posterior.nc"]
    monkeypatch.undo()
    assert Posterior.load(path) == old
    hmc_posterior.save(path)  # and a save that finishes replaces it
    assert Posterior.load(path) == hmc_posterior


def test_load_refuses_other_files(tmp_path):
    junk = tmp_path / "junk.nc"
    junk.write_bytes(b"not a netCDF file")
    with pytest.raises(InputValueError, match="junk.nc"):
        Posterior.load(junk)
    import xarray as xr

    other = tmp_path / "other.nc"
    xr.DataTree(xr.Dataset({"a": ("x", np.zeros(3))})).to_netcdf(other, engine="h5netcdf")
    with pytest.raises(InputValueError, match="not a bnn_ppl posterior"):
        Posterior.load(other)


def test_exported_from_bnn_ppl():
    assert bp.Posterior is Posterior and "Posterior" in bp.__all__

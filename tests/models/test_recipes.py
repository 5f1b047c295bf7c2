"""The small library pieces the examples share (issue 16): the papers' MLP BNN, data sets by a
script's short name, corrupted test sets, metric-vs-setting figures, configs from a script's
options and the code's git commit. All fast: nothing is fitted."""

from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest
from conftest import UCI_DIR

import bnn_ppl as bp
from bnn_ppl import config as cfg
from bnn_ppl.models import MLP, mlp_bnn
from bnn_ppl.plots import metric_curves
from bnn_ppl.runs.config import git_commit


@pytest.fixture(scope="module")
def digits() -> bp.data.Dataset:
    return bp.data.load("digits")


def test_mlp_bnn_picks_the_likelihood_of_the_task(digits):
    clf = mlp_bnn(digits, width=8, prior=0.3, temperature=0.5, temper="posterior")
    assert isinstance(clf.likelihood, bp.likelihoods.Categorical)
    assert clf.network.module == MLP(hidden=(8,), out=10)
    assert clf.prior == bp.priors.Normal(0.3)
    assert (clf.temperature, clf.temper) == (0.5, "posterior")
    reg = mlp_bnn(bp.data.load("gap1d"), width=4, prior=bp.priors.from_string("laplace:0.2"),
                  noise_prior=0.7)  # fmt: skip
    assert reg.network.module == MLP(hidden=(4,), out=1)
    assert reg.prior == bp.priors.from_string("laplace:0.2")
    assert isinstance(reg.likelihood, bp.likelihoods.Gaussian)
    assert float(reg.likelihood.scale.scale) == pytest.approx(0.7)  # HalfNormal(0.7)
    fixed = mlp_bnn(bp.data.load("gap1d"), width=4, prior=1.0, noise=0.25)
    assert fixed.likelihood == bp.likelihoods.Gaussian(0.25)  # a fixed sd: nothing inferred
    with pytest.raises(ValueError, match="scale"):
        mlp_bnn(bp.data.load("gap1d"), width=4, prior=1.0, noise=0.0)
    with pytest.raises(TypeError, match="bp.data.Dataset"):
        mlp_bnn((digits.x_train, digits.y_train), width=8, prior=0.3)
    with pytest.raises(ValueError, match="scale"):
        mlp_bnn(digits, width=8, prior=-1.0)


def test_load_subset_takes_short_names_and_cuts_both_splits(digits):
    d = bp.data.load_subset("digits", split=2, data_dir="/nowhere", max_train=50, max_test=20)
    np.testing.assert_array_equal(d.x_train, digits.x_train[:50])  # options it does not take
    np.testing.assert_array_equal(d.y_test, digits.y_test[:20])  # are not passed on
    assert bp.data.load_subset("digits").x_test.shape == digits.x_test.shape
    with pytest.raises(ValueError, match="unknown dataset 'digitz'"):
        bp.data.load_subset("digitz")
    with pytest.raises(ValueError, match="max_test must be between 1 and the 360"):
        digits.head(None, max_test=361)
    with pytest.raises(ValueError, match="max_test must be an int"):
        digits.head(None, max_test=2.5)


# conftest.UCI_DIR: $BNN_PPL_DATA or ../shared/data/uci beside the checkout (where CI has them;
# the skip used to look at the environment variable only, so CI never ran this test)
@pytest.mark.skipif(not UCI_DIR.is_dir(), reason=f"no UCI data at {UCI_DIR}")
def test_load_subset_names_a_uci_set_without_its_prefix(monkeypatch):
    monkeypatch.setenv("BNN_PPL_DATA", str(UCI_DIR))
    d = bp.data.load_subset("yacht", split=1, max_train=40)
    full = bp.data.load("uci/yacht", split=1)
    assert d.name == "uci/yacht" and len(d.x_train) == 40
    np.testing.assert_array_equal(d.x_test, full.x_test)


def test_shifted_test_sets_put_the_clean_set_first(digits):
    sets = bp.data.shifted_test_sets(digits, ["gaussian_noise", "contrast"], severities=(2, 5),
                                     max_test=12)  # fmt: skip
    assert list(sets) == [("clean", 0), ("gaussian_noise", 2), ("gaussian_noise", 5),
                          ("contrast", 2), ("contrast", 5)]  # fmt: skip
    np.testing.assert_array_equal(sets["clean", 0][0], digits.x_test[:12])
    x, y = bp.data.corrupt_test_set(digits, "contrast", 5)
    np.testing.assert_array_equal(sets["contrast", 5][0], x[:12])
    np.testing.assert_array_equal(sets["contrast", 5][1], y[:12])
    assert len(bp.data.shifted_test_sets(digits, ["contrast"])) == 1 + len(bp.data.SEVERITIES)


def test_metric_curves_draw_a_panel_per_metric_and_a_line_per_curve():
    curves = {"a": {1.0: {"accuracy": 0.9, "nll": 0.3}, 0.1: {"accuracy": 0.8, "nll": 0.5}},
              "b": {1.0: {"accuracy": 0.7, "nll": 0.6}, 0.1: {"accuracy": 0.6, "nll": 0.9}}}
    fig = metric_curves(curves, xlabel="T", xscale="log", title="t")
    assert [ax.get_ylabel() for ax in fig.axes] == ["BMA test accuracy", "BMA test NLL"]
    lines = fig.axes[1].get_lines()
    assert [ln.get_label() for ln in lines] == ["a", "b"]
    np.testing.assert_array_equal(lines[0].get_xdata(), [0.1, 1.0])  # sorted by x
    np.testing.assert_array_equal(lines[1].get_ydata(), [0.9, 0.6])
    assert fig.axes[0].get_xscale() == "log"
    one = metric_curves(curves, xlabel="T", metrics={"nll": "NLL"})
    assert [ax.get_ylabel() for ax in one.axes] == ["NLL"]
    with pytest.raises(ValueError, match="at least one curve"):
        metric_curves({}, xlabel="T")


def test_a_config_from_options_takes_its_own_fields_and_the_overrides():
    options = {"num_warmup": 7, "num_samples": 9, "num_steps": 3, "width": 50, "seed": 1}
    assert cfg.HMCConfig.from_options(options) == cfg.HMCConfig(num_warmup=7, num_samples=9)
    ens = cfg.EnsembleConfig.from_options(options, num_steps=11, num_members=2)
    assert (ens.num_steps, ens.num_members) == (11, 2)  # overrides win
    with pytest.raises(ValueError, match="has no field.*'width'"):
        cfg.SVIConfig.from_options({}, width=3)
    with pytest.raises(ValueError, match="num_samples"):  # still checked
        cfg.HMCConfig.from_options({"num_samples": 0})
    with pytest.raises(TypeError, match="mapping"):
        cfg.HMCConfig.from_options([("num_samples", 3)])


def test_git_commit_reads_the_checkout(tmp_path):
    assert git_commit(tmp_path) is None  # not a checkout
    here = os.path.dirname(os.path.abspath(__file__))
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True,
                          text=True, check=False).stdout.strip()  # fmt: skip
    commit = git_commit(here)
    if head:  # (a source tree without .git: None)
        assert commit is not None and commit.removesuffix("+dirty") == head


def test_as_images_keeps_the_pixels(digits):
    img = digits.as_images()
    assert img.x_train.shape == (len(digits.x_train), 8, 8, 1)
    np.testing.assert_allclose(  # x * x_std + x_mean still gives the pixels
        (img.x_test * img.x_std + img.x_mean).reshape(len(digits.x_test), 64),
        digits.x_test * digits.x_std + digits.x_mean, rtol=1e-6)  # fmt: skip
    assert img.as_images() is img
    with pytest.raises(ValueError, match="not rows of a square image"):
        bp.data.load("wine").as_images()  # 13 features


def _posterior(method, rng, **kw):
    from bnn_ppl.posterior import Posterior

    return Posterior(method, {"w": rng.normal(size=(2, 15, 3))},
                     predictions={"probs": rng.dirichlet([1.0, 1.0, 1.0], size=(2, 15, 5))},
                     observed={"y_test": np.array([0, 1, 2, 1, 0])}, **kw)  # fmt: skip


def test_posterior_sampler_table_is_sampler_table_of_the_posteriors():
    from bnn_ppl.metrics import efficiency as eff
    from bnn_ppl.metrics.comparison import posterior_predictions

    rng = np.random.default_rng(0)
    posts = {"HMC": _posterior("hmc", rng, sample_stats={"n_steps": np.full((2, 15), 4)}),
             "SGHMC": _posterior("sghmc", rng, config={"num_samples": 15, "cycle_length": 10,
                                                       "num_chains": 2, "batch_size": 25})}
    got = eff.posterior_sampler_table(posts, num_train=50, reference="HMC")
    want = eff.sampler_table(
        {m: posterior_predictions(p, chains=True) for m, p in posts.items()},
        {m: p.samples for m, p in posts.items()}, np.array([0, 1, 2, 1, 0]),
        {"HMC": 120.0, "SGHMC": 15 * 10 * 2 * 25 / 50}, reference="HMC")  # fmt: skip
    assert got == want
    assert set(eff.TABLE1_COLUMNS) | set(eff.SAMPLER_COLUMNS) - {"step_size"} <= set(got["HMC"])
    with pytest.raises(ValueError, match="reference 'ATMC'"):
        eff.posterior_sampler_table(posts, num_train=50, reference="ATMC")
    with pytest.raises(ValueError, match="neither"):
        eff.full_batch_gradients(_posterior("svi", rng), num_train=50)


def test_recommended_step_sizes_are_each_samplers_at_the_measured_scales():
    import jax

    from bnn_ppl.inference import full_batch_potential, gradient_scales, recommended_step_size
    from bnn_ppl.inference.sgmcmc.step_size import SAMPLERS, recommended_step_sizes

    x = np.linspace(-1, 1, 40, dtype=np.float32)[:, None]
    model = bp.BNN(MLP(hidden=(), out=1), bp.priors.Normal(1.0), bp.likelihoods.Gaussian(0.1))
    pot = full_batch_potential(model, x, 2 * x[:, 0])
    position = {"Dense_0.kernel": np.full((1, 1), 2.0, np.float32),
                "Dense_0.bias": np.zeros(1, np.float32)}  # fmt: skip
    steps, scales = recommended_step_sizes(pot, position, 10, rng_key=jax.random.key(1))
    assert scales == gradient_scales(pot, pot.unconstrain(position), 10, rng_key=jax.random.key(1))
    assert steps == {s: recommended_step_size(s, scales) for s in SAMPLERS}
    with pytest.raises(TypeError, match="FullBatchPotential"):
        recommended_step_sizes(lambda z: z, position, 10, rng_key=jax.random.key(1))

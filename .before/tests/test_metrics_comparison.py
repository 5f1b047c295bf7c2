"""The comparison table of approximate posteriors against a reference
(``bnn_ppl.metrics.comparison``) and the sampler-efficiency columns
(``bnn_ppl.metrics.efficiency``): each number against its definition, recomputed in NumPy."""

from __future__ import annotations

import math

import numpy as np
import pytest
from numpyro.diagnostics import effective_sample_size

from bnn_ppl.likelihoods import GaussianPrediction, StudentTPrediction
from bnn_ppl.metrics import gaussian_w2
from bnn_ppl.metrics.comparison import (
    bma_draw,
    closeness,
    compare_to_reference,
    format_table,
    noise_floor,
    num_draws,
    single_draw_metrics,
    stored_predictions,
)
from bnn_ppl.metrics.efficiency import sampler_efficiency, sampler_table

RNG = np.random.default_rng(0)
LABELS = RNG.integers(0, 3, size=20)


@pytest.fixture(autouse=True)
def _fresh_rng():
    """Every test draws the same numbers whatever order the tests run in (xdist)."""
    global RNG
    RNG = np.random.default_rng(0)


def _probs(*lead: int) -> np.ndarray:
    return RNG.dirichlet(np.ones(3), size=(*lead, 20)).astype(np.float32)


def _tv(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.mean(0.5 * np.abs(a - b).sum(-1)))


def test_closeness_of_class_probabilities_is_agreement_and_tv_of_the_bmas():
    a, b = _probs(4), _probs(6)
    got = closeness(a, b)
    bma_a, bma_b = a.mean(0), b.mean(0)
    assert got["agreement"] == pytest.approx(np.mean(bma_a.argmax(-1) == bma_b.argmax(-1)))
    assert got["tv"] == pytest.approx(_tv(bma_a, bma_b), rel=1e-5)
    assert closeness(a, a) == {"agreement": 1.0, "tv": 0.0}


def test_closeness_of_regression_is_the_rmse_of_the_bma_means_in_original_units():
    means = RNG.normal(size=(2, 5, 20)).astype(np.float32)
    a, b = (GaussianPrediction(m, np.ones_like(m)) for m in means)
    want = 3.0 * np.sqrt(np.mean((means[0].mean(0) - means[1].mean(0)) ** 2))
    assert closeness(a, b, y_std=3.0)["rmse_vs_reference"] == pytest.approx(want, rel=1e-5)


def _w2_by_quantiles(m1: float, s1: float, m2: float, s2: float) -> float:
    """W2 from its definition in one dimension, sqrt(int_0^1 (F^-1(u) - G^-1(u))^2 du), by the
    midpoint rule on the quantile functions (independent of the closed form)."""
    from scipy.stats import norm

    u = (np.arange(200_000) + 0.5) / 200_000
    return float(np.sqrt(np.mean((norm.ppf(u, m1, s1) - norm.ppf(u, m2, s2)) ** 2)))


def test_gaussian_w2_is_the_wasserstein_distance_of_known_gaussians():
    # the closed form against the quantile integral (its midpoint-rule error is below 1e-3
    # relative here: the tails beyond the outermost midpoints hold ~1e-5 of the mass)
    for m1, s1, m2, s2 in [(0.0, 1.0, 3.0, 1.0), (0.0, 1.0, 0.0, 5.0), (1.0, 0.5, -2.0, 2.0)]:
        got = float(gaussian_w2(np.array([m1]), np.array([s1]), np.array([m2]), np.array([s2])))
        assert got == pytest.approx(_w2_by_quantiles(m1, s1, m2, s2), rel=1e-3)
    # rows: W2 3 (means 3 apart) and 4 (sds 1 and 5), averaged, in units 2x the standardised
    args = np.array([3.0, 0.0]), np.array([1.0, 5.0]), np.zeros(2), np.ones(2)
    assert float(gaussian_w2(*args, y_scale=2.0)) == pytest.approx(7.0)
    assert float(gaussian_w2(args[0], 1.0, args[0], 1.0)) == 0.0  # identical predictives
    # (n, d): independent dimensions, squares summed over d before the root
    got = gaussian_w2(np.array([[3.0, 0.0]]), np.array([[1.0, 5.0]]), np.zeros((1, 2)), 1.0)
    assert float(got) == pytest.approx(5.0)


@pytest.mark.parametrize(
    "args, match",
    [
        ((np.zeros(3), 1.0, np.zeros(4), 1.0), "one non-empty shape"),
        ((np.zeros(3), np.zeros(3), np.zeros(3), 1.0), "scale_a"),
        ((np.zeros(3), 1.0, np.zeros(3), -1.0), "scale_b"),
        ((np.array([0.0, np.nan, 0.0]), 1.0, np.zeros(3), 1.0), "mean_a"),
    ],
)
def test_gaussian_w2_refuses_bad_input_naming_the_argument(args, match):
    with pytest.raises(ValueError, match=match):
        gaussian_w2(*args)


def test_closeness_of_gaussian_predictions_has_the_w2_of_the_moment_matched_bmas():
    means = RNG.normal(size=(2, 5, 20)).astype(np.float32)
    scales = RNG.uniform(0.5, 2.0, size=(2, 5, 20)).astype(np.float32)
    a, b = (GaussianPrediction(m, s) for m, s in zip(means, scales, strict=True))
    m64, s64 = means.astype(np.float64), scales.astype(np.float64)
    mix = [(m.mean(0), np.sqrt((s**2 + m**2).mean(0) - m.mean(0) ** 2))
           for m, s in zip(m64, s64, strict=True)]  # fmt: skip
    want = 3.0 * np.mean(np.sqrt((mix[0][0] - mix[1][0]) ** 2 + (mix[0][1] - mix[1][1]) ** 2))
    assert closeness(a, b, y_std=3.0)["w2"] == pytest.approx(want, rel=1e-4)
    assert closeness(a, a)["w2"] == 0.0
    t = StudentTPrediction(means[0], scales[0], np.full_like(means[0], 1.5))  # infinite variance
    assert closeness(t, t)["w2"] == math.inf


def test_bma_draw_is_the_moment_matched_average_as_one_draw():
    probs = _probs(4)
    assert np.allclose(bma_draw(probs), probs.mean(0)[None], atol=1e-6)
    # classification metrics are those of the BMA, so unchanged by the summary
    got = compare_to_reference({"a": probs, "one": bma_draw(probs)}, LABELS,
                               task="classification", reference="a")  # fmt: skip
    assert got["one"] == pytest.approx(got["a"], rel=1e-5)
    m = RNG.normal(size=(3, 4, 20))
    s = RNG.uniform(0.5, 2.0, size=(3, 4, 20))
    one = bma_draw(GaussianPrediction(m[0], s[0]))  # chain 1: 4 draws of 20 rows
    assert one.mean.shape == (1, 20) and num_draws(one) == 1
    np.testing.assert_allclose(one.mean[0], m[0].mean(0), rtol=1e-5, atol=1e-6)
    var = (s[0] ** 2 + m[0] ** 2).mean(0) - m[0].mean(0) ** 2
    np.testing.assert_allclose(one.scale[0] ** 2, var, rtol=1e-4)
    per_chain = bma_draw(GaussianPrediction(m, s), chains=True)  # 3 chains of 4 draws
    assert per_chain.mean.shape == (3, 1, 20) and num_draws(GaussianPrediction(m[0], s[0])) == 4
    np.testing.assert_allclose(per_chain.mean[2, 0], m[2].mean(0), rtol=1e-5, atol=1e-6)


def test_stored_predictions_are_the_bma_as_one_draw_and_each_chain_s():
    probs, chain_probs = _probs(), _probs(4)
    assert stored_predictions({"probs": probs}).shape == (1, 20, 3)
    assert stored_predictions({"chain_probs": chain_probs}, chains=True).shape == (4, 1, 20, 3)
    g = {"mean": np.zeros(20), "scale": np.ones(20), "chain_mean": np.zeros((4, 20)),
         "chain_scale": np.ones((4, 20))}  # fmt: skip
    assert stored_predictions(g).scale.shape == (1, 20)
    floor = noise_floor(stored_predictions(g, chains=True), np.zeros(20), task="regression")
    assert floor["w2"] == 0.0 and floor["rmse_vs_reference"] == 0.0
    with pytest.raises(ValueError, match="hold no chain_probs or chain_mean"):
        stored_predictions({"probs": probs}, chains=True)


def test_closeness_refuses_predictions_of_different_kinds():
    m = np.zeros((2, 20), np.float32)
    with pytest.raises(ValueError, match="compare like with like"):
        closeness(_probs(2), GaussianPrediction(m, m + 1))


def test_compare_to_reference_adds_closeness_to_the_metric_suite():
    preds = {"HMC": _probs(5), "SVI": _probs(3)}
    rows = compare_to_reference(preds, LABELS, task="classification", reference="HMC")
    assert rows["HMC"]["agreement"] == 1.0 and rows["HMC"]["tv"] == 0.0
    svi = rows["SVI"]
    assert svi["accuracy"] == pytest.approx(np.mean(preds["SVI"].mean(0).argmax(-1) == LABELS))
    assert svi["tv"] == pytest.approx(_tv(preds["SVI"].mean(0), preds["HMC"].mean(0)), rel=1e-5)
    assert {"nll", "ece", "brier"} <= set(svi)
    with pytest.raises(ValueError, match="reference must be one of"):
        compare_to_reference(preds, LABELS, task="classification", reference="NUTS")


def test_noise_floor_is_chain_one_against_the_other_chains():
    chains = _probs(3, 4)  # 3 chains of 4 draws
    got = noise_floor(chains, LABELS, task="classification")
    first, rest = chains[0].mean(0), chains[1:].reshape(-1, 20, 3).mean(0)
    assert got["tv"] == pytest.approx(_tv(first, rest), rel=1e-5)
    assert got["accuracy"] == pytest.approx(np.mean(first.argmax(-1) == LABELS))
    with pytest.raises(ValueError, match="at least 2 chains"):
        noise_floor(chains[:1], LABELS, task="classification")


def test_single_draw_metrics_average_the_metrics_of_each_draw():
    p = _probs(4)
    got = single_draw_metrics(p, LABELS, task="classification")
    nll = np.mean([-np.mean(np.log(q[np.arange(20), LABELS])) for q in p.astype(np.float64)])
    assert got["single_nll"] == pytest.approx(nll, rel=1e-5)
    assert got["single_accuracy"] == pytest.approx(
        np.mean([np.mean(q.argmax(-1) == LABELS) for q in p])
    )


def test_format_table_prints_nan_as_dash_and_a_missing_row_as_diverged():
    text = format_table({"HMC": {"tv": math.nan, "nll": 0.5}, "SGLD": None},
                        {"nll": "NLL", "tv": "TV"}, fmt=".3g")  # fmt: skip
    assert text.splitlines() == [
        "method           NLL        TV",
        "HMC              0.5         -",
        "SGLD      diverged (non-finite draws)",
    ]


def test_sampler_efficiency_against_its_definition():
    probs = RNG.dirichlet(np.ones(3), size=(2, 30, 20))
    draws = {"w": RNG.normal(size=(2, 30, 4)), "b": RNG.normal(size=(2, 30))}
    ref = sampler_efficiency(probs, draws, LABELS, gradients=600.0)
    p_true = probs[:, :, np.arange(20), LABELS]
    ess = np.median(effective_sample_size(p_true))
    assert ref["ess"] == pytest.approx(ess) and ref["ess_per_kgrad"] == pytest.approx(ess / 0.6)
    w = [np.concatenate([draws["w"][c].var(0, ddof=1), [draws["b"][c].var(ddof=1)]]).mean()
         for c in range(2)]  # fmt: skip
    assert ref["weight_var"] == pytest.approx(np.mean(w))
    assert ref["weight_var_ratio"] == pytest.approx(w[0] / w[1])
    half = {k: v / 2 for k, v in draws.items()}  # a quarter of the weight variance
    other = sampler_efficiency(probs, half, LABELS, gradients=600.0, reference=ref)
    assert other["weight_var_ratio"] == pytest.approx(0.25)
    assert other["function_var_ratio"] == pytest.approx(1.0)
    one = sampler_efficiency(probs[:1], {k: v[:1] for k, v in draws.items()}, LABELS, 300.0)
    assert math.isnan(one["weight_var_ratio"]) and math.isnan(one["function_var_ratio"])
    with pytest.raises(ValueError, match="at least 2 draws"):
        sampler_efficiency(probs[:, :1], draws, LABELS, 1.0)


def test_sampler_table_puts_the_noise_floor_in_the_reference_row():
    probs = {"HMC": RNG.dirichlet(np.ones(3), size=(2, 5, 20)),
             "SGLD": RNG.dirichlet(np.ones(3), size=(1, 5, 20))}  # fmt: skip
    draws = {m: {"w": RNG.normal(size=(*p.shape[:2], 3))} for m, p in probs.items()}
    table = sampler_table(probs, draws, LABELS, {"HMC": 10.0, "SGLD": 5.0}, reference="HMC")
    floor = noise_floor(probs["HMC"], LABELS, task="classification")
    assert table["HMC"]["tv"] == floor["tv"] and table["HMC"]["agreement"] == floor["agreement"]
    flat = {m: p.reshape(-1, 20, 3) for m, p in probs.items()}
    assert table["SGLD"]["tv"] == closeness(flat["SGLD"], flat["HMC"])["tv"]
    assert table["SGLD"]["ess_per_kgrad"] == 1000 * table["SGLD"]["ess"] / 5.0
    assert {"single_accuracy", "accuracy", "weight_var_ratio"} <= set(table["SGLD"])
    one = sampler_table({"SGLD": probs["SGLD"]}, draws, LABELS, {"SGLD": 5.0}, reference="SGLD")
    assert math.isnan(one["SGLD"]["tv"]) and math.isnan(one["SGLD"]["weight_var_ratio"])

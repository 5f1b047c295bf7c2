"""The comparison table of approximate posteriors against a reference
(``bnn_ppl.metrics.comparison``) and the sampler-efficiency columns
(``bnn_ppl.metrics.efficiency``): each number against its definition, recomputed in NumPy."""

from __future__ import annotations

import math

import numpy as np
import pytest
from numpyro.diagnostics import effective_sample_size

from bnn_ppl.likelihoods import GaussianPrediction
from bnn_ppl.metrics.comparison import (
    closeness,
    compare_to_reference,
    format_table,
    noise_floor,
    single_draw_metrics,
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

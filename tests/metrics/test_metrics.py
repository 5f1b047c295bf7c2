"""Tests for bnn_ppl.metrics: hand-computed values, brute-force references, jit, errors."""

from __future__ import annotations

import doctest
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats
from scipy.special import logsumexp as np_logsumexp
from tolerances import assert_sums_close, log_density_magnitude, mixture_nll_magnitude

from bnn_ppl import metrics

# --------------------------------------------------------------------------- #
# Fixtures / references
# --------------------------------------------------------------------------- #

# Six examples, K = 3, with top-1 confidences 0.4, 0.5, 0.9, 0.8, 1.0, 0.7.
# With 4 equal-width bins [0, .25], (.25, .5], (.5, .75], (.75, 1]:
#   bin 0: empty
#   bin 1: conf {0.4 (correct), 0.5 (wrong, on the edge -> (.25, .5])}
#          mean conf 0.45, acc 0.5        -> weight 2/6, gap 0.05
#   bin 2: conf {0.7 (correct)}           -> weight 1/6, gap 0.3
#   bin 3: conf {0.9 (correct), 0.8 (wrong), 1.0 (correct, goes in last bin)}
#          mean conf 0.9, acc 2/3         -> weight 3/6, gap 0.2333...
#   ECE = (0.1 + 0.3 + 0.7) / 6 = 1.1 / 6
ECE_PROBS = np.array(
    [
        [0.4, 0.3, 0.3],
        [0.5, 0.25, 0.25],
        [0.9, 0.05, 0.05],
        [0.1, 0.8, 0.1],
        [0.0, 1.0, 0.0],
        [0.2, 0.7, 0.1],
    ]
)
ECE_LABELS = np.array([0, 1, 0, 2, 1, 1])


def _ece_reference(probs: np.ndarray, labels: np.ndarray, num_bins: int) -> float:
    """Loop-based float64 equal-width ECE with (lo, hi] bins, first bin closed."""
    conf = probs.max(axis=1)
    correct = probs.argmax(axis=1) == labels
    total = 0.0
    for b in range(num_bins):
        lo, hi = b / num_bins, (b + 1) / num_bins
        in_bin = (conf > lo) & (conf <= hi) if b > 0 else (conf >= lo) & (conf <= hi)
        if in_bin.any():
            total += in_bin.mean() * abs(correct[in_bin].mean() - conf[in_bin].mean())
    return total


def _ece_magnitude(probs: np.ndarray, labels: np.ndarray) -> float:
    """Sum of |terms| of an ECE (tests/tolerances.py): each bin's gap ``|acc_b - conf_b|`` is a
    difference of two means, weighted by ``n_b / n``; the terms add up to the accuracy plus
    the mean confidence. Summed over ``n`` rows and the bins."""
    return float((probs.argmax(axis=1) == labels).mean() + probs.max(axis=1).mean())


def _gaussian_nll_magnitude(mean, scale, y, y_scale=1.0) -> float:
    """Sum of |terms| of ``gaussian_nll``: the rows' mean of the per-row sums over ``d``."""
    m = np.broadcast_to(log_density_magnitude(mean, scale, y, y_scale), np.shape(mean))
    return float(m.reshape(m.shape[0], -1).sum(axis=1).mean())


def _random_probs(rng: np.random.Generator, n: int, k: int) -> np.ndarray:
    logits = rng.normal(size=(n, k)) * 2.0
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    return p / p.sum(axis=1, keepdims=True)


# --------------------------------------------------------------------------- #
# accuracy / nll / brier
# --------------------------------------------------------------------------- #


def test_accuracy_hand_computed():
    probs = np.array([[0.9, 0.1], [0.3, 0.7], [0.6, 0.4], [0.2, 0.8]])
    assert float(metrics.accuracy(probs, np.array([0, 1, 1, 1]))) == pytest.approx(0.75)
    assert float(metrics.accuracy(probs, np.array([1, 0, 1, 0]))) == pytest.approx(0.0)
    assert isinstance(metrics.accuracy(probs, np.array([0, 1, 0, 1])), jax.Array)


def test_nll_hand_computed_and_positive():
    probs = np.array([[0.5, 0.5], [0.25, 0.75], [0.1, 0.9]])
    labels = np.array([0, 1, 0])
    expected = -(math.log(0.5) + math.log(0.75) + math.log(0.1)) / 3
    out = metrics.nll(probs, labels)
    assert out > 0
    assert float(out) == pytest.approx(expected, rel=1e-6)


def test_nll_clips_at_eps():
    probs = np.array([[1.0, 0.0]])
    out = metrics.nll(probs, np.array([1]), eps=1e-6)
    assert np.isfinite(float(out))
    assert float(out) == pytest.approx(-math.log(1e-6), rel=1e-5)
    # default eps still gives a finite value
    assert np.isfinite(float(metrics.nll(probs, np.array([1]))))


def test_brier_perfect_uniform_and_hand_value():
    k = 4
    labels = np.array([0, 3, 2, 1, 1])
    perfect = np.eye(k)[labels]
    assert float(metrics.brier(perfect, labels)) == pytest.approx(0.0, abs=1e-7)
    uniform = np.full((5, k), 1.0 / k)
    assert float(metrics.brier(uniform, labels)) == pytest.approx((k - 1) / k, rel=1e-6)
    # confidently wrong -> 2; (0.7-1)^2 + 0.3^2 = 0.18
    probs = np.array([[0.0, 1.0], [0.7, 0.3]])
    assert float(metrics.brier(probs, np.array([0, 0]))) == pytest.approx((2 + 0.18) / 2)


# scikit-learn is not a dependency of bnn_ppl; these comparisons run where it is installed.
@pytest.fixture
def skm():
    return pytest.importorskip("sklearn.metrics")


def test_nll_matches_sklearn_log_loss(skm):
    rng = np.random.default_rng(20)
    probs = _random_probs(rng, 300, 4)
    # class 3 never occurs in the labels: `labels=` tells sklearn that K = 4
    labels = rng.integers(0, 3, size=300)
    want = skm.log_loss(labels, probs, labels=np.arange(4))
    assert float(metrics.nll(probs, labels)) == pytest.approx(want, rel=1e-5)


def test_brier_binary_is_twice_sklearn_brier_score_loss(skm):
    # For K = 2, sum_k (p_k - onehot_k)^2 = (p_0 - (1 - y))^2 + (p_1 - y)^2
    # = 2 (p_1 - y)^2 since p_0 = 1 - p_1: twice sklearn's binary Brier score.
    rng = np.random.default_rng(21)
    probs = _random_probs(rng, 300, 2)
    labels = rng.integers(0, 2, size=300)
    sq = (probs - np.eye(2)[labels]) ** 2
    np.testing.assert_allclose(sq[:, 0], sq[:, 1], rtol=1e-12, atol=1e-15)  # exact in float64
    binary = skm.brier_score_loss(labels, probs[:, 1])
    assert sq.sum(axis=1).mean() == pytest.approx(2 * binary, rel=1e-12)
    assert float(metrics.brier(probs, labels)) == pytest.approx(2 * binary, rel=1e-5)


def test_brier_multiclass_matches_sklearn_unscaled(skm):
    import inspect

    if "scale_by_half" not in inspect.signature(skm.brier_score_loss).parameters:
        pytest.skip("this scikit-learn has no multiclass brier_score_loss (needs >= 1.7)")
    rng = np.random.default_rng(22)
    probs = _random_probs(rng, 300, 4)
    labels = rng.integers(0, 4, size=300)
    want = skm.brier_score_loss(labels, probs, labels=np.arange(4), scale_by_half=False)
    assert float(metrics.brier(probs, labels)) == pytest.approx(want, rel=1e-5)


def test_accuracy_matches_sklearn_accuracy_score(skm):
    rng = np.random.default_rng(23)
    probs = _random_probs(rng, 500, 5)
    labels = rng.integers(0, 5, size=500)
    want = skm.accuracy_score(labels, probs.argmax(axis=1))
    assert float(metrics.accuracy(probs, labels)) == pytest.approx(want, abs=1e-7)


# --------------------------------------------------------------------------- #
# ECE / reliability curve
# --------------------------------------------------------------------------- #


def test_ece_width_hand_computed():
    out = metrics.ece(ECE_PROBS, ECE_LABELS, num_bins=4)
    magnitude, n = _ece_magnitude(ECE_PROBS, ECE_LABELS), 6 + 4  # rows and bins
    assert_sums_close(out, 1.1 / 6, magnitude, n)
    assert_sums_close(out, _ece_reference(ECE_PROBS, ECE_LABELS, 4), magnitude, n)


def test_reliability_curve_width_hand_computed():
    curve = metrics.reliability_curve(ECE_PROBS, ECE_LABELS, num_bins=4)
    assert isinstance(curve, metrics.ReliabilityCurve)
    np.testing.assert_allclose(curve.bin_lower, [0.0, 0.25, 0.5, 0.75])
    np.testing.assert_allclose(curve.bin_upper, [0.25, 0.5, 0.75, 1.0])
    np.testing.assert_array_equal(curve.count, [0, 2, 1, 3])
    np.testing.assert_allclose(curve.confidence, [np.nan, 0.45, 0.7, 0.9], rtol=1e-6)
    np.testing.assert_allclose(curve.accuracy, [np.nan, 0.5, 1.0, 2 / 3], rtol=1e-6)


def test_width_binning_edges_are_right_closed():
    # Confidences exactly on the edges k/10 belong to the bin below, (lo, hi];
    # 1.0 goes into the last bin. Rows are valid probability vectors (K = 10).
    probs = np.zeros((4, 10))
    probs[0] = 0.1  # confidence 0.1 (all tied)
    probs[1, :4] = [0.3, 0.3, 0.3, 0.1]  # confidence 0.3
    probs[2, :2] = 0.5  # confidence 0.5
    probs[3, 0] = 1.0  # confidence 1.0
    curve = metrics.reliability_curve(probs, np.zeros(4, dtype=int), num_bins=10)
    expected = np.zeros(10, dtype=int)
    expected[[0, 2, 4, 9]] = 1
    np.testing.assert_array_equal(curve.count, expected)
    # A confidence of 0.0 goes into the (closed) first bin. Only an all-zero row
    # has it, which is not a probability vector: reachable only under jit, where
    # values are not checked.
    f = jax.jit(functools.partial(metrics.reliability_curve, num_bins=10))
    zero = f(jnp.zeros((1, 2)), jnp.array([0]))
    assert int(zero.count[0]) == 1


def test_ece_width_matches_loop_reference_random():
    rng = np.random.default_rng(0)
    probs = _random_probs(rng, 200, 5)
    labels = rng.integers(0, 5, size=200)
    out = metrics.ece(probs, labels, num_bins=10)
    assert_sums_close(out, _ece_reference(probs, labels, 10), _ece_magnitude(probs, labels), 210)


def test_ece_mass_hand_computed():
    # confidences 0.9, 0.6, 0.8, 0.5, 0.7; argmax 0, 1, 0, 0 (tie -> first), 1
    probs = np.array([[0.9, 0.1], [0.4, 0.6], [0.8, 0.2], [0.5, 0.5], [0.3, 0.7]])
    labels = np.array([1, 0, 0, 0, 1])
    # 5 examples in 2 bins -> sizes 3, 2. Sorted: .5(ok) .6(wrong) .7(ok) | .8(ok) .9(wrong)
    # bin 0: conf .6, acc 2/3 ; bin 1: conf .85, acc .5
    curve = metrics.reliability_curve(probs, labels, num_bins=2, binning="mass")
    np.testing.assert_array_equal(curve.count, [3, 2])
    np.testing.assert_allclose(curve.confidence, [0.6, 0.85], rtol=1e-6)
    np.testing.assert_allclose(curve.accuracy, [2 / 3, 0.5], rtol=1e-6)
    np.testing.assert_allclose(curve.bin_lower, [0.5, 0.8], rtol=1e-6)
    np.testing.assert_allclose(curve.bin_upper, [0.7, 0.9], rtol=1e-6)
    expected = 3 / 5 * abs(2 / 3 - 0.6) + 2 / 5 * abs(0.5 - 0.85)  # = 0.18
    out = metrics.ece(probs, labels, num_bins=2, binning="mass")
    assert_sums_close(out, expected, _ece_magnitude(probs, labels), 5 + 2)
    assert_sums_close(out, 0.18, _ece_magnitude(probs, labels), 5 + 2)


def test_ece_mass_more_bins_than_examples_and_balanced_sizes():
    probs = np.array([[0.9, 0.1], [0.3, 0.7]])
    curve = metrics.reliability_curve(probs, np.array([0, 1]), num_bins=3, binning="mass")
    np.testing.assert_array_equal(curve.count, [1, 1, 0])
    assert np.isnan(curve.confidence[2]) and np.isnan(curve.accuracy[2])
    assert np.isnan(curve.bin_lower[2]) and np.isnan(curve.bin_upper[2])
    out = metrics.ece(probs, np.array([0, 1]), num_bins=3, binning="mass")
    assert_sums_close(out, 0.2, _ece_magnitude(probs, np.array([0, 1])), 2 + 3)
    rng = np.random.default_rng(1)
    probs = _random_probs(rng, 23, 3)
    labels = rng.integers(0, 3, size=23)
    curve = metrics.reliability_curve(probs, labels, num_bins=5, binning="mass")
    np.testing.assert_array_equal(curve.count, [5, 5, 5, 4, 4])
    # bins are contiguous in sorted confidence
    assert np.all(np.asarray(curve.bin_upper[:-1]) <= np.asarray(curve.bin_lower[1:]))


def test_ece_single_bin_is_global_gap_for_both_binnings():
    rng = np.random.default_rng(2)
    probs = _random_probs(rng, 50, 4)
    labels = rng.integers(0, 4, size=50)
    gap = abs((probs.argmax(1) == labels).mean() - probs.max(1).mean())
    for binning in ("width", "mass"):
        out = metrics.ece(probs, labels, num_bins=1, binning=binning)
        assert_sums_close(out, gap, _ece_magnitude(probs, labels), 50 + 1)


def _binary_predictions(
    rng: np.random.Generator, conf: np.ndarray, p_correct: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Binary probs with top-1 confidence ``conf`` on a random class, correct w.p. p_correct."""
    n = conf.shape[0]
    pred = rng.integers(0, 2, size=n)
    probs = np.empty((n, 2))
    probs[np.arange(n), pred] = conf
    probs[np.arange(n), 1 - pred] = 1.0 - conf
    correct = rng.uniform(size=n) < p_correct
    return probs, np.where(correct, pred, 1 - pred)


@pytest.mark.parametrize("binning", ["width", "mass"])
def test_ece_of_calibrated_predictor_is_within_sampling_noise(binning):
    n, num_bins = 200_000, 15
    rng = np.random.default_rng(24)
    conf = rng.uniform(0.5, 1.0, size=n)
    probs, labels = _binary_predictions(rng, conf, p_correct=conf)  # calibrated

    # Sampling noise: in bin b, acc_b - conf_b is a mean of n_b independent
    # (correct_i - c_i) with mean 0 and variance c_i (1 - c_i), so it is about
    # N(0, s_b^2) with s_b^2 = mean_b[c (1 - c)] / n_b and E|.| = s_b sqrt(2 / pi).
    # Bins computed independently of the library, in float64.
    if binning == "width":
        idx = np.clip(np.ceil(conf * num_bins).astype(int) - 1, 0, num_bins - 1)
        groups = [np.flatnonzero(idx == b) for b in range(num_bins)]
    else:
        groups = np.array_split(np.argsort(conf, kind="stable"), num_bins)
    noise = sum(
        len(g) / n * math.sqrt(2 / math.pi * np.mean(conf[g] * (1 - conf[g])) / len(g))
        for g in groups
        if len(g)
    )
    bound = 4 * noise
    assert bound < 0.02  # the bound is informative, not vacuous

    assert float(metrics.ece(probs, labels, num_bins=num_bins, binning=binning)) < bound
    # ... and it has power: 5 points of over-confidence break it by a wide margin
    probs, labels = _binary_predictions(rng, conf, p_correct=conf - 0.05)
    assert float(metrics.ece(probs, labels, num_bins=num_bins, binning=binning)) > 3 * bound


@pytest.mark.parametrize("binning", ["width", "mass"])
def test_ece_of_constantly_overconfident_predictor_is_the_gap(binning):
    # Confidence 0.9 always, accuracy exactly 0.7: ECE = |0.7 - 0.9| = 0.2.
    # Correct predictions are interleaved (7 in every 10 consecutive examples),
    # so that every equal-mass bin (contiguous in the stable sort of the tied
    # confidences, i.e. in index order) also has accuracy below 0.9; then all
    # per-bin gaps share their sign and the weighted sum is the global gap.
    # n is large so that the float32 per-bin sums are tested too (a sequential
    # float32 sum of 1e5 confidences is off by ~1e-4 relative).
    n, k = 100_000, 3
    pred = np.arange(n) % k
    probs = np.full((n, k), 0.05)
    probs[np.arange(n), pred] = 0.9
    correct = np.arange(n) % 10 < 7
    labels = np.where(correct, pred, (pred + 1) % k)
    assert correct.sum() == 70_000
    assert float(metrics.accuracy(probs, labels)) == pytest.approx(0.7, abs=1e-7)
    out = metrics.ece(probs, labels, binning=binning)
    assert float(out) == pytest.approx(0.2, abs=2e-6)  # float32 rounding


def test_ece_perfectly_calibrated_is_zero():
    probs = np.eye(3)[[0, 1, 2, 1]]
    labels = np.array([0, 1, 2, 1])
    for binning in ("width", "mass"):
        assert float(metrics.ece(probs, labels, binning=binning)) == pytest.approx(0.0, abs=1e-7)


# --------------------------------------------------------------------------- #
# agreement / total variation
# --------------------------------------------------------------------------- #


def test_agreement_and_tv_identical():
    rng = np.random.default_rng(4)
    p = _random_probs(rng, 10, 4)
    assert float(metrics.agreement(p, p)) == pytest.approx(1.0)
    assert float(metrics.total_variation(p, p)) == pytest.approx(0.0, abs=1e-7)


def test_agreement_disjoint_argmax_and_tv_disjoint_support():
    a = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    b = np.array([[0.0, 0.0, 1.0], [0.0, 0.0, 1.0]])
    assert float(metrics.agreement(a, b)) == pytest.approx(0.0)
    assert float(metrics.total_variation(a, b)) == pytest.approx(1.0)


def test_agreement_and_tv_hand_computed():
    a = np.array([[0.9, 0.1], [0.4, 0.6], [0.5, 0.5]])
    b = np.array([[0.6, 0.4], [0.7, 0.3], [0.5, 0.5]])
    assert float(metrics.agreement(a, b)) == pytest.approx(2 / 3)
    # per-example TV: 0.3, 0.3, 0.0; terms |a_k - b_k| cancel, 1/2 sum_k (|a_k| + |b_k|) = 1
    assert_sums_close(metrics.total_variation(a, b), 0.2, 1.0, 3 * 2 * 2)


# --------------------------------------------------------------------------- #
# Regression
# --------------------------------------------------------------------------- #


def test_rmse_hand_computed_and_y_scale():
    assert float(metrics.rmse(np.zeros(2), np.array([3.0, 4.0]))) == pytest.approx(math.sqrt(12.5))
    assert float(metrics.rmse(np.zeros(2), np.array([3.0, 4.0]), y_scale=2.0)) == (
        pytest.approx(2 * math.sqrt(12.5))
    )
    # per-dimension scales for (n, d)
    mean = np.zeros((2, 2))
    y = np.array([[1.0, 1.0], [1.0, 1.0]])
    out = metrics.rmse(mean, y, y_scale=np.array([1.0, 3.0]))
    assert float(out) == pytest.approx(math.sqrt((1 + 9) / 2))


def test_gaussian_nll_matches_scipy_standardised():
    rng = np.random.default_rng(5)
    mean, y = rng.normal(size=30), rng.normal(size=30)
    scale = rng.uniform(0.3, 2.0, size=30)
    expected = -stats.norm.logpdf(y, mean, scale).mean()
    out = metrics.gaussian_nll(mean, scale, y)
    assert_sums_close(out, expected, _gaussian_nll_magnitude(mean, scale, y), 30 * 4)
    # scalar (homoscedastic) scale broadcasts
    expected = -stats.norm.logpdf(y, mean, 0.7).mean()
    out = metrics.gaussian_nll(mean, 0.7, y)
    assert_sums_close(out, expected, _gaussian_nll_magnitude(mean, 0.7, y), 30 * 4)


def test_gaussian_nll_y_scale_matches_original_units():
    rng = np.random.default_rng(6)
    mean, y = rng.normal(size=20), rng.normal(size=20)
    scale = rng.uniform(0.3, 2.0, size=20)
    y_mu, y_sd = 3.0, 7.5
    expected = -stats.norm.logpdf(y * y_sd + y_mu, mean * y_sd + y_mu, scale * y_sd).mean()
    out = metrics.gaussian_nll(mean, scale, y, y_scale=y_sd)
    assert_sums_close(out, expected, _gaussian_nll_magnitude(mean, scale, y, y_sd), 20 * 4)


def test_gaussian_nll_multioutput_sums_over_d():
    rng = np.random.default_rng(7)
    mean, y = rng.normal(size=(10, 3)), rng.normal(size=(10, 3))
    scale = rng.uniform(0.5, 1.5, size=(10, 3))
    y_sd = np.array([1.0, 2.0, 4.0])
    expected = -stats.norm.logpdf(y * y_sd, mean * y_sd, scale * y_sd).sum(axis=1).mean()
    out = metrics.gaussian_nll(mean, scale, y, y_scale=y_sd)
    assert_sums_close(out, expected, _gaussian_nll_magnitude(mean, scale, y, y_sd), 10 * 3 * 4)


def test_mixture_nll_single_component_equals_gaussian_nll():
    rng = np.random.default_rng(8)
    mean, y = rng.normal(size=15), rng.normal(size=15)
    scale = rng.uniform(0.3, 2.0, size=15)
    single = metrics.gaussian_nll(mean, scale, y, y_scale=2.5)
    mix = metrics.mixture_nll(mean[None], scale[None], y, y_scale=2.5)
    assert_sums_close(mix, single, _gaussian_nll_magnitude(mean, scale, y, 2.5), 15 * 4)


def test_mixture_nll_identical_components_equals_single():
    rng = np.random.default_rng(9)
    mean, y = rng.normal(size=15), rng.normal(size=15)
    scale = rng.uniform(0.3, 2.0, size=15)
    single = metrics.mixture_nll(mean[None], scale[None], y)
    double = metrics.mixture_nll(np.stack([mean, mean]), np.stack([scale, scale]), y)
    magnitude = mixture_nll_magnitude(np.stack([mean, mean]), np.stack([scale, scale]), y)
    assert_sums_close(double, single, magnitude, 15 * 2 * 4)


def test_mixture_nll_matches_scipy_brute_force():
    rng = np.random.default_rng(10)
    s, n = 7, 25
    means = rng.normal(size=(s, n))
    scales = rng.uniform(0.2, 2.0, size=(s, n))
    y = rng.normal(size=n) * 2
    y_mu, y_sd = -1.0, 3.0
    dens = stats.norm.pdf(y * y_sd + y_mu, means * y_sd + y_mu, scales * y_sd)  # (S, n)
    expected = -np.log(dens.mean(axis=0)).mean()
    out = metrics.mixture_nll(means, scales, y, y_scale=y_sd)
    assert_sums_close(out, expected, mixture_nll_magnitude(means, scales, y, y_sd), s * n * 4)
    # multi-output (S, n, d): components are products over d
    means3 = rng.normal(size=(s, n, 2))
    scales3 = rng.uniform(0.2, 2.0, size=(s, n, 2))
    y3 = rng.normal(size=(n, 2))
    logc = stats.norm.logpdf(y3, means3, scales3).sum(axis=-1)  # (S, n)
    expected3 = -(np_logsumexp(logc, axis=0) - math.log(s)).mean()
    out3 = metrics.mixture_nll(means3, scales3, y3)
    assert_sums_close(out3, expected3, mixture_nll_magnitude(means3, scales3, y3), s * n * 2 * 4)


def test_mixture_nll_is_stable_far_in_the_tails():
    # every component density underflows in float32; logsumexp keeps it finite
    means = np.array([[0.0], [1.0]])
    scales = np.full((2, 1), 0.01)
    y = np.array([50.0])
    out = metrics.mixture_nll(means, scales, y)
    logc = stats.norm.logpdf(50.0, np.array([0.0, 1.0]), 0.01)
    expected = -(np_logsumexp(logc) - math.log(2))
    assert np.isfinite(float(out))
    assert_sums_close(out, expected, mixture_nll_magnitude(means, scales, y), 2 * 4)


# --------------------------------------------------------------------------- #
# jit
# --------------------------------------------------------------------------- #


def test_classification_metrics_under_jit():
    # jitted results against NumPy references (no eager call, to keep compiles few)
    rng = np.random.default_rng(11)
    p_np, q_np = _random_probs(rng, 40, 3), _random_probs(rng, 40, 3)
    y_np = rng.integers(0, 3, size=40)
    probs, other, labels = jnp.asarray(p_np), jnp.asarray(q_np), jnp.asarray(y_np)
    onehot = np.eye(3)[y_np]
    expected = {
        metrics.accuracy: (p_np.argmax(1) == y_np).mean(),
        metrics.nll: -np.log(p_np[np.arange(40), y_np]).mean(),
        metrics.brier: ((p_np - onehot) ** 2).sum(1).mean(),
    }
    for fn, want in expected.items():
        assert float(jax.jit(fn)(probs, labels)) == pytest.approx(want, rel=1e-5)
    agree = (p_np.argmax(1) == q_np.argmax(1)).mean()
    assert float(jax.jit(metrics.agreement)(probs, other)) == pytest.approx(agree)
    tv = 0.5 * np.abs(p_np - q_np).sum(1).mean()
    # terms |p_k - q_k| cancel; 1/2 sum_k (|p_k| + |q_k|) = 1 per row (tests/tolerances.py)
    assert_sums_close(jax.jit(metrics.total_variation)(probs, other), tv, 1.0, 40 * 3 * 2)

    f = jax.jit(functools.partial(metrics.ece, num_bins=5))
    ece_magnitude = _ece_magnitude(p_np, y_np)
    assert_sums_close(f(probs, labels), _ece_reference(p_np, y_np, 5), ece_magnitude, 40 + 5)
    g = jax.jit(functools.partial(metrics.reliability_curve, num_bins=5, binning="mass"))
    curve = g(probs, labels)
    assert isinstance(curve, metrics.ReliabilityCurve)
    np.testing.assert_array_equal(curve.count, [8] * 5)
    h = jax.jit(functools.partial(metrics.ece, num_bins=5, binning="mass"))
    gaps = np.abs(np.asarray(curve.accuracy) - np.asarray(curve.confidence))
    assert_sums_close(h(probs, labels), np.sum(8 / 40 * gaps), ece_magnitude, 40 + 5)
    # the hand-computed case also holds under jit
    f4 = jax.jit(functools.partial(metrics.ece, num_bins=4))
    assert_sums_close(f4(ECE_PROBS, ECE_LABELS), 1.1 / 6, _ece_magnitude(ECE_PROBS, ECE_LABELS), 10)


def test_regression_metrics_under_jit():
    rng = np.random.default_rng(12)
    m_np = rng.normal(size=(4, 9))
    s_np = rng.uniform(0.5, 1.5, size=(4, 9))
    y_np = rng.normal(size=9)
    means, scales, y = jnp.asarray(m_np), jnp.asarray(s_np), jnp.asarray(y_np)
    want_rmse = 2.0 * np.sqrt(((m_np[0] - y_np) ** 2).mean())
    assert float(jax.jit(metrics.rmse)(means[0], y, 2.0)) == pytest.approx(want_rmse, rel=1e-5)
    want_g = -stats.norm.logpdf(2 * y_np, 2 * m_np[0], 2 * s_np[0]).mean()
    got_g = jax.jit(metrics.gaussian_nll)(means[0], scales[0], y, 2.0)
    assert_sums_close(got_g, want_g, _gaussian_nll_magnitude(m_np[0], s_np[0], y_np, 2.0), 9 * 4)
    logc = stats.norm.logpdf(2 * y_np, 2 * m_np, 2 * s_np)
    want_m = -(np_logsumexp(logc, axis=0) - math.log(4)).mean()
    got_m = jax.jit(metrics.mixture_nll)(means, scales, y, 2.0)
    assert_sums_close(got_m, want_m, mixture_nll_magnitude(m_np, s_np, y_np, 2.0), 4 * 9 * 4)


def test_shape_errors_are_raised_under_jit_too():
    with pytest.raises(ValueError, match="labels must be 1-D"):
        jax.jit(metrics.accuracy)(jnp.ones((3, 2)) / 2, jnp.zeros(4, dtype=jnp.int32))


def test_num_bins_must_be_static_under_jit():
    with pytest.raises(ValueError, match="num_bins must be a Python int"):
        jax.jit(metrics.ece)(jnp.ones((3, 2)) / 2, jnp.zeros(3, dtype=jnp.int32), 5)


def test_value_checks_are_skipped_under_jit_but_shape_checks_are_not():
    logits = jnp.array([[2.0, -1.0, 0.5], [0.5, 3.0, 1.0]])
    labels = jnp.array([0, 1])
    with pytest.raises(ValueError, match="non-negative"):
        metrics.accuracy(logits, labels)  # eager: values are checked
    # traced: the values are unknown, so not checked (argmax of logits is fine)
    assert float(jax.jit(metrics.accuracy)(logits, labels)) == pytest.approx(1.0)
    assert float(jax.jit(metrics.agreement)(logits, 2 * logits)) == pytest.approx(1.0)
    assert np.isnan(float(jax.jit(metrics.nll)(jnp.full((2, 3), jnp.nan), labels)))
    y = jnp.zeros(3)
    assert np.isnan(float(jax.jit(metrics.gaussian_nll)(y, -jnp.ones(3), y)))
    assert np.isnan(float(jax.jit(metrics.rmse)(y.at[0].set(jnp.nan), y)))
    # shapes are static: still checked under jit
    with pytest.raises(ValueError, match=r"probs_a and probs_b .* same shape"):
        jax.jit(metrics.total_variation)(logits, logits[:, :2])
    with pytest.raises(ValueError, match=r"scale must be broadcastable"):
        jax.jit(metrics.gaussian_nll)(y, jnp.ones(2), y)


def test_label_range_not_checked_on_tracers():
    # value checks are skipped for traced labels (no error, no host sync)
    out = jax.jit(metrics.accuracy)(jnp.ones((2, 2)) / 2, jnp.array([0, 5]))
    assert float(out) == pytest.approx(0.5)


# --------------------------------------------------------------------------- #
# Errors
# --------------------------------------------------------------------------- #

P = np.full((3, 2), 0.5)
L = np.array([0, 1, 0])


@pytest.mark.parametrize(
    ("fn", "args", "match"),
    [
        (metrics.accuracy, (np.full(3, 0.5), L), r"probs must be 2-D with shape \(n, K\)"),
        (metrics.nll, (np.full((2, 3, 2), 0.5), L), r"probs must be 2-D"),
        (metrics.brier, (np.zeros((0, 2)), np.zeros(0, dtype=int)), r"at least one example"),
        (metrics.accuracy, (np.zeros((3, 0)), L), r"at least one class"),
        (metrics.accuracy, (P, np.array([0, 1])), r"labels must be 1-D with shape \(n,\) = \(3,\)"),
        (metrics.nll, (P, L[:, None]), r"labels must be 1-D"),
        (metrics.brier, (P, L.astype(float)), r"labels must have an integer dtype"),
        (metrics.accuracy, (P, np.array([0, 2, 1])), r"labels must lie in \[0, K\) = \[0, 2\)"),
        (metrics.nll, (P, np.array([0, -1, 1])), r"labels must lie in \[0, K\)"),
        (metrics.ece, (P, jnp.array([0, 1, 3])), r"labels must lie in \[0, K\)"),
        (metrics.ece, (P, L, 0), r"num_bins must be >= 1"),
        (metrics.reliability_curve, (P, L, 2.5), r"num_bins must be a Python int"),
        (metrics.ece, (P, L, 5, "quantile"), r"binning must be one of \('width', 'mass'\)"),
        (metrics.reliability_curve, (P, L, 5, "bogus"), r"binning must be one of"),
        (metrics.agreement, (P, np.full((3, 3), 1 / 3)), r"probs_a and probs_b .* same shape"),
        (metrics.total_variation, (P, np.full((4, 2), 0.5)), r"same shape \(n, K\)"),
        (metrics.agreement, (np.full(3, 0.5), P), r"probs_a must be 2-D"),
        (metrics.total_variation, (P, np.zeros((0, 2))), r"probs_b must contain at least one"),
    ],
)
def test_classification_value_errors(fn, args, match):
    with pytest.raises(ValueError, match=match):
        fn(*args)


def _bad_rows() -> np.ndarray:
    p = np.full((4, 2), 0.5)
    p[1] = [0.7, 0.5]  # off by 0.2
    p[2] = [1.0, 0.5]  # the worst row, off by 0.5
    return p


LOGITS = np.array([[2.0, -1.0], [0.3, 1.1], [-0.5, 0.2]])
SOFTMAX_HINT = r"Did you pass logits .* jax\.nn\.softmax"


@pytest.mark.parametrize(
    ("fn", "args", "match"),
    [
        # logits: negative entries, and positive scores whose rows do not sum to 1
        (metrics.nll, (LOGITS, L), r"probs must be non-negative .* " + SOFTMAX_HINT),
        (
            metrics.accuracy,
            (np.abs(LOGITS), L),
            r"each row of probs must sum to 1 .* " + SOFTMAX_HINT,
        ),
        (
            metrics.brier,
            (_bad_rows(), np.array([0, 1, 0, 1])),
            r"sum to 1 \(atol=0\.001 for float32\); 2 of 4 rows do not, the worst is row 2, "
            r"which sums to 1\.5 \(off by 0\.5\)",
        ),
        (
            metrics.ece,
            (np.array([[1.2, -0.2], [0.5, 0.5], [0.5, 0.5]]), L),
            r"the most negative entry is -0\.2 at index \(0, 1\) \(1 of 6 entries are negative\)",
        ),
        (
            metrics.reliability_curve,
            (np.array([[0.5, 0.5], [np.nan, 0.5], [0.5, 0.5]]), L),
            r"probs must be finite \(no NaN or inf\); found nan at index \(1, 0\)",
        ),
        (metrics.nll, (np.array([[0.5, 0.5], [0.5, 0.5], [np.inf, 0.0]]), L), r"found inf"),
        (metrics.agreement, (P, np.full((3, 2), 0.6)), r"each row of probs_b must sum to 1"),
        (metrics.total_variation, (np.abs(LOGITS), P), r"each row of probs_a must sum to 1"),
        (metrics.agreement, (P.T, P.T), r"columns of probs_a sum to 1: .* transposed"),
        # shape problems are reported as such, before any value check
        (metrics.nll, (LOGITS.T, L), r"labels must be 1-D with shape \(n,\) = \(2,\)"),
        (metrics.total_variation, (LOGITS, P[:2]), r"probs_a and probs_b must have the same"),
    ],
)
def test_invalid_probabilities_raise_clearly(fn, args, match):
    with pytest.raises(ValueError, match=match):
        fn(*args)


def test_probability_tolerance_accepts_float32_softmax_and_bma():
    # float32 softmax outputs and their model average deviate from 1 by ~1e-7 * K
    rng = np.random.default_rng(25)
    logits = jnp.asarray(5 * rng.normal(size=(10, 300, 100)), dtype=jnp.float32)
    per_sample = jax.nn.softmax(logits, axis=-1)
    bma = jnp.mean(per_sample, axis=0)
    labels = rng.integers(0, 100, size=300)
    assert np.max(np.abs(np.asarray(bma).sum(axis=1) - 1)) > 0  # genuinely not exact
    for probs in (per_sample[0], bma, np.asarray(bma, dtype=np.float64)):
        assert np.isfinite(float(metrics.nll(probs, labels)))
    assert np.isfinite(float(metrics.total_variation(per_sample[0], bma)))
    # bfloat16 probabilities (8-bit mantissa) have rows off by several 1e-3:
    # 16-bit floats get atol = sqrt(eps) instead
    half = per_sample[0].astype(jnp.bfloat16)
    assert np.max(np.abs(np.asarray(half, dtype=np.float32).sum(axis=1) - 1)) > 1e-3
    assert float(metrics.accuracy(half, labels)) >= 0.0
    # the tolerance is atol = 1e-3 on each row sum
    ok = np.array([[0.5004, 0.5], [0.4996, 0.5]], dtype=np.float32)
    assert float(metrics.accuracy(ok, np.array([0, 1]))) == pytest.approx(1.0)
    with pytest.raises(ValueError, match=r"row 0, which sums to 1\.002"):
        metrics.accuracy(np.array([[0.502, 0.5]], dtype=np.float32), np.array([0]))


Y = np.zeros(4)


@pytest.mark.parametrize(
    ("fn", "args", "match"),
    [
        (metrics.rmse, (np.zeros(3), Y), r"mean must have the same shape as y \(4,\)"),
        (metrics.rmse, (np.zeros(()), np.zeros(())), r"y must have shape \(n,\) or \(n, d\)"),
        (metrics.rmse, (np.zeros(0), np.zeros(0)), r"y must be non-empty"),
        (metrics.rmse, (Y, Y, -1.0), r"y_scale must be positive"),
        (metrics.rmse, (Y, Y, np.ones(4)), r"y_scale must be broadcastable"),
        (metrics.gaussian_nll, (Y, np.ones(4), np.zeros((4, 1, 1))), r"y must have shape"),
        (metrics.gaussian_nll, (np.zeros(5), np.ones(4), Y), r"mean must have the same shape"),
        (metrics.gaussian_nll, (Y, np.ones(3), Y), r"scale must be broadcastable .* \(4,\)"),
        (metrics.gaussian_nll, (Y, np.ones((2, 4)), Y), r"scale must be broadcastable"),
        (metrics.gaussian_nll, (Y, np.ones(4), Y, 0.0), r"y_scale must be positive"),
        (
            metrics.gaussian_nll,
            (np.zeros((4, 2)), 1.0, np.zeros((4, 2)), np.ones(3)),
            r"y_scale must be broadcastable to the shape of y\[0\] \(2,\)",
        ),
        (metrics.mixture_nll, (Y, np.ones(4), Y), r"means must have shape \(S,\) \+ y.shape"),
        (metrics.mixture_nll, (np.zeros((2, 5)), 1.0, Y), r"means must have shape .*\(S, 4\)"),
        (metrics.mixture_nll, (np.zeros((0, 4)), 1.0, Y), r"at least one sample \(S >= 1\)"),
        (metrics.mixture_nll, (np.zeros((2, 4)), np.ones(2), Y), r"scales must be broadcastable"),
        (metrics.mixture_nll, (np.zeros((2, 4)), 1.0, Y, -2.0), r"y_scale must be positive"),
        # values
        (
            metrics.rmse,
            (np.array([0.0, np.nan, 0.0, np.nan]), Y),
            r"mean must be finite \(no NaN or inf\); found nan at index \(1,\) \(2 of 4",
        ),
        (
            metrics.rmse,
            (Y, np.array([0.0, 0.0, np.inf, 0.0])),
            r"y must be finite \(no NaN or inf\); found inf at index \(2,\)",
        ),
        (metrics.rmse, (Y, Y, np.nan), r"y_scale must be finite"),
        (metrics.gaussian_nll, (Y, 1.0, Y, np.inf), r"y_scale must be finite"),
        (
            metrics.gaussian_nll,
            (Y, np.array([1.0, 1.0, 0.0, -1.0]), Y),
            r"scale must be positive \(> 0\); found 0\.0 at index \(2,\) \(2 of 4 entries",
        ),
        (metrics.gaussian_nll, (Y, -1.0, Y), r"scale must be positive \(> 0\); found -1\.0 \("),
        (metrics.gaussian_nll, (Y, np.full(4, np.nan), Y), r"scale must be finite"),
        (metrics.gaussian_nll, (Y, 1.0, np.full(4, -np.inf)), r"y must be finite"),
        (metrics.mixture_nll, (np.full((2, 4), np.inf), 1.0, Y), r"means must be finite"),
        (metrics.mixture_nll, (np.zeros((2, 4)), np.zeros((2, 4)), Y), r"scales must be positive"),
        (metrics.mixture_nll, (np.zeros((2, 4)), 1.0, Y, np.array(0.0)), r"y_scale must be pos"),
    ],
)
def test_regression_value_errors(fn, args, match):
    with pytest.raises(ValueError, match=match):
        fn(*args)


# --------------------------------------------------------------------------- #
# Docstrings
# --------------------------------------------------------------------------- #


def test_docstring_examples_run():
    # the metrics are a package (one module per family): run every module's examples
    from bnn_ppl.metrics import calibration, classification, regression

    results = [
        doctest.testmod(m, optionflags=doctest.ELLIPSIS)
        for m in (metrics, calibration, classification, regression)
    ]
    assert sum(r.attempted for r in results) >= 12
    assert sum(r.failed for r in results) == 0


def test_public_functions_have_examples_and_hints():
    import inspect

    for name in metrics.__all__:
        obj = getattr(metrics, name)
        assert obj.__doc__ and obj.__doc__.strip(), name
        if inspect.isfunction(obj):
            assert "Example:" in obj.__doc__ and ">>>" in obj.__doc__, name
            assert "return" in obj.__annotations__, name


def test_mean_sq_std_residual_hand_computed():
    """E[(y - m)^2 / s^2] of the BMA's moment-matched Gaussian: one draw, then a mixture whose
    variance is the law of total variance's (within 1 + spread 1 = 2); 1 for a calibrated
    predictive on its own draws."""
    from bnn_ppl.likelihoods import GaussianPrediction
    from bnn_ppl.metrics.suite import predictive_metrics

    one = GaussianPrediction(np.zeros((1, 4)), np.full((1, 4), 2.0))
    y = np.array([2.0, -2.0, 0.0, 4.0])
    m = predictive_metrics(one, y, task="regression", y_std=3.0)  # units do not enter it
    assert m["mean_sq_std_residual"] == pytest.approx((1 + 1 + 0 + 4) / 4, rel=1e-6)
    two = GaussianPrediction(np.array([[1.0, 1.0], [-1.0, -1.0]]), np.ones((2, 2)))
    m = predictive_metrics(two, np.array([2.0, 0.0]), task="regression")
    assert m["mean_sq_std_residual"] == pytest.approx((4 / 2 + 0) / 2, rel=1e-6)
    rng = np.random.default_rng(0)
    y = rng.normal(1.0, 0.5, size=20_000)  # N(1, 0.5^2) targets, the predictive N(1, 0.5^2)
    m = predictive_metrics(GaussianPrediction(np.ones((1, y.size)), np.full((1, y.size), 0.5)),
                           y, task="regression")  # fmt: skip
    assert m["mean_sq_std_residual"] == pytest.approx(1.0, abs=4 * math.sqrt(2 / y.size))


def test_running_mean_sq_std_residual_far_from_zero():
    """The streamed E[(y - m)^2 / s^2] of progress lines (float32 draws, float64 sums) keeps
    its digits for targets near 1e4 with sd 0.5: the moments are taken about the first draw."""
    from bnn_ppl.likelihoods import GaussianPrediction
    from bnn_ppl.metrics.suite import predictive_metrics, prefix_metrics

    rng = np.random.default_rng(1)
    mean = (1e4 + 0.3 * rng.normal(size=(2, 50, 30))).astype(np.float32)
    scale = np.full((2, 50, 30), 0.5, np.float32)
    y = 1e4 + 0.6 * rng.normal(size=30)
    got = prefix_metrics(GaussianPrediction(mean, scale), y, [50], task="regression")[0]
    flat = GaussianPrediction(mean.reshape(100, 30), scale.reshape(100, 30))
    want = predictive_metrics(flat, y, task="regression")["mean_sq_std_residual"]
    m64, s64 = mean.astype(np.float64).reshape(100, 30), 0.5
    exact = np.mean((y - m64.mean(0)) ** 2 / (s64**2 + m64.var(0)))
    assert got["mean_sq_std_residual"] == pytest.approx(exact, rel=1e-5)
    assert want == pytest.approx(exact, rel=1e-3)  # float32 BMA mean: ulp(1e4) ~ 1e-3

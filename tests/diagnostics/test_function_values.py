"""The function-space quantities of bnn_ppl.diagnostics.function_values, checked against hand
computations.

A network with no hidden layer has logits ``x @ W + b``, computed here in float64 by NumPy; the
library's float32 values must match within the float32 rounding of those few-term sums
(``tests/tolerances.py``).
"""

from __future__ import annotations

import numpy as np
import pytest
from tolerances import sum_tolerance

import bnn_ppl as bp
from bnn_ppl.diagnostics import function_space
from bnn_ppl.diagnostics.function_values import (
    PAPERS_QUANTITY,
    centred_logits,
    default_quantity,
    function_values,
    p_true,
)
from bnn_ppl.models import MLP

CHAINS, DRAWS, N, D, K = 2, 5, 6, 3, 4


def _setup(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(N, D)).astype(np.float32)
    y = rng.integers(0, K, size=N)
    w = rng.normal(size=(CHAINS, DRAWS, D, K)).astype(np.float32)
    b = rng.normal(size=(CHAINS, DRAWS, K)).astype(np.float32)
    model = bp.BNN(MLP(hidden=(), out=K), bp.priors.Normal(1.0), bp.likelihoods.Categorical())
    return model, x, y, {"Dense_0.kernel": w, "Dense_0.bias": b}


def _by_hand(x, samples):
    """Logits, their float32 rounding scale, and softmax, in float64."""
    w = samples["Dense_0.kernel"].astype(np.float64)
    b = samples["Dense_0.bias"].astype(np.float64)
    logits = np.einsum("nd,cadk->cank", x.astype(np.float64), w) + b[:, :, None, :]
    magnitude = np.einsum("nd,cadk->cank", np.abs(x), np.abs(w)) + np.abs(b)[:, :, None, :]
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return logits, magnitude, e / e.sum(-1, keepdims=True)


def _below(err, tol):
    err, tol = np.broadcast_arrays(err, tol)
    np.testing.assert_array_less(err, tol)


def test_array_definitions():
    assert centred_logits(np.array([[1.0, 2.0, 6.0], [0.0, 0.0, 3.0]])).tolist() == [
        [-2.0, -1.0, 3.0],
        [-1.0, -1.0, 2.0],
    ]
    probs = np.array([[[0.1, 0.9], [0.7, 0.3], [0.5, 0.5]]])  # one draw, 3 rows
    assert p_true(probs, [1, 0, 1]).tolist() == [[0.9, 0.7, 0.5]]
    with pytest.raises(ValueError, match="y has shape"):
        p_true(probs, [1, 0])
    with pytest.raises(ValueError, match="y"):
        p_true(probs, [1, 0, 2])  # label 2 with 2 classes


def test_every_quantity_matches_the_hand_computation():
    model, x, y, samples = _setup()
    logits, magnitude, probs = _by_hand(x, samples)
    tol = sum_tolerance(magnitude, D + 1)  # D products and a bias per logit

    got = function_values(model, samples, x, "probs")
    assert got.shape == (CHAINS, DRAWS, N, K) and got.dtype == np.float32
    # softmax changes by at most (its value) x (twice the largest logit error): relative
    _below(np.abs(got - probs), 2 * probs * tol.max(-1, keepdims=True) + 1e-7)

    want_true = np.take_along_axis(probs, np.broadcast_to(y[:, None], (CHAINS, DRAWS, N, 1)), -1)
    got_true = function_values(model, samples, x, "p_true", y=y)
    assert got_true.shape == (CHAINS, DRAWS, N)
    np.testing.assert_allclose(got_true, want_true[..., 0], rtol=0, atol=1e-6)
    np.testing.assert_array_equal(got_true, p_true(got, y))

    got_logits = function_values(model, samples, x, "centred_logits")
    want = logits - logits.mean(-1, keepdims=True)
    assert got_logits.shape == (CHAINS, DRAWS, N, K)
    _below(np.abs(got_logits - want), 2 * tol.max(-1, keepdims=True))
    np.testing.assert_allclose(got_logits.sum(-1), 0.0, atol=4 * float(tol.max()))

    assert default_quantity(model) == PAPERS_QUANTITY == "probs"
    np.testing.assert_array_equal(function_values(model, samples, x), got)
    # chunked inputs and one leading axis give the same values
    flat = {k: v.reshape(-1, *v.shape[2:]) for k, v in samples.items()}
    np.testing.assert_array_equal(
        function_values(model, flat, x, "centred_logits", chunk_size=4),
        got_logits.reshape(-1, N, K),
    )


def test_centred_logits_and_probs_ignore_a_shift_of_every_logit():
    """Adding c to every class's bias shifts each row's logits by c: the softmax and the centred
    logits are unchanged, which is why they (and not the raw logits) are diagnosed."""
    model, x, _, samples = _setup()
    shifted = dict(samples, **{"Dense_0.bias": samples["Dense_0.bias"] + np.float32(3.0)})
    for q in ("probs", "centred_logits"):
        np.testing.assert_allclose(
            function_values(model, shifted, x, q), function_values(model, samples, x, q), atol=2e-5
        )


def test_regression_mean():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(N, D)).astype(np.float32)
    model = bp.BNN(MLP(hidden=(), out=1), bp.priors.Normal(1.0), bp.likelihoods.Gaussian(0.5))
    w = rng.normal(size=(CHAINS, DRAWS, D, 1)).astype(np.float32)
    b = rng.normal(size=(CHAINS, DRAWS, 1)).astype(np.float32)
    got = function_values(model, {"Dense_0.kernel": w, "Dense_0.bias": b}, x)
    want = np.einsum("nd,cad->can", x.astype(np.float64), w[..., 0].astype(np.float64)) + b
    magnitude = np.einsum("nd,cad->can", np.abs(x), np.abs(w[..., 0])) + np.abs(b)
    assert default_quantity(model) == "mean" and got.shape == (CHAINS, DRAWS, N)
    _below(np.abs(got - want), sum_tolerance(magnitude, D + 1))


def test_bad_quantities_are_named():
    model, x, y, samples = _setup()
    with pytest.raises(ValueError, match="quantity"):
        function_values(model, samples, x, "logits")
    with pytest.raises(ValueError, match="pass y"):
        function_values(model, samples, x, "p_true")
    with pytest.raises(ValueError, match="y"):
        function_values(model, samples, x, "p_true", y=y[:3])
    reg = bp.BNN(MLP(hidden=(), out=1), bp.priors.Normal(1.0), bp.likelihoods.Gaussian(0.5))
    reg_samples = {"Dense_0.kernel": np.zeros((2, 4, D, 1)), "Dense_0.bias": np.zeros((2, 4, 1))}
    with pytest.raises(ValueError, match="not defined for a regression model"):
        function_values(reg, reg_samples, x, "probs")


def test_function_space_diagnoses_the_chosen_quantity():
    model, x, y, samples = _setup()
    shapes = {
        q: function_space(model, samples, x, quantity=q, y=y, chunk_size=4).rhat["predictive"].shape
        for q in ("probs", "p_true", "centred_logits")
    }
    assert shapes == {"probs": (N, K), "p_true": (N,), "centred_logits": (N, K)}
    default = function_space(model, samples, x).rhat["predictive"]
    np.testing.assert_array_equal(
        default, function_space(model, samples, x, quantity="probs").rhat["predictive"]
    )


def test_bernoulli_centred_logits_are_half_the_logit_either_way():
    """A Bernoulli network has one logit l; its two classes' logits are (0, l), centred
    (-l/2, l/2), computed from the log-probabilities."""
    rng = np.random.default_rng(2)
    x = rng.normal(size=(N, D)).astype(np.float32)
    model = bp.BNN(MLP(hidden=(), out=1), bp.priors.Normal(1.0), bp.likelihoods.Bernoulli())
    w = rng.normal(size=(CHAINS, DRAWS, D, 1)).astype(np.float32)
    b = rng.normal(size=(CHAINS, DRAWS, 1)).astype(np.float32)
    logit = np.einsum("nd,cad->can", x.astype(np.float64), w[..., 0].astype(np.float64)) + b
    got = function_values(model, {"Dense_0.kernel": w, "Dense_0.bias": b}, x, "centred_logits")
    assert got.shape == (CHAINS, DRAWS, N, 2)
    np.testing.assert_allclose(got, np.stack([-logit / 2, logit / 2], -1), rtol=1e-4, atol=1e-5)

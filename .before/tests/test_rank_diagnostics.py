"""``bnn_ppl.rank_diagnostics.rhat_bulk_ess``, the vectorised rank-normalised split R-hat and
bulk ESS, equals ArviZ's per-quantity figures (to float64 rounding) on every branch of ArviZ's
code: chains of 4 to 1,001 draws (odd lengths drop the middle draw of the split; 4 draws leave
no Geyer pair), independent, strongly autocorrelated (the monotone sequence truncates late),
anticorrelated (ESS above the number of draws), a shifted chain (R-hat far above 1), tied
values (average ranks), a constant quantity (R-hat NaN, ESS = the split's draws), 3 chains
and a single chain (no R-hat)."""

from __future__ import annotations

import warnings

import arviz as az
import numpy as np
import pytest

from bnn_ppl.diagnostics import convergence, rhat_bulk_ess
from bnn_ppl.rank_diagnostics import rhat_bulk_ess as fast


def _ar1(rng, phi, shape):
    x = np.zeros(shape)
    e = rng.normal(size=shape)
    for t in range(shape[1]):
        x[:, t] = (phi * x[:, t - 1] if t else 0.0) + e[:, t]
    return x


def _case(name, n):
    rng = np.random.default_rng(n)
    if name == "iid":
        return rng.normal(size=(4, n, 12))
    if name == "autocorrelated":
        return _ar1(rng, 0.95, (4, n, 12))
    if name == "anticorrelated":
        return _ar1(rng, -0.7, (4, n, 12))
    if name == "shifted":
        x = _ar1(rng, 0.5, (4, n, 12))
        x[1] += 1.5
        return x
    if name == "ties":
        return rng.integers(0, 3, size=(4, n, 12)).astype(float)
    if name == "constant":
        x = rng.normal(size=(4, n, 3))
        x[..., 0] = 1.0
        return x
    if name == "three_chains":
        return rng.normal(size=(3, n, 5))
    return rng.normal(size=(1, n, 5))  # one chain


def _arviz(x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # (ArviZ divides 0/0 for a constant)
        return np.asarray(az.rhat(x, method="rank")), np.asarray(az.ess(x, method="bulk"))


@pytest.mark.parametrize("n", [4, 5, 7, 10, 31, 200, 1001])
@pytest.mark.parametrize("name", ["iid", "autocorrelated", "anticorrelated", "shifted", "ties",
                                  "constant", "three_chains", "one_chain"])  # fmt: skip
def test_equals_arviz_on_every_branch(name, n):
    x = _case(name, n)
    rhat, ess = fast(x, chunk=5)  # (chunks that split the quantities unevenly)
    want_rhat, want_ess = _arviz(x)
    np.testing.assert_allclose(rhat, want_rhat, rtol=1e-9, equal_nan=True)
    np.testing.assert_allclose(ess, want_ess, rtol=1e-9, equal_nan=True)


def test_the_branches_are_reached():
    """The cases above are not all alike: a shifted chain has R-hat >> 1, anticorrelated
    draws an ESS above the draw count, autocorrelated ones far below it, a constant NaN."""
    rhat, _ = fast(_case("shifted", 200))
    assert np.all(rhat > 1.1)
    assert np.all(fast(_case("anticorrelated", 1001))[1] > 4 * 1001)
    assert np.all(fast(_case("autocorrelated", 1001))[1] < 0.1 * 4 * 1001)
    rhat, ess = fast(_case("constant", 31))
    # ESS: the draws of the split (31 draws: each chain's middle draw is left out)
    assert np.isnan(rhat[0]) and ess[0] == 4 * 30 and np.all(np.isfinite(rhat[1:]))


def test_diagnostics_use_it_and_keep_the_shape_and_the_input_checks():
    x = np.random.default_rng(0).normal(size=(4, 50, 2, 3))
    rhat, ess = rhat_bulk_ess(x)
    conv = convergence({"f": x})
    assert rhat.shape == ess.shape == (2, 3)
    np.testing.assert_array_equal(conv.rhat["f"], rhat)
    np.testing.assert_array_equal(conv.ess_bulk["f"], ess)
    with pytest.raises(ValueError, match="NaN/inf"):
        rhat_bulk_ess(np.full((4, 10), np.nan))
    with pytest.raises(ValueError, match="needs >= 4"):
        rhat_bulk_ess(np.zeros((4, 3)))

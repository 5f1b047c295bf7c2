"""The float32-sum rule of ``tests/tolerances.py``: it holds for sums in any order, even when they
cancel, and it refuses differences a real bug makes."""

from __future__ import annotations

import numpy as np
import pytest
from tolerances import EPS32, assert_sums_close, sum_tolerance


def _orders(terms: np.ndarray) -> list[np.float32]:
    """The same float32 terms summed sequentially forwards and backwards, pairwise (NumPy),
    in chunks of 7 and in a random order."""
    t = terms.astype(np.float32)

    def sequential(v):
        total = np.float32(0)
        for a in v:
            total = np.float32(total + a)
        return total

    chunks = [sequential(t[i : i + 7]) for i in range(0, len(t), 7)]
    perm = np.random.default_rng(len(t)).permutation(len(t))
    return [sequential(t), sequential(t[::-1]), t.sum(), sequential(chunks), sequential(t[perm])]


@pytest.mark.parametrize("n", [2, 3, 10, 100, 1000, 10_000])
def test_sums_in_any_order_pass_even_when_they_cancel(n):
    rng = np.random.default_rng(n)
    for trial in range(200 if n <= 1000 else 20):
        terms = rng.normal(size=n) * rng.lognormal(0, 2, size=n)
        if trial % 2:  # cancel to a tiny fraction of the terms
            terms = np.append(terms[:-1], -terms[:-1].sum() + 1e-6 * np.abs(terms).sum())
        magnitude = np.abs(terms.astype(np.float32).astype(np.float64)).sum()
        exact = terms.astype(np.float32).astype(np.float64).sum()
        sums = _orders(terms)
        for a in sums:
            assert_sums_close(a, exact, magnitude, n)  # against the exact sum
            assert_sums_close(a, sums[0], magnitude, n)  # against another order


def test_a_real_difference_fails_and_the_report_says_where():
    rng = np.random.default_rng(0)
    terms = rng.normal(size=(50, 3)).astype(np.float32)
    magnitude = np.abs(terms).sum(axis=0)
    with pytest.raises(AssertionError, match=r"1 of 3 entries .* worst at \(1,\)"):
        assert_sums_close(terms.sum(axis=0) + [0, terms[7, 1], 0], terms.sum(axis=0), magnitude, 50)
    with pytest.raises(AssertionError, match="1 of 1"):  # NaN is never close
        assert_sums_close(np.nan, 1.0, 1.0, 1)
    with pytest.raises(AssertionError, match="^b: 1 of 1"):  # pytrees: per key, named
        assert_sums_close({"a": 1.0, "b": 2.0}, {"a": 1.0, "b": 3.0}, {"a": 1, "b": 1}, 2)
    with pytest.raises(AssertionError, match="keys differ"):
        assert_sums_close({"a": 1.0}, {"b": 1.0}, {"a": 1.0}, 2)


def test_the_tolerance_is_c_sqrt_n_eps32_times_the_magnitude():
    assert sum_tolerance(2.0, 100) == pytest.approx(3 * 10 * EPS32 * 2.0, rel=1e-15)
    np.testing.assert_array_equal(sum_tolerance([1.0, 0.0], 4, c=1.0), [2 * EPS32, 0.0])
    assert_sums_close(0.0, 0.0, 0.0, 5)  # zero magnitude: only exact equality passes
    with pytest.raises(ValueError, match="num_terms"):
        sum_tolerance(1.0, 0)

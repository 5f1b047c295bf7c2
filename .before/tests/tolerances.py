"""One rule for comparing float32 sums: ``|a - b| <= c * sqrt(n) * eps32 * M``, entry by entry.

``M`` is the sum of the absolute values of the terms that were added up to make the entry (the
per-row log-likelihoods and the prior for a potential, the per-row gradients for its gradient)
and ``n`` is how many terms were added. A fixed ``atol``, or an ``rtol`` relative to the result,
is the wrong scale: when the terms cancel, a result of 0.1 can carry the rounding error of terms
of size 100 (issue 14, item 6: 1 of many gradient entries, at magnitude 0.107 among entries of
~100, was off by 2.8e-4 relative, and CI failed at random).

Why ``c * sqrt(n)`` with ``c = 3``. Summing ``n`` terms in float32 in any order makes ``n - 1``
roundings, each of at most ``u = eps32 / 2`` times a partial sum, and every partial sum is at
most ``M``: the rigorous worst case is ``(n - 1) u M`` per side (Higham, *Accuracy and Stability
of Numerical Algorithms*, 2nd ed., eq. 4.4). Rounding errors of different additions behave like
independent zero-mean variables (Higham 2002, section 2.8: the rule of thumb ``sqrt(n) u``
rather than ``n u``), so the error of one sum has a standard deviation of at most
``u / sqrt(3) * sqrt(n) * M``, and the difference of two independently rounded sums at most
``0.41 * eps32 * sqrt(n) * M``. ``c = 3`` puts the tolerance at over 7 of these standard
deviations, themselves an overestimate because partial sums are usually far below ``M``. It is
below the rigorous bound ``(n - 1) eps32 M`` (two sides) for ``n >= 11`` and at or above it for
``n <= 10``, so short sums get their worst case. A comparison with a float64 reference (one
rounded side) has more room under the same tolerance.

What the rule cannot see: the terms are often sums themselves (a convolution's kernel gradient
sums over every output position of a row), and ``M`` computed from per-row terms is smaller than
the sum over the finest terms when those cancel inside a row. Count the finest terms in ``n``
(rows x positions for a convolution); over 60 random LeNet-5 problems the largest error was a
fifth of the tolerance (``tests/test_potential.py``).

A tolerance from this rule is tight enough to see a real bug: one dropped row out of ``n``
changes an entry by about ``M / n``, ``1 / (c eps32 n^1.5)`` = ``2.8e6 / n^1.5`` times the
tolerance (20,000 for 25 rows, 50 for 1,437). Tests that use the rule also show that they fail
on such a bug.

Example:
    >>> import numpy as np
    >>> terms = np.array([100.0, -99.9, 0.007], np.float32)
    >>> a = np.float32(terms[0] + terms[1]) + terms[2]
    >>> b = terms[0] + np.float32(terms[1] + terms[2])
    >>> assert_sums_close(a, b, magnitude=np.abs(terms).sum(), num_terms=3)
    >>> bool(sum_tolerance(np.abs(terms).sum(), 3) < 1e-3)
    True
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "C",
    "EPS32",
    "assert_sums_close",
    "log_density_magnitude",
    "mixture_nll_magnitude",
    "per_row_magnitudes",
    "assert_same_draw",
    "potential_magnitudes",
    "prior_magnitude",
    "sum_tolerance",
]

EPS32 = float(np.finfo(np.float32).eps)
C = 3.0


def sum_tolerance(magnitude: Any, num_terms: Any, c: float = C) -> np.ndarray:
    """``c * sqrt(num_terms) * eps32 * magnitude`` (float64), the tolerance of the rule."""
    n = np.asarray(num_terms, np.float64)
    if np.any(n < 1):
        raise ValueError(f"num_terms must be >= 1, got {num_terms!r}")
    return c * np.sqrt(n) * EPS32 * np.abs(np.asarray(magnitude, np.float64))


def _check(actual: Any, expected: Any, magnitude: Any, num_terms: Any, c: float, what: str):
    a = np.asarray(actual, np.float64)
    b = np.asarray(expected, np.float64)
    tol = np.broadcast_to(
        sum_tolerance(magnitude, num_terms, c), np.broadcast_shapes(a.shape, b.shape)
    )
    err = np.abs(a - b)
    bad = ~(err <= tol)  # a NaN on either side fails
    if not bad.any():
        return
    ratio = np.where(tol > 0, err / np.where(tol > 0, tol, 1.0), np.inf)
    worst = np.unravel_index(np.argmax(np.where(np.isnan(ratio), np.inf, ratio)), ratio.shape)
    a_b = np.broadcast_to(a, tol.shape)
    b_b = np.broadcast_to(b, tol.shape)
    m_b = np.broadcast_to(np.asarray(magnitude, np.float64), tol.shape)
    raise AssertionError(
        f"{what or 'sums'}: {int(bad.sum())} of {bad.size} entries differ by more than "
        f"{c:g} * sqrt(n) * eps32 * (sum of |terms|); worst at {tuple(int(i) for i in worst)}: "
        f"{a_b[worst]!r} vs {b_b[worst]!r}, |diff| {err[worst]:.3g} > tol {tol[worst]:.3g} "
        f"(magnitude {m_b[worst]:.3g}, {ratio[worst]:.3g}x the tolerance)"
    )


def assert_same_draw(actual: Any, expected: Any, err_msg: str = "") -> None:
    """Two computations of one random draw (drawn flat and reshaped, or in its shape; jitted or
    eager) agree to within 4 ulps of their magnitude, in ``expected``'s dtype: bit for bit at
    XLA's default optimisation, while at the suite's level 0 (``conftest.py``) XLA:CPU rounds a
    vector loop's tail differently (1 ulp, one element in a thousand). No sums: not the rule
    above."""
    eps = float(jnp.finfo(jnp.result_type(expected)).eps)
    a, b = np.asarray(actual, np.float32), np.asarray(expected, np.float32)
    assert a.shape == b.shape, (err_msg, a.shape, b.shape)
    ulps = 4 * eps * max(1.0, float(np.max(np.abs(b), initial=0.0)))
    np.testing.assert_allclose(a, b, rtol=0, atol=ulps, err_msg=err_msg)


def assert_sums_close(
    actual: Any,
    expected: Any,
    magnitude: Any,
    num_terms: Any,
    *,
    c: float = C,
    what: str = "",
) -> None:
    """Assert ``|actual - expected| <= c * sqrt(num_terms) * eps32 * magnitude`` entrywise.

    ``magnitude`` (broadcast against the values) is, per entry, the sum of the absolute values of
    the summed terms; ``num_terms`` is how many were summed (a number, or an array that
    broadcasts). With dicts (parameter pytrees), the keys must match and ``magnitude`` is a dict
    too; ``num_terms`` is a number or a dict with the same keys.
    """
    if isinstance(actual, Mapping):
        if set(actual) != set(expected) or set(actual) != set(magnitude):
            keys = [sorted(actual), sorted(expected), sorted(magnitude)]
            raise AssertionError(f"{what}: the keys differ: {keys}")
        for k in actual:
            n = num_terms[k] if isinstance(num_terms, Mapping) else num_terms
            _check(actual[k], expected[k], magnitude[k], n, c, f"{what}[{k}]" if what else k)
        return
    _check(actual, expected, magnitude, num_terms, c, what)


def per_row_magnitudes(
    fn: Callable[..., Any], params: Any, *rows: Any
) -> tuple[float, dict[str, np.ndarray]]:
    """``sum_i |f_i|`` and, per parameter entry, ``sum_i |d f_i / d params|`` (float64).

    ``f_i = fn(params, *(r[i : i + 1] for r in rows))`` is row ``i``'s scalar term: the per-row
    gradients come from ``jax.vmap`` of ``jax.value_and_grad`` over the rows.
    """

    def one(p: Any, *row: Any) -> Any:
        return fn(p, *(r[None] for r in row))

    values, grads = jax.jit(jax.vmap(jax.value_and_grad(one), in_axes=(None,) + (0,) * len(rows)))(
        params, *(jnp.asarray(r) for r in rows)
    )
    value_mag = float(np.sum(np.abs(np.asarray(values, np.float64))))
    grad_mag = jax.tree.map(lambda g: np.sum(np.abs(np.asarray(g, np.float64)), axis=0), grads)
    return value_mag, grad_mag


def prior_magnitude(model: Any, params: Any, x: Any) -> float:
    """``sum |log p(w_j)|`` over the scalar parameters of a factorised prior (constrained
    ``params``): the terms that :meth:`bnn_ppl.BNN.log_prior` adds up. A site whose density
    does not factorise into scalars counts as one term (its ``|log p|``)."""
    import numpyro.distributions as dist

    total = 0.0
    for k, d in model.conditional_sites(x, params).items():
        while isinstance(d, dist.Independent):
            d = d.base_dist
        total += float(np.sum(np.abs(np.asarray(d.log_prob(params[k]), np.float64))))
    return total


def potential_magnitudes(pot: Any, u: Any, x: Any, y: Any) -> tuple[float, dict[str, np.ndarray]]:
    """Magnitudes of a :class:`~bnn_ppl.inference.FullBatchPotential`'s value and gradient.

    The potential of unconstrained ``u`` is ``sum_i r_i(u) + q(u)``: ``r_i`` the tempered
    negative log-likelihood of row ``i`` of ``(x, y)``, ``q`` the tempered negative log prior
    and log-Jacobian. Returns ``sum_i |r_i| + sum |prior terms| + |log-Jacobian|`` and, per
    gradient entry, ``sum_i |grad r_i| + |grad q|``.
    """
    model = pot.model

    def row(v: Any, xi: Any, yi: Any) -> Any:
        params, _ = pot.constrain(v)
        return -model.likelihood_scale * model.log_likelihood(params, xi, yi)[0]

    def rest(v: Any) -> Any:
        params, log_det = pot.constrain(v)
        return -(model.prior_scale * model.log_prior(params, x) + log_det)

    value_mag, grad_mag = per_row_magnitudes(row, u, x, y)
    params, log_det = pot.constrain(u)
    value_mag += model.prior_scale * prior_magnitude(model, params, x) + abs(float(log_det))
    rest_grad = jax.jit(jax.grad(rest))(u)
    grad_mag = jax.tree.map(lambda m, g: m + np.abs(np.asarray(g, np.float64)), grad_mag, rest_grad)
    return value_mag, grad_mag


def log_density_magnitude(mean: Any, scale: Any, y: Any, y_scale: Any = 1.0) -> np.ndarray:
    """Per entry, the sum of |terms| of a Gaussian log-density in standardised units plus the
    unit change: 0.5 log(2 pi), |log scale|, |log y_scale| and, the square expanded,
    0.5 (|y| + |mean|)^2 / scale^2 (it bounds y^2, 2 y mean and mean^2, which cancel)."""
    scale = np.asarray(scale, np.float64)
    return (
        0.5 * np.log(2 * np.pi)
        + np.abs(np.log(scale))
        + np.abs(np.log(y_scale))
        + 0.5 * (np.abs(y) + np.abs(mean)) ** 2 / scale**2
    )


def mixture_nll_magnitude(means: Any, scales: Any, y: Any, y_scale: Any = 1.0) -> float:
    """Sum of |terms| of :func:`bnn_ppl.metrics.mixture_nll` (``means``/``scales`` of shape
    ``(S, n)`` or ``(S, n, d)``), to first order: per row, log S plus the components'
    log-density terms weighted by their share of the mixture density (the weights with which
    ``logsumexp`` passes on each component's error), averaged over the rows."""
    from scipy import stats
    from scipy.special import logsumexp

    shape = np.shape(means)
    m = np.broadcast_to(log_density_magnitude(means, scales, y, y_scale), shape)
    per_component = m.reshape(shape[0], shape[1], -1).sum(axis=2)  # (S, n)
    logc = stats.norm.logpdf(y, means, scales).reshape(shape[0], shape[1], -1).sum(axis=2)
    weights = np.exp(logc - logsumexp(logc, axis=0))
    return float((np.log(shape[0]) + (weights * per_component).sum(axis=0)).mean())

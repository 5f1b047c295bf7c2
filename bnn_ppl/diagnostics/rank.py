"""Rank-normalised split R-hat and bulk ESS (Vehtari et al. 2021), vectorised over quantities.

Example:
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(size=(4, 200, 3))
    >>> x[0] += 2.0                          # one chain elsewhere
    >>> rhat, ess = rhat_bulk_ess(x)
    >>> bool(np.all(rhat > 1.1)), ess.shape
    (True, (3,))
"""

# Notes:
#
# ArviZ computes these one quantity at a time, ranking the draws three times (bulk R-hat, folded
# R-hat, bulk ESS) and running Geyer's sequences in a Python loop. A reference run checks
# thousands of test predictions after every segment (3,600 probabilities on digits), so that is
# most of a check's time: ~12 s at 1,000 draws per chain on 2 cores. :func:`rhat_bulk_ess`
# computes the same two figures for every quantity at once - one ranking for the bulk z-scores,
# shared by R-hat and ESS, one for the folded ones, the autocovariances by FFT along the draws and
# Geyer's initial positive and monotone sequences as array operations - in column chunks, so
# memory stays bounded. It follows ArviZ's code (``arviz_stats.base.diagnostics``, ArviZ 1.3)
# step for step, including its edge cases: the middle draw of an odd-length chain is
# left out of the split; a quantity constant over every draw has R-hat NaN and ESS equal to the
# number of draws in the split; tied values take their average rank; a single chain has no
# R-hat (NaN). ``tests/test_rank_diagnostics.py`` checks it against ArviZ on autocorrelated,
# anticorrelated, shifted, tied and constant quantities.

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import fft, special, stats

__all__ = ["rhat_bulk_ess"]

BLOM = 3 / 8  # the fractional offset of the rank back-transformation (Blom 1958), as ArviZ


def _split(a: np.ndarray) -> np.ndarray:
    """``(chains, draws, q)`` -> ``(2 chains, draws // 2, q)``: each chain's halves."""
    half = a.shape[1] // 2
    return np.concatenate([a[:, :half], a[:, a.shape[1] - half :]], axis=0)


def _z_scale(a: np.ndarray) -> np.ndarray:
    """Normal scores of the pooled ranks of each quantity (average ranks for ties)."""
    m, n, q = a.shape
    ranks = stats.rankdata(a.reshape(m * n, q), method="average", axis=0)
    return special.ndtri((ranks - BLOM) / (m * n - 2 * BLOM + 1)).reshape(m, n, q)


def _rhat(z: np.ndarray) -> np.ndarray:
    n = z.shape[1]
    between = n * np.var(z.mean(axis=1), axis=0, ddof=1)
    within = np.var(z, axis=1, ddof=1).mean(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.sqrt((between / within + n - 1) / n)


def _ess(z: np.ndarray) -> np.ndarray:
    """Bulk ESS of z-scores ``(m, n, q)``: Geyer's initial positive then monotone sequence."""
    m, n, q = z.shape
    centred = z - z.mean(axis=1, keepdims=True)
    size = fft.next_fast_len(2 * n)
    spectrum = np.fft.rfft(centred, n=size, axis=1)
    acov = np.fft.irfft(spectrum * np.conjugate(spectrum), n=size, axis=1)[:, :n] / n
    mean_var = acov[:, 0].mean(axis=0) * n / (n - 1.0)
    var_plus = mean_var * (n - 1.0) / n
    if m > 1:
        var_plus = var_plus + np.var(z.mean(axis=1), axis=0, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = 1.0 - (mean_var - acov.mean(axis=0)) / var_plus  # (n, q): every lag
    rho[0] = 1.0
    # pairs (rho[2k], rho[2k+1]); ArviZ looks at pair k >= 1 while 2k - 1 < n - 3 and every
    # earlier pair's sum is positive, so the last pair it looks at is the first whose sum is
    # <= 0, or the last one allowed, k_max
    k_max = max(0, (n - 3) // 2)
    sums = rho[0 : 2 * k_max + 1 : 2] + rho[1 : 2 * k_max + 2 : 2]  # (k_max + 1, q)
    nonpositive = sums <= 0.0
    first = np.where(nonpositive.any(axis=0), nonpositive.argmax(axis=0), k_max)
    last = np.minimum(first, k_max)  # the last pair looked at
    # the sum over pairs before `last`, made monotone (a pair above the one before it takes
    # its value: a running minimum)
    monotone = np.minimum.accumulate(sums, axis=0)
    before = np.arange(k_max + 1)[:, None] < last[None, :]
    body = np.where(before, monotone, 0.0).sum(axis=0)
    cols = np.arange(q)
    even = rho[2 * last, cols]
    odd = rho[np.minimum(2 * last + 1, n - 1), cols]
    extra = np.where((last == 0) | (even + odd >= 0.0) | (even > 0.0), even, 0.0)
    tau = -1.0 + 2.0 * body + extra
    total = m * n
    tau = np.maximum(tau, 1.0 / np.log10(total))
    ess = total / tau
    constant = (z.max(axis=(0, 1)) - z.min(axis=(0, 1))) < np.finfo(float).resolution
    ess = np.where(constant, float(total), ess)
    return np.where(np.isnan(rho).any(axis=0) & ~constant, np.nan, ess)


def rhat_bulk_ess(values: Any, *, chunk: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """Rank-normalised split R-hat (the larger of the bulk and folded ones) and bulk ESS of
    ``(chains, draws, ...)`` values, each of the quantities' shape; ``chunk`` quantities are
    done at a time. The caller checks the input (at least 4 draws, finite values).

    Example:
        >>> import numpy as np
        >>> rhat, ess = rhat_bulk_ess(np.random.default_rng(1).normal(size=(4, 500, 2, 2)))
        >>> rhat.shape, bool(np.all(np.abs(rhat - 1) < 0.02)), bool(np.all(ess > 1000))
        ((2, 2), True, True)
    """
    a = np.asarray(values, dtype=np.float64)
    shape = a.shape[2:]
    flat = a.reshape(a.shape[0], a.shape[1], -1)
    rhat = np.empty(flat.shape[-1])
    ess = np.empty(flat.shape[-1])
    for start in range(0, flat.shape[-1], chunk):
        cols = slice(start, start + chunk)
        split = _split(flat[..., cols])
        z = _z_scale(split)
        bulk = _rhat(z)
        folded = _rhat(_z_scale(np.abs(split - np.median(split, axis=(0, 1)))))
        # (ArviZ: no R-hat from a single chain, though its halves would give one)
        rhat[cols] = np.where(folded > bulk, folded, bulk) if a.shape[0] > 1 else np.nan
        ess[cols] = _ess(z)
    return rhat.reshape(shape), ess.reshape(shape)

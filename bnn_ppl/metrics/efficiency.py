"""How much does a sampler's run buy? Effective samples per gradient and within-chain spread.

Samplers that target one posterior are compared (as in the ATMC paper's Table 1 and Izmailov
et al.) by the effective sample size of a test quantity per unit of work and by how widely each
chain spreads, against a reference sampler (full-batch HMC):

* ``ess``: the median over test inputs of the effective sample size (NumPyro's, over the
  chains) of the predicted probability of the true class; ``ess_per_kgrad``: per 1,000
  full-batch gradients (SG-MCMC: steps x batch / rows);
* ``weight_var`` / ``function_var``: the variance over draws within a chain, averaged over all
  weights (weight space; permutation-invariant) or over test inputs and classes of the
  predicted probabilities (function space), averaged over chains; ``*_ratio``: relative to the
  reference's. For the reference itself the ratio is its first chain's against its other
  chains', the noise floor of the ratio (NaN with one chain).

:func:`sampler_table` puts these beside the closeness to the reference
(:mod:`bnn_ppl.metrics.comparison`) for every sampler: the shape of the ATMC paper's Table 1.

Example:
    >>> import numpy as np
    >>> from bnn_ppl.metrics.efficiency import sampler_efficiency
    >>> rng = np.random.default_rng(0)
    >>> probs = rng.dirichlet([1.0, 1.0], size=(2, 50, 3))          # 2 chains, 50 draws, 3 rows
    >>> draws = {"w": rng.normal(size=(2, 50, 4))}
    >>> m = sampler_efficiency(probs, draws, np.array([0, 1, 0]), gradients=1000.0)
    >>> sorted(m)
    ['ess', 'ess_per_kgrad', 'function_var', 'function_var_ratio', 'gradients', 'weight_var',
     'weight_var_ratio']
    >>> bool(0.5 < m["weight_var_ratio"] < 2.0)
    True
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from bnn_ppl.validation import InputValueError

__all__ = ["chain_variances", "sampler_efficiency", "sampler_table"]


def chain_variances(probs: Any, samples: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """Per chain: the variance over draws averaged over all weights of ``samples`` (each
    ``(chain, draw, ...)``), and over test inputs and classes of ``probs`` ``(chain, draw, n,
    K)``; float64.

    Raises:
        ValueError: fewer than two draws per chain.
    """
    probs = np.asarray(probs, np.float64)
    if probs.ndim < 3 or probs.shape[1] < 2:
        raise InputValueError(
            f"probs must be (chain, draw, n, K) with at least 2 draws, got shape {probs.shape}."
        )
    w = np.concatenate(
        [np.var(np.asarray(a, np.float64), axis=1, ddof=1).reshape(len(a), -1)
         for a in samples.values()], axis=1,
    ).mean(1)  # fmt: skip
    f = np.var(probs, axis=1, ddof=1).reshape(len(probs), -1).mean(1)
    return w, f


def sampler_efficiency(
    probs: Any,
    samples: Mapping[str, Any],
    labels: Any,
    gradients: float,
    reference: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """ESS, ESS per 1,000 gradients and within-chain variances (see the module docstring).

    Args:
        probs: per-draw test probabilities ``(chain, draw, n, K)``.
        samples: site -> draws ``(chain, draw, ...)``.
        labels: test labels ``(n,)``.
        gradients: the run's work in full-batch gradients.
        reference: the reference sampler's result of this function (its ``weight_var`` and
            ``function_var``); ``None`` for the reference itself (ratios: chain 1 vs the rest).
    """
    from numpyro.diagnostics import effective_sample_size

    probs = np.asarray(probs, np.float64)
    labels = np.asarray(labels)
    w, f = chain_variances(probs, samples)  # checks the shapes first
    p_true = np.take_along_axis(probs, labels[None, None, :, None], axis=-1)[..., 0]
    ess = float(np.median(effective_sample_size(p_true)))
    m = {"gradients": float(gradients), "ess": ess, "ess_per_kgrad": 1000 * ess / gradients,
         "weight_var": float(w.mean()), "function_var": float(f.mean())}  # fmt: skip
    if reference is not None:
        m["weight_var_ratio"] = m["weight_var"] / reference["weight_var"]
        m["function_var_ratio"] = m["function_var"] / reference["function_var"]
    elif len(w) > 1:
        m["weight_var_ratio"] = float(w[0] / w[1:].mean())
        m["function_var_ratio"] = float(f[0] / f[1:].mean())
    else:
        m["weight_var_ratio"] = m["function_var_ratio"] = math.nan
    return m


def sampler_table(
    probs: Mapping[str, Any],
    samples: Mapping[str, Mapping[str, Any]],
    labels: Any,
    gradients: Mapping[str, float],
    *,
    reference: str,
) -> dict[str, dict[str, float]]:
    """Per sampler: the test metrics of its BMA and of single draws
    (:func:`~bnn_ppl.metrics.comparison.single_draw_metrics`), agreement and TV of its BMA with
    the reference's (the reference's own row: its first chain against its other chains, the
    :func:`~bnn_ppl.metrics.comparison.noise_floor`; NaN with one chain) and
    :func:`sampler_efficiency` relative to the reference.

    Args:
        probs: sampler -> test probabilities ``(chain, draw, n, K)``.
        samples: sampler -> site -> draws ``(chain, draw, ...)``.
        labels: test labels ``(n,)``.
        gradients: sampler -> its work in full-batch gradients.
        reference: the reference sampler (a key of ``probs``).
    """
    from bnn_ppl.metrics.comparison import (
        compare_to_reference,
        noise_floor,
        single_draw_metrics,
    )

    flat = {m: np.asarray(p).reshape(-1, *np.shape(p)[2:]) for m, p in probs.items()}
    task = "classification"
    results = compare_to_reference(flat, labels, task=task, reference=reference)
    for m, p in flat.items():
        results[m] |= single_draw_metrics(p, labels, task=task)
    floor = {"agreement": math.nan, "tv": math.nan}
    if len(probs[reference]) > 1:
        floor = noise_floor(probs[reference], labels, task=task)
    results[reference] |= {k: floor[k] for k in ("agreement", "tv")}
    ref = sampler_efficiency(probs[reference], samples[reference], labels, gradients[reference])
    for m in probs:
        results[m] |= ref if m == reference else sampler_efficiency(
            probs[m], samples[m], labels, gradients[m], ref
        )
    return results

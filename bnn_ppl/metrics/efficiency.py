"""How much does a sampler's run buy? Effective samples per gradient and within-chain spread."""

# Notes:
#
# Samplers that target one posterior are compared (as in the ATMC paper's Table 1 and Izmailov
# et al.) by the effective sample size of a test quantity per unit of work and by how widely each
# chain spreads, against a reference sampler (full-batch HMC):
#
# * ``ess``: the median over test inputs of the effective sample size (NumPyro's, over the
#   chains) of the predicted probability of the true class; ``ess_per_kgrad``: per 1,000
#   full-batch gradients (SG-MCMC: steps x batch / rows);
# * ``weight_var`` / ``function_var``: the variance over draws within a chain, averaged over all
#   weights (weight space; permutation-invariant) or over test inputs and classes of the
#   predicted probabilities (function space), averaged over chains; ``*_ratio``: relative to the
#   reference's. For the reference itself the ratio is its first chain's against its other
#   chains', the noise floor of the ratio (NaN with one chain).
#
# :func:`sampler_table` puts these beside the closeness to the reference
# (:mod:`bnn_ppl.metrics.comparison`) for every sampler: the shape of the ATMC paper's Table 1;
# :func:`posterior_sampler_table` computes it from fitted Posteriors.

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from bnn_ppl.metrics.comparison import (
    compare_to_reference,
    noise_floor,
    posterior_predictions,
    single_draw_metrics,
)
from bnn_ppl.validation import InputValueError

__all__ = [
    "SAMPLER_COLUMNS",
    "TABLE1_COLUMNS",
    "chain_variances",
    "full_batch_gradients",
    "posterior_sampler_table",
    "sampler_efficiency",
    "sampler_table",
    "sgmcmc_gradients_per_draw",
]


TABLE1_COLUMNS = {
    "single_accuracy": "single acc",
    "single_nll": "single NLL",
    "accuracy": "BMA acc",
    "nll": "BMA NLL",
    "agreement": "agree",
    "tv": "TV",
}
"""The ATMC paper's Table 1 columns of :func:`sampler_table` (key -> header), for
:func:`~bnn_ppl.metrics.comparison.format_table`."""
SAMPLER_COLUMNS = {
    "step_size": "h0",
    "gradients": "grads",
    "ess": "ESS",
    "ess_per_kgrad": "ESS/kgrad",
    "weight_var_ratio": "w var",
    "function_var_ratio": "f var",
}
"""The sampler columns of :func:`sampler_table` (``step_size`` is the caller's to add)."""


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


def sgmcmc_gradients_per_draw(cycle_length: int, batch_size: int | None, num_train: int) -> float:
    """An SG-MCMC draw's cost per chain in full-batch gradients: a cycle of ``cycle_length``
    steps, each one gradient over ``batch_size`` of ``num_train`` rows (``None``: all).

    Example:
        >>> sgmcmc_gradients_per_draw(100, 128, 1280)
        10.0
    """
    return cycle_length * (batch_size or num_train) / num_train


def full_batch_gradients(posterior: Any, num_train: int) -> float:
    """The work of a fitted Markov-chain Posterior's sampling phase in full-batch gradients:
    HMC/NUTS: its leapfrog steps (``sample_stats["n_steps"]``, all chains); SG-MCMC: steps x
    batch rows / ``num_train`` (``num_samples`` cycles of ``cycle_length`` steps per chain).

    Example:
        >>> from bnn_ppl.posterior import Posterior
        >>> sg = Posterior("sgld", {"w": np.zeros((2, 3))}, config={"num_samples": 3,
        ...                "cycle_length": 10, "num_chains": 2, "batch_size": 5})
        >>> full_batch_gradients(sg, num_train=100)  # 3 x 10 steps x 2 chains x 5 / 100 rows
        3.0
    """
    c = posterior.config
    if "n_steps" in posterior.sample_stats:
        return float(np.sum(posterior.sample_stats["n_steps"]))
    if not {"num_samples", "cycle_length", "num_chains", "batch_size"} <= set(c):
        raise InputValueError(
            f"full_batch_gradients needs an HMC/NUTS Posterior (sample_stats['n_steps']) or an "
            f"SG-MCMC one (config: num_samples, cycle_length, num_chains, batch_size); this "
            f"{posterior.method} Posterior has neither."
        )
    per_draw = sgmcmc_gradients_per_draw(c["cycle_length"], c["batch_size"], num_train)
    return c["num_samples"] * c["num_chains"] * per_draw


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


def posterior_sampler_table(
    posteriors: Mapping[str, Any], num_train: int, *, reference: str
) -> dict[str, dict[str, float]]:
    """:func:`sampler_table` of fitted Markov-chain :class:`~bnn_ppl.Posterior` objects (fitted
    with test data, as :func:`~bnn_ppl.inference.fit` does): their per-chain test
    probabilities, draws and test labels, and the work :func:`full_batch_gradients` counts on
    ``num_train`` training rows.

    Example:
        >>> from bnn_ppl.posterior import Posterior
        >>> rng = np.random.default_rng(0)
        >>> def post(method, **kw):
        ...     return Posterior(method, {"w": rng.normal(size=(2, 20, 3))},
        ...                      predictions={"probs": rng.dirichlet([1, 1], size=(2, 20, 4))},
        ...                      observed={"y_test": np.array([0, 1, 1, 0])}, **kw)
        >>> table = posterior_sampler_table(
        ...     {"HMC": post("hmc", sample_stats={"n_steps": np.full((2, 20), 8)}),
        ...      "SGLD": post("sgld", config={"num_samples": 20, "cycle_length": 5,
        ...                                   "num_chains": 2, "batch_size": 10})},
        ...     num_train=100, reference="HMC")
        >>> table["HMC"]["gradients"], table["SGLD"]["gradients"]
        (320.0, 20.0)
    """
    if reference not in posteriors:
        raise InputValueError(f"reference {reference!r} is not one of {sorted(posteriors)}.")
    return sampler_table(
        {m: posterior_predictions(p, chains=True) for m, p in posteriors.items()},
        {m: p.samples for m, p in posteriors.items()},
        posteriors[reference].observed["y_test"],
        {m: full_batch_gradients(p, num_train) for m, p in posteriors.items()},
        reference=reference,
    )

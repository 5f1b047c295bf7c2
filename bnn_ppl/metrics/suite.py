"""The metric suite of a run: the test metrics of the Bayesian model average of per-draw
predictions of any predictive type (the average is :func:`bnn_ppl.model_average.bma`), and the
reshaping of per-draw predictions they need.
"""

# Notes:
#
# Used by run folders (:mod:`bnn_ppl.runs`), ``bnn-ppl evaluate``/``compare`` and the examples.

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from bnn_ppl import metrics as _metrics
from bnn_ppl.likelihoods import (
    GaussianPrediction,
    PoissonPrediction,
    Prediction,
    StudentTPrediction,
    prediction_fields,
    prediction_from_fields,
)
from bnn_ppl.metrics import counts, regression
from bnn_ppl.model_average import bma, predictive_variance
from bnn_ppl.validation import InputValueError

__all__ = ["flat_draws", "per_chain", "predictive_metrics", "prefix_metrics"]


def _check_finite(fields: dict[str, np.ndarray]) -> None:
    if not all(np.all(np.isfinite(v)) for v in fields.values()):
        raise InputValueError(
            "the predictions hold NaN/inf values: the draws diverged, so the metrics are "
            "undefined (lower the step size or learning rate, or use a less extreme prior or "
            "temperature)."
        )


def flat_draws(predictions: Any, chains: bool) -> Prediction:
    """Per-draw predictions with the chain axis (if any) merged into the draw axis."""
    if not chains:
        return predictions

    def merge(a: Any) -> np.ndarray:
        a = np.asarray(a)
        return a.reshape(a.shape[0] * a.shape[1], *a.shape[2:])

    fields = {k: merge(v) for k, v in prediction_fields(predictions).items()}
    return prediction_from_fields(fields)


def per_chain(predictions: Any) -> list[Prediction]:
    """The per-draw predictions of each chain, from ``(chain, draw, ...)`` arrays."""
    fields = {k: list(np.asarray(v)) for k, v in prediction_fields(predictions).items()}
    return [
        prediction_from_fields(dict(zip(fields, one, strict=True)))
        for one in zip(*fields.values(), strict=True)
    ]


def predictive_metrics(
    predictions: Prediction,
    targets: np.ndarray,
    *,
    task: str,
    y_std: float = 1.0,
) -> dict[str, float]:
    """Test metrics of the Bayesian model average of per-draw predictions ``(draw, n, ...)``.

    Classification (Categorical, Bernoulli): accuracy, NLL, ECE (15 equal-width bins) and
    Brier score of the averaged probabilities. Gaussian and Student-t: RMSE of the BMA mean
    and NLL of the BMA (the equal-weight mixture of the draws), both in the targets' original
    units (``y_std``), and ``mean_sq_std_residual``, the mean of (y - m)^2 / s^2 with m and s
    the BMA's moment-matched mean and sd: 1 when the predictive's width is right on average,
    below 1 too wide, above 1 too narrow. Poisson: RMSE of the BMA rate and NLL of the Poisson
    mixture.

    Raises:
        ValueError: non-finite predictions (a diverged sampler), or predictions that do not
            fit the targets.

    Example:
        >>> import numpy as np
        >>> from bnn_ppl.metrics.suite import predictive_metrics
        >>> probs = np.full((3, 4, 2), 0.5)                       # 3 draws, 4 test rows, 2 classes
        >>> m = predictive_metrics(probs, np.array([0, 1, 1, 0]), task="classification")
        >>> sorted(m), m["accuracy"]
        (['accuracy', 'brier', 'ece', 'nll'], 0.5)
    """
    fields = {k: np.asarray(v) for k, v in prediction_fields(predictions).items()}
    _check_finite(fields)
    if isinstance(predictions, GaussianPrediction | StudentTPrediction):
        loc, scale = fields.get("mean", fields.get("loc")), fields["scale"]
        if isinstance(predictions, StudentTPrediction):
            nll = _metrics.student_t_mixture_nll(loc, scale, fields["df"], targets, y_std)
        else:
            nll = _metrics.mixture_nll(loc, scale, targets, y_scale=y_std)
        avg = bma(predictions)
        rmse = _metrics.rmse(avg.mean, targets, y_scale=y_std)
        z2 = np.mean((np.asarray(targets) - np.asarray(avg.mean)) ** 2 / np.asarray(avg.scale) ** 2)
        return {"rmse": float(rmse), "nll": float(nll), "mean_sq_std_residual": float(z2)}
    if isinstance(predictions, PoissonPrediction):
        return {
            "rmse": float(_metrics.rmse(bma(predictions).rate, targets)),
            "nll": float(_metrics.poisson_mixture_nll(fields["rate"], targets)),
        }
    avg = bma(predictions)
    if task != "classification":
        raise InputValueError(f"probabilities given for a {task} task.")
    return {
        "accuracy": float(_metrics.accuracy(avg, targets)),
        "nll": float(_metrics.nll(avg, targets)),
        "ece": float(_metrics.ece(avg, targets)),
        "brier": float(_metrics.brier(avg, targets)),
    }


@partial(jax.jit, static_argnums=0)
def _draw_log_densities(kind: type, fields: dict[str, Any], y: Any) -> Any:
    """Each draw's log density at the targets, ``(chain, draw, n)`` (summed over output
    dimensions): the terms whose ``logsumexp`` over draws the mixture NLLs take (the same
    functions). ``kind``: the prediction's type."""
    if kind is PoissonPrediction:
        logp = counts._poisson_logpmf(y[None], fields["rate"])
    elif kind is StudentTPrediction:
        logp = regression._student_t_logpdf(
            y[None], fields["loc"], fields["scale"], fields["df"]
        )
    else:
        logp = regression._gaussian_logpdf(y[None], fields["mean"], fields["scale"])
    return logp if y.ndim == 1 else jnp.sum(logp, axis=-1)


def prefix_metrics(
    predictions: Prediction,
    targets: np.ndarray,
    draws: list[int],
    *,
    task: str,
    y_std: float = 1.0,
) -> list[dict[str, float]]:
    """:func:`predictive_metrics` of the BMA of the first ``t`` draws of every chain, for each
    ``t`` in ``draws`` (increasing), from per-draw predictions ``(chain, draw, n, ...)``.

    The same metrics as :func:`predictive_metrics` on ``predictions[:, :t]``, computed in one
    pass over the draws and with programs of one shape: the BMA's probabilities, means or rates
    are running float64 sums on the host, and a mixture's NLL is a running ``logsumexp`` of
    each draw's log density (computed once for all draws). Evaluating
    :func:`predictive_metrics` on every prefix compiles its programs once per prefix length:
    for the ~100 points of a 200-draw run's ``progress.jsonl`` that took 8 s (digits) and 47 s
    (a regression) of compilation on 2 CPU cores. The values equal :func:`predictive_metrics`'
    to float32 rounding (the sums are float64 here).

    Example:
        >>> import numpy as np
        >>> probs = np.stack([np.full((2, 3, 2), 0.5), np.full((2, 3, 2), 0.5)])  # 2 chains
        >>> probs[0, 1, :, 0] = 0.9; probs[0, 1, :, 1] = 0.1
        >>> [round(m["nll"], 4) for m in prefix_metrics(probs, np.zeros(3, int), [1, 2],
        ...                                             task="classification")]
        [0.6931, 0.5108]
    """
    from scipy.special import logsumexp

    fields = {k: np.asarray(v) for k, v in prediction_fields(predictions).items()}
    _check_finite(fields)
    y = np.asarray(targets)
    first = next(iter(fields.values()))
    chains = first.shape[0]
    out: list[dict[str, float]] = []
    if not isinstance(predictions, GaussianPrediction | StudentTPrediction | PoissonPrediction):
        probs, total, prev = fields["probs"], np.zeros(first.shape[2:], np.float64), 0
        for t in draws:
            total += probs[:, prev:t].sum(axis=(0, 1), dtype=np.float64)
            prev = t
            average = (total / (chains * t)).astype(probs.dtype)
            out.append(predictive_metrics(average[None], y, task=task))
        return out
    kind = type(predictions)
    location = fields[kind._fields[0]]  # the mean, location or rate: the BMA's mean
    logp = np.asarray(
        _draw_log_densities(kind, {k: jnp.asarray(v) for k, v in fields.items()}, jnp.asarray(y))
    )
    poisson = kind is PoissonPrediction  # (counts: no change of units)
    log_units = 0.0 if poisson else float(np.log(y_std)) * int(np.prod(y.shape[1:]))
    mean_sum = np.zeros(first.shape[2:], np.float64)
    log_sum = np.full(logp.shape[2:], -np.inf)
    # the mixture's second moment about the first draw's mean c, E[(m - c)^2 + s^2] (not
    # Poisson's; about c: no cancellation for targets far from 0): each draw's in the
    # predictions' precision, summed in float64 like the mean (the same sums whatever the points)
    shift = location[0, 0]
    second = None
    if not poisson:
        second = (location - shift) ** 2 + predictive_variance(kind(*fields.values()))
    second_sum = np.zeros(first.shape[2:], np.float64)
    prev = 0
    for t in draws:
        mean_sum += location[:, prev:t].sum(axis=(0, 1), dtype=np.float64)
        log_sum = np.logaddexp(log_sum, logsumexp(logp[:, prev:t].astype(np.float64), axis=(0, 1)))
        if second is not None:
            second_sum += second[:, prev:t].sum(axis=(0, 1), dtype=np.float64)
        prev = t
        count = chains * t
        mean = (mean_sum / count).astype(location.dtype)
        rmse = _metrics.rmse(mean, y) if poisson else _metrics.rmse(mean, y, y_scale=y_std)
        nll = -float(np.mean(log_sum - np.log(count))) + log_units
        row = {"rmse": float(rmse), "nll": nll}
        if second is not None:
            mu = mean_sum / count
            var = second_sum / count - (mu - shift) ** 2
            row["mean_sq_std_residual"] = float(np.mean((y - mu) ** 2 / var))
        out.append(row)
    return out


"""The metric suite of a run: the test metrics of the Bayesian model average of per-draw
predictions of any predictive type (the average is :func:`bnn_ppl.model_average.bma`), and the
reshaping of per-draw predictions they need.

Used by run folders (:mod:`bnn_ppl.runs`), ``bnn-ppl evaluate``/``compare`` and the examples.

Example:
    >>> import numpy as np
    >>> from bnn_ppl.metrics.suite import predictive_metrics
    >>> probs = np.full((3, 4, 2), 0.5)                       # 3 draws, 4 test rows, 2 classes
    >>> m = predictive_metrics(probs, np.array([0, 1, 1, 0]), task="classification")
    >>> sorted(m), m["accuracy"]
    (['accuracy', 'brier', 'ece', 'nll'], 0.5)
"""

from __future__ import annotations

from typing import Any

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
from bnn_ppl.model_average import bma
from bnn_ppl.validation import InputValueError

__all__ = ["flat_draws", "per_chain", "predictive_metrics"]


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
    units (``y_std``). Poisson: RMSE of the BMA rate and NLL of the Poisson mixture.

    Raises:
        ValueError: non-finite predictions (a diverged sampler), or predictions that do not
            fit the targets.
    """
    fields = {k: np.asarray(v) for k, v in prediction_fields(predictions).items()}
    if not all(np.all(np.isfinite(v)) for v in fields.values()):
        raise InputValueError(
            "the predictions hold NaN/inf values: the draws diverged, so the metrics are "
            "undefined (lower the step size or learning rate, or use a less extreme prior or "
            "temperature)."
        )
    if isinstance(predictions, GaussianPrediction | StudentTPrediction):
        loc, scale = fields.get("mean", fields.get("loc")), fields["scale"]
        if isinstance(predictions, StudentTPrediction):
            nll = _metrics.student_t_mixture_nll(loc, scale, fields["df"], targets, y_std)
        else:
            nll = _metrics.mixture_nll(loc, scale, targets, y_scale=y_std)
        rmse = _metrics.rmse(bma(predictions).mean, targets, y_scale=y_std)
        return {"rmse": float(rmse), "nll": float(nll)}
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

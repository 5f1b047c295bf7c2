"""How close is each method's predictive to a reference's? One comparison table over methods."""

# Notes:
#
# Izmailov et al. (2021) judge approximate posteriors by how close their Bayesian model average
# (BMA) is to full-batch HMC's: the top-1 agreement and the total variation distance of the
# predicted class probabilities (for regression here: the RMSE between the BMA means and the mean
# 2-Wasserstein distance between the BMAs moment-matched to Gaussians, in the targets' original
# units). :func:`closeness` computes that for one pair of per-draw predictions;
# :func:`compare_to_reference` gives a whole table, each method's test metrics
# (:func:`~bnn_ppl.metrics.suite.predictive_metrics`) beside its closeness to the reference;
# :func:`noise_floor` compares the reference's first chain with its other chains, the Monte
# Carlo noise below which a difference between methods means nothing; :func:`single_draw_metrics`
# averages the metrics of single draws (what one sample, not the average, achieves);
# :func:`bma_draw` summarises per-draw predictions by their BMA as one draw (to compare like with
# like against a reference stored as its BMA only); and :func:`format_table` prints rows of metrics.
#
# Every function takes per-draw predictions ``(draw, n, ...)`` (probabilities or a predictive
# NamedTuple, as :func:`bnn_ppl.predict` returns them); :func:`noise_floor` takes them with a
# leading chain axis (:func:`posterior_predictions` gives either from a fitted Posterior).

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from bnn_ppl import metrics as _metrics
from bnn_ppl.likelihoods import (
    GaussianPrediction,
    Prediction,
    prediction_fields,
    prediction_from_fields,
)
from bnn_ppl.metrics.suite import flat_draws, per_chain, predictive_metrics
from bnn_ppl.model_average import bma
from bnn_ppl.validation import InputValueError

__all__ = [
    "bma_draw",
    "closeness",
    "posterior_predictions",
    "compare_to_reference",
    "format_table",
    "noise_floor",
    "num_draws",
    "single_draw_metrics",
    "stored_predictions",
]

_CENTRE = ("probs", "mean", "loc", "rate")  # the field whose draw average is the BMA's centre


def posterior_predictions(posterior: Any, *, chains: bool = False) -> Prediction:
    """The per-draw test predictions a fitted :class:`~bnn_ppl.Posterior` holds, as a
    prediction ``(draw, n, ...)`` (``chains=True``: ``(chain, draw, n, ...)``).

    Raises:
        ValueError: the Posterior holds no test predictions (fit it with test data).
    """
    if not posterior.predictions:
        raise InputValueError(
            "the Posterior holds no test predictions; fit it with test data (a Dataset, or "
            "(x, y, x_test, y_test)) or call bnn_ppl.predictive.attach_data(posterior, ...)."
        )
    pred = prediction_from_fields(dict(posterior.predictions))
    return pred if chains else flat_draws(pred, True)


def stored_predictions(arrays: Mapping[str, Any], *, chains: bool = False) -> Prediction:
    """A reference stored as its BMA (the arrays of an ``examples/references`` ``.npz``) as one
    draw ``(1, n, ...)``: class probabilities ``probs``, or a :class:`GaussianPrediction` of
    ``mean`` and ``scale``. ``chains=True``: each chain's BMA ``(chain, 1, n, ...)`` from
    ``chain_probs`` or ``chain_mean`` and ``chain_scale``, for :func:`noise_floor`.

    Raises:
        ValueError: the arrays hold neither predictive (or, with ``chains``, no per-chain BMAs).

    Example:
        >>> import numpy as np
        >>> stored_predictions({"mean": np.zeros(3), "scale": np.ones(3)}).mean.shape
        (1, 3)
    """
    prefix, axis = ("chain_", 1) if chains else ("", 0)  # the draw axis to add
    probs, mean, scale = (prefix + k for k in ("probs", "mean", "scale"))
    if probs in arrays:
        return np.expand_dims(np.asarray(arrays[probs]), axis)
    if mean not in arrays or scale not in arrays:
        raise InputValueError(
            f"the stored arrays {sorted(arrays)} hold no {probs} or {mean}; pass the "
            "arrays of a reference .npz (examples/reference.py writes them)."
        )
    return GaussianPrediction(*(np.expand_dims(np.asarray(arrays[k]), axis) for k in (mean, scale)))


def num_draws(predictions: Prediction) -> int:
    """The number of draws of per-draw predictions ``(draw, n, ...)`` (any predictive type).

    Example:
        >>> import numpy as np
        >>> from bnn_ppl.likelihoods import GaussianPrediction
        >>> num_draws(GaussianPrediction(np.zeros((5, 3)), np.ones((5, 3))))   # not len(): 2
        5
    """
    return int(np.shape(next(iter(prediction_fields(predictions).values())))[0])


def bma_draw(predictions: Prediction, *, chains: bool = False) -> Prediction:
    """The Bayesian model average of per-draw predictions ``(draw, n, ...)`` as a single draw
    ``(1, n, ...)``: the averaged class probabilities, or (Gaussian, Student-t) the Gaussian
    moment-matched to the mixture of the draws (:func:`bnn_ppl.bma`). A reference stored as its
    BMA only (``examples/references``) is compared with methods summarised the same way: the
    metrics of classification are unchanged by it, a Gaussian NLL becomes that of the
    moment-matched Gaussian. ``chains=True``: ``(chain, draw, n, ...)`` in, each chain's BMA
    ``(chain, 1, n, ...)`` out.

    Example:
        >>> import numpy as np
        >>> from bnn_ppl.likelihoods import GaussianPrediction
        >>> one = bma_draw(GaussianPrediction(np.array([[0.0], [2.0]]), np.ones((2, 1))))
        >>> one.mean.tolist(), round(float(one.scale[0, 0]) ** 2, 4)   # variance 1 + 1
        ([[1.0]], 2.0)
    """
    if chains:
        split = [bma_draw(p) for p in per_chain(predictions)]
        fields = [prediction_fields(p) for p in split]
        return prediction_from_fields({k: np.stack([f[k] for f in fields]) for k in fields[0]})
    fields = prediction_fields(bma(predictions))
    return prediction_from_fields({k: np.asarray(v)[None] for k, v in fields.items()})


def _centre(predictions: Prediction) -> tuple[str, np.ndarray]:
    fields = prediction_fields(predictions)
    name = next(k for k in _CENTRE if k in fields)
    return name, np.asarray(fields[name]).mean(axis=0)


def closeness(
    predictions: Prediction, reference: Prediction, *, y_std: float = 1.0
) -> dict[str, float]:
    """How close the BMA of ``predictions`` is to the BMA of ``reference`` (both per draw).

    Class probabilities: ``agreement`` (fraction of equal top-1 predictions,
    :func:`~bnn_ppl.metrics.agreement`) and ``tv`` (mean total variation distance,
    :func:`~bnn_ppl.metrics.total_variation`). Otherwise ``rmse_vs_reference``: the RMSE between
    the two BMA means (locations, rates), times ``y_std`` (the targets' original units); and for
    Gaussian and Student-t predictions ``w2``: the mean over test rows of the 2-Wasserstein
    distance between the two BMAs moment-matched to Gaussians,
    ``sqrt((m1 - m2)^2 + (s1 - s2)^2)`` (:func:`~bnn_ppl.metrics.gaussian_w2`), times ``y_std``
    (inf where a Student-t mixture has infinite variance).

    Raises:
        ValueError: the two are of different predictive types or test sets.
    """
    (name, ours), (ref_name, ref) = _centre(predictions), _centre(reference)
    if name != ref_name or ours.shape != ref.shape:
        raise InputValueError(
            f"predictions ({name} {ours.shape}) and reference ({ref_name} {ref.shape}) are not "
            "predictions of one test set by one kind of model; compare like with like."
        )
    if name == "probs":
        return {
            "agreement": float(_metrics.agreement(ours, ref)),
            "tv": float(_metrics.total_variation(ours, ref)),
        }
    out = {"rmse_vs_reference": float(_metrics.rmse(ours, ref, y_scale=y_std))}
    a, b = bma(predictions), bma(reference)
    if isinstance(a, GaussianPrediction):  # Gaussian and Student-t BMAs (moment-matched)
        sa, sb = np.asarray(a.scale), np.asarray(b.scale)
        finite = np.all(np.isfinite(sa)) and np.all(np.isfinite(sb))
        w2 = _metrics.gaussian_w2(a.mean, sa, b.mean, sb, y_std) if finite else math.inf
        out["w2"] = float(w2)
    return out


def compare_to_reference(
    predictions: Mapping[str, Prediction],
    targets: Any,
    *,
    task: str,
    reference: str,
    y_std: float = 1.0,
) -> dict[str, dict[str, float]]:
    """Per method: its test metrics (:func:`~bnn_ppl.metrics.suite.predictive_metrics` of its
    BMA) and its :func:`closeness` to the BMA of ``predictions[reference]`` (the reference's
    own row: agreement 1, TV 0).

    Args:
        predictions: method -> per-draw test predictions ``(draw, n, ...)``.
        targets: test targets ``(n,)``.
        task: ``"classification"`` or ``"regression"``.
        reference: the method the others are compared with (a key of ``predictions``).
        y_std: the training targets' standard deviation (regression: original units).

    Raises:
        ValueError: ``reference`` is not one of the methods.

    Example:
        >>> import numpy as np
        >>> from bnn_ppl.metrics.comparison import compare_to_reference, format_table
        >>> labels = np.array([0, 1])
        >>> hmc = np.array([[[0.9, 0.1], [0.2, 0.8]]] * 2)  # 2 draws, 2 rows, 2 classes
        >>> svi = np.array([[[0.6, 0.4], [0.6, 0.4]]] * 3)
        >>> rows = compare_to_reference({"HMC": hmc, "SVI": svi}, labels, task="classification",
        ...                             reference="HMC")
        >>> print(format_table(rows, {"accuracy": "accuracy", "agreement": "agree", "tv": "TV"}))
        method      accuracy     agree        TV
        HMC           1.0000    1.0000    0.0000
        SVI           0.5000    0.5000    0.3500
    """
    if reference not in predictions:
        raise InputValueError(
            f"reference must be one of the methods {sorted(predictions)}, got {reference!r}."
        )
    ref = predictions[reference]
    return {
        method: predictive_metrics(p, targets, task=task, y_std=y_std)
        | closeness(p, ref, y_std=y_std)
        for method, p in predictions.items()
    }


def noise_floor(
    chains: Prediction, targets: Any, *, task: str, y_std: float = 1.0
) -> dict[str, float]:
    """The reference's first chain against its other chains: the test metrics of chain 1's
    BMA and its :func:`closeness` to the BMA of the rest. Two methods whose closeness to the
    reference differs by less than this cannot be ordered by it.

    Args:
        chains: per-draw predictions with a leading chain axis ``(chain, draw, n, ...)``.

    Raises:
        ValueError: fewer than two chains.
    """
    split = per_chain(chains)
    if len(split) < 2:
        raise InputValueError(
            f"the noise floor compares chains: got {len(split)} chain; run at least 2 chains."
        )
    others = {k: np.asarray(v)[1:] for k, v in prediction_fields(chains).items()}
    rest = flat_draws(prediction_from_fields(others), True)
    first = split[0]
    return predictive_metrics(first, targets, task=task, y_std=y_std) | closeness(
        first, rest, y_std=y_std
    )


def single_draw_metrics(
    predictions: Prediction, targets: Any, *, task: str, y_std: float = 1.0
) -> dict[str, float]:
    """The test metrics of each single draw's predictive, averaged over the draws, as
    ``single_<metric>``: what one posterior sample achieves (the BMA's metrics are
    :func:`~bnn_ppl.metrics.suite.predictive_metrics`)."""
    fields = {k: np.asarray(v) for k, v in prediction_fields(predictions).items()}
    num_draws = len(next(iter(fields.values())))
    per_draw = [
        predictive_metrics(
            prediction_from_fields({k: v[i : i + 1] for k, v in fields.items()}),
            targets,
            task=task,
            y_std=y_std,
        )
        for i in range(num_draws)
    ]
    return {f"single_{k}": float(np.mean([m[k] for m in per_draw])) for k in per_draw[0]}


def format_table(
    rows: Mapping[str, Mapping[str, float] | None],
    columns: Mapping[str, str],
    *,
    label: str = "method",
    fmt: str = ".4f",
) -> str:
    """One line per row, one column per metric (``columns``: metric key -> header).

    A row ``None`` prints as ``diverged``; NaN and missing metrics print as ``-``.
    """
    first = max(10, *(len(str(r)) + 2 for r in rows), len(label) + 2)
    widths = [max(10, len(h) + 2) for h in columns.values()]
    header = f"{label:<{first}}" + "".join(
        f"{h:>{w}}" for h, w in zip(columns.values(), widths, strict=True)
    )
    lines = [header]
    for name, r in rows.items():
        if r is None:
            lines.append(f"{name:<{first}}diverged (non-finite draws)")
            continue
        cells = []
        for key, w in zip(columns, widths, strict=True):
            v = r.get(key, math.nan)
            cells.append(f"{'-':>{w}}" if math.isnan(v) else f"{v:>{w}{fmt}}")
        lines.append(f"{name:<{first}}" + "".join(cells))
    return "\n".join(lines)

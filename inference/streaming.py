"""Streaming predictions: the Bayesian model average as a running sum, never the whole stack.

A 10,000-sample run of a large network cannot keep every draw's predictive probabilities in
memory. :class:`RunningBMA` keeps the mergeable average of :mod:`bnn_ppl.model_average`
(float64) instead: the mean probabilities, rate or mean, and for a Gaussian predictive the mean
within-draw variance and the draws' spread. Its state is a few plain arrays
(:meth:`RunningBMA.state_arrays`), saved in each checkpoint so a resumed run continues the same
average exactly. :func:`bnn_ppl.inference.run_chain` uses it when given ``x_predict``.

Example:
    >>> import numpy as np
    >>> from bnn_ppl.inference.streaming import RunningBMA
    >>> probs = np.random.default_rng(0).dirichlet(np.ones(3), size=(6, 4))   # (S, n, K)
    >>> acc = RunningBMA()
    >>> for part in (probs[:2], probs[2:5], probs[5:]):        # one segment at a time
    ...     acc.update(part)
    >>> acc.count, bool(np.allclose(acc.result(), probs.mean(axis=0)))
    (6, True)
    >>> again = RunningBMA.from_arrays(acc.state_arrays())    # what a checkpoint stores
    >>> bool(np.array_equal(again.result(), acc.result()))
    True
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from bnn_ppl import model_average
from bnn_ppl.likelihoods import (
    GaussianPrediction,
    PoissonPrediction,
    prediction_fields,
    prediction_from_fields,
)
from bnn_ppl.validation import InputValueError

__all__ = ["RunningBMA"]


class RunningBMA:
    """Running Bayesian model average over a stream of per-sample predictions.

    Feed it with :meth:`update` (a batch of draws on a leading axis: probabilities
    ``(s, n, K)`` or a :class:`~bnn_ppl.likelihoods.GaussianPrediction`,
    ``StudentTPrediction`` or ``PoissonPrediction`` with ``(s, n)`` fields); :meth:`result`
    is what :func:`bnn_ppl.bma` would give on all draws together: both are
    :mod:`bnn_ppl.model_average` (here merged batch by batch, in float64).
    """

    def __init__(self) -> None:
        self.average: model_average.Average | None = None

    @property
    def count(self) -> int:
        """The number of draws averaged so far."""
        return 0 if self.average is None else self.average.count

    def update(self, predictions: Any) -> None:
        """Add a batch of draws (leading axis = draws; an empty batch is a no-op)."""
        fields = {k: np.asarray(v, np.float64) for k, v in prediction_fields(predictions).items()}
        if next(iter(fields.values())).shape[0] == 0:
            return
        batch = model_average.summarize(prediction_from_fields(fields))
        self.average = batch if self.average is None else model_average.merge(self.average, batch)

    def result(self) -> np.ndarray | GaussianPrediction | PoissonPrediction | None:
        """The BMA so far (``None`` before any draw): probabilities ``(n, K)`` or a Gaussian."""
        return None if self.average is None else model_average.result(self.average)

    def state_arrays(self) -> dict[str, np.ndarray]:
        """The accumulator as plain arrays (for a checkpoint); see :meth:`from_arrays`."""
        out = {"count": np.asarray(self.count, np.int64)}
        if self.average is not None:
            out["kind"] = np.asarray(model_average.KINDS.index(self.average.kind), np.int64)
            out.update(
                {k: np.asarray(getattr(self.average, k)) for k in _FIELDS[self.average.kind]}
            )
        return out

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray]) -> RunningBMA:
        """Rebuild the accumulator saved by :meth:`state_arrays`."""
        acc = cls()
        try:
            count = int(arrays["count"])
            kind = model_average.KINDS[int(arrays["kind"])] if "kind" in arrays else None
            stats = {k: np.asarray(v, np.float64) for k, v in arrays.items() if k in _ALL_FIELDS}
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise InputValueError(f"not a saved RunningBMA state: {type(e).__name__}: {e}") from e
        want = set(_FIELDS[kind]) if kind is not None else set()
        extra = set(arrays) - want - {"count", "kind"}
        if set(stats) != want or extra or count < 0 or (count == 0) != (kind is None):
            raise InputValueError(f"not a saved RunningBMA state: keys {sorted(arrays)}.")
        if kind is not None:
            acc.average = model_average.Average(kind, count, **stats)
        return acc


_FIELDS = {"probs": ("mean",), "poisson": ("mean",), "gaussian": ("mean", "within", "spread")}
_ALL_FIELDS = {"mean", "within", "spread"}

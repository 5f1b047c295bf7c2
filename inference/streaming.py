"""Streaming predictions: the Bayesian model average as a running sum, never the whole stack.

A 10,000-sample run of a large network cannot keep every draw's predictive probabilities in
memory. :class:`RunningBMA` keeps two sums (float64) and a count instead: the BMA of
classification probabilities is ``sum(p_s) / S``; for a Gaussian predictive the moment-matched
mixture needs ``sum(mean_s)`` and ``sum(scale_s² + mean_s²)``. Its state is a few plain arrays
(:meth:`RunningBMA.state_arrays`), saved in each checkpoint so a resumed run continues the same
sums exactly. :func:`bnn_ppl.inference.run_chain` uses it when given ``x_predict``.

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

from bnn_ppl.likelihoods import GaussianPrediction, PoissonPrediction, StudentTPrediction
from bnn_ppl.validation import InputValueError

__all__ = ["RunningBMA"]

_KINDS = ("probs", "gaussian", "poisson")  # indices are saved in checkpoints: append only


class RunningBMA:
    """Running Bayesian model average over a stream of per-sample predictions.

    Feed it with :meth:`update` (a batch of draws on a leading axis: probabilities
    ``(s, n, K)`` or a :class:`~bnn_ppl.likelihoods.GaussianPrediction`,
    ``StudentTPrediction`` or ``PoissonPrediction`` with ``(s, n)`` fields); :meth:`result`
    is what :func:`bnn_ppl.bma` would give on all draws together (in float64; the sums are
    accumulated in float64, so it agrees to float32 rounding).
    """

    def __init__(self) -> None:
        self.kind: str | None = None
        self.count = 0
        self.sums: dict[str, np.ndarray] = {}

    def update(self, predictions: Any) -> None:
        """Add a batch of draws (leading axis = draws; an empty batch is a no-op)."""
        if isinstance(predictions, GaussianPrediction | StudentTPrediction):
            kind = "gaussian"  # a Student-t's BMA is moment-matched too (bnn_ppl.bma)
            mean = np.asarray(predictions[0], np.float64)
            var = np.asarray(predictions.scale, np.float64) ** 2
            if isinstance(predictions, StudentTPrediction):
                df = np.asarray(predictions.df, np.float64)
                var = np.where(df > 2, var * df / np.where(df > 2, df - 2, 1.0), np.inf)
            parts = {"mean": mean, "second": var + mean**2}
        elif isinstance(predictions, PoissonPrediction):
            kind = "poisson"
            parts = {"rate": np.asarray(predictions.rate, np.float64)}
        else:
            kind = "probs"
            parts = {"probs": np.asarray(predictions, np.float64)}
        if self.kind is not None and kind != self.kind:
            raise InputValueError(f"RunningBMA holds {self.kind!r} predictions, got {kind!r} ones.")
        s = next(iter(parts.values())).shape[0]
        if s == 0:
            return
        for k, v in parts.items():
            total = v.sum(axis=0)
            if k in self.sums and self.sums[k].shape != total.shape:
                raise InputValueError(
                    f"RunningBMA: predictions of shape {v.shape[1:]} do not match the running "
                    f"average of shape {self.sums[k].shape}."
                )
            self.sums[k] = self.sums[k] + total if k in self.sums else total
        self.kind = kind
        self.count += s

    def result(self) -> np.ndarray | GaussianPrediction | PoissonPrediction | None:
        """The BMA so far (``None`` before any draw): probabilities ``(n, K)`` or a Gaussian."""
        if self.count == 0:
            return None
        if self.kind == "probs":
            return self.sums["probs"] / self.count
        if self.kind == "poisson":
            return PoissonPrediction(self.sums["rate"] / self.count)
        mean = self.sums["mean"] / self.count
        second = self.sums["second"] / self.count
        return GaussianPrediction(mean, np.sqrt(np.maximum(second - mean**2, 0.0)))

    def state_arrays(self) -> dict[str, np.ndarray]:
        """The accumulator as plain arrays (for a checkpoint); see :meth:`from_arrays`."""
        out = {"count": np.asarray(self.count, np.int64)}
        if self.kind is not None:
            out["kind"] = np.asarray(_KINDS.index(self.kind), np.int64)
            out.update({f"sum.{k}": v for k, v in self.sums.items()})
        return out

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray]) -> RunningBMA:
        """Rebuild the accumulator saved by :meth:`state_arrays`."""
        acc = cls()
        try:
            acc.count = int(arrays["count"])
            if "kind" in arrays:
                acc.kind = _KINDS[int(arrays["kind"])]
            acc.sums = {
                k[len("sum.") :]: np.asarray(v, np.float64)
                for k, v in arrays.items()
                if k.startswith("sum.")
            }
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise InputValueError(f"not a saved RunningBMA state: {type(e).__name__}: {e}") from e
        want = {
            "probs": {"probs"},
            "gaussian": {"mean", "second"},
            "poisson": {"rate"},
            None: set(),
        }[acc.kind]
        if set(acc.sums) != want or acc.count < 0 or (acc.count == 0) != (acc.kind is None):
            raise InputValueError(f"not a saved RunningBMA state: keys {sorted(arrays)}.")
        return acc

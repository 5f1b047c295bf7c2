"""``progress.jsonl`` of a checkpointed :func:`~bnn_ppl.inference.fit`: one line per committed
sampling segment, written as the run goes.

Each line is :func:`bnn_ppl.progress.chain_point` over all draws so far (draws per chain, mean
acceptance probability, divergences, gradient evaluations per chain, and, when the data have
test targets, the running BMA's test metrics) with the ``segment`` index and its
``wall_seconds`` (the segment's sampling time, compilation included; ``None`` for a segment a
killed process committed without it). The test predictions of each segment's draws are
computed once, when the segment is committed, and kept (``chains x draws x n_test`` values per
output: what the finished Posterior's ``predictions`` hold anyway).

The file is a function of the committed segments (their draws and recorded wall time): it is
rewritten whole through :mod:`bnn_ppl.io`'s atomic writer after each commit, and a resumed run
rebuilds the lines of the segments it finds committed before it appends its own. So a resumed
run's file never repeats a line and equals an uninterrupted run's except ``wall_seconds``.

Example:
    >>> import jax, json, numpy as np, os, tempfile
    >>> import bnn_ppl as bp
    >>> from bnn_ppl.config import HMCConfig
    >>> from bnn_ppl.inference import fit
    >>> from bnn_ppl.models import MLP
    >>> x = np.linspace(-1, 1, 20, dtype=np.float32)[:, None]
    >>> model = bp.BNN(MLP(hidden=(), out=1), bp.priors.Normal(1.0), bp.likelihoods.Gaussian(0.1))
    >>> folder = tempfile.mkdtemp()
    >>> post = fit(model, (x, 2 * x[:, 0], x[:5], 2 * x[:5, 0]), HMCConfig(num_warmup=10,
    ...            num_samples=4), jax.random.key(0), checkpoint_dir=folder, checkpoint_every=2)
    >>> with open(os.path.join(folder, "progress.jsonl")) as f:
    ...     lines = [json.loads(line) for line in f]
    >>> [(p["segment"], p["draws"]) for p in lines], sorted(k for k in lines[0] if "test" in k)
    ([(1, 2), (2, 4)], ['test_nll', 'test_rmse'])
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from bnn_ppl import io
from bnn_ppl.model import BNN
from bnn_ppl.progress import chain_point

__all__ = ["ProgressLog", "FILE"]

FILE = "progress.jsonl"
_STATS = ("accept_prob", "diverging", "num_steps")  # what chain_point reads


class ProgressLog:
    """The ``on_segment`` callback of :func:`~bnn_ppl.inference.resume.run_segments` that keeps
    ``<folder>/progress.jsonl``; ``cycle_length`` (SG-MCMC) keeps cycle-end draws only."""

    def __init__(
        self,
        folder: str | os.PathLike,
        model: BNN,
        x_test: Any = None,
        y_test: Any = None,
        *,
        thinning: int = 1,
        cycle_length: int | None = None,
        chunk_size: int | None = None,
        y_std: float = 1.0,
    ):
        self.path = os.path.join(os.fspath(folder), FILE)
        self.model, self.chunk_size = model, chunk_size
        self.x_test, self.y_test = (x_test, y_test) if y_test is not None else (None, None)
        self.thinning, self.cycle_length, self.y_std = thinning, cycle_length, y_std
        self.draws = 0
        self.predictions: list[dict[str, np.ndarray]] = []
        self.stats: list[dict[str, np.ndarray]] = []
        self.lines: list[dict[str, Any]] = []

    def __call__(self, segment: int, arrays: dict[str, np.ndarray], replayed: bool) -> None:
        """Add segment ``segment``'s line; write the file unless the segment was ``replayed``."""
        from bnn_ppl.inference.to_posterior import NUMPYRO_STATS

        samples = {k[7:]: v for k, v in arrays.items() if k.startswith("sample/")}
        extra = {k[6:]: v for k, v in arrays.items() if k.startswith("extra/")}
        if self.cycle_length is not None:
            from bnn_ppl.inference.cycles import keep_cycle_ends

            samples = keep_cycle_ends(samples, extra["i"], self.cycle_length)
        self.draws += next(iter(samples.values())).shape[1]
        self.stats.append({NUMPYRO_STATS[k]: v for k, v in extra.items() if k in _STATS})
        if self.x_test is not None and next(iter(samples.values())).shape[1] > 0:
            from bnn_ppl.pointwise import chain_predictions

            self.predictions.append(
                chain_predictions(self.model, samples, self.x_test, chunk_size=self.chunk_size)
            )
        point = chain_point(
            self.draws,
            _joined(self.predictions),
            self.y_test,
            _joined(self.stats),
            thinning=self.thinning,
            y_std=self.y_std,
        )
        seconds = arrays.get("time/seconds")
        seconds = None if seconds is None else float(seconds)
        self.lines.append({"segment": segment, **point, "wall_seconds": seconds})
        if not replayed:
            self.write()

    def write(self) -> None:
        """Write the lines so far (atomically), unless the file already holds exactly them."""
        io.write_jsonl(self.path, self.lines)


def _joined(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    if not parts:
        return {}
    return {k: np.concatenate([p[k] for p in parts], axis=1) for k in parts[0]}

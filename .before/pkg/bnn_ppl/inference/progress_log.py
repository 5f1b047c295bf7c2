"""``progress.jsonl`` of a checkpointed :func:`~bnn_ppl.inference.fit`: warmup's cost, then
the running metrics of the sampling segments, written as the run goes.

The first line (``segment`` 0, ``"phase": "warmup"``) is warmup's: its ``iterations`` per chain
(SG-MCMC: steps), ``wall_seconds`` (compilation included), ``grad_evals`` (leapfrog steps per
chain over all warmup iterations; SG-MCMC: its steps x ``gradients_per_step``), ``accept_prob``
and ``divergences`` over them, and the adapted ``step_size`` (mean over chains); what a kernel
does not report is ``None`` (SG-MCMC: the acceptance, divergences and step size). Each later
line is :func:`bnn_ppl.progress.chain_point` over
all draws so far (draws per chain, mean acceptance probability, divergences, gradient
evaluations per chain, and, when the data have test targets, the running BMA's test metrics)
with its ``segment`` and ``wall_seconds`` (the segment's sampling time, compilation included, on
the segment's last line; ``None`` on the others, and for a segment a killed process committed
without it). A segment gives one line, at its end, or with ``progress_every`` a line at every
multiple of ``progress_every`` draws per chain it holds and one at its end: each computed after
the segment from its draws (no extra compilation; each point costs a pass over the test
predictions of the draws so far). The test predictions of each segment's draws are computed
once, when the segment is committed, and kept (``chains x draws x n_test`` values per output):
the finished Posterior's ``predictions`` are these (:meth:`ProgressLog.predictions_so_far`).

The file is a function of the committed segments (warmup's statistics, the draws and recorded
wall times) and ``progress_every``: it is rewritten whole through :mod:`bnn_ppl.io`'s atomic
writer after each commit, and a resumed run rebuilds the lines of the segments it finds
committed before it appends its own. So a resumed run's file never repeats a line and equals
an uninterrupted run's except ``wall_seconds``.

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
    ...            num_samples=4), jax.random.key(0), checkpoint_dir=folder, checkpoint_every=2,
    ...            progress_every=1)
    >>> with open(os.path.join(folder, "progress.jsonl")) as f:
    ...     lines = [json.loads(line) for line in f]
    >>> [(p["segment"], p["draws"]) for p in lines], sorted(k for k in lines[1] if "test" in k)
    ([(0, 0), (1, 1), (1, 2), (2, 3), (2, 4)], ['test_nll', 'test_rmse'])
    >>> lines[0]["phase"], lines[0]["iterations"], lines[0]["grad_evals"] > 0
    ('warmup', 10, True)
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from bnn_ppl import io
from bnn_ppl.model import BNN
from bnn_ppl.progress import chain_point, chain_points

__all__ = ["ProgressLog", "FILE"]

FILE = "progress.jsonl"
_STATS = ("accept_prob", "diverging", "num_steps")  # what chain_point reads


class ProgressLog:
    """The ``on_segment`` callback of :func:`~bnn_ppl.inference.resume.run_segments` that keeps
    ``<folder>/progress.jsonl``; ``cycle_length`` (SG-MCMC) keeps cycle-end draws only;
    ``progress_every`` adds a line every that many draws per chain (default: one line per
    segment, at its end); ``gradients_per_step`` (SG-MCMC: batch rows / training rows) is a
    step's cost in full-batch gradients, from which ``grad_evals`` is counted."""

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
        progress_every: int | None = None,
        gradients_per_step: float | None = None,
    ):
        self.path = os.path.join(os.fspath(folder), FILE)
        self.model, self.chunk_size = model, chunk_size
        self.x_test, self.y_test = (x_test, y_test) if y_test is not None else (None, None)
        self.thinning, self.cycle_length, self.y_std = thinning, cycle_length, y_std
        self.every, self.per_step = progress_every, gradients_per_step
        self.draws = 0
        self.predictions: list[dict[str, np.ndarray]] = []
        self.stats: list[dict[str, np.ndarray]] = []
        self.lines: list[dict[str, Any]] = []

    def __call__(self, segment: int, arrays: dict[str, np.ndarray], replayed: bool) -> None:
        """Add segment ``segment``'s lines (0: warmup's); write the file unless ``replayed``."""
        seconds = arrays.get("time/seconds")
        seconds = None if seconds is None else float(seconds)
        if segment == 0:
            point = _warmup_point(arrays)
            if point["grad_evals"] is None and self.per_step and point["iterations"] is not None:
                point["grad_evals"] = point["iterations"] * self.per_step
            self.lines.append({"segment": 0, **point, "wall_seconds": seconds})
        else:
            self._add_segment(segment, arrays, seconds)
        if not replayed:
            self.write()

    def _add_segment(self, segment: int, arrays: dict[str, np.ndarray], seconds: Any) -> None:
        from bnn_ppl.inference.to_posterior import NUMPYRO_STATS

        samples = {k[7:]: v for k, v in arrays.items() if k.startswith("sample/")}
        extra = {k[6:]: v for k, v in arrays.items() if k.startswith("extra/")}
        if self.cycle_length is not None:
            from bnn_ppl.inference.cycles import keep_cycle_ends

            samples = keep_cycle_ends(samples, extra["i"], self.cycle_length)
        first, n = self.draws, next(iter(samples.values())).shape[1]
        self.draws += n
        self.stats.append({NUMPYRO_STATS[k]: v for k, v in extra.items() if k in _STATS})
        if self.x_test is not None and n > 0:
            from bnn_ppl.pointwise import chain_predictions

            self.predictions.append(
                chain_predictions(self.model, samples, self.x_test, chunk_size=self.chunk_size)
            )
        predictions, stats = _joined(self.predictions), _joined(self.stats)
        per_draw = None
        if self.per_step is not None and self.cycle_length is not None:
            per_draw = self.per_step * self.cycle_length
        points = chain_points(
            _line_draws(first, self.draws, self.every),
            predictions,
            self.y_test,
            stats,
            thinning=self.thinning,
            y_std=self.y_std,
            gradients_per_draw=per_draw,
        )
        for point in points:
            # the segment's sampling time belongs to its last line
            wall = seconds if point["draws"] == self.draws else None
            self.lines.append({"segment": segment, **point, "wall_seconds": wall})

    def predictions_so_far(self) -> dict[str, np.ndarray] | None:
        """The test predictions of every segment's draws, ``(chain, draw, n_test, ...)`` as a
        Posterior's ``predictions`` (``None`` without test targets: none were computed)."""
        return _joined(self.predictions) if self.x_test is not None else None

    def write(self) -> None:
        """Write the lines so far (atomically), unless the file already holds exactly them."""
        io.write_jsonl(self.path, self.lines)


def _joined(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    if not parts:
        return {}
    return {k: np.concatenate([p[k] for p in parts], axis=1) for k in parts[0]}


def _line_draws(first: int, last: int, every: int | None) -> list[int]:
    """Draws per chain of the lines of a segment holding draws ``first + 1 .. last``: every
    multiple of ``every`` among them, and ``last``."""
    if every is None:
        return [last]
    return sorted({*range(first + every - first % every, last + 1, every), last})


def _warmup_point(arrays: dict[str, np.ndarray]) -> dict[str, Any]:
    """Warmup's line: ``draws`` 0, its ``iterations`` (per chain), the :func:`chain_point`
    statistics over them, and the adapted ``step_size`` (mean over chains; ``None`` for a
    kernel without one)."""
    from bnn_ppl.inference.to_posterior import NUMPYRO_STATS

    stats = {NUMPYRO_STATS[k[6:]]: v for k, v in arrays.items() if k[6:] in _STATS}
    iterations, step_size = arrays.get("time/iterations"), arrays.get("state/step_size")
    return {
        "phase": "warmup",
        "iterations": None if iterations is None else int(iterations),
        **chain_point(0, sample_stats=stats),
        "step_size": None if step_size is None else float(np.mean(step_size)),
    }

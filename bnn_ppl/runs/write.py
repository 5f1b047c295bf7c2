"""The run folder of ``bnn-ppl run``: what it holds, how it is written, read back and checked."""

# Notes:
#
# A run folder is written by :mod:`bnn_ppl.cli` and the examples (:func:`save_posterior` of a
# fitted :class:`~bnn_ppl.Posterior`) and read by ``bnn-ppl evaluate`` and
# ``bnn-ppl compare``. Every file goes through :mod:`bnn_ppl.io` (atomic writes; ``.npz`` without
# pickle, checked against its SHA-256 when read):
#
# * ``config.json`` - written first, it claims the folder for one configuration: ``arguments``
#   (every option of the run's method, defaults resolved), ``data`` (the data set's name, task,
#   sizes and SHA-256 fingerprints of its training and test arrays), ``model`` (parameter count),
#   ``environment`` (the output and data paths) and ``versions`` (library versions). Only
#   ``arguments`` and ``data`` must match for the folder to be reused.
# * ``posterior.nc`` - the run's :class:`~bnn_ppl.Posterior` (ArviZ groups, netCDF).
# * ``samples.npz`` - site -> draws, ``(chain, draw, ...)`` for Markov chains (hmc, nuts, sgmcmc),
#   ``(draw, ...)`` for independent draws (svi: guide draws; ensemble: one member per draw).
# * ``predictions.npz`` - per-draw test predictions with the same leading axes (the fields of
#   :func:`bnn_ppl.likelihoods.prediction_fields`) and the test ``targets``: evaluating and
#   comparing runs needs neither the network nor the data.
# * ``progress.jsonl`` - running metrics, one JSON line per point (:mod:`bnn_ppl.runs.progress`):
#   the test metrics of the BMA of the first draws of a chain method, the loss curve of SVI, MAP or
#   an ensemble.
# * ``metrics.json`` - written last, the commit record and the folder's manifest: the test
#   metrics of the Bayesian model average, the layout, a sampler summary, the SHA-256 of every
#   other file (``"files"``) and of itself (``"checksum"``), all verified by :func:`load_run`
#   (they detect damage, not deliberate edits: whoever edits a file can recompute them). A
#   folder without it holds an unfinished run; one whose record says ``"status": "diverged"``
#   (:func:`save_diverged`) a run whose draws or loss became NaN/inf, with the reason.
# * ``checkpoints/`` (hmc/nuts/SG-MCMC with ``--checkpoint-every``, reference_hmc always) - a
#   killed run resumes from it.
# * ``.lock`` - one writer per folder: :class:`FolderLock`, held from :func:`claim` to the last
#   file written.
#
# Reading a folder back (:func:`load_run`, :class:`Run`, :func:`check_comparable`) lives in
# :mod:`bnn_ppl.runs.load` and the configuration record in :mod:`bnn_ppl.runs.config`; the
# package ``bnn_ppl.runs`` gathers the three, the one name to import.
#
# This module is part of the core: it never imports ``bnn_ppl.inference`` or ``bnn_ppl.models``.

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from bnn_ppl.io import save_npz, sha256_file, write_json, write_jsonl
from bnn_ppl.likelihoods import (
    Prediction,
    prediction_fields,
    prediction_from_fields,
)
from bnn_ppl.metrics.suite import flat_draws, predictive_metrics
from bnn_ppl.runs.config import (
    CONFIG,
    FORMAT,
    METRICS,
    POSTERIOR,
    PREDICTIONS,
    PROGRESS,
    SAMPLES,
    SCHEMA_VERSION,
    record_checksum,
)
from bnn_ppl.runs.progress import running_metrics
from bnn_ppl.validation import InputValueError

__all__ = ["save_results", "save_posterior", "save_diverged"]


# ---------------------------------------------------------------------------------- results
def _prediction_arrays(predictions: Any) -> dict[str, np.ndarray]:
    return {k: np.asarray(v) for k, v in prediction_fields(predictions).items()}


def save_results(
    folder: str | os.PathLike,
    *,
    samples: Mapping[str, Any],
    predictions: Prediction,
    targets: Any,
    chains: bool,
    task: str,
    y_std: float = 1.0,
    extra: Mapping[str, Any] | None = None,
    written: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Write ``samples.npz``, ``predictions.npz`` and then ``metrics.json``; return the record.

    ``metrics.json`` is the commit record and the folder's manifest: its ``"files"`` hold the
    SHA-256 of ``config.json``, of both ``.npz`` files and of ``written`` (file name -> SHA-256
    of other files this run wrote, e.g. ``posterior.nc``), and its ``"checksum"`` that of the
    record itself (:func:`record_checksum`); :func:`load_run` verifies them all.

    Args:
        folder: the run folder (claimed with :func:`claim`).
        samples: site -> draws, ``(chain, draw, ...)`` if ``chains`` else ``(draw, ...)``.
        predictions: per-draw test predictions with the same leading axes.
        targets: test targets ``(n,)``.
        chains: whether the leading axes are ``(chain, draw)``.
        task: ``"classification"`` or ``"regression"``.
        y_std: the training targets' standard deviation (regression metrics in original units).
        extra: more JSON-able entries for ``metrics.json`` (sampler summary, wall time, ...).
        written: more files of the folder to checksum, name -> SHA-256 of what was written.

    Raises:
        ValueError: inconsistent leading axes, or non-finite predictions (the samples and
            predictions are written first, so a diverged run can still be inspected).

    Example:
        >>> import os, tempfile
        >>> import numpy as np
        >>> from bnn_ppl import runs
        >>> folder = os.path.join(tempfile.mkdtemp(), "run")
        >>> cfg = runs.make_config({"method": "ensemble", "dataset": "toy"},
        ...                        data={"name": "toy", "task": "classification"})
        >>> runs.claim(folder, cfg)
        False
        >>> probs = np.full((3, 4, 2), 0.5)  # 3 members, 4 test rows, 2 classes
        >>> record = runs.save_results(folder, samples={"w": np.zeros((3, 2))},
        ...                            predictions=probs, targets=np.array([0, 1, 1, 0]),
        ...                            chains=False, task="classification")
        >>> record["metrics"]["accuracy"], runs.load_run(folder).num_draws
        (0.5, 3)
        >>> runs.claim(folder, runs.make_config({"method": "svi", "dataset": "toy"},
        ...                                     data={"name": "toy", "task": "classification"}))
        Traceback (most recent call last):
        ...
        bnn_ppl.validation.InputValueError: ... different configuration; refusing to reuse it:
          method: 'ensemble' (config.json) != 'svi' (this run)
        Use a new --out folder, or re-run with the original options.
    """
    folder = os.fspath(folder)
    arrays = {k: np.asarray(v) for k, v in samples.items()}
    pred = _prediction_arrays(predictions)
    lead = 2 if chains else 1
    shapes = {np.shape(a)[:lead] for a in [*arrays.values(), *pred.values()]}
    if len(shapes) != 1:
        raise InputValueError(f"samples and predictions disagree on their leading axes: {shapes}.")
    (shape,) = shapes
    targets = np.asarray(targets)
    config_path = os.path.join(folder, CONFIG)
    files = {CONFIG: sha256_file(config_path)} if os.path.exists(config_path) else {}
    files |= dict(written or {})
    files |= {
        SAMPLES: save_npz(os.path.join(folder, SAMPLES), arrays),
        PREDICTIONS: save_npz(os.path.join(folder, PREDICTIONS), pred | {"targets": targets}),
    }
    flat = flat_draws(prediction_from_fields(pred), chains)
    record: dict[str, Any] = {
        "format": FORMAT,
        "schema_version": SCHEMA_VERSION,
        "task": task,
        "metrics": predictive_metrics(flat, targets, task=task, y_std=y_std),
        "layout": ["chain", "draw"] if chains else ["draw"],
        "num_chains": int(shape[0]) if chains else 1,
        "num_draws": int(math.prod(shape)),
        "y_std": float(y_std),
        **dict(extra or {}),
        "files": files,
    }
    record["checksum"] = record_checksum(record)
    write_json(os.path.join(folder, METRICS), record)
    return record


def save_posterior(
    folder: str | os.PathLike,
    posterior: Any,
    *,
    y_std: float = 1.0,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Write a fitted :class:`~bnn_ppl.Posterior` as a run folder's results: ``posterior.nc``,
    ``progress.jsonl`` (:func:`bnn_ppl.runs.progress.running_metrics`: the running BMA's test
    metrics
    of a chain, the loss curve of an optimiser), then :func:`save_results` (``samples.npz``,
    ``predictions.npz``, ``metrics.json``).

    The folder must be claimed first (:func:`claim`). Markov chains keep their ``(chain,
    draw)`` layout; independent draws (SVI, ensembles, MAP) are written as one ``draw`` axis.
    The test targets and predictions are the Posterior's (``fit`` with test data adds them).

    Args:
        folder: the run folder.
        posterior: what :func:`bnn_ppl.inference.fit` returned, with test data.
        y_std: the training targets' standard deviation (regression metrics in original units).
        extra: more JSON-able entries for ``metrics.json``; ``method`` is added.

    Raises:
        ValueError: the Posterior holds no test predictions or targets.
    """
    if not posterior.predictions or "y_test" not in posterior.observed:
        raise InputValueError(
            "the Posterior holds no test predictions and targets; fit it with test data "
            "(a Dataset, or (x, y, x_test, y_test)) or call "
            "bnn_ppl.predictive.attach_data(posterior, ...)."
        )

    folder = os.fspath(folder)
    posterior.save(os.path.join(folder, POSTERIOR))  # before metrics.json, the commit record
    write_jsonl(os.path.join(folder, PROGRESS), running_metrics(posterior, y_std=y_std))
    written = {name: sha256_file(os.path.join(folder, name)) for name in (POSTERIOR, PROGRESS)}
    pred = prediction_from_fields(dict(posterior.predictions))
    chains = posterior.is_markov
    return save_results(
        folder,
        samples=dict(posterior.samples) if chains else posterior.flat_samples(),
        predictions=pred if chains else flat_draws(pred, True),
        targets=posterior.observed["y_test"],
        chains=chains,
        task="classification" if "probs" in posterior.predictions else "regression",
        y_std=y_std,
        extra={"method": posterior.method, **dict(extra or {})},
        written=written,
    )


def save_diverged(
    folder: str | os.PathLike, method: str, reason: str, *, extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Write ``metrics.json`` (atomically) for a claimed run that diverged: ``"status":
    "diverged"``, the ``method`` and the ``reason`` (the error's message), so that the folder
    says what happened instead of looking unfinished; :func:`load_run` refuses it, naming the
    reason. A rerun with the same options overwrites the record. Returns the record."""
    record = {"format": FORMAT, "schema_version": SCHEMA_VERSION, "status": "diverged",
              "method": method, "reason": reason, **dict(extra or {})}  # fmt: skip
    record["checksum"] = record_checksum(record)
    write_json(os.path.join(os.fspath(folder), METRICS), record)
    return record

"""The run folder of ``bnn-ppl run``: what it holds, how it is written, read back and checked.

A run folder is written by :mod:`bnn_ppl.cli` and the examples (:func:`save_posterior` of a
fitted :class:`~bnn_ppl.Posterior`) and read by ``bnn-ppl evaluate`` and
``bnn-ppl compare``. Every file goes through :mod:`bnn_ppl.io` (atomic writes; ``.npz`` without
pickle, checked against its SHA-256 when read):

* ``config.json`` - written first, it claims the folder for one configuration: ``arguments``
  (every option of the run's method, defaults resolved), ``data`` (the data set's name, task,
  sizes and SHA-256 fingerprints of its training and test arrays), ``model`` (parameter count),
  ``environment`` (the output and data paths) and ``versions`` (library versions). Only
  ``arguments`` and ``data`` must match for the folder to be reused.
* ``posterior.nc`` - the run's :class:`~bnn_ppl.Posterior` (ArviZ groups, netCDF).
* ``samples.npz`` - site -> draws, ``(chain, draw, ...)`` for Markov chains (hmc, nuts, sgmcmc),
  ``(draw, ...)`` for independent draws (svi: guide draws; ensemble: one member per draw).
* ``predictions.npz`` - per-draw test predictions with the same leading axes (the fields of
  :func:`bnn_ppl.likelihoods.prediction_fields`) and the test ``targets``: evaluating and
  comparing runs needs neither the network nor the data.
* ``progress.jsonl`` - running metrics, one JSON line per point (:mod:`bnn_ppl.progress`): the
  test metrics of the BMA of the first draws of a chain method, the loss curve of SVI, MAP or
  an ensemble.
* ``metrics.json`` - written last, the commit record: the test metrics of the Bayesian model
  average, the layout, a sampler summary and the SHA-256 of both ``.npz`` files. A folder
  without it holds an unfinished run; one whose record says ``"status": "diverged"``
  (:func:`save_diverged`) a run whose draws or loss became NaN/inf, with the reason.
* ``checkpoints/`` (hmc/nuts with ``--checkpoint-every``) - a killed run resumes from it.

This module is part of the core: it never imports ``bnn_ppl.inference`` or ``bnn_ppl.models``.

Example:
    >>> import os, tempfile
    >>> import numpy as np
    >>> from bnn_ppl import runs
    >>> folder = os.path.join(tempfile.mkdtemp(), "run")
    >>> cfg = runs.make_config({"method": "ensemble", "dataset": "toy"},
    ...                        data={"name": "toy", "task": "classification"})
    >>> runs.claim(folder, cfg)
    False
    >>> probs = np.full((3, 4, 2), 0.5)                       # 3 members, 4 test rows, 2 classes
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

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from bnn_ppl.io import load_npz, read_json, save_npz, write_json, write_jsonl
from bnn_ppl.likelihoods import (
    Prediction,
    prediction_fields,
    prediction_from_fields,
)
from bnn_ppl.metrics.suite import flat_draws, per_chain, predictive_metrics
from bnn_ppl.run_config import (
    CHECKPOINTS,
    CONFIG,
    EVALUATION,
    FORMAT,
    METRICS,
    POSTERIOR,
    PREDICTIONS,
    PROGRESS,
    SAMPLES,
    SCHEMA_VERSION,
    array_sha256,
    claim,
    config_differences,
    data_identity,
    make_config,
    read_config,
    versions,
)
from bnn_ppl.validation import InputValueError

__all__ = [
    "FORMAT",
    "SCHEMA_VERSION",
    "CONFIG",
    "POSTERIOR",
    "SAMPLES",
    "PREDICTIONS",
    "METRICS",
    "EVALUATION",
    "PROGRESS",
    "CHECKPOINTS",
    "Run",
    "versions",
    "array_sha256",
    "data_identity",
    "make_config",
    "config_differences",
    "claim",
    "save_results",
    "save_posterior",
    "save_diverged",
    "load_run",
    "dataset_name",
    "method_name",
    "flat_draws",
    "per_chain",
    "predictive_metrics",
    "check_comparable",
]

_RECORD_KEYS = ("files", "layout", "num_chains", "num_draws", "task", "metrics")


class Run(NamedTuple):
    """A finished run folder, as read by :func:`load_run`.

    Attributes:
        path: the folder.
        config: ``config.json``.
        record: ``metrics.json``.
        predictions: per-draw test probabilities ``([chain,] draw, n, K)`` or a
            :class:`~bnn_ppl.likelihoods.GaussianPrediction` (or Student-t, Poisson prediction)
            of ``([chain,] draw, n)`` arrays.
        targets: the test targets ``(n,)`` (standardised for regression).
        samples: site -> draws, or ``None`` when not asked for.
    """

    path: str
    config: dict[str, Any]
    record: dict[str, Any]
    predictions: Prediction
    targets: np.ndarray
    samples: dict[str, np.ndarray] | None

    @property
    def chains(self) -> bool:
        """Whether the draws have a leading chain axis (Markov chains)."""
        return self.record["layout"] == ["chain", "draw"]

    @property
    def num_chains(self) -> int:
        """Number of chains (1 for independent draws)."""
        return int(self.record["num_chains"])

    @property
    def num_draws(self) -> int:
        """Draws in all (all chains together)."""
        return int(self.record["num_draws"])

    @property
    def task(self) -> str:
        """``"classification"`` or ``"regression"``."""
        return self.record["task"]

    @property
    def y_std(self) -> float:
        """The training targets' standard deviation (1 for classification)."""
        return float(self.record.get("y_std", 1.0))


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
) -> dict[str, Any]:
    """Write ``samples.npz``, ``predictions.npz`` and then ``metrics.json``; return the record.

    Args:
        folder: the run folder (claimed with :func:`claim`).
        samples: site -> draws, ``(chain, draw, ...)`` if ``chains`` else ``(draw, ...)``.
        predictions: per-draw test predictions with the same leading axes.
        targets: test targets ``(n,)``.
        chains: whether the leading axes are ``(chain, draw)``.
        task: ``"classification"`` or ``"regression"``.
        y_std: the training targets' standard deviation (regression metrics in original units).
        extra: more JSON-able entries for ``metrics.json`` (sampler summary, wall time, ...).

    Raises:
        ValueError: inconsistent leading axes, or non-finite predictions (the samples and
            predictions are written first, so a diverged run can still be inspected).
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
    files = {
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
    ``progress.jsonl`` (:func:`bnn_ppl.progress.running_metrics`: the running BMA's test metrics
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
            "(a Dataset, or (x, y, x_test, y_test)) or call posterior.with_data(...)."
        )
    from bnn_ppl.progress import running_metrics

    folder = os.fspath(folder)
    posterior.save(os.path.join(folder, POSTERIOR))  # before metrics.json, the commit record
    write_jsonl(os.path.join(folder, PROGRESS), running_metrics(posterior, y_std=y_std))
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
    write_json(os.path.join(os.fspath(folder), METRICS), record)
    return record


def load_run(folder: str | os.PathLike, *, samples: bool = False) -> Run:
    """Read a finished run folder (checksums checked, nothing unpickled).

    Args:
        folder: the ``--out`` folder of a ``bnn-ppl run``.
        samples: also read ``samples.npz`` (only evaluation's weight-space diagnostics need it).

    Raises:
        ValueError: the folder does not exist, is not a run folder, holds an unfinished or a
            diverged run (:func:`save_diverged`), or a file is damaged (the message names it).
    """
    folder = os.fspath(folder)
    if not os.path.isdir(folder):
        raise InputValueError(
            f"run folder {folder} does not exist (pass the --out of a bnn-ppl run)."
        )
    config = read_config(folder)
    path = os.path.join(folder, METRICS)
    try:
        record = read_json(path)
    except FileNotFoundError:
        raise InputValueError(
            f"{folder} holds an unfinished run (no {METRICS}): it was interrupted or failed. "
            "Re-run `bnn-ppl run` with the same options to finish (or resume) it."
        ) from None
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InputValueError(f"{path} is unreadable (damaged?): {e}") from e
    if not isinstance(record, dict):
        record = {}
    if record.get("status") == "diverged":
        raise InputValueError(
            f"{folder} holds a run that diverged ({record.get('method')}); there is nothing to "
            f"evaluate. Its record says: {record.get('reason')}"
        )
    files = record.get("files") if isinstance(record.get("files"), dict) else {}
    missing = [k for k in _RECORD_KEYS if k not in record]
    missing += [f"files.{k}" for k in (PREDICTIONS, SAMPLES) if not isinstance(files.get(k), str)]
    if missing:
        raise InputValueError(f"{path} is not a complete bnn-ppl run record: missing {missing}.")
    try:
        pred = load_npz(os.path.join(folder, PREDICTIONS), sha256=files[PREDICTIONS])
        draws = load_npz(os.path.join(folder, SAMPLES), sha256=files[SAMPLES]) if samples else None
    except FileNotFoundError as e:
        raise InputValueError(f"{folder}: {os.path.basename(e.filename)} is missing.") from e
    if "targets" not in pred:
        raise InputValueError(
            f"{folder}/{PREDICTIONS} holds {sorted(pred)}; a run's predictions hold 'targets' "
            "and the fields of a prediction ('probs', or 'mean' and 'scale', ...)."
        )
    targets = pred.pop("targets")
    try:
        predictions = prediction_from_fields(pred)
    except InputValueError as e:
        raise InputValueError(f"{folder}/{PREDICTIONS}: {e}") from None
    return Run(folder, config, record, predictions, targets, draws)


def dataset_name(run: Run) -> str:
    """The data set a run was fitted to (``config.json``'s data identity)."""
    return str(run.config.get("data", {}).get("name") or run.config["arguments"].get("dataset"))


def method_name(run: Run) -> str:
    """The method that produced a run (``metrics.json``, else the run's options)."""
    return str(run.record.get("method") or run.config["arguments"].get("method"))


def check_comparable(runs: Sequence[Run]) -> None:
    """Raise ``ValueError`` unless every run predicted the same test set as the first one.

    Runs are comparable when their data sets have the same name, task and test-set fingerprint
    (``config.json``) and their saved test targets are equal.
    """
    ref = runs[0]
    ref_data = ref.config.get("data", {})
    for run in runs[1:]:
        data = run.config.get("data", {})
        same = (
            data.get("name") == ref_data.get("name")
            and data.get("task") == ref_data.get("task")
            and data.get("test_sha256") == ref_data.get("test_sha256")
            and np.array_equal(run.targets, ref.targets)
        )
        if not same:

            def describe(d: Mapping[str, Any], r: Run) -> str:
                split = f", split {d['split']}" if d.get("split") is not None else ""
                return (
                    f"{r.path}: dataset {d.get('name')!r}{split} ({d.get('task')}, "
                    f"{len(r.targets)} test rows)"
                )

            raise InputValueError(
                "cannot compare runs on different test sets: "
                f"{describe(ref_data, ref)} vs {describe(data, run)}. Compare runs of the same "
                "dataset and split."
            )

"""Reading a finished run folder back: :func:`load_run` and what is asked of the runs read."""

# Notes:
#
# The folder's layout and how it is written are :mod:`bnn_ppl.runs`' (which re-exports every
# name here, so ``bp.runs.load_run`` is this function): ``bnn-ppl evaluate`` and
# ``bnn-ppl compare`` read a folder through :func:`load_run` (checksums checked, nothing
# unpickled) and refuse one that is unfinished, diverged or damaged, naming why;
# :func:`check_comparable` refuses to compare runs on different test sets.
#
# This module is part of the core: it never imports ``bnn_ppl.inference`` or ``bnn_ppl.models``.

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from bnn_ppl.io import load_npz, sha256_file
from bnn_ppl.likelihoods import Prediction, prediction_from_fields
from bnn_ppl.posterior import Posterior
from bnn_ppl.runs.config import (
    METRICS,
    POSTERIOR,
    PREDICTIONS,
    SAMPLES,
    read_config,
    read_record,
    record_checksum,
)
from bnn_ppl.validation import InputValueError

__all__ = ["Run", "load_run", "load_posterior", "dataset_name", "method_name",
           "check_comparable"]

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


def load_run(folder: str | os.PathLike, *, samples: bool = False) -> Run:
    """Read a finished run folder (checksums checked, nothing unpickled).

    Args:
        folder: the ``--out`` folder of a ``bnn-ppl run``.
        samples: also read ``samples.npz`` (only evaluation's weight-space diagnostics need it).

    Every file ``metrics.json`` lists is verified against its SHA-256, and the record
    against its own ``"checksum"``, before anything is returned: a damaged folder is refused,
    never read silently (checksums detect damage, not deliberate edits).

    Raises:
        ValueError: the folder does not exist, is not a run folder, holds an unfinished or a
            diverged run (:func:`bnn_ppl.runs.save_diverged`), or a file is damaged or missing
            (the message names it).

    Example:
        >>> import os, tempfile
        >>> import numpy as np
        >>> from bnn_ppl import runs
        >>> from bnn_ppl.runs.load import load_run, method_name
        >>> folder = os.path.join(tempfile.mkdtemp(), "run")
        >>> runs.claim(folder, runs.make_config({"method": "svi", "dataset": "toy"},
        ...                                     data={"name": "toy", "task": "classification"}))
        False
        >>> load_run(folder)
        Traceback (most recent call last):
        ...
        bnn_ppl.validation.InputValueError: ... holds an unfinished run (no metrics.json): ...
        >>> _ = runs.save_results(folder, samples={"w": np.zeros((2, 1))},
        ...                       predictions=np.full((2, 3, 2), 0.5), targets=np.array([0, 1, 1]),
        ...                       chains=False, task="classification")
        >>> run = load_run(folder)
        >>> run.num_draws, run.targets.tolist(), method_name(run)
        (2, [0, 1, 1], 'svi')
    """
    folder = os.fspath(folder)
    if not os.path.isdir(folder):
        raise InputValueError(
            f"run folder {folder} does not exist (pass the --out of a bnn-ppl run)."
        )
    config = read_config(folder)
    path = os.path.join(folder, METRICS)
    record = read_record(path, f"{folder} holds an unfinished run (no {METRICS}): it was "
                         "interrupted or failed. Re-run `bnn-ppl run` with the same options to "
                         "finish (or resume) it.")  # fmt: skip
    if not isinstance(record, dict):
        raise InputValueError(f"{path} is damaged: it holds no JSON object.")
    if "checksum" in record and record["checksum"] != record_checksum(record):
        raise InputValueError(
            f"{path} is damaged: its content does not match its checksum. Re-run `bnn-ppl run` "
            "with the same options to write the folder again."
        )
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
    verify_files(folder, files)
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


def verify_files(folder: str, files: Mapping[str, Any]) -> None:
    """Check every file of ``files`` (name -> SHA-256, ``metrics.json``'s) in ``folder``.

    Raises:
        InputValueError: a name that is not a plain file name, a missing file, or one whose
            SHA-256 differs (naming it: damaged, or rewritten by a run in progress).
    """
    for name, digest in files.items():
        if not isinstance(name, str) or os.path.basename(name) != name or name in ("", ".", ".."):
            raise InputValueError(f"{folder}/{METRICS} is damaged: it lists the file {name!r}.")
        target = os.path.join(folder, name)
        if not os.path.isfile(target):
            raise InputValueError(f"{folder}: {name} is missing.")
        if not isinstance(digest, str) or sha256_file(target) != digest:
            raise InputValueError(
                f"{target}: checksum mismatch (its SHA-256 differs from the one in {METRICS}): "
                "the file is damaged, or a run in progress is rewriting the folder. Re-run "
                "`bnn-ppl run` with the same options to write it again."
            )


def load_posterior(folder: str | os.PathLike) -> Any:
    """The :class:`~bnn_ppl.Posterior` of a finished run folder (``posterior.nc``), after
    :func:`load_run`'s checks of every file of the folder, and :meth:`Posterior.load`'s own.

    Raises:
        InputValueError: as :func:`load_run`, or the folder has no ``posterior.nc``.
    """
    run = load_run(folder)
    if POSTERIOR not in run.record["files"]:
        raise InputValueError(f"{run.path} holds no {POSTERIOR} (its record does not list one).")
    return Posterior.load(os.path.join(run.path, POSTERIOR))


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

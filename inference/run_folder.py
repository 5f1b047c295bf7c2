"""Fit into a run folder: claim the folder, :func:`~bnn_ppl.inference.fit`, write the results."""

# Notes:
#
# What ``bnn-ppl run`` writes and ``bnn-ppl evaluate`` reads (:mod:`bnn_ppl.runs`), from a
# script: :func:`fit_run` claims ``folder`` for the run's configuration (the data set's name, the
# method's config, the seed, the caller's model options and the data's fingerprint) before
# anything is compiled, fits, and saves the :class:`~bnn_ppl.Posterior` with its test metrics
# (:func:`bnn_ppl.runs.save_posterior`: the metric suite of :mod:`bnn_ppl.metrics.suite`) and a
# per-chain sampler summary (:func:`chain_summary`) and, for a reference run
# (:class:`~bnn_ppl.config.ReferenceHMCConfig`), its convergence figures
# (:func:`convergence_summary`, printed as a table row by :func:`convergence_cells`); a fit
# that diverges leaves a ``metrics.json`` saying so (``"status": "diverged"`` and the reason)
# and its error propagates.
# The examples write one folder per fitted method or setting this way, so every number they print
# can be recomputed from a folder.

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from bnn_ppl import runs
from bnn_ppl.config import Config
from bnn_ppl.data import Dataset
from bnn_ppl.divergence import DivergedError
from bnn_ppl.inference.fitting import fit
from bnn_ppl.model import BNN
from bnn_ppl.posterior import Posterior
from bnn_ppl.types import PRNGKey
from bnn_ppl.validation import InputTypeError, check_key

__all__ = ["CONVERGENCE_HEADER", "chain_summary", "convergence_cells", "convergence_summary",
           "fit_run"]  # fmt: skip

CONVERGENCE_FIELDS = ("converged", "stop_reason", "rhat_max", "share_rhat_ok", "ess_bulk_min",
                      "draws", "gradients", "seconds")  # fmt: skip
"""What :func:`convergence_summary` keeps of a reference run's last convergence check."""

CONVERGENCE_HEADER = (f"{'converged':>10}{'R-hat max':>10}{'<=1.01':>8}{'ESS min':>9}"
                      f"{'draws':>7}{'gradients':>11}{'time s':>8}{'needs':>10}")  # fmt: skip
"""The column heads of :func:`convergence_cells`."""


def convergence_summary(posterior: Posterior) -> dict[str, Any] | None:
    """A reference run's convergence figures (its last check,
    :mod:`~bnn_ppl.inference.reference.recipe`):
    ``converged``, ``stop_reason``, ``rhat_max``, ``share_rhat_ok`` (of the test quantities,
    R-hat <= the threshold), ``ess_bulk_min``, ``draws`` per chain, ``gradients`` (leapfrog
    steps after warmup, all chains), ``seconds`` and ``draws_needed`` (per chain, projected:
    :mod:`~bnn_ppl.inference.reference.stopping`; ``None`` when converged or not projected); a run
    stopped in warmup has ``None`` for the figures. ``None`` for a posterior of another method.

    Example:
        >>> import numpy as np
        >>> from bnn_ppl import Posterior
        >>> post = Posterior("reference_hmc", {"w": np.zeros((2, 4))}, config={"convergence": {
        ...     "converged": False, "stop_reason": "max_draws", "rhat_max": 1.2, "draws": 4}})
        >>> summary = convergence_summary(post)
        >>> summary["converged"], summary["draws"], summary["ess_bulk_min"]
        (False, 4, None)
        >>> convergence_cells(summary).split()[:2]
        ['no', '1.200']
    """
    record = posterior.config.get("convergence")
    if not isinstance(record, Mapping):
        return None
    projection = record.get("projection") or {}
    return {k: record.get(k) for k in CONVERGENCE_FIELDS} | {
        "draws_needed": projection.get("draws_needed")}


def convergence_cells(summary: Mapping[str, Any]) -> str:
    """:func:`convergence_summary` as one row under :data:`CONVERGENCE_HEADER` (``-`` for a
    figure a run stopped in warmup does not have)."""

    def cell(key: str, form: str, width: int) -> str:
        value = summary.get(key)
        return f"{'-' if value is None else format(value, form):>{width}}"

    return (f"{'yes' if summary.get('converged') else 'no':>10}{cell('rhat_max', '.3f', 10)}"
            f"{cell('share_rhat_ok', '.1%', 8)}{cell('ess_bulk_min', '.0f', 9)}"
            f"{cell('draws', 'd', 7)}{cell('gradients', ',d', 11)}"
            f"{cell('seconds', '.0f', 8)}{cell('draws_needed', ',.0f', 10)}")  # fmt: skip


def chain_summary(posterior: Posterior) -> list[dict[str, Any]]:
    """Per chain of a Markov-chain Posterior: mean ``accept_prob``, ``divergences``, the final
    ``step_size`` and (where recorded) mean leapfrog ``num_steps``: the rows ``bnn-ppl
    evaluate`` prints. ``[]`` for independent draws (SVI, ensembles) or a Posterior without
    those sample statistics."""
    stats = posterior.sample_stats
    if not posterior.is_markov or not {"acceptance_rate", "diverging", "step_size"} <= set(stats):
        return []
    rows = []
    for c in range(posterior.num_chains):
        row: dict[str, Any] = {
            "chain": c,
            "accept_prob": float(np.mean(stats["acceptance_rate"][c])),
            "divergences": int(np.sum(stats["diverging"][c])),
            "step_size": float(np.ravel(stats["step_size"][c])[-1]),
        }
        if "n_steps" in stats:
            row["num_steps"] = float(np.mean(stats["n_steps"][c]))
        rows.append(row)
    return rows


def fit_run(
    folder: str | os.PathLike,
    model: BNN,
    data: Dataset,
    config: Config,
    rng_key: PRNGKey,
    *,
    options: Mapping[str, Any] | None = None,
    split: int | None = None,
    extra: Mapping[str, Any] | None = None,
    checkpoint_dir: str | os.PathLike | None = None,
) -> tuple[Posterior, dict[str, Any]]:
    """Claim ``folder``, fit ``model`` to ``data`` with ``config``, and write the run's results.

    Args:
        folder: the run folder (created; a folder of the same run is reused, one of another
            run is refused before anything is fitted).
        model: a :class:`~bnn_ppl.BNN`.
        data: a :class:`~bnn_ppl.data.Dataset`: fitted to its training split, evaluated on its
            test split (regression metrics in original units, ``data.y_std``).
        config: one of :mod:`bnn_ppl.config`'s dataclasses.
        rng_key: ``jax.random.key(seed)``; recorded, so that a rerun with another key is refused.
        options: the model's options as JSON-able values (width, prior, temperature, ...),
            recorded in ``config.json`` beside the config's fields.
        split: the data set's split number, where it has several.
        extra: more JSON-able entries for ``metrics.json``; ``wall_time_s`` and ``summary``
            (``{"chains": chain_summary(posterior)}``, and for SG-MCMC ``"accuracy"``: the
            :func:`~bnn_ppl.inference.sgmcmc.accuracy.accuracy_summary` of the run) are added.
        checkpoint_dir: passed to :func:`~bnn_ppl.inference.fit` (MCMC, SG-MCMC and reference
            runs): the fit commits its segments there and a rerun of the same call resumes
            from them; ``wall_time_s`` is then the resumed call's time.

    Returns:
        The fitted :class:`~bnn_ppl.Posterior` and the ``metrics.json`` record (its test metrics
        under ``"metrics"``).

    Raises:
        TypeError: ``data`` is not a Dataset.
        ValueError: ``folder`` holds another run (every difference is named), or what
            :func:`~bnn_ppl.inference.fit` refuses.
        DivergedError: the fit's loss or draws became NaN/inf; ``metrics.json`` then records
            ``"status": "diverged"`` and the reason (:func:`bnn_ppl.runs.save_diverged`).

    Example:
        >>> import os, tempfile
        >>> import jax
        >>> import bnn_ppl as bp
        >>> from bnn_ppl.config import MAPConfig
        >>> from bnn_ppl.inference import fit_run
        >>> from bnn_ppl.models import MLP
        >>> data = bp.data.load("gap1d", num_train=20)
        >>> model = bp.BNN(MLP(hidden=(), out=1), bp.priors.Normal(1.0),
        ...     bp.likelihoods.Gaussian(0.5))
        >>> folder = os.path.join(tempfile.mkdtemp(), "map")
        >>> post, record = fit_run(folder, model, data, MAPConfig(num_steps=50), jax.random.key(0),
        ...                        options={"width": 0})
        >>> sorted(record["metrics"]), record["method"], bp.runs.load_run(folder).num_draws
        (['mean_sq_std_residual', 'nll', 'rmse'], 'map', 1)
    """
    if not isinstance(data, Dataset):
        raise InputTypeError(
            f"data must be a bp.data.Dataset (a run folder records its test set), got "
            f"{type(data).__name__}."
        )
    key = check_key("rng_key", rng_key)
    typed = jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key)
    arguments = {
        "dataset": data.name,
        **config.to_dict(),
        "rng_key": np.asarray(jax.random.key_data(key) if typed else key).tolist(),
        **dict(options or {}),
    }
    runs.claim(folder, runs.make_config(arguments, data=runs.data_identity(data, split=split)))
    start = time.perf_counter()
    try:
        post = fit(model, data, config, key, checkpoint_dir=checkpoint_dir)
    except DivergedError as err:  # the claimed folder says so, rather than look unfinished
        wall = time.perf_counter() - start
        runs.save_diverged(folder, config.method, str(err), extra={"wall_time_s": wall})
        raise
    wall = time.perf_counter() - start
    summary = {"chains": chain_summary(post)}
    convergence = convergence_summary(post)
    if convergence is not None:  # a reference run: whether, and how far, it converged
        summary["convergence"] = convergence
    if "accuracy" in post.config:  # SG-MCMC: what accuracy_summary found
        summary["accuracy"] = post.config["accuracy"]
    record = runs.save_posterior(
        folder,
        post,
        y_std=float(data.y_std),
        extra={"wall_time_s": wall, "summary": summary, **dict(extra or {})},
    )
    return post, record

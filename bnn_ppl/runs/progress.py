"""Running metrics: the curves a researcher looks at first, as lines of ``progress.jsonl``."""

# Notes:
#
# For a chain method (HMC, NUTS, SG-MCMC) a point after ``t`` draws per chain holds the test
# metrics of the Bayesian model average over the first ``t`` draws of every chain
# (:func:`bnn_ppl.metrics.suite.predictive_metrics`: accuracy, NLL, ECE and Brier score for a
# classifier, RMSE and NLL for regression, each prefixed ``test_``) and the sampler's health over
# those draws: mean acceptance probability, divergences, gradient evaluations per chain (leapfrog
# steps of the kept draws, ``None`` with ``thinning > 1``; SG-MCMC: one minibatch gradient per
# step, counted in full-batch gradients, ``cycle_length x batch rows / training rows`` per draw, as
# :func:`bnn_ppl.metrics.efficiency.full_batch_gradients` counts them). For an
# optimiser (SVI, MAP, deep ensembles) a point is the loss at an optimisation step (the mean over
# an ensemble's members, with each member's loss in ``member_losses``).
#
# Everything here is pure: :func:`chain_point` computes one point from arrays, and
# :func:`running_metrics` the whole curve from a finished :class:`~bnn_ppl.Posterior` (its
# ``predictions``, ``observed["y_test"]``, ``sample_stats`` and ``trace``), so every run folder can
# write the same file. :func:`~bnn_ppl.inference.fit` with ``checkpoint_dir`` writes the chain
# points after each committed segment as it runs, at its end or every ``progress_every`` draws
# (``<checkpoint_dir>/progress.jsonl``, via :func:`chain_point`; its lines add ``segment`` and
# ``wall_seconds``, after a first line of warmup's cost: :mod:`bnn_ppl.inference.checkpoint.fit`).

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from bnn_ppl import validation
from bnn_ppl.likelihoods import prediction_from_fields
from bnn_ppl.metrics.efficiency import sgmcmc_gradients_per_draw
from bnn_ppl.metrics.suite import prefix_metrics
from bnn_ppl.posterior import Posterior
from bnn_ppl.validation import InputTypeError

__all__ = ["chain_point", "chain_points", "running_metrics", "loss_points"]


def _prefix_test_metrics(
    predictions: Mapping[str, np.ndarray], y_test: Any, points: list[int], y_std: float
) -> list[dict[str, float]]:
    """The ``test_*`` metrics of the BMA of the first ``t`` draws per chain, for each ``t`` in
    ``points``, in one pass (:func:`bnn_ppl.metrics.suite.prefix_metrics`: no program is
    compiled per prefix length)."""

    task = "classification" if "probs" in predictions else "regression"
    pred = prediction_from_fields(dict(predictions))
    found = prefix_metrics(pred, np.asarray(y_test), points, task=task, y_std=y_std)
    return [{f"test_{k}": v for k, v in m.items()} for m in found]


def chain_point(
    draws: int,
    predictions: Mapping[str, np.ndarray] | None = None,
    y_test: Any = None,
    sample_stats: Mapping[str, np.ndarray] | None = None,
    *,
    thinning: int = 1,
    y_std: float = 1.0,
    gradients_per_draw: float | None = None,
) -> dict[str, Any]:
    """One point of a chain method's curve after ``draws`` draws per chain.

    Args:
        draws: draws per chain so far.
        predictions: per-draw predictions at the test inputs so far, as a Posterior holds them
            (``{"probs": (chain, draw, n, K)}``, ``{"mean", "scale"}``, ...); with ``y_test``
            they give the ``test_*`` metrics of their BMA.
        y_test: the test targets.
        sample_stats: ArviZ-named statistics so far, ``(chain, draw)`` each
            (``acceptance_rate``, ``diverging``, ``n_steps``).
        thinning: the run's thinning; gradient evaluations are known only when it is 1.
        y_std: the targets' scale, to report regression metrics in original units.
        gradients_per_draw: a kernel without ``n_steps`` whose cost per draw is known
            (SG-MCMC: :func:`bnn_ppl.metrics.efficiency.sgmcmc_gradients_per_draw`):
            ``grad_evals`` is ``draws`` times it.

    Returns:
        ``{"draws", "accept_prob", "divergences", "grad_evals", "test_...": ...}``; a quantity
        that is not known is ``None`` (no ``test_`` keys without test targets).
    """
    stats = sample_stats or {}
    accept = stats.get("acceptance_rate")
    diverging = stats.get("diverging")
    steps = stats.get("n_steps")
    grads = None if gradients_per_draw is None else float(draws * gradients_per_draw)
    if steps is not None:
        grads = None if thinning != 1 else float(np.sum(steps, dtype=np.float64) / len(steps))
    point: dict[str, Any] = {
        "draws": int(draws),
        "accept_prob": None if accept is None else float(np.mean(accept)),
        "divergences": None if diverging is None else int(np.sum(diverging)),
        "grad_evals": grads,
    }
    if predictions and y_test is not None:
        so_far = next(iter(predictions.values())).shape[1]  # all the draws given
        point |= _prefix_test_metrics(predictions, y_test, [so_far], y_std)[0]
    return point


def chain_points(
    draws: list[int],
    predictions: Mapping[str, np.ndarray] | None = None,
    y_test: Any = None,
    sample_stats: Mapping[str, np.ndarray] | None = None,
    *,
    thinning: int = 1,
    y_std: float = 1.0,
    gradients_per_draw: float | None = None,
) -> list[dict[str, Any]]:
    """:func:`chain_point` after each of ``draws`` (increasing) draws per chain, from arrays
    holding at least the last of them (each point reads the first ``t`` draws of every chain);
    the test metrics of all points in one pass over the predictions."""
    tests: list[dict[str, float]] = [{} for _ in draws]
    if predictions and y_test is not None:
        tests = _prefix_test_metrics(predictions, y_test, draws, y_std)
    stats = sample_stats or {}
    return [
        chain_point(t, sample_stats={k: v[:, :t] for k, v in stats.items()},
                    thinning=thinning, gradients_per_draw=gradients_per_draw) | test
        for t, test in zip(draws, tests, strict=True)
    ]  # fmt: skip


def _posterior_gradients_per_draw(posterior: Posterior) -> float | None:
    c, y = posterior.config, posterior.observed.get("y")
    if "n_steps" in posterior.sample_stats or "cycle_length" not in c or y is None:
        return None
    return sgmcmc_gradients_per_draw(c["cycle_length"], c.get("batch_size"), len(y))


def _points(length: int, every: int | None) -> list[int]:
    """1-based positions: every ``every``-th and the last (default: about 100 points)."""
    step = max(1, math.ceil(length / 100)) if every is None else every
    return sorted({*range(step, length + 1, step), length})


def loss_points(trace: Mapping[str, np.ndarray], every: int | None = None) -> list[dict]:
    """The loss curve of an optimiser's ``trace["loss"]`` (``(steps,)`` or
    ``(members, steps)``): ``{"step", "loss"[, "member_losses"]}`` every ``every`` steps."""
    loss = np.asarray(trace["loss"], np.float64)
    loss = loss[None] if loss.ndim == 1 else loss
    out = []
    for step in _points(loss.shape[1], every):
        point: dict[str, Any] = {"step": step, "loss": float(loss[:, step - 1].mean())}
        if loss.shape[0] > 1:
            point["member_losses"] = [float(v) for v in loss[:, step - 1]]
        out.append(point)
    return out


def running_metrics(
    posterior: Posterior, every: int | None = None, *, y_std: float = 1.0
) -> list[dict[str, Any]]:
    """The running metrics of a finished ``posterior``, one dict per point (the lines of
    ``progress.jsonl``).

    A Posterior with an optimisation ``trace`` (SVI, MAP, ensembles) gives its loss curve
    (:func:`loss_points`); any other gives :func:`chain_point` after every ``every`` draws per
    chain (default: about 100 points; the last draw is always a point), with the cumulative
    BMA's test metrics when it holds ``predictions`` and ``observed["y_test"]``. The last point's
    metrics are those of all draws.

    Example:
        >>> import numpy as np
        >>> from bnn_ppl.posterior import Posterior
        >>> from bnn_ppl.runs.progress import running_metrics
        >>> probs = np.full((2, 4, 3, 2), 0.5); probs[..., 1, 0] = 0.9; probs[..., 1, 1] = 0.1
        >>> post = Posterior("hmc", {"w": np.zeros((2, 4))}, predictions={"probs": probs},
        ...                  observed={"y_test": np.array([0, 0, 1])})
        >>> [(p["draws"], round(p["test_accuracy"], 3)) for p in running_metrics(post, every=2)]
        [(2, 0.667), (4, 0.667)]
    """
    if not isinstance(posterior, Posterior):
        raise InputTypeError(f"posterior must be a Posterior, got {type(posterior).__name__}.")
    if every is not None:
        every = validation.check_int("every", every)
    if "loss" in posterior.trace:
        return loss_points(posterior.trace, every)
    y_test = posterior.observed.get("y_test")
    thinning = posterior.config.get("thinning", 1)
    per_draw = _posterior_gradients_per_draw(posterior)
    return chain_points(
        _points(posterior.num_draws, every),
        posterior.predictions,
        y_test,
        posterior.sample_stats,
        thinning=thinning if isinstance(thinning, int) else 1,
        y_std=y_std,
        gradients_per_draw=per_draw,
    )

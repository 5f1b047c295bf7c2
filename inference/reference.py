"""Reference posteriors: HMC run until its test predictions have demonstrably converged.

:func:`reference_hmc` is the recipe of issue 19, in the spirit of the HMC reference
predictions Izmailov et al. (2021) published:

* **Chains.** ``num_chains`` (default 4) chains of full-batch HMC, each started from an
  independent draw from the prior. Prior draws are over-dispersed relative to the posterior,
  which is what R-hat needs to be meaningful (Gelman & Rubin); starting every chain at a MAP
  estimate plus jitter would let chains that never left one mode agree and pass.
* **Kernel.** :func:`~bnn_ppl.inference.hmc` with its step size adapted in warmup (dual
  averaging to acceptance 0.8) and a fixed trajectory length: Izmailov et al.'s
  (π/2)·σ_prior·√T (:func:`~bnn_ppl.inference.default_trajectory_length`), a quarter period
  of the prior with an identity mass matrix. ``mass_matrix="diagonal"`` (the default) also
  adapts a diagonal mass matrix and keeps the trajectory a quarter period *in that metric*
  (π/2 once it holds the posterior's variances); ``"identity"`` is Izmailov et al. exactly.
  ``"dense"`` adapts the full covariance (NumPyro's ``dense_mass=True``): a correlated posterior
  (an MLP on a small UCI set) needs it, where the diagonal metric leaves the step size at its
  floor and chains stuck. ``benchmarks/reference_mass_matrix.py`` and the stored UCI references
  measured them (README, "Reference posteriors").
* **Stopping rule.** After warmup the chains are sampled in segments of ``segment_draws``
  draws (NumPyro's ``MCMC`` continued from its ``last_state``: nothing is re-adapted). After
  every segment the checked quantity (:mod:`bnn_ppl.function_values`: by default every
  softmax probability, or the predictive mean, at ``x_test``) is evaluated for the new draws,
  and the rank-normalised split R-hat and bulk ESS (Vehtari et al. 2021, through ArviZ) of all
  draws so far are computed for each test quantity. The run has converged when at least
  ``min_share`` (0.99) of them have R-hat <= ``max_rhat`` (1.01) *and* at least ``min_share``
  have bulk ESS >= ``min_ess`` (400). Quantities that take one value in every draw of every
  chain (a probability that is exactly 0 or 1 in float32) have no R-hat; they are counted as
  converged and reported (``constant``). Otherwise sampling continues until the budget ends:
  ``max_draws`` draws per chain, or ``max_seconds`` of wall time (compilation included,
  checked between segments, so a run may pass it by up to one segment).
* **Memory.** Every draw and the checked quantity for every draw stay in memory
  (``chains x draws x n x K`` float32 for the probabilities: 576 MB for 4 chains x 10,000 draws
  on digits' 360 test rows); the segments are not written to disk, so a killed run starts again
  (:func:`~bnn_ppl.inference.fit` with ``checkpoint_dir`` is the checkpointed path for
  fixed-length runs).
* **Honesty.** The result (:class:`ReferenceRun`) carries every check's figures and says why
  it stopped; a run that ran out of budget has ``converged=False`` and raises a
  :class:`ReferenceNotConvergedWarning` with its last figures. It never reports convergence
  it did not reach. The record also holds each chain's log-posterior level
  (:func:`bnn_ppl.chain_levels.chain_levels`: mean ``lp``, its gap below the best chain and
  its drift between the halves of the draws), and the warning names chains that sit apart or
  still drift (chains tens of nats apart are in different modes or not yet in the typical
  set: more draws alone will not converge them).

Example:
    >>> import warnings
    >>> import jax, numpy as np
    >>> import bnn_ppl as bp
    >>> from bnn_ppl.models import MLP
    >>> from bnn_ppl.inference import reference_hmc, ReferenceNotConvergedWarning
    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(size=(30, 2)).astype(np.float32)
    >>> y = (x @ np.array([0.8, -0.5]) + 0.5 * rng.normal(size=30)).astype(np.float32)
    >>> model = bp.BNN(MLP(hidden=(), out=1), bp.priors.Normal(1.0), bp.likelihoods.Gaussian(0.5))
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("error", ReferenceNotConvergedWarning)
    ...     run = reference_hmc(model, (x, y), x_test=x[:5], rng_key=jax.random.key(0),
    ...                         num_warmup=200, segment_draws=200)
    >>> run.converged, run.stop_reason, run.posterior.num_chains
    (True, 'converged', 4)
    >>> run.checks[-1].share_rhat_ok >= 0.99 and run.checks[-1].ess_bulk_min >= 400
    True
"""

from __future__ import annotations

import dataclasses
import math
import time
import warnings
from typing import Any, NamedTuple

import numpy as np

from bnn_ppl import validation
from bnn_ppl.chain_levels import chain_levels, describe_levels
from bnn_ppl.config import ReferenceHMCConfig
from bnn_ppl.data import Dataset
from bnn_ppl.diagnostics import convergence
from bnn_ppl.function_values import check_quantity, default_quantity, function_values
from bnn_ppl.inference.hmc_drivers import DEFAULT_EXTRA_FIELDS, hmc
from bnn_ppl.inference.to_posterior import from_mcmc
from bnn_ppl.model import BNN
from bnn_ppl.posterior import Posterior
from bnn_ppl.types import PRNGKey
from bnn_ppl.validation import InputTypeError, InputValueError

__all__ = [
    "ConvergenceCheck",
    "ReferenceNotConvergedWarning",
    "ReferenceRun",
    "check_convergence",
    "reference_hmc",
]


class ReferenceNotConvergedWarning(UserWarning):
    """A reference run whose budget ended before its stopping rule was met."""


class ConvergenceCheck(NamedTuple):
    """The figures of one check, after segment ``segment`` (1-based).

    ``draws`` per chain and ``gradients`` (leapfrog steps of the sampling phase, all chains)
    so far; ``seconds`` of wall time since the start; ``size`` test quantities, of which
    ``constant`` take a single value everywhere; ``share_rhat_ok`` / ``share_ess_ok``: the
    share with R-hat <= the threshold / bulk ESS >= the threshold; ``rhat_max`` (NaN when every
    quantity is constant), ``ess_bulk_min`` and ``ess_bulk_median`` over the others.
    """

    segment: int
    draws: int
    gradients: int
    seconds: float
    size: int
    constant: int
    rhat_max: float
    share_rhat_ok: float
    ess_bulk_min: float
    ess_bulk_median: float
    share_ess_ok: float
    converged: bool

    def describe(self) -> str:
        """One line of text."""
        return (
            f"segment {self.segment}: {self.draws} draws/chain, R-hat <= threshold for "
            f"{self.share_rhat_ok:.1%} of {self.size} (max {self.rhat_max:.3f}), bulk ESS >= "
            f"threshold for {self.share_ess_ok:.1%} (min {self.ess_bulk_min:.0f}, median "
            f"{self.ess_bulk_median:.0f}), {self.gradients} gradients, {self.seconds:.0f} s"
        )


class ReferenceRun(NamedTuple):
    """What :func:`reference_hmc` returns.

    ``posterior``: every post-warmup draw, its sample statistics and ``config`` (the settings,
    plus ``"convergence"``: the last check, ``converged``, ``stop_reason``, every check,
    ``chain_levels`` and ``chains_apart``, see the module doc);
    ``values``: the checked ``quantity`` at ``x_test``, ``(chains, draws, n, ...)``;
    ``checks``: one :class:`ConvergenceCheck` per segment; ``converged``; ``stop_reason``:
    ``"converged"``, ``"max_draws"`` or ``"max_seconds"``.
    """

    posterior: Posterior
    values: np.ndarray
    quantity: str
    checks: tuple[ConvergenceCheck, ...]
    converged: bool
    stop_reason: str

    @property
    def segments(self) -> int:
        return len(self.checks)

    @property
    def draws(self) -> int:
        """Post-warmup draws per chain."""
        return self.checks[-1].draws

    @property
    def seconds(self) -> float:
        return self.checks[-1].seconds

    @property
    def gradients(self) -> int:
        return self.checks[-1].gradients


def check_convergence(
    values: Any, *, max_rhat: float = 1.01, min_share: float = 0.99, min_ess: float = 400.0
) -> dict[str, Any]:
    """The stopping rule on ``(chains, draws, ...)`` values: the :class:`ConvergenceCheck`
    fields ``size``, ``constant``, ``rhat_max``, ``share_rhat_ok``, ``ess_bulk_min``,
    ``ess_bulk_median``, ``share_ess_ok`` and ``converged`` (see the module doc).

    Example:
        >>> import numpy as np
        >>> f = np.random.default_rng(0).normal(size=(4, 500, 10))
        >>> r = check_convergence(f)
        >>> r["converged"], r["size"]
        (True, 10)
        >>> f[0] += 1.0  # one chain elsewhere
        >>> check_convergence(f)["converged"]
        False
    """
    c = ReferenceHMCConfig(max_rhat=max_rhat, min_share=min_share, min_ess=min_ess)
    a = np.asarray(values)
    flat = a.reshape(*a.shape[:2], -1)
    constant = np.all(flat == flat[:1, :1], axis=(0, 1))
    conv = convergence({"f": flat[..., ~constant]}) if not constant.all() else None
    rhat = conv.rhat["f"] if conv else np.zeros(0)
    ess = conv.ess_bulk["f"] if conv else np.zeros(0)
    size = flat.shape[-1]
    # NaN R-hat or ESS (not computable) fails both comparisons: never counted as converged
    share_rhat = (int(np.sum(rhat <= c.max_rhat)) + int(constant.sum())) / size
    share_ess = (int(np.sum(ess >= c.min_ess)) + int(constant.sum())) / size
    return {
        "size": size,
        "constant": int(constant.sum()),
        "rhat_max": float(np.max(rhat)) if rhat.size else math.nan,
        "share_rhat_ok": share_rhat,
        "ess_bulk_min": float(np.min(ess)) if ess.size else math.nan,
        "ess_bulk_median": float(np.median(ess)) if ess.size else math.nan,
        "share_ess_ok": share_ess,
        "converged": share_rhat >= c.min_share and share_ess >= c.min_share,
    }


def _settings(config: Any, settings: dict[str, Any]) -> ReferenceHMCConfig:
    if config is None:
        config = ReferenceHMCConfig()
    elif not isinstance(config, ReferenceHMCConfig):
        raise InputTypeError(f"config must be a ReferenceHMCConfig, got {type(config).__name__}.")
    fields = {f.name for f in dataclasses.fields(ReferenceHMCConfig)}
    unknown = sorted(set(settings) - fields)
    if unknown:
        raise InputTypeError(
            f"reference_hmc got unexpected argument(s) {unknown}; its settings are "
            f"{sorted(fields)} (the fields of ReferenceHMCConfig)."
        )
    return dataclasses.replace(config, **settings)


def _json(v: float) -> float | None:
    return v if math.isfinite(v) else None


def reference_hmc(
    model: BNN,
    data: Any,
    *,
    x_test: Any,
    y_test: Any = None,
    rng_key: PRNGKey | None = None,
    config: ReferenceHMCConfig | None = None,
    **settings: Any,
) -> ReferenceRun:
    """Run HMC in segments until the test predictions converge or the budget ends.

    Args:
        model: a :class:`~bnn_ppl.BNN`.
        data: ``(x, y)`` or a :class:`~bnn_ppl.data.Dataset` (its training split).
        x_test: ``(n, ...)`` inputs at which convergence is checked.
        y_test: ``(n,)`` labels, needed for ``quantity="p_true"`` only.
        rng_key: ``jax.random.key(seed)`` (default ``key(0)``); the same key, data and settings
            give the same draws.
        config: a :class:`~bnn_ppl.config.ReferenceHMCConfig` (default: its defaults).
        **settings: any of its fields, overriding ``config``: ``num_chains`` (4),
            ``num_warmup`` (500), ``segment_draws`` (200), ``max_draws`` (10000 per chain),
            ``max_seconds`` (None), ``max_rhat`` (1.01), ``min_share`` (0.99), ``min_ess``
            (400), ``quantity``, ``mass_matrix`` ("diagonal", "dense" or "identity"),
            ``trajectory_length``, ``step_size``, ``target_accept_prob``, ``max_num_steps``,
            ``chunk_size``.

    Returns:
        A :class:`ReferenceRun`; ``converged`` is ``True`` only if the last check met the
        stopping rule. A run that ran out of budget first also warns
        (:class:`ReferenceNotConvergedWarning`).

    Raises:
        InputError: a bad setting (a threshold out of range, a budget <= 0, ...), data or
            ``x_test`` of the wrong shape, ``p_true`` without ``y_test`` - all before anything
            is compiled.
    """
    c = _settings(config, settings)
    if not isinstance(model, BNN):
        raise InputTypeError(f"model must be a bp.BNN, got {type(model).__name__}.")
    if isinstance(data, Dataset):
        data = (data.x_train, data.y_train)
    if not isinstance(data, tuple) or len(data) != 2:
        raise InputTypeError("data must be a tuple (x, y) or a bp.data.Dataset.")
    x, y = model.check_data(*data)
    x_test = model.check_inputs(x_test, "x_test")
    if x_test.shape[1:] != x.shape[1:]:
        raise InputValueError(
            f"x_test has rows of shape {x_test.shape[1:]} but x has {x.shape[1:]}; the test "
            "inputs must look like the training inputs."
        )
    quantity = check_quantity(model, c.quantity or default_quantity(model), y_test)
    if y_test is not None:
        y_test = validation.as_array("y_test", y_test)
        validation.check_same_length("x_test", x_test, "y_test", y_test)
        model.likelihood.check_targets(y_test, model.output_shape(x_test))
    key = validation.check_key("rng_key", rng_key) if rng_key is not None else None

    start = time.monotonic()
    mcmc = hmc(
        model, x, y, rng_key=key, num_warmup=c.num_warmup,
        num_samples=min(c.segment_draws, c.max_draws), num_chains=c.num_chains,
        trajectory_length=c.trajectory_length, step_size=c.step_size,
        adapt_mass_matrix=c.mass_matrix != "identity", dense_mass=c.mass_matrix == "dense",
        target_accept_prob=c.target_accept_prob,
        max_num_steps=c.max_num_steps, chunk_size=c.chunk_size, init_method="prior",
    )  # fmt: skip
    pot = mcmc.sampler.potential
    parts: list[Posterior] = []
    values: list[np.ndarray] = []
    checks: list[ConvergenceCheck] = []
    draws = gradients = 0
    while True:
        part = from_mcmc(mcmc, method=ReferenceHMCConfig.method)
        parts.append(part)
        values.append(function_values(model, part.samples, x_test, quantity, y=y_test,
                                      chunk_size=c.chunk_size))  # fmt: skip
        draws += part.num_draws
        gradients += int(np.sum(part.sample_stats["n_steps"]))
        figures = check_convergence(
            np.concatenate(values, axis=1),
            max_rhat=c.max_rhat, min_share=c.min_share, min_ess=c.min_ess,
        )  # fmt: skip
        seconds = time.monotonic() - start
        checks.append(ConvergenceCheck(len(checks) + 1, draws, gradients, seconds, **figures))
        if figures["converged"]:
            reason = "converged"
        elif draws >= c.max_draws:
            reason = "max_draws"
        elif c.max_seconds is not None and seconds >= c.max_seconds:
            reason = "max_seconds"
        else:  # continue the chains where they stopped, with the adapted step size and metric
            mcmc.num_samples = min(c.segment_draws, c.max_draws - draws)
            mcmc.post_warmup_state = mcmc.last_state
            mcmc.run(mcmc.post_warmup_state.rng_key, *pot.args, extra_fields=DEFAULT_EXTRA_FIELDS)
            continue
        break

    last = checks[-1]
    lp = np.concatenate([p.sample_stats["lp"] for p in parts], axis=1)
    levels = chain_levels(lp)
    apart = describe_levels(levels)
    record = {
        **{k: (_json(v) if isinstance(v, float) else v) for k, v in last._asdict().items()},
        "stop_reason": reason,
        "chain_levels": [c._asdict() for c in levels],
        "chains_apart": apart,
        "quantity": quantity,
        "trajectory_length_used": float(np.mean(np.asarray(mcmc.last_state.trajectory_length))),
        "checks": [{k: (_json(v) if isinstance(v, float) else v) for k, v in ch._asdict().items()}
                   for ch in checks],
    }  # fmt: skip
    posterior = Posterior(
        ReferenceHMCConfig.method,
        {k: np.concatenate([p.samples[k] for p in parts], axis=1) for k in parts[0].samples},
        {k: np.concatenate([p.sample_stats[k] for p in parts], axis=1)
         for k in parts[0].sample_stats},
        config={**c.to_dict(), "kernel": "HMC", "convergence": record},
    )  # fmt: skip
    if not last.converged:
        warnings.warn(
            ReferenceNotConvergedWarning(
                f"reference_hmc stopped at its budget ({reason}) before converging: "
                f"{last.describe()}; needed R-hat <= {c.max_rhat} and bulk ESS >= {c.min_ess} "
                f"for {c.min_share:.0%} of the {quantity!r} values. "
                + (f"The chains are not at one level: {apart} (not samples of one "
                   "distribution; more draws will not fix that - see README, 'Reference "
                   "posteriors')." if apart else "Raise max_draws / max_seconds.")
            ),
            stacklevel=2,
        )
    return ReferenceRun(posterior, np.concatenate(values, axis=1), quantity, tuple(checks),
                        last.converged, reason)  # fmt: skip

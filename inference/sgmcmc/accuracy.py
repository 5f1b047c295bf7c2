"""Accuracy of SG-MCMC runs: warnings for settings known to be inaccurate, and a check of
finished runs.
"""

# Notes:
#
# Settings known to be inaccurate warn at construction (:func:`warn_minibatch_settings`, called by
# each kernel's ``__init__``), and :func:`check_accuracy` reads the statistics of every sampling
# step of a finished run (:mod:`bnn_ppl.inference.sgmcmc.kernel`: not only the kept draws, which a
# cyclical schedule takes where the step size is near zero) through the kernel's
# ``accuracy_problems``: the gradient noise's share of the heat and how often the friction hit its
# cap, the mean kinetic temperature of SGHMC, SGNHT and ATMC, SGNHT's Euler bias ``hξ/2`` and
# ATMC's ``(βh)²/12``. Both warn with
# :class:`SGMCMCAccuracyWarning`. :func:`accuracy_summary` is the JSON-able record of the same
# check that :func:`~bnn_ppl.inference.fit` keeps in an SG-MCMC Posterior's
# ``config["accuracy"]`` (and ``fit_run`` in ``metrics.json``'s ``summary``).

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from bnn_ppl.diagnostics.rank import rhat_bulk_ess
from bnn_ppl.inference.sgmcmc.kernel import RunStats, SGMCMCKernel, pool, pool_fields
from bnn_ppl.likelihoods import NOISE_SITE
from bnn_ppl.validation import InputTypeError

__all__ = [
    "LATENT_MAX_RHAT",
    "SGMCMCAccuracyWarning",
    "accuracy_summary",
    "check_accuracy",
    "latent_advice",
    "latent_rhat_problems",
    "stats_accuracy_summary",
    "warn_minibatch_settings",
]


class SGMCMCAccuracyWarning(UserWarning):
    """An SG-MCMC run, or its settings, cannot sample the target accurately.

    Example:
        >>> import warnings
        >>> from bnn_ppl.inference import SGHMC
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     _ = SGHMC(potential_fn=lambda z: (z ** 2).sum(), step_size=0.1)
        >>> caught  # full-batch gradients: nothing to warn about
        []
    """


def warn_minibatch_settings(kernel: SGMCMCKernel, noise_estimate: bool, thermostat: bool) -> None:
    """Construction-time warnings for minibatch settings known to be inaccurate."""
    if kernel.batch_size is None:
        return
    name = type(kernel).__name__
    if kernel.sampling == "epoch":
        warnings.warn(
            f"{name} with sampling='epoch': batches that partition each epoch make consecutive "
            "gradient errors anti-correlated, so the position receives less heat than the "
            "per-batch noise (which the noise estimate and the thermostats compensate) "
            "suggests, and the chain runs cold (ATMC on conjugate regression, 500 rows: 0.24 "
            "and 0.10 of the posterior variance with batches of 10 and 50). Use "
            "sampling='independent' (the default).",
            SGMCMCAccuracyWarning,
            stacklevel=3,
        )
    if thermostat and not noise_estimate:
        warnings.warn(
            f"{name} with noise_estimate=False: the thermostat alone needs about σ²/(2m) steps "
            "(σ² the gradient-noise variance; ~10⁴ on a 500-row regression with batches of 50) "
            "to absorb the minibatch noise, and lags a falling step size (cold cycle ends). "
            "Budget a long warmup, or use noise_estimate=True.",
            SGMCMCAccuracyWarning,
            stacklevel=3,
        )
    share = getattr(kernel, "noise_share", None)
    if noise_estimate and share is not None and share > 0.5:
        warnings.warn(
            f"{name} with noise_share={share}: where the gradient noise supplies most of the "
            "heat, its correlations (the Fisher information's, not the posterior's) shape the "
            "samples. Keep noise_share <= 0.1.",
            SGMCMCAccuracyWarning,
            stacklevel=3,
        )


LATENT_MAX_RHAT = 1.1
"""The largest R-hat over chains (rank-normalised, split) that the draws of a site outside the
network (a learned noise sd, a hierarchical prior's scale) may show before a check warns."""


def latent_rhat_problems(sampler: str, samples: Mapping[str, Any], sites: Any) -> list[str]:
    """The ``sites`` (outside the network) whose draws in ``samples`` (``(chains, draws,
    ...)``; two chains or more, four draws or more) have an R-hat above
    :data:`LATENT_MAX_RHAT`: their chains disagree, so their draws are not yet a sample of
    their posterior."""
    problems = []
    for site in sites:
        if site not in samples:
            continue
        value = np.asarray(samples[site])
        if value.ndim < 2 or value.shape[0] < 2 or value.shape[1] < 4:
            continue
        rhat = float(np.nanmax(rhat_bulk_ess(value)[0]))
        if rhat > LATENT_MAX_RHAT:
            means = ", ".join(f"{float(np.mean(v)):.3g}" for v in value)
            problems.append(
                f"{sampler}: the chains' draws of {site!r} disagree (R-hat {rhat:.2f} > "
                f"{LATENT_MAX_RHAT}; chain means {means}): its draws do not yet sample its "
                f"posterior. {latent_advice(site)}."
            )
    return problems


def latent_advice(site: str) -> str:
    """What to do about a site outside the network that SG-MCMC does not sample."""
    if site == NOISE_SITE:
        return ("Fix the noise sd (bnn_ppl.inference.heldout_noise, what `bnn-ppl run` does for "
                "SG-MCMC) or sample it with HMC or NUTS")  # fmt: skip
    return "Fix this hyper-parameter (a prior without one) or sample it with HMC or NUTS"


def check_accuracy(mcmc: Any) -> list[str]:
    """Warn (:class:`SGMCMCAccuracyWarning`) about what a finished ``numpyro.infer.MCMC`` run of
    an SG-MCMC kernel shows went wrong, and return the messages.

    Reads the statistics of every sampling step that the last state carries
    (:mod:`bnn_ppl.inference.sgmcmc.kernel`; whatever was collected or thinned, every chain): the
    gradient noise's share of the heat (``info.noise_share``: above the kernel's
    ``noise_share`` the friction hit its limit; above 1 the noise is not compensated), the mean
    kinetic temperature (1 at equilibrium) and kernel-specific biases (SGNHT's ``hξ/2``,
    ATMC's ``(βh)²/12``); and, on a BNN's potential with two chains or more, the R-hat of the
    draws of each site outside the network (:func:`latent_rhat_problems`).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from numpyro.infer import MCMC
        >>> from bnn_ppl.inference import SGNHT, check_accuracy
        >>> mcmc = MCMC(SGNHT(potential_fn=lambda z: 0.5 * jnp.sum(z ** 2), step_size=0.5),
        ...             num_warmup=10, num_samples=100, progress_bar=False)
        >>> mcmc.run(jax.random.key(0), init_params=jnp.zeros(2))
        >>> import warnings
        >>> with warnings.catch_warnings(record=True):
        ...     warnings.simplefilter("always")
        ...     print(check_accuracy(mcmc)[-1][:40])
        SGNHT: the Euler friction makes the chai
    """
    kernel = _kernel(mcmc)
    problems = kernel.accuracy_problems(pool(mcmc.last_state.stats))
    sites = getattr(kernel.potential, "outside_network", ())
    if sites:
        samples = mcmc.get_samples(group_by_chain=True)
        problems += latent_rhat_problems(type(kernel).__name__, samples, sites)
    return _warned(problems)


def accuracy_summary(mcmc: Any) -> dict[str, Any]:
    """:func:`check_accuracy` (which warns) as a JSON-able record: ``problems`` (its messages),
    ``steps`` (the sampling steps the statistics cover, all chains), ``capped_steps`` (those
    whose noise share exceeded the kernel's limit: the friction at its cap), the mean over the
    steps of every ``Info`` field but the step size and potential energy
    (``kinetic_temperature``: 1 at equilibrium; ``xi_mean``, ``beta_mean``,
    ``friction_mean``, ...), the largest ``noise_share`` and its mean ``noise_share_mean``.

    Example:
        >>> import jax, jax.numpy as jnp, warnings
        >>> from numpyro.infer import MCMC
        >>> from bnn_ppl.inference import SGNHT
        >>> from bnn_ppl.inference.sgmcmc.accuracy import accuracy_summary
        >>> mcmc = MCMC(SGNHT(potential_fn=lambda z: 0.5 * jnp.sum(z ** 2), step_size=0.5),
        ...             num_warmup=10, num_samples=100, thinning=50, progress_bar=False)
        >>> mcmc.run(jax.random.key(0), init_params=jnp.zeros(2))
        >>> with warnings.catch_warnings(record=True):
        ...     warnings.simplefilter("always")
        ...     report = accuracy_summary(mcmc)
        >>> report["steps"], report["kinetic_temperature"] > 0, report["problems"][-1][:25]
        (100, True, 'SGNHT: the Euler friction')
    """
    kernel = _kernel(mcmc)
    run = pool(mcmc.last_state.stats)
    return _summary(_warned(kernel.accuracy_problems(run)), run)


def stats_accuracy_summary(kernel: SGMCMCKernel, fields: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`accuracy_summary` of a run whose last states' step statistics were stored field
    by field (``fields``: ``"steps"``, ``"total.<name>"``, ... -> one value per chain, e.g. a
    checkpointed run's ``"stats.<...>"`` arrays at its last draw); warns as
    :func:`check_accuracy` does."""
    if not isinstance(kernel, SGMCMCKernel):
        raise InputTypeError(
            f"kernel must be a bnn_ppl SG-MCMC kernel, got {type(kernel).__name__}."
        )
    run = pool_fields(fields)
    return _summary(_warned(kernel.accuracy_problems(run)), run)


def _kernel(mcmc: Any) -> SGMCMCKernel:
    kernel = getattr(mcmc, "sampler", None)
    if not isinstance(kernel, SGMCMCKernel) or getattr(mcmc, "last_state", None) is None:
        raise InputTypeError(
            "check_accuracy needs a finished numpyro.infer.MCMC run with a bnn_ppl SG-MCMC "
            f"kernel, got {type(kernel).__name__}."
        )
    return kernel


def _warned(problems: list[str]) -> list[str]:
    for message in problems:
        warnings.warn(message, SGMCMCAccuracyWarning, stacklevel=3)
    return problems


def _summary(problems: list[str], run: RunStats) -> dict[str, Any]:
    out: dict[str, Any] = {"problems": problems, "steps": run.steps, "capped_steps": run.capped}
    for name, value in run.mean.items():
        if name == "noise_share":
            out[name], out["noise_share_mean"] = run.peak[name], value
        elif name not in ("step_size", "potential_energy", "preconditioner"):
            out[name] = value
    return dict(sorted(out.items()))

"""The SG-MCMC recipe :func:`~bnn_ppl.inference.fit` runs for an SG-MCMC config.

Chains start at their own MAP estimate; a cyclical cosine step size of ``cycle_length`` steps
and one draw per cycle end; when the config gives no ``step_size``, the recommended one for the
curvature and minibatch noise measured at the MAP and after one pilot cycle; when it gives no
``num_warmup``, a burn-in that spans :data:`BURN_IN_RELAXATIONS` relaxation times of the
stiffest direction, extended until the potential energy stops drifting (:func:`run_sgmcmc`).
Checkpointed fits build the same kernel, keys and initial parameters through
:func:`sgmcmc_setup` and extend the burn-in by the same rule (:func:`burn_in_extension`).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.infer import MCMC

from bnn_ppl import validation
from bnn_ppl.config import BURN_IN_CAP, MIN_BURN_IN, SGMCMCConfig
from bnn_ppl.divergence import DivergedError
from bnn_ppl.inference.ensemble import deep_ensemble, map_estimate
from bnn_ppl.inference.potential.bnn import FullBatchPotential, full_batch_potential
from bnn_ppl.inference.sgmcmc.accuracy import (
    SGMCMCAccuracyWarning,
    accuracy_summary,
    latent_advice,
    latent_rhat_problems,
)
from bnn_ppl.inference.sgmcmc.atmc import ATMC
from bnn_ppl.inference.sgmcmc.kernel import SGMCMCKernel, SGMCMCState, pool, stats_reset
from bnn_ppl.inference.sgmcmc.schedules import cycle_end_samples, cyclical_cosine
from bnn_ppl.inference.sgmcmc.sghmc import SGHMC
from bnn_ppl.inference.sgmcmc.sgld import SGLD
from bnn_ppl.inference.sgmcmc.sgnht import SGNHT
from bnn_ppl.inference.sgmcmc.step_size import (
    GradientScales,
    gradient_scales,
    recommended_friction,
    recommended_step_size,
)
from bnn_ppl.model import BNN
from bnn_ppl.posterior import Posterior
from bnn_ppl.types import Params, PRNGKey

__all__ = [
    "BURN_IN_CAP",
    "BURN_IN_RELAXATIONS",
    "KERNELS",
    "LATENT_MIN_RELAXATIONS",
    "MIN_BURN_IN",
    "burn_in_cycles",
    "burn_in_extension",
    "check_noise_feasible",
    "latent_curvatures",
    "latent_problems",
    "relaxations_per_cycle",
    "run_sgmcmc",
    "sgmcmc_posterior",
    "sgmcmc_setup",
]

KERNELS = {"sgld": SGLD, "sghmc": SGHMC, "sgnht": SGNHT, "atmc": ATMC}
"""The kernel class of each SG-MCMC method name."""

BURN_IN_RELAXATIONS = 3.0
"""Relaxation times of the stiffest direction an automatic burn-in (``num_warmup=None``) spans
at least (its variance then lacks ``exp(-6)``, 0.25 %, of the stationary one)."""


LATENT_MIN_RELAXATIONS = 20.0
"""Relaxation times of a site outside the network's coordinate that the sampled cycles must
span: about 10 independent draws per chain (an Ornstein-Uhlenbeck coordinate's effective
sample size is half the relaxation times it spans)."""

def relaxations_per_cycle(sampler: str, curvature: float, step: float, friction: float | None,
                          cycle_length: int) -> float:  # fmt: skip
    """Relaxation times of the stiffest direction (curvature ``λ``) that one cosine cycle of
    ``cycle_length`` steps from ``step`` spans (its mean step is ``step/2``). The position's
    relaxation rate per unit time is ``λ`` for SGLD; with momentum (``m = 1``) and least
    friction ``D``, ``λ/D`` when overdamped (``D² ≥ 4λ``), else ``D/2``.

    Example:
        >>> relaxations_per_cycle("SGLD", 100.0, 1e-4, None, 200)  # 100 · 200 · 1e-4 / 2
        1.0
    """
    lam = float(curvature)
    if sampler == "SGLD" or not friction:
        rate = lam
    else:
        d = float(friction)
        rate = lam / d if d * d >= 4 * lam else d / 2
    return rate * cycle_length * step / 2


def burn_in_cycles(per_cycle: float) -> int:
    """The automatic burn-in, in cycles, at ``per_cycle`` relaxation times per cycle
    (:func:`relaxations_per_cycle`): enough for :data:`BURN_IN_RELAXATIONS`, at least
    :data:`MIN_BURN_IN` (not capped)."""
    need = BURN_IN_RELAXATIONS / max(per_cycle, 1e-300)
    return max(MIN_BURN_IN, int(math.ceil(min(need, 1e9))))


Extension = Callable[[SGMCMCKernel, SGMCMCState, int], SGMCMCState | None]
"""``extend(kernel, state, windows)``: the state to sample another window from, or ``None``
(:func:`burn_in_extension`)."""


def burn_in_extension(c: SGMCMCConfig, burn: int, run_key: PRNGKey) -> Extension | None:
    """The rule that extends an automatic burn-in (``num_warmup=None``) of ``burn`` cycles, as
    ``extend(kernel, state, windows)``; ``None`` when ``c.num_warmup`` is given.

    Sampling runs in windows of ``c.num_samples`` cycles; ``windows`` have ended at ``state``
    (every chain's, statistics of the last window's steps only). When ``kernel``'s
    ``settling_problems`` finds them still settling (the potential energy drifts, or the mean
    kinetic temperature is off 1) and the burn-in with this window stays within
    :data:`BURN_IN_CAP` cycles, the window becomes burn-in and ``extend`` returns the state the
    next window starts from: ``state`` with its statistics reset
    (:func:`~bnn_ppl.inference.sgmcmc.kernel.stats_reset`) and the key ``fold_in(run_key,
    burn-in cycles)``, split over the chains as ``MCMC.run`` splits a key; else ``None``, and
    the window's draws are kept. It depends on ``state`` alone, so a checkpointed fit, and its
    resume at any segment, decides as the in-memory fit does."""
    if c.num_warmup is not None:
        return None

    def extend(kernel: SGMCMCKernel, state: SGMCMCState, windows: int) -> SGMCMCState | None:
        used = burn + windows * c.num_samples  # with the window that ended
        if used > BURN_IN_CAP or not kernel.settling_problems(pool(state.stats)):
            return None
        key = jax.random.fold_in(run_key, used)
        if c.num_chains > 1:
            key = jax.random.split(key, c.num_chains)
        return state._replace(stats=stats_reset(state.stats), rng_key=key)

    return extend


def sgmcmc_setup(
    model: BNN, x: Any, y: Any, c: SGMCMCConfig, key: PRNGKey, *,
    devices: Sequence[jax.Device] | None = None, dtype: Any = None, progress_bar: bool = False,
) -> tuple[Callable[[], Any], FullBatchPotential, Params, PRNGKey, dict[str, Any]]:  # fmt: skip
    """``(kernel factory, potential, init params, run key, extra config)`` of an SG-MCMC fit
    (``progress_bar`` shows the MAP's progress).

    Every chain starts at its own MAP estimate (``map_steps`` Adam steps from its own prior
    draw: a prior draw is orders of magnitude above the typical set's potential, and the energy
    it releases would outlast the burn-in); the step size is the given one or
    :func:`recommended_step_size` at the larger of the scales measured at the first chain's MAP
    and after one pilot cycle from there; the momentum kernels' least friction is
    :func:`recommended_friction` at that step; the schedule is the cyclical cosine from it.
    ``extra["num_warmup_used"]`` is the burn-in in cycles: the config's, or (``num_warmup=None``)
    :func:`burn_in_cycles` at the measured curvature, capped at :data:`BURN_IN_CAP`
    (:data:`MIN_BURN_IN` when the step size is given and nothing is measured)."""
    kernel_cls = KERNELS[c.method]
    pot = full_batch_potential(  # chains are vectorized
        model, x, y, chunk_size=c.chunk_size, vectorized_chains=c.num_chains,
        chain_batching=c.chain_batching, devices=devices, dtype=dtype,
    )  # fmt: skip
    batch = validation.check_batch_size("batch_size", c.batch_size, pot.num_data)
    map_key, scale_key, pilot_key, run_key = jax.random.split(key, 4)
    n, chains = c.cycle_length, c.num_chains
    map_kwargs = {"num_steps": c.map_steps, "batch_size": batch, "init_method": c.init_method,
                  "rng_key": map_key, "chunk_size": c.chunk_size,
                  "progress_bar": progress_bar}  # fmt: skip
    if chains > 1:
        found = deep_ensemble(model, x, y, chains, chain_batching=c.chain_batching,
                              **map_kwargs)  # fmt: skip
    else:
        found = map_estimate(model, x, y, **map_kwargs)
    init = pot.unconstrain(found.params)
    name = c.method.upper()
    step, extra = c.step_size, {}

    def first(tree: Any) -> Any:
        return jax.tree.map(lambda a: a[0], tree) if chains > 1 else tree

    def rule(scales: Any) -> float:
        h = recommended_step_size(name, scales)
        if name == "SGNHT":  # its diffusion is tied to the step: its Euler bias with it
            a = recommended_friction(name, h)["diffusion"]
            h = recommended_step_size(name, scales, diffusion=a)
        return h

    if step is None:
        k1, k2 = jax.random.split(scale_key)
        at_map = gradient_scales(pot, first(init), batch, rng_key=k1)
        # the gradient noise at a mode can be far below the chain's (a classifier's MAP
        # fits its batches almost exactly): one pilot cycle from the MAP at the MAP's step,
        # then the scales where it ends; the smaller step of the two, and the chains go on
        # from where the pilot ended
        init = _pilot_cycle(kernel_cls, pot, batch, rule(at_map), n, chains, init, pilot_key)
        along = gradient_scales(pot, first(init), batch, rng_key=k2)
        scales = GradientScales(max(at_map.curvature, along.curvature),
                                max(at_map.noise, along.noise), batch)  # fmt: skip
        step = rule(scales)
        extra = {"step_size_used": step, "scales": scales._asdict(),
                 "scales_at_map": at_map._asdict()}  # fmt: skip
    friction = recommended_friction(name, step)
    burn = MIN_BURN_IN if c.num_warmup is None else c.num_warmup
    least = next(iter(friction.values()), None)
    if c.step_size is None:
        per_cycle = relaxations_per_cycle(name, scales.curvature, step, least, n)
        if c.num_warmup is None:
            burn = min(burn_in_cycles(per_cycle), BURN_IN_CAP)
        extra["relaxations_per_cycle"] = per_cycle
        check_noise_feasible(name, scales, step, c, per_cycle, pot.num_data)
    extra["num_warmup_used"] = burn
    curvatures = latent_curvatures(pot, first(init))
    extra["latent_relaxations_per_cycle"] = {
        k: relaxations_per_cycle(name, v, step, least, n) for k, v in curvatures.items()
    } or None
    extra = {k: (float(v) if isinstance(v, np.floating | float) else v) for k, v in extra.items()}
    for field in ("scales", "scales_at_map"):
        extra[field] = {k: (None if v is None else float(v))
                        for k, v in extra.get(field, {}).items()} or None  # fmt: skip
    extra["friction_used"] = friction or None

    def kernel() -> Any:
        return kernel_cls(pot, batch_size=batch, step_size=cyclical_cosine(step, n), **friction)

    return kernel, pot, init, run_key, extra


NOISE_STEP_LIMIT = {"SGLD": 100.0, "SGHMC": 10.0, "SGNHT": 10.0, "ATMC": 10.0}
"""How many times below what the curvature allows the gradient noise may force the step."""


def check_noise_feasible(sampler: str, scales: Any, step: float, c: SGMCMCConfig,
                         per_cycle: float | None = None,
                         num_data: int | None = None) -> None:  # fmt: skip
    """Warn (:class:`SGMCMCAccuracyWarning`), before sampling, when the burn-in cannot reach
    the stationary law: SGLD's given ``num_warmup`` that spans fewer than 2 relaxation times of
    the stiffest direction (``per_cycle``: :func:`relaxations_per_cycle`), or an automatic one that
    needs more than :data:`BURN_IN_CAP` cycles, naming the ``num_warmup`` that spans
    :data:`BURN_IN_RELAXATIONS` (and for SGLD the batch size at which the cap is enough); and
    when the minibatch noise forces the step more than :data:`NOISE_STEP_LIMIT` times below
    what the curvature allows, naming the batch size at which it no longer binds (the noise
    variance falls as ``1/b``)."""
    if per_cycle is not None:
        need = burn_in_cycles(per_cycle)
        given = c.num_warmup
        cycles = BURN_IN_CAP if given is None else given
        spans = cycles * per_cycle
        # a given burn-in is judged for SGLD only: the momentum kernels' bound takes their
        # least friction (SGNHT's thermostat runs above it), and their drift is checked after
        # sampling
        short = given is not None and spans < 2 and sampler == "SGLD"
        if (given is None and need > BURN_IN_CAP) or short:
            what = "the automatic burn-in's cap" if given is None else f"num_warmup={given}"
            more = ""
            if sampler == "SGLD" and scales.noise and scales.batch_size is not None:
                # per cycle ∝ λ/(λ + σ²), σ² ∝ 1/b: the batch at which the cycles are enough
                room = per_cycle * (scales.curvature + scales.noise) / scales.curvature
                room = room * cycles / BURN_IN_RELAXATIONS - 1
                if room > 0:
                    b = int(math.ceil(scales.batch_size * scales.noise
                                      / (scales.curvature * room)))  # fmt: skip
                    more = (f", or batch_size={b} or more" if num_data is None or b < num_data
                            else ", or batch_size=None (the full batch)")  # fmt: skip
                    more += " (SGLD's step shrinks with the noise)"
            warnings.warn(
                f"{sampler} at step size {step:.3g}: a burn-in of {cycles} cycles of "
                f"{c.cycle_length} steps ({what}) spans {spans:.2g} relaxation times of the "
                "stiffest direction (its variance builds up from the MAP over a few of them), "
                "so the draws are not yet stationary. "
                f"Use num_warmup={need} or more{more}.",
                SGMCMCAccuracyWarning,
                stacklevel=4,
            )
    if not scales.noise or scales.batch_size is None:
        return
    free = recommended_step_size(sampler, GradientScales(scales.curvature, 0.0, None))
    limit = NOISE_STEP_LIMIT[sampler]
    if free <= limit * step:
        return
    # SGLD: h ∝ 1/(λ + σ²); the momentum kernels: h ∝ 1/σ (σ² ∝ 1/b)
    power = 1.0 if sampler == "SGLD" else 2.0
    need = int(math.ceil(scales.batch_size * (free / (limit * step)) ** power))
    warnings.warn(
        f"{sampler} at batch_size={scales.batch_size}: the minibatch gradient noise "
        f"(σ²_max = {scales.noise:.3g}, curvature λ_max = {scales.curvature:.3g}) forces the "
        f"step size to {step:.3g}, {free / step:.0f} times below the {free:.3g} the curvature "
        f"allows, so each cycle of {c.cycle_length} steps spans that many times less time. "
        f"Use batch_size={need} or more (or None: the full batch), or many more cycles.",
        SGMCMCAccuracyWarning,
        stacklevel=4,
    )


def _pilot_cycle(
    kernel_cls: Any,
    pot: Any,
    batch: int | None,
    step: float,
    n: int,
    chains: int,
    init: Any,
    key: PRNGKey,
) -> Any:
    """Every chain's position after one cycle of ``n`` burn-in steps from ``init`` at the
    cycle-start step ``step`` (its accuracy is not judged: the scales are measured where it
    ends, and the run's own step follows from them)."""
    friction = recommended_friction(kernel_cls.__name__.upper(), step)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SGMCMCAccuracyWarning)  # (construction warnings)
        kernel = kernel_cls(pot, batch_size=batch, step_size=cyclical_cosine(step, n),
                            **friction)  # fmt: skip
    mcmc = MCMC(kernel, num_warmup=n, num_samples=1, num_chains=chains,
                chain_method="vectorized", progress_bar=False, jit_model_args=True)  # fmt: skip
    mcmc.run(key, *pot.args, init_params=init)
    return mcmc.last_state.z


def latent_curvatures(pot: FullBatchPotential, position: Params) -> dict[str, float]:
    """The full-batch potential's curvature along each site outside the network (a learned
    noise sd, a hierarchical prior's scales) at ``position`` (one chain's, unconstrained): the
    Hessian's diagonal entries there, the smallest of each site's elements.

    A Gaussian likelihood's noise sd σ (unconstrained ``s = log σ``) with a ``HalfNormal(a)``
    prior has ``2 Σ r² / σ² + 2 σ² / a²`` (``r`` the training residuals): about twice the
    number of rows, far below the network's stiffest direction, which sets the step size."""
    names = [k for k in pot.outside_network if k in position]
    if not names:  # (most models: nothing to compile)
        return {}
    u = pot.potential_fn_gen(pot.data)

    @partial(jax.jit, static_argnums=0)
    def diagonal(name: str, index: jax.Array) -> jax.Array:  # reverse over reverse
        def along(w: Params) -> jax.Array:  # the gradient's entry of the element
            return jax.grad(u)(w)[name].ravel()[index]

        return jax.grad(along)(position)[name].ravel()[index]

    return {name: min(abs(float(diagonal(name, jnp.asarray(i))))
                      for i in range(np.size(position[name])))
            for name in names}  # fmt: skip


def latent_problems(c: SGMCMCConfig, samples: dict, extra: dict) -> list[str]:
    """What the draws of the sites outside the network show went wrong: their coordinates
    relax over more than the sampled cycles can span (``extra["latent_relaxations_per_cycle"]``
    from :func:`sgmcmc_setup`: fewer than :data:`LATENT_MIN_RELAXATIONS` relaxation times in
    ``c.num_samples`` cycles), or their chains disagree (R-hat above
    :data:`~bnn_ppl.inference.sgmcmc.accuracy.LATENT_MAX_RHAT`). Either way those draws are
    not a sample of its posterior."""
    name = c.method.upper()
    problems = []
    rates = extra.get("latent_relaxations_per_cycle") or {}
    for site, per_cycle in rates.items():
        span = c.num_samples * per_cycle
        if span >= LATENT_MIN_RELAXATIONS:
            continue
        need = math.ceil(LATENT_MIN_RELAXATIONS / max(per_cycle, 1e-300))
        problems.append(
            f"{name}: {site!r} is barely sampled: at the step size the network's stiffest "
            f"direction allows, its coordinate relaxes over about {1 / per_cycle:,.3g} cycles, "
            f"so the {c.num_samples} sampled cycles give about {span / 2:.2g} independent "
            "draws of it per chain (fewer than 10; below 1 its draws stay where the chains "
            f"started). {latent_advice(site)} (more cycles, {need:,} at least, let it relax "
            "but not the network's slow directions it depends on)."
        )
    return problems + latent_rhat_problems(name, samples, rates)


def sgmcmc_posterior(c: SGMCMCConfig, samples: dict, extra: dict) -> Posterior:
    """The Posterior of SG-MCMC cycle-end ``samples`` (refused if not finite); what
    :func:`latent_problems` finds is warned about (:class:`SGMCMCAccuracyWarning`) and added
    to ``config["accuracy"]["problems"]``."""
    for name, value in samples.items():
        if not np.all(np.isfinite(value)):
            raise DivergedError(
                c.method, f"the draws of {name!r}", value, np.argwhere(~np.isfinite(value))[0]
            )
    problems = latent_problems(c, samples, extra)
    for problem in problems:
        warnings.warn(problem, SGMCMCAccuracyWarning, stacklevel=3)
    if problems and extra.get("accuracy") is not None:
        accuracy = dict(extra["accuracy"])
        accuracy["problems"] = [*accuracy.get("problems", []), *problems]
        extra = extra | {"accuracy": accuracy}
    return Posterior(c.method, samples, config=c.to_dict() | extra)


def run_sgmcmc(
    model: BNN, x: Any, y: Any, c: SGMCMCConfig, key: PRNGKey, *,
    devices: Sequence[jax.Device] | None = None, dtype: Any = None, progress_bar: bool = False,
) -> Posterior:  # fmt: skip
    """Run the recipe: vectorized chains, the last step of every cycle kept; what the
    statistics of every sampling step show went wrong is warned about and kept in
    ``config["accuracy"]``.

    With ``num_warmup=None`` the burn-in is :func:`sgmcmc_setup`'s and is extended while the
    draws are not yet stationary: when the potential energy drifts, or the mean kinetic
    temperature is off 1, over the ``num_samples`` sampling cycles (the checks of
    :func:`~bnn_ppl.inference.check_accuracy`), those cycles
    become burn-in and ``num_samples`` more are run from where they ended, while the burn-in
    stays within :data:`BURN_IN_CAP` cycles (:func:`burn_in_extension`: a checkpointed fit
    extends it by the same rule, to the same draws). ``config["num_warmup_used"]`` is the
    burn-in run, and the accuracy advice names it (the kernel's ``record_burn_in``)."""
    kernel, pot, init, run_key, extra = sgmcmc_setup(
        model, x, y, c, key, devices=devices, dtype=dtype, progress_bar=progress_bar
    )
    n, burn = c.cycle_length, extra["num_warmup_used"]
    mcmc = MCMC(
        kernel(),
        num_warmup=burn * n,
        num_samples=c.num_samples * n,
        thinning=n,  # the last step of every cycle, and only it
        num_chains=c.num_chains,
        chain_method="vectorized",
        progress_bar=False,
        jit_model_args=True,
        progress_rate=n,  # (with the bar: one update per cycle)
    )
    mcmc.progress_bar = progress_bar  # (NumPyro turns it off whenever CI is set)
    mcmc.run(run_key, *pot.args, init_params=init)  # (as a checkpointed fit's first segment)
    sampler, extend, windows = mcmc.sampler, burn_in_extension(c, burn, run_key), 1
    while extend is not None:
        state = extend(sampler, mcmc.last_state, windows)
        if state is None:
            break
        # still settling: the sampled cycles were burn-in; sample as many again from there,
        # judged on their own steps (the state's keys replace the run's)
        mcmc.post_warmup_state = state
        mcmc.run(state.rng_key, *pot.args, init_params=state.z)
        windows += 1
    burn += (windows - 1) * c.num_samples
    sampler.record_burn_in(burn * n)  # (the burn-in the accuracy advice names)
    extra["num_warmup_used"] = burn
    samples = {k: np.asarray(v) for k, v in cycle_end_samples(mcmc, n, group_by_chain=True).items()}
    return sgmcmc_posterior(c, samples, extra | {"accuracy": accuracy_summary(mcmc)})

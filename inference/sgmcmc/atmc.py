r"""Adaptive Thermostat Monte Carlo (ATMC; Heek & Kalchbrenner 2019): the kernel."""

# Notes:
#
# Energy and dynamics (the paper's eqs. 2-4)
# ------------------------------------------
# With potential ``U = L`` (here the tempered negative log joint, estimated on minibatches),
# momentum ``p`` and one thermostat ``ξ`` per parameter, the energy is
#
#     H(θ, p, ξ) = L(θ) + K(p) + ½ (ξ - diag(B)/(2m))²,
#
# where ``B`` is the (assumed diagonal, constant) covariance of the minibatch gradient noise per
# unit time (``B = h σ²`` for a gradient whose noise has variance ``σ²``, taken with step ``h``).
# The paper's choice of ``D(z)`` and ``Q(z)`` in Ma et al.'s recipe gives, for the Gaussian
# momentum ``K(p) = |p|²/(2m)`` (eq. 4),
#
#     dθ = p/m dt,   dp = (-∇L̃(θ) - β(ξ) p) dt + √(2 α(ξ) m) dW,   dξ = (p²/m - 1) dt,
#
# with the adaptive thermostat (Sec. 2.4) ``α(ξ) = max(D - ξ, 0)``, ``β(ξ) = α(ξ) + ξ =
# max(D, ξ) ≥ D``: the friction never drops below ``D`` and the injected noise shrinks as the
# thermostat detects gradient noise. The stationary law has ``θ ~ exp(-L)``, ``p ~ exp(-K)``
# and ``ξ ~ N(B/(2m), 1)`` per coordinate. The relativistic momentum (eqs. 5-6) and the split
# integrator with its exact Ornstein-Uhlenbeck step (eqs. 7-11, the paper's sign typos
# corrected) are :mod:`bnn_ppl.inference.sgmcmc.atmc_integrator`; one step here is Algorithm 1's
# fused
# ``φ_A^h ∘ φ_B^h``, one gradient per step.
#
# Where the thermostat starts: the noise estimate (``noise_estimate=True``, the default)
# --------------------------------------------------------------------------------------
# The thermostat must climb to ``B/(2m) = hσ²/(2m)``, and it is slow: near its target ``ξ``
# relaxes over about ``ξ`` time units, i.e. ``σ²/(2m)`` *steps whatever h* (on conjugate
# regression with ``N = 500``, batch 50: ``σ² ≈ 2·10⁴``, so ~10⁴ steps; variance +30 % after 2,000
# steps of burn-in, right after 80,000). Under a cyclical step size it cannot keep up at all: as
# ``h`` falls, ``B`` falls with it, but ``ξ`` descends at most one unit per unit time and time
# nearly stops in a cycle's tail, so ``ξ`` stays high, injects no noise and the cycle ends come
# out cold (the paper's schedule on the example: ``ξ`` ratcheted from 16 to 34 across cycles and
# cycle-end samples held ~4 % of the posterior variance of a conjugate regression; 15-20 % too
# cold on the digits MLP). Both have one cause: the thermostat must *discover* a noise level that
# can be measured. Each batch is therefore evaluated as two halves
# (:mod:`bnn_ppl.inference.sgmcmc.gradients`, same rows and cost), whose difference gives an
# unbiased
# per-coordinate estimate ``σ̂²``; its running average (``noise_decay``) sets the thermostat's
# baseline, and the dynamic thermostat ``ζ`` (the state's ``xi``) integrates only the residual::
#
#     ξ = h σ̂² / (2m) + ζ,     dζ = (p²/m - 1) dt,     α, β from ξ.
#
# With constant ``B`` this is the paper's dynamics, started at ``ζ = ξ - B/(2m) ≈ 0`` instead of
# ``ξ = 0``; ``ζ``'s own equation still forces ``⟨p²/m⟩ = 1`` in stationarity, correcting what the
# estimate misses (non-Gaussian or non-diagonal noise). The baseline follows the schedule's ``h``
# at every step, in both directions, so cycle ends are as warm as constant-step samples.
# ``noise_estimate=False`` is the paper's thermostat alone (and the only choice for a batch of 1).
#
# Friction where the noise dominates (``noise_share``)
# ---------------------------------------------------
# Where the gradient noise supplies most of the heat, ``ξ > D`` and ATMC injects nothing: the
# samples' covariance is then shaped by the noise's covariance, which is not diagonal (the
# Fisher information's correlations), not by the posterior's (conjugate regression, batches of
# 50 of 500 rows: posterior correlation 0.19 where the exact one is 0.03 and the noise's 0.16).
# With the estimate, each coordinate's least friction is raised to ``D_i = max(D, hσ̂²/(2mκ))``
# (``κ = noise_share``, default 0.1): the gradient noise then supplies at most a share ``κ`` of
# its heat and the rest is injected, isotropic. A friction that depends on the position needs no
# correction term in the momentum block. During warmup ``κ = 1`` (friction ``max(D, hσ̂²/(2m))``):
# far from the typical set the noise is large and ten times its friction would make the descent
# crawl. The friction is capped at ``βh = 1``: the split step below over-disperses by ``(βh)²/12``
# (8 % at the cap; a friction of ``10⁴/h`` had made ATMC's samples 10⁹ times too wide at the
# example's old ``h0 = 0.02``); noise beyond what the capped friction absorbs over-disperses its
# coordinate, and ``info.noise_share`` exceeds 1 (:func:`~bnn_ppl.inference.check_accuracy`).
#
# Defaults and bias
# -----------------
# ``D = 1`` in the potential's natural time (the momentum loses its memory over one time unit,
# whatever ``h``) and Gaussian momentum with ``m = 1``. The split step's stationary bias on a
# Gaussian is ``(βh)²/12`` (from the friction ``β``: the OU step hands the position a momentum
# already relaxed over the whole step) plus ``O(h²λ)``: +0.08 % at ``h√λ = 0.1`` and ``βh =
# 0.1``, +2 % at ``βh = 0.5``, +8 % at ``βh = 1`` (the discrete Lyapunov equation). The paper's
# ``D = -log(0.9)/h0`` (:func:`default_momentum_noise`: 10 % damping per step) ties ``βh`` to
# 0.105 whatever ``h`` (Gaussian: +0.09 %; relativistic momentum: +0.5-0.6 %); with ``D`` fixed
# and the noise's ``β ∝ h``, ``βh`` and the bias shrink with ``h``. Recommended step size
# (:func:`~bnn_ppl.inference.recommended_step_size`): ``h = min(0.1/√(λ_max/m),
# √(0.69κm/σ²_max))``, i.e. ``βh ≤ 0.35``. The paper's CIFAR-10 settings are
# ``m = (v/h0)^{-2}`` and ``c = v_max/h0`` for an average speed ``v = 3·10⁻⁴`` and a top speed
# ``v_max = 10⁻³`` per step. The state starts at ``p = 0``, ``ζ = 0``, and ``ζ`` stays 0 during
# warmup (the friction is the estimate's), so that the energy released by a start far from the
# typical set (a prior draw) is damped without driving the thermostat up, from where it could
# only descend one unit per unit time; without the estimate ``ζ`` runs from the start (budget
# the warmup for its overshoot; ``info.xi_mean`` shows it).

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple, Unpack

import jax
import jax.numpy as jnp

from bnn_ppl import validation
from bnn_ppl.inference.potential.bnn import FullBatchPotential
from bnn_ppl.inference.sgmcmc.accuracy import warn_minibatch_settings
from bnn_ppl.inference.sgmcmc.atmc_integrator import (
    flow_a,
    flow_b,
    friction_factor,
    kinetic_gradient,
    ou_step,
    thermostat,
    thermostat_force,
)
from bnn_ppl.inference.sgmcmc.gradients import GradFn, NoiseAverage, noise_average_init
from bnn_ppl.inference.sgmcmc.kernel import (
    RunStats,
    SGMCMCKernel,
    SGMCMCOptions,
    allowed_share,
    check_noise_decay,
    check_noise_share,
    heat_share,
    noise_friction,
    tree_mean,
)
from bnn_ppl.inference.sgmcmc.step_size import recommended_friction
from bnn_ppl.model import BNN
from bnn_ppl.types import Array, PRNGKey, PyTree

__all__ = [
    "ATMCState",
    "ATMCInfo",
    "init",
    "build_kernel",
    "ATMC",
    "default_momentum_noise",
    # the integrator's building blocks (bnn_ppl.inference.sgmcmc.atmc_integrator)
    "thermostat",
    "kinetic_gradient",
    "thermostat_force",
    "friction_factor",
    "ou_step",
    "flow_a",
    "flow_b",
]


class ATMCState(NamedTuple):
    """``position`` θ, ``momentum`` p, per-parameter thermostats ``xi`` (``ζ``: the part the
    dynamics integrate; ``ξ = ζ + hσ̂²/(2m)``, see the module doc) and the running average
    ``noise`` of the gradient-noise estimates."""

    position: PyTree
    momentum: PyTree
    xi: PyTree
    noise: NoiseAverage


class ATMCInfo(NamedTuple):
    """Per step: ``step_size`` ``h``; ``potential_energy``: the (minibatch) estimate of ``U`` at
    the position the gradient was taken; means over all coordinates of the new state's
    ``kinetic_temperature`` ``p·∇K(p)`` (``p²/m`` for Gaussian momentum; 1 at equilibrium) and
    thermostat ``ξ`` (``xi_mean``), and of the ``alpha`` (noise) and ``beta`` (friction) used;
    ``noise_share``: the largest share ``(hσ̂²/2m) / β`` of a coordinate's heat that came from
    the estimated gradient noise (0 without the estimate)."""

    step_size: Array
    potential_energy: Array
    kinetic_temperature: Array
    xi_mean: Array
    alpha_mean: Array
    beta_mean: Array
    noise_share: Array


def default_momentum_noise(h0: float) -> float:
    """The paper's ``D = -log(0.9) / h0``: friction ``β ≥ D`` damps ``p`` by at least 10% per
    step of size ``h0`` (not the default, which is ``D = 1``; see the module doc)."""
    return -math.log(0.9) / validation.check_positive("h0", h0)


def init(position: PyTree) -> ATMCState:
    """Algorithm 1's start: ``p = 0``, ``ζ = 0`` at ``position``; no noise estimate yet.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from bnn_ppl.inference import full_batch_estimator
        >>> from bnn_ppl.inference.sgmcmc import atmc
        >>> est = full_batch_estimator(lambda z: 0.5 * jnp.sum(z ** 2), noise=True)
        >>> step = atmc.build_kernel(momentum_noise=1.0)
        >>> state, info = step(jax.random.key(0), atmc.init(jnp.ones(3)), est.batch(None)[0], 0.1)
        >>> float(info.beta_mean)  # ξ = 0: β = D
        1.0
    """
    zeros = jax.tree.map(jnp.zeros_like, position)
    return ATMCState(position, zeros, zeros, noise_average_init(position))


def build_kernel(
    momentum_noise: float = 1.0,
    mass: float = 1.0,
    c: float | None = None,
    noise_estimate: bool = True,
    noise_share: float = 0.1,
    noise_decay: float = 0.99,
) -> Callable[..., tuple[ATMCState, ATMCInfo]]:
    """Algorithm 1: ``step(rng_key, state, grad_fn, step_size, warmup=False) -> (state, info)``.

    One (minibatch) gradient per step: ``p ← φ_B^h(p; ∇Ũ(θ), ξ)``, then
    ``(θ, ζ) ← φ_A^h(θ, ζ; p)``, with ``ξ = ζ + h σ̂²/(2m)``.

    Args:
        momentum_noise: ``D > 0``, the minimum friction (per unit time).
        mass: ``m > 0``.
        c: speed limit of the relativistic momentum (``None``: Gaussian momentum).
        noise_estimate: start the thermostat at the estimated noise (``grad_fn`` must give
            ``noise_variance``); ``False``: the paper's thermostat alone.
        noise_share: ``κ ∈ (0, 1]``: with the estimate, each coordinate's least friction is
            ``max(D, hσ̂²/(2mκ))``, so that the gradient noise supplies at most that share of
            its heat (see the module doc).
        noise_decay: averaging factor of the running noise estimate, in ``[0, 1)``.
    """
    d = validation.check_positive("momentum_noise", momentum_noise)
    m = validation.check_positive("mass", mass)
    c = None if c is None else validation.check_positive("c", c)
    noise_estimate = validation.check_bool("noise_estimate", noise_estimate)
    kappa = check_noise_share(noise_share)
    rho = check_noise_decay(noise_decay)

    def step(
        rng_key: PRNGKey,
        state: ATMCState,
        grad_fn: GradFn,
        step_size: Array,
        warmup: Array | bool = False,
    ) -> tuple[ATMCState, ATMCInfo]:
        h = step_size
        u, g, sigma2 = grad_fn(state.position)
        if noise_estimate:
            noise, raw = noise_friction(state.noise, sigma2, rho, h, m)
            cap = jnp.maximum(1 / h, d)  # β h <= 1 (the split step's bias (βh)²/12 <= 8 %)
            offset = jax.tree.map(lambda o: jnp.minimum(o, cap), raw)
            xi = jax.tree.map(lambda z, o: jnp.minimum(z + o, cap), state.xi, offset)
            kappa_t = allowed_share(kappa, warmup)
            d_i = jax.tree.map(lambda o: jnp.minimum(jnp.maximum(d, o / kappa_t), cap), offset)
        else:
            noise, xi, d_i = state.noise, state.xi, d
            raw = offset = jax.tree.map(jnp.zeros_like, state.xi)
        momentum, alpha, beta = flow_b(rng_key, state.momentum, g, xi, h, d_i, m, c)
        position, zeta = flow_a(state.position, momentum, state.xi, h, m, c)
        if noise_estimate:  # ζ waits during warmup, and never pushes ξ past the cap
            zeta = jax.tree.map(
                lambda z, o: jnp.where(warmup, 0.0, jnp.minimum(z, cap - o)), zeta, offset
            )
        temperature = tree_mean(jax.tree.map(lambda p: p * kinetic_gradient(p, m, c), momentum))
        xi_new = jax.tree.map(lambda z, x, z0: z + (x - z0), zeta, xi, state.xi)
        info = ATMCInfo(h, u, temperature, tree_mean(xi_new), tree_mean(alpha), tree_mean(beta),
                        heat_share(raw, beta))  # fmt: skip
        return ATMCState(position, momentum, zeta, noise), info

    return step


class ATMC(SGMCMCKernel):
    """ATMC as a ``numpyro.infer.MCMC`` kernel.

    Arguments ``potential, x, y, potential_fn, batch_size, step_size, sampling, chunk_size,
    devices, init_method`` as in :class:`~bnn_ppl.inference.SGMCMCKernel`;
    ``momentum_noise`` (``D``; ``None``, the default:
    :func:`~bnn_ppl.inference.recommended_friction` at the schedule's first step ``h0``,
    ``max(1, 0.1·m/h0)``), ``mass`` (``m``), ``c`` (``None``: Gaussian
    momentum), ``noise_estimate`` (default True; needs ``batch_size >= 2``), ``noise_share``
    and ``noise_decay`` as in :func:`build_kernel`.

    Example:
        >>> import jax
        >>> import bnn_ppl as bp
        >>> from numpyro.infer import MCMC
        >>> from bnn_ppl.models import MLP
        >>> from bnn_ppl.inference import ATMC, full_batch_potential
        >>> from bnn_ppl.inference.sgmcmc.schedules import cycle_end_samples
        >>> from bnn_ppl.inference.sgmcmc.schedules import cyclical_cosine
        >>> data = bp.data.load("digits")
        >>> model = bp.BNN(MLP(hidden=(16,), out=10), bp.priors.Normal(0.3),
        ...                bp.likelihoods.Categorical())
        >>> pot = full_batch_potential(model, data.x_train, data.y_train)
        >>> kernel = ATMC(pot, batch_size=128, step_size=cyclical_cosine(0.01, 100))
        >>> mcmc = MCMC(kernel, num_warmup=200, num_samples=400, progress_bar=False,
        ...             jit_model_args=True)
        >>> mcmc.run(jax.random.key(0), *pot.args, init_params=pot.init_params(jax.random.key(1)),
        ...          extra_fields=("info",))
        >>> ends = cycle_end_samples(mcmc, cycle_length=100)
        >>> ends["Dense_0.kernel"].shape
        (4, 64, 16)
        >>> probs = bp.predict(model, ends, data.x_test)
        >>> float(bp.metrics.accuracy(bp.bma(probs), data.y_test)) > 0.9
        True
    """

    _diagnostics = (("T_kin", "kinetic_temperature", ".3f"), ("xi", "xi_mean", ".3g"))

    def __init__(
        self,
        potential: FullBatchPotential | BNN | None = None,
        x: Any = None,
        y: Any = None,
        *,
        momentum_noise: float | None = None,
        mass: float = 1.0,
        c: float | None = None,
        noise_estimate: bool = True,
        noise_share: float = 0.1,
        noise_decay: float = 0.99,
        **options: Unpack[SGMCMCOptions],
    ):
        self._noise = bool(noise_estimate)
        super().__init__(potential, x, y, **options)
        if momentum_noise is None:
            momentum_noise = recommended_friction("ATMC", self._h0(), mass=mass)["momentum_noise"]
        step = build_kernel(momentum_noise, mass, c, noise_estimate, noise_share, noise_decay)
        self.momentum_noise, self.mass = float(momentum_noise), float(mass)
        self._friction = "beta_mean"  # (β acts on ∇K = p/m)
        self.noise_share = float(noise_share)
        self.c = None if c is None else float(c)
        self._kernel_init = init
        self._step = step
        warn_minibatch_settings(self, self._noise, thermostat=True)

    def accuracy_problems(self, run: RunStats) -> list[str]:
        """Also: the split scheme's bias ``(βh)²/12`` (above 2 %, ``βh`` averaged over the
        steps)."""
        problems = super().accuracy_problems(run)
        bh = run.step_mean.get("beta_mean", 0.0)
        if bh**2 / 12 > 0.02:
            problems.append(
                f"ATMC: with friction times step βh = {bh:.2f} (mean over {run.steps} sampling "
                f"steps) the scheme over-disperses by about (βh)²/12 = {bh**2 / 12:.0%}. Use "
                f"{self._advice(run, 0.4 / bh)}."
            )
        return problems

"""Stochastic gradient Hamiltonian Monte Carlo with friction (Chen, Fox & Guestrin 2014)."""

# Notes:
#
# Second-order Langevin dynamics with mass ``m`` and friction ``C`` (Chen et al.'s eq. 9)::
#
#     dθ = p/m dt,    dp = -∇U(θ) dt - C p/m dt + √(2(C - B̂)) dW,
#
# whose stationary law is ``exp(-U(θ) - |p|²/(2m))`` when ``B̂`` is the minibatch gradient
# noise: a gradient whose noise has variance ``σ²`` per step, taken with step ``h``, injects
# ``h·σ²`` per unit time into ``p``, i.e. ``B̂ = h·σ²/2``. The update is Chen et al.'s
# Algorithm 2, one gradient per step (at the new position)::
#
#     θ ← θ + h p/m
#     p ← p - h ∇Ũ(θ) - h C p/m + √(2(C - B̂) h) η,     η ~ N(0, I).
#
# Noise estimate (``noise_estimate="auto"``, the default). Each batch is evaluated as two halves
# (:mod:`bnn_ppl.inference.sgmcmc.gradients`), which gives an unbiased per-coordinate estimate of
# ``σ²``; its running average (``noise_decay``, debiased like Adam's) gives ``B̂_i = h σ̂²_i / 2``
# per coordinate, recomputed every step with that step's ``h`` (so it follows a schedule). The
# estimate is diagonal; the gradient noise is not (its correlations follow the Fisher
# information). Where the gradient noise supplies most of the momentum's heat, its correlations
# become the samples' correlations: on conjugate regression with batches of 50 of 500 rows, a
# friction raised only to ``B̂`` turned a noise correlation of 0.16 into a posterior correlation
# of 0.19 (exact: 0.03). So the friction of each coordinate is raised until the gradient noise
# supplies at most ``noise_share`` (``κ``, default 0.1) of the heat, and the rest is injected::
#
#     C_i = max(C, B̂_i / κ),     injected noise 2(C_i - B̂_i).
#
# (Chen et al. need ``C ≥ B̂``; a friction that depends on the position needs no correction term
# in the momentum block.) During warmup the friction is raised only to ``B̂`` (``κ = 1``): far
# from the typical set the noise is large, and ten times its friction would make the descent
# crawl. The Euler friction step needs ``h C_i / m ≤ 1``; past that the
# friction is capped and the coordinate's noise share exceeds ``κ`` (``info.noise_share``, the
# largest share over coordinates; above 1 the noise is not even compensated on the diagonal and
# the coordinate is over-dispersed). A number ``noise_estimate=B̂`` in ``[0, C]`` is Chen et
# al.'s constant estimate instead (0 ignores the noise: over-dispersed by about ``h σ² / (2C)``
# with minibatches, which warns).
#
# Stationary bias. The friction and noise only change the momentum's law (``⟨p²/m⟩ =
# 1/(1 - hC/(2m))``); the position's is exact up to ``O(h² λ)`` on a Gaussian of precision ``λ``
# (+0.26 % at ``h√λ = 0.1``, +1.0 % at 0.2, for any ``C`` with ``hC/m < 1``; the discrete
# Lyapunov equation, checked by the tests). Default friction ``C = 1`` in the potential's natural
# time (the momentum forgets itself over one time unit, whatever the step size); recommended
# step size (:func:`~bnn_ppl.inference.recommended_step_size`): ``h = min(0.1/√(λ_max/m),
# √(0.5 κ m/σ²_max))`` (so that ``h C_i/m ≤ 1/4``). Momentum starts at zero and is never resampled.

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, NamedTuple, Unpack

import jax
import jax.numpy as jnp

from bnn_ppl import validation
from bnn_ppl.inference.potential.bnn import FullBatchPotential
from bnn_ppl.inference.sgmcmc.accuracy import warn_minibatch_settings
from bnn_ppl.inference.sgmcmc.gradients import GradFn, NoiseAverage, noise_average_init
from bnn_ppl.inference.sgmcmc.kernel import (
    SGMCMCKernel,
    SGMCMCOptions,
    allowed_share,
    check_noise_decay,
    check_noise_share,
    heat_share,
    noise_friction,
    normal_like,
    tree_mean,
)
from bnn_ppl.inference.sgmcmc.step_size import recommended_friction
from bnn_ppl.model import BNN
from bnn_ppl.types import Array, PRNGKey, PyTree
from bnn_ppl.validation import InputTypeError

__all__ = ["SGHMCState", "SGHMCInfo", "init", "build_kernel", "SGHMC"]


class SGHMCState(NamedTuple):
    """``position`` θ and ``momentum`` p; ``noise``: the running average of the per-coordinate
    gradient-noise variance estimates
    (:class:`~bnn_ppl.inference.sgmcmc.gradients.NoiseAverage`)."""

    position: PyTree
    momentum: PyTree
    noise: NoiseAverage


class SGHMCInfo(NamedTuple):
    """``step_size`` ``h``; ``potential_energy``: the (minibatch) estimate of ``U`` at the new
    position; ``kinetic_temperature``: the mean of ``p²/m`` over all coordinates (about 1 at
    equilibrium); ``friction_mean``: mean of the friction ``C_i`` used; ``noise_share``: the
    largest share ``B̂_i / C_i`` of a coordinate's heat that came from the gradient noise."""

    step_size: Array
    potential_energy: Array
    kinetic_temperature: Array
    friction_mean: Array
    noise_share: Array


def init(position: PyTree) -> SGHMCState:
    """The state at ``position`` with zero momentum and no noise estimate yet.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from bnn_ppl.inference import full_batch_estimator
        >>> from bnn_ppl.inference.sgmcmc import sghmc
        >>> est = full_batch_estimator(lambda z: 0.5 * jnp.sum(z ** 2), noise=True)
        >>> step = sghmc.build_kernel(friction=1.0)
        >>> state, info = step(jax.random.key(0), sghmc.init(jnp.ones(3)), est.batch(None)[0], 0.1)
        >>> state.momentum.shape, float(info.step_size), float(info.friction_mean)
        ((3,), 0.1, 1.0)
    """
    zeros = jax.tree.map(jnp.zeros_like, position)
    return SGHMCState(position, zeros, noise_average_init(position))


def build_kernel(
    friction: float = 1.0,
    mass: float = 1.0,
    noise_estimate: float | str = "auto",
    noise_share: float = 0.1,
    noise_decay: float = 0.99,
) -> Callable[..., tuple[SGHMCState, SGHMCInfo]]:
    """``step(rng_key, state, grad_fn, step_size, warmup=False) -> (state, info)``.

    Args:
        friction: ``C > 0`` (per unit time, on ``p/m``): the least friction of a coordinate.
        mass: ``m > 0`` (scalar, every coordinate).
        noise_estimate: ``"auto"`` (the running estimate ``B̂_i = h σ̂²_i / 2``; ``grad_fn``
            must give ``noise_variance``) or a constant ``B̂ ∈ [0, C]``.
        noise_share: ``κ ∈ (0, 1]``, the largest share of a coordinate's heat the estimated
            gradient noise may supply before its friction is raised (with ``"auto"``).
        noise_decay: averaging factor of the running noise estimate, in ``[0, 1)``.
    """
    c = validation.check_positive("friction", friction)
    m = validation.check_positive("mass", mass)
    auto = isinstance(noise_estimate, str)
    if auto:
        validation.check_choice("noise_estimate", noise_estimate, ("auto",))
        b_fixed = 0.0
    else:
        if noise_estimate is None or isinstance(noise_estimate, bool):
            raise InputTypeError(
                f"noise_estimate must be 'auto' or a number in [0, friction], got "
                f"{noise_estimate!r}."
            )
        b_fixed = validation.check_number("noise_estimate", noise_estimate, low=0.0, high=c)
    kappa = check_noise_share(noise_share)
    rho = check_noise_decay(noise_decay)

    def step(
        rng_key: PRNGKey,
        state: SGHMCState,
        grad_fn: GradFn,
        step_size: Array,
        warmup: Array | bool = False,
    ) -> tuple[SGHMCState, SGHMCInfo]:
        h = step_size
        position = jax.tree.map(lambda x, p: x + h * p / m, state.position, state.momentum)
        u, g, sigma2 = grad_fn(position)
        if auto:
            noise_avg, b_hat = noise_friction(state.noise, sigma2, rho, h)
        else:
            noise_avg = state.noise
            b_hat = jax.tree.map(lambda x: jnp.full_like(x, b_fixed), position)
        # at least C, at least B̂/κ, at most m/h (the Euler step's limit)
        kappa_t = allowed_share(kappa, warmup)
        c_i = jax.tree.map(lambda b: jnp.minimum(jnp.maximum(c, b / kappa_t), m / h), b_hat)
        noise = normal_like(rng_key, state.momentum)
        momentum = jax.tree.map(
            lambda p, gi, ci, b, e: p - h * gi - h * ci * p / m
            + jnp.sqrt(2 * jnp.maximum(ci - b, 0.0) * h) * e,
            state.momentum, g, c_i, b_hat, noise,
        )  # fmt: skip
        temperature = tree_mean(jax.tree.map(lambda p: p**2 / m, momentum))
        info = SGHMCInfo(h, u, temperature, tree_mean(c_i), heat_share(b_hat, c_i))
        return SGHMCState(position, momentum, noise_avg), info

    return step


class SGHMC(SGMCMCKernel):
    """SGHMC as a ``numpyro.infer.MCMC`` kernel.

    Arguments ``potential, x, y, potential_fn, batch_size, step_size, sampling, chunk_size,
    devices, init_method`` as in :class:`~bnn_ppl.inference.SGMCMCKernel`; ``friction``
    (``C``; ``None``, the default: :func:`~bnn_ppl.inference.recommended_friction` at the
    schedule's first step ``h0``, ``max(1, 0.1·m/h0)``), ``mass``, ``noise_estimate`` (default
    ``"auto"``: the running estimate of the minibatch gradient noise; needs
    ``batch_size >= 2``), ``noise_share`` and ``noise_decay`` as in :func:`build_kernel`.
    """

    _diagnostics = (("T_kin", "kinetic_temperature", ".3f"), ("noise share", "noise_share", ".2f"))

    def __init__(
        self,
        potential: FullBatchPotential | BNN | None = None,
        x: Any = None,
        y: Any = None,
        *,
        friction: float | None = None,
        mass: float = 1.0,
        noise_estimate: float | str = "auto",
        noise_share: float = 0.1,
        noise_decay: float = 0.99,
        **options: Unpack[SGMCMCOptions],
    ):
        self._noise = isinstance(noise_estimate, str)
        super().__init__(potential, x, y, **options)
        if friction is None:
            friction = recommended_friction("SGHMC", self._h0(), mass=mass)["friction"]
        step = build_kernel(friction, mass, noise_estimate, noise_share, noise_decay)  # checks
        self.friction, self.mass, self.noise_share = float(friction), float(mass), noise_share
        self._friction = "friction_mean"
        self.noise_estimate = noise_estimate if self._noise else float(noise_estimate)
        if not self._noise and self.batch_size is not None and self.noise_estimate == 0.0:
            warnings.warn(
                "SGHMC with minibatches and noise_estimate=0 does not correct the gradient "
                "noise: the samples are over-dispersed by about h·σ²/(2·friction) (σ² the "
                "gradient noise variance). Use noise_estimate='auto'.",
                stacklevel=2,
            )
        self._kernel_init = init
        self._step = step
        warn_minibatch_settings(self, self._noise, thermostat=False)

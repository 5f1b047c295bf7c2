"""Stochastic gradient Nosé-Hoover thermostat (Ding et al. 2014)."""

# Notes:
#
# Momentum dynamics with a thermostat ``ξ`` that adapts the friction until the kinetic
# temperature is right, absorbing unknown gradient noise (Ding et al.'s eq. 5, with mass ``m``)::
#
#     dθ = p/m dt,    dp = -∇Ũ(θ) dt - ξ p dt + √(2 A m) dW,    dξ = (p²/m - 1) dt,
#
#     p ← p - h ξ p - h ∇Ũ(θ) + √(2 A m h) η
#     θ ← θ + h p/m
#     ξ ← ξ + h (p²/m - 1)
#
# Noise estimate (``noise_estimate=True``, the default). The thermostat alone needs about
# ``σ²/(2m)`` steps to climb to ``A + hσ²/(2m)`` and lags a falling step size (see
# :mod:`bnn_ppl.inference.sgmcmc.atmc`, which explains both). Each batch's two halves estimate
# ``σ²``
# per coordinate (:mod:`bnn_ppl.inference.sgmcmc.gradients`), and the friction is the thermostat
# plus
# that baseline, ``ξ_i = ζ_i + b̂_i``, ``b̂ = hσ̂²/(2m)``, with ``ζ`` (the state's ``xi``)
# integrating only the residual; during warmup ``ζ`` waits at ``A``. Where the noise would
# supply more than ``noise_share`` (``κ``, default 0.1) of a coordinate's heat, its diffusion is
# raised to ``A_i = max(A, b̂_i (1/κ - 1))`` (its friction with it), so that the noise's
# correlations do not shape the samples (after warmup; during warmup ``A_i = A``, which burns in
# faster). The Euler friction is unstable beyond ``hξ = 2``: it is
# capped at ``hξ = 1``, where the momentum is renewed every step.

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, NamedTuple, Unpack

import jax
import jax.numpy as jnp

from bnn_ppl import validation
from bnn_ppl.inference.potential.bnn import FullBatchPotential
from bnn_ppl.inference.sgmcmc.accuracy import warn_minibatch_settings
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
    normal_like,
    tree_mean,
)
from bnn_ppl.inference.sgmcmc.step_size import recommended_friction
from bnn_ppl.model import BNN
from bnn_ppl.types import Array, PRNGKey, PyTree

__all__ = ["SGNHTState", "SGNHTInfo", "init", "build_kernel", "SGNHT"]


class SGNHTState(NamedTuple):
    """``position`` θ, ``momentum`` p, thermostat ``xi`` (the part the dynamics integrate, in
    the structure of θ or a scalar with ``diagonal=False``; the friction is ``xi`` plus the
    noise baseline ``hσ̂²/(2m)``) and the running average ``noise`` of the noise estimates."""

    position: PyTree
    momentum: PyTree
    xi: PyTree
    noise: NoiseAverage


class SGNHTInfo(NamedTuple):
    """``step_size``; ``potential_energy`` (minibatch estimate of ``U`` at the old position);
    ``kinetic_temperature``: mean ``p²/m`` (1 at equilibrium); ``xi_mean``: mean friction
    ``ξ`` (thermostat plus raised diffusion and noise baseline, capped at ``1/h``, the Euler
    step's limit); ``noise_share``: the largest share ``b̂_i / ξ_i`` of a coordinate's heat
    that came from the estimated gradient noise (above ``noise_share`` also where the
    thermostat lowers ``ξ`` below its target, i.e. finds less noise than estimated);
    ``capped``: the share of coordinates whose friction was cut to ``1/h``."""

    step_size: Array
    potential_energy: Array
    kinetic_temperature: Array
    xi_mean: Array
    noise_share: Array
    capped: Array


def init(position: PyTree, diffusion: float = 1.0, diagonal: bool = True) -> SGNHTState:
    """Zero momentum and ``ξ = A`` (per coordinate, or a scalar with ``diagonal=False``).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from bnn_ppl.inference import full_batch_estimator
        >>> from bnn_ppl.inference.sgmcmc import sgnht
        >>> est = full_batch_estimator(lambda z: 0.5 * jnp.sum(z ** 2), noise=True)
        >>> step = sgnht.build_kernel(diffusion=1.0)
        >>> state = sgnht.init(jnp.ones(3), diffusion=1.0)
        >>> state, info = step(jax.random.key(0), state, est.batch(None)[0], 0.1)
        >>> state.xi.shape, float(info.step_size)
        ((3,), 0.1)
    """
    momentum = jax.tree.map(jnp.zeros_like, position)
    dtype = jnp.result_type(jax.tree.leaves(position)[0])
    xi = (
        jax.tree.map(lambda x: jnp.full_like(x, diffusion), position)
        if diagonal
        else jnp.asarray(diffusion, dtype)
    )
    return SGNHTState(position, momentum, xi, noise_average_init(position))


def build_kernel(
    diffusion: float = 1.0,
    mass: float = 1.0,
    diagonal: bool = True,
    noise_estimate: bool = True,
    noise_share: float = 0.1,
    noise_decay: float = 0.99,
) -> Callable[..., tuple[SGNHTState, SGNHTInfo]]:
    """``step(rng_key, state, grad_fn, step_size, warmup=False) -> (state, info)``.

    Args:
        diffusion: ``A > 0``, the injected momentum noise per unit time.
        mass: ``m > 0``.
        diagonal: one thermostat per coordinate (the state must match, see :func:`init`).
        noise_estimate: add the estimated noise ``b̂ = hσ̂²/(2m)`` to the friction, per
            coordinate (``grad_fn`` must give ``noise_variance``); ``False``: Ding et al.'s
            thermostat alone.
        noise_share: ``κ ∈ (0, 1]``: with the estimate, a coordinate's diffusion is raised to
            ``A_i = max(A, b̂_i (1/κ - 1))`` so that the gradient noise supplies at most that
            share of its heat.
        noise_decay: averaging factor of the running noise estimate, in ``[0, 1)``.
    """
    a = validation.check_positive("diffusion", diffusion)
    m = validation.check_positive("mass", mass)
    diagonal = validation.check_bool("diagonal", diagonal)
    noise_estimate = validation.check_bool("noise_estimate", noise_estimate)
    kappa = check_noise_share(noise_share)
    rho = check_noise_decay(noise_decay)

    def step(
        rng_key: PRNGKey,
        state: SGNHTState,
        grad_fn: GradFn,
        step_size: Array,
        warmup: Array | bool = False,
    ) -> tuple[SGNHTState, SGNHTInfo]:
        h = step_size
        u, g, sigma2 = grad_fn(state.position)
        zeta = state.xi if diagonal else jax.tree.map(lambda _: state.xi, state.momentum)
        if noise_estimate:
            noise_avg, offset = noise_friction(state.noise, sigma2, rho, h, m)
            kappa_t = allowed_share(kappa, warmup)
            a_i = jax.tree.map(lambda o: jnp.maximum(a, o * (1 / kappa_t - 1)), offset)
        else:
            noise_avg = state.noise
            offset = jax.tree.map(jnp.zeros_like, state.momentum)
            a_i = jax.tree.map(lambda o: jnp.full_like(o, a), offset)
        # friction: the thermostat (settling at A) plus the raised diffusion and the noise;
        # the Euler friction p(1 - hξ) is unstable beyond hξ = 2: capped at hξ = 1
        wanted = jax.tree.map(lambda z, ai, o: z + (ai - a) + o, zeta, a_i, offset)
        xi = jax.tree.map(lambda w: jnp.minimum(w, 1 / h), wanted)
        capped = tree_mean(jax.tree.map(lambda w: (w > 1 / h).astype(w.dtype), wanted))
        noise = normal_like(rng_key, state.momentum)
        momentum = jax.tree.map(
            lambda p, z, gi, ai, e: p - h * z * p - h * gi + jnp.sqrt(2 * ai * m * h) * e,
            state.momentum, xi, g, a_i, noise,
        )  # fmt: skip
        position = jax.tree.map(lambda x, p: x + h * p / m, state.position, momentum)
        temperature = jax.tree.map(lambda p: p**2 / m, momentum)
        if diagonal:
            new_xi = jax.tree.map(lambda z, t: z + h * (t - 1), state.xi, temperature)
        else:
            new_xi = state.xi + h * (tree_mean(temperature) - 1)
        if noise_estimate:  # during warmup the thermostat waits at A; it starts after warmup
            new_xi = jax.tree.map(lambda z: jnp.where(warmup, jnp.full_like(z, a), z), new_xi)
        share = heat_share(offset, jax.tree.map(lambda z: jnp.maximum(z, a), xi))
        info = SGNHTInfo(h, u, tree_mean(temperature), tree_mean(xi), share, capped)
        return SGNHTState(position, momentum, new_xi, noise_avg), info

    return step


class SGNHT(SGMCMCKernel):
    """SGNHT as a ``numpyro.infer.MCMC`` kernel.

    Arguments ``potential, x, y, potential_fn, batch_size, step_size, sampling, chunk_size,
    devices, init_method`` as in :class:`~bnn_ppl.inference.SGMCMCKernel`; ``diffusion``
    (``A``; ``None``, the default: :func:`~bnn_ppl.inference.recommended_friction` at the
    schedule's first step ``h0``, ``max(1, 0.01·m/h0)``), ``mass`` and ``diagonal`` (default
    True) as in :func:`build_kernel`.
    """

    _diagnostics = (("T_kin", "kinetic_temperature", ".3f"), ("xi", "xi_mean", ".3g"))

    def __init__(
        self,
        potential: FullBatchPotential | BNN | None = None,
        x: Any = None,
        y: Any = None,
        *,
        diffusion: float | None = None,
        mass: float = 1.0,
        diagonal: bool = True,
        noise_estimate: bool = True,
        noise_share: float = 0.1,
        noise_decay: float = 0.99,
        **options: Unpack[SGMCMCOptions],
    ):
        self._noise = bool(noise_estimate)
        super().__init__(potential, x, y, **options)
        if diffusion is None:
            diffusion = recommended_friction("SGNHT", self._h0(), mass=mass)["diffusion"]
        step = build_kernel(diffusion, mass, diagonal, noise_estimate, noise_share, noise_decay)
        self.diffusion, self.mass, self.diagonal = float(diffusion), float(mass), bool(diagonal)
        self.noise_share = float(noise_share)
        self._kernel_init = lambda position: init(position, self.diffusion, self.diagonal)
        self._step = step
        warn_minibatch_settings(self, self._noise, thermostat=True)

    def _capped(self, info: Any) -> Array:
        """A step with a coordinate's friction at the Euler limit ``1/h``."""
        return info.capped > 0

    def _relaxations(self, run: RunStats) -> float:
        """``Σ h·ξ``: ξ damps ``p`` itself, whatever the mass."""
        return run.steps * run.step_mean["xi_mean"]

    def accuracy_problems(self, run: RunStats) -> list[str]:
        """The noise share's checks count only steps with a friction at ``1/h`` (``capped``):
        elsewhere a share above ``noise_share`` is the thermostat finding less noise than
        estimated. Also: the Euler friction's cold bias ``hξ/2`` (above 5 %, averaged over the
        steps)."""
        uncapped = replace(run, peak=run.peak | {"noise_share": 0.0})  # (the temperature's)
        problems = super().accuracy_problems(run if run.capped else uncapped)
        cold = run.step_mean.get("xi_mean", 0.0) / 2
        if cold > 0.05:
            problems.append(
                f"SGNHT: the Euler friction makes the chain cold by about hξ/2 = {cold:.0%} "
                f"(ξ the mean friction, info.xi_mean; mean over {run.steps} sampling steps). "
                f"Use {self._advice(run, 0.02 / cold)}."
            )
        return problems

"""Stochastic gradient Hamiltonian Monte Carlo with friction (Chen, Fox & Guestrin 2014).

Second-order Langevin dynamics with mass ``m`` and friction ``C`` (Chen et al.'s eq. 9)::

    dθ = p/m dt,    dp = -∇U(θ) dt - C p/m dt + √(2(C - B̂)) dW,

whose stationary law is ``exp(-U(θ) - |p|²/(2m))`` when the minibatch gradient noise has
covariance ``2B̂`` per unit time (``B̂ = 0``, the default, treats it as absent: with exact
gradients the dynamics are exact, and with minibatches the friction ``C`` dominates the noise
when ``h`` is small). The update is Chen et al.'s Algorithm 2::

    θ ← θ + h p/m
    p ← p - h ∇Ũ(θ) - h C p/m + √(2(C - B̂) h) η,     η ~ N(0, I),

one gradient per step (at the new position). The friction-noise discretisation is Euler's, so
the stationary law is biased at first order in ``h`` (e.g. ``⟨p²/m⟩ = 1/(1 - hC/(2m))`` on the
momentum). Momentum starts at zero and is never resampled (the friction equilibrates it).

Default friction: ``C = -m log(0.9) / h0``, so that the momentum loses 10% per step at the
initial step size, the damping the ATMC paper uses for ATMC and SGNHT.

Example:
    >>> import jax, jax.numpy as jnp
    >>> from bnn_ppl.inference import sghmc, full_batch_estimator
    >>> est = full_batch_estimator(lambda z: 0.5 * jnp.sum(z ** 2))
    >>> step = sghmc.build_kernel(friction=1.0)
    >>> state, info = step(jax.random.key(0), sghmc.init(jnp.ones(3)), est.batch(None)[0], 0.1)
    >>> state.momentum.shape, float(info.step_size)
    ((3,), 0.1)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from bnn_ppl import validation
from bnn_ppl.inference.gradients import GradFn, SGMCMCKernel, SGMCMCState, normal_like, tree_mean
from bnn_ppl.inference.potential import FullBatchPotential
from bnn_ppl.inference.schedules import Schedule
from bnn_ppl.model import BNN
from bnn_ppl.types import Array, Params, PRNGKey, PyTree
from bnn_ppl.validation import InputValueError

__all__ = ["SGHMCState", "SGHMCInfo", "init", "build_kernel", "SGHMC"]


class SGHMCState(NamedTuple):
    """``position`` θ and ``momentum`` p (same structure)."""

    position: PyTree
    momentum: PyTree


class SGHMCInfo(NamedTuple):
    """``step_size`` ``h``; ``potential_energy``: the (minibatch) estimate of ``U`` at the new
    position; ``kinetic_temperature``: the mean of ``p²/m`` over all coordinates (1 at
    equilibrium)."""

    step_size: Array
    potential_energy: Array
    kinetic_temperature: Array


def init(position: PyTree) -> SGHMCState:
    """The state at ``position`` with zero momentum."""
    return SGHMCState(position, jax.tree.map(jnp.zeros_like, position))


def build_kernel(
    friction: float, mass: float = 1.0, noise_estimate: float = 0.0
) -> Callable[[PRNGKey, SGHMCState, GradFn, Array], tuple[SGHMCState, SGHMCInfo]]:
    """``step(rng_key, state, grad_fn, step_size) -> (state, info)``.

    Args:
        friction: ``C > 0`` (per unit time, on ``p/m``).
        mass: ``m > 0`` (scalar, every coordinate).
        noise_estimate: ``B̂ ∈ [0, C]``, the gradient-noise covariance the injected noise is
            reduced by.
    """
    c, m, b = float(friction), float(mass), float(noise_estimate)

    def step(
        rng_key: PRNGKey, state: SGHMCState, grad_fn: GradFn, step_size: Array
    ) -> tuple[SGHMCState, SGHMCInfo]:
        h = step_size
        position = jax.tree.map(lambda x, p: x + h * p / m, state.position, state.momentum)
        u, g = grad_fn(position)
        noise = normal_like(rng_key, state.momentum)
        scale = jnp.sqrt(2 * (c - b) * h)
        momentum = jax.tree.map(
            lambda p, gi, e: p - h * gi - h * c * p / m + scale * e, state.momentum, g, noise
        )
        temperature = tree_mean(jax.tree.map(lambda p: p**2 / m, momentum))
        return SGHMCState(position, momentum), SGHMCInfo(h, u, temperature)

    return step


class SGHMC(SGMCMCKernel):
    """SGHMC as a ``numpyro.infer.MCMC`` kernel.

    Arguments ``potential, x, y, potential_fn, batch_size, step_size, chunk_size, devices,
    init_method`` as in :class:`~bnn_ppl.inference.gradients.SGMCMCKernel`; ``friction``
    (default ``-m log(0.9) / h0``), ``mass`` and ``noise_estimate`` as in
    :func:`build_kernel`.
    """

    def __init__(
        self,
        potential: FullBatchPotential | BNN | None = None,
        x: Any = None,
        y: Any = None,
        *,
        potential_fn: Callable[[Params], Array] | None = None,
        batch_size: int | None = None,
        step_size: float | Schedule = 1e-3,
        friction: float | None = None,
        mass: float = 1.0,
        noise_estimate: float = 0.0,
        chunk_size: int | None = None,
        devices: Sequence[jax.Device] | None = None,
        init_method: str = "prior",
    ):
        super().__init__(
            potential,
            x,
            y,
            potential_fn=potential_fn,
            batch_size=batch_size,
            step_size=step_size,
            chunk_size=chunk_size,
            devices=devices,
            init_method=init_method,
        )
        self.mass = validation.check_positive("mass", mass)
        self.friction = (
            -self.mass * math.log(0.9) / self.initial_step_size
            if friction is None
            else validation.check_positive("friction", friction)
        )
        if not 0 <= noise_estimate <= self.friction:
            raise InputValueError(
                f"noise_estimate must lie in [0, friction={self.friction}], got {noise_estimate!r}."
            )
        self.noise_estimate = float(noise_estimate)
        self._init_fn = init
        self._step = build_kernel(self.friction, self.mass, self.noise_estimate)

    def get_diagnostics_str(self, state: SGMCMCState) -> str:
        i = state.info
        return f"step size {float(i.step_size):.2e}, T_kin {float(i.kinetic_temperature):.3f}"

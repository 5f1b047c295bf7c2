"""Stochastic gradient Nosé-Hoover thermostat (Ding et al. 2014).

Momentum dynamics with a thermostat ``ξ`` that adapts the friction until the kinetic
temperature is right, absorbing unknown gradient noise (Ding et al.'s eq. 5, with mass ``m``)::

    dθ = p/m dt,    dp = -∇Ũ(θ) dt - ξ p dt + √(2 A m) dW,    dξ = (⟨p²⟩/m - 1) dt,

with ``⟨p²⟩`` the mean over the ``n`` coordinates (one scalar thermostat, as in Ding et al.) or,
with ``diagonal=True``, one thermostat per coordinate (``dξ_i = (p_i²/m - 1) dt``, the
Nosé-Hoover special case ``α(ξ) = A`` of the ATMC paper's eq. 4). ``A`` is the injected
diffusion; the thermostat settles at ``ξ ≈ A + B/(2m)`` for gradient noise of covariance ``B``
per unit time. Ding et al.'s Algorithm 1 (Euler; one gradient per step, at the old position)::

    p ← p - h ξ p - h ∇Ũ(θ) + √(2 A m h) η
    θ ← θ + h p/m
    ξ ← ξ + h (⟨p²⟩/m - 1)

Stationary bias is first order in ``h``. The state starts with ``p = 0`` and ``ξ = A``.
Default ``A = -log(0.9) / h0`` (10% momentum damping per step at ``ξ = A``, as the ATMC paper's
``D``). With ``ξ < 0`` the friction is negative; that is the behaviour ATMC removes.

Example:
    >>> import jax, jax.numpy as jnp
    >>> from bnn_ppl.inference import sgnht, full_batch_estimator
    >>> est = full_batch_estimator(lambda z: 0.5 * jnp.sum(z ** 2))
    >>> step = sgnht.build_kernel(diffusion=1.0)
    >>> state = sgnht.init(jnp.ones(3), diffusion=1.0)
    >>> state, info = step(jax.random.key(0), state, est.batch(None)[0], 0.1)
    >>> state.xi.shape, float(info.step_size)
    ((), 0.1)
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

__all__ = ["SGNHTState", "SGNHTInfo", "init", "build_kernel", "SGNHT"]


class SGNHTState(NamedTuple):
    """``position`` θ, ``momentum`` p and thermostat ``xi`` (a scalar, or the structure of
    θ with ``diagonal=True``)."""

    position: PyTree
    momentum: PyTree
    xi: PyTree


class SGNHTInfo(NamedTuple):
    """``step_size``; ``potential_energy`` (minibatch estimate of ``U`` at the old position);
    ``kinetic_temperature``: mean ``p²/m`` (1 at equilibrium); ``xi_mean``: mean thermostat."""

    step_size: Array
    potential_energy: Array
    kinetic_temperature: Array
    xi_mean: Array


def init(position: PyTree, diffusion: float, diagonal: bool = False) -> SGNHTState:
    """Zero momentum and ``ξ = A`` (scalar, or per coordinate with ``diagonal``)."""
    momentum = jax.tree.map(jnp.zeros_like, position)
    dtype = jnp.result_type(jax.tree.leaves(position)[0])
    xi = (
        jax.tree.map(lambda x: jnp.full_like(x, diffusion), position)
        if diagonal
        else jnp.asarray(diffusion, dtype)
    )
    return SGNHTState(position, momentum, xi)


def build_kernel(
    diffusion: float, mass: float = 1.0, diagonal: bool = False
) -> Callable[[PRNGKey, SGNHTState, GradFn, Array], tuple[SGNHTState, SGNHTInfo]]:
    """``step(rng_key, state, grad_fn, step_size) -> (state, info)``.

    Args:
        diffusion: ``A >= 0``, the injected momentum noise.
        mass: ``m > 0``.
        diagonal: one thermostat per coordinate (the state must match, see :func:`init`).
    """
    a, m = float(diffusion), float(mass)

    def step(
        rng_key: PRNGKey, state: SGNHTState, grad_fn: GradFn, step_size: Array
    ) -> tuple[SGNHTState, SGNHTInfo]:
        h = step_size
        u, g = grad_fn(state.position)
        noise = normal_like(rng_key, state.momentum)
        xi = state.xi if diagonal else jax.tree.map(lambda _: state.xi, state.momentum)
        scale = jnp.sqrt(2 * a * m * h)
        momentum = jax.tree.map(
            lambda p, z, gi, e: p - h * z * p - h * gi + scale * e, state.momentum, xi, g, noise
        )
        position = jax.tree.map(lambda x, p: x + h * p / m, state.position, momentum)
        temperature = jax.tree.map(lambda p: p**2 / m, momentum)
        if diagonal:
            new_xi = jax.tree.map(lambda z, t: z + h * (t - 1), state.xi, temperature)
        else:
            new_xi = state.xi + h * (tree_mean(temperature) - 1)
        info = SGNHTInfo(h, u, tree_mean(temperature), tree_mean(new_xi))
        return SGNHTState(position, momentum, new_xi), info

    return step


class SGNHT(SGMCMCKernel):
    """SGNHT as a ``numpyro.infer.MCMC`` kernel.

    Arguments ``potential, x, y, potential_fn, batch_size, step_size, chunk_size, devices,
    init_method`` as in :class:`~bnn_ppl.inference.gradients.SGMCMCKernel`; ``diffusion``
    (``A``, default ``-log(0.9) / h0``), ``mass`` and ``diagonal`` as in :func:`build_kernel`.
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
        diffusion: float | None = None,
        mass: float = 1.0,
        diagonal: bool = False,
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
        if diffusion is None:
            diffusion = -math.log(0.9) / self.initial_step_size
        if not diffusion >= 0:
            raise InputValueError(f"diffusion must be >= 0, got {diffusion!r}.")
        self.diffusion = float(diffusion)
        self.diagonal = bool(diagonal)
        self._init_fn = lambda position: init(position, self.diffusion, self.diagonal)
        self._step = build_kernel(self.diffusion, self.mass, self.diagonal)

    def get_diagnostics_str(self, state: SGMCMCState) -> str:
        i = state.info
        return (
            f"step size {float(i.step_size):.2e}, T_kin {float(i.kinetic_temperature):.3f}, "
            f"xi {float(i.xi_mean):.3g}"
        )

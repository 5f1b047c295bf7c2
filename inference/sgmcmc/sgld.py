"""Stochastic gradient Langevin dynamics (Welling & Teh 2011), optionally RMSprop-preconditioned."""

# Notes:
#
# The Euler-Maruyama discretisation of the overdamped Langevin diffusion
# ``dθ = -∇U(θ) dt + √2 dW`` with a (minibatch) gradient estimate::
#
#     θ ← θ - h ∇Ũ(θ) + √(2h) η,        η ~ N(0, I).
#
# (Welling & Teh write ``Δθ = (ε/2) ∇log p + N(0, ε)``: their ``ε`` is ``2h``.)
#
# Stationary bias. On a Gaussian with precision ``λ`` and a gradient whose noise has variance
# ``σ²`` the stationary variance is ``(1 + hσ²/2) / (λ (1 - hλ/2))``: over-dispersed by about
# ``h (λ + σ²) / 2``, first order in ``h``. The gradient noise is usually the larger term (with
# batches of ``b`` of ``N`` rows ``σ² ≈ (N/b) λ`` in the stiffest directions), so SGLD needs
# ``h ≪ 1/σ²``: see :func:`bnn_ppl.inference.recommended_step_size`, which asks for ``h (λ_max +
# σ²_max) / 2 = 0.01``. A decaying step (``polynomial_decay``) removes the bias in the limit.
#
# ``preconditioning=True`` gives pSGLD (Li et al. 2016): an RMSprop estimate ``V`` of the squared
# gradient (exponential average with ``decay``, debiased like Adam's) sets a diagonal
# preconditioner ``G = 1 / (ε + √V)`` and::
#
#     θ ← θ - h G ∇Ũ(θ) + √(2h G) η.
#
# Li et al. keep adapting ``V`` while sampling and drop the correction term ``h Γ(θ)`` (the
# divergence of ``G``). But ``V`` follows the recent gradients, so ``G`` is smaller exactly when
# the chain is far out: that makes the restoring drift weaker there and the stationary law
# over-dispersed, with a bias that does *not* shrink with ``h`` (measured on a 2-D Gaussian at
# ``h = 0.01``: +29-34 % variance at ``decay = 0.99``, +0.8 % at ``0.9999``). Here ``V`` is
# adapted during warmup only and frozen for sampling (as NUTS adapts its mass matrix): sampling is
# then SGLD with a constant diagonal preconditioner, exact up to the ``O(h)`` bias above (with
# ``λ`` and ``σ²`` scaled by ``G``). pSGLD therefore needs ``num_warmup > 0``.

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Unpack

import jax
import jax.numpy as jnp

from bnn_ppl import validation
from bnn_ppl.inference.potential.bnn import FullBatchPotential
from bnn_ppl.inference.sgmcmc.accuracy import warn_minibatch_settings
from bnn_ppl.inference.sgmcmc.gradients import (
    GradFn,
    NoiseAverage,
    noise_average_init,
    noise_average_update,
)
from bnn_ppl.inference.sgmcmc.kernel import (
    SGMCMCKernel,
    SGMCMCOptions,
    check_noise_decay,
    normal_like,
    tree_max,
    tree_mean,
)
from bnn_ppl.model import BNN
from bnn_ppl.types import Array, PRNGKey, PyTree
from bnn_ppl.validation import InputValueError

__all__ = ["SGLDState", "SGLDInfo", "init", "build_kernel", "SGLD"]


class SGLDState(NamedTuple):
    """``position``; ``square_avg``: the RMSprop average of squared gradients (zeros without
    preconditioning); ``count``: gradients averaged into it so far (for debiasing); ``noise``:
    the running average of the gradient-noise estimates (for ``info.noise_share``)."""

    position: PyTree
    square_avg: PyTree
    count: Array
    noise: NoiseAverage


class SGLDInfo(NamedTuple):
    """``step_size`` ``h``; ``potential_energy``: the (minibatch) estimate of ``U`` at the
    position the gradient was taken; ``preconditioner``: mean of ``G`` (1 without);
    ``noise_share``: the largest share ``hGσ̂²/(2 + hGσ̂²)`` of a coordinate's injected
    variance that came from the gradient noise (0 without the estimate): SGLD cannot remove
    it, and over-disperses that coordinate by about ``hGσ̂²/2``."""

    step_size: Array
    potential_energy: Array
    preconditioner: Array
    noise_share: Array


def init(position: PyTree) -> SGLDState:
    """The state at ``position``.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from bnn_ppl.inference import full_batch_estimator
        >>> from bnn_ppl.inference.sgmcmc import sgld
        >>> est = full_batch_estimator(lambda z: 0.5 * jnp.sum(z ** 2), noise=True)
        >>> step = sgld.build_kernel()
        >>> state = sgld.init(jnp.zeros(3))
        >>> grad_fn, _ = est.batch(None)
        >>> state, info = step(jax.random.key(0), state, grad_fn, 0.01)
        >>> state.position.shape, float(info.step_size)
        ((3,), 0.01)
    """
    zeros = jax.tree.map(jnp.zeros_like, position)
    return SGLDState(position, zeros, jnp.zeros((), jnp.int32), noise_average_init(position))


def build_kernel(
    preconditioning: bool = False,
    decay: float = 0.99,
    epsilon: float = 1e-5,
    noise_estimate: bool = True,
    noise_decay: float = 0.99,
) -> Callable[..., tuple[SGLDState, SGLDInfo]]:
    """``step(rng_key, state, grad_fn, step_size, warmup=True) -> (state, info)``.

    One gradient per step. With ``preconditioning`` the RMSprop average is updated only on
    steps with ``warmup`` true, and frozen otherwise (see the module docstring).

    Args:
        preconditioning: RMSprop preconditioning (pSGLD).
        decay: RMSprop's averaging factor ``ρ`` (``V ← ρV + (1-ρ)g²``), in ``[0, 1)``.
        epsilon: ``ε`` in ``G = 1 / (ε + √V)``, ``> 0``.
        noise_estimate: estimate the gradient noise (``grad_fn`` must give
            ``noise_variance``) to report its share in ``info.noise_share``.
        noise_decay: averaging factor of the running noise estimate, in ``[0, 1)``.
    """
    preconditioning = validation.check_bool("preconditioning", preconditioning)
    decay = validation.check_number("decay", decay, low=0.0, high=1.0, high_inclusive=False)
    epsilon = validation.check_positive("epsilon", epsilon)
    noise_estimate = validation.check_bool("noise_estimate", noise_estimate)
    rho = check_noise_decay(noise_decay)

    def step(
        rng_key: PRNGKey,
        state: SGLDState,
        grad_fn: GradFn,
        step_size: Array,
        warmup: Array | bool = True,
    ) -> tuple[SGLDState, SGLDInfo]:
        h = step_size
        u, g, sigma2 = grad_fn(state.position)
        noise = normal_like(rng_key, state.position)
        if preconditioning:
            adapt = jnp.asarray(warmup)
            count = jnp.where(adapt, state.count + 1, state.count)
            square_avg = jax.tree.map(
                lambda v, gi: jnp.where(adapt, decay * v + (1 - decay) * gi**2, v),
                state.square_avg,
                g,
            )
            debias = 1 - decay ** count.astype(jnp.result_type(float))
            precond = jax.tree.map(
                lambda v: 1 / (epsilon + jnp.sqrt(v / debias.astype(v.dtype))), square_avg
            )
        else:
            count, square_avg = state.count, state.square_avg
            precond = jax.tree.map(jnp.ones_like, state.position)
        position = jax.tree.map(
            lambda x, gi, p, e: x - h * p * gi + jnp.sqrt(2 * h * p) * e,
            state.position,
            g,
            precond,
            noise,
        )
        if noise_estimate:
            noise_avg, sigma2 = noise_average_update(state.noise, sigma2, rho)
            share = tree_max(
                jax.tree.map(lambda s, p: h * p * s / (2 + h * p * s), sigma2, precond)
            )
        else:
            noise_avg, share = state.noise, jnp.zeros(())
        info = SGLDInfo(h, u, tree_mean(precond), share)
        return SGLDState(position, square_avg, count, noise_avg), info

    return step


class SGLD(SGMCMCKernel):
    """SGLD (pSGLD with ``preconditioning=True``) as a ``numpyro.infer.MCMC`` kernel.

    Arguments ``potential, x, y, potential_fn, batch_size, step_size, sampling, chunk_size,
    devices, init_method`` as in :class:`~bnn_ppl.inference.SGMCMCKernel`;
    ``preconditioning, decay, epsilon, noise_estimate, noise_decay`` as in
    :func:`build_kernel` (the noise estimate needs ``batch_size >= 2``). Recommended step size:
    :func:`~bnn_ppl.inference.recommended_step_size` (``h (λ_max + σ²_max) = 0.02``).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from numpyro.infer import MCMC
        >>> from bnn_ppl.inference import SGLD
        >>> kernel = SGLD(potential_fn=lambda z: 0.5 * jnp.sum(z["x"] ** 2), step_size=0.05)
        >>> mcmc = MCMC(kernel, num_warmup=100, num_samples=500, progress_bar=False)
        >>> mcmc.run(jax.random.key(0), init_params={"x": jnp.zeros(2)})
        >>> mcmc.get_samples()["x"].shape
        (500, 2)
    """

    _diagnostics = (("U", "potential_energy", ".4g"),)

    def __init__(
        self,
        potential: FullBatchPotential | BNN | None = None,
        x: Any = None,
        y: Any = None,
        *,
        preconditioning: bool = False,
        decay: float = 0.99,
        epsilon: float = 1e-5,
        noise_estimate: bool = True,
        noise_decay: float = 0.99,
        **options: Unpack[SGMCMCOptions],
    ):
        step = build_kernel(preconditioning, decay, epsilon, noise_estimate, noise_decay)
        self._noise = bool(noise_estimate)
        options.setdefault("step_size", 1e-4)
        super().__init__(potential, x, y, **options)
        self.preconditioning = bool(preconditioning)
        self._kernel_init = init
        self._step = step
        warn_minibatch_settings(self, self._noise, thermostat=False)

    def _check_init(self, num_warmup: int) -> None:
        if self.preconditioning and num_warmup == 0:
            raise InputValueError(
                "pSGLD (preconditioning=True) adapts its preconditioner during warmup and "
                "freezes it for sampling; num_warmup=0 leaves nothing to adapt it with: pass "
                "MCMC(..., num_warmup=k) with k > 0 (a few hundred steps)."
            )

"""Stochastic gradient Langevin dynamics (Welling & Teh 2011), optionally RMSprop-preconditioned.

The Euler-Maruyama discretisation of the overdamped Langevin diffusion
``dθ = -∇U(θ) dt + √2 dW`` with a (minibatch) gradient estimate::

    θ ← θ - h ∇Ũ(θ) + √(2h) η,        η ~ N(0, I).

(Welling & Teh write ``Δθ = (ε/2) ∇log p + N(0, ε)``: their ``ε`` is ``2h``.) With a constant
step the stationary law is biased at first order in ``h``: on a Gaussian with precision
``λ`` the variance is ``1 / (λ (1 - hλ/2))``; with a decaying step (``polynomial_decay``) the
bias vanishes.

``preconditioning=True`` gives pSGLD (Li et al. 2016): an RMSprop estimate ``V`` of the squared
gradient (exponential average with ``decay``, debiased like Adam's) sets a diagonal
preconditioner ``G = 1 / (ε + √V)`` and::

    θ ← θ - h G ∇Ũ(θ) + √(2h G) η.

As in Li et al., the correction term ``h Γ(θ)`` (the divergence of ``G``) is dropped; the error
it causes is small when ``G`` changes slowly (``decay`` close to 1).

Example:
    >>> import jax, jax.numpy as jnp
    >>> from bnn_ppl.inference import sgld, full_batch_estimator
    >>> est = full_batch_estimator(lambda z: 0.5 * jnp.sum(z ** 2))
    >>> step = sgld.build_kernel()
    >>> state = sgld.init(jnp.zeros(3))
    >>> grad_fn, _ = est.batch(None)
    >>> state, info = step(jax.random.key(0), state, grad_fn, 0.01)
    >>> state.position.shape, float(info.step_size)
    ((3,), 0.01)
"""

from __future__ import annotations

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

__all__ = ["SGLDState", "SGLDInfo", "init", "build_kernel", "SGLD"]


class SGLDState(NamedTuple):
    """``position``; ``square_avg``: the RMSprop average of squared gradients (``None``
    without preconditioning); ``count``: gradient evaluations so far (for debiasing)."""

    position: PyTree
    square_avg: PyTree | None
    count: Array


class SGLDInfo(NamedTuple):
    """``step_size`` ``h``; ``potential_energy``: the (minibatch) estimate of ``U`` at the
    position the gradient was taken; ``preconditioner``: mean of ``G`` (1 without)."""

    step_size: Array
    potential_energy: Array
    preconditioner: Array


def init(position: PyTree, preconditioning: bool = False) -> SGLDState:
    """The state at ``position``."""
    square_avg = jax.tree.map(jnp.zeros_like, position) if preconditioning else None
    return SGLDState(position, square_avg, jnp.zeros((), jnp.int32))


def build_kernel(
    preconditioning: bool = False, decay: float = 0.99, epsilon: float = 1e-5
) -> Callable[[PRNGKey, SGLDState, GradFn, Array], tuple[SGLDState, SGLDInfo]]:
    """``step(rng_key, state, grad_fn, step_size) -> (state, info)``; one gradient per step.

    Args:
        preconditioning: RMSprop preconditioning (pSGLD); the state must come from
            ``init(..., preconditioning=True)``.
        decay: RMSprop's averaging factor ``ρ`` (``V ← ρV + (1-ρ)g²``).
        epsilon: ``ε`` in ``G = 1 / (ε + √V)``.
    """

    def step(
        rng_key: PRNGKey, state: SGLDState, grad_fn: GradFn, step_size: Array
    ) -> tuple[SGLDState, SGLDInfo]:
        h = step_size
        u, g = grad_fn(state.position)
        noise = normal_like(rng_key, state.position)
        count = state.count + 1
        if preconditioning:
            square_avg = jax.tree.map(
                lambda v, gi: decay * v + (1 - decay) * gi**2, state.square_avg, g
            )
            debias = 1 - decay ** count.astype(jnp.result_type(float))
            precond = jax.tree.map(
                lambda v: 1 / (epsilon + jnp.sqrt(v / debias.astype(v.dtype))), square_avg
            )
        else:
            square_avg = None
            precond = jax.tree.map(jnp.ones_like, state.position)
        position = jax.tree.map(
            lambda x, gi, p, e: x - h * p * gi + jnp.sqrt(2 * h * p) * e,
            state.position,
            g,
            precond,
            noise,
        )
        info = SGLDInfo(h, u, tree_mean(precond))
        return SGLDState(position, square_avg, count), info

    return step


class SGLD(SGMCMCKernel):
    """SGLD as a ``numpyro.infer.MCMC`` kernel.

    Arguments ``potential, x, y, potential_fn, batch_size, step_size, chunk_size, devices,
    init_method`` as in :class:`~bnn_ppl.inference.gradients.SGMCMCKernel`; ``preconditioning,
    decay, epsilon`` as in :func:`build_kernel`.

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

    def __init__(
        self,
        potential: FullBatchPotential | BNN | None = None,
        x: Any = None,
        y: Any = None,
        *,
        potential_fn: Callable[[Params], Array] | None = None,
        batch_size: int | None = None,
        step_size: float | Schedule = 1e-4,
        preconditioning: bool = False,
        decay: float = 0.99,
        epsilon: float = 1e-5,
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
        if not 0 <= decay < 1:
            raise InputValueError(f"decay must lie in [0, 1), got {decay!r}.")
        validation.check_positive("epsilon", epsilon)
        self.preconditioning = bool(preconditioning)
        self._init_fn = lambda position: init(position, self.preconditioning)
        self._step = build_kernel(self.preconditioning, decay, epsilon)

    def get_diagnostics_str(self, state: SGMCMCState) -> str:
        i = state.info
        return f"step size {float(i.step_size):.2e}, U {float(i.potential_energy):.4g}"

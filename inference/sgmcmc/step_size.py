"""The recommended step size of each SG-MCMC sampler, from two measured scales of the problem."""

# Notes:
#
# An SG-MCMC step size is only small or large relative to the target: its stiffest curvature
# ``λ_max`` (the largest Hessian eigenvalue of the potential ``U``; ``ω_max = √(λ_max/m)`` is the
# fastest frequency of the dynamics) and the minibatch gradient noise ``σ²_max`` (the largest
# per-coordinate variance of the batch gradient; ``σ² ≈ (N/b)·λ`` in the stiffest directions of
# a well-specified model). :func:`gradient_scales` measures both at a position, and
# :func:`recommended_step_size` turns them into each sampler's step, chosen so that its
# stationary bias on a Gaussian stays at about 1 % of a variance (the formulas are the discrete
# Lyapunov equations in the kernels' docstrings):
#
# =========  ============================================  =====================================
# sampler    recommended ``h``                             why
# =========  ============================================  =====================================
# ``SGLD``   ``0.02 / (λ_max + σ²_max)``                   bias ``h(λ + σ²)/2`` = 1 %
# ``SGHMC``  ``min(0.1/ω_max, √(0.5 κ m/σ²_max))``         position ``O(h²λ)``: +0.3 %; friction
#                                                          ``hC_i/m = h²σ²/(2κm) ≤ ¼`` (room
#                                                          for noise 2x the measured)
# ``SGNHT``  ``0.1/ω_max``, or less so that ``hξ/2 ≤``     cold by ``hξ/2``, with the friction
#            ``0.01``                                      ``ξ = max(A + b̂, b̂/κ)``,
#                                                          ``b̂ = hσ²_max/(2m)``
# ``ATMC``   ``min(0.1/ω_max, √(0.69 κ m/σ²_max))``        bias ``(βh)²/12 + O(h²λ)``: ≤ 1 %,
#                                                          ``βh = h²σ²/(2κm) ≤ 0.35``
# =========  ============================================  =====================================
#
# ``κ`` is the kernels' ``noise_share`` (default 0.1): the friction of a coordinate is raised
# until its gradient noise supplies at most that share of its heat (see :mod:`bnn_ppl.inference.
# sghmc`); SGLD has no friction to raise, hence its step shrinks with ``σ²`` directly.
#
# With a cyclical schedule, use the recommended ``h`` as ``h0``: every step is then at most as
# large. :func:`recommended_friction` ties the momentum kernels' least friction to that ``h0``
# (``0.1/h0``; SGNHT ``0.01/h0``): a friction of 1 per unit time lets the momentum forget its
# start only over ``1/h`` steps, more than a run spans where the curvature is large
# (``h ∝ 1/√λ_max``), and the energy released as the chain settles then stays in the momentum
# (hot draws). Measure the scales where the chain will be, not at a prior draw (whose curvature
# and noise can be orders of magnitude off): at the end of a short run, or at a MAP estimate
# (:func:`~bnn_ppl.inference.map_estimate`).

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from bnn_ppl import validation
from bnn_ppl.inference.potential.bnn import FullBatchPotential
from bnn_ppl.inference.sgmcmc.gradients import gradient_estimator
from bnn_ppl.types import Params, PRNGKey
from bnn_ppl.validation import InputTypeError

__all__ = [
    "GradientScales",
    "gradient_scales",
    "recommended_step_size",
    "recommended_step_sizes",
    "recommended_friction",
    "SAMPLERS",
]

SAMPLERS = ("SGLD", "SGHMC", "SGNHT", "ATMC")


class GradientScales(NamedTuple):
    """``curvature``: ``λ_max``, the largest Hessian eigenvalue (in magnitude) of the potential
    at the position; ``noise``: ``σ²_max``, the largest per-coordinate variance of the
    gradient over batches of ``batch_size`` rows drawn with replacement (0 for full batch)."""

    curvature: float
    noise: float
    batch_size: int | None


def gradient_scales(
    potential: FullBatchPotential | Callable[[Any], Any],
    position: Params,
    batch_size: int | None = None,
    *,
    rng_key: PRNGKey,
    num_batches: int = 32,
    num_iterations: int = 50,
) -> GradientScales:
    """Measure ``λ_max`` (power iteration on Hessian-vector products of the full potential)
    and ``σ²_max`` (``num_batches`` independent batch gradients) at ``position``.

    Args:
        potential: a :class:`~bnn_ppl.inference.FullBatchPotential`, or a plain
            ``potential_fn(position) -> scalar`` (full batch only).
        position: unconstrained parameters (one chain's).
        batch_size: rows per batch (``None``: full batch, no noise).
        rng_key: for the power iteration's start and the batches.
        num_batches: batch gradients for the variance, ``>= 2``.
        num_iterations: power-iteration steps, ``>= 1``.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from bnn_ppl.inference import gradient_scales, recommended_step_size
        >>> u = lambda z: 0.5 * (100.0 * z["x"][0] ** 2 + z["x"][1] ** 2)
        >>> scales = gradient_scales(u, {"x": jnp.zeros(2)}, rng_key=jax.random.key(0))
        >>> round(scales.curvature, 3), scales.noise
        (100.0, 0.0)
        >>> round(recommended_step_size("ATMC", scales), 4)  # 0.1 / √100 (no noise)
        0.01
    """
    num_batches = validation.check_int("num_batches", num_batches, minimum=2)
    num_iterations = validation.check_int("num_iterations", num_iterations, minimum=1)
    if isinstance(potential, FullBatchPotential):
        batch_size = validation.check_batch_size("batch_size", batch_size, potential.num_data)
        data = potential.data

        def potential_of(data: Any) -> Callable[[Any], Any]:
            return potential.potential_fn_gen(data)
    elif callable(potential):
        if batch_size is not None:
            raise InputTypeError(
                "batch_size needs a FullBatchPotential; a plain potential_fn has no rows."
            )
        data = None

        def potential_of(data: Any) -> Callable[[Any], Any]:
            return potential
    else:
        raise InputTypeError(
            f"potential must be a FullBatchPotential or a callable, got {type(potential).__name__}."
        )
    flat, unravel = ravel_pytree(position)
    start_key, batch_key = jax.random.split(rng_key)

    @jax.jit
    def power(v0: jax.Array, data: Any) -> jax.Array:
        u = potential_of(data)
        grad = jax.grad(lambda v: u(unravel(v)))

        def hvp(v: jax.Array) -> jax.Array:  # reverse over reverse: custom_vjp layers allow it
            return jax.grad(lambda w: jnp.vdot(grad(w), v))(flat)

        def body(_: Any, v: jax.Array) -> jax.Array:
            hv = hvp(v)
            return hv / jnp.maximum(jnp.linalg.norm(hv), jnp.finfo(hv.dtype).tiny)

        v = jax.lax.fori_loop(0, num_iterations, body, v0 / jnp.linalg.norm(v0))
        return jnp.abs(v @ hvp(v))

    curvature = float(power(jax.random.normal(start_key, flat.shape, flat.dtype), data))
    if batch_size is None:
        return GradientScales(curvature, 0.0, None)

    @jax.jit
    def batch_grads(keys: jax.Array, data: Any) -> jax.Array:
        est = gradient_estimator(potential, data, batch_size)

        def one(key: PRNGKey) -> jax.Array:
            grad_fn, _ = est.batch(est.init(key))
            return ravel_pytree(grad_fn(position).grad)[0]

        return jax.lax.map(one, keys)

    grads = batch_grads(jax.random.split(batch_key, num_batches), data)
    noise = float(jnp.max(jnp.var(grads, axis=0, ddof=1)))
    return GradientScales(curvature, noise, batch_size)


def recommended_step_size(
    sampler: str,
    scales: GradientScales,
    *,
    mass: float = 1.0,
    diffusion: float = 1.0,
    noise_share: float = 0.1,
) -> float:
    """The step size of the table in the module docstring for ``sampler`` at ``scales``.

    Args:
        sampler: ``"SGLD"``, ``"SGHMC"``, ``"SGNHT"`` or ``"ATMC"``.
        scales: from :func:`gradient_scales`.
        mass: the kernel's ``m`` (momentum samplers).
        diffusion: SGNHT's ``A``.
        noise_share: the kernel's ``κ`` (SGHMC, SGNHT).
    """
    validation.check_choice("sampler", sampler, SAMPLERS)
    if not isinstance(scales, GradientScales):
        raise InputTypeError(
            f"scales must be a GradientScales (from gradient_scales), got {type(scales).__name__}."
        )
    lam = validation.check_positive("scales.curvature", scales.curvature)
    s2 = validation.check_number("scales.noise", scales.noise, low=0.0)
    m = validation.check_positive("mass", mass)
    a = validation.check_positive("diffusion", diffusion)
    kappa = validation.check_number("noise_share", noise_share, low=0.0, high=1.0,
                                    low_inclusive=False)  # fmt: skip
    if sampler == "SGLD":
        return 0.02 / (lam + s2)
    h = 0.1 * math.sqrt(m / lam)
    if sampler == "SGHMC" and s2 > 0:
        h = min(h, math.sqrt(0.5 * kappa * m / s2))  # h C_i / m = h² σ² / (2 κ m) <= 1/4
    if sampler == "ATMC" and s2 > 0:
        h = min(h, math.sqrt(0.69 * kappa * m / s2))  # β h = h² σ² / (2 κ m) <= 0.35
    if sampler == "SGNHT":

        def cold(h: float) -> float:  # h ξ / 2, ξ = max(A + b̂, b̂/κ), b̂ = h σ² / (2m)
            b = h * s2 / (2 * m)
            return h * max(a + b, b / kappa) / 2

        lo, hi = 0.0, h
        if cold(hi) > 0.01:
            for _ in range(100):  # bisection: cold() increases with h
                mid = (lo + hi) / 2
                lo, hi = (mid, hi) if cold(mid) <= 0.01 else (lo, mid)
            h = lo
    return h


FRICTION_ARGUMENTS = {"SGHMC": "friction", "SGNHT": "diffusion", "ATMC": "momentum_noise"}
_FRICTION_PER_STEP = {"SGHMC": 0.1, "SGNHT": 0.01, "ATMC": 0.1}


def recommended_friction(sampler: str, step_size: float, *, mass: float = 1.0) -> dict[str, float]:
    """The least friction of a momentum sampler at the (cycle-start) step ``step_size``, as the
    keyword of its kernel: ``max(1, γ m/h)`` with ``γ = 0.1`` (SGHMC's ``friction``, ATMC's
    ``momentum_noise``: the momentum forgets itself over about ten steps at ``h``, with the
    split step's bias ``(γ)²/12 < 0.1 %``) and ``γ = 0.01`` for SGNHT's ``diffusion`` (its Euler
    friction runs cold by ``hA/2``: 0.5 %). SGLD has no momentum: ``{}``.

    Example:
        >>> recommended_friction("ATMC", 1e-3)
        {'momentum_noise': 100.0}
        >>> recommended_friction("SGLD", 1e-3)
        {}
    """
    validation.check_choice("sampler", sampler, SAMPLERS)
    h = validation.check_positive("step_size", step_size)
    m = validation.check_positive("mass", mass)
    if sampler == "SGLD":
        return {}
    return {FRICTION_ARGUMENTS[sampler]: max(1.0, _FRICTION_PER_STEP[sampler] * m / h)}


def recommended_step_sizes(
    potential: FullBatchPotential,
    position: Params,
    batch_size: int | None,
    *,
    rng_key: PRNGKey,
    samplers: tuple[str, ...] = SAMPLERS,
) -> tuple[dict[str, float], GradientScales]:
    """Every sampler's :func:`recommended_step_size` at the :func:`gradient_scales` measured at
    ``position`` (constrained parameters, one chain's: e.g. a posterior draw), and the scales.

    Example:
        >>> import jax, numpy as np
        >>> import bnn_ppl as bp
        >>> from bnn_ppl.config import MAPConfig
        >>> from bnn_ppl.inference import full_batch_potential
        >>> from bnn_ppl.models import MLP
        >>> x = np.linspace(-1, 1, 40, dtype=np.float32)[:, None]
        >>> model = bp.BNN(MLP(hidden=(), out=1), bp.priors.Normal(1.0),
        ...                bp.likelihoods.Gaussian(0.1))
        >>> pot = full_batch_potential(model, x, 2 * x[:, 0])
        >>> fitted = bp.fit(model, (x, 2 * x[:, 0]), MAPConfig(num_steps=50), jax.random.key(0))
        >>> position = {k: v[0, 0] for k, v in fitted.samples.items()}  # (chain, draw, ...)
        >>> steps, scales = recommended_step_sizes(pot, position, 10, rng_key=jax.random.key(1))
        >>> sorted(steps) == sorted(SAMPLERS), scales.batch_size
        (True, 10)
    """
    if not isinstance(potential, FullBatchPotential):
        raise InputTypeError(
            f"potential must be a FullBatchPotential, got {type(potential).__name__}."
        )
    scales = gradient_scales(potential, potential.unconstrain(position), batch_size,
                             rng_key=rng_key)  # fmt: skip
    return {name: recommended_step_size(name, scales) for name in samplers}, scales

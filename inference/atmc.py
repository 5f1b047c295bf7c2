r"""Adaptive Thermostat Monte Carlo (ATMC; Heek & Kalchbrenner 2019).

Energy and dynamics (the paper's eqs. 2-4)
------------------------------------------
With potential ``U = L`` (here the tempered negative log joint, estimated on minibatches),
momentum ``p`` and one thermostat ``ξ`` per parameter, the energy is

    H(θ, p, ξ) = L(θ) + K(p) + ½ (ξ - diag(B)/(2m))²,

where ``B`` is the (assumed diagonal, constant) covariance of the minibatch gradient noise per
unit time. The paper's choice of ``D(z)`` and ``Q(z)`` in Ma et al.'s recipe (eq. 1, 3) gives,
for the Gaussian momentum ``K(p) = |p|²/(2m)`` (eq. 4),

    dθ = p/m dt,   dp = (-∇L̃(θ) - β(ξ) p) dt + √(2 α(ξ) m) dW,   dξ = (p²/m - 1) dt,

with the adaptive thermostat (Sec. 2.4)

    α(ξ) = max(D - ξ, 0),    β(ξ) = α(ξ) + ξ = max(D, ξ) ≥ D,

so the friction never drops below ``D`` and the injected noise shrinks as the thermostat
detects gradient noise. Its stationary law has ``θ ~ exp(-L)``, ``p ~ exp(-K)`` and
``ξ ~ N(B/(2m), 1)`` per coordinate (Gaussian momentum; for ``α(ξ) m + B/2 ≥ 0``).

Relativistic momentum (eqs. 5-6). For the symmetric hyperbolic kinetic energy
``K(p) = Σ m c² [√(p²/(m²c²) + 1) - 1]`` we have ``∇K(p) = p / M(p)`` with
``M(p) = m √(p²/(m²c²) + 1)`` (so ``|Δθ| ≤ h c`` per step), and substituting ``K`` into the
recipe gives ``dθ = ∇K(p) dt``, friction ``β(ξ) m ∇K(p) = β(ξ) (m/M(p)) p`` and
``dξ = (m ∇K(p)² - m ∇²K(p)) dt`` (``= p²/m - 1`` in the Gaussian limit ``c → ∞``; both terms
balance in expectation under ``exp(-K)``). As the paper does, the friction coefficient
``b = β(ξ) m / M(p)`` is held constant in ``p`` over a momentum sub-step (frozen at its start);
this makes the relativistic scheme first order in ``h`` (measured on a unit Gaussian with
``c = 3``: +0.6% variance at ``h = 0.1``, +0.2% at ``0.05``), while the Gaussian one is second
order (+0.1% at ``h = 0.1``).

Integrator (eqs. 7-11)
----------------------
Split the SDE into ``A`` (``dθ = ∇K(p) dt``, ``dξ = (m∇K² - m∇²K) dt``, ``p`` fixed: exact
with ``p`` constant) and ``B`` (``θ, ξ`` fixed; the momentum follows an Ornstein-Uhlenbeck
process with the gradient ``g`` held fixed). The Strang splitting
``φ^h = φ_B^{h/2} ∘ φ_A^h ∘ φ_B^{h/2}`` is second order. Two consecutive half steps
``φ_B^{h/2}`` at the same ``θ, ξ`` and gradient compose exactly into ``φ_B^h`` (for Gaussian
momentum the OU transition is a semigroup: ``ou(ou(p, h/2), h/2) = ou(p, h)`` in law), so a
chain of Strang steps is ``φ_B^{h/2} ∘ (φ_A^h ∘ φ_B^h)^{n-1} ∘ φ_A^h ∘ φ_B^{h/2}``:
Algorithm 1 runs the fused step ``φ_A^h ∘ φ_B^h`` (one gradient per step; ``p`` in the state is
the half-step momentum of the Strang picture). Under a step-size schedule the fused step uses
``h_t`` for both parts.

The exact OU step (the paper's eqs. 10-11 and Algorithm 1 as printed have sign typos)
-------------------------------------------------------------------------------------
For ``dp = (-g - βp) dt + √(2αm) dW`` with ``g, α, β`` fixed over ``[0, h]``,
``d(e^{βt} p) = e^{βt} (-g dt + √(2αm) dW)``, so

    p_h = e^{-βh} p - g ∫₀ʰ e^{-β(h-s)} ds + √(2αm) ∫₀ʰ e^{-β(h-s)} dW_s
        = e^{-βh} p - ((1 - e^{-βh}) / β) g + √(α m (1 - e^{-2βh}) / β) η,   η ~ N(0, 1),

the variance by Itô's isometry, ``2αm ∫₀ʰ e^{-2β(h-s)} ds = αm (1 - e^{-2βh}) / β``. The
paper prints ``e^{+βh}[p - γ₁ g + √(γ₂ α) η]`` with ``γ_a = (e^{aβh} - 1)/β``; the correct
prefactor is ``e^{-βh}`` (and ``m`` belongs under the root), which expands to the line above.
Algorithm 1 also reads ``θ ← h p/m`` and ``ξ ← h[p/m - 1]`` for ``θ ← θ + h p/m`` and
``ξ ← ξ + h[p²/m - 1]``. We evaluate the coefficients as ``h · φ(βh)`` and
``2αmh · φ(2βh)`` with ``φ(x) = (1 - e^{-x})/x = -expm1(-x)/x`` (``φ(0) = 1``), which is
accurate for ``βh → 0`` (the limits ``p - h g + √(2αmh) η``), for large ``βh`` and for
negative ``β``.

Burn-in. The thermostat has unit "mass": ``ξ`` moves at rate ``<p∇K> - 1 ≥ -1`` per unit
time. Started far from the typical set (e.g. from a prior draw), the potential energy released
into the momentum makes ``ξ`` overshoot (by about twice the excess energy per coordinate over
``D``) and then relax over ``ξ_max`` time units, ``ξ_max / h`` steps: budget the warmup for it
(``info.xi_mean`` shows it). Likewise, with a cyclical schedule ``ξ`` lags the falling step size,
so the kinetic temperature at cycle ends can sit below 1.

Defaults: ``D = -log(0.9)/h0`` (the paper's: ``e^{-βh0} ≤ 0.9``, at least 10% momentum
damping per step), Gaussian momentum with ``m = 1``. The paper's CIFAR-10 settings are
``m = (v/h0)^{-2}`` and ``c = v_max/h0`` for an average speed ``v = 3·10⁻⁴`` and a top speed
``v_max = 10⁻³`` per step. The state starts at ``p = 0``, ``ξ = 0`` (Algorithm 1).

Example:
    >>> import jax, jax.numpy as jnp
    >>> from bnn_ppl.inference import atmc, full_batch_estimator
    >>> est = full_batch_estimator(lambda z: 0.5 * jnp.sum(z ** 2))
    >>> step = atmc.build_kernel(momentum_noise=atmc.default_momentum_noise(0.1))
    >>> state, info = step(jax.random.key(0), atmc.init(jnp.ones(3)), est.batch(None)[0], 0.1)
    >>> round(float(info.beta_mean), 4), round(atmc.default_momentum_noise(0.1), 4)  # ξ=0: β=D
    (1.0536, 1.0536)
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

__all__ = [
    "ATMCState",
    "ATMCInfo",
    "init",
    "build_kernel",
    "ATMC",
    "default_momentum_noise",
    "thermostat",
    "kinetic_gradient",
    "thermostat_force",
    "friction_factor",
    "ou_step",
    "flow_a",
    "flow_b",
]


class ATMCState(NamedTuple):
    """``position`` θ, ``momentum`` p and per-parameter thermostats ``xi`` (all alike)."""

    position: PyTree
    momentum: PyTree
    xi: PyTree


class ATMCInfo(NamedTuple):
    """Per step: ``step_size`` ``h``; ``potential_energy``: the (minibatch) estimate of ``U`` at
    the position the gradient was taken; means over all coordinates of the new state's
    ``kinetic_temperature`` ``p·∇K(p)`` (``p²/m`` for Gaussian momentum; 1 at equilibrium) and
    thermostat ``xi``, and of the ``alpha`` (noise) and ``beta`` (friction) used in the step."""

    step_size: Array
    potential_energy: Array
    kinetic_temperature: Array
    xi_mean: Array
    alpha_mean: Array
    beta_mean: Array


def default_momentum_noise(h0: float) -> float:
    """The paper's ``D = -log(0.9) / h0``: friction ``β ≥ D`` damps ``p`` by at least 10%."""
    return -math.log(0.9) / validation.check_positive("h0", h0)


# ----------------------------------------------------------------------- building blocks
def thermostat(xi: Array, momentum_noise: float) -> tuple[Array, Array]:
    """``α(ξ) = max(D - ξ, 0)`` and ``β(ξ) = α(ξ) + ξ`` (elementwise)."""
    alpha = jnp.maximum(momentum_noise - xi, 0.0)
    return alpha, alpha + xi


def kinetic_gradient(p: Array, mass: float, c: float | None = None) -> Array:
    """``∇K(p)``: ``p/m`` (Gaussian, ``c=None``) or ``p / M(p)``, ``M = m√(p²/(mc)² + 1)``."""
    if c is None:
        return p / mass
    return p / (mass * jnp.sqrt(1.0 + (p / (mass * c)) ** 2))


def thermostat_force(p: Array, mass: float, c: float | None = None) -> Array:
    """``m ∇K(p)² - m ∇²K(p)``, the drift of ``ξ``: ``p²/m - 1`` for Gaussian momentum,
    ``p²/(m(1+s)) - (1+s)^{-3/2}`` with ``s = p²/(mc)²`` for the relativistic one."""
    if c is None:
        return p**2 / mass - 1.0
    s = (p / (mass * c)) ** 2
    return p**2 / (mass * (1.0 + s)) - (1.0 + s) ** -1.5


def friction_factor(p: Array, mass: float, c: float | None = None) -> Array:
    """``m / M(p)``: the friction ``β m ∇K(p)`` is ``β (m/M(p)) p`` (1 for Gaussian)."""
    if c is None:
        return jnp.ones_like(p)
    return 1.0 / jnp.sqrt(1.0 + (p / (mass * c)) ** 2)


def _phi(x: Array) -> Array:
    """``(1 - e^{-x}) / x`` with ``φ(0) = 1``, accurate near 0 (``expm1``) and for x < 0."""
    small = jnp.abs(x) < 1e-4
    safe = jnp.where(small, 1.0, x)
    return jnp.where(small, 1.0 - x / 2 + x**2 / 6, -jnp.expm1(-safe) / safe)


def ou_step(
    p: Array,
    g: Array,
    alpha: Array,
    beta: Array,
    h: Array,
    mass: float,
    noise: Array,
) -> Array:
    """Exact solution of ``dp = (-g - βp) dt + √(2αm) dW`` over time ``h``, ``g, α, β`` fixed.

    ``p_h = e^{-βh} p - ((1 - e^{-βh})/β) g + √(αm (1 - e^{-2βh})/β) η`` with ``η = noise``
    (see the module docstring; the ``β → 0`` limit is ``p - h g + √(2αmh) η``).
    """
    x = beta * h
    decay = jnp.exp(-x)
    drift = h * _phi(x)
    variance = 2.0 * alpha * mass * h * _phi(2.0 * x)
    return decay * p - drift * g + jnp.sqrt(jnp.maximum(variance, 0.0)) * noise


def flow_a(
    position: PyTree, momentum: PyTree, xi: PyTree, h: Array, mass: float, c: float | None = None
) -> tuple[PyTree, PyTree]:
    """``φ_A^h`` (eq. 9), exact: ``θ + h ∇K(p)`` and ``ξ + h (m∇K(p)² - m∇²K(p))``; ``p`` kept."""
    position = jax.tree.map(lambda x, p: x + h * kinetic_gradient(p, mass, c), position, momentum)
    xi = jax.tree.map(lambda z, p: z + h * thermostat_force(p, mass, c), xi, momentum)
    return position, xi


def flow_b(
    rng_key: PRNGKey,
    momentum: PyTree,
    grad: PyTree,
    xi: PyTree,
    h: Array,
    momentum_noise: float,
    mass: float,
    c: float | None = None,
) -> tuple[PyTree, PyTree, PyTree]:
    """``φ_B^h`` (eqs. 10-11 corrected): the exact OU momentum update at fixed ``θ, ξ, g``.

    Returns the new momentum and the ``α`` and ``β`` used (trees like ``xi``). With the
    relativistic momentum the friction ``β m/M(p)`` is frozen at the incoming ``p``.
    """
    noise = normal_like(rng_key, momentum)
    alpha = jax.tree.map(lambda z: thermostat(z, momentum_noise)[0], xi)
    beta = jax.tree.map(lambda a, z: a + z, alpha, xi)
    new = jax.tree.map(
        lambda p, g, a, b, e: ou_step(p, g, a, b * friction_factor(p, mass, c), h, mass, e),
        momentum,
        grad,
        alpha,
        beta,
        noise,
    )
    return new, alpha, beta


# ----------------------------------------------------------------------------- kernel
def init(position: PyTree) -> ATMCState:
    """Algorithm 1's start: ``p = 0``, ``ξ = 0`` at ``position``."""
    zeros = jax.tree.map(jnp.zeros_like, position)
    return ATMCState(position, zeros, jax.tree.map(jnp.zeros_like, position))


def build_kernel(
    momentum_noise: float, mass: float = 1.0, c: float | None = None
) -> Callable[[PRNGKey, ATMCState, GradFn, Array], tuple[ATMCState, ATMCInfo]]:
    """Algorithm 1: ``step(rng_key, state, grad_fn, step_size) -> (state, info)``.

    One (minibatch) gradient per step: ``p ← φ_B^h(p; ∇Ũ(θ), ξ)``, then
    ``(θ, ξ) ← φ_A^h(θ, ξ; p)``.

    Args:
        momentum_noise: ``D >= 0`` (see :func:`default_momentum_noise`).
        mass: ``m > 0``.
        c: speed limit of the relativistic momentum (``None``: Gaussian momentum).
    """
    d, m = float(momentum_noise), float(mass)
    c = None if c is None else float(c)

    def step(
        rng_key: PRNGKey, state: ATMCState, grad_fn: GradFn, step_size: Array
    ) -> tuple[ATMCState, ATMCInfo]:
        h = step_size
        u, g = grad_fn(state.position)
        momentum, alpha, beta = flow_b(rng_key, state.momentum, g, state.xi, h, d, m, c)
        position, xi = flow_a(state.position, momentum, state.xi, h, m, c)
        temperature = tree_mean(jax.tree.map(lambda p: p * kinetic_gradient(p, m, c), momentum))
        info = ATMCInfo(h, u, temperature, tree_mean(xi), tree_mean(alpha), tree_mean(beta))
        return ATMCState(position, momentum, xi), info

    return step


class ATMC(SGMCMCKernel):
    """ATMC as a ``numpyro.infer.MCMC`` kernel.

    Arguments ``potential, x, y, potential_fn, batch_size, step_size, chunk_size, devices,
    init_method`` as in :class:`~bnn_ppl.inference.gradients.SGMCMCKernel`;
    ``momentum_noise`` (``D``, default ``-log(0.9)/h0`` with ``h0`` the schedule's first step
    size), ``mass`` (``m``) and ``c`` (``None``: Gaussian momentum) as in :func:`build_kernel`.

    Example:
        >>> import jax
        >>> import bnn_ppl as bp
        >>> from numpyro.infer import MCMC
        >>> from bnn_ppl.models import MLP
        >>> from bnn_ppl.inference import ATMC, full_batch_potential
        >>> from bnn_ppl.inference.schedules import cyclical_cosine, cycle_end_samples
        >>> data = bp.data.load("digits")
        >>> model = bp.BNN(MLP(hidden=(16,), out=10), bp.priors.Normal(0.3),
        ...                bp.likelihoods.Categorical())
        >>> pot = full_batch_potential(model, data.x_train, data.y_train)
        >>> kernel = ATMC(pot, batch_size=128, step_size=cyclical_cosine(0.02, 100))
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

    def __init__(
        self,
        potential: FullBatchPotential | BNN | None = None,
        x: Any = None,
        y: Any = None,
        *,
        potential_fn: Callable[[Params], Array] | None = None,
        batch_size: int | None = None,
        step_size: float | Schedule = 1e-3,
        momentum_noise: float | None = None,
        mass: float = 1.0,
        c: float | None = None,
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
        self.c = None if c is None else validation.check_positive("c", c)
        if momentum_noise is None:
            momentum_noise = default_momentum_noise(self.initial_step_size)
        if not momentum_noise >= 0:
            raise InputValueError(f"momentum_noise must be >= 0, got {momentum_noise!r}.")
        self.momentum_noise = float(momentum_noise)
        self._init_fn = init
        self._step = build_kernel(self.momentum_noise, self.mass, self.c)

    def get_diagnostics_str(self, state: SGMCMCState) -> str:
        i = state.info
        return (
            f"step size {float(i.step_size):.2e}, T_kin {float(i.kinetic_temperature):.3f}, "
            f"xi {float(i.xi_mean):.3g}"
        )

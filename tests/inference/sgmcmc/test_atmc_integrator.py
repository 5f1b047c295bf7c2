"""ATMC's integrator (bnn_ppl.inference.sgmcmc.atmc_integrator) and its thermostat, piece by piece.

The exact Ornstein-Uhlenbeck momentum step against its closed form (and an Euler-Maruyama
simulation of the SDE) by Monte Carlo, its beta -> 0 limits, the fusion of half steps, the A/B
flows on the harmonic oscillator (second order, symplectic, reversible, the thermostat's
drift), the relativistic kinetic energy's derivatives, and the paper's thermostat settling at
<p²/m> = 1 and ξ = B/(2m) under injected gradient noise.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conjugate import assert_matches_gaussian
from numpyro.diagnostics import effective_sample_size

from bnn_ppl.inference.sgmcmc import atmc as atmc_mod
from bnn_ppl.inference.sgmcmc.gradients import GradientEstimate, full_batch_estimator

pytestmark = pytest.mark.run_bound  # long chains: XLA optimises them (conftest.py)

MEAN = np.array([1.0, -1.0])
COV = np.array([[1.0, 0.5], [0.5, 1.0]])
PREC = np.linalg.inv(COV)


def gaussian_potential(z):
    d = z["x"] - jnp.asarray(MEAN, jnp.float32)
    return 0.5 * d @ jnp.asarray(PREC, jnp.float32) @ d


def _ou_closed_form(p, g, alpha, beta, h, m):
    """Mean and variance of the OU transition, written out independently (float64)."""
    if beta == 0:
        return p - h * g, 2 * alpha * m * h
    one_minus_decay = -math.expm1(-beta * h)  # 1 - e^{-βh}, accurate for tiny βh
    return (
        (1 - one_minus_decay) * p - one_minus_decay / beta * g,
        alpha * m * -math.expm1(-2 * beta * h) / beta,
    )


OU_CASES = [
    # p, g, alpha, beta, h, m
    (1.0, 0.5, 1.0, 2.0, 0.3, 2.0),
    (0.2, -1.0, 0.5, 0.0, 0.5, 1.0),  # no friction: the β -> 0 limit
    (-1.0, 1.0, 0.0, 3.0, 0.2, 1.0),  # no noise
    (3.0, 1.0, 2.0, 50.0, 0.1, 0.5),  # stiff: βh = 5
]


@pytest.mark.parametrize("p,g,alpha,beta,h,m", OU_CASES)
def test_ou_step_matches_the_closed_form_and_the_sde(p, g, alpha, beta, h, m):
    mean, var = _ou_closed_form(p, g, alpha, beta, h, m)
    n = 200_000
    # the step itself: deterministic part and noise scale, then its draws by Monte Carlo
    det = float(atmc_mod.ou_step(p, g, alpha, beta, h, m, 0.0))
    assert det == pytest.approx(mean, rel=1e-5, abs=1e-6)
    scale = float(atmc_mod.ou_step(0.0, 0.0, alpha, beta, h, m, 1.0))
    assert scale**2 == pytest.approx(var, rel=1e-5, abs=1e-9)
    eta = jax.random.normal(jax.random.key(0), (n,))
    draws = np.asarray(atmc_mod.ou_step(p, g, alpha, beta, h, m, eta), np.float64)
    sd = math.sqrt(var)
    assert abs(draws.mean() - mean) < 4.5 * sd / math.sqrt(n) + 1e-6
    assert abs(draws.var() - var) < 4.5 * var * math.sqrt(2 / n) + 1e-9
    # an Euler-Maruyama simulation of dp = (-g - βp) dt + sqrt(2αm) dW with 1000 sub-steps
    # (its bias O(β h / 1000) is far below the MCSE) agrees with the closed form
    k, paths = 1000, 20_000
    dt = h / k

    def em(pt, key):
        dw = jax.random.normal(key, pt.shape) * math.sqrt(dt)
        return pt + (-g - beta * pt) * dt + math.sqrt(2 * alpha * m) * dw, None

    sim, _ = jax.lax.scan(
        em, jnp.full((paths,), p, jnp.float32), jax.random.split(jax.random.key(1), k)
    )
    sim = np.asarray(sim, np.float64)
    assert abs(sim.mean() - mean) < 4.5 * sd / math.sqrt(paths) + 2e-3 * abs(mean) + 1e-5
    if var > 0:
        assert abs(sim.var() - var) < 4.5 * var * math.sqrt(2 / paths) + 2e-3 * var
    else:
        assert sim.std() < 1e-5


def test_ou_step_is_stable_as_beta_goes_to_zero_and_beyond():
    p, g, alpha, h, m = 0.7, 1.3, 0.8, 0.05, 1.5
    limit_mean, limit_var = _ou_closed_form(p, g, alpha, 0.0, h, m)
    for beta in (0.0, 1e-30, 1e-12, 1e-8, 1e-5, 9.9e-5, 1.01e-4, 1e-3):
        mean = float(atmc_mod.ou_step(p, g, alpha, beta, h, m, 0.0))
        sd = float(atmc_mod.ou_step(0.0, 0.0, alpha, beta, h, m, 1.0))
        want_mean, want_var = _ou_closed_form(p, g, alpha, beta, h, m)
        assert math.isfinite(mean) and math.isfinite(sd)
        assert mean == pytest.approx(want_mean, rel=1e-6)
        assert sd**2 == pytest.approx(want_var, rel=1e-5)
        assert mean == pytest.approx(limit_mean, rel=2 * beta * h + 1e-6)
    # large βh: the momentum forgets p; the drift tends to -g/β, the variance to αm/β
    mean = float(atmc_mod.ou_step(p, g, alpha, 1e4, h, m, 0.0))
    sd = float(atmc_mod.ou_step(0.0, 0.0, alpha, 1e4, h, m, 1.0))
    assert mean == pytest.approx(-g / 1e4, rel=1e-5) and sd**2 == pytest.approx(alpha * m / 1e4)
    # negative friction (SGNHT's ξ < 0) is handled by the same formula
    mean = float(atmc_mod.ou_step(p, g, alpha, -2.0, h, m, 0.0))
    assert mean == pytest.approx(_ou_closed_form(p, g, alpha, -2.0, h, m)[0], rel=1e-5)


def test_two_half_ou_steps_make_one_full_step():
    """Why Algorithm 1 may fuse φ_B^{h/2} ∘ φ_B^{h/2} into φ_B^h: the OU step is a semigroup
    (same θ, ξ and gradient in both halves), in mean and in variance."""
    p, g, alpha, beta, h, m = 1.2, -0.4, 0.6, 1.7, 0.3, 2.0
    half = float(atmc_mod.ou_step(p, g, alpha, beta, h / 2, m, 0.0))
    twice = float(atmc_mod.ou_step(half, g, alpha, beta, h / 2, m, 0.0))
    assert twice == pytest.approx(float(atmc_mod.ou_step(p, g, alpha, beta, h, m, 0.0)), 1e-6)
    v_half = float(atmc_mod.ou_step(0.0, 0.0, alpha, beta, h / 2, m, 1.0)) ** 2
    v_full = float(atmc_mod.ou_step(0.0, 0.0, alpha, beta, h, m, 1.0)) ** 2
    assert math.exp(-beta * h) * v_half + v_half == pytest.approx(v_full, rel=1e-5)


def test_thermostat_alpha_beta():
    xi = jnp.array([-2.0, 0.0, 0.5, 1.0, 3.0])
    alpha, beta = atmc_mod.thermostat(xi, 1.0)
    np.testing.assert_allclose(alpha, [3.0, 1.0, 0.5, 0.0, 0.0])
    np.testing.assert_allclose(beta, [1.0, 1.0, 1.0, 1.0, 3.0])  # β = max(D, ξ) ≥ D
    assert atmc_mod.default_momentum_noise(0.001) == pytest.approx(-math.log(0.9) / 0.001)


def _strang(theta_, p, xi, h, alpha=0.0, beta=0.0, m=1.0):
    """φ_B^{h/2} ∘ φ_A^h ∘ φ_B^{h/2} on U = θ²/2 with α, β given (no noise)."""
    p = atmc_mod.ou_step(p, theta_, alpha, beta, h / 2, m, 0.0)
    theta_, xi = atmc_mod.flow_a(theta_, p, xi, h, m)
    p = atmc_mod.ou_step(p, theta_, alpha, beta, h / 2, m, 0.0)
    return theta_, p, xi


def _run_strang(theta0, p0, h, steps, **kw):
    def body(carry, _):
        carry = _strang(*carry, h, **kw)
        return carry, carry

    _, (th, p, xi) = jax.lax.scan(
        body, (jnp.float32(theta0), jnp.float32(p0), jnp.float32(0.0)), None, length=steps
    )
    return np.asarray(th, np.float64), np.asarray(p, np.float64), np.asarray(xi, np.float64)


def test_flows_on_the_harmonic_oscillator():
    """D = 0 noise, zero friction: φ_A moves θ and ξ at fixed p, φ_B kicks p at fixed θ, ξ; their
    Strang composition is leapfrog: energy error O(h²) without drift, second-order accurate,
    symplectic (det J = 1; with friction β the exact OU contraction e^{-βh}), reversible. The
    thermostat integrates p²/m - 1: it returns to its start when <p²/m> = 1, drifts otherwise."""
    # the flows separately
    th, xi = atmc_mod.flow_a(jnp.float32(0.3), jnp.float32(2.0), jnp.float32(0.1), 0.5, 1.0)
    assert float(th) == pytest.approx(0.3 + 0.5 * 2.0) and float(xi) == pytest.approx(
        0.1 + 0.5 * (4.0 - 1.0)
    )
    p = atmc_mod.ou_step(2.0, 0.3, 0.0, 0.0, 0.5, 1.0, 0.0)
    assert float(p) == pytest.approx(2.0 - 0.5 * 0.3)

    # energy: bounded error, shrinking 4x when h halves, no drift over ~160 periods
    errors = {}
    for h in (0.1, 0.05):
        steps = int(1000 / h)
        th, p, _ = _run_strang(1.0, 0.0, h, steps)
        energy = 0.5 * th**2 + 0.5 * p**2
        err = np.abs(energy - 0.5)
        errors[h] = err.max()
        assert err.max() < h**2  # leapfrog on the oscillator: |ΔH| ≤ (h²/8)·2H
        per = int(2 * math.pi / h)
        assert abs(err[-per:].max() - err[:per].max()) < 0.1 * err.max()  # no drift
    assert errors[0.1] / errors[0.05] == pytest.approx(4.0, rel=0.1)

    # second order: error of θ(t = 1) against cos t + sin t
    errs = []
    for h in (0.02, 0.01):
        th, p, _ = _run_strang(1.0, 1.0, h, int(round(1 / h)))
        errs.append(abs(th[-1] - (math.cos(1.0) + math.sin(1.0))))
    assert errs[0] / errs[1] == pytest.approx(4.0, rel=0.15)

    # symplectic / exact contraction, via the Jacobian of one step in (θ, p)
    for beta in (0.0, 0.7):

        def one(v, beta=beta):
            t, q, _ = _strang(v[0], v[1], jnp.float32(0.0), 0.1, beta=beta)
            return jnp.stack([t, q])

        jac = jax.jacfwd(one)(jnp.array([0.4, -0.3]))
        assert float(jnp.linalg.det(jac)) == pytest.approx(math.exp(-beta * 0.1), rel=1e-5)

    # reversible: run forward, flip p, run forward, flip p
    th, p, _ = _run_strang(0.8, -0.5, 0.1, 500)
    th2, p2, _ = _run_strang(th[-1], -p[-1], 0.1, 500)
    assert th2[-1] == pytest.approx(0.8, abs=1e-4) and -p2[-1] == pytest.approx(-0.5, abs=1e-4)

    # the thermostat integrates p²/m - 1 along p(t) = p0 cos t: for H = 1 (p0 = √2) that is
    # cos 2t, so ξ = sin(2t)/2 oscillates without drift; for H = 2 (p0 = 2), 1 + 2 cos 2t, so
    # ξ = t + sin 2t drifts at rate <p²/m> - 1 = 1
    # (up to an O(h²) drift, measured ≈ h² p0² t / 8: the half-step momenta of leapfrog average
    # p0²/2 · (1 + O(h²)))
    for p0, exact in ((math.sqrt(2.0), lambda t: np.sin(2 * t) / 2),
                      (2.0, lambda t: t + np.sin(2 * t))):  # fmt: skip
        err = {}
        for h in (0.02, 0.01):
            t = h * np.arange(1, int(100 / h) + 1)
            _, _, xi = _run_strang(0.0, p0, h, len(t))
            dev = np.abs(xi - exact(t))
            assert np.all(dev < 5e-4 + 0.2 * h**2 * p0**2 * t)
            err[h] = dev[-len(t) // 10 :].max()
        assert err[0.02] / err[0.01] == pytest.approx(4.0, rel=0.25)


def test_fused_step_is_flow_a_after_flow_b():
    d, m, h = 0.8, 1.5, 0.07
    est = full_batch_estimator(lambda z: 0.5 * jnp.sum(z["w"] ** 2) + jnp.sum(z["b"]), noise=True)
    grad_fn = est.batch(None)[0]
    position = {"w": jnp.array([0.5, -1.0, 2.0]), "b": jnp.array(0.3)}
    state = atmc_mod.ATMCState(
        position,
        {"w": jnp.array([0.1, 0.4, -0.2]), "b": jnp.array(-0.5)},
        {"w": jnp.array([-0.5, 0.2, 2.0]), "b": jnp.array(1.0)},
        atmc_mod.init(position).noise,
    )
    for c in (None, 2.0):
        key = jax.random.key(3)
        new, info = atmc_mod.build_kernel(d, m, c)(key, state, grad_fn, h)
        g = grad_fn(position).grad  # exact: the noise baseline is 0
        p, alpha, beta = atmc_mod.flow_b(key, state.momentum, g, state.xi, h, d, m, c)
        th, xi = atmc_mod.flow_a(position, p, state.xi, h, m, c)
        for got, want in ((new.momentum, p), (new.position, th), (new.xi, xi)):
            jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6), got, want)
        assert float(info.beta_mean) == pytest.approx((1.0 + 0.8 + 0.8 + 2.0) / 4)
        assert float(info.step_size) == pytest.approx(h)


def test_relativistic_kinetic_energy_derivatives_and_speed_limit():
    m, c = 2.0, 0.5

    def kinetic(p):
        return m * c**2 * (jnp.sqrt(p**2 / (m**2 * c**2) + 1) - 1)

    p = jnp.linspace(-5.0, 5.0, 40)  # no zero: friction_factor is checked as m ∇K(p) / p
    dk = jax.vmap(jax.grad(kinetic))(p)
    d2k = jax.vmap(jax.grad(jax.grad(kinetic)))(p)
    np.testing.assert_allclose(atmc_mod.kinetic_gradient(p, m, c), dk, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(
        atmc_mod.thermostat_force(p, m, c), m * dk**2 - m * d2k, rtol=1e-4, atol=1e-6
    )
    np.testing.assert_allclose(atmc_mod.friction_factor(p, m, c), m * dk / p, rtol=1e-5)
    # Gaussian limit
    np.testing.assert_allclose(atmc_mod.kinetic_gradient(p, m, 1e4), p / m, rtol=1e-6)
    np.testing.assert_allclose(atmc_mod.thermostat_force(p, m, None), p**2 / m - 1)
    # |Δθ| ≤ h c per step, however large the gradient
    est = full_batch_estimator(lambda z: 1e6 * jnp.sum(z), noise=True)
    step = atmc_mod.build_kernel(1.0, m, c)
    state = atmc_mod.init(jnp.zeros(4))
    for k in range(3):
        new, _ = step(jax.random.key(k), state, est.batch(None)[0], 0.1)
        assert float(jnp.max(jnp.abs(new.position - state.position))) <= 0.1 * c * (1 + 1e-6)
        state = new


@pytest.mark.statistical
@pytest.mark.parametrize("noise_estimate", [False, True])
def test_thermostat_settles_under_gradient_noise(noise_estimate):
    """Gradient noise of sd σ per step is diffusion B = hσ² per unit time. The paper's thermostat
    absorbs it: ξ settles at B/(2m) (here 2.5 > D = 1, so ATMC injects no noise at all), the
    kinetic temperature <p²/m> at 1 (exact in stationarity: ξ's update is h(p²/m - 1)) and θ
    has the target's moments (bias ≈ 0.4% of a variance at h = 0.05, below the MCSE). Given the
    noise variance σ² (``noise_estimate``, here with ``noise_share=1`` so that the friction is
    the paper's), the baseline hσ²/(2m) carries ξ and the dynamic part ζ settles at 0."""
    h, sigma, m, d = 0.05, 10.0, 1.0, 1.0
    step = atmc_mod.build_kernel(d, m, noise_estimate=noise_estimate, noise_share=1.0)
    vg = jax.value_and_grad(gaussian_potential)
    chains, warm, steps, thin = 128, 4000, 20_000, 10

    def chain(key):
        def body(state, k):
            k_step, k_noise = jax.random.split(k)

            def noisy(z):
                u, g = vg(z)
                g = {"x": g["x"] + sigma * jax.random.normal(k_noise, (2,))}
                return GradientEstimate(u, g, {"x": jnp.full(2, sigma**2)})

            state, info = step(k_step, state, noisy, h)
            xi = state.xi["x"] + (h * sigma**2 / (2 * m) if noise_estimate else 0.0)
            return state, (state.position["x"], jnp.mean(state.momentum["x"] ** 2) / m, xi,
                           state.xi["x"])  # fmt: skip

        keys = jax.random.split(key, warm + steps)
        state, _ = jax.lax.scan(body, atmc_mod.init({"x": jnp.zeros(2)}), keys[:warm])
        _, out = jax.lax.scan(body, state, keys[warm:])
        return jax.tree.map(lambda a: a[::thin], out)

    x, temp, xi, zeta = jax.jit(jax.vmap(chain))(jax.random.split(jax.random.key(7), chains))
    temp, xi, zeta = (np.asarray(a, np.float64) for a in (temp, xi, zeta))

    def mcse(f):
        return f.std() / math.sqrt(float(effective_sample_size(f)))

    assert abs(temp.mean() - 1.0) < 4.5 * mcse(temp)
    b_over_2m = h * sigma**2 / (2 * m)
    for i in range(2):  # one thermostat per coordinate, each ~ N(B/2m, 1)
        xi_i = xi[..., i]
        assert xi_i.mean() > 20 * mcse(xi_i)  # the thermostat did move
        assert xi_i.mean() == pytest.approx(b_over_2m, rel=0.05)  # continuous time; O(βh) off
        assert xi_i.std() == pytest.approx(1.0, rel=0.05)
        if noise_estimate:  # the dynamic part only corrects the baseline: ≈ 0
            assert abs(zeta[..., i].mean()) < 0.05 * b_over_2m
    assert_matches_gaussian(x, MEAN, COV)

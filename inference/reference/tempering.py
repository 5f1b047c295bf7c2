"""Parallel tempering (replica exchange) HMC: chains that cross between modes of a BNN posterior."""

# Notes:
#
# An HMC chain crosses a barrier of ``b`` nats with probability about ``e^-b``: on UCI yacht the
# chains of ``reference_hmc`` sit in basins hundreds of nats apart and never meet (README,
# "Reference posteriors"). :class:`ParallelTempering` runs ``K`` replicas of the parameters at
# inverse temperatures ``1 = β_0 > β_1 > ... > β_{K-1} > 0`` of the *likelihood*,
#
#     π_β(θ) ∝ prior(θ) · likelihood(θ)^β      (β = 0: the prior, which every replica can cross),
#
# each moved by HMC (a fixed number of leapfrog steps, the step size jittered by ±20 %, adapted
# per temperature by dual averaging to ``target_accept_prob`` during warmup, and a diagonal mass
# matrix per temperature estimated from the middle half of warmup), and after each sweep proposes
# to swap the states of neighbouring temperatures, accepted with probability
# ``min(1, exp((β_k - β_{k+1}) (L_k - L_{k+1})))`` where ``L`` is the likelihood's part of the
# potential (``-likelihood_scale · log-likelihood``). Swaps alternate between the even and the odd
# pairs (Syed et al. 2019's non-reversible scheme, which moves a state along the ladder in ``K``
# sweeps rather than ``K²``). The swap leaves every ``π_β`` invariant, so the ``β = 1`` replica,
# which ``MCMC`` collects as ``z``, samples the model's posterior (with its own tempering, e.g. a
# cold likelihood, unchanged).
#
# The ladder ``betas`` starts geometric from 1 down to ``min_beta`` unless given, and (with
# ``adapt_ladder``) is respaced every eighth of warmup's first half so that neighbours reject the
# same share of swaps (:func:`respaced_ladder`, after Syed et al.); each chain's ladder is
# ``state.betas``. A pair whose swap rate (``state.swap_rate``, also an extra field) stays near 0
# after that cuts the ladder in two: the ladder needs more temperatures. The potential is our
# :class:`~bnn_ppl.inference.FullBatchPotential` (chunked and sharded as for HMC); the data
# pass as ``MCMC.run(key, *pot.args, ...)`` with ``jit_model_args=True``, and
# ``chain_method="vectorized"`` runs several independent ladders.

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from numpyro.infer.hmc_util import dual_averaging, welford_covariance
from numpyro.infer.mcmc import MCMCKernel
from numpyro.util import is_prng_key

from bnn_ppl import validation
from bnn_ppl.inference.potential.bnn import FullBatchPotential, ShardedData
from bnn_ppl.types import Array, Params, PRNGKey
from bnn_ppl.validation import InputTypeError, InputValueError

__all__ = ["ParallelTempering", "TemperingState", "geometric_ladder", "respaced_ladder"]

JITTER = 0.2
"""The step size of each trajectory is drawn uniformly from ``h · [1 - JITTER, 1 + JITTER]``
(a fixed step count with a fixed step resonates on near-periodic directions)."""


class TemperingState(NamedTuple):
    """The replicas and their adaptation; index ``k`` of every ``(K, ...)`` field is the
    temperature ``betas[k]`` (the swaps move states, not step sizes or mass matrices).

    ``betas``: ``(K,)`` the ladder (respaced in warmup when ``adapt_ladder``);
    ``positions``: ``(K, d)`` flat unconstrained parameters; ``prior_energy``/``lik_energy``:
    ``(K,)`` the two parts of each replica's potential (``potential = prior + β · lik``) and
    ``prior_grad``/``lik_grad`` their gradients; ``log_step``, ``inv_mass`` ``(K, d)`` and
    ``adapt`` (dual averaging; ``window`` NumPyro's Welford ``(mean, m2, n)`` of the
    mass-matrix window) the per-temperature settings; ``accept_prob`` ``(K,)`` the last HMC
    acceptance, ``swap_prob`` ``(K-1,)`` the last swap proposals' acceptance (``nan`` for the
    pairs not proposed), ``swap_rate`` ``(K-1,)`` the mean acceptance of the pairs' proposals
    since sampling began (in warmup: since the ladder was last respaced).
    """

    i: Array
    betas: Array
    positions: Array
    prior_energy: Array
    lik_energy: Array
    prior_grad: Array
    lik_grad: Array
    log_step: Array
    inv_mass: Array
    adapt: Any
    window: tuple[Array, Array, Array]
    accept_prob: Array
    swap_prob: Array
    swap_sum: Array
    swap_tries: Array
    rng_key: PRNGKey

    @property
    def z(self) -> Array:
        """The ``β = 1`` replica's flat unconstrained parameters (what ``MCMC`` collects;
        its ``postprocess_fn`` turns them into the constrained sites, and
        :meth:`ParallelTempering.unravel` into the unconstrained ones)."""
        return self.positions[..., 0, :]  # (a vectorized run's state has a chain axis first)

    @property
    def potential_energy(self) -> Array:
        """The ``β = 1`` replica's potential."""
        return self.prior_energy[..., 0] + self.lik_energy[..., 0]

    @property
    def swap_rate(self) -> Array:
        return self.swap_sum / jnp.maximum(self.swap_tries, 1)


def geometric_ladder(num_temperatures: int, min_beta: float) -> np.ndarray:
    """``num_temperatures`` inverse temperatures from 1 down to ``min_beta``, evenly spaced in
    ``log β``.

    Example:
        >>> geometric_ladder(3, 0.01).round(4).tolist()
        [1.0, 0.1, 0.01]
    """
    k = validation.check_int("num_temperatures", num_temperatures, minimum=2)
    lo = validation.check_positive("min_beta", min_beta)
    if lo >= 1:
        raise InputValueError(f"min_beta must be below 1, got {lo}.")
    return np.geomspace(1.0, lo, k)


def respaced_ladder(betas: Array, swap_rates: Array) -> Array:
    """The ladder that equalises the swap rejection between neighbours (Syed et al. 2019):
    the cumulative rejection ``Λ`` along ``betas`` (from 1 down), read as a piecewise-linear
    function of ``log β``, is cut into equal steps. The ends stay; where the swaps fail
    (rejection 1) the rungs move closer together, where they all pass, further apart.

    Example:
        >>> b = respaced_ladder(jnp.array([1.0, 0.1, 0.01]), jnp.array([0.0, 0.9]))
        >>> [round(float(v), 3) for v in b]   # 1 - 0.1 rejected every swap: a rung moves in
        [1.0, 0.282, 0.01]
    """
    reject = 1.0 - jnp.clip(swap_rates, 0.0, 1.0) + 1e-3  # + 1e-3: strictly increasing
    barrier = jnp.concatenate([jnp.zeros(1, reject.dtype), jnp.cumsum(reject)])
    targets = jnp.linspace(0.0, barrier[-1], betas.shape[0])
    log_b = jnp.interp(targets, barrier, jnp.log(betas))
    return jnp.exp(log_b).at[0].set(1.0).at[-1].set(betas[-1])


def _energy_parts(pot: FullBatchPotential, data: ShardedData, unravel: Any) -> Callable:
    """``flat -> ((prior part, likelihood part), (their gradients))`` of ``pot``'s potential."""
    model = pot.model

    def prior_part(flat: Array) -> Array:
        params, log_det = pot.constrain(unravel(flat))
        log_prior = model.log_prior(params, pot._x_spec).astype(pot.dtype)
        return -(model.prior_scale * log_prior + log_det.astype(pot.dtype))

    def lik_part(flat: Array) -> Array:
        params, _ = pot.constrain(unravel(flat))
        return -model.likelihood_scale * pot.log_likelihood(params, data)

    def both(flat: Array) -> tuple[tuple[Array, Array], tuple[Array, Array]]:
        # two gradients, one backward pass through the network (the prior's is cheap)
        (prior, gp), (lik, gl) = (jax.value_and_grad(f)(flat) for f in (prior_part, lik_part))
        return (prior, lik), (gp, gl)

    return both


class ParallelTempering(MCMCKernel):
    """Replica-exchange HMC over a ladder of likelihood temperatures (module docstring).

    Args:
        potential: a :class:`~bnn_ppl.inference.FullBatchPotential`.
        betas: the inverse temperatures, from 1 strictly down to above 0; default
            :func:`geometric_ladder` ``(num_temperatures, min_beta)``.
        num_temperatures, min_beta: the default ladder (8 temperatures down to 1e-3).
        num_steps: leapfrog steps per HMC trajectory (the same at every temperature).
        step_size: the initial step size (then adapted per temperature in warmup).
        target_accept_prob: the acceptance dual averaging aims at.
        adapt_ladder: respace the ladder every eighth of warmup in its first half so that
            neighbouring temperatures reject the same share of swaps
            (:func:`respaced_ladder`); 1 and the lowest β stay.

    Example:
        >>> import jax, numpy as np
        >>> from numpyro.infer import MCMC
        >>> import bnn_ppl as bp
        >>> from bnn_ppl.inference import full_batch_potential
        >>> from bnn_ppl.inference.reference.tempering import ParallelTempering
        >>> from bnn_ppl.models import MLP
        >>> x = np.linspace(-1, 1, 20, dtype=np.float32)[:, None]
        >>> model = bp.BNN(MLP(hidden=(), out=1), prior=bp.priors.Normal(1.0),
        ...                likelihood=bp.likelihoods.Gaussian(scale=0.5))
        >>> pot = full_batch_potential(model, x, 2 * x[:, 0])
        >>> kernel = ParallelTempering(pot, num_temperatures=4, num_steps=5)
        >>> mcmc = MCMC(kernel, num_warmup=50, num_samples=50, progress_bar=False,
        ...             jit_model_args=True)
        >>> mcmc.run(jax.random.key(0), *pot.args)
        >>> mcmc.get_samples()["Dense_0.kernel"].shape, kernel.betas.shape
        ((50, 1, 1), (4,))
    """

    sample_field = "z"

    def __init__(
        self,
        potential: FullBatchPotential,
        *,
        betas: Any = None,
        num_temperatures: int = 8,
        min_beta: float = 1e-3,
        num_steps: int = 16,
        step_size: float = 0.01,
        target_accept_prob: float = 0.8,
        adapt_ladder: bool = True,
    ):
        if not isinstance(potential, FullBatchPotential):
            raise InputTypeError(
                "potential must be a FullBatchPotential (bnn_ppl.inference.full_batch_potential),"
                f" got {type(potential).__name__}."
            )
        if betas is None:
            betas = geometric_ladder(num_temperatures, min_beta)
        b = np.asarray(betas, np.float64)
        if b.ndim != 1 or b.size < 2 or not np.all(np.isfinite(b)):
            raise InputValueError(f"betas must be 2 or more finite numbers, got {betas!r}.")
        if b[0] != 1 or np.any(np.diff(b) >= 0) or b[-1] <= 0:
            raise InputValueError(
                f"betas must start at 1 and fall strictly, staying above 0, got {b.tolist()}."
            )
        b32 = b.astype(np.float32)  # what the kernel computes with: it must be a ladder too
        if b32[0] != 1 or np.any(np.diff(b32) >= 0) or b32[-1] < np.finfo(np.float32).tiny:
            raise InputValueError(
                f"betas {b.tolist()} are not a ladder in float32, the kernel's precision "
                f"({b32.tolist()}): two are equal there, or the last is below 1.2e-38. Space "
                "them further apart, or raise the lowest."
            )
        self.potential = potential
        self.betas = b32
        self.num_steps = validation.check_int("num_steps", num_steps)
        self.step_size = float(validation.check_positive("step_size", step_size))
        self.adapt_ladder = validation.check_bool("adapt_ladder", adapt_ladder)
        self.target_accept_prob = validation.check_number(
            "target_accept_prob", target_accept_prob, low=0.0, high=1.0, low_inclusive=False,
            high_inclusive=False,
        )  # fmt: skip
        shapes = jax.eval_shape(lambda: potential.init_params(jax.random.key(0)))
        _, self.unravel = ravel_pytree(jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype), shapes))
        self._num_warmup = 0
        self._vectorized = False
        self._init_jit = jax.jit(self._init_states)

    # ------------------------------------------------------------------ one replica
    def _trajectory(self, both: Callable, key: PRNGKey, beta: Array, flat: Array, prior: Array,
                    lik: Array, g_prior: Array, g_lik: Array, step: Array,
                    inv_mass: Array) -> tuple:  # fmt: skip
        """One HMC transition of one replica at inverse temperature ``beta``."""
        k_mom, k_jit, k_acc = jax.random.split(key, 3)
        h = step * jax.random.uniform(k_jit, minval=1 - JITTER, maxval=1 + JITTER)
        p0 = jax.random.normal(k_mom, flat.shape, flat.dtype) / jnp.sqrt(inv_mass)

        def leap(carry: tuple, _: None) -> tuple:
            z, p, gp, gl, _e = carry
            p = p - 0.5 * h * (gp + beta * gl)
            z = z + h * inv_mass * p
            e, (gp, gl) = both(z)
            p = p - 0.5 * h * (gp + beta * gl)
            return (z, p, gp, gl, e), None

        start = (flat, p0, g_prior, g_lik, (prior, lik))
        (z, p, gp, gl, (e_prior, e_lik)), _ = jax.lax.scan(leap, start, None, self.num_steps)
        h0 = prior + beta * lik + 0.5 * jnp.sum(inv_mass * p0**2)
        h1 = e_prior + beta * e_lik + 0.5 * jnp.sum(inv_mass * p**2)
        log_ratio = jnp.where(jnp.isfinite(h1), h0 - h1, -jnp.inf)
        accept_prob = jnp.exp(jnp.minimum(log_ratio, 0.0))
        take = jax.random.uniform(k_acc) < accept_prob
        pick = lambda new, old: jnp.where(take, new, old)  # noqa: E731
        new = (pick(z, flat), pick(e_prior, prior), pick(e_lik, lik), pick(gp, g_prior),
               pick(gl, g_lik))  # fmt: skip
        return (*new, accept_prob)

    # ------------------------------------------------------------------ one sweep
    def _sweep(self, state: TemperingState, data: ShardedData) -> TemperingState:
        both = _energy_parts(self.potential, data, self.unravel)
        key, k_hmc, k_swap = jax.random.split(state.rng_key, 3)
        betas = state.betas
        n_temp = betas.shape[0]
        z, prior, lik, gp, gl, acc = jax.vmap(
            lambda k, b, *a: self._trajectory(both, k, b, *a)
        )(
            jax.random.split(k_hmc, n_temp), betas, state.positions, state.prior_energy,
            state.lik_energy, state.prior_grad, state.lik_grad, jnp.exp(state.log_step),
            state.inv_mass,
        )  # fmt: skip
        # swaps of the even pairs (0,1),(2,3)... on even sweeps, of the odd ones on odd sweeps
        pair = jnp.arange(n_temp - 1)
        proposed = (pair % 2) == (state.i % 2)
        log_r = (betas[:-1] - betas[1:]) * (lik[:-1] - lik[1:])
        swap_prob = jnp.exp(jnp.minimum(jnp.where(jnp.isfinite(log_r), log_r, -jnp.inf), 0.0))
        swap = proposed & (jax.random.uniform(k_swap, (n_temp - 1,)) < swap_prob)
        # the proposed pairs are disjoint: each temperature takes its partner's state or its own
        up = jnp.concatenate([swap, jnp.zeros(1, bool)])  # k swaps with k + 1
        down = jnp.concatenate([jnp.zeros(1, bool), swap])  # k swaps with k - 1
        src = jnp.where(up, jnp.arange(n_temp) + 1, jnp.where(down, jnp.arange(n_temp) - 1,
                                                               jnp.arange(n_temp)))  # fmt: skip
        z, prior, lik, gp, gl = (a[src] for a in (z, prior, lik, gp, gl))
        warm = state.i < self._num_warmup
        log_step, adapt, inv_mass, window = self._adapt(state, acc, z, warm)
        swap_sum = state.swap_sum + jnp.where(proposed, swap_prob, 0.0)
        swap_tries = state.swap_tries + proposed
        n, done = self._num_warmup, state.i + 1
        respace = warm & self.adapt_ladder & (done % jnp.maximum(n // 8, 1) == 0) & (2 * done <= n)
        rates = swap_sum / jnp.maximum(swap_tries, 1)
        betas = jnp.where(respace, respaced_ladder(betas, rates), betas)
        # each respacing, and the start of sampling, starts the swap rates again
        restart = respace | (done == n)
        swap_sum = jnp.where(restart, 0.0, swap_sum)
        swap_tries = jnp.where(restart, 0, swap_tries)
        return state._replace(
            i=state.i + 1, betas=betas, positions=z, prior_energy=prior, lik_energy=lik,
            prior_grad=gp, lik_grad=gl, log_step=log_step, inv_mass=inv_mass, adapt=adapt,
            window=window, accept_prob=acc, swap_prob=jnp.where(proposed, swap_prob, jnp.nan),
            swap_sum=swap_sum, swap_tries=swap_tries, rng_key=key,
        )  # fmt: skip

    def _adapt(self, state: TemperingState, acc: Array, z: Array, warm: Array) -> tuple:
        """Warmup: dual averaging of each temperature's step size (restarted when the mass
        matrix is set); the mass matrix from the Welford sums of the middle half of warmup."""
        _, da_update = dual_averaging()
        n = self._num_warmup
        adapt = jax.vmap(da_update)(self.target_accept_prob - acc, state.adapt)
        # warmup's last sweep leaves the averaged step (dual averaging's x_avg) for sampling
        log_step = jnp.where(warm, jnp.where(state.i + 1 == n, adapt[1], adapt[0]), state.log_step)
        adapt = jax.tree.map(lambda new, old: jnp.where(warm, new, old), adapt, state.adapt)
        _, welford_update, welford_final = welford_covariance(diagonal=True)
        in_window = warm & (state.i >= n // 4) & (state.i < (3 * n) // 4)
        window = jax.tree.map(lambda new, old: jnp.where(in_window, new, old),
                              jax.vmap(welford_update)(z, state.window), state.window)  # fmt: skip
        set_mass = warm & (state.i + 1 == (3 * n) // 4) & (window[2][0] > 1)
        # NumPyro's estimate, regularised towards 1e-3 as Stan's (what its HMC adapts to)
        variance = jax.vmap(lambda w: welford_final(w, regularize=True)[0])(window)
        inv_mass = jnp.where(set_mass, variance, state.inv_mass)
        init_da, _ = dual_averaging()
        restarted = jax.vmap(lambda s: init_da(jnp.log(10.0) + s))(log_step)
        adapt = jax.tree.map(lambda r, a: jnp.where(set_mass, r, a), restarted, adapt)
        return log_step, adapt, inv_mass, window

    # ---------------------------------------------------------------- MCMCKernel API
    @property
    def default_fields(self) -> tuple[str, ...]:
        return ("z",)

    def init(self, rng_key: PRNGKey, num_warmup: int, init_params: Any, model_args: tuple,
             model_kwargs: dict) -> TemperingState:  # fmt: skip
        """``init_params``: ``None`` (each replica drawn from the prior) or one unconstrained
        start per temperature, leading axis ``K`` (``(chains, K, ...)`` when vectorized)."""
        self._num_warmup = validation.check_int("num_warmup", num_warmup, minimum=0)
        self._vectorized = not is_prng_key(rng_key)
        data = model_args[0] if model_args else self.potential.data
        # compiled once: MCMC.run calls init on every run, even one from post_warmup_state
        return self._init_jit(rng_key, init_params, data)

    def _init_states(self, rng_key: PRNGKey, init_params: Any, data: ShardedData) -> Any:
        if self._vectorized:
            if init_params is None:
                return jax.vmap(lambda k: self._init_one(k, None, data))(rng_key)
            return jax.vmap(lambda k, p: self._init_one(k, p, data))(rng_key, init_params)
        return self._init_one(rng_key, init_params, data)

    def _init_one(self, key: PRNGKey, params: Any, data: ShardedData) -> TemperingState:
        n_temp = len(self.betas)
        key, init_key = jax.random.split(key)
        if params is None:
            params = self.potential.init_params(init_key, n_temp)
        flat = jax.vmap(lambda p: ravel_pytree(p)[0])(params)
        if flat.shape[0] != n_temp:
            raise InputValueError(
                f"init_params must hold one start per temperature (leading axis {n_temp}), "
                f"got {flat.shape[0]}."
            )
        (prior, lik), (gp, gl) = jax.vmap(_energy_parts(self.potential, data, self.unravel))(flat)
        init_da, _ = dual_averaging()
        welford_init, _, _ = welford_covariance(diagonal=True)
        log_step = jnp.full((n_temp,), jnp.log(self.step_size), flat.dtype)
        zeros = jnp.zeros((n_temp,), flat.dtype)
        return TemperingState(
            i=jnp.zeros((), jnp.int32), betas=jnp.asarray(self.betas), positions=flat,
            prior_energy=prior, lik_energy=lik,
            prior_grad=gp, lik_grad=gl, log_step=log_step, inv_mass=jnp.ones_like(flat),
            adapt=jax.vmap(lambda s: init_da(jnp.log(10.0) + s))(log_step),
            window=jax.vmap(lambda _: welford_init(flat.shape[-1]))(jnp.arange(n_temp)),
            accept_prob=zeros, swap_prob=jnp.full((n_temp - 1,), jnp.nan, flat.dtype),
            swap_sum=jnp.zeros((n_temp - 1,), flat.dtype),
            swap_tries=jnp.zeros((n_temp - 1,), jnp.int32), rng_key=key,
        )  # fmt: skip

    def sample(self, state: TemperingState, model_args: tuple,
               model_kwargs: dict) -> TemperingState:  # fmt: skip
        data = model_args[0] if model_args else self.potential.data
        if self._vectorized:
            return jax.vmap(lambda s: self._sweep(s, data))(state)
        return self._sweep(state, data)

    def postprocess_fn(self, model_args: tuple, model_kwargs: dict) -> Callable:
        return lambda flat: self.potential.postprocess_fn(self.unravel_batch(flat))

    def unravel_batch(self, flat: Array) -> Params:
        """:attr:`unravel` over any leading axes: ``(..., d)`` -> sites of shape ``(..., *s)``
        (``MCMC`` hands ``postprocess_fn`` the draws of every chain at once)."""
        lead = flat.shape[:-1]
        sites = jax.vmap(self.unravel)(flat.reshape(-1, flat.shape[-1]))
        return jax.tree.map(lambda a: a.reshape(*lead, *a.shape[1:]), sites)

    def get_diagnostics_str(self, state: TemperingState) -> str:
        rates = np.asarray(state.swap_rate).round(2).tolist()
        return f"accept {np.asarray(state.accept_prob)[..., 0].round(2)}, swap rates {rates}"

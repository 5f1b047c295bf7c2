"""The NumPyro ``MCMCKernel`` glue shared by the SG-MCMC kernels (SGLD, SGHMC, SGNHT, ATMC)."""

# Notes:
#
# :class:`SGMCMCKernel` owns the potential, the data plumbing
# (``MCMC(kernel, ..., jit_model_args=True).run(key, *pot.args, init_params=...)`` passes the
# sharded data as an argument of NumPyro's compiled loop; ``run(key, init_params=...)`` closes
# over them), the minibatch gradient estimator (:mod:`bnn_ppl.inference.sgmcmc.gradients`), the
# step-size schedule and the step counter, and vmaps over chains for
# ``chain_method="vectorized"``. Its state is :class:`SGMCMCState`, a NamedTuple of arrays: the
# sample field ``z`` is the position (unconstrained parameters), ``i`` the step counter (both
# collected by default), ``info`` the kernel's ``Info`` record of the last step (collect it
# with ``extra_fields=("info",)`` or single fields such as ``"info.step_size"``), and ``stats``
# the running statistics of ``Info`` over every sampling step
# (:mod:`bnn_ppl.inference.sgmcmc.accuracy`;
# ``extra_fields=("stats",)``), which :func:`~bnn_ppl.inference.check_accuracy` reads.
#
# Each kernel module (``sgld``, ``sghmc``, ...) has the same shape, after BlackJAX: ``XState``
# and ``XInfo`` NamedTuples, ``init(position, ...)`` and ``build_kernel(...)`` returning a pure
# ``step(rng_key, state, grad_fn, step_size, warmup) -> (state, info)``; its class sets
# :attr:`SGMCMCKernel._kernel_init` and :attr:`SGMCMCKernel._step`. ``warmup`` is True for the
# first ``num_warmup`` steps of ``MCMC``: burn-in with the same dynamics, where pSGLD adapts its
# preconditioner, SGNHT's and ATMC's thermostats wait at their start, and the friction of SGHMC,
# SGNHT and ATMC is raised only to the gradient noise's level (not to ten times it), which
# descends faster from a start far from the typical set.
#
# The kernels' shared step arithmetic is here too: :func:`normal_like`, :func:`tree_mean`,
# :func:`tree_max`, the measured gradient noise as a friction (:func:`noise_friction`), the noise
# share a step allows (:func:`allowed_share`: 1 during warmup) and the share it had
# (:func:`heat_share`, ``Info.noise_share``). The base class formats NumPyro's progress-bar line
# from the ``Info`` fields a kernel lists in :attr:`SGMCMCKernel._diagnostics`. The accuracy
# warnings are :mod:`bnn_ppl.inference.sgmcmc.accuracy`.

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypedDict

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.infer.mcmc import MCMCKernel
from numpyro.util import identity, is_prng_key

from bnn_ppl import validation
from bnn_ppl.flat_draws import grouped_flat_draws
from bnn_ppl.inference.potential.bnn import FullBatchPotential, full_batch_potential
from bnn_ppl.inference.potential.minibatch import SCHEMES
from bnn_ppl.inference.sgmcmc.gradients import (
    GradFn,
    GradientEstimator,
    NoiseAverage,
    full_batch_estimator,
    gradient_estimator,
    noise_average_update,
)
from bnn_ppl.inference.sgmcmc.schedules import Schedule, as_schedule
from bnn_ppl.model import BNN
from bnn_ppl.types import Array, Params, PRNGKey, PyTree
from bnn_ppl.validation import InputTypeError, InputValueError

__all__ = [
    "SGMCMCState",
    "SGMCMCKernel",
    "SGMCMCOptions",
    "Step",
    "check_noise_decay",
    "check_noise_share",
    "normal_like",
    "tree_mean",
    "tree_max",
    "noise_friction",
    "allowed_share",
    "heat_share",
    "StepStats",
    "Sums",
    "Trend",
    "RunStats",
    "stats_init",
    "stats_reset",
    "stats_update",
    "pool",
    "pool_fields",
]


class SGMCMCState(NamedTuple):
    """State of an SG-MCMC kernel inside ``numpyro.infer.MCMC``.

    ``i``: steps taken since ``init`` (warmup included), the schedule's next ``t``;
    ``kernel_state``: the kernel's own state (``SGLDState``, ``ATMCState``, ...);
    ``info``: the kernel's ``Info`` record of the last step (zeros before the first);
    ``stream``: the minibatch index stream (``None`` for full batch);
    ``rng_key``: the chain's key; ``stats``: the
    :class:`~bnn_ppl.inference.sgmcmc.kernel.StepStats`
    of every step after warmup. ``z`` (the sample field) is ``kernel_state.position``.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from numpyro.infer import MCMC
        >>> from bnn_ppl.inference import SGLD
        >>> kernel = SGLD(potential_fn=lambda z: 0.5 * jnp.sum(z["x"] ** 2), step_size=0.05)
        >>> mcmc = MCMC(kernel, num_warmup=10, num_samples=20, progress_bar=False)
        >>> mcmc.run(jax.random.key(0), init_params={"x": jnp.zeros(2)})
        >>> mcmc.get_extra_fields()["i"][:3].tolist()  # the counter includes warmup
        [11, 12, 13]
    """

    i: Array
    kernel_state: Any
    info: Any
    stream: Any
    rng_key: PRNGKey
    stats: StepStats

    @property
    def z(self) -> Params:
        """The position (unconstrained parameters): MCMC's sample field."""
        return self.kernel_state.position


Step = Callable[[PRNGKey, Any, GradFn, Array, Array], tuple[Any, Any]]
"""``step(rng_key, state, grad_fn, step_size, warmup) -> (state, info)``."""


class SGMCMCOptions(TypedDict, total=False):
    """The keyword arguments of :class:`SGMCMCKernel` that every kernel class passes on."""

    potential_fn: Callable[[Any], Array] | None
    batch_size: int | None
    step_size: float | Schedule
    sampling: str
    chunk_size: int | None
    devices: Sequence[jax.Device] | None
    init_method: str


def check_noise_share(noise_share: float) -> float:
    """``noise_share`` (``κ``) checked to lie in ``(0, 1]``."""
    return validation.check_number("noise_share", noise_share, low=0.0, high=1.0,
                                   low_inclusive=False)  # fmt: skip


def check_noise_decay(noise_decay: float) -> float:
    """``noise_decay`` (the noise average's ``ρ``) checked to lie in ``[0, 1)``."""
    return validation.check_number("noise_decay", noise_decay, low=0.0, high=1.0,
                                   high_inclusive=False)  # fmt: skip


class SGMCMCKernel(MCMCKernel):
    """Base of the SG-MCMC kernels: potential, data, schedule and chains; see the module doc.

    Subclasses set :attr:`_kernel_init` (``position -> kernel state``) and :attr:`_step` (see
    :data:`Step`) in ``__init__``, and :attr:`_noise` (whether their gradient estimates carry a
    noise variance) before calling ``super().__init__``; ``_diagnostics`` lists the ``Info``
    fields the progress bar shows after the step size, as ``(label, field, format)``.

    Args:
        potential: a :class:`~bnn_ppl.inference.FullBatchPotential`, or a
            :class:`~bnn_ppl.BNN` with ``x`` and ``y`` (the potential is then built here with
            ``chunk_size`` and ``devices``), or ``None`` with ``potential_fn``.
        x, y: the data, only with a ``BNN``.
        potential_fn: a plain ``potential_fn(position) -> scalar`` instead of a potential
            (full batch only; positions are then whatever ``init_params`` is).
        batch_size: rows per gradient (``None``: full batch); never more than the data have.
        step_size: a number or a schedule ``t -> h_t`` (:mod:`bnn_ppl.inference.sgmcmc.schedules`).
        sampling: how batches are drawn, ``"independent"`` (default) or ``"epoch"``
            (:mod:`bnn_ppl.inference.sgmcmc.gradients`).
        chunk_size, devices: as in :func:`~bnn_ppl.inference.full_batch_potential`.
        init_method: how ``init_params=None`` is filled from the potential (``"prior"`` or
            ``"network"``).
    """

    sample_field = "z"
    model = None  # no NumPyro model: the kernel runs on a potential (ArviZ reads this)
    _kernel_init: Callable[[Params], Any]
    _step: Step
    _noise: bool = False
    _friction: str | None = None  # the Info field of the friction (kernels with momentum)
    # the progress bar's fields after the step size: (label, Info field, format)
    _diagnostics: tuple[tuple[str, str, str], ...] = ()

    def __init__(
        self,
        potential: FullBatchPotential | BNN | None = None,
        x: Any = None,
        y: Any = None,
        *,
        potential_fn: Callable[[Any], Array] | None = None,
        batch_size: int | None = None,
        step_size: float | Schedule = 1e-3,
        sampling: str = "independent",
        chunk_size: int | None = None,
        devices: Sequence[jax.Device] | None = None,
        init_method: str = "prior",
    ):
        # every argument is checked here, before anything is traced or compiled
        self.schedule = as_schedule(step_size)
        self.sampling = validation.check_choice("sampling", sampling, SCHEMES)
        self.init_method = validation.check_choice("init_method", init_method, ("prior", "network"))
        if potential_fn is not None and not callable(potential_fn):
            raise InputTypeError(
                f"potential_fn must be callable, got {type(potential_fn).__name__}."
            )
        if potential is None and potential_fn is None:
            raise InputValueError("pass a FullBatchPotential, a BNN with x and y, or potential_fn.")
        if potential is not None and potential_fn is not None:
            raise InputValueError("pass either a potential (or BNN) or potential_fn, not both.")
        if potential_fn is not None and batch_size is not None:
            raise InputValueError(
                "batch_size needs a FullBatchPotential (it draws rows of its data); a plain "
                "potential_fn gives full-batch gradients only."
            )
        if isinstance(potential, BNN):
            if x is None or y is None:
                raise InputValueError("a BNN needs its data: pass x and y.")
            potential = full_batch_potential(
                potential, x, y, chunk_size=chunk_size, devices=devices
            )
        elif x is not None or y is not None:
            raise InputValueError(
                "x and y go with a BNN; a FullBatchPotential already has its data."
            )
        elif chunk_size is not None or devices is not None:
            raise InputValueError(
                "chunk_size and devices go with a BNN (the potential is built here); a "
                "FullBatchPotential or potential_fn already has its layout: pass them to "
                "full_batch_potential instead."
            )
        if potential is not None and not isinstance(potential, FullBatchPotential):
            raise InputTypeError(
                "potential must be a FullBatchPotential or a bnn_ppl.BNN, got "
                f"{type(potential).__name__}."
            )
        self.potential = potential
        self.potential_fn = potential_fn
        self.batch_size = validation.check_batch_size(
            "batch_size",
            batch_size,
            potential.num_data if potential is not None else None,
            2 if self._noise else 1,
        )
        self._num_warmup = 0
        self._burn_in = 0  # the burn-in the accuracy advice names (record_burn_in)
        self._vectorized = False
        self._initial: SGMCMCState | None = None  # the state init returned last

    # ---------------------------------------------------------------------- plumbing
    def _h0(self) -> float:
        """The schedule's first step size (its ``h0``, or its value at ``t = 0``)."""
        h0 = getattr(self.schedule, "h0", None)
        return float(self.schedule(0) if h0 is None else h0)

    def _estimator(self, model_args: tuple) -> GradientEstimator:
        if self.potential is None:
            return full_batch_estimator(self.potential_fn, noise=self._noise)
        data = model_args[0] if model_args else None
        return gradient_estimator(
            self.potential, data, self.batch_size, sampling=self.sampling, noise=self._noise
        )

    def _one_step(self, state: SGMCMCState, est: GradientEstimator) -> SGMCMCState:
        key, step_key = jax.random.split(state.rng_key)
        grad_fn, stream = est.batch(state.stream)
        dtype = jnp.result_type(jax.tree.leaves(state.kernel_state.position)[0])
        h = jnp.asarray(self.schedule(state.i), dtype)
        warmup = state.i < self._num_warmup
        kernel_state, info = self._step(step_key, state.kernel_state, grad_fn, h, warmup)
        capped = self._capped(info)
        stats = state.stats  # (None only while init traces the Info's shape)
        if stats is not None:
            stats = stats_update(stats, info, jnp.logical_not(warmup), capped)
        return SGMCMCState(state.i + 1, kernel_state, info, stream, key, stats)

    def _check_init(self, num_warmup: int) -> None:
        """Kernel-specific checks of the run's settings (before anything is compiled)."""

    def _capped(self, info: Any) -> Array:
        """Whether a step counts as ``capped``: its noise share 5 % above ``noise_share`` (the
        friction at the step's limit; SGHMC, ATMC), or above SGLD's 10 %."""
        limit = getattr(self, "noise_share", None)
        return info.noise_share > (0.1 if limit is None else 1.05 * limit)

    def _relaxations(self, run: RunStats) -> float:
        """How many momentum relaxation times the run's steps span, ``Σ h·C/m`` (``C`` the
        friction on ``p/m``, the Info field :attr:`_friction`); 0 without momentum."""
        if self._friction is None:
            return 0.0
        return run.steps * run.step_mean[self._friction] / getattr(self, "mass", 1.0)

    def _advice(self, run: RunStats, factor: float) -> str:
        """``"step_size=<h0·factor> (this run: <h0>)"``: concrete advice from the run's largest
        step (a cyclical schedule's ``h0``)."""
        h0 = run.peak.get("step_size", float("nan"))
        return f"step_size={h0 * factor:.3g} (this run: {h0:.3g})"

    @property
    def burn_in(self) -> int:
        """The burn-in, in steps per chain, that preceded the sampling steps the accuracy
        advice judges: ``num_warmup`` of the last ``init``, or what :meth:`record_burn_in`
        recorded since."""
        return self._burn_in

    def record_burn_in(self, num_steps: int) -> None:
        """Record that the sampling steps whose statistics are judged followed ``num_steps``
        steps of burn-in per chain: ``num_warmup`` and any steps run after it and discarded as
        burn-in (a run continued from its ``post_warmup_state`` with
        :func:`~bnn_ppl.inference.sgmcmc.kernel.stats_reset` statistics, as
        :func:`~bnn_ppl.inference.sgmcmc.recipe.run_sgmcmc` extends an automatic burn-in). The
        advice of :meth:`accuracy_problems` names this burn-in as the run's and
        a longer one to use; every ``init`` (every ``MCMC.run``) records its ``num_warmup``
        again, so call this after the last run. It changes no step (``warmup`` still ends
        after ``num_warmup``).

        Example:
            >>> import jax.numpy as jnp
            >>> from bnn_ppl.inference import SGLD
            >>> kernel = SGLD(potential_fn=lambda z: 0.5 * jnp.sum(z**2), step_size=0.05)
            >>> kernel.record_burn_in(300)
            >>> kernel.burn_in
            300
        """
        self._burn_in = validation.check_int("num_steps", num_steps, minimum=0)

    def _burn_in_advice(self, run: RunStats) -> str:
        """A burn-in at least as long as the run so far (:attr:`burn_in` and the sampling
        steps per chain), in steps (and cycles of a cyclical schedule)."""
        burn = self._burn_in
        steps = max(2 * burn, burn + run.steps // max(run.chains, 1))
        n = getattr(self.schedule, "cycle_length", None)
        if n:
            cycles = -(-steps // n)
            return f"num_warmup={cycles} cycles of {n} steps (this run: {burn // n})"
        return f"num_warmup={steps} steps (this run: {burn})"

    def accuracy_problems(self, run: RunStats) -> list[str]:
        """What the statistics of a run's sampling steps (:func:`~bnn_ppl.inference.sgmcmc.kernel.
        pool`) show went wrong, each with a concrete setting that differs from the run's; see
        :func:`~bnn_ppl.inference.check_accuracy`."""
        problems: list[str] = []
        if not run.steps:
            return problems
        name, limit = type(self).__name__, getattr(self, "noise_share", None)
        share = run.peak.get("noise_share")
        where = f"in {int(run.capped):,} of the {int(run.steps):,} sampling steps"
        if share is not None and self.batch_size is not None:
            # a capped friction (~1/h) leaves the share ∝ h²; SGLD's share is ∝ h
            if share > 1.0:
                problems.append(
                    f"{name}: the minibatch gradient noise exceeded what the friction can "
                    f"absorb (share up to {share:.2f} > 1; over the bound {where}): the "
                    "sampler no longer controls those coordinates' temperature (the draws can "
                    "come out hot or cold). Use "
                    f"{self._advice(run, 0.9 * ((limit or 0.1) / share) ** 0.5)}"
                    ", or larger batches."
                )
            elif limit is not None and share > 1.05 * limit:
                problems.append(
                    f"{name}: the gradient noise supplied up to {share:.0%} of a coordinate's "
                    f"heat (noise_share={limit}): the friction fell short of it {where} (at the "
                    "step's limit, or a thermostat below its target), "
                    "and there the noise's correlations shape the samples. Use "
                    f"{self._advice(run, 0.9 * (limit / share) ** 0.5)}, or larger batches."
                )
            elif limit is None and share > 0.1:
                problems.append(
                    f"{name}: the gradient noise supplied up to {share:.0%} of a coordinate's "
                    f"injected variance (above 10 % {where}), which SGLD cannot remove "
                    f"(over-dispersed by about as much). Use {self._advice(run, 0.09 / share)}."
                )
        problems += self._temperature_problems(run)
        problems += self._stationarity_problems(run)
        return problems

    def settling_problems(self, run: RunStats) -> list[str]:
        """The problems of :meth:`accuracy_problems` that a longer burn-in can cure: the mean
        kinetic temperature off 1 and the potential energy's drift (no warning)."""
        if not run.steps:
            return []
        return self._temperature_problems(run) + self._stationarity_problems(run)

    def _temperature_problems(self, run: RunStats) -> list[str]:
        """The mean kinetic temperature more than 10 % and four standard errors off 1."""
        problems: list[str] = []
        name = type(self).__name__
        temperature = run.mean.get("kinetic_temperature")
        if temperature is not None:
            # the mean's standard error at equilibrium: a step's 2/size (p²/m of `size`
            # Gaussian coordinates) over the momentum relaxation times the run spans (p²
            # decorrelates in half of one)
            spans = min(max(self._relaxations(run), 1.0), run.steps)
            se = (2 / max(run.size, 1) / spans) ** 0.5
            off = abs(temperature - 1)
            if off > 0.1 and off > 4 * se:
                problems.append(
                    f"{name}: mean kinetic temperature {temperature:.2f} ± {se:.2f} over "
                    f"{run.steps} sampling steps (1 at equilibrium): the momentum runs "
                    f"{'cold' if temperature < 1 else 'hot'}, and the position with it. Use "
                    f"{self._advice(run, 0.5)}, or a longer burn-in: "
                    f"{self._burn_in_advice(run)}."
                )
        return problems

    def _stationarity_problems(self, run: RunStats) -> list[str]:
        """The potential energy's fitted drift over the sampling steps: more than three times
        its stationary spread ``√(size/2)`` (a Gaussian posterior's) and four standard errors
        means the draws are still settling from their start."""
        drift, se = run.drift, run.drift_se
        spread = (max(run.size, 1) / 2) ** 0.5
        if not (abs(drift) > 3 * spread and abs(drift) > 4 * se):
            return []
        return [
            f"{type(self).__name__}: the potential energy {'fell' if drift < 0 else 'rose'} by "
            f"{abs(drift):.4g} ± {se:.2g} over the {run.steps} sampling steps (its stationary "
            f"spread is about √(size/2) = {spread:.3g}): the draws are not yet stationary, "
            f"still settling from where the chains started. Burn in longer: "
            f"{self._burn_in_advice(run)}."
        ]

    # ---------------------------------------------------------------- MCMCKernel API
    @property
    def default_fields(self) -> tuple[str, ...]:
        return ("z", "i")

    def init(
        self,
        rng_key: PRNGKey,
        num_warmup: int,
        init_params: Any,
        model_args: tuple,
        model_kwargs: dict,
    ) -> SGMCMCState:
        self._num_warmup = validation.check_int("num_warmup", num_warmup, minimum=0)
        self._burn_in = self._num_warmup
        self._check_init(self._num_warmup)
        self._vectorized = not is_prng_key(rng_key)
        if init_params is None and self.potential is None:
            # MCMC.run calls init on every run, also when it continues from a
            # post_warmup_state, and then discards the state (NumPyro's public contract for an
            # MCMCKernel; its own kernels skip the call through a private attribute)
            if self._initial is None:
                raise InputValueError("init_params are required with potential_fn.")
            return self._initial
        est = self._estimator(model_args)

        def one(key: PRNGKey, params: Any) -> SGMCMCState:
            key, init_key, stream_key = jax.random.split(key, 3)
            if params is None:
                params = self.potential.init_params(init_key, method=self.init_method)
            kernel_state = self._kernel_init(params)
            stream = est.init(stream_key)
            zero = SGMCMCState(jnp.zeros((), jnp.int32), kernel_state, None, stream, key, None)
            info_shape = jax.eval_shape(lambda s: self._one_step(s, est).info, zero)
            info = jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype), info_shape)
            size = sum(np.size(a) for a in jax.tree.leaves(params))
            return zero._replace(info=info, stats=stats_init(info, size))

        if not self._vectorized:
            self._initial = one(rng_key, init_params)
        elif init_params is None:
            self._initial = jax.vmap(lambda k: one(k, None))(rng_key)
        else:
            self._initial = jax.vmap(one)(rng_key, init_params)
        return self._initial

    def sample(self, state: SGMCMCState, model_args: tuple, model_kwargs: dict) -> SGMCMCState:
        est = self._estimator(model_args)
        if self._vectorized:
            return jax.vmap(lambda s: self._one_step(s, est))(state)
        return self._one_step(state, est)

    def postprocess_fn(self, model_args: tuple, model_kwargs: dict) -> Callable:
        return identity if self.potential is None else self.potential.postprocess_fn

    def get_diagnostics_str(self, state: SGMCMCState) -> str:
        fields = (("step size", "step_size", ".2e"), *self._diagnostics)
        return ", ".join(
            f"{label} {float(getattr(state.info, field)):{spec}}" for label, field, spec in fields
        )


# ------------------------------------------------- tree arithmetic shared by the kernels
def normal_like(rng_key: PRNGKey, tree: PyTree) -> PyTree:
    """Independent standard normals in the structure, shapes and dtypes of ``tree``: leaf ``i``
    gets ``jax.random.normal(keys[i], shape, dtype)``, ``keys = jax.random.split(rng_key,
    number of leaves)``, drawn flat by dtype (:mod:`bnn_ppl.flat_draws`: the same values)."""
    leaves, treedef = jax.tree.flatten(tree)
    keys = jax.random.split(rng_key, len(leaves))
    dtypes = [jnp.result_type(x) for x in leaves]
    draws = grouped_flat_draws(
        list(keys),
        [jnp.shape(x) for x in leaves],
        dtypes,
        lambda dtype, size: lambda k: jax.random.normal(k, (size,), dtype),
    )
    return jax.tree.unflatten(treedef, draws)


def tree_mean(tree: PyTree) -> Array:
    """Mean of all scalars in ``tree`` (every leaf's entries weighted equally)."""
    leaves = jax.tree.leaves(tree)
    total = sum(jnp.sum(x) for x in leaves)
    return total / sum(jnp.size(x) for x in leaves)


def tree_max(tree: PyTree) -> Array:
    """Largest scalar in ``tree``."""
    return jnp.max(jnp.stack([jnp.max(x) for x in jax.tree.leaves(tree)]))


def noise_friction(
    noise: NoiseAverage, noise_variance: PyTree, noise_decay: float, step_size: Array,
    mass: float = 1.0,
) -> tuple[NoiseAverage, PyTree]:  # fmt: skip
    """The running noise average updated with a step's estimate ``noise_variance`` (the
    ``σ²`` of :data:`~bnn_ppl.inference.sgmcmc.gradients.GradFn`), and the friction per
    coordinate that its average ``σ̂²`` supplies at step ``h``: ``h σ̂² / (2·mass)`` (on ``p``;
    ``mass=1`` gives SGHMC's ``B̂ = h σ̂² / 2``, a friction on ``p/m``)."""
    noise, sigma2 = noise_average_update(noise, noise_variance, noise_decay)
    return noise, jax.tree.map(lambda s: step_size * s / (2 * mass), sigma2)


def allowed_share(noise_share: float, warmup: Array | bool) -> Array:
    """The share ``κ`` of a coordinate's heat a step lets the gradient noise supply before its
    friction is raised: ``noise_share`` when sampling, 1 during ``warmup`` (the friction rises
    only to the noise's level, which descends faster from a start far out)."""
    return jnp.where(warmup, 1.0, noise_share)


def heat_share(noise: PyTree, friction: PyTree) -> Array:
    """``Info.noise_share``: the largest share ``noise_i / friction_i`` over the coordinates of
    the friction that came from the gradient noise."""
    return tree_max(jax.tree.map(lambda o, b: o / b, noise, friction))


# -------------------- step_stats
# Running statistics of an SG-MCMC kernel's ``Info`` over every sampling step.
#
# A cyclical SG-MCMC run keeps one draw per cycle, at the cycle's end, where the cosine step size
# is near zero: the ``Info`` records of the kept draws show nothing of the large steps at each
# cycle start, where the friction hits its cap or the Euler bias is largest. So each kernel's
# state (:class:`~bnn_ppl.inference.sgmcmc.kernel.SGMCMCState`) carries a :class:`StepStats`,
# updated by every
# step after warmup (warmup steps are not counted): the number of steps, how many of them had a
# gradient-noise share above the kernel's limit (``capped``: the friction was at its cap), and
# per ``Info`` field the sum over steps (``total``), the sum of the field times the step size
# (``timed``, e.g. ``Σ h·ξ``) and the largest value (``peak``), and the number of coordinates
# (``size``: a kinetic temperature, a mean over them, fluctuates by ``√(2/size)``), and the
# potential energy's least-squares ``trend`` over the steps (how far ``U`` drifted: draws still
# descending from their start are not yet stationary). The sums are Kahan-compensated float32
# (``errors``), so that a run of 10⁷ steps loses no step's contribution. The kernel resets
# nothing (:func:`stats_reset` starts the count afresh, for a run continued in sampling mode
# that is to be judged on its own steps): the statistics of the last state (or of the last collected
# draw, which NumPyro takes at the run's last step) cover every sampling step since ``init``, in
# every segment of a checkpointed run and whatever the thinning. Collect them with
# ``extra_fields=("stats",)``; :func:`pool` combines chains into a :class:`RunStats`, which
# :func:`~bnn_ppl.inference.check_accuracy` reads.

class Sums(NamedTuple):
    """The Kahan compensations of :class:`StepStats`' two sums."""

    total: Any
    timed: Any


class Trend(NamedTuple):
    """Sums over the sampling steps ``k = 0, 1, ...`` of ``d = U_k - origin`` (``origin``: the
    first step's potential energy, so that float32 keeps the fluctuations): ``Σ d``
    (``total``), ``Σ k·d`` (``indexed``) and ``Σ d²`` (``squares``), with their Kahan
    compensations (``*_error``)."""

    origin: Any
    total: Any
    indexed: Any
    squares: Any
    total_error: Any
    indexed_error: Any
    squares_error: Any


class StepStats(NamedTuple):
    """Statistics of a chain's sampling steps since ``init`` (see the module doc).

    ``size`` (the position's number of scalars), ``steps`` and ``capped`` are int32 counts;
    ``total``, ``timed`` and ``peak`` are the kernel's ``Info`` NamedTuple holding, per field,
    ``Σ f``, ``Σ h·f`` and ``max f``; ``errors`` the Kahan compensations of the two sums;
    ``trend``: the potential energy's :class:`Trend`."""

    size: Array
    steps: Array
    capped: Array
    total: Any
    timed: Any
    peak: Any
    errors: Sums
    trend: Trend


@dataclass(frozen=True)
class RunStats:
    """A run's :class:`StepStats`, all chains pooled (float64): ``steps``, ``capped``, and per
    ``Info`` field its ``mean`` over steps, ``step_mean`` (the mean of ``h·f``) and ``peak``;
    ``size``: the number of coordinates; ``drift``: how much the potential energy's
    least-squares line rises over the steps (``slope × steps``, mean over chains; NaN when not
    recorded) and ``drift_se`` its standard error were the residuals independent;
    ``chains``: how many chains' statistics were pooled."""

    size: int
    steps: int
    capped: int
    mean: dict[str, float]
    step_mean: dict[str, float]
    peak: dict[str, float]
    drift: float = float("nan")
    drift_se: float = float("nan")
    chains: int = 1


def stats_init(info: Any, size: int) -> StepStats:
    """No steps yet, in the structure of the ``Info`` record ``info`` (float32 sums), for a
    position of ``size`` scalars."""
    zeros = jax.tree.map(lambda a: jnp.zeros(jnp.shape(a), jnp.float32), info)
    low = jax.tree.map(lambda a: jnp.full(jnp.shape(a), -jnp.inf, jnp.float32), info)
    count = jnp.zeros((), jnp.int32)
    size = jnp.asarray(size, jnp.int32)
    z = jnp.zeros((), jnp.float32)
    trend = Trend(z, z, z, z, z, z, z)
    return StepStats(size, count, count, zeros, zeros, low, Sums(zeros, zeros), trend)


def stats_reset(stats: StepStats) -> StepStats:
    """``stats`` with no steps counted (any leading axes: chains, ...); the position's ``size``
    is kept. A run continued from a state with its statistics reset is judged on its own
    steps only (e.g. after a burn-in extended in sampling mode)."""
    zeros = jax.tree.map(jnp.zeros_like, stats)
    low = jax.tree.map(lambda a: jnp.full_like(a, -jnp.inf), stats.peak)
    return zeros._replace(size=stats.size, peak=low)


def _kahan(total: Any, error: Any, x: Any, active: Array) -> tuple[Any, Any]:
    def one(s: Array, c: Array, v: Array) -> tuple[Array, Array]:
        y = jnp.asarray(v, jnp.float32) - c
        t = s + y
        return jnp.where(active, t, s), jnp.where(active, (t - s) - y, c)

    pairs = jax.tree.map(one, total, error, x)
    outer = jax.tree.structure(total)
    inner = jax.tree.structure((0, 0))
    return jax.tree.transpose(outer, inner, pairs)


def stats_update(stats: StepStats, info: Any, active: Array, capped: Array | bool) -> StepStats:
    """``stats`` with one more step, whose ``Info`` is ``info``, if ``active`` (after warmup);
    ``capped``: the step's noise share exceeded the kernel's limit.

    Example:
        >>> import jax.numpy as jnp
        >>> from typing import NamedTuple
        >>> class Info(NamedTuple):
        ...     step_size: jnp.ndarray
        ...     kinetic_temperature: jnp.ndarray
        >>> s = stats_init(Info(jnp.zeros(()), jnp.zeros(())), size=3)
        >>> for h, t in [(0.1, 0.5), (0.3, 1.5)]:
        ...     s = stats_update(s, Info(jnp.asarray(h), jnp.asarray(t)), jnp.asarray(True), False)
        >>> run = pool(s)
        >>> (run.steps, run.mean["kinetic_temperature"],
        ...  round(run.step_mean["kinetic_temperature"], 3))
        (2, 1.0, 0.25)
    """
    h = jnp.asarray(info.step_size, jnp.float32)
    e = stats.errors
    total, total_e = _kahan(stats.total, e.total, info, active)
    timed, timed_e = _kahan(stats.timed, e.timed, jax.tree.map(lambda a: h * a, info), active)
    peak = jax.tree.map(
        lambda m, a: jnp.where(active, jnp.maximum(m, jnp.asarray(a, jnp.float32)), m),
        stats.peak, info,
    )  # fmt: skip
    one = jnp.asarray(active, jnp.int32)
    capped = stats.capped + one * jnp.asarray(capped, jnp.int32)
    errors = Sums(total_e, timed_e)
    u = getattr(info, "potential_energy", None)  # (an Info without it: no trend)
    trend = stats.trend if u is None else _trend_update(stats.trend, stats.steps, u, active)
    return StepStats(stats.size, stats.steps + one, capped, total, timed, peak, errors, trend)


def _trend_update(trend: Trend, k: Array, u: Array, active: Array) -> Trend:
    u = jnp.asarray(u, jnp.float32)
    origin = jnp.where(k == 0, u, trend.origin)
    d = jnp.where(jnp.isfinite(u), u - origin, 0.0)
    sums, errors = _kahan(
        (trend.total, trend.indexed, trend.squares),
        (trend.total_error, trend.indexed_error, trend.squares_error),
        (d, k.astype(jnp.float32) * d, d * d),
        active,
    )
    return Trend(jnp.where(active, origin, trend.origin), *sums, *errors)


def _drift(a: Mapping[str, np.ndarray]) -> tuple[float, float]:
    """The potential energy's fitted rise over each chain's steps (mean over chains) and its
    standard error (residuals taken independent), from the ``trend.*`` fields."""
    if "trend.total" not in a:
        return float("nan"), float("nan")
    n = np.asarray(a["steps"], np.float64)
    s1 = a["trend.total"] - a["trend.total_error"]
    sk = a["trend.indexed"] - a["trend.indexed_error"]
    s2 = a["trend.squares"] - a["trend.squares_error"]
    with np.errstate(divide="ignore", invalid="ignore"):
        kbar = (n - 1) / 2
        skk = n * (n * n - 1) / 12  # Σ (k - k̄)²
        slope = (sk - kbar * s1) / skk
        resid = np.maximum(s2 - s1 * s1 / n - slope * slope * skk, 0.0) / np.maximum(n - 2, 1)
        drift = slope * n
        se = np.sqrt(resid / skk) * n
    ok = n > 2
    if not np.any(ok):
        return float("nan"), float("nan")
    m = int(np.sum(ok))
    return float(np.mean(drift[ok])), float(np.sqrt(np.sum(se[ok] ** 2)) / m)


def _fields(tree: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(tree, tuple) and type(tree) is not tuple:  # a NamedTuple
        out: dict[str, Any] = {}
        for name, value in tree._asdict().items():
            out |= _fields(value, f"{prefix}{name}.")
        return out
    return {prefix[:-1]: tree}


def pool(stats: StepStats) -> RunStats:
    """:class:`RunStats` of ``stats`` (any leading axes: chains, ...)."""
    return pool_fields(_fields(stats))


def pool_fields(fields: Mapping[str, Any]) -> RunStats:
    """:func:`pool` of a :class:`StepStats` stored field by field (``"steps"``,
    ``"total.<name>"``, ...: e.g. a checkpointed run's ``"stats.<...>"`` arrays, each chain's
    last draw)."""
    a = {k: np.asarray(v, np.float64) for k, v in fields.items()}
    steps = int(np.sum(a["steps"]))
    names = [k[6:] for k in a if k.startswith("total.")]

    def mean(kind: str, name: str) -> float:
        s = np.sum(a[f"{kind}.{name}"] - a[f"errors.{kind}.{name}"])  # Kahan: sum - error
        return float(s / steps) if steps else float("nan")

    peak = {n: float(np.max(a[f"peak.{n}"])) if steps else float("nan") for n in names}
    return RunStats(
        int(np.max(a["size"])),
        steps,
        int(np.sum(a["capped"])),
        {n: mean("total", n) for n in names},
        {n: mean("timed", n) for n in names},
        peak,
        *_drift(a),
        chains=int(np.size(a["steps"])),
    )

"""NumPyro's HMC and NUTS kernels on a :class:`~bnn_ppl.inference.FullBatchPotential`."""

# Notes:
#
# :class:`HMC` and :class:`NUTS` run NumPyro's HMC machinery through its *public* functional
# interface, ``numpyro.infer.hmc.hmc(potential_fn_gen=..., algo=...)``, which returns NumPyro's
# own ``(init_kernel, sample_kernel)``: the draws are those of ``numpyro.infer.HMC``/``NUTS``, bit
# for bit. They take the data as a *jit argument* of the sampling loop, passed through
# ``mcmc.run(key, *pot.args, ...)`` with ``MCMC(..., jit_model_args=True)``: large data stay out of
# the program's constants. Every keyword is checked before anything compiles
# (:mod:`bnn_ppl.inference.mcmc.checks`), and :class:`HMC` keeps every iteration between 1 and
# ``max_num_steps`` leapfrog steps and can follow an adapted metric with its trajectory length.
# :func:`bnn_ppl.inference.hmc` and :func:`~bnn_ppl.inference.nuts` build and run them.
#
# No private NumPyro attribute or function is used: the kernels implement the public
# ``MCMCKernel`` methods (``init``, ``sample``, ``sample_field``, ``default_fields``,
# ``postprocess_fn``, ``get_diagnostics_str``, ``model``, ``get_potential_fn``,
# ``get_constrain_fn``) themselves and keep their settings in :attr:`HMC.settings`. They remain
# subclasses of ``numpyro.infer.HMC``/``NUTS``, built through its public constructor, so that
# ``isinstance(kernel, numpyro.infer.HMC)`` holds. ``MCMC.warmup``, ``post_warmup_state`` and
# ``last_state`` work as with NumPyro's kernels; :meth:`HMC.init` without ``init_params`` starts
# from the potential's default initial values (``potential.init_params``).
#
# Inside NumPyro's functions the position is one flat vector (:class:`FlatLayout`): the
# potential unravels it, and ``init``/``sample`` ravel the state's ``z`` and ``z_grad`` on the
# way in and unravel them on the way out, so the states, draws and checkpoints keep the
# parameter tree. NumPyro's leapfrog, tree building and adaptation then take one operation
# where they took one per parameter leaf (LeNet-5's NUTS loop: 12 % less StableHLO, its
# compilation 20 % shorter: docs/benchmarks/compilation.md). The momentum is one normal draw
# of the flat size either way (NumPyro ravels the tree), so the draws are NumPyro's on the
# tree up to floating-point rounding. The initial state's potential energy and gradient come
# from a program of their own (NumPyro's ``ParamInfo``), so the program that sets the state
# up holds no gradient.

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.infer
from jax.flatten_util import ravel_pytree
from numpyro.infer.hmc import HMCState, hmc
from numpyro.infer.util import ParamInfo
from numpyro.util import is_prng_key

from bnn_ppl.inference.mcmc.checks import check_hmc_kwargs, check_nuts_kwargs
from bnn_ppl.inference.potential.bnn import FullBatchPotential
from bnn_ppl.validation import InputTypeError

__all__ = ["HMC", "NUTS", "check_potential"]

DEFAULT_SETTINGS: dict[str, Any] = {
    "step_size": 1.0,
    "inverse_mass_matrix": None,
    "adapt_step_size": True,
    "adapt_mass_matrix": True,
    "dense_mass": False,
    "target_accept_prob": 0.8,
    "num_steps": None,
    "trajectory_length": 2 * math.pi,
    "max_tree_depth": 10,
    "find_heuristic_step_size": False,
    "forward_mode_differentiation": False,
    "regularize_mass_matrix": True,
}
"""The keywords of NumPyro's ``init_kernel`` and their values when not given (those of
``numpyro.infer.HMC``; :class:`NUTS` has no ``trajectory_length`` and no ``num_steps``)."""


class FlatLayout:
    """Ravel a parameter tree into one vector and back (``jax.flatten_util.ravel_pytree``).
    Built from one (unbatched) tree of arrays or ``jax.ShapeDtypeStruct``; a tree whose leaves
    have different dtypes, or ``flatten=False``, is kept as it is (``flat`` is then ``False``
    and both maps are the identity)."""

    def __init__(self, tree: Any, flatten: bool = True):
        leaves, self.treedef = jax.tree.flatten(tree)
        self.specs = [(tuple(np.shape(v)), jnp.result_type(v)) for v in leaves]
        self.flat = flatten and len({dtype for _, dtype in self.specs}) == 1
        if self.flat:  # the unravel map from the shapes alone: a trace, no computation
            found = []

            def ravel(t: Any) -> Any:
                flat, unravel = ravel_pytree(t)
                found.append(unravel)  # static: the leaves' sizes and shapes
                return flat

            specs = [jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in self.specs]
            jax.eval_shape(ravel, jax.tree.unflatten(self.treedef, specs))
            self._unravel = found[0]

    def matches(self, tree: Any) -> bool:
        """Whether ``tree`` has this layout's structure, shapes and dtypes."""
        other = FlatLayout(tree, flatten=False)
        return other.treedef == self.treedef and other.specs == self.specs

    def ravel(self, tree: Any) -> Any:
        return ravel_pytree(tree)[0] if self.flat else tree

    def unravel(self, v: Any) -> Any:
        return self._unravel(v) if self.flat else v


class HMCFunctions(NamedTuple):
    """NumPyro's ``(init_kernel, sample_kernel)`` from the public ``numpyro.infer.hmc.hmc``."""

    init: Callable[..., HMCState]
    sample: Callable[..., HMCState]


def check_potential(potential: Any) -> FullBatchPotential:
    if not isinstance(potential, FullBatchPotential):
        raise InputTypeError(
            f"potential must be a FullBatchPotential (bnn_ppl.inference.full_batch_potential), "
            f"got {type(potential).__name__}."
        )
    return potential


def _settings(kwargs: dict[str, Any], **fixed: Any) -> dict[str, Any]:
    """``init_kernel``'s keywords: the defaults, then ``kwargs``, then ``fixed``; integer step
    sizes and lengths as floats (as ``numpyro.infer.HMC`` stores them)."""
    out = DEFAULT_SETTINGS | {k: v for k, v in kwargs.items() if k in DEFAULT_SETTINGS} | fixed
    for name in ("step_size", "trajectory_length"):
        if isinstance(out[name], int):
            out[name] = float(out[name])
    return out


class _OnPotential:
    """The public ``MCMCKernel`` methods, for NumPyro's HMC machinery on ``potential``.

    ``numpyro.infer.hmc.hmc`` accepts a potential generator that receives the model arguments;
    here the "model arguments" are the sharded data, so with ``jit_model_args=True`` they are
    arguments of the compiled loop rather than constants.
    """

    potential: FullBatchPotential
    algo: str
    settings: dict[str, Any]

    def _setup(
        self,
        potential: FullBatchPotential,
        algo: str,
        settings: dict[str, Any],
        kinetic_fn: Callable[..., Any] | None,
    ) -> None:
        self.potential = potential
        self.algo = algo
        self.settings = settings
        self.kinetic_fn = kinetic_fn
        # a kinetic energy of the user's sees the parameter tree, as with NumPyro's kernels
        self._flatten = kinetic_fn is None
        self._layout: FlatLayout | None = None  # set by init from the initial values
        self._functions = self._hmc_functions()
        # NumPyro's init_kernel, compiled once per kernel and input shapes (see init)
        self._init_compiled = jax.jit(self._compiled_states, static_argnums=1)
        # the initial potential energy and gradient, compiled apart (see init)
        self._energy_compiled = jax.jit(self._energy, static_argnums=3)
        # the potential's initial values for init_params=None, compiled apart (see init)
        self._draw_compiled = jax.jit(self._draw_init_params)
        self._initialized = False
        # the num_warmup that NumPyro's init_kernel last set its sampler up for (see init)
        self._set_up_for: int | None = None

    @property
    def layout(self) -> FlatLayout:
        """How the parameter tree is raveled for NumPyro's functions (set by :meth:`init`)."""
        if self._layout is None:
            raise RuntimeError(f"{type(self).__name__}.init must run before sample.")
        return self._layout

    def _flat_potential_fn_gen(self, *args: Any, **kwargs: Any) -> Callable[[Any], Any]:
        """The potential on the data ``args`` as a function of the raveled position."""
        fn = self.potential.potential_fn_gen(*args, **kwargs)
        unravel = self.layout.unravel
        return lambda v: fn(unravel(v))

    def _hmc_functions(self) -> HMCFunctions:
        """NumPyro's ``(init_kernel, sample_kernel)`` on the raveled position, wrapped so that
        they take and return states holding the parameter tree."""
        init_kernel, sample_kernel = hmc(
            potential_fn_gen=self._flat_potential_fn_gen,
            kinetic_fn=self.kinetic_fn,
            algo=self.algo,
        )

        def tree_state(state: HMCState) -> HMCState:
            lay = self.layout
            return state._replace(z=lay.unravel(state.z), z_grad=lay.unravel(state.z_grad))

        def init(init_params: Any, **kwargs: Any) -> HMCState:
            lay = self.layout
            if isinstance(init_params, ParamInfo):
                z, pe, grad = init_params
                init_params = ParamInfo(lay.ravel(z), pe, None if grad is None else lay.ravel(grad))
            else:
                init_params = lay.ravel(init_params)
            return tree_state(init_kernel(init_params, **kwargs))

        def sample(state: HMCState, model_args: tuple, model_kwargs: dict) -> HMCState:
            lay = self.layout
            flat = state._replace(z=lay.ravel(state.z), z_grad=lay.ravel(state.z_grad))
            return tree_state(sample_kernel(flat, model_args, model_kwargs))

        return HMCFunctions(init, sample)

    def _states(
        self,
        init_kernel: Callable[..., HMCState],
        rng_key: Any,
        num_warmup: int,
        init_params: Any,
        model_args: tuple,
        model_kwargs: dict,
    ) -> HMCState:
        """``numpyro.infer.HMC.init``'s computation: ``init_kernel`` with :attr:`settings`,
        vmapped over chains for a batch of keys, from ``init_params`` (see :meth:`init`)."""
        vectorized = not is_prng_key(rng_key)
        rng_key = self._split(rng_key)[0]

        def one(params: Any, key: Any) -> HMCState:
            return init_kernel(
                params,
                num_warmup=num_warmup,
                **self.settings,
                model_args=model_args,
                model_kwargs=model_kwargs,
                rng_key=key,
            )

        return jax.vmap(one)(init_params, rng_key) if vectorized else one(init_params, rng_key)

    @staticmethod
    def _split(rng_key: Any) -> tuple[Any, Any]:
        """``(key for init_kernel, key for initial values)`` of a key, or of a batch of keys."""
        if is_prng_key(rng_key):
            return tuple(jax.random.split(rng_key))
        return tuple(jnp.swapaxes(jax.vmap(jax.random.split)(rng_key), 0, 1))

    def _draw_init_params(self, rng_key: Any) -> Any:
        """The potential's initial values (``init_params=None``), one set per key of a batch."""
        init_key = self._split(rng_key)[1]
        draw = self.potential.init_params
        return draw(init_key) if is_prng_key(rng_key) else jax.vmap(draw)(init_key)

    def _energy(
        self, init_params: Any, model_args: tuple, model_kwargs: dict, vectorized: bool
    ) -> ParamInfo:
        """NumPyro's ``ParamInfo`` (position, potential energy, gradient) at ``init_params``,
        one per chain when ``vectorized``."""

        def one(z: Any) -> ParamInfo:
            fn = self.potential.potential_fn_gen(*model_args, **model_kwargs)
            return ParamInfo(z, *jax.value_and_grad(fn)(z))

        return jax.vmap(one)(init_params) if vectorized else one(init_params)

    def _compiled_states(
        self,
        rng_key: Any,
        num_warmup: int,
        init_params: ParamInfo,
        model_args: tuple,
        model_kwargs: dict,
    ) -> HMCState:
        """:meth:`_states` then :meth:`adjust` (jitted: one program). Its trace sets NumPyro's
        sampler up for ``num_warmup`` as it goes; the one closure of NumPyro's that keeps traced
        data (the integrator's potential) is rebuilt from the data by every ``sample``."""
        init_kernel = self._functions.init
        states = self._states(
            init_kernel, rng_key, num_warmup, init_params, model_args, model_kwargs
        )
        self._set_up_for = num_warmup
        return self.adjust(states)

    def adjust(self, state: HMCState) -> HMCState:
        """What this kernel changes in NumPyro's state after ``init`` and every ``sample``."""
        return state

    # ------------------------------------------------------------- the MCMCKernel API
    @property
    def model(self) -> None:
        return None

    @property
    def sample_field(self) -> str:
        return "z"

    @property
    def default_fields(self) -> tuple[str, ...]:
        return ("z", "diverging")

    def get_diagnostics_str(self, state: HMCState) -> str:
        step = state.adapt_state.step_size
        return f"{state.num_steps} steps of size {step:.2e}. acc. prob={state.mean_accept_prob:.2f}"

    def postprocess_fn(self, model_args: tuple, model_kwargs: dict) -> Callable[[Any], Any]:
        return self.potential.postprocess_fn

    def get_constrain_fn(
        self, model_args: tuple = (), model_kwargs: dict | None = None, **kwargs: Any
    ) -> Callable[[Any], Any]:
        return self.potential.postprocess_fn

    def get_potential_fn(
        self, model_args: tuple = (), model_kwargs: dict | None = None
    ) -> Callable[[Any], Any]:
        """The potential on ``model_args`` (the data; default: the potential's own)."""
        return self.potential.potential_fn_gen(*model_args, **(model_kwargs or {}))

    def init(
        self,
        rng_key: Any,
        num_warmup: int,
        init_params: Any = None,
        model_args: tuple = (),
        model_kwargs: dict | None = None,
    ) -> HMCState:
        """NumPyro's ``init_kernel`` with :attr:`settings`, as ``numpyro.infer.HMC.init`` calls
        it (vmapped over a batch of keys, one per chain); ``init_params=None`` starts from
        ``potential.init_params``. Also sets NumPyro's sampler up for ``num_warmup``."""
        model_kwargs = {} if model_kwargs is None else model_kwargs
        # numpyro.infer.HMC.init runs init_kernel eagerly, vmapped: op by op, hundreds of small
        # compilations for every new network (measured: 5-8 s of CPU for a one-hidden-layer
        # MLP, 2 s compiled). Here it is one compiled program, giving NumPyro's draws to float32
        # rounding (tests/inference/mcmc/test_hmc.py::test_kernels_are_numpyros_on_its_public_api).
        # MCMC.run calls init on every run, also when it continues from a post_warmup_state and
        # discards the result: the program is compiled once per kernel and input shapes.
        # NumPyro's sampler is set up for num_warmup by the program's own trace (see
        # _compiled_states), or, when the program was compiled before and another num_warmup
        # came in between, by tracing only (no computation). What init_kernel sets up (its
        # warmup adapter, the number of warmup steps) depends on num_warmup and the kernel's
        # settings alone, so the trace is skipped when it is already set up for it. The initial
        # potential energy and gradient come from a program of their own (_energy, NumPyro's
        # ParamInfo), so the init program and that trace hold no gradient.
        # init_params=None: drawn by a program of their own, so that the gradient's program is
        # the one compiled for given values. MCMC.run after MCMC.warmup calls init with None
        # and discards the state; a None of its own made init compile the gradient a second
        # time (a ResNet's first mcmc.run on an H200 took 115 s, its gradient 18 s to compile).
        if init_params is None:
            init_params = self._draw_compiled(rng_key)
        if isinstance(init_params, ParamInfo):  # its energy and gradient are computed again
            init_params = init_params.z
        vectorized = not is_prng_key(rng_key)
        self._set_layout(init_params, vectorized)
        # the energy and gradient by a program of their own: the init program holds no gradient
        info = self._energy_compiled(init_params, model_args, model_kwargs, vectorized)
        state = self._init_compiled(rng_key, num_warmup, info, model_args, model_kwargs)
        if self._set_up_for != num_warmup:
            init = self._functions.init
            jax.eval_shape(
                lambda key, info: self._states(init, key, num_warmup, info, model_args,
                                               model_kwargs),
                rng_key,
                ParamInfo(state.z, state.potential_energy, state.z_grad),
            )  # fmt: skip
        self._set_up_for = num_warmup
        self._initialized = True
        return state

    def _set_layout(self, init_params: Any, vectorized: bool) -> None:
        """The :class:`FlatLayout` of one chain's ``init_params`` (kept when it fits)."""
        one = jax.tree.map(
            lambda a: jax.ShapeDtypeStruct(np.shape(a)[int(vectorized) :], jnp.result_type(a)),
            init_params,
        )
        if self._layout is None or not self._layout.matches(one):
            self._layout = FlatLayout(one, flatten=self._flatten)

    def sample(self, state: HMCState, model_args: tuple, model_kwargs: dict) -> HMCState:
        """One iteration of NumPyro's ``sample_kernel`` (vmapped when ``state`` holds one state
        per chain, as :meth:`init` returns for a batch of keys)."""
        if not self._initialized:
            raise RuntimeError(f"{type(self).__name__}.init must run before sample.")
        step = self._functions.sample
        if jnp.ndim(state.i) > 0:
            step = jax.vmap(step, in_axes=(0, None, None))
        return self.adjust(step(state, model_args, model_kwargs))


class HMC(_OnPotential, numpyro.infer.HMC):
    """NumPyro's ``HMC`` on a :class:`~bnn_ppl.inference.FullBatchPotential`, with a bounded
    step size.

    Takes every keyword of ``numpyro.infer.HMC`` except ``model``/``potential_fn``/
    ``init_strategy``, plus ``max_num_steps`` (default 1024), all checked before anything
    compiles (:mod:`bnn_ppl.inference.mcmc.checks`). Run it with
    ``MCMC(kernel, ..., jit_model_args=True).run(key, *pot.args, init_params=...)``.

    Differences from NumPyro's kernel:

    * With a ``trajectory_length`` every iteration takes between 1 and ``max_num_steps``
      leapfrog steps (:meth:`bound_step_size`, applied to the state after ``init`` and after
      every ``sample``): the step size is held at most ``trajectory_length`` (NumPyro alone lets
      dual averaging push it to float32's maximum when every proposal is accepted, after which
      ``ceil(trajectory_length / step_size)`` is 0: no step, acceptance 1.0, a chain that never
      moves), and an adapted step size so small that the trajectory would need more than
      ``max_num_steps`` steps is *kept*, the trajectory shortened to ``max_num_steps`` steps
      of it (as NUTS's maximum tree depth does), rather than the step raised to
      ``trajectory_length / max_num_steps``: a raised step is one dual averaging has just
      found too large, and on a posterior much narrower than the metric (a UCI MLP in warmup's
      identity-metric windows) its acceptance was 0 - frozen chains, from whose draws the mass
      matrix was then estimated (``benchmarks/reference_convergence.py``). A fixed step size
      needing more than ``max_num_steps`` steps is refused.
    * ``metric_trajectory_length`` (default ``None``: unused): the trajectory length once the
      metric is no longer the identity (after the first mass-matrix adaptation window, or from
      the start with an ``inverse_mass_matrix``); ``trajectory_length`` then applies only while
      the metric is the identity (:meth:`follow_metric`). A trajectory length is a time *in the
      metric*: Izmailov et al.'s (π/2)·σ_prior is a quarter period of the prior with an identity
      mass matrix, while with the posterior's variances as inverse mass matrix a quarter period
      of every (Gaussian) direction is π/2, whatever its width.
    * ``HMC(pot, num_steps=k)`` without ``trajectory_length`` means "k steps of ``step_size``".
      (NumPyro's default ``trajectory_length=2π`` would silently override ``step_size`` with
      2π/k.)

    Example:
        >>> import jax
        >>> import bnn_ppl as bp
        >>> from numpyro.infer import MCMC
        >>> from bnn_ppl.models import MLP
        >>> from bnn_ppl.inference import HMC, full_batch_potential
        >>> data = bp.data.load("diabetes")
        >>> model = bp.BNN(MLP(hidden=(8,), out=1), bp.priors.Normal(1.0),
        ...                bp.likelihoods.Gaussian(scale=0.7))
        >>> pot = full_batch_potential(model, data.x_train, data.y_train)
        >>> mcmc = MCMC(HMC(pot, trajectory_length=1.0), num_warmup=20, num_samples=10,
        ...             progress_bar=False, jit_model_args=True)
        >>> mcmc.run(jax.random.key(0), *pot.args, init_params=pot.init_params(jax.random.key(1)))
        >>> mcmc.get_samples()["Dense_0.kernel"].shape
        (10, 10, 8)
    """

    def __init__(self, potential: FullBatchPotential, **kwargs: Any):
        check_potential(potential)
        if kwargs.get("num_steps") is not None and "trajectory_length" not in kwargs:
            kwargs["trajectory_length"] = None
        kwargs = check_hmc_kwargs(kwargs)
        self.max_num_steps: int = kwargs.pop("max_num_steps")
        self.metric_trajectory_length: float | None = kwargs.pop("metric_trajectory_length", None)
        self.identity_trajectory_length: float | None = kwargs.get("trajectory_length")
        self.dense_mass: bool = kwargs.get("dense_mass", False)
        # numpyro.infer.HMC's public constructor: isinstance(kernel, numpyro.infer.HMC) holds
        super().__init__(potential_fn=potential.potential_fn, **kwargs)
        self._setup(potential, "HMC", _settings(kwargs), kwargs.get("kinetic_fn"))

    def follow_metric(self, state: HMCState) -> HMCState:
        """``state`` with the trajectory length of its metric: ``metric_trajectory_length`` once
        ``state.adapt_state.inverse_mass_matrix`` is not the identity, else
        ``trajectory_length`` (NumPyro starts from the identity and replaces it at the end of
        each slow adaptation window). Without a ``metric_trajectory_length``: always
        ``trajectory_length`` (undoing a shortening by :meth:`bound_step_size`)."""
        if state.trajectory_length is None:
            return state
        dtype = jnp.result_type(state.trajectory_length)
        if self.metric_trajectory_length is None:
            nominal = self.settings["trajectory_length"]  # as given, or NumPyro's default
            length = jnp.full_like(state.trajectory_length, nominal, dtype)
            return state._replace(trajectory_length=length)
        m = state.adapt_state.inverse_mass_matrix
        if self.dense_mass:
            identity = jnp.all(m == jnp.eye(m.shape[-1], dtype=m.dtype), axis=(-2, -1))
        else:
            identity = jnp.all(m == 1, axis=-1)
        length = jnp.where(identity, self.identity_trajectory_length, self.metric_trajectory_length)
        return state._replace(trajectory_length=length.astype(dtype))

    def bound_step_size(self, state: HMCState) -> HMCState:
        """``state`` with at most ``max_num_steps`` leapfrog steps per iteration and at least
        one: its step size held at most ``L = state.trajectory_length``, and ``L`` shortened to
        ``(max_num_steps - 1/2)`` steps when the step size is below ``L / (max_num_steps -
        1/2)`` (``ceil(L / step)``, NumPyro's number of steps, is then ``max_num_steps``). A
        state without a trajectory length (fixed ``num_steps``) is returned as is. Uses only the
        documented fields of ``HMCState`` and ``HMCAdaptState`` (``step_size``: the step size of
        the next iteration)."""
        length = state.trajectory_length
        if length is None:
            return state
        step = jnp.minimum(state.adapt_state.step_size, length)
        length = jnp.minimum(length, step * (self.max_num_steps - 0.5)).astype(length.dtype)
        return state._replace(trajectory_length=length,
                              adapt_state=state.adapt_state._replace(step_size=step))  # fmt: skip

    def adjust(self, state: HMCState) -> HMCState:
        """:meth:`bound_step_size` of :meth:`follow_metric`: applied after ``init`` and after
        every ``sample``."""
        return self.bound_step_size(self.follow_metric(state))


class NUTS(_OnPotential, numpyro.infer.NUTS):
    """NumPyro's ``NUTS`` on a :class:`~bnn_ppl.inference.FullBatchPotential` (see :class:`HMC`);
    ``max_tree_depth`` at most 15, every keyword checked before anything compiles."""

    def __init__(self, potential: FullBatchPotential, **kwargs: Any):
        check_potential(potential)
        kwargs = check_nuts_kwargs(kwargs)
        super().__init__(potential_fn=potential.potential_fn, **kwargs)
        settings = _settings(kwargs, trajectory_length=None, num_steps=None)
        self._setup(potential, "NUTS", settings, kwargs.get("kinetic_fn"))
        # (warmup, sampling) or one depth for both; NumPyro's default is 10
        self.tree_depth_limit = kwargs.get("max_tree_depth", 10)

    def get_diagnostics_str(self, state: HMCState) -> str:
        """NumPyro's progress-bar figures, and a note when the tree reached the depth limit
        (its trajectory cut off before it turned back: raise ``max_tree_depth``)."""
        text = super().get_diagnostics_str(state)
        depth = self.tree_depth_limit
        depth = depth[1] if isinstance(depth, tuple) else depth
        if int(state.num_steps) >= 2**depth - 1:
            text += f" (max_tree_depth={depth} reached)"
        return text

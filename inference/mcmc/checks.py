"""Checks of HMC/NUTS runs: every argument before anything compiles, every chain after the run.

Example:
    >>> from bnn_ppl.inference.mcmc.checks import check_hmc_kwargs
    >>> check_hmc_kwargs({"step_size": 0.1, "trajectory_length": 1.0})["max_num_steps"]
    1024
    >>> check_hmc_kwargs({"step_size": 0.0})
    Traceback (most recent call last):
    ...
    bnn_ppl.validation.InputValueError: step_size must be a finite number > 0, got 0.0. ...
"""

# Notes:
#
# Before: every argument of :func:`~bnn_ppl.inference.hmc`, :func:`~bnn_ppl.inference.nuts`,
# :class:`~bnn_ppl.inference.HMC` and :class:`~bnn_ppl.inference.NUTS` is checked here, and a bad
# one is an :class:`~bnn_ppl.validation.InputError` naming it. Besides types and ranges, the
# checks refuse settings that would hang or silently not do what was asked:
#
# * a ``target_accept_prob`` outside (0, 1): dual averaging then drives the step size to 0 (or
#   to float32's maximum) and ``ceil(trajectory_length / step_size)`` leapfrog steps never end;
# * a fixed (not adapted) ``step_size`` needing more than ``max_num_steps`` leapfrog steps per
#   iteration, or larger than ``trajectory_length`` (NumPyro would silently integrate with one
#   step of ``trajectory_length`` instead);
# * a ``max_tree_depth`` beyond :data:`MAX_TREE_DEPTH` (``2**depth`` gradients per iteration).
#
# After: :func:`check_finished` warns
# (:class:`~bnn_ppl.diagnostics.chain_health.StuckChainWarning`) about
# every chain that did not move, and (:class:`LeapfrogLimitWarning`) when HMC's trajectory was
# shortened to ``max_num_steps`` steps of its adapted step size (:func:`warn_if_shortened`);
# :class:`CheckedMCMC` reports both in ``print_summary``.

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
from numpyro.infer import MCMC
from numpyro.infer.hmc import HMCState

from bnn_ppl import diagnostics, validation
from bnn_ppl._compat import ReusingMCMC
from bnn_ppl.diagnostics.chain_health import check_chains, final_step_size, warn_if_stuck
from bnn_ppl.inference.progress_bar import check_progress_bar
from bnn_ppl.validation import InputTypeError, InputValueError

__all__ = [
    "CHAIN_METHODS",
    "INIT_METHODS",
    "MAX_TREE_DEPTH",
    "DEFAULT_MAX_NUM_STEPS",
    "MAX_NUM_STEPS_LIMIT",
    "check_hmc_kwargs",
    "check_nuts_kwargs",
    "check_run_args",
    "as_key",
    "leapfrog_steps",
    "LeapfrogLimitWarning",
    "CheckedMCMC",
    "check_finished",
    "warn_if_shortened",
    "TreeDepthWarning",
    "warn_if_saturated",
]

CHAIN_METHODS = ("vectorized", "sequential")
INIT_METHODS = ("prior", "network")
MAX_TREE_DEPTH = 15
"""The deepest NUTS tree allowed: up to ``2**15 - 1`` gradients per iteration."""
DEFAULT_MAX_NUM_STEPS = 1024
"""Default bound on HMC's leapfrog steps per iteration (NUTS' default depth 10 allows 1023)."""
MAX_NUM_STEPS_LIMIT = 2**20
_INT32_MAX = 2**31 - 1

_COMMON = {
    "step_size",
    "inverse_mass_matrix",
    "adapt_step_size",
    "adapt_mass_matrix",
    "dense_mass",
    "target_accept_prob",
    "kinetic_fn",
    "find_heuristic_step_size",
    "forward_mode_differentiation",
    "regularize_mass_matrix",
}
HMC_KWARGS = _COMMON | {
    "num_steps",
    "trajectory_length",
    "metric_trajectory_length",
    "max_num_steps",
}
NUTS_KWARGS = _COMMON | {"max_tree_depth"}


def leapfrog_steps(trajectory_length: float, step_size: float) -> float:
    """``ceil(trajectory_length / step_size)`` as NumPyro computes it (in float32)."""
    with np.errstate(over="ignore", under="ignore", divide="ignore"):
        return float(np.ceil(np.float32(trajectory_length) / np.float32(step_size)))


def _check_names(kind: str, kwargs: Mapping[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(kwargs) - allowed)
    if unknown:
        extra = ""
        if "init_strategy" in unknown:
            extra = " (init_strategy has no effect on a potential: pass init_params to run)"
        if "trajectory_length" in unknown and kind == "NUTS":
            extra = " (NUTS chooses its trajectory lengths itself; use HMC for a fixed one)"
        raise InputTypeError(
            f"{kind} got unexpected argument(s) {unknown}{extra}; it takes {sorted(allowed)}."
        )


def _check_common(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(kwargs)
    if "step_size" in out:
        out["step_size"] = validation.check_positive("step_size", out["step_size"])
    for name in (
        "adapt_step_size",
        "adapt_mass_matrix",
        "find_heuristic_step_size",
        "forward_mode_differentiation",
        "regularize_mass_matrix",
    ):
        if name in out:
            out[name] = validation.check_bool(name, out[name])
    if "dense_mass" in out and not isinstance(out["dense_mass"], bool | np.bool_):
        raise InputTypeError(
            f"dense_mass must be True or False on a potential, got {out['dense_mass']!r} "
            "(structured blocks of sites need a NumPyro model)."
        )
    if "target_accept_prob" in out:
        out["target_accept_prob"] = validation.check_number(
            "target_accept_prob",
            out["target_accept_prob"],
            low=0.0,
            high=1.0,
            low_inclusive=False,
            high_inclusive=False,
        )
    if out.get("kinetic_fn") is not None and not callable(out["kinetic_fn"]):
        raise InputTypeError(f"kinetic_fn must be callable or None, got {out['kinetic_fn']!r}.")
    m = out.get("inverse_mass_matrix")
    if m is not None:
        arr = validation.as_array("inverse_mass_matrix", m)
        if arr.ndim > 2 or (arr.ndim == 2 and arr.shape[0] != arr.shape[1]):
            raise InputValueError(
                f"inverse_mass_matrix must be a vector (diagonal) or a square matrix, got "
                f"shape {arr.shape}."
            )
        diag = arr if arr.ndim == 1 else np.diag(arr)
        if not np.all(diag > 0):
            raise InputValueError("inverse_mass_matrix must have a positive diagonal.")
    return out


def check_hmc_kwargs(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Check the keywords of :class:`~bnn_ppl.inference.HMC`; returns them with
    ``max_num_steps`` filled in (default :data:`DEFAULT_MAX_NUM_STEPS`)."""
    _check_names("HMC", kwargs, HMC_KWARGS)
    out = _check_common(kwargs)
    out["max_num_steps"] = validation.check_int(
        "max_num_steps",
        out.get("max_num_steps", DEFAULT_MAX_NUM_STEPS),
        minimum=1,
        maximum=MAX_NUM_STEPS_LIMIT,
    )
    cap = out["max_num_steps"]
    if out.get("num_steps") is not None:
        out["num_steps"] = validation.check_int("num_steps", out["num_steps"], maximum=cap)
    length = out.get("trajectory_length", 2 * math.pi)  # NumPyro's default
    if length is not None:
        length = out["trajectory_length"] = validation.check_positive("trajectory_length", length)
    lengths = {"trajectory_length": length}
    if out.get("metric_trajectory_length") is not None:
        if length is None or out.get("num_steps") is not None:
            raise InputValueError(
                "metric_trajectory_length needs a trajectory_length (used while the metric is "
                "the identity) and no num_steps."
            )
        lengths["metric_trajectory_length"] = out["metric_trajectory_length"] = (
            validation.check_positive("metric_trajectory_length", out["metric_trajectory_length"])
        )
    fixed_step = not out.get("adapt_step_size", True) and out.get("num_steps") is None
    if fixed_step and length is not None:
        step = out.get("step_size", 1.0)  # NumPyro's default
        for name, value in lengths.items():
            _check_fixed_step(step, name, value, cap)
    return out


def _check_fixed_step(step: float, name: str, length: float, cap: int) -> None:
    if step > length:
        raise InputValueError(
            f"step_size={step!r} exceeds {name}={length!r}: NumPyro would integrate with one "
            f"step of {length!r} instead. Pass step_size <= {name}, or adapt_step_size=True."
        )
    n = leapfrog_steps(length, step)
    if n > cap:
        raise InputValueError(
            f"step_size={step!r} needs ceil({name} / step_size) = {n:.3g} leapfrog steps per "
            f"iteration, more than max_num_steps={cap}: pass step_size >= {length / cap:.3g}, "
            f"a shorter {name}, or a larger max_num_steps (at most {MAX_NUM_STEPS_LIMIT})."
        )


def check_nuts_kwargs(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Check the keywords of :class:`~bnn_ppl.inference.NUTS`."""
    _check_names("NUTS", kwargs, NUTS_KWARGS)
    out = _check_common(kwargs)
    if "max_tree_depth" in out:
        d = out["max_tree_depth"]
        if isinstance(d, tuple):
            if len(d) != 2:
                raise InputValueError(
                    f"max_tree_depth must be an int or a (warmup, sampling) pair, got {d!r}."
                )
            out["max_tree_depth"] = tuple(
                validation.check_int(f"max_tree_depth[{i}]", v, maximum=MAX_TREE_DEPTH)
                for i, v in enumerate(d)
            )
        else:
            out["max_tree_depth"] = validation.check_int(
                "max_tree_depth", d, maximum=MAX_TREE_DEPTH
            )
    return out


def as_key(key: Any) -> jax.Array:
    """``jax.random.key(0)`` for ``None``; a single key (typed, or raw ``uint32[2]``) as is."""
    if key is None:
        return jax.random.key(0)
    if isinstance(key, jax.Array) and jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        if key.shape != ():
            raise InputValueError(f"rng_key must be one key, got a batch of shape {key.shape}.")
        return key
    if isinstance(key, jax.Array | np.ndarray) and key.dtype == np.uint32 and key.shape == (2,):
        return jax.random.wrap_key_data(key)
    raise InputTypeError(
        f"rng_key must be a key from jax.random.key(seed) or None, got {key!r} "
        f"({type(key).__name__})."
    )


def check_run_args(
    *,
    num_warmup: Any,
    num_samples: Any,
    num_chains: Any,
    chain_method: Any,
    thinning: Any,
    init_method: Any,
    progress_bar: Any,
    extra_fields: Any,
) -> dict[str, Any]:
    """Check the arguments of :func:`~bnn_ppl.inference.hmc` / ``nuts`` that drive
    ``numpyro.infer.MCMC``; returns them normalised (``extra_fields`` as a tuple)."""
    out: dict[str, Any] = {
        "num_warmup": validation.check_int("num_warmup", num_warmup, minimum=0),
        "num_samples": validation.check_int("num_samples", num_samples, minimum=1),
        "num_chains": validation.check_int("num_chains", num_chains, minimum=1),
    }
    if out["num_warmup"] + out["num_samples"] > _INT32_MAX:
        raise InputValueError(
            f"num_warmup + num_samples must be at most {_INT32_MAX} (NumPyro counts iterations "
            f"in int32), got {out['num_warmup'] + out['num_samples']}."
        )
    out["thinning"] = validation.check_int(
        "thinning", thinning, minimum=1, maximum=out["num_samples"]
    )
    out["chain_method"] = validation.check_choice("chain_method", chain_method, CHAIN_METHODS)
    out["init_method"] = validation.check_choice("init_method", init_method, INIT_METHODS)
    out["progress_bar"] = check_progress_bar(progress_bar)  # None: on at a terminal
    out["extra_fields"] = check_extra_fields(extra_fields)
    return out


def check_extra_fields(extra_fields: Any) -> tuple[str, ...]:
    """A tuple of ``HMCState`` field names (dotted names such as ``"adapt_state.step_size"``
    allowed)."""
    if isinstance(extra_fields, str) or not isinstance(extra_fields, tuple | list):
        raise InputTypeError(
            f"extra_fields must be a tuple of field names, got {extra_fields!r}; e.g. "
            "('accept_prob', 'diverging', 'num_steps')."
        )
    for f in extra_fields:
        if not isinstance(f, str) or f.split(".", 1)[0] not in HMCState._fields:
            raise InputValueError(
                f"extra_fields has {f!r}, which is not a field of NumPyro's HMCState "
                f"{list(HMCState._fields)}."
            )
    return tuple(extra_fields)


# ---------------------------------------------------------------- after the run
class LeapfrogLimitWarning(UserWarning):
    """HMC's adapted step size wanted more than ``max_num_steps`` leapfrog steps per iteration,
    so the trajectory was shortened to ``max_num_steps`` steps of it: the chain ran, with the
    step dual averaging chose but shorter trajectories than asked for (slower mixing)."""


class CheckedMCMC(ReusingMCMC):
    """``numpyro.infer.MCMC`` whose :meth:`print_summary` also says, per chain, whether the chain
    moved (:func:`bnn_ppl.diagnostics.sampler_summary`), and warns if one did not; a repeated
    ``run`` reuses the compiled loop (:class:`~bnn_ppl._compat.ReusingMCMC`)."""

    def print_summary(self, prob: float = 0.9, exclude_deterministic: bool = True) -> None:
        super().print_summary(prob, exclude_deterministic)
        for row in diagnostics.sampler_summary(self):
            status = "moving" if row["judged"] else "too few draws to judge whether it moved"
            status = status if row["moving"] else f"NOT MOVING: {row['warning']}"
            fields = [
                f"{k} {row[k]:.3g}" for k in ("accept_prob", "step_size", "num_steps") if k in row
            ]
            print(f"chain {row['chain']}: {status}; " + ", ".join(fields))


class TreeDepthWarning(UserWarning):
    """NUTS stopped most of a chain's trajectories at ``max_tree_depth`` before they turned
    back: the chain ran, but explores less per gradient than NUTS intends."""


SATURATED_SHARE = 0.5
"""The share of a chain's draws at the maximum tree depth above which
:func:`warn_if_saturated` warns ("most draws")."""


def warn_if_saturated(
    num_steps: Any,
    max_tree_depth: int | tuple[int, int] | None,
    step_size: Any = None,
    *,
    stacklevel: int = 2,
) -> None:
    """A :class:`TreeDepthWarning` when most draws of a chain (``num_steps``: leapfrog steps per
    draw, ``(chains, draws)``) took the ``2**max_tree_depth - 1`` steps of a full tree, naming
    the chains, ``max_tree_depth`` and the adapted ``step_size`` (per chain, optional).
    ``max_tree_depth=None`` (HMC) checks nothing."""
    if max_tree_depth is None or num_steps is None:
        return
    if isinstance(max_tree_depth, tuple):  # (warmup, sampling): the draws are sampling's
        max_tree_depth = max_tree_depth[1]
    steps = np.asarray(num_steps)
    steps = steps.reshape(1, -1) if steps.ndim < 2 else steps.reshape(steps.shape[0], -1)
    if not steps.size:
        return
    full = 2**max_tree_depth - 1
    share = np.mean(steps >= full, axis=1)
    hit = np.flatnonzero(share > SATURATED_SHARE)
    if not hit.size:
        return
    step = ""
    if step_size is not None:
        sizes = np.ravel(np.asarray(step_size, np.float64))
        step = f" at the adapted step size {float(sizes[min(hit[0], sizes.size - 1)]):.3g}"
    low = float(share[hit].min())
    which = (
        f"{low:.0%} of the draws of chain {hit[0]}"
        if hit.size == 1
        else f"{low:.0%} or more of the draws of chains {hit.tolist()}"
    )
    warnings.warn(
        f"NUTS reached max_tree_depth={max_tree_depth} ({full} leapfrog steps) on "
        f"{which}{step}: the trajectories "
        "were cut off before they turned back, so each draw costs the most gradients and "
        "moves less than NUTS intends. Raise max_tree_depth (each level doubles the most a draw "
        "may cost), or help warmup adapt a larger step size: a narrower prior, standardised "
        "inputs, or more warmup (step_size is only where its adaptation starts).",
        TreeDepthWarning,
        stacklevel=stacklevel + 1,
    )


def check_finished(
    mcmc: MCMC, max_num_steps: int | None, max_tree_depth: int | tuple[int, int] | None = None
) -> None:
    """Warn if a chain did not move (:func:`bnn_ppl.diagnostics.chain_health.check_chains`,
    computed on the device: only small masks are transferred), if HMC's trajectory was shortened to
    ``max_num_steps`` steps of its adapted step size, or if NUTS's trees were cut at
    ``max_tree_depth`` on most draws (:func:`warn_if_saturated`)."""
    state = mcmc.last_state
    health = check_chains(
        mcmc.get_samples(group_by_chain=True),
        mcmc.get_extra_fields(group_by_chain=True),
        final_step_size(state),
        warn=False,
    )
    warn_if_stuck(health, stacklevel=4)  # points at the caller of hmc() / nuts()
    warn_if_shortened(
        state.adapt_state.step_size, state.trajectory_length, max_num_steps, stacklevel=4
    )
    if max_tree_depth is not None:
        extra = mcmc.get_extra_fields(group_by_chain=True)
        warn_if_saturated(
            extra.get("num_steps"), max_tree_depth, state.adapt_state.step_size, stacklevel=4
        )


def warn_if_shortened(
    step_size: Any, trajectory_length: Any, max_num_steps: int | None, *, stacklevel: int = 2
) -> None:
    """A :class:`LeapfrogLimitWarning` naming every chain whose adapted ``step_size`` needed
    more than ``max_num_steps`` leapfrog steps per ``trajectory_length`` (one value or one per
    chain; ``None``: NUTS, nothing to check), so that its trajectory was shortened."""
    if max_num_steps is None or max_num_steps == 1 or trajectory_length is None:
        return  # (with one step allowed, floor and ceiling are the same: nothing to report)
    length = np.ravel(np.asarray(trajectory_length, np.float64))
    step = np.ravel(np.asarray(step_size, np.float64))
    floor = length / (max_num_steps - 0.5)
    held = np.flatnonzero(step <= floor * (1 + 1e-5))
    if held.size:
        warnings.warn(
            f"chain(s) {held.tolist()}: the adapted step size {float(step[held[0]]):.3g} needed "
            f"more than max_num_steps={max_num_steps} leapfrog steps per trajectory, so the "
            f"trajectories were shortened to {float(length[held[0]]):.3g} (max_num_steps steps) "
            "and the chain explores less per iteration. Raise max_num_steps, or shorten "
            "trajectory_length.",
            LeapfrogLimitWarning,
            stacklevel=stacklevel + 1,
        )

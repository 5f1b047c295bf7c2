"""Checkpointed, resumable HMC/NUTS: a chain that survives being killed and loses no sample.

:func:`run_chain` drives a NumPyro kernel (:class:`bnn_ppl.inference.HMC` / ``NUTS`` on a
:class:`~bnn_ppl.inference.FullBatchPotential`) itself, in *segments* of ``checkpoint_every``
iterations (warmup included; a segment may straddle the end of warmup): one jitted
``lax.scan`` of ``kernel.sample`` per segment, with the data as arguments of the compiled
program. After each segment it writes, in this order:

* ``samples_SSSSS.npz`` (segments with post-warmup iterations): the kept draws, constrained,
  one array per site, leading axes ``(num_chains, draws)``; ``extra_SSSSS.npz``: the extra
  fields (``accept_prob``, ...) of those draws;
* ``predictions_SSSSS.npz`` (with ``x_predict``): per-draw predictive probabilities (or Gaussian
  ``mean``/``scale``) on the test inputs;
* ``state_SSSSS.npz``: the full sampler state, every leaf of NumPyro's ``HMCState``
  (position, gradient, step size, mass matrix, dual-averaging and Welford adaptation state, the
  PRNG keys as raw key data, the iteration), plus the running BMA sums;
* ``state_SSSSS.json``: the commit record: schema version, iteration, the state leaves' names,
  dtypes and shapes, and the SHA-256 of the state file and of *every* segment file so far;
* ``LATEST``: which record is the newest (for people and tools; resuming does not trust it).

``config.json`` (written once) describes the run (:func:`run_config`): network, prior of
every site, likelihood, temperature, a fingerprint of the data, kernel settings, seed, ... A run
started in a folder written by a different configuration is refused with a ``ValueError``
naming every differing field with its old and new values.

Every file is written atomically (temporary file, fsync, rename; :mod:`bnn_ppl.io`). A checkpoint
counts only if its record parses and every file it names has the recorded checksum; a resumed
run starts from the newest such checkpoint (with a warning when newer ones are damaged) and
raises a ``ValueError`` listing the damage when none is usable. Nothing is ever unpickled:
``.npz`` files are read with ``allow_pickle=False`` (:func:`bnn_ppl.io.load_npz`).

Resuming is bit-exact: segment boundaries are fixed by ``checkpoint_every``, the state goes
through the same host round trip whether or not the run was interrupted, and NumPyro's
adaptation schedule (which lives in the kernel's closures, not in its state) is rebuilt by
calling ``kernel.init`` with the same arguments. A run killed at any point and started again
writes the same samples, byte for byte, as an uninterrupted run with the same seed; and the
draws are those of ``numpyro.infer.MCMC`` with the same kernel and key (thinning and
vectorised chains included).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import glob
import hashlib
import json
import math
import os
import re
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.infer.hmc import HMCState
from numpyro.infer.hmc_util import HMCAdaptState
from tqdm.auto import tqdm

import bnn_ppl
from bnn_ppl import validation
from bnn_ppl.inference.potential import FullBatchPotential
from bnn_ppl.inference.streaming import RunningBMA
from bnn_ppl.io import load_npz, read_json, save_npz, sha256_file, write_json
from bnn_ppl.likelihoods import (
    GaussianPrediction,
    Prediction,
    prediction_fields,
    prediction_from_fields,
)
from bnn_ppl.predictive import predict
from bnn_ppl.types import Params, PRNGKey
from bnn_ppl.validation import InputError, InputTypeError, InputValueError

__all__ = [
    "SCHEMA_VERSION",
    "ChainResult",
    "FolderInUseError",
    "SegmentInfo",
    "run_chain",
    "run_config",
    "load_samples",
    "load_extra_fields",
    "load_predictions",
    "load_bma",
    "iter_segments",
]

SCHEMA_VERSION = 1
"""Version of the checkpoint layout; a directory written by a newer layout is refused."""

FORMAT = "bnn_ppl.checkpoint"
DEFAULT_EXTRA_FIELDS = ("accept_prob", "diverging", "num_steps")
_KINDS = ("samples", "extra", "predictions")
_STATE_JSON = re.compile(r"^state_(\d{5,})\.json$")
_BMA_PREFIX = "bma."


class FolderInUseError(InputError, RuntimeError):
    """Another process holds the checkpoint folder's lock (a ``RuntimeError``, and an
    :class:`~bnn_ppl.validation.InputError`: the command line reports it without a traceback)."""


class SegmentInfo(NamedTuple):
    """What :func:`run_chain` passes to ``on_segment`` after each committed checkpoint."""

    segment: int
    """Index of the segment just written (0-based, warmup segments first)."""
    num_segments: int
    phase: str
    """``"warmup"`` or ``"sample"``."""
    iteration: int
    """Kernel iterations done so far, warmup included."""
    num_draws: int
    """Kept draws on disk so far, per chain."""
    path: str
    """The segment's commit record (``state_SSSSS.json``)."""


class ChainResult(NamedTuple):
    """What :func:`run_chain` returns.

    Attributes:
        samples: site -> constrained draws, ``(draws, ...)`` for one chain or
            ``(num_chains, draws, ...)`` for several; ``None`` with
            ``keep_samples_in_memory=False`` (then read them with :func:`load_samples` or
            :func:`iter_segments`).
        extra_fields: field -> values per kept draw, same leading axes as ``samples``.
        bma: the Bayesian model average on ``x_predict`` (probabilities ``(n, K)`` or a
            :class:`~bnn_ppl.likelihoods.GaussianPrediction`), or ``None``.
        state: the kernel's last ``HMCState`` (unconstrained position, adapted step size, ...).
        checkpoint_dir: where everything lies.
        resumed_from: the segment the run resumed after, or ``None`` for a fresh run.
    """

    samples: Params | None
    extra_fields: dict[str, np.ndarray]
    bma: np.ndarray | GaussianPrediction | None
    state: Any
    checkpoint_dir: str
    resumed_from: int | None


class _Checkpoint(NamedTuple):
    record: dict[str, Any]
    arrays: dict[str, np.ndarray] | None


# ------------------------------------------------------------------------------ describing
def _describe(obj: Any) -> Any:
    """A JSON value that identifies ``obj`` stably across processes (no memory addresses)."""
    if obj is None or isinstance(obj, bool | int | str):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else repr(obj)
    if isinstance(obj, np.integer | np.floating | np.bool_):
        return _describe(obj.item())
    if isinstance(obj, np.dtype):
        return str(obj)
    if isinstance(obj, jax.Array | np.ndarray):
        if isinstance(obj, jax.Array) and jax.dtypes.issubdtype(obj.dtype, jax.dtypes.prng_key):
            return {"key": _describe(np.asarray(jax.random.key_data(obj)))}
        a = np.asarray(obj)
        if a.size <= 16:
            return _describe(a.tolist())
        return {"shape": list(a.shape), "dtype": str(a.dtype), "sha256": _array_sha(a)}
    if isinstance(obj, Mapping):
        return {str(k): _describe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_describe(v) for v in obj]
    if isinstance(obj, dist.Distribution):
        params = {
            k: _describe(getattr(obj, k)) for k in sorted(obj.arg_constraints) if hasattr(obj, k)
        }
        return f"{type(obj).__name__}({', '.join(f'{k}={v}' for k, v in params.items())})"
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        fields = {f.name: _describe(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
        return f"{type(obj).__name__}({', '.join(f'{k}={v}' for k, v in fields.items())})"
    if callable(obj) and hasattr(obj, "__qualname__"):
        return f"{getattr(obj, '__module__', '')}.{obj.__qualname__}"
    return re.sub(r"\s+at 0x[0-9a-fA-F]+", "", " ".join(repr(obj).split()))


def _array_sha(a: np.ndarray) -> str:
    h = hashlib.sha256(f"{a.shape}{a.dtype}".encode())
    h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def _tree_sha(tree: Any) -> str:
    h = hashlib.sha256()
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        h.update(jax.tree_util.keystr(path).encode())
        h.update(_array_sha(np.asarray(leaf)).encode())
    return h.hexdigest()


def _network_description(module: Any) -> str:
    import flax.linen as nn

    if isinstance(module, nn.Module):
        return _describe(module)  # linen: a dataclass repr of the attributes
    return f"{type(module).__module__}.{type(module).__qualname__}"  # nnx: values, not config


def run_config(
    kernel: numpyro.infer.HMC,
    *,
    num_warmup: int,
    num_samples: int,
    checkpoint_every: int,
    rng_key: PRNGKey,
    init_params: Params | None = None,
    num_chains: int = 1,
    thinning: int = 1,
    extra_fields: Sequence[str] = DEFAULT_EXTRA_FIELDS,
    x_predict: Any = None,
    predict_chunk_size: int | None = None,
    save_predictions: bool = True,
) -> dict[str, Any]:
    """Describe a :func:`run_chain` run as a JSON-able dict, derived from the kernel itself.

    Sections: ``model`` (network, prior spec, prior and shape of every site, likelihood,
    temperature, temper), ``data`` (shapes, dtypes and the SHA-256 of the training rows),
    ``potential`` (chunking, devices, accumulation dtype), ``kernel`` (class and every
    hyper-parameter), ``run`` (warmup, samples, chains, thinning, checkpointing, the seed's key
    data and a hash of the initial values) and ``predict`` (the test inputs' fingerprint).
    Two runs with equal configs produce identical samples.

    Example:
        >>> import jax, numpy as np
        >>> import bnn_ppl as bp
        >>> from bnn_ppl.models import MLP
        >>> from bnn_ppl.inference import HMC, full_batch_potential, run_config
        >>> model = bp.BNN(MLP(hidden=(), out=1), bp.priors.Normal(1.0),
        ...                bp.likelihoods.Gaussian(scale=0.5))
        >>> pot = full_batch_potential(model, np.ones((4, 2), np.float32), np.zeros(4, np.float32))
        >>> cfg = run_config(HMC(pot, trajectory_length=1.0), num_warmup=10, num_samples=10,
        ...                  checkpoint_every=5, rng_key=jax.random.key(0))
        >>> cfg["model"]["sites"]["Dense_0.kernel"]
        {'shape': [2, 1], 'prior': 'Normal(scale=1.0, loc=0.0, fan_in=False)'}
        >>> cfg["kernel"]["trajectory_length"], cfg["data"]["x_shape"]
        (1.0, [4, 2])
    """
    pot = _potential_of(kernel)
    model = pot.model
    spec = pot._x_spec
    sites = model.sites(spec)
    priors = model.priors(spec)
    x = np.asarray(pot.data.x)[: pot.num_data]
    y = np.asarray(pot.data.y)[: pot.num_data]
    key = _as_key(rng_key)
    if init_params is None:
        init_params = _default_init(pot, key, num_chains)[0]
    kernel_fields = (
        "algo",
        "step_size",
        "trajectory_length",
        "num_steps",
        "max_tree_depth",
        "adapt_step_size",
        "adapt_mass_matrix",
        "dense_mass",
        "target_accept_prob",
        "inverse_mass_matrix",
        "find_heuristic_step_size",
        "forward_mode_differentiation",
        "regularize_mass_matrix",
        "kinetic_fn",
    )
    cfg: dict[str, Any] = {
        "model": {
            "network": _network_description(model.module),
            "prior": _describe(model.prior),
            "likelihood": _describe(model.likelihood),
            "temperature": model.temperature,
            "temper": model.temper,
            "sites": {
                name: {
                    "shape": list(d.event_shape),
                    "prior": _describe(priors.get(name, d)),
                }
                for name, d in sites.items()
            },
        },
        "data": {
            "num_data": pot.num_data,
            "x_shape": list(x.shape),
            "x_dtype": str(x.dtype),
            "y_shape": list(y.shape),
            "y_dtype": str(y.dtype),
            "sha256": _tree_sha({"x": x, "y": y}),
        },
        "potential": {
            "chunk_size": pot.chunk_size,
            "num_chunks": pot.num_chunks,
            "num_devices": pot.num_devices,
            "dtype": str(np.dtype(pot.dtype)),
        },
        "kernel": {"class": f"{type(kernel).__module__}.{type(kernel).__qualname__}"}
        | {f: _describe(getattr(kernel, "_" + f, None)) for f in kernel_fields},
        "run": {
            "num_warmup": num_warmup,
            "num_samples": num_samples,
            "num_chains": num_chains,
            "thinning": thinning,
            "checkpoint_every": checkpoint_every,
            "rng_key": {
                "impl": str(jax.random.key_impl(key)),
                "data": _describe(np.asarray(jax.random.key_data(key))),
            },
            "init_params_sha256": _tree_sha(init_params),
            "extra_fields": list(extra_fields),
        },
        "predict": None
        if x_predict is None
        else {
            "x_shape": list(np.shape(x_predict)),
            "sha256": _tree_sha(np.asarray(x_predict)),
            "chunk_size": predict_chunk_size,
            "save_predictions": bool(save_predictions),
        },
    }
    return json.loads(json.dumps(cfg))  # tuples -> lists: compares equal to the saved copy


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(d, dict) and d:
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: d}


def _config_diff(saved: Any, new: Any) -> list[str]:
    a, b = _flatten(saved), _flatten(new)
    missing = object()
    lines = []
    for k in sorted(set(a) | set(b)):
        old, now = a.get(k, missing), b.get(k, missing)
        if old != now:
            fmt = lambda v: "(absent)" if v is missing else json.dumps(v)  # noqa: E731
            lines.append(f"  {k}: {fmt(old)} (checkpoint) != {fmt(now)} (this run)")
    return lines


def _versions() -> dict[str, str]:
    return {
        "bnn_ppl": bnn_ppl.__version__,
        "jax": jax.__version__,
        "numpyro": numpyro.__version__,
        "numpy": np.__version__,
        "backend": jax.default_backend(),
    }


# ---------------------------------------------------------------------------------- checks
def _potential_of(kernel: Any) -> FullBatchPotential:
    pot = getattr(kernel, "potential", None)
    if not isinstance(kernel, numpyro.infer.HMC) or not isinstance(pot, FullBatchPotential):
        raise InputTypeError(
            "run_chain needs a bnn_ppl.inference.HMC or NUTS kernel built on a "
            f"FullBatchPotential (e.g. HMC(full_batch_potential(model, x, y), ...)), got "
            f"{type(kernel).__name__}."
        )
    from bnn_ppl.inference.numpyro_potential import ModelPotential

    if isinstance(pot, ModelPotential):
        # a model_potential of a plain NumPyro model: its configuration (network, priors) cannot
        # be recorded and checked on resume, so it is refused rather than resumed unchecked
        raise InputTypeError(
            "run_chain checkpoints potentials of a bp.BNN (full_batch_potential) only; this "
            "kernel's potential is a model_potential of a plain NumPyro model. Run it with "
            "numpyro.infer.MCMC directly."
        )
    return pot


def _as_key(key: Any) -> jax.Array:
    if isinstance(key, jax.Array) and jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        if key.shape != ():
            raise InputValueError(
                f"rng_key must be a single key, got a batch of shape {key.shape}."
            )
        return key
    raw = np.asarray(key)
    if raw.dtype == np.uint32 and raw.shape == (2,):
        return jax.random.wrap_key_data(jnp.asarray(raw))
    raise InputTypeError(f"rng_key must be a key from jax.random.key(seed), got {key!r}.")


MAX_ITERATIONS = 2**31 - 1
"""NumPyro's HMC state counts iterations in int32."""

_STATE_TYPES: dict[tuple[type, str], type] = {(HMCState, "adapt_state"): HMCAdaptState}


def _check_extra_fields(extra_fields: Any) -> tuple[str, ...]:
    """Check ``extra_fields`` against NumPyro's ``HMCState`` (dotted names into
    ``adapt_state``) without building a state."""
    if isinstance(extra_fields, str) or not isinstance(extra_fields, Sequence):
        raise InputTypeError(
            "extra_fields must be a sequence of HMCState field names such as "
            f"('accept_prob', 'adapt_state.step_size'), got {extra_fields!r}."
        )
    for f in extra_fields:
        if not isinstance(f, str):
            raise InputTypeError(f"extra_fields must hold field names (str), got {f!r}.")
        cls: type | None = HMCState
        for part in f.split("."):
            if cls is None or part not in cls._fields:
                raise InputValueError(
                    f"extra_fields: the sampler state has no field {f!r} (HMCState fields: "
                    f"{', '.join(HMCState._fields)}; adapt_state fields: "
                    f"{', '.join(HMCAdaptState._fields)})."
                )
            cls = _STATE_TYPES.get((cls, part))
    return tuple(extra_fields)


def _check_x_predict(pot: FullBatchPotential, x_predict: Any) -> np.ndarray:
    """``x_predict`` as an array whose rows have the training inputs' shape (and integer
    dtype where the training inputs are token ids)."""
    x = validation.as_array("x_predict", x_predict)
    row = tuple(pot._x_spec.shape[1:])
    if x.shape[1:] != row:
        raise InputValueError(
            f"x_predict has shape {x.shape}: each row must have the shape of a training input, "
            f"{row} (the potential's x has shape {(pot.num_data, *row)}). Pass the test inputs "
            "prepared like the training inputs."
        )
    if np.issubdtype(pot._x_spec.dtype, np.integer) and not np.issubdtype(x.dtype, np.integer):
        raise InputTypeError(
            f"x_predict has dtype {x.dtype}, but the training inputs are integer ids "
            f"({pot._x_spec.dtype}); pass integer ids."
        )
    return x


def _check_init_params(
    pot: FullBatchPotential, key: jax.Array, init_params: Any, num_chains: int
) -> Params:
    """``init_params`` as arrays with the sites, shapes and leading chain axis of
    ``pot.init_params`` (compared through ``jax.eval_shape``: nothing is computed)."""
    chains = num_chains if num_chains > 1 else None
    want = jax.eval_shape(lambda k: pot.init_params(k, chains), key)
    if not isinstance(init_params, Mapping) or set(init_params) != set(want):
        got = sorted(init_params) if isinstance(init_params, Mapping) else type(init_params)
        raise InputValueError(
            f"init_params must map every site to its unconstrained initial value: sites "
            f"{sorted(want)}, got {got}. Use pot.init_params(key, num_chains)."
        )
    for name, a in init_params.items():
        if not _is_concrete_array(a):
            raise InputTypeError(f"init_params[{name!r}] must be an array, got {a!r}.")
    host = {k: np.asarray(v) for k, v in init_params.items()}  # checking compiles nothing
    lead = {a.shape[:1] for a in host.values()}
    if num_chains > 1 and lead != {(num_chains,)}:
        raise InputValueError(
            f"init_params must have a leading axis of num_chains={num_chains}, got leading "
            f"shapes {sorted(lead)}; use pot.init_params(key, num_chains)."
        )
    for name, spec in want.items():
        a = host[name]
        if a.shape != spec.shape:
            raise InputValueError(
                f"init_params[{name!r}] has shape {a.shape}, expected {spec.shape}."
            )
        if not np.issubdtype(a.dtype, np.floating) or not np.all(np.isfinite(a)):
            raise InputValueError(
                f"init_params[{name!r}] must hold finite floating-point values, got dtype "
                f"{a.dtype}{' with NaN/inf' if np.issubdtype(a.dtype, np.floating) else ''}."
            )
    return dict(init_params)


def _is_concrete_array(a: Any) -> bool:
    return isinstance(a, np.ndarray | np.generic | float) or (
        isinstance(a, jax.Array) and not isinstance(a, jax.core.Tracer)
    )


def _get_field(state: Any, name: str) -> Any:
    for part in name.split("."):
        state = getattr(state, part)
    return state


def _default_init(pot: FullBatchPotential, key: jax.Array, num_chains: int) -> tuple[Any, Any]:
    """As :func:`bnn_ppl.inference.hmc`: split the key into (init, run) keys."""
    init_key, run_key = jax.random.split(key)
    return pot.init_params(init_key, num_chains if num_chains > 1 else None), run_key


# ------------------------------------------------------------------------------ the segments
def _plan(num_warmup: int, num_samples: int, every: int) -> list[tuple[str, int, int]]:
    """``(phase, first, stop)`` iteration ranges of ``every`` iterations (the last one may be
    shorter). A segment may straddle the end of warmup: NumPyro's kernel switches from adapting
    to sampling by itself, at iteration ``num_warmup``. ``phase`` is ``"sample"`` for a segment
    with any post-warmup iteration."""
    total = num_warmup + num_samples
    return [
        ("warmup" if min(a + every, total) <= num_warmup else "sample", a, min(a + every, total))
        for a in range(0, total, every)
    ]


def _kept(
    first: int, stop: int, num_warmup: int, num_samples: int, thinning: int
) -> tuple[int, int, np.ndarray]:
    """Draws kept among iterations ``[first, stop)``, as NumPyro's ``MCMC`` keeps them.

    NumPyro keeps post-warmup iteration ``j`` when ``j >= r`` and
    ``(j - r) % thinning == thinning - 1`` with ``r = num_samples % thinning`` (so the last
    iteration is always kept). Returns the first and stop draw index and, per iteration, its
    slot in the segment's buffer (``-1``: not kept).
    """
    r = num_samples % thinning
    j = np.arange(first, stop) - num_warmup
    keep = (j >= r) & ((j - r) % thinning == thinning - 1)
    d0 = max(0, (first - num_warmup - r) // thinning)
    slots = np.where(keep, (j - r) // thinning - d0, -1).astype(np.int32)
    return d0, d0 + int(keep.sum()), slots


def _make_segment(
    kernel: numpyro.infer.HMC,
    postprocess: Callable[[Params], Params],
    extra_fields: Sequence[str],
    length: int,
    buffer: int,
    batched: bool,
) -> Callable[..., Any]:
    """Jitted ``(state, model_args, slots) -> (state, draws, extra)`` running ``length`` steps.

    Iteration ``t`` stores its draw in row ``slots[t]`` of a ``buffer``-row collection; a
    slot of ``-1`` (warmup, thinned out) writes to a spare last row that is dropped. Warmup
    and sampling segments of the same length are one compiled program.
    """

    def run(state: Any, model_args: tuple, slots: jax.Array) -> Any:
        def collect(s: Any) -> Any:
            return (s.z, {f: _get_field(s, f) for f in extra_fields})

        buf = jax.tree.map(
            lambda a: jnp.zeros((buffer + 1, *jnp.shape(a)), a.dtype), collect(state)
        )

        def body(carry: Any, slot: jax.Array) -> tuple[Any, None]:
            s, b = carry
            s = kernel.sample(s, model_args, {})
            slot = jnp.where(slot < 0, buffer, slot)
            b = jax.tree.map(lambda acc, v: acc.at[slot].set(v), b, collect(s))
            return (s, b), None

        (state, buf), _ = jax.lax.scan(body, (state, buf), slots)
        z, extra = jax.tree.map(lambda a: a[:buffer], buf)
        post = jax.vmap(jax.vmap(postprocess)) if batched else jax.vmap(postprocess)
        if batched:  # (draws, chains, ...) -> (chains, draws, ...)
            z = jax.tree.map(lambda a: jnp.swapaxes(a, 0, 1), z)
            extra = jax.tree.map(lambda a: jnp.swapaxes(a, 0, 1), extra)
        return state, post(z), extra

    return jax.jit(run)


# ---------------------------------------------------------------------- state <-> host arrays
def _state_to_host(state: Any) -> tuple[list[dict[str, Any]], list[np.ndarray]]:
    meta, arrays = [], []
    for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]:
        impl = None
        if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            impl = str(jax.random.key_impl(leaf))
            leaf = jax.random.key_data(leaf)
        a = np.array(leaf)
        arrays.append(a)
        meta.append(
            {
                "name": jax.tree_util.keystr(path),
                "dtype": str(a.dtype),
                "shape": list(a.shape),
                "key_impl": impl,
            }
        )
    return meta, arrays


def _state_from_host(
    template: Any, want: list[dict[str, Any]], meta: list[dict[str, Any]], arrays: list[np.ndarray]
) -> Any:
    """Put saved leaves into ``template``'s tree; ``want`` is the template's own leaf list
    (:func:`_state_to_host`) and must equal the saved ``meta``."""
    if meta != want:
        diff = [
            f"{m.get('name')}: {m.get('dtype')}{m.get('shape')} (checkpoint) vs "
            f"{w.get('name')}: {w.get('dtype')}{w.get('shape')} (this kernel)"
            for m, w in zip(meta, want, strict=False)
            if m != w
        ]
        raise InputValueError(
            "the checkpointed sampler state does not fit this kernel (a different sampler, "
            f"model or NumPyro version?): {len(meta)} saved leaves vs {len(want)} expected; "
            + "; ".join(diff[:5])
        )
    leaves = [
        jax.random.wrap_key_data(jnp.asarray(a), impl=m["key_impl"])
        if m["key_impl"]
        else jnp.asarray(a)
        for m, a in zip(meta, arrays, strict=True)
    ]
    return jax.tree.unflatten(jax.tree.structure(template), leaves)


# ------------------------------------------------------------------------------ the directory
def _name(kind: str, segment: int) -> str:
    return f"{kind}_{segment:05d}"


def _read_record(folder: str, json_name: str) -> dict[str, Any]:
    path = os.path.join(folder, json_name)
    try:
        rec = read_json(path)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputValueError(f"{path} is unreadable (truncated or corrupted?): {e}") from e
    if not isinstance(rec, dict) or rec.get("format") != FORMAT:
        raise InputValueError(f"{path} is not a {FORMAT} record.")
    if rec.get("schema_version") != SCHEMA_VERSION:
        raise InputValueError(
            f"{path} has schema version {rec.get('schema_version')!r}; this bnn_ppl reads "
            f"version {SCHEMA_VERSION}. Use the bnn_ppl version that wrote it."
        )
    ok = (
        isinstance(rec.get("segment"), int)
        and isinstance(rec.get("state"), dict)
        and {"file", "sha256", "leaves"} <= set(rec["state"])
        and isinstance(rec["state"]["file"], str)
        and isinstance(rec["state"]["sha256"], str)
        and isinstance(rec["state"]["leaves"], list)
        and isinstance(rec.get("segments"), list)
        and all(isinstance(seg, dict) and "draws" in seg for seg in rec["segments"])
    )
    if not ok:
        raise InputValueError(f"{path} is an incomplete checkpoint record.")
    return rec


def _verify_file(folder: str, entry: Any) -> None:
    if not (
        isinstance(entry, Mapping)
        and isinstance(entry.get("file"), str)
        and isinstance(entry.get("sha256"), str)
    ):
        raise InputValueError(f"{folder}: a checkpoint record has a malformed entry {entry!r}.")
    path = os.path.join(folder, entry["file"])
    if not os.path.exists(path):
        raise InputValueError(f"{path} is missing.")
    if sha256_file(path) != entry["sha256"]:
        raise InputValueError(
            f"{path} does not match its recorded checksum (truncated or corrupted)."
        )


def _find_checkpoint(folder: str, *, verify: bool) -> _Checkpoint | None:
    """The newest checkpoint whose record parses (and, with ``verify``, whose files check out).

    Older checkpoints are tried in turn when newer ones are damaged (with a warning).
    ``None`` when the folder has no checkpoint at all; ``ValueError`` when none is usable.
    """
    names = sorted(
        (int(m.group(1)), m.group(0))
        for m in map(_STATE_JSON.match, os.listdir(folder) if os.path.isdir(folder) else [])
        if m
    )
    problems: list[str] = []
    for _, json_name in reversed(names):
        try:
            rec = _read_record(folder, json_name)
            arrays = None
            if verify:
                for seg in rec["segments"]:
                    for kind in _KINDS:
                        if seg.get(kind):
                            _verify_file(folder, seg[kind])
                arrays = _load_state(folder, rec)
        except (InputError, OSError) as e:  # damaged: try an older one (a bug propagates)
            problems.append(str(e))
            continue
        if problems:
            warnings.warn(
                f"checkpoint_dir {folder}: skipped damaged checkpoint(s) ({'; '.join(problems)}); "
                f"using the checkpoint after segment {rec['segment']}.",
                stacklevel=3,
            )
        return _Checkpoint(rec, arrays)
    if problems:
        raise InputValueError(
            f"checkpoint_dir {folder} holds no usable checkpoint: "
            + "; ".join(problems)
            + ". Restore the damaged files, or delete the folder to start the run over."
        )
    return None


def _load_state(folder: str, rec: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The state arrays of a record, checked against the record's leaf list."""
    path = os.path.join(folder, rec["state"]["file"])
    arrays = load_npz(path, sha256=rec["state"]["sha256"])
    try:
        leaves = [(m["name"], m["dtype"], list(m["shape"])) for m in rec["state"]["leaves"]]
    except (KeyError, TypeError) as e:
        raise InputValueError(f"the record of {path} has a malformed leaf list: {e}") from e
    for i, (name, dtype, shape) in enumerate(leaves):
        a = arrays.get(f"leaf_{i:05d}")
        if a is None or str(a.dtype) != dtype or list(a.shape) != shape:
            got = "missing" if a is None else f"{a.dtype}{list(a.shape)}"
            raise InputValueError(f"{path}: leaf {name} is {got}, its record says {dtype}{shape}.")
    return arrays


@contextlib.contextmanager
def _lock(folder: str) -> Iterator[None]:
    """Refuse two processes writing the same checkpoint folder (released even on SIGKILL)."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock
        yield
        return
    with open(os.path.join(folder, ".lock"), "a") as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise FolderInUseError(
                f"another process is running a chain in checkpoint_dir {folder}; wait for it "
                "to finish or stop it before resuming."
            ) from None
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _remove_temporaries(folder: str) -> None:
    """Delete the temporary files of atomic writes interrupted by a kill."""
    for prefix in ("state_", "samples_", "extra_", "predictions_", "LATEST", "config.json"):
        for path in glob.glob(os.path.join(glob.escape(folder), f".{prefix}*.tmp")):
            with contextlib.suppress(OSError):
                os.unlink(path)


def _check_config(folder: str, cfg: dict[str, Any]) -> None:
    path = os.path.join(folder, "config.json")
    if not os.path.exists(path):
        if any(_STATE_JSON.match(n) for n in os.listdir(folder)):
            raise InputValueError(
                f"checkpoint_dir {folder} holds checkpoints but no config.json; refusing to "
                "resume a run whose configuration is unknown. Use a new checkpoint_dir."
            )
        write_json(
            path,
            {
                "format": FORMAT,
                "schema_version": SCHEMA_VERSION,
                "config": cfg,
                "versions": _versions(),
            },
        )
        return
    try:
        saved = read_json(path)
        saved_cfg, versions = saved["config"], saved.get("versions", {})
        if saved.get("format") != FORMAT:
            raise KeyError("format")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as e:
        raise InputValueError(f"{path} is not a {FORMAT} config file (damaged?): {e}") from e
    if saved.get("schema_version") != SCHEMA_VERSION:
        raise InputValueError(
            f"{path} has schema version {saved.get('schema_version')!r}; this bnn_ppl reads "
            f"version {SCHEMA_VERSION}."
        )
    diff = _config_diff(saved_cfg, cfg)
    if diff:
        raise InputValueError(
            f"checkpoint_dir {folder} belongs to a run with a different configuration; "
            "refusing to resume. Differences:\n"
            + "\n".join(diff)
            + "\nUse a new checkpoint_dir, or restore the original settings."
        )
    now = _versions()
    changed = {k: (versions.get(k), v) for k, v in now.items() if versions.get(k) != v}
    if changed:
        warnings.warn(
            f"checkpoint_dir {folder} was written with {changed} (old, new); resuming, but the "
            "samples after the resume need not be bit-identical to an uninterrupted run.",
            stacklevel=3,
        )


# --------------------------------------------------------------------------------- the run
def run_chain(
    kernel: numpyro.infer.HMC,
    *,
    num_warmup: int,
    num_samples: int,
    checkpoint_dir: str | os.PathLike,
    checkpoint_every: int,
    rng_key: PRNGKey,
    init_params: Params | None = None,
    num_chains: int = 1,
    thinning: int = 1,
    extra_fields: Sequence[str] = DEFAULT_EXTRA_FIELDS,
    x_predict: Any = None,
    predict_chunk_size: int | None = None,
    save_predictions: bool = True,
    keep_samples_in_memory: bool = True,
    keep_checkpoints: int = 2,
    config: Mapping[str, Any] | None = None,
    progress_bar: bool = False,
    on_segment: Callable[[SegmentInfo], None] | None = None,
) -> ChainResult:
    """Run (or resume) an HMC/NUTS chain in checkpointed segments; see the module docstring.

    Starting it again with the same arguments after a crash, a kill or a preemption resumes
    from the newest complete checkpoint and gives exactly the samples an uninterrupted run
    gives; starting it on a finished folder just loads the result.

    Args:
        kernel: :class:`bnn_ppl.inference.HMC` or :class:`~bnn_ppl.inference.NUTS` on a
            :class:`~bnn_ppl.inference.FullBatchPotential` (the data are passed as arguments of
            each compiled segment). The kernel object itself is not modified.
        num_warmup, num_samples: iterations of adaptation and of sampling (per chain).
        checkpoint_dir: folder of the run (created if needed).
        checkpoint_every: iterations per segment; the segment boundaries are part of the
            configuration (a resumed run is bit-identical to an uninterrupted one with the same
            ``checkpoint_every``).
        rng_key: ``jax.random.key(seed)``.
        init_params: unconstrained initial values (leading axis ``num_chains`` if > 1); by
            default the prior is sampled with a key split from ``rng_key``, as
            :func:`bnn_ppl.inference.hmc` does, so both give the same chain.
        num_chains: chains, vectorised with ``vmap`` as NumPyro's ``chain_method="vectorized"``.
        thinning: keep every ``thinning``-th draw, exactly as NumPyro's ``MCMC`` (so
            ``num_samples // thinning`` draws per chain).
        extra_fields: ``HMCState`` fields saved per kept draw (dotted names such as
            ``"adapt_state.step_size"`` work).
        x_predict: test inputs; after each segment the kept draws' predictive distributions on
            them are computed (:func:`bnn_ppl.predict`) and folded into a running BMA
            (:class:`~bnn_ppl.inference.streaming.RunningBMA`, resumed exactly).
        predict_chunk_size: inputs per network call for those predictions.
        save_predictions: also write the per-draw predictions per segment
            (``predictions_SSSSS.npz``; :func:`load_predictions`); with ``False`` only the BMA
            is kept.
        keep_samples_in_memory: with ``False`` the result holds no samples (read them with
            :func:`load_samples` / :func:`iter_segments`): memory does not grow with
            ``num_samples``.
        keep_checkpoints: sampler states kept on disk (older ones are deleted; samples never
            are). At least 2, so that a damaged newest state falls back to the one before.
        config: extra JSON-able entries (e.g. a data set name) stored and compared under
            ``"user"`` next to the derived :func:`run_config`.
        progress_bar: a tqdm bar over segments.
        on_segment: called with a :class:`SegmentInfo` after each checkpoint is committed.

    Returns:
        A :class:`ChainResult`.

    Raises:
        TypeError: not a bnn_ppl HMC/NUTS kernel, or a bad ``rng_key``.
        ValueError: bad counts; the folder belongs to a different configuration (every
            differing field is named, with both values); it holds damaged checkpoints only.
        FolderInUseError: (a ``RuntimeError``) another process is running in the same folder.

    Example:
        >>> import tempfile
        >>> import jax, numpy as np
        >>> import bnn_ppl as bp
        >>> from bnn_ppl.models import MLP
        >>> from bnn_ppl.inference import HMC, full_batch_potential, load_samples, run_chain
        >>> rng = np.random.default_rng(0)
        >>> x = rng.normal(size=(20, 2)).astype(np.float32)
        >>> y = (x @ np.array([1.0, -0.5]) + 0.1 * rng.normal(size=20)).astype(np.float32)
        >>> model = bp.BNN(MLP(hidden=(), out=1), bp.priors.Normal(1.0),
        ...                bp.likelihoods.Gaussian(scale=0.5))
        >>> kernel = HMC(full_batch_potential(model, x, y), trajectory_length=1.0)
        >>> folder = tempfile.mkdtemp()
        >>> res = run_chain(kernel, num_warmup=20, num_samples=20, checkpoint_dir=folder,
        ...                 checkpoint_every=10, rng_key=jax.random.key(0), x_predict=x[:5])
        >>> res.samples["Dense_0.kernel"].shape, res.bma.mean.shape, res.resumed_from
        ((20, 2, 1), (5,), None)
        >>> again = run_chain(kernel, num_warmup=20, num_samples=20, checkpoint_dir=folder,
        ...                   checkpoint_every=10, rng_key=jax.random.key(0), x_predict=x[:5])
        >>> again.resumed_from, bool(np.array_equal(again.samples["Dense_0.kernel"],
        ...                                         load_samples(folder)["Dense_0.kernel"]))
        (3, True)
    """
    # Every argument is checked before anything is computed or written: a mistake found after
    # the warmup would cost the warmup, and (the arguments being the saved configuration) the
    # corrected call could not resume it.
    pot = _potential_of(kernel)
    count = validation.check_int
    num_warmup = count("num_warmup", num_warmup, minimum=0, maximum=MAX_ITERATIONS)
    num_samples = count("num_samples", num_samples, minimum=1, maximum=MAX_ITERATIONS)
    checkpoint_every = count("checkpoint_every", checkpoint_every, maximum=MAX_ITERATIONS)
    num_chains = count("num_chains", num_chains)
    thinning = count("thinning", thinning)
    keep_checkpoints = count("keep_checkpoints", keep_checkpoints, minimum=2)
    if num_warmup + num_samples > MAX_ITERATIONS:
        raise InputValueError(
            f"num_warmup + num_samples = {num_warmup + num_samples} is above {MAX_ITERATIONS}, "
            "the most iterations NumPyro's int32 counter holds."
        )
    if num_samples < thinning:
        raise InputValueError(
            f"num_samples ({num_samples}) must be >= thinning ({thinning}); no draw would be kept."
        )
    extra_fields = _check_extra_fields(extra_fields)
    if x_predict is not None:
        x_predict = _check_x_predict(pot, x_predict)
    if predict_chunk_size is not None:
        predict_chunk_size = count("predict_chunk_size", predict_chunk_size)
    save_predictions = validation.check_bool("save_predictions", save_predictions)
    keep_samples_in_memory = validation.check_bool("keep_samples_in_memory", keep_samples_in_memory)
    progress_bar = validation.check_bool("progress_bar", progress_bar)
    if config is not None and not isinstance(config, Mapping):
        raise InputTypeError(f"config must be a mapping (a dict) or None, got {config!r}.")
    if on_segment is not None and not callable(on_segment):
        raise InputTypeError(f"on_segment must be a function or None, got {on_segment!r}.")
    if not isinstance(checkpoint_dir, str | os.PathLike) or not os.fspath(checkpoint_dir):
        raise InputTypeError(f"checkpoint_dir must be a folder path, got {checkpoint_dir!r}.")
    folder = os.path.abspath(os.fspath(checkpoint_dir))
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise InputValueError(f"checkpoint_dir {folder} exists and is not a folder.")
    key = _as_key(rng_key)
    if init_params is not None:
        init_params = _check_init_params(pot, key, init_params, num_chains)

    if init_params is None:
        init_params, run_key = _default_init(pot, key, num_chains)
    else:
        run_key = key
    init_params = jax.tree.map(lambda a: jnp.asarray(a, jnp.result_type(a)), init_params)
    if num_chains > 1:
        run_key = jax.random.split(run_key, num_chains)

    cfg = run_config(
        kernel,
        num_warmup=num_warmup,
        num_samples=num_samples,
        checkpoint_every=checkpoint_every,
        rng_key=key,
        init_params=init_params,
        num_chains=num_chains,
        thinning=thinning,
        extra_fields=extra_fields,
        x_predict=x_predict,
        predict_chunk_size=predict_chunk_size,
        save_predictions=save_predictions,
    )
    if config is not None:
        cfg["user"] = json.loads(json.dumps(_describe(dict(config))))

    os.makedirs(folder, exist_ok=True)
    with _lock(folder):
        _remove_temporaries(folder)
        _check_config(folder, cfg)
        found = _find_checkpoint(folder, verify=True)

        # A private copy of the kernel: NumPyro's init rebuilds the adaptation schedule in
        # fresh closures (and vmaps the sampler for several chains) without touching `kernel`.
        kern = copy.copy(kernel)
        model_args = pot.args
        template = _state_template(kern, run_key, num_warmup, init_params, pot)
        writer = _Writer(
            folder,
            pot,
            num_chains,
            x_predict,
            predict_chunk_size,
            save_predictions,
            keep_checkpoints,
            RunningBMA() if x_predict is not None else None,
        )
        plan = _plan(num_warmup, num_samples, checkpoint_every)
        want, arrays = _state_to_host(template)
        meta, start, segments, resumed_from = want, 0, [], None
        if found is not None:
            rec, saved = found.record, found.arrays
            assert saved is not None
            start, segments, resumed_from = rec["segment"] + 1, rec["segments"], rec["segment"]
            meta = rec["state"]["leaves"]
            arrays = [saved[f"leaf_{i:05d}"] for i in range(len(meta))]
            if writer.bma is not None:
                writer.bma = RunningBMA.from_arrays(_bma_arrays(saved))
        # Both a fresh and a resumed run feed the sampler leaves that went through the host.
        state = _state_from_host(template, want, meta, arrays)

        postprocess = kern.postprocess_fn(model_args, {})
        compiled: dict[int, Callable[..., Any]] = {}
        num_draws = segments[-1]["draws"][1] if segments else 0
        with tqdm(total=len(plan), initial=start, disable=not progress_bar, desc="segments") as bar:
            for s in range(start, len(plan)):
                phase, first, stop = plan[s]
                d0, d1, slots = _kept(first, stop, num_warmup, num_samples, thinning)
                length = stop - first
                if length not in compiled:  # at most two programs: full and last segment
                    compiled[length] = _make_segment(
                        kern,
                        postprocess,
                        extra_fields,
                        length,
                        -(-length // thinning),
                        num_chains > 1,
                    )
                state, draws, extra = compiled[length](state, model_args, jnp.asarray(slots))
                meta, arrays = _state_to_host(state)
                state = _state_from_host(template, want, meta, arrays)
                if phase == "sample":
                    segments.append(writer.draws(s, d0, d1, draws, extra))
                    num_draws = d1
                path = writer.commit(s, plan, num_draws, meta, arrays, segments)
                bar.update(1)
                if on_segment is not None:
                    on_segment(SegmentInfo(s, len(plan), phase, stop, num_draws, path))

    return ChainResult(
        samples=load_samples(folder) if keep_samples_in_memory else None,
        extra_fields=load_extra_fields(folder),
        bma=None if writer.bma is None else writer.bma.result(),
        state=state,
        checkpoint_dir=folder,
        resumed_from=resumed_from,
    )


def _state_template(
    kern: numpyro.infer.HMC, run_key: Any, num_warmup: int, init_params: Any, pot: Any
) -> Any:
    """``kern.init`` with the run's arguments: the initial state, and fresh kernel closures.

    NumPyro rebuilds the adaptation schedule in closures on ``init`` (and vmaps the sampler
    when the key is batched): reset them so that calling this twice does not vmap twice. The
    init is jitted with the data as arguments (eagerly, NumPyro's init compiles dozens of
    small programs); a heuristic step-size search would keep the traced data in a closure,
    so that case stays eager.
    """
    kern._init_fn = None
    kern._sample_fn = None
    if getattr(kern, "_find_heuristic_step_size", False):
        return kern.init(run_key, num_warmup, init_params, model_args=pot.args, model_kwargs={})

    def init(key: Any, z: Any, args: tuple) -> Any:
        return kern.init(key, num_warmup, z, model_args=args, model_kwargs={})

    return jax.jit(init)(run_key, init_params, pot.args)


def _bma_arrays(saved: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k[len(_BMA_PREFIX) :]: v for k, v in saved.items() if k.startswith(_BMA_PREFIX)}


@dataclasses.dataclass
class _Writer:
    """Writes a run's segments to its folder (and folds predictions into the running BMA)."""

    folder: str
    pot: FullBatchPotential
    num_chains: int
    x_predict: np.ndarray | None
    predict_chunk_size: int | None
    save_predictions: bool
    keep_checkpoints: int
    bma: RunningBMA | None

    def _save(self, kind: str, segment: int, arrays: Mapping[str, Any]) -> dict[str, str]:
        name = _name(kind, segment) + ".npz"
        return {"file": name, "sha256": save_npz(os.path.join(self.folder, name), arrays)}

    def draws(
        self, segment: int, d0: int, d1: int, draws: Params, extra: dict[str, Any]
    ) -> dict[str, Any]:
        """Write one sampling segment's draws (and predictions); return its manifest entry."""
        m, c = d1 - d0, self.num_chains

        def chains_first(a: Any) -> np.ndarray:
            a = np.asarray(a)
            return a[:, :m] if c > 1 else a[None, :m]

        samples = {k: chains_first(v) for k, v in draws.items()}
        entry: dict[str, Any] = {
            "segment": segment,
            "draws": [d0, d1],
            "samples": self._save("samples", segment, samples),
            "extra": self._save("extra", segment, {k: chains_first(v) for k, v in extra.items()}),
            "predictions": None,
        }
        if self.bma is not None and m > 0:
            flat = {k: v.reshape(c * m, *v.shape[2:]) for k, v in samples.items()}
            pred = predict(self.pot.model, flat, self.x_predict, chunk_size=self.predict_chunk_size)
            self.bma.update(pred)
            if self.save_predictions:
                fields = prediction_fields(pred)
                entry["predictions"] = self._save(
                    "predictions",
                    segment,
                    {k: np.asarray(v).reshape(c, m, *np.shape(v)[1:]) for k, v in fields.items()},
                )
        return entry

    def commit(
        self,
        s: int,
        plan: list[tuple[str, int, int]],
        num_draws: int,
        meta: list[dict[str, Any]],
        arrays: list[np.ndarray],
        segments: list[dict[str, Any]],
    ) -> str:
        """Write segment ``s``'s state, then its record (the commit), then ``LATEST``; prune
        old states. Returns the record's path."""
        state = {f"leaf_{i:05d}": a for i, a in enumerate(arrays)}
        if self.bma is not None:
            state |= {_BMA_PREFIX + k: v for k, v in self.bma.state_arrays().items()}
        record = {
            "format": FORMAT,
            "schema_version": SCHEMA_VERSION,
            "segment": s,
            "num_segments": len(plan),
            "phase": plan[s][0],
            "iteration": plan[s][2],
            "num_draws": num_draws,
            "state": self._save("state", s, state) | {"leaves": meta},
            "segments": segments,
        }
        json_name = _name("state", s) + ".json"
        write_json(os.path.join(self.folder, json_name), record, indent=1)
        write_json(os.path.join(self.folder, "LATEST"), {"segment": s, "record": json_name})
        for old in range(s - self.keep_checkpoints, -1, -1):
            paths = [os.path.join(self.folder, _name("state", old) + e) for e in (".json", ".npz")]
            if not any(os.path.exists(p) for p in paths):
                break
            for p in paths:  # the record first: a state file without one is ignored
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(p)
        return os.path.join(self.folder, json_name)


# ----------------------------------------------------------------------------------- loading
def iter_segments(
    checkpoint_dir: str | os.PathLike, kind: str = "samples"
) -> Iterator[dict[str, np.ndarray]]:
    """Yield the arrays of each sampling segment of the newest checkpoint, one at a time.

    ``kind`` is ``"samples"`` (site -> ``(num_chains, draws, ...)``), ``"extra"`` or
    ``"predictions"`` (``probs``, or ``mean``/``scale``). Every file is checked against its
    recorded SHA-256 as it is read; only one segment is in memory at a time.

    Raises:
        FileNotFoundError: the folder has no checkpoint.
        ValueError: a file is damaged (the message names it).
    """
    validation.check_choice("kind", kind, _KINDS)
    folder = os.fspath(checkpoint_dir)
    found = _find_checkpoint(folder, verify=False)
    if found is None:
        raise FileNotFoundError(f"{folder} holds no checkpoint of a bnn_ppl run_chain run.")
    for seg in found.record["segments"]:
        if seg.get(kind):
            yield load_npz(os.path.join(folder, seg[kind]["file"]), sha256=seg[kind]["sha256"])


def _num_chains(folder: str) -> int:
    try:
        return int(read_json(os.path.join(folder, "config.json"))["config"]["run"]["num_chains"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise InputValueError(f"{folder}/config.json is missing or damaged: {e}") from e


def _load(checkpoint_dir: str | os.PathLike, kind: str) -> dict[str, np.ndarray]:
    folder = os.fspath(checkpoint_dir)
    parts: dict[str, list[np.ndarray]] = {}
    for arrays in iter_segments(folder, kind):
        for k, v in arrays.items():
            parts.setdefault(k, []).append(v)
    out = {k: np.concatenate(v, axis=1) for k, v in parts.items()}
    return out if _num_chains(folder) > 1 else {k: v[0] for k, v in out.items()}


def load_samples(checkpoint_dir: str | os.PathLike) -> dict[str, np.ndarray]:
    """All kept draws on disk: site -> ``(draws, ...)``, or ``(num_chains, draws, ...)``."""
    return _load(checkpoint_dir, "samples")


def load_extra_fields(checkpoint_dir: str | os.PathLike) -> dict[str, np.ndarray]:
    """The extra fields per kept draw, with the leading axes of :func:`load_samples`."""
    return _load(checkpoint_dir, "extra")


def load_predictions(checkpoint_dir: str | os.PathLike) -> Prediction:
    """Per-draw predictions on ``x_predict``: ``(draws, n, K)`` probabilities or a Gaussian
    (leading ``num_chains`` axis for several chains)."""
    arrays = _load(checkpoint_dir, "predictions")
    if not arrays:
        raise InputValueError(
            f"{checkpoint_dir} holds no saved predictions (x_predict not given?)."
        )
    return prediction_from_fields(arrays)


def load_bma(checkpoint_dir: str | os.PathLike) -> Prediction | None:
    """The running BMA of the newest complete checkpoint (``None`` without ``x_predict``)."""
    folder = os.fspath(checkpoint_dir)
    found = _find_checkpoint(folder, verify=False)
    if found is None:
        raise FileNotFoundError(f"{folder} holds no checkpoint of a bnn_ppl run_chain run.")
    st = found.record["state"]
    saved = load_npz(os.path.join(folder, st["file"]), sha256=st["sha256"])
    bma = _bma_arrays(saved)
    return RunningBMA.from_arrays(bma).result() if bma else None

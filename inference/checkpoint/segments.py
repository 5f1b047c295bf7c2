"""Checkpointed MCMC for any NumPyro ``MCMCKernel``, on NumPyro's public API only."""

# Notes:
#
# :func:`run_segments` runs an :class:`MCMCPlan` as segments and commits each one to a
# :class:`~bnn_ppl.inference.checkpoint.store.CheckpointStore`:
#
# 1. **Warmup** is one segment: ``MCMC.warmup(rng_key, *args, init_params=...)``; its final state
#    is committed as segment 0, with its statistics (wall time, the extra fields of every warmup
#    iteration, collected with ``collect_warmup=True`` and every sample site excluded by
#    ``"~z.<site>"``, and the adapted step size). (NumPyro's public API has no way to pause
#    warmup adaptation, so a kill *during* warmup redoes warmup on the rerun.)
# 2. **Sampling** runs in segments of ``checkpoint_every`` draws per chain (``checkpoint_every *
#    thinning`` iterations; the first segment also takes the ``num_samples % thinning``
#    iterations NumPyro's thinning skips at the start; a resume may use another
#    ``checkpoint_every``: segmenting does not change the draws):
#    ``mcmc.post_warmup_state = state`` and
#    ``mcmc.run(state.rng_key, *args)``, exactly the continuation NumPyro documents for
#    ``post_warmup_state``. After each segment its draws, extra fields and final state are
#    committed.
# 3. **Extension** (a plan with ``extend``): the ``num_samples`` iterations are a *window*;
#    when one ends, ``plan.extend(kernel, state, windows)`` may return the state another window
#    starts from, and the windows before the last become burn-in (their segments stay
#    committed; :class:`Draws` holds the last window's). The decision is a function of the
#    committed state, so a resume after any segment, also the last of a window, takes it again.
#
# The state is any pytree of arrays (``HMCState``, ``SGMCMCState``, ...): it is flattened with
# ``jax.tree_util`` and its leaves stored in an ``.npz`` (typed random keys as their key data); no
# pickle. Every segment continues from the state *read back from disk*, so an uninterrupted run
# and one killed and resumed after any segment run the same program on the same bits: their draws
# are identical bit for bit (tested for HMC, NUTS, SGLD, SGHMC, SGNHT and ATMC). On a resume the
# state's tree structure comes from ``kernel.init`` (the public ``MCMCKernel`` method, which also
# sets the kernel up for ``num_warmup`` as the first run did) at the plan's initial parameters.
#
# Chains are vectorized (``chain_method="vectorized"``). Each segment is a new ``MCMC.run`` of a
# :class:`~bnn_ppl._compat.ReusingMCMC`, so segments of one length run one compiled
# loop (stock NumPyro 0.22 compiles it again on every run: see the README for the cost).

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import numpy as np
from numpyro.infer import MCMC
from numpyro.infer.mcmc import MCMCKernel

from bnn_ppl import validation
from bnn_ppl._compat import ReusingMCMC
from bnn_ppl.inference.checkpoint.store import CheckpointError, CheckpointStore
from bnn_ppl.inference.results import flat_fields

__all__ = [
    "MCMCPlan",
    "Draws",
    "joined_arrays",
    "run_segments",
    "segment_arrays",
    "state_arrays",
    "state_from_arrays",
]

OnSegment = Callable[[int, dict[str, np.ndarray], bool], None]
"""``on_segment(segment, arrays, replayed)``: see :func:`run_segments`."""

Extend = Callable[[MCMCKernel, Any, int], Any]
"""``extend(kernel, state, windows) -> state | None``: see :class:`MCMCPlan`."""


class MCMCPlan(NamedTuple):
    """What to run: ``kernel()`` builds the kernel (called once per process); then
    ``numpyro.infer.MCMC``'s arguments (``num_samples`` iterations after warmup, every
    ``thinning``-th kept) and the ``extra_fields`` to collect.

    ``extend`` (optional) continues a burn-in in sampling mode: when a window of
    ``num_samples`` iterations ends at ``state`` (``windows`` of them so far),
    ``extend(kernel, state, windows)`` returns the state another window starts from (as
    ``post_warmup_state``; that window's draws replace the last one's, which become burn-in),
    or ``None`` to finish. It must be a function of the state (and ``windows``) alone: a
    resume calls it again on the committed state.

    Example:
        >>> import jax, jax.numpy as jnp, tempfile
        >>> from numpyro.infer import HMC
        >>> from bnn_ppl.inference.checkpoint.store import CheckpointStore
        >>> plan = MCMCPlan(lambda: HMC(potential_fn=lambda z: 0.5 * jnp.sum(z ** 2)),
        ...                 num_warmup=20, num_samples=30)
        >>> with CheckpointStore(tempfile.mkdtemp(), {"digest": "demo"}) as store:
        ...     draws = run_segments(plan, jax.random.key(0), (), jnp.zeros(2), store, 10)
        >>> draws.samples["z"].shape, draws.segments
        ((1, 30, 2), 3)
    """

    kernel: Callable[[], MCMCKernel]
    num_warmup: int
    num_samples: int
    num_chains: int = 1
    thinning: int = 1
    extra_fields: tuple[str, ...] = ()
    extend: Extend | None = None


class Draws(NamedTuple):
    """A finished run: ``samples`` and flattened ``extra`` fields with ``(chain, draw)`` axes
    (as ``MCMC.get_samples(group_by_chain=True)``) of its last window, the number of sampling
    ``segments`` (all windows), ``resumed_from``, the segment a resume started after (``None``:
    a fresh run), and ``windows``, the windows of ``num_samples`` iterations run (all but the
    last became burn-in; 1 without ``extend``)."""

    samples: dict[str, np.ndarray]
    extra: dict[str, np.ndarray]
    segments: int
    resumed_from: int | None
    windows: int = 1


# ------------------------------------------------------------------------ state <-> arrays
def _is_key(leaf: Any) -> bool:
    return jax.dtypes.issubdtype(getattr(leaf, "dtype", np.float32), jax.dtypes.prng_key)


def state_arrays(state: Any) -> dict[str, np.ndarray]:
    """The leaves of a kernel state as named arrays (``key_i`` for typed random keys)."""
    out = {}
    for i, leaf in enumerate(jax.tree_util.tree_leaves(state)):
        if _is_key(leaf):
            out[f"key_{i}"] = np.asarray(jax.random.key_data(leaf))
        else:
            out[f"leaf_{i}"] = np.asarray(leaf)
    return out


def state_from_arrays(arrays: dict[str, np.ndarray], template: Any, where: str) -> Any:
    """Rebuild a state of ``template``'s structure from :func:`state_arrays`'s output; a
    leaf of another name, shape or dtype is a :class:`CheckpointError`."""
    leaves, treedef = jax.tree_util.tree_flatten(template)
    if len(arrays) != len(leaves):
        raise CheckpointError(
            f"{where} holds {len(arrays)} state arrays, the kernel's state has {len(leaves)}: "
            "the checkpoint was written by another version of the kernel (e.g. an SG-MCMC run "
            "from before its state kept the statistics of every step) and cannot be resumed. "
            "Finish it with the version that wrote it, or start again in a new folder."
        )
    out = []
    for i, t in enumerate(leaves):
        name = f"key_{i}" if _is_key(t) else f"leaf_{i}"
        want = jax.random.key_data(t) if _is_key(t) else t
        a = arrays.get(name)
        if a is None or a.shape != np.shape(want) or a.dtype != np.dtype(want.dtype):
            raise CheckpointError(
                f"{where}: state array {name} does not match the kernel's state "
                f"(expected {np.dtype(want.dtype)}{tuple(np.shape(want))})."
            )
        out.append(jax.random.wrap_key_data(a, impl=jax.random.key_impl(t)) if _is_key(t) else a)
    return jax.tree_util.tree_unflatten(treedef, [jax.numpy.asarray(a) for a in out])


# ------------------------------------------------------------------------------ running
def _flat(extra: dict[str, Any]) -> dict[str, Any]:
    return flat_fields(extra)


def segment_arrays(mcmc: MCMC) -> dict[str, np.ndarray]:
    """The last run's draws and extra fields as named ``(chain, draw, ...)`` arrays:
    ``"sample/<site>"`` and ``"extra/<field>"`` (flattened, as :func:`joined_arrays` reads)."""
    samples = mcmc.get_samples(group_by_chain=True)
    if not isinstance(samples, dict):  # a kernel on a bare array: name it by the sample field
        samples = {mcmc.sampler.sample_field: samples}
    extra = _flat(mcmc.get_extra_fields(group_by_chain=True))
    return {f"sample/{k}": np.asarray(v) for k, v in samples.items()} | {
        f"extra/{k}": np.asarray(v) for k, v in extra.items()
    }


def joined_arrays(parts: list[dict[str, np.ndarray]]) -> tuple[dict, dict]:
    """``(samples, extra)`` of segments' :func:`segment_arrays`, joined along the draws."""
    keys = [k for k in parts[0] if k.startswith(("sample/", "extra/"))]  # not "time/seconds"
    joined = {k: np.concatenate([p[k] for p in parts], axis=1) for k in keys}
    samples = {k[7:]: v for k, v in joined.items() if k.startswith("sample/")}
    extra = {k[6:]: v for k, v in joined.items() if k.startswith("extra/")}
    return samples, extra


def _warmup(
    plan: MCMCPlan, mcmc: MCMC, rng_key: Any, args: tuple, init_params: Any
) -> dict[str, np.ndarray]:
    """Run warmup; return its statistics: ``"time/seconds"``, ``"time/iterations"``, the
    plan's extra fields of every warmup iteration (``"extra/<field>"``, ``(chain, iteration)``;
    collected when the parameters are a dict of sites, which are left out of the collection)
    and the adapted ``"state/step_size"`` (per chain) when the state has one."""
    # (NumPyro cannot collect zero iterations)
    collect = isinstance(init_params, dict) and bool(plan.extra_fields) and plan.num_warmup > 0
    fields = plan.extra_fields
    if collect:  # the fields only: "~z.<site>" leaves every sample site out
        fields = (*fields, *[f"~{mcmc.sampler.sample_field}.{k}" for k in init_params])
    thinning, mcmc.thinning = mcmc.thinning, 1  # (thinning would thin the collection)
    start = time.perf_counter()
    try:
        mcmc.warmup(
            rng_key, *args, init_params=init_params, extra_fields=fields, collect_warmup=collect
        )
        jax.block_until_ready(mcmc.post_warmup_state)
    finally:
        mcmc.thinning = thinning
    stats = {
        "time/seconds": np.asarray(time.perf_counter() - start),
        "time/iterations": np.asarray(plan.num_warmup),
    }
    if collect:
        extra = _flat(mcmc.get_extra_fields(group_by_chain=True))
        stats |= {f"extra/{k}": np.asarray(v) for k, v in extra.items()}
    step_size = getattr(getattr(mcmc.post_warmup_state, "adapt_state", None), "step_size", None)
    if step_size is not None:
        stats["state/step_size"] = np.asarray(step_size).reshape(-1)
    return stats


def _sample(
    plan: MCMCPlan,
    mcmc: MCMC,
    rng_key: Any,
    args: tuple,
    init_params: Any,
    store: CheckpointStore,
    record: Any,
    checkpoint_every: int,
    on_segment: OnSegment,
    on_extend: Callable[[int], None],
) -> tuple[Any, int]:
    """Warm up (unless ``record`` exists), then run and commit segments to the last draw (of
    the last window: ``plan.extend`` decides at each window's end); return the last record
    and the number of windows."""
    total, skipped = divmod(plan.num_samples, plan.thinning)
    if record is None:
        stats = _warmup(plan, mcmc, rng_key, args, init_params)
        record = store.commit(0, state_arrays(mcmc.post_warmup_state), stats, [])
        on_segment(0, stats, False)
        template = mcmc.post_warmup_state
    else:  # the state's structure, and the kernel set up for num_warmup, by the public init
        keys = jax.random.split(rng_key, plan.num_chains) if plan.num_chains > 1 else rng_key
        template = mcmc.sampler.init(keys, plan.num_warmup, init_params, args, {})
    where = f"{store.path}/{record.state_file}"
    state = state_from_arrays(store.load_state(record), template, where)
    windows = max(1, -(-record.draws_done // total)) if total else 1
    while True:
        done = record.draws_done - (windows - 1) * total  # draws of the current window
        if record.segment > 0 and done >= total:  # the window ended at `state`
            following = None if plan.extend is None else plan.extend(mcmc.sampler, state, windows)
            if following is None:
                break
            on_extend(record.segment)  # (its draws became burn-in)
            state, windows, done = following, windows + 1, 0
        n = min(checkpoint_every, total - done)
        # the iterations NumPyro's thinning skips come first, as in one MCMC.run
        mcmc.num_samples = n * plan.thinning + (skipped if done == 0 else 0)
        mcmc.post_warmup_state = state
        start = time.perf_counter()
        mcmc.run(state.rng_key, *args, extra_fields=plan.extra_fields)
        draws = segment_arrays(mcmc)
        draws["time/seconds"] = np.asarray(time.perf_counter() - start)
        done = [*record.draws_per_segment, n]
        record = store.commit(record.segment + 1, state_arrays(mcmc.last_state), draws, done)
        on_segment(record.segment, draws, False)
        where = f"{store.path}/{record.state_file}"
        state = state_from_arrays(store.load_state(record), template, where)
    return record, windows


def run_segments(
    plan: MCMCPlan,
    rng_key: Any,
    args: tuple,
    init_params: Any,
    store: CheckpointStore,
    checkpoint_every: int,
    on_segment: OnSegment | None = None,
    *,
    progress_bar: bool = False,
    on_extend: Callable[[int], None] | None = None,
) -> Draws:
    """Run ``plan`` from ``init_params`` with ``rng_key`` (as ``MCMC.run(rng_key, *args,
    init_params=init_params)`` would), committing warmup and every ``checkpoint_every`` draws
    per chain to ``store`` (opened: ``with store:``), or resume from its newest intact commit.

    ``on_segment(segment, arrays, replayed)`` is called once per sampling segment, in order,
    with the segment's committed arrays (``"sample/<site>"``, ``"extra/<field>"``, ``(chain,
    draw, ...)``, and ``"time/seconds"``, its wall time): ``replayed=True`` for the segments a
    resume (or the read-back of a finished run) found committed, ``False`` for each new one
    after its commit. Warmup comes first, as segment 0, with its statistics (``"time/seconds"``,
    ``"time/iterations"``, ``"extra/<field>"`` per warmup iteration, ``"state/step_size"``; see
    ``_warmup``), unless the folder was written without them.

    ``progress_bar``: NumPyro's bar for warmup and for each new segment (the same draws).

    With ``plan.extend``, ``on_extend(segment)`` is called, in order with ``on_segment``, each
    time the window that ended with segment ``segment`` became burn-in (for the replayed
    segments too).

    Returns the :class:`Draws` of the last window's segments (verified reads of every draws
    file).
    """
    if not isinstance(plan, MCMCPlan):
        raise validation.InputTypeError(f"plan must be an MCMCPlan, got {type(plan).__name__}.")
    checkpoint_every = validation.check_int("checkpoint_every", checkpoint_every)
    total = plan.num_samples // plan.thinning
    if plan.extend is not None and total == 0:
        raise validation.InputValueError(
            f"a plan with extend needs a window of draws: num_samples={plan.num_samples} keeps "
            f"none at thinning={plan.thinning}."
        )
    mcmc = ReusingMCMC(
        plan.kernel(),
        num_warmup=plan.num_warmup,
        num_samples=plan.num_samples,
        num_chains=plan.num_chains,
        thinning=plan.thinning,
        chain_method="vectorized",
        progress_bar=False,
        jit_model_args=True,
    )
    mcmc.progress_bar = validation.check_bool("progress_bar", progress_bar)  # (even under CI)
    record = store.latest()
    resumed_from = None if record is None else record.segment
    if record is not None and record.draws_done > total and plan.extend is None:
        raise CheckpointError(
            f"{store.path} holds {record.draws_done} draws per chain, more than this run's "
            f"{total}; the folder is another run's or damaged."
        )
    # a finished run is only read back (with extend, its last window's end is decided again)
    finished = (record is not None and record.segment > 0 and record.draws_done == total
                and plan.extend is None)  # fmt: skip
    on_segment = on_segment or (lambda *_: None)
    on_extend = on_extend or (lambda _: None)
    warmup = store.load_warmup(record) if record is not None else None
    if warmup is not None:
        on_segment(0, warmup, True)
    parts = store.load_draws(record) if record is not None else []
    ends = np.cumsum(record.draws_per_segment) if record is not None else []
    for k, part in enumerate(parts, start=1):
        on_segment(k, part, True)
        if plan.extend is not None and k < len(parts) and ends[k - 1] % total == 0:
            on_extend(k)  # (a later segment exists: this window was extended)
    windows = 1
    if not finished:
        del parts  # (read again, with the new segments, below)
        record, windows = _sample(plan, mcmc, rng_key, args, init_params, store, record,
                                  checkpoint_every, on_segment, on_extend)  # fmt: skip
        parts = store.load_draws(record)
    # the last window's segments
    ends = np.cumsum([0, *record.draws_per_segment])
    parts = [p for p, start in zip(parts, ends[:-1], strict=True) if start >= (windows - 1) * total]
    samples, extra = joined_arrays(parts)
    for name, value in samples.items():  # never a short run
        if value.shape[:2] != (plan.num_chains, total):
            raise CheckpointError(
                f"{store.path}: the committed draws of {name!r} have shape {value.shape[:2]}, "
                f"expected ({plan.num_chains}, {total}); the folder is damaged."
            )
    return Draws(samples, extra, record.segment, resumed_from, windows)

"""Full-batch HMC over several processes (hosts), on JAX's own multi-process runtime.

Example:
    >>> from bnn_ppl.inference.potential.distributed import settings_from_env
    >>> s = settings_from_env({"JAX_COORDINATOR_ADDRESS": "10.0.0.1:1234",
    ...                        "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "1"})
    >>> s.coordinator_address, s.num_processes, s.process_id
    ('10.0.0.1:1234', 2, 1)
    >>> settings_from_env({}) is None    # nothing set: a single process
    True
"""

# Notes:
#
# Izmailov et al. ran full-batch HMC over 512 TPU devices. Here the same program runs on every
# process (SPMD): ``jax.distributed.initialize`` joins the processes, ``jax.devices()`` then lists
# the devices of *all* of them, and :func:`~bnn_ppl.inference.full_batch_potential` (a ``BNN``)
# or :func:`~bnn_ppl.inference.model_potential` (any NumPyro model with a data plate) builds its
# 1-D ``"data"`` mesh over those devices. Nothing else changes: the potential is still one
# ``shard_map`` with one ``psum``; XLA carries the all-reduce across processes (NCCL on GPUs,
# ICI/DCN on TPUs, gloo on CPUs).
#
# The recipe, on every process::
#
#     import jax
#     import bnn_ppl as bp
#     from bnn_ppl.inference import hmc
#     from bnn_ppl.inference.potential import distributed
#
#     distributed.initialize_from_env()            # before any other JAX call
#     n = 50_000                                   # rows of the WHOLE training set
#     rows = distributed.process_rows(n, chunk_size=512)   # this process's block of rows
#     x, y = load_rows(rows)                       # load only those rows (user code)
#     mcmc = hmc(model, x, y, chunk_size=512, num_warmup=..., num_samples=...,
#                rng_key=jax.random.key(0))        # the SAME key on every process
#     if jax.process_index() == 0:
#         save(mcmc.get_samples())                 # every process holds the same samples
#
# For a NumPyro model, the same rows go into ``data=``; ``n`` is the plate's size as a single
# process would see it (the model sizes its plate from the data, ``x.shape[0]``, and is traced
# on the global arrays)::
#
#     pot = model_potential(model, data={"x": x, "y": y}, chunk_size=512)
#     mcmc = MCMC(NUTS(pot), num_warmup=..., num_samples=..., jit_model_args=True)
#     mcmc.run(jax.random.key(0), *pot.args, init_params=pot.init_params(jax.random.key(1)))
#
# The data must reach a jitted function as arguments (``pot.args`` with ``jit_model_args=True``,
# or ``pot.value_and_grad``): JAX refuses to close over an array that spans processes, so
# ``pot.potential_fn`` (which closes over :attr:`data`) works in one process only.
#
# The data layout
# ---------------
# Each process passes **only its own rows**, and they must be exactly the block
# :func:`process_rows` names: the global (padded) array is the same as in a single-process run
# over the same devices, i.e. device ``k`` of the mesh holds rows ``[k·R, (k+1)·R)`` of the
# padded data (``R`` = ``num_chunks · chunk_size`` rows per device), the mesh lists the devices
# process by process, and padding rows (masked out exactly) sit at the end, on the last
# process(es). So process ``p`` with devices at mesh positions ``[a, b)`` passes rows
# ``[a·R, min(b·R, n))``; when ``n`` is not a multiple of the number of devices, the last process
# gets fewer rows than the others. Every other number (``num_data``, the chunking, the
# minibatch potential's row indices) is then exactly what a single process would have.
#
# Both potentials learn ``n`` by gathering the row counts of all processes (one tiny
# ``process_allgather``, together with a fingerprint of the arguments that must agree: trailing
# shapes and dtypes of ``x`` and ``y`` or of every ``data`` array and their keys, ``chunk_size``,
# ``dtype``, the devices; for ``model_potential`` also the temperature, ``temper``,
# ``data_plate`` and the structure, shapes and scalar values of ``model_args``/``model_kwargs``),
# and refuse, on every process alike, counts that do not match this layout, naming each
# process's expected block (:mod:`bnn_ppl.inference.potential.distributed`).
# The local data are validated (finite, labels in range, ...) before that, on
# each process; a process whose data fail validation raises there, and the others then fail in
# the gather when JAX's coordination service times out (tens of seconds), not silently.
#
# Rules of SPMD
# -------------
# * Every process calls the same functions with the same arguments (apart from its rows) and the
#   same random keys: ``MCMC.run`` then proceeds identically everywhere and every process ends
#   with the same (replicated) samples.
# * The mesh must contain devices of every process (the default ``devices=jax.devices()``
#   does); its devices are ordered by process (stably) so that each process's rows are one
#   contiguous block.
# * On CPUs the cross-process collectives need an implementation:
#   ``jax_cpu_collectives_implementation="gloo"`` (the default of the jaxlib this was tested
#   with; :func:`initialize_from_env` sets it if it is unset).

from __future__ import annotations

import os
import zlib
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from bnn_ppl.inference.potential.sharded_sum import DATA_AXIS, ShardedData, device_rows, pad_rows
from bnn_ppl.validation import InputValueError

__all__ = [
    "DistributedSettings",
    "settings_from_env",
    "initialize_from_env",
    "spans_processes",
    "order_by_process",
    "process_rows",
    "place_process_local",
    "COORDINATOR_VARS",
    "NUM_PROCESSES_VARS",
    "PROCESS_ID_VARS",
    "ProcessLayout",
    "gather_layout",
    "place_local",
    "first_row",
    "describe_arguments",
    "check_process_local",
]

COORDINATOR_VARS = ("JAX_COORDINATOR_ADDRESS",)
"""``host:port`` of process 0's coordinator (JAX's own variable); else ``MASTER_ADDR`` and
``MASTER_PORT`` (torchrun's)."""
NUM_PROCESSES_VARS = ("JAX_NUM_PROCESSES", "JAX_PROCESS_COUNT", "WORLD_SIZE")
"""Number of processes, first one set wins."""
PROCESS_ID_VARS = ("JAX_PROCESS_ID", "JAX_PROCESS_INDEX", "RANK")
"""This process's id in ``[0, num_processes)``, first one set wins."""
_CLUSTER_VARS = ("SLURM_JOB_ID", "OMPI_COMM_WORLD_SIZE", "TPU_WORKER_HOSTNAMES")


class DistributedSettings(NamedTuple):
    """What :func:`initialize_from_env` passes to ``jax.distributed.initialize``.

    ``None`` fields are left to JAX's own cluster auto-detection (Slurm, Open MPI, Cloud TPU).
    """

    coordinator_address: str | None
    num_processes: int | None
    process_id: int | None


def _first(environ: Mapping[str, str], names: Sequence[str]) -> tuple[str, str] | None:
    for name in names:
        value = environ.get(name, "").strip()
        if value:
            return name, value
    return None


def _as_int(name: str, value: str, minimum: int) -> int:
    try:
        v = int(value)
    except ValueError:
        raise InputValueError(f"${name} must be an integer, got {value!r}.") from None
    if v < minimum:
        raise InputValueError(f"${name} must be >= {minimum}, got {v}.")
    return v


def settings_from_env(environ: Mapping[str, str] | None = None) -> DistributedSettings | None:
    """Read the coordinator address, process count and process id from the environment.

    Variables (first one set wins): the coordinator from ``$JAX_COORDINATOR_ADDRESS``
    (``host:port``) or ``$MASTER_ADDR`` + ``$MASTER_PORT``; the count from
    ``$JAX_NUM_PROCESSES``, ``$JAX_PROCESS_COUNT`` or ``$WORLD_SIZE``; the id from
    ``$JAX_PROCESS_ID``, ``$JAX_PROCESS_INDEX`` or ``$RANK``.

    Returns:
        ``None`` when none of them is set and no cluster JAX can auto-detect is visible (Slurm,
        Open MPI, Cloud TPU): a single process. All three ``None`` fields when only a cluster
        is visible (JAX then detects everything). Otherwise the settings.

    Raises:
        ValueError: some but not all of the three are set (naming the missing ones), a value is
            not an integer, ``process_id`` is outside ``[0, num_processes)``, or the address has
            no port.
    """
    env = os.environ if environ is None else environ
    coordinator = _first(env, COORDINATOR_VARS)
    if coordinator is None and env.get("MASTER_ADDR", "").strip():
        port = env.get("MASTER_PORT", "").strip()
        if not port:
            raise InputValueError("$MASTER_ADDR is set but $MASTER_PORT is not; set both.")
        coordinator = ("MASTER_ADDR", f"{env['MASTER_ADDR'].strip()}:{port}")
    count = _first(env, NUM_PROCESSES_VARS)
    pid = _first(env, PROCESS_ID_VARS)
    found = {"coordinator": coordinator, "process count": count, "process id": pid}
    if all(v is None for v in found.values()):
        if any(env.get(v) for v in _CLUSTER_VARS):
            return DistributedSettings(None, None, None)
        return None
    missing = [k for k, v in found.items() if v is None]
    if missing:
        names = {
            "coordinator": "$JAX_COORDINATOR_ADDRESS (or $MASTER_ADDR and $MASTER_PORT)",
            "process count": " or ".join("$" + v for v in NUM_PROCESSES_VARS),
            "process id": " or ".join("$" + v for v in PROCESS_ID_VARS),
        }
        raise InputValueError(
            "multi-process settings are incomplete: "
            + "; ".join(f"{k} missing (set {names[k]})" for k in missing)
            + "."
        )
    assert coordinator is not None and count is not None and pid is not None
    if ":" not in coordinator[1] or not coordinator[1].rsplit(":", 1)[1].isdigit():
        raise InputValueError(f"${coordinator[0]} must be host:port, got {coordinator[1]!r}.")
    num = _as_int(count[0], count[1], 1)
    index = _as_int(pid[0], pid[1], 0)
    if index >= num:
        raise InputValueError(f"${pid[0]}={index} must be < ${count[0]}={num}.")
    return DistributedSettings(coordinator[1], num, index)


def initialize_from_env(
    environ: Mapping[str, str] | None = None,
    *,
    initialization_timeout: int = 300,
    heartbeat_timeout_seconds: int = 100,
    **kwargs: Any,
) -> DistributedSettings | None:
    """Join the processes of a multi-process run (``jax.distributed.initialize``) from env vars.

    Call it first thing, on every process, before any other JAX computation. It reads
    :func:`settings_from_env`; with nothing set it does nothing and returns ``None`` (a single
    process, so the same script runs unchanged on one machine). It is idempotent: a second call
    returns the settings without initialising again. On CPUs it selects the gloo collectives if
    no implementation is configured (cross-process all-reduces need one).

    Args:
        environ: the variables to read (default ``os.environ``).
        initialization_timeout: seconds to wait for all processes to join.
        heartbeat_timeout_seconds: seconds after which a silent process counts as dead.
        **kwargs: passed on to ``jax.distributed.initialize`` (e.g. ``local_device_ids``).

    Returns:
        The settings used, or ``None`` for a single process.

    Example (two processes on one machine; run this on each with its own ``JAX_PROCESS_ID``)::

        JAX_COORDINATOR_ADDRESS=127.0.0.1:12345 JAX_NUM_PROCESSES=2 JAX_PROCESS_ID=0 \\
            python train.py
    """
    settings = settings_from_env(environ)
    if settings is None:
        return None
    if jax.distributed.is_initialized():
        return settings
    if jax.config.jax_cpu_collectives_implementation in (None, "", "none"):
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=settings.coordinator_address,
        num_processes=settings.num_processes,
        process_id=settings.process_id,
        initialization_timeout=initialization_timeout,
        heartbeat_timeout_seconds=heartbeat_timeout_seconds,
        **kwargs,
    )
    return settings


# ----------------------------------------------------------------------------- data layout
def place_process_local(
    x: np.ndarray,
    y: np.ndarray,
    devices: Sequence[jax.Device],
    chunk_size: int | None,
    *,
    fingerprint: tuple = (),
) -> tuple[Mesh, ShardedData, int, int, int]:
    """Build the global sharded data from this process's rows (called by full_batch_potential).

    Every process must call it (SPMD); see the module docstring for the layout and
    :mod:`bnn_ppl.inference.potential.distributed` for the two steps (gather, place).

    Args:
        x, y: this process's rows, already validated and in their final dtypes.
        devices: the devices of the mesh (all processes).
        chunk_size: as in :func:`~bnn_ppl.inference.full_batch_potential`.
        fingerprint: more arguments that must agree across processes (hashed).

    Returns:
        ``(mesh, data, num_data, chunk, num_chunks)`` with ``num_data`` the global row count.

    Raises:
        ValueError: the mesh leaves out a process, or the processes disagree (fingerprint), or
            a process's row count does not match its block (raised on every process).
    """
    arrays = {"x": x, "y": y}
    layout = gather_layout(
        arrays, devices, chunk_size, fingerprint=fingerprint, caller="full_batch_potential",
        argument="x, y", agree="trailing shapes or dtypes of x/y, chunk_size, dtype or devices",
    )
    mesh, placed, mask = place_local(arrays, layout)
    data = ShardedData(x=placed["x"], y=placed["y"], mask=mask)
    return mesh, data, layout.num_data, layout.chunk, layout.num_chunks


# -------------------- process_layout
# Which rows each process of a multi-process run holds, and how they become global arrays.
#
# The layout (see :mod:`bnn_ppl.inference.potential.distributed` for the recipe) is the
# single-process one:
# device ``k`` of the mesh (devices ordered by process) holds rows ``[k·R, (k+1)·R)`` of the
# padded data, ``R = num_chunks · chunk`` rows per device, and the padding rows (masked out) sit
# at the end. Each process passes only its own block (:func:`process_rows`); both potentials
# turn the blocks into global ``jax.Array`` s in two steps, every process alike (SPMD):
#
# 1. :func:`gather_layout` gathers every process's row count and a fingerprint of the arguments
#    that must agree (one tiny ``process_allgather``), refuses a mismatch on every process, and
#    returns the global :class:`ProcessLayout` (``num_data``, the chunking, this process's
#    offset);
# 2. :func:`place_local` pads this process's rows and assembles the global sharded arrays and
#    mask from them (no data leave the process).
#
# :func:`~bnn_ppl.inference.full_batch_potential` (``x``, ``y``) and
# :func:`~bnn_ppl.inference.model_potential` (any ``data={...}`` mapping) both use them.

class ProcessLayout(NamedTuple):
    """The global layout of a multi-process potential's data, as seen by this process."""

    devices: list[Any]
    """The mesh's devices, ordered by process."""
    num_data: int
    """Real rows of the whole data set (all processes)."""
    chunk: int
    num_chunks: int
    offset: int
    """Global padded row of this process's first row."""
    local_rows: int
    """Rows on this process's devices, padding included."""


def spans_processes(devices: Sequence[Any]) -> bool:
    """Whether ``devices`` belong to more than one process (the multi-process data layout)."""
    return len({d.process_index for d in devices}) > 1


def order_by_process(devices: Sequence[Any]) -> list[Any]:
    """``devices`` sorted stably by process, so that each process's devices are contiguous."""
    return sorted(devices, key=lambda d: d.process_index)


def _blocks(
    n: int, devices: Sequence[Any], chunk_size: int | None
) -> tuple[int, int, dict[int, tuple[int, int]], dict[int, tuple[int, int]]]:
    """Chunking and, per process, its mesh positions ``[a, b)`` and real rows ``[start, stop)``."""
    chunk, num_chunks = device_rows(n, len(devices), chunk_size)
    rows = chunk * num_chunks
    positions: dict[int, tuple[int, int]] = {}
    for k, d in enumerate(devices):
        a, _ = positions.get(d.process_index, (k, k))
        positions[d.process_index] = (a, k + 1)
    blocks = {p: (min(a * rows, n), min(b * rows, n)) for p, (a, b) in positions.items()}
    return chunk, num_chunks, positions, blocks


def process_rows(
    num_data: int,
    *,
    chunk_size: int | None = None,
    devices: Sequence[Any] | None = None,
    process_index: int | None = None,
) -> slice:
    """The rows of the whole data set that this process must pass to a potential.

    Args:
        num_data: number of rows of the whole (global) data set.
        chunk_size, devices: as passed to :func:`~bnn_ppl.inference.full_batch_potential` or
            :func:`~bnn_ppl.inference.model_potential` (default ``jax.devices()``, all
            processes).
        process_index: whose rows (default ``jax.process_index()``).

    Returns:
        ``slice(start, stop)``: load rows ``start:stop`` of the data set on this process.

    Raises:
        ValueError: ``num_data < 1``, or so few rows that this process would get none (use
            fewer devices or a smaller ``chunk_size``).

    Example:
        >>> from types import SimpleNamespace as D
        >>> devs = [D(process_index=p) for p in (0, 0, 1, 1)]   # 2 processes x 2 devices
        >>> [process_rows(37, chunk_size=4, devices=devs, process_index=p) for p in (0, 1)]
        [slice(0, 24, None), slice(24, 37, None)]
    """
    if isinstance(num_data, bool) or not isinstance(num_data, int | np.integer) or num_data < 1:
        raise InputValueError(f"num_data must be a positive int, got {num_data!r}.")
    devices = order_by_process(jax.devices() if devices is None else devices)
    me = jax.process_index() if process_index is None else process_index
    _, _, _, blocks = _blocks(int(num_data), devices, chunk_size)
    if me not in blocks:
        raise InputValueError(f"process {me} owns none of the {len(devices)} devices.")
    start, stop = blocks[me]
    if stop <= start:
        raise InputValueError(
            f"with {num_data} rows over {len(devices)} devices process {me} would get no rows; "
            "use fewer devices or a smaller chunk_size."
        )
    return slice(start, stop)


def _fingerprint(arrays: Mapping[str, np.ndarray], devices: Sequence[Any], extra: tuple) -> int:
    shapes = sorted((k, a.shape[1:], str(a.dtype)) for k, a in arrays.items())
    text = repr((shapes, [d.id for d in devices], extra))
    return zlib.crc32(text.encode()) & 0x7FFFFFFF


def gather_layout(
    arrays: Mapping[str, np.ndarray],
    devices: Sequence[jax.Device],
    chunk_size: int | None,
    *,
    fingerprint: tuple = (),
    caller: str,
    argument: str,
    agree: str,
) -> ProcessLayout:
    """Gather the row counts of every process and check them against the layout (SPMD).

    Args:
        arrays: this process's rows, validated, with one common number of rows.
        devices: the devices of the mesh (all processes).
        chunk_size: as in the potential.
        fingerprint: more arguments that must agree across processes (hashed with the keys,
            trailing shapes and dtypes of ``arrays``, ``chunk_size`` and the devices).
        caller, argument, agree: the function's name, the name of its per-process rows and
            what must agree, for the error messages.

    Raises:
        ValueError: the mesh leaves out a process, or the processes disagree (fingerprint), or
            a process's row count does not match its block (raised on every process).
    """
    devices = order_by_process(devices)
    owners = {d.process_index for d in devices}
    if owners != set(range(jax.process_count())):
        raise InputValueError(
            f"the devices of a multi-process potential must include devices of every process "
            f"(0..{jax.process_count() - 1}); they cover processes {sorted(owners)}."
        )
    local = {a.shape[0] for a in arrays.values()}
    assert len(local) == 1, local  # the caller checked
    count = local.pop()
    info = np.asarray([count, _fingerprint(arrays, devices, (chunk_size, *fingerprint))])
    table = np.asarray(multihost_utils.process_allgather(info.astype(np.int32)))
    table = table.reshape(jax.process_count(), 2)
    if len(set(table[:, 1].tolist())) > 1:
        raise InputValueError(
            f"the processes called {caller} with different arguments ({agree} differ; "
            f"fingerprints {table[:, 1].tolist()}): every process must pass the same arguments, "
            "apart from its own rows."
        )
    counts = table[:, 0].tolist()
    n = int(sum(counts))
    chunk, num_chunks, positions, blocks = _blocks(n, devices, chunk_size)
    wrong = [p for p in range(len(counts)) if counts[p] != blocks[p][1] - blocks[p][0]]
    if wrong:
        expected = ", ".join(
            f"process {p}: rows {a}:{b} ({b - a} rows, got {counts[p]})"
            for p, (a, b) in sorted(blocks.items())
        )
        raise InputValueError(
            f"in a multi-process run each process passes its own block of rows ({argument}) to "
            f"{caller}, "
            f"and with {n} rows in all over {len(devices)} devices these are: {expected}. Use "
            f"bnn_ppl.inference.potential.distributed.process_rows({n}, chunk_size={chunk_size}) "
            "on each "
            "process to get its block."
        )
    rows = chunk * num_chunks
    a, b = positions[jax.process_index()]
    return ProcessLayout(devices, n, chunk, num_chunks, a * rows, (b - a) * rows)


def place_local(
    arrays: Mapping[str, np.ndarray], layout: ProcessLayout
) -> tuple[Mesh, dict[str, jax.Array], jax.Array]:
    """``(mesh, global arrays, global mask)`` from this process's rows (every process calls it).

    The rows are padded on this process (copies of its own rows, masked out) and put on its
    devices; the global arrays have ``len(devices) · num_chunks · chunk`` rows.
    """
    devices, n, offset, local = layout.devices, layout.num_data, layout.offset, layout.local_rows
    rows = layout.chunk * layout.num_chunks
    mesh = Mesh(np.asarray(devices), (DATA_AXIS,))
    sharding = NamedSharding(mesh, P(DATA_AXIS))

    def build(v: np.ndarray) -> jax.Array:
        shape = (len(devices) * rows, *v.shape[1:])
        shards = []
        for device, index in sharding.addressable_devices_indices_map(shape).items():
            lo, hi = index[0].start - offset, index[0].stop - offset
            shards.append(jax.device_put(v[lo:hi], device))
        return jax.make_array_from_single_device_arrays(shape, sharding, shards)

    placed = {k: build(pad_rows(a, local)) for k, a in arrays.items()}
    return mesh, placed, build(np.arange(offset, offset + local) < n)


def first_row(arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Row 0 of the whole data set (process 0's first row, shape ``(1, ...)``), on every
    process: one ``process_allgather`` (an exact copy, no arithmetic). Call it only after
    :func:`gather_layout`, which makes sure that the shapes agree."""
    gathered = multihost_utils.process_allgather({k: a[:1] for k, a in arrays.items()})
    return {k: np.asarray(v)[0] for k, v in gathered.items()}


def describe_arguments(tree: Any) -> str:
    """The structure, leaf shapes and dtypes, and Python scalar values of ``tree``: what the
    processes must agree on about arguments passed unchanged (a fingerprint's part)."""
    leaves, treedef = jax.tree.flatten(tree)
    return repr((str(treedef), [
        repr(v) if isinstance(v, bool | int | float | str | complex | None)
        else (np.shape(v), str(getattr(v, "dtype", type(v).__name__))) for v in leaves]))


def check_process_local(name: str, a: Any) -> None:
    """Refuse a global ``jax.Array`` that spans several processes: the potentials take each
    process's own rows as a NumPy array (``np.asarray`` of a global array fails deep in JAX)."""
    if isinstance(a, jax.Array) and not a.is_fully_addressable:
        raise InputValueError(
            f"{name} is a global jax.Array spanning several processes; pass this process's own "
            "rows as a NumPy array instead (load rows "
            "bnn_ppl.inference.potential.distributed.process_rows(n, chunk_size=...))."
        )

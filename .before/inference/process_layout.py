"""Which rows each process of a multi-process run holds, and how they become global arrays.

The layout (see :mod:`bnn_ppl.inference.distributed` for the recipe) is the single-process one:
device ``k`` of the mesh (devices ordered by process) holds rows ``[k·R, (k+1)·R)`` of the
padded data, ``R = num_chunks · chunk`` rows per device, and the padding rows (masked out) sit
at the end. Each process passes only its own block (:func:`process_rows`); both potentials
turn the blocks into global ``jax.Array`` s in two steps, every process alike (SPMD):

1. :func:`gather_layout` gathers every process's row count and a fingerprint of the arguments
   that must agree (one tiny ``process_allgather``), refuses a mismatch on every process, and
   returns the global :class:`ProcessLayout` (``num_data``, the chunking, this process's
   offset);
2. :func:`place_local` pads this process's rows and assembles the global sharded arrays and
   mask from them (no data leave the process).

:func:`~bnn_ppl.inference.full_batch_potential` (``x``, ``y``) and
:func:`~bnn_ppl.inference.model_potential` (any ``data={...}`` mapping) both use them.

Example:
    >>> from types import SimpleNamespace as D
    >>> devs = [D(process_index=p) for p in (0, 0, 1, 1)]   # 2 processes x 2 devices
    >>> [process_rows(37, chunk_size=4, devices=devs, process_index=p) for p in (0, 1)]
    [slice(0, 24, None), slice(24, 37, None)]
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from bnn_ppl.inference.sharded_sum import DATA_AXIS, device_rows, pad_rows
from bnn_ppl.validation import InputValueError

__all__ = [
    "ProcessLayout",
    "spans_processes",
    "order_by_process",
    "process_rows",
    "gather_layout",
    "place_local",
    "first_row",
    "describe_arguments",
    "check_process_local",
]


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
            f"bnn_ppl.inference.distributed.process_rows({n}, chunk_size={chunk_size}) on each "
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
            "bnn_ppl.inference.distributed.process_rows(n, chunk_size=...))."
        )

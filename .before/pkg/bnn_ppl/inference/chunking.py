"""How many rows one chunk of the full-batch potential holds: the rule for accelerators.

On the CPU backend the potential's default is chunks of at most 1024 rows (measured best there:
the activations of a chunk stay in cache). On a GPU, a loop over small chunks leaves the device
idle: on one H200 an MLP's full-batch gradient over 60,000 rows took 5.25 ms in chunks of 1017
rows and 1.11 ms in one chunk; a CNN-LSTM 247 ms vs 77 ms; a ResNet-20 679 ms with chunks of
511 rows, 448 ms with chunks of 10,000 (fixed chunk sizes, ``benchmarks/gpu.py``). So on an
accelerator the default is the largest chunk that fits in free device memory, found thus:

1. compile the value and gradient of the potential for ONE probe chunk (at most
   :data:`PROBE_ROWS` rows, no loop) and read XLA's temporary memory
   (``compiled.memory_analysis().temp_size_in_bytes``): bytes per row = temporary bytes / probe
   rows (the fixed part, e.g. the parameters' gradient, is counted per row too: an
   overestimate), plus one row of data (a chunk sliced out of the data may be copied);
2. read the free memory of the devices (``memory_stats()``: ``bytes_limit - bytes_in_use``,
   the least over the devices);
3. :func:`chunk_for_memory`: the resident data (every row of the device) are taken from
   ``safety * free``, and the chunk is as many rows as the rest holds, at most every row of the
   device (one chunk, no loop), at least 1.

Vectorized chains (``chain_method="vectorized"``, the drivers' default) evaluate the potential
for every chain at once, each with its own activations: ``full_batch_potential(...,
vectorized_chains=C)`` counts C times the probe's bytes per row (the library's drivers pass
their ``num_chains``). Built for one chain and run with three, a ResNet-20's 25,000-row chunks
(51 GiB each on one H200) made XLA's autotuner fail with ``CUDA_ERROR_ILLEGAL_ADDRESS``, which
left the device unusable for the rest of the process.

``safety`` (default :data:`SAFETY` = 0.5) leaves room for what the probe does not see: the
sampler's state (momentum, previous gradient, a mass matrix), the loop's carried gradient,
XLA's fragmentation, and other programs on the device. Where a device reports no memory
statistics (the CPU backend, some plugins) the rule falls back to 1024 rows.

The chunk, and so the order in which float32 sums are rounded, then depends on the memory free
when the potential is built: for results identical to the last bit across machines or runs
beside other work, pass an int ``chunk_size``.

Example:
    >>> chunk_for_memory(60_000, bytes_per_row=6_000, free_bytes=100 * 2**30)
    60000
    >>> chunk_for_memory(50_000, bytes_per_row=2 * 2**20, free_bytes=100 * 2**30)
    25600
    >>> chunk_for_memory(50_000, bytes_per_row=2 * 2**20, free_bytes=2**20)
    1
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from bnn_ppl import validation
from bnn_ppl.inference.potential import FullBatchPotential, ShardedData
from bnn_ppl.inference.sharded_sum import DATA_AXIS, DEFAULT_MAX_CHUNK, has_convolution
from bnn_ppl.model import BNN
from bnn_ppl.validation import InputValueError

__all__ = [
    "CHUNK_RULES",
    "MEMORY_RULES",
    "PROBE_ROWS",
    "SAFETY",
    "choose_chunk",
    "chunk_for_memory",
    "free_device_bytes",
    "memory_chunk",
]

PROBE_ROWS = 512
SAFETY = 0.5

#: What :attr:`~bnn_ppl.inference.FullBatchPotential.chunk_rule` can say, and what it means.
CHUNK_RULES = {
    "chunk_size": "the chunk_size argument",
    "cpu default": "chunk_size=None on the CPU backend: at most 1024 rows",
    "fits in memory": "the memory rule: every row of a device in one chunk",
    "largest that fits": "the memory rule: the largest chunk that fits in free device memory",
    "no memory stats": "the memory rule, but a device reports no free memory: at most 1024 rows",
    "several processes": "chunk_size=None with devices of several processes: at most 1024 rows",
}
#: The rules that read free device memory (the chunk may differ between runs).
MEMORY_RULES = ("fits in memory", "largest that fits", "no memory stats")


def chunk_for_memory(
    rows_per_device: int,
    bytes_per_row: int,
    free_bytes: int,
    safety: float = SAFETY,
    *,
    resident_bytes: int = 0,
) -> int:
    """The most rows per chunk such that ``chunk * bytes_per_row <= safety * free_bytes -
    resident_bytes``, clipped to ``[1, rows_per_device]``.

    Args:
        rows_per_device: rows each device holds (the chunk never exceeds it: one chunk).
        bytes_per_row: device memory one more row of a chunk needs (>= 1).
        free_bytes: free device memory (>= 0).
        safety: the share of ``free_bytes`` the potential may use, in ``(0, 1]``.
        resident_bytes: memory taken from that share first (the data themselves).

    Returns:
        The chunk size, an int in ``[1, rows_per_device]`` (1 when nothing fits: the smallest
        program, whose failure, if any, is XLA's out-of-memory error).

    Raises:
        ValueError, TypeError: a count that is not a positive int, negative memory, or
            ``safety`` outside ``(0, 1]``.
    """
    rows_per_device = validation.check_int("rows_per_device", rows_per_device)
    bytes_per_row = validation.check_int("bytes_per_row", bytes_per_row)
    free_bytes = validation.check_int("free_bytes", free_bytes, minimum=0)
    resident_bytes = validation.check_int("resident_bytes", resident_bytes, minimum=0)
    safety = validation.check_positive("safety", safety)
    if safety > 1:
        raise InputValueError(f"safety must be in (0, 1], got {safety}: a share of free memory.")
    budget = safety * free_bytes - resident_bytes
    return max(1, min(rows_per_device, math.floor(budget / bytes_per_row)))


def free_device_bytes(devices: Sequence[Any]) -> int | None:
    """The least free memory over ``devices`` (``bytes_limit - bytes_in_use`` of
    ``device.memory_stats()``), or ``None`` when a device does not report both."""
    free = []
    for d in devices:
        stats = d.memory_stats()
        if not stats or "bytes_limit" not in stats or "bytes_in_use" not in stats:
            return None
        free.append(max(0, int(stats["bytes_limit"]) - int(stats["bytes_in_use"])))
    return min(free) if free else None


def memory_chunk(
    rows_per_device: int,
    compile_probe: Callable[[int], Any],
    devices: Sequence[Any],
    *,
    data_bytes_per_row: int,
    free_bytes: int | None = None,
    safety: float = SAFETY,
    probe_rows: int = PROBE_ROWS,
    chains: int = 1,
) -> tuple[int, str]:
    """``(max_chunk, rule)`` by the memory rule (module docstring); ``rule`` is a key of
    :data:`CHUNK_RULES`.

    Args:
        rows_per_device: rows each device holds.
        compile_probe: ``rows -> jax.stages.Compiled``: the potential's value and gradient
            compiled for one chunk of ``rows`` rows on one device.
        devices: the devices of the mesh (their free memory is read unless ``free_bytes``).
        data_bytes_per_row: bytes of one row of the data (inputs, targets, mask).
        free_bytes: free device memory to assume instead of reading it (tests; a share of a
            device you mean to leave to other work).
        safety, probe_rows: the share of free memory the potential may use; rows of the probe.
        chains: chains that evaluate the potential at once, vmapped (``chain_method=
            "vectorized"``): each holds its own activations, so a row of a chunk costs
            ``chains`` times the probe's temporary bytes (the data are shared).
    """
    free = free_device_bytes(devices) if free_bytes is None else free_bytes
    if free is None:
        return DEFAULT_MAX_CHUNK, "no memory stats"
    rows = min(probe_rows, rows_per_device)
    analysis = compile_probe(rows).memory_analysis()
    if analysis is None:
        return DEFAULT_MAX_CHUNK, "no memory stats"
    per_row = chains * -(-int(analysis.temp_size_in_bytes) // rows) + data_bytes_per_row
    chunk = chunk_for_memory(
        rows_per_device, per_row, free, safety, resident_bytes=rows_per_device * data_bytes_per_row
    )
    return chunk, ("fits in memory" if chunk == rows_per_device else "largest that fits")


def potential_probe(
    model: BNN, x_row: jax.ShapeDtypeStruct, y_row: jax.ShapeDtypeStruct, dtype: Any, device: Any
) -> Callable[[int], Any]:
    """``rows -> Compiled``: the value and gradient of ``model``'s full-batch potential for one
    chunk of ``rows`` rows on ``device`` (``x_row``/``y_row``: one row's shape and dtype).
    Nothing is run and no data are placed: only shapes are lowered."""
    mesh = Mesh(np.asarray([device]), (DATA_AXIS,))
    sharding = NamedSharding(mesh, P(DATA_AXIS))

    def compile_probe(rows: int) -> Any:
        def spec(row: Any) -> jax.ShapeDtypeStruct:
            return jax.ShapeDtypeStruct((rows, *row.shape[1:]), row.dtype, sharding=sharding)

        data = ShardedData(spec(x_row), spec(y_row), spec(jax.ShapeDtypeStruct((1,), bool)))
        pot = FullBatchPotential(model, data, mesh, rows, rows, 1, dtype, x_row)  # type: ignore[arg-type]
        u = jax.eval_shape(lambda: pot.init_params(jax.random.key(0)))
        f = jax.jit(lambda u, d: jax.value_and_grad(pot.potential_fn_gen(d))(u))
        return f.lower(u, data).compile()

    return compile_probe


def model_has_convolution(
    model: BNN, x_row: jax.ShapeDtypeStruct, y_row: jax.ShapeDtypeStruct
) -> bool:
    """Whether ``model``'s log-likelihood of one row has a convolution (traced, not run)."""
    params = jax.eval_shape(lambda k: model.init(k, x_row, method="network"), jax.random.key(0))
    return has_convolution(jax.make_jaxpr(model.log_likelihood)(params, x_row, y_row))


def choose_chunk(
    model: BNN,
    x_row: jax.ShapeDtypeStruct,
    y_row: jax.ShapeDtypeStruct,
    dtype: Any,
    devices: Sequence[Any],
    rows_per_device: int,
    chunk_size: int | str | None,
    chains: int = 1,
    chain_batching: str = "vectorized",
) -> tuple[int | None, str]:
    """``(max_chunk, rule)`` for :func:`~bnn_ppl.inference.full_batch_potential`'s validated
    ``chunk_size`` (an int, ``None`` or ``"auto"``); ``max_chunk=None`` means 1024 rows.
    ``chains``: vectorized chains, as in :func:`memory_chunk`; chains that run one after
    another (``chain_batching="sequential"``, or ``"auto"`` for a network with a convolution:
    :func:`model_has_convolution`) hold one chain's activations at a time."""
    if chunk_size not in (None, "auto"):
        return chunk_size, "chunk_size"  # type: ignore[return-value]
    if len({d.process_index for d in devices}) > 1:
        return None, "several processes"
    if chunk_size is None and devices[0].platform == "cpu":
        return None, "cpu default"
    data_bytes = 1 + sum(
        int(np.prod(r.shape[1:], dtype=np.int64)) * np.dtype(r.dtype).itemsize
        for r in (x_row, y_row)
    )
    if chains > 1 and (
        chain_batching == "sequential"
        or (chain_batching == "auto" and model_has_convolution(model, x_row, y_row))
    ):
        chains = 1
    probe = potential_probe(model, x_row, y_row, dtype, devices[0])
    return memory_chunk(
        rows_per_device, probe, devices, data_bytes_per_row=data_bytes, chains=chains
    )

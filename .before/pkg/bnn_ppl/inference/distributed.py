"""Full-batch HMC over several processes (hosts), on JAX's own multi-process runtime.

Izmailov et al. ran full-batch HMC over 512 TPU devices. Here the same program runs on every
process (SPMD): ``jax.distributed.initialize`` joins the processes, ``jax.devices()`` then lists
the devices of *all* of them, and :func:`~bnn_ppl.inference.full_batch_potential` (a ``BNN``)
or :func:`~bnn_ppl.inference.model_potential` (any NumPyro model with a data plate) builds its
1-D ``"data"`` mesh over those devices. Nothing else changes: the potential is still one
``shard_map`` with one ``psum``; XLA carries the all-reduce across processes (NCCL on GPUs,
ICI/DCN on TPUs, gloo on CPUs).

The recipe, on every process::

    import jax
    import bnn_ppl as bp
    from bnn_ppl.inference import distributed, hmc

    distributed.initialize_from_env()            # before any other JAX call
    n = 50_000                                   # rows of the WHOLE training set
    rows = distributed.process_rows(n, chunk_size=512)   # this process's block of rows
    x, y = load_rows(rows)                       # load only those rows (user code)
    mcmc = hmc(model, x, y, chunk_size=512, num_warmup=..., num_samples=...,
               rng_key=jax.random.key(0))        # the SAME key on every process
    if jax.process_index() == 0:
        save(mcmc.get_samples())                 # every process holds the same samples

For a NumPyro model, the same rows go into ``data=``; ``n`` is the plate's size as a single
process would see it (the model sizes its plate from the data, ``x.shape[0]``, and is traced
on the global arrays)::

    pot = model_potential(model, data={"x": x, "y": y}, chunk_size=512)
    mcmc = MCMC(NUTS(pot), num_warmup=..., num_samples=..., jit_model_args=True)
    mcmc.run(jax.random.key(0), *pot.args, init_params=pot.init_params(jax.random.key(1)))

The data must reach a jitted function as arguments (``pot.args`` with ``jit_model_args=True``,
or ``pot.value_and_grad``): JAX refuses to close over an array that spans processes, so
``pot.potential_fn`` (which closes over :attr:`data`) works in one process only.

The data layout
---------------
Each process passes **only its own rows**, and they must be exactly the block
:func:`process_rows` names: the global (padded) array is the same as in a single-process run
over the same devices, i.e. device ``k`` of the mesh holds rows ``[k·R, (k+1)·R)`` of the
padded data (``R`` = ``num_chunks · chunk_size`` rows per device), the mesh lists the devices
process by process, and padding rows (masked out exactly) sit at the end, on the last
process(es). So process ``p`` with devices at mesh positions ``[a, b)`` passes rows
``[a·R, min(b·R, n))``; when ``n`` is not a multiple of the number of devices, the last process
gets fewer rows than the others. Every other number (``num_data``, the chunking, the
minibatch potential's row indices) is then exactly what a single process would have.

Both potentials learn ``n`` by gathering the row counts of all processes (one tiny
``process_allgather``, together with a fingerprint of the arguments that must agree: trailing
shapes and dtypes of ``x`` and ``y`` or of every ``data`` array and their keys, ``chunk_size``,
``dtype``, the devices; for ``model_potential`` also the temperature, ``temper``,
``data_plate`` and the structure, shapes and scalar values of ``model_args``/``model_kwargs``),
and refuse, on every process alike, counts that do not match this layout, naming each
process's expected block (:mod:`bnn_ppl.inference.process_layout`).
The local data are validated (finite, labels in range, ...) before that, on
each process; a process whose data fail validation raises there, and the others then fail in
the gather when JAX's coordination service times out (tens of seconds), not silently.

Rules of SPMD
-------------
* Every process calls the same functions with the same arguments (apart from its rows) and the
  same random keys: ``MCMC.run`` then proceeds identically everywhere and every process ends
  with the same (replicated) samples.
* The mesh must contain devices of every process (the default ``devices=jax.devices()``
  does); its devices are ordered by process (stably) so that each process's rows are one
  contiguous block.
* On CPUs the cross-process collectives need an implementation:
  ``jax_cpu_collectives_implementation="gloo"`` (the default of the jaxlib this was tested
  with; :func:`initialize_from_env` sets it if it is unset).

Example:
    >>> from bnn_ppl.inference.distributed import settings_from_env
    >>> s = settings_from_env({"JAX_COORDINATOR_ADDRESS": "10.0.0.1:1234",
    ...                        "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "1"})
    >>> s.coordinator_address, s.num_processes, s.process_id
    ('10.0.0.1:1234', 2, 1)
    >>> settings_from_env({}) is None    # nothing set: a single process
    True
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import jax
import numpy as np
from jax.sharding import Mesh

from bnn_ppl.inference.potential import ShardedData
from bnn_ppl.inference.process_layout import (
    gather_layout,
    order_by_process,
    place_local,
    process_rows,
    spans_processes,
)
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
    :mod:`bnn_ppl.inference.process_layout` for the two steps (gather, place).

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

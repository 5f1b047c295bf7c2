"""Benchmark: full-batch gradients and HMC at the papers' scale on one accelerator.

Izmailov et al.'s settings as one full-batch ``value_and_grad`` of our potential on ONE device,
from one process, in sections that each print a line and append a JSON record to
``--out/gpu.jsonl`` (so a run cut short keeps what it measured); a section that fails (out of
memory, say) records its error and the next one runs. ``--deadline`` seconds after the start no
new section begins. Sections, in order:

1. ``resnet``: ResNet20FRN (width 16, 274k parameters) over ``--n`` x 32x32x3 CIFAR-shaped
   random inputs, 10 classes, for each ``--chunks`` size (rows per chunk of the potential's
   loop; ``auto``: the potential's own memory rule, :mod:`bnn_ppl.inference.potential.bnn`, whose
   choice is recorded as ``chunk_rule``), at JAX's default matmul precision (TF32 on Ampere+
   GPUs). Per chunk size: compile time, gradient time (median of ``--repeats``), XLA's temp
   buffer and the device's peak memory so far (``memory_stats()``), and XLA's FLOP count where
   the backend gives one (on a GPU it misses cuDNN/cuBLAS calls: use ``--flops-per-row`` on a
   CPU). XLA's cost analysis counts a ``while`` body once, whatever its trip count, so the
   loop body is scaled by the number of chunks.
2. ``profile``: at the fastest chunk size, ``--profile-calls`` gradient calls traced with
   ``jax.profiler``; the device's kernels summed per call, by kind (convolution, matmul,
   elementwise fusion, reduction, copies) and the 25 longest (:func:`kernel_profile`), and
   kernel time against wall time (the device's idle share). The trace comes back as
   ``resnet_trace.json.gz`` when under 15 MiB.
3. ``hmc``: at the fastest chunk size, fixed-step HMC (``bnn_ppl.inference.HMC(pot,
   num_steps=K)``, no adaptation) inside ``mcmc.run`` (NumPyro's ``maybe_jit`` memoised, see
   ``_timing.py``; compilations while timed are counted), for each of ``--hmc-chains``
   (vectorized chains): time per gradient, divided by the raw gradient (the goal is <= 1.05;
   for C chains, by C raw gradients, and by one vmapped C-chain gradient, HMC's own floor);
   set-up time and every compilation (program, seconds); with ``--profile-hmc``, one traced
   ``mcmc.run``: kernel time per leapfrog gradient against wall time, and every host<->device
   copy (none should happen inside the sampling loop).
4. ``resnet_width``: ResNet20FRN at each of ``--widths`` with the memory rule's chunk.
5. ``precision``: at the fastest chunk size, ``jax.default_matmul_precision`` ``float32``
   (full fp32: no TF32) and ``bfloat16``.
6. ``cnn_lstm``: the CNN-LSTM on IMDB-shaped int tokens (25,000 x 400, vocabulary 20,000), and
   ``mlp``: an MLP 784-256-256-10 on 60,000 x 784 (MNIST-shaped), each at ``--other-chunks``
   (default 1,024 rows, one chunk, and the memory rule).
7. ``resnet_one_chunk``: the whole data set as one chunk (no loop), if it fits.

3b. ``vmap``: before ``hmc``, the vmapped gradient of each ``--hmc-chains`` count alone
   (compile time and time per call). Both run on potentials built with ``--chain-batching``
   (default ``auto``: a ConvNet's chains one after another; ``vectorized``: batched
   convolutions, 9.5x three one-chain ResNet gradients on an H200).

``--skip`` takes section names (``vmap``, ``profile``, ``hmc``, ``widths``, ``precision``,
``cnn_lstm``, ``mlp``, ``one_chunk``).

On a CPU it runs too (``--quick``: tiny sizes), but the numbers are not GPU numbers: it says so.

Usage::

    python benchmarks/gpu.py --out /tmp/gpu       # the sections above, N = 50k
    python benchmarks/gpu.py --quick --out /tmp/q  # smoke test (seconds, any backend)
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _record
import _timing
import jax
import jax.numpy as jnp
import numpy as np
from numpyro.infer import MCMC

import bnn_ppl as bp
from bnn_ppl.inference import HMC, full_batch_potential
from bnn_ppl.models import CNNLSTM, MLP, ResNet20FRN

# Dense (no sparsity) TF32 tensor-core peaks from NVIDIA's data sheets, TFLOP/s, by the start
# of ``device.device_kind``; the goal is >= 40 % of this. Override with --peak-tflops.
TF32_PEAK_TFLOPS = {
    "NVIDIA H200": 494.7,  # SXM
    "NVIDIA H100 80GB HBM3": 494.7,  # SXM5
    "NVIDIA H100 PCIe": 378.0,
    "NVIDIA H100 NVL": 417.5,
    "NVIDIA A100": 156.0,
    "NVIDIA L4": 60.0,
}


def tf32_peak(device_kind: str) -> float | None:
    for name, peak in TF32_PEAK_TFLOPS.items():
        if device_kind.startswith(name):
            return peak
    return None


def flops(lowered: jax.stages.Lowered) -> float:
    """XLA's FLOP count of a lowered program; NaN where the backend gives none. (On a GPU the
    count misses the convolutions and GEMMs, cuDNN/cuBLAS custom calls, compiled or not: count
    with ``--flops-per-row`` on a CPU instead.)"""
    cost = lowered.cost_analysis()
    if isinstance(cost, list | tuple):  # older jax: one dict per device program
        cost = cost[0] if cost else None
    return float(cost["flops"]) if cost and "flops" in cost else float("nan")


class Recorder:
    """Prints each record and appends it to ``out/gpu.jsonl``; tracks the deadline."""

    def __init__(self, out: Path | None, deadline_s: float) -> None:
        self.path = None if out is None else out / "gpu.jsonl"
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
        self.t0 = time.perf_counter()
        self.deadline_s = deadline_s
        self.entries: list[dict[str, Any]] = []

    def time_left(self) -> float:
        return self.deadline_s - (time.perf_counter() - self.t0)

    def record(self, rec: dict[str, Any]) -> None:
        rec = {"t_s": round(time.perf_counter() - self.t0, 1), **rec}
        print(json.dumps(rec), flush=True)
        self.entries.append(rec)
        if self.path is not None:
            with self.path.open("a") as f:
                f.write(json.dumps(rec) + "\n")

    def section(self, name: str, fn: Callable[[], dict[str, Any]], **tags: Any) -> dict | None:
        """Run one measurement; record its result or its error; skip it past the deadline."""
        if self.time_left() <= 0:
            self.record({"section": name, **tags, "skipped": "deadline"})
            return None
        try:
            rec = {"section": name, **tags, **fn()}
        except Exception as e:  # noqa: BLE001 - a benchmark records every failure and goes on
            rec = {"section": name, **tags, "error": f"{type(e).__name__}: {str(e)[:300]}"}
        self.record(rec)
        return rec


def precision_ctx(precision: str) -> contextlib.AbstractContextManager:
    if precision == "default":
        return contextlib.nullcontext()
    return jax.default_matmul_precision(precision)


def peak_bytes(device: jax.Device) -> int | None:
    stats = device.memory_stats() or {}
    return stats.get("peak_bytes_in_use")


def repeat_ms(call: Callable[[], Any], repeats: int) -> dict[str, float]:
    """One untimed ``call`` (blocked), then ``repeats`` timed ones: their ms summary."""
    _timing.block(call())
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        _timing.block(call())
        ts.append(time.perf_counter() - t0)
    return _timing.summary(ts)


def gradient(
    model: bp.BNN,
    x: np.ndarray,
    y: np.ndarray,
    chunk: int | str,
    precision: str,
    repeats: int,
    device: jax.Device,
    peak_tflops: float | None,
    count_flops: bool = True,
    chain_batching: str = "auto",
) -> tuple[dict[str, Any], Any]:
    """Compile and time one full-batch ``value_and_grad``; FLOPs, memory; return (record, pot).
    ``chunk="auto"``: the potential's own memory rule picks it (``pot.chunk_rule``)."""
    with precision_ctx(precision):
        pot = full_batch_potential(
            model, x, y, devices=[device], chunk_size=chunk, chain_batching=chain_batching
        )
        u = jax.tree.map(jnp.asarray, pot.init_params(jax.random.key(0), method="network"))
        vg = jax.jit(lambda u, d: jax.value_and_grad(pot.potential_fn_gen(d))(u))
        lowered = vg.lower(u, pot.data)
        t0 = time.perf_counter()
        compiled = lowered.compile()
        compile_s = time.perf_counter() - t0
        g = repeat_ms(lambda: compiled(u, pot.data), repeats)
        rec: dict[str, Any] = {
            "rows": len(x),
            "chunk": pot.chunk_size,
            "chunk_rule": pot.chunk_rule,
            "num_chunks": pot.num_chunks,
            "params": pot.num_params,
            "precision": precision,
            "compile_s": round(compile_s, 2),
            "grad_ms": round(g["median"], 3),
            "grad_ms_min": round(g["min"], 3),
            "grad_ms_iqr": [round(g["q1"], 3), round(g["q3"], 3)],
            "xla_temp_mib": round(compiled.memory_analysis().temp_size_in_bytes / 2**20, 1),
        }
        peak = peak_bytes(device)
        if peak is not None:
            rec["device_peak_gib"] = round(peak / 2**30, 3)
        if count_flops:
            spec = pot._x_spec
            prior_vg = jax.jit(
                jax.value_and_grad(
                    lambda u: -model.prior_scale * model.log_prior(pot.constrain(u)[0], spec)
                )
            )
            outside = flops(prior_vg.lower(u))
            executed = outside + pot.num_chunks * (flops(lowered) - outside)
            c = min(pot.chunk_size, len(x))
            rows = pot.num_chunks * pot.chunk_size  # one chunk's FLOPs per row, prior once
            model_flops = outside + rows * (flops_per_row(model, x[:c], y[:c]) - outside / c)
            sec = g["median"] / 1e3
            rec["gflop_executed"] = round(executed / 1e9, 1)
            rec["gflop_model"] = round(model_flops / 1e9, 1)
            rec["tflops_executed"] = round(executed / sec / 1e12, 2)
            rec["tflops_model"] = round(model_flops / sec / 1e12, 2)
            if peak_tflops:
                rec["tf32_peak_share"] = round(executed / sec / 1e12 / peak_tflops, 4)
    return rec, (pot, u, g["median"], compiled)


def kernel_category(name: str) -> str:
    """A GPU kernel's kind, from its name (cuDNN/cuBLAS/cutlass/XLA naming)."""
    n = name.lower()
    if any(k in n for k in ("conv", "cudnn", "xmma", "implicit", "wgrad", "dgrad", "fprop")):
        return "convolution"
    if any(k in n for k in ("gemm", "cublas", "cutlass", "sm90", "matmul", "dot")):
        return "matmul"
    if "memcpy" in n or "memset" in n:
        return "memcpy/memset"
    if "transpose" in n or "copy" in n:
        return "transpose/copy"
    if "reduc" in n or "scatter" in n or "gather" in n:
        return "reduction/gather"
    if "fusion" in n or "loop" in n or "input" in n or "triton" in n:
        return "elementwise fusion"
    return "other"


def transfer_kind(name: str) -> str | None:
    """``"host_to_device"``/``"device_to_host"`` for a trace event that copies across the bus."""
    n = name.lower().replace(" ", "")
    if any(k in n for k in ("htod", "h2d", "hosttodevice")):
        return "host_to_device"
    if any(k in n for k in ("dtoh", "d2h", "devicetohost")):
        return "device_to_host"
    return None


def kernel_profile(path: Path, calls: int, wall_s: float, top: int = 25) -> dict[str, Any]:
    """Sum the GPU kernels of a ``jax.profiler`` trace (``path``: its perfetto JSON): per call,
    by kind (:func:`kernel_category`) and the ``top`` kernels by time. Only the device's stream
    lines count (the derived "XLA Ops"/"XLA Modules" lines repeat the same time)."""
    with gzip.open(path) as f:
        events = json.load(f)["traceEvents"]
    meta = [e for e in events if e.get("ph") == "M"]
    procs = {e["pid"]: e["args"]["name"] for e in meta if e.get("name") == "process_name"}
    threads = {
        (e["pid"], e.get("tid")): e["args"]["name"] for e in meta if e.get("name") == "thread_name"
    }
    device_pids = {pid for pid, name in procs.items() if "CPU" not in name and "host" not in name}
    on_device = [
        (f"{procs[e['pid']]} | {threads.get((e['pid'], e.get('tid')), '?')}", e)
        for e in events
        if e.get("ph") == "X" and e.get("pid") in device_pids
    ]
    lines: dict[str, float] = {}
    for line, e in on_device:
        lines[line] = lines.get(line, 0.0) + e.get("dur", 0.0)
    streams = {ln for ln in lines if "stream" in ln.lower()} or set(lines)
    kernels: dict[str, list] = {}
    for line, e in on_device:
        if line not in streams:
            continue
        k = kernels.setdefault(e["name"], [0.0, 0, ""])
        k[0] += e.get("dur", 0.0)
        k[1] += 1
        args = e.get("args") or {}
        k[2] = k[2] or str(args.get("hlo_op") or args.get("long_name") or "")[:160]
    busy_us = sum(v[0] for v in kernels.values())
    cats: dict[str, float] = {}
    for name, (us, _, _) in kernels.items():
        cats[kernel_category(name)] = cats.get(kernel_category(name), 0.0) + us
    ranked = sorted(kernels.items(), key=lambda kv: -kv[1][0])[:top]
    transfers: dict[str, list] = {}  # host<->device copies, on any line of the device
    for _, e in on_device:
        kind = transfer_kind(e["name"])
        if kind:
            t = transfers.setdefault(kind, [0, 0.0])
            t[0] += 1
            t[1] += e.get("dur", 0.0)
    return {
        "host_transfers_per_call": {
            k: {"count": round(n / calls, 2), "ms": round(us / 1e3 / calls, 3)}
            for k, (n, us) in transfers.items()
        },
        "trace_file": path.name,
        "lines_ms_per_call": {ln: round(us / 1e3 / calls, 2) for ln, us in lines.items()},
        "kernel_lines": sorted(streams),
        "wall_ms_per_call": round(wall_s * 1e3 / calls, 2),
        "kernel_ms_per_call": round(busy_us / 1e3 / calls, 2),
        "kernels_distinct": len(kernels),
        "kernel_launches_per_call": round(sum(v[1] for v in kernels.values()) / calls, 1),
        "by_kind_ms_per_call": {
            c: round(us / 1e3 / calls, 2) for c, us in sorted(cats.items(), key=lambda kv: -kv[1])
        },
        "top_kernels": [
            {
                "name": name[:200],
                "kind": kernel_category(name),
                "ms_per_call": round(us / 1e3 / calls, 3),
                "launches_per_call": round(n / calls, 1),
                "hlo_op": hlo,
            }
            for name, (us, n, hlo) in ranked
        ],
    }


def traced(fn: Callable[[], Any], calls: int) -> tuple[Path, float]:
    """Run ``fn`` ``calls`` times under ``jax.profiler``; (the perfetto trace, wall seconds)."""
    trace_dir = Path(tempfile.mkdtemp(prefix="bnn_ppl_trace_"))
    with jax.profiler.trace(str(trace_dir), create_perfetto_trace=True):
        t0 = time.perf_counter()
        for _ in range(calls):
            _timing.block(fn())
        wall_s = time.perf_counter() - t0
    return sorted(trace_dir.glob("plugins/profile/*/perfetto_trace.json.gz"))[-1], wall_s


def profile_gradient(compiled: Any, pot: Any, u: Any, calls: int, out: Path | None) -> dict:
    """Trace ``calls`` compiled gradient calls with ``jax.profiler`` and summarise the kernels."""
    _timing.block(compiled(u, pot.data))
    trace, wall_s = traced(lambda: compiled(u, pot.data), calls)
    rec = {"chunk": pot.chunk_size, "num_chunks": pot.num_chunks, "calls": calls}
    rec.update(kernel_profile(trace, calls, wall_s))
    if out is not None and trace.stat().st_size < 15 * 2**20:
        shutil.copy(trace, out / "resnet_trace.json.gz")
    return rec


def hmc_time(
    pot: Any, u: Any, chains: int, args: argparse.Namespace, raw_ms: float
) -> dict[str, Any]:
    """Per-gradient time of fixed-step HMC in ``mcmc.run`` (``chains`` vectorized chains), and
    its ratio to ``chains`` raw gradients of ``raw_ms`` each."""
    counter = _timing.CompileCounter()
    K, S = args.steps, args.samples
    kernel = HMC(pot, num_steps=K, step_size=1e-5, adapt_step_size=False, adapt_mass_matrix=False)
    mcmc = MCMC(
        kernel,
        num_warmup=0,
        num_samples=S,
        num_chains=chains,
        chain_method="vectorized",
        jit_model_args=True,
        progress_bar=False,
    )
    init = u if chains == 1 else jax.tree.map(lambda a: jnp.stack([a] * chains), u)
    key = jax.random.key(1)
    t0 = time.perf_counter()
    mcmc.warmup(key, *pot.args, init_params=init)
    _timing.block(mcmc.post_warmup_state)
    warmup_s, warmup_compiles = time.perf_counter() - t0, counter.compiles
    mcmc.run(key, *pot.args)
    _timing.block(mcmc.get_samples())
    setup_s = time.perf_counter() - t0
    c0 = counter.compiles
    ts = []
    for _ in range(args.hmc_runs):
        t0 = time.perf_counter()
        mcmc.run(key, *pot.args)
        _timing.block((mcmc.last_state, mcmc.get_samples()))
        ts.append((time.perf_counter() - t0) / (S * K))
    h = _timing.summary(ts)
    ratio = h["median"] / (raw_ms * chains)
    print(f"HMC step / gradient = {ratio:.3f} ({chains} chain(s), chunk {pot.chunk_size})")
    extra: dict[str, Any] = {}
    if args.profile_hmc:  # one traced mcmc.run: kernels per leapfrog gradient, host transfers

        def one_run() -> Any:
            mcmc.run(key, *pot.args)
            return mcmc.last_state, mcmc.get_samples()

        trace, wall_s = traced(one_run, 1)
        extra["loop_profile"] = kernel_profile(trace, S * K, wall_s, top=10)
    if chains > 1:  # the raw gradient of C chains in one vmapped program: HMC's own floor
        vm = vmapped_gradient(pot, u, chains, args, raw_ms)
        extra["vmapped_grad"] = vm
        extra["ratio_to_vmapped_grad"] = round(h["median"] / vm["grad_ms"], 4)
        print(f"HMC step / vmapped {chains}-chain gradient = {extra['ratio_to_vmapped_grad']:.3f}")
    return {
        **extra,
        "chunk": pot.chunk_size,
        "chains": chains,
        "chain_batching": pot.chain_batching,
        "K": K,
        "S": S,
        "runs": args.hmc_runs,
        "setup_s": round(setup_s, 1),
        "warmup_call_s": round(warmup_s, 1),
        "warmup_call_compiles": warmup_compiles,
        "first_run_compiles": c0 - warmup_compiles,
        "compile_s_by_program": counter.compile_seconds(),
        "compiles_while_timed": counter.compiles - c0,
        "ms_per_gradient_step": round(h["median"], 3),
        "raw_grad_ms": raw_ms,
        "ratio": round(ratio, 4),
    }


def vmapped_gradient(
    pot: Any, u: Any, chains: int, args: argparse.Namespace, raw_ms: float
) -> dict[str, Any]:
    """Compile and time the raw gradient of ``chains`` chains in one vmapped program (what
    vectorized HMC runs K times per transition), against ``chains`` one-chain gradients."""
    init = jax.tree.map(lambda a: jnp.stack([a] * chains), u)
    vg = jax.jit(
        jax.vmap(lambda u, d: jax.value_and_grad(pot.potential_fn_gen(d))(u), in_axes=(0, None))
    )
    lowered = vg.lower(init, pot.data)
    t0 = time.perf_counter()
    compiled = lowered.compile()
    compile_s = time.perf_counter() - t0
    ms = repeat_ms(lambda: compiled(init, pot.data), args.repeats)["median"]
    print(f"vmapped {chains}-chain gradient: compile {compile_s:.1f} s, {ms:.1f} ms")
    return {
        "chunk": pot.chunk_size,
        "chains": chains,
        "chain_batching": pot.chain_batching,
        "compile_s": round(compile_s, 2),
        "grad_ms": round(ms, 3),
        "vs_chains_x_raw": round(ms / (raw_ms * chains), 4),
        "xla_temp_mib": round(compiled.memory_analysis().temp_size_in_bytes / 2**20, 1),
    }


def chunk_arg(text: str) -> int | str:
    """A chunk size: a positive int, ``"auto"`` (the memory rule) or ``"all"`` (one chunk)."""
    if text in ("auto", "all"):
        return text
    return int(text)


# MFLOP per row of the ResNet20FRN gradient on 32x32x3 images, 3 blocks per stage, 10 classes
# (``gpu.py --flops-per-row --width W`` on a CPU: XLA's count on a GPU misses cuDNN's calls)
RESNET20_MFLOP_PER_ROW = {
    ("ResNet20FRN", 16): 230.44,
    ("ResNet20FRN", 32): 902.57,
    ("ResNet20FRN", 64): 3571.91,
}
_MODELS = {
    "resnet": "ResNet20FRN",
    "resnet_width": "ResNet20FRN",
    "precision": "ResNet20FRN",
    "resnet_one_chunk": "ResNet20FRN",
    "cnn_lstm": "CNN-LSTM",
    "mlp": "MLP 784-256-256-10",
}


def record_tables(
    entries: list[dict[str, Any]],
    width: int = 16,
    mflop_per_row: dict[tuple[str, int | None], float] | None = None,
) -> tuple[str, list[dict]]:
    """The machine and the tables of one run's records (``gpu.jsonl`` lines) for ``_record``.

    Returns ``(machine, tables)``; each table is a dict of ``table``, ``columns``, ``rows`` and
    ``key`` (a row measured again in a later run replaces this one on the page). Failed and
    skipped sections are left out. ``mflop_per_row``: ``(model, width) ->`` MFLOP per row
    (``--flops-per-row`` on a CPU) gives TFLOP/s where the run could not count them.
    """
    mflop_per_row = mflop_per_row or {}
    device = next((e for e in entries if e.get("section") == "device"), {})
    machine = (
        f"{device.get('kind', '?')}, jax {device.get('jax', '?')} {device.get('backend', '?')}"
    )
    ok = [e for e in entries if "error" not in e and "skipped" not in e]

    def num(value: Any, digits: int = 3) -> Any:
        if value is None or (isinstance(value, float) and value != value):
            return None
        return round(value, digits)

    def flops(e: dict[str, Any], model: str, w: int | None) -> tuple[Any, Any]:
        """TFLOP/s and the share of the TF32 peak (%), from the run or from ``mflop_per_row``."""
        tflops = num(e.get("tflops_model"), 2)
        if tflops is None and (model, w) in mflop_per_row:
            tflops = round(mflop_per_row[model, w] * e["rows"] / e["grad_ms"] / 1e3, 1)
        peak = device.get("tf32_peak_tflops")
        return tflops, None if tflops is None or not peak else round(100 * tflops / peak, 2)

    grad_cols = [
        "model", "width", "rows", "chunk", "precision", "parameters", "gradient (ms)",
        "compile (s)", "TFLOP/s", "TF32 peak (%)", "device peak (GiB)",
    ]  # fmt: skip
    grads = []
    for e in ok:
        if e["section"] not in _MODELS:
            continue
        model = _MODELS[e["section"]]
        w = e.get("width", width) if model == "ResNet20FRN" else None
        grads.append(
            [model, w, e["rows"], e["chunk"], e["precision"], e["params"], num(e["grad_ms"], 2),
             e["compile_s"], *flops(e, model, w), num(e.get("device_peak_gib"), 1)]
        )  # fmt: skip
    hmc_cols = [
        "chunk", "chains", "steps K", "samples S", "ms per gradient step", "raw gradient (ms)",
        "step / gradient", "set-up (s)",
    ]  # fmt: skip
    hmc = [
        [e["chunk"], e["chains"], e["K"], e["S"], num(e.get("ms_per_gradient_step"), 1),
         num(e.get("raw_grad_ms"), 1), e.get("ratio"), e.get("setup_s")]
        for e in ok
        if e["section"] == "hmc"
    ]  # fmt: skip
    vmap_cols = ["chunk", "chains", "gradient (ms)", "÷ chains × one-chain gradient", "compile (s)"]
    vmap = [
        [e["chunk"], e["chains"], num(e["grad_ms"], 1), num(e.get("vs_chains_x_raw"), 2)]
        + [e.get("compile_s")]
        for e in ok
        if e["section"] == "vmap"
    ]
    prof_cols = ["chunk", "wall (ms per call)", "kernels (ms per call)", "launches per call",
                 "by kind (ms per call)"]  # fmt: skip
    prof = [
        [e["chunk"], e["wall_ms_per_call"], e["kernel_ms_per_call"], e["kernel_launches_per_call"],
         ", ".join(f"{k} {v:g}" for k, v in e["by_kind_ms_per_call"].items())]
        for e in ok
        if e["section"] == "profile"
    ]  # fmt: skip
    tables = [
        ("gradient", grad_cols, grads, ["model", "width", "rows", "chunk", "precision"]),
        ("hmc", hmc_cols, hmc, ["chunk", "chains", "steps K", "samples S"]),
        ("vmap", vmap_cols, vmap, ["chunk", "chains"]),
        ("profile", prof_cols, prof, ["chunk"]),
    ]
    return machine, [{"table": t, "columns": c, "rows": r, "key": k} for t, c, r, k in tables if r]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=None, help="folder for gpu.jsonl")
    p.add_argument("--deadline", type=float, default=1e9, help="seconds; no section after")
    p.add_argument("--n", type=int, default=50_000)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--width", type=int, default=16)
    p.add_argument("--blocks", type=int, default=3)
    p.add_argument(
        "--chunks",
        type=chunk_arg,
        nargs="*",
        default=[512, 2048, 10_000, "auto"],
        help='rows per chunk; "auto": the potential\'s memory rule',
    )
    p.add_argument(
        "--other-chunks",
        type=chunk_arg,
        nargs="+",
        default=[1024, "all", "auto"],
        help='CNN-LSTM and MLP chunks; "all": one chunk',
    )
    p.add_argument(
        "--widths", type=int, nargs="*", default=[32, 64], help="more ResNet widths, chunk auto"
    )
    p.add_argument("--hmc-chains", type=int, nargs="*", default=[1, 3], help="HMC chain counts")
    p.add_argument("--profile-calls", type=int, default=3, help="traced gradient calls")
    p.add_argument(
        "--chain-batching",
        default="auto",
        choices=["auto", "vectorized", "sequential"],
        help="the potentials' chain_batching (what vmapped chains run)",
    )
    p.add_argument(
        "--profile-hmc", action="store_true", help="hmc: also trace one mcmc.run (its kernels)"
    )
    p.add_argument("--imdb", type=int, nargs=2, default=[25_000, 400], help="rows, tokens")
    p.add_argument("--mnist", type=int, default=60_000, help="MLP rows")
    p.add_argument("--repeats", type=int, default=5, help="timed gradient calls")
    p.add_argument("--steps", type=int, default=10, help="HMC leapfrog steps K per sample")
    p.add_argument("--samples", type=int, default=2, help="HMC samples per timed run")
    p.add_argument("--hmc-runs", type=int, default=3, help="timed mcmc.run calls")
    p.add_argument("--skip", nargs="*", default=[], help="sections to skip")
    p.add_argument("--peak-tflops", type=float, default=None, help="TF32 peak, TFLOP/s")
    p.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test (seconds)")
    _record.add_flag(p)
    p.add_argument(
        "--flops-per-row",
        action="store_true",
        help="on a CPU: XLA's FLOPs per row of the ResNet and MLP gradients, then exit",
    )
    args = p.parse_args(argv)
    if args.quick:
        args.n, args.image_size, args.width, args.blocks = 48, 8, 2, 1
        args.chunks = [min(c, 32) if isinstance(c, int) else c for c in args.chunks]
        args.widths = [min(w, 4) for w in args.widths]
        args.imdb, args.mnist = [40, 16], 64
        args.repeats, args.steps, args.samples, args.hmc_runs = 2, 2, 1, 1
    return args


def flops_per_row(model: bp.BNN, x: np.ndarray, y: np.ndarray) -> float:
    """FLOPs of one row of the full-batch ``value_and_grad``, from the HLO as lowered for the
    backend (one chunk: no loop). On a GPU XLA's count misses the convolutions and GEMMs, which
    become cuDNN/cuBLAS custom calls (a ResNet20FRN gradient over 50k images counted 0.56 of
    11.5 TFLOP on an H200), so RESULTS.md divides these counts, made on a CPU, by GPU times."""
    pot = full_batch_potential(model, x, y, chunk_size=len(x))
    u = pot.init_params(jax.random.key(0), method="network")
    vg = jax.jit(lambda u, d: jax.value_and_grad(pot.potential_fn_gen(d))(u))
    return flops(vg.lower(u, pot.data)) / len(x)


def print_flops_per_row(args: argparse.Namespace) -> int:
    if jax.default_backend() != "cpu":
        print("--flops-per-row counts on the CPU backend only (JAX_PLATFORMS=cpu)")
        return 2
    rng = np.random.default_rng(0)
    n, s = 64, args.image_size
    resnet = bp.BNN(
        ResNet20FRN(out=10, width=args.width, blocks_per_stage=args.blocks),
        bp.priors.Normal(0.2),
        bp.likelihoods.Categorical(),
    )
    mlp = bp.BNN(
        MLP(hidden=(256, 256), out=10), bp.priors.Normal(1.0), bp.likelihoods.Categorical()
    )
    y = rng.integers(0, 10, n).astype(np.int32)
    for name, model, x, rows in (
        ("resnet", resnet, rng.standard_normal((n, s, s, 3), dtype=np.float32), args.n),
        ("mlp", mlp, rng.standard_normal((n, 784), dtype=np.float32), args.mnist),
    ):
        f = flops_per_row(model, x, y)
        print(f"{name}: {f / 1e6:.2f} MFLOP per row; {f * rows / 1e12:.4g} TFLOP for {rows} rows")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.flops_per_row:
        return print_flops_per_row(args)
    _timing.numpyro_jit_fix(True)
    rec = Recorder(args.out, args.deadline)
    device = jax.devices()[0]
    print("# bnn_ppl GPU benchmark (see the module docstring)")
    print(_timing.machine())
    peak_tflops = args.peak_tflops or tf32_peak(device.device_kind)
    import flax
    import jaxlib
    import numpyro

    rec.record(
        {
            "section": "device",
            "kind": device.device_kind,
            "platform": device.platform,
            "backend": jax.default_backend(),
            "cpu_conv_workaround": jax.default_backend() == "cpu",
            "jax": jax.__version__,
            "jaxlib": jaxlib.__version__,
            "numpyro": numpyro.__version__,
            "flax": flax.__version__,
            "tf32_peak_tflops": peak_tflops,
            "not_a_gpu": device.platform != "gpu",
        }
    )
    rng = np.random.default_rng(0)
    s = args.image_size
    x = rng.standard_normal((args.n, s, s, 3), dtype=np.float32)
    y = rng.integers(0, 10, args.n).astype(np.int32)
    resnet = bp.BNN(
        ResNet20FRN(out=10, width=args.width, blocks_per_stage=args.blocks),
        bp.priors.Normal(0.2),
        bp.likelihoods.Categorical(),
    )
    common = dict(
        repeats=args.repeats,
        device=device,
        peak_tflops=peak_tflops,
        chain_batching=args.chain_batching,
    )
    best: tuple[float, Any] | None = None
    for c in args.chunks:
        if c == "all":
            continue

        def run_chunk(c: int | str = c) -> dict[str, Any]:
            nonlocal best
            r, found = gradient(resnet, x, y, c, "default", **common)
            if best is None or found[2] < best[0]:
                best = (found[2], found)
            return r

        rec.section("resnet", run_chunk)
    if best is not None:
        pot, u, ms, compiled = best[1]
        c = pot.chunk_size
        if "profile" not in args.skip:
            rec.section(
                "profile",
                lambda: profile_gradient(compiled, pot, u, args.profile_calls, args.out),
            )
        if "vmap" not in args.skip:
            for chains in args.hmc_chains:
                rec.section("vmap", lambda ch=chains: vmapped_gradient(pot, u, ch, args, ms))
        for chains in args.hmc_chains:
            if "hmc" not in args.skip:
                rec.section("hmc", lambda ch=chains: hmc_time(pot, u, ch, args, ms))
        del pot, u, compiled
        best = None
        for prec in ("float32", "bfloat16"):
            if "precision" not in args.skip:
                rec.section(
                    "precision",
                    lambda p=prec: gradient(resnet, x, y, c, p, **common, count_flops=False)[0],
                )
    for w in args.widths:
        if "widths" not in args.skip:
            wide = bp.BNN(
                ResNet20FRN(out=10, width=w, blocks_per_stage=args.blocks),
                bp.priors.Normal(0.2),
                bp.likelihoods.Categorical(),
            )
            rec.section(
                "resnet_width",
                lambda m=wide: gradient(m, x, y, "auto", "default", **common)[0],
                width=w,
            )
    n_imdb, t_imdb = args.imdb
    tokens = rng.integers(0, 20_000, (n_imdb, t_imdb)).astype(np.int32)
    labels = rng.integers(0, 2, n_imdb).astype(np.int32)
    lstm = bp.BNN(CNNLSTM(out=2), bp.priors.Normal(1.0), bp.likelihoods.Categorical())
    mnist = rng.standard_normal((args.mnist, 784), dtype=np.float32)
    digits = rng.integers(0, 10, args.mnist).astype(np.int32)
    mlp = bp.BNN(
        MLP(hidden=(256, 256), out=10), bp.priors.Normal(1.0), bp.likelihoods.Categorical()
    )
    for name, model, xs, ys in (("cnn_lstm", lstm, tokens, labels), ("mlp", mlp, mnist, digits)):
        if name in args.skip:
            continue
        for c in args.other_chunks:
            c = len(xs) if c == "all" else c
            rec.section(
                name, lambda m=model, a=xs, b=ys, c=c: gradient(m, a, b, c, "default", **common)[0]
            )
    if "one_chunk" not in args.skip:
        rec.section(
            "resnet_one_chunk", lambda: gradient(resnet, x, y, args.n, "default", **common)[0]
        )
    rec.record({"section": "done", "total_s": round(time.perf_counter() - rec.t0, 1)})
    if args.record:
        standard = (args.image_size, args.blocks) == (32, 3)
        flops = RESNET20_MFLOP_PER_ROW if standard else None
        machine, tables = record_tables(rec.entries, width=args.width, mflop_per_row=flops)
        for table in tables:
            _record.record(**table, script="gpu.py", machine=machine, to=args.record)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: ResNet20FRN full-batch gradient over 50,000 x 32x32x3 on one GPU.

Izmailov et al.'s CIFAR-10 setting (ResNet-20 with FRN and swish, 274k parameters) as one
full-batch ``value_and_grad`` of our potential on ONE device, from one process. Prints:

* the time of one gradient (median over ``--repeats`` calls, compilation excluded) and of the
  compilation;
* FLOPs counted by XLA (``jax.jit(...).lower(...).cost_analysis()``) and the achieved TFLOP/s.
  XLA's cost analysis counts a ``while`` body once, whatever its trip count, and the
  potential's chunk loop is a ``lax.scan``; so the script scales the loop body by the number of
  chunks: ``executed = outside + num_chunks * (lowered - outside)``, with ``outside`` the cost of
  the prior's ``value_and_grad`` (the part of the program outside the loop). ``executed``
  is what the compiled chunk loop executes; ``model`` FLOPs are those of one chunk of ``c`` rows
  lowered without a loop, times rows / c - the useful work (the two agree when the loop adds
  nothing; they differed when the chunk body was rematerialised). Both rates are printed;
* the time per gradient inside ``mcmc.run`` of fixed-step HMC (``bnn_ppl.inference.HMC(pot,
  num_steps=K)``, no adaptation; NumPyro's ``maybe_jit`` memoised so the sampling loop is not
  recompiled per run, see ``_timing.py``) and its ratio to the raw gradient;
* the device's peak memory where the backend reports it (``memory_stats()``).

On a CPU this runs too (``--quick``: tiny sizes), but the numbers are not GPU numbers: the
script says so.

Usage::

    python benchmarks/gpu.py                # N=50k, chunk 1000, width 16, on jax.devices()[0]
    python benchmarks/gpu.py --chunk-size 5000 --precision highest
    python benchmarks/gpu.py --quick        # smoke test (seconds, any backend)
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time

import _timing
import jax
import jax.numpy as jnp
import numpy as np
from numpyro.infer import MCMC

import bnn_ppl as bp
from bnn_ppl.inference import HMC, full_batch_potential
from bnn_ppl.models import ResNet20FRN

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
    cost = lowered.cost_analysis()
    if isinstance(cost, list | tuple):  # older jax: one dict per device program
        cost = cost[0]
    return float(cost.get("flops", float("nan"))) if cost else float("nan")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=50_000)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--width", type=int, default=16)
    p.add_argument("--blocks", type=int, default=3)
    p.add_argument("--chunk-size", type=int, default=1000)
    p.add_argument(
        "--precision",
        choices=["default", "high", "highest"],
        default="default",
        help="jax_default_matmul_precision (default: TF32 convs on Ampere+ GPUs)",
    )
    p.add_argument("--repeats", type=int, default=10, help="timed gradient calls")
    p.add_argument("--steps", type=int, default=10, help="HMC leapfrog steps K per sample")
    p.add_argument("--samples", type=int, default=2, help="HMC samples per timed run")
    p.add_argument("--hmc-runs", type=int, default=3, help="timed mcmc.run calls")
    p.add_argument(
        "--peak-tflops",
        type=float,
        default=None,
        help="the device's TF32 peak (default: looked up from the device kind, if known)",
    )
    p.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test (seconds)")
    args = p.parse_args(argv)
    if args.quick:
        args.n, args.image_size, args.width, args.blocks, args.chunk_size = 48, 8, 2, 1, 16
        args.repeats, args.steps, args.samples, args.hmc_runs = 2, 2, 1, 1
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    _timing.numpyro_jit_fix(True)
    counter = _timing.CompileCounter()
    t_start = time.perf_counter()
    device = jax.devices()[0]
    print("# bnn_ppl GPU benchmark: ResNet20FRN full-batch gradient on one device")
    print(_timing.machine())
    print(f"# device: {device.device_kind} ({device.platform}); precision {args.precision}")
    if device.platform != "gpu":
        print(f"# NOTE: not a GPU ({device.platform}): these are not GPU numbers.")
    rng = np.random.default_rng(0)
    s = args.image_size
    x = rng.standard_normal((args.n, s, s, 3), dtype=np.float32)
    y = rng.integers(0, 10, args.n).astype(np.int32)
    model = bp.BNN(
        ResNet20FRN(out=10, width=args.width, blocks_per_stage=args.blocks),
        bp.priors.Normal(0.2),
        bp.likelihoods.Categorical(),
    )
    precision = (
        contextlib.nullcontext()
        if args.precision == "default"
        else jax.default_matmul_precision(args.precision)
    )
    with precision:
        pot = full_batch_potential(model, x, y, devices=[device], chunk_size=args.chunk_size)
        u = jax.tree.map(jnp.asarray, pot.init_params(jax.random.key(0), method="network"))
        vg = jax.jit(lambda u, d: jax.value_and_grad(pot.potential_fn_gen(d))(u))
        lowered = vg.lower(u, pot.data)
        t0 = time.perf_counter()
        compiled = lowered.compile()
        compile_s = time.perf_counter() - t0

        # ---- FLOPs: loop body counted once by XLA -> scale it by the number of chunks
        spec = pot._x_spec
        prior_vg = jax.jit(
            jax.value_and_grad(
                lambda u: -model.prior_scale * model.log_prior(pot.constrain(u)[0], spec)
            )
        )
        outside = flops(prior_vg.lower(u))
        executed = outside + pot.num_chunks * (flops(lowered) - outside)
        one = full_batch_potential(
            model,
            x[: pot.chunk_size],
            y[: pot.chunk_size],
            devices=[device],
            chunk_size=pot.chunk_size,
        )
        one_vg = jax.jit(lambda u, d: jax.value_and_grad(one.potential_fn_gen(d))(u))
        rows = pot.num_chunks * pot.chunk_size
        model_flops = outside + rows / pot.chunk_size * (flops(one_vg.lower(u, one.data)) - outside)

        # ---- the gradient
        _timing.block(compiled(u, pot.data))
        grad_s = [0.0] * args.repeats
        for i in range(args.repeats):
            t0 = time.perf_counter()
            _timing.block(compiled(u, pot.data))
            grad_s[i] = time.perf_counter() - t0
        g = _timing.summary(grad_s)

        # ---- HMC around it
        K, S = args.steps, args.samples
        mcmc = MCMC(
            HMC(pot, num_steps=K, step_size=1e-5, adapt_step_size=False, adapt_mass_matrix=False),
            num_warmup=0,
            num_samples=S,
            jit_model_args=True,
            progress_bar=False,
        )
        key = jax.random.key(1)
        t0 = time.perf_counter()
        mcmc.warmup(key, *pot.args, init_params=u)
        mcmc.run(key, *pot.args)
        _timing.block(mcmc.get_samples())
        hmc_setup_s = time.perf_counter() - t0
        c0 = counter.compiles
        hmc_s = []
        for _ in range(args.hmc_runs):
            t0 = time.perf_counter()
            mcmc.run(key, *pot.args)
            _timing.block((mcmc.last_state, mcmc.get_samples()))
            hmc_s.append((time.perf_counter() - t0) / (S * K))
        hmc_compiles = counter.compiles - c0
    h = _timing.summary(hmc_s)
    stats = device.memory_stats() or {}
    peak = stats.get("peak_bytes_in_use")
    tflops = executed / (g["median"] / 1e3) / 1e12
    useful = model_flops / (g["median"] / 1e3) / 1e12
    print(
        f"# N={args.n} {s}x{s}x3, width {args.width}, {args.blocks} blocks/stage: "
        f"{pot.num_params} parameters; {pot.num_chunks} chunk(s) of {pot.chunk_size} rows "
        f"({rows - args.n} padding rows)"
    )
    print(
        f"compile (value_and_grad): {compile_s:.1f} s; "
        f"XLA temp {compiled.memory_analysis().temp_size_in_bytes / 2**20:.1f} MiB"
        + (f"; device peak memory {peak / 2**30:.2f} GiB" if peak else "")
    )
    print(
        f"gradient: median {g['median']:.1f} ms, min {g['min']:.1f} ms "
        f"(IQR {g['q1']:.1f}-{g['q3']:.1f}, {args.repeats} calls)"
    )
    print(
        f"FLOPs per gradient: executed {executed / 1e9:.4g} GFLOP (chunk loop as compiled), model "
        f"{model_flops / 1e9:.4g} GFLOP (one chunk, no loop); the lowered program as XLA counts it "
        f"{flops(lowered) / 1e9:.4g} GFLOP (loop body once)"
    )
    print(f"achieved: {tflops:.4g} TFLOP/s executed, {useful:.4g} TFLOP/s model")
    peak_tflops = args.peak_tflops or tf32_peak(device.device_kind)
    if device.platform == "gpu" and peak_tflops:
        frac = tflops / peak_tflops
        print(
            f"fraction of the TF32 peak ({peak_tflops:g} TFLOP/s): {frac:.1%} executed, "
            f"{useful / peak_tflops:.1%} model   goal >= 40% -> "
            + ("met" if frac >= 0.4 else "NOT met")
        )
    elif device.platform == "gpu":
        print(f"TF32 peak of {device.device_kind!r} unknown: pass --peak-tflops")
    print(
        f"HMC (K={K} x S={S} per run, {args.hmc_runs} runs; setup {hmc_setup_s:.1f} s; "
        f"compilations while timed: {hmc_compiles}): {h['median']:.1f} ms per gradient -> "
        f"HMC step / gradient = {h['median'] / g['median']:.3f}"
    )
    print(f"# total {time.perf_counter() - t_start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: the cost of HMC around the gradient - per-gradient time in ``mcmc.run`` / raw grad.

For an MLP and a LeNet-5 BNN, prints (from ONE process) the time per gradient of

  (raw)   ``pot.value_and_grad(u)``: the jitted ``(value, grad)`` of our full-batch potential,
          data as jit arguments, one call at a time;
  (loop)  the same ``value_and_grad`` K times inside one jitted ``lax.fori_loop`` (no HMC: what
          the gradient costs when it is not a standalone call);
  (hmc)   ``MCMC(bnn_ppl.inference.HMC(pot, num_steps=K, step_size=h), num_warmup=0,
          num_samples=S, jit_model_args=True).run(...)``: wall time / (S * K) - the leapfrog
          steps, momentum draws, energies, accept/reject and sample collection included;

and the ratios hmc / raw (the issue's target: <= 1.05) and hmc / loop. Candidates are timed
round-robin (order rotated every round), medians reported. Compilation is kept out: every
candidate runs once first, NumPyro's ``maybe_jit`` is memoised (NumPyro 0.22 recompiles its
sampling loop on every ``mcmc.run`` otherwise, see ``_timing.py``), and a ``jax.monitoring``
counter checks that the timed section compiles nothing.

A caveat the numbers need (see RESULTS.md): on the CPU backend a standalone call whose XLA temp
buffer exceeds glibc's 32 MiB mmap threshold page-faults that buffer in on every call; inside a
loop (or HMC) it is allocated once. So hmc / raw can be < 1; hmc / loop is the stricter ratio.

Usage::

    python benchmarks/hmc_overhead.py            # MLP 50-256-256-1 n=10k; LeNet-5 n=2k (28x28)
    python benchmarks/hmc_overhead.py --quick    # tiny MLP only: a smoke test
"""

from __future__ import annotations

import argparse
import sys
import time

import _record
import _timing
import jax
import jax.numpy as jnp
import numpy as np
from numpyro.infer import MCMC

import bnn_ppl as bp
from bnn_ppl.inference import HMC, full_batch_potential
from bnn_ppl.models import MLP, LeNet5


def problems(args: argparse.Namespace) -> dict[str, tuple[bp.BNN, np.ndarray, np.ndarray]]:
    """name -> (model, x, y): a regression MLP and a 10-class LeNet-5 on random data."""
    rng = np.random.default_rng(args.seed)
    out = {}
    if "mlp" in args.models:
        x = rng.standard_normal((args.mlp_n, args.mlp_d)).astype(np.float32)
        y = np.sin(x @ rng.standard_normal(args.mlp_d) / np.sqrt(args.mlp_d)).astype(np.float32)
        model = bp.BNN(
            MLP(hidden=(args.mlp_width,) * 2, out=1),
            bp.priors.Normal(1.0),
            bp.likelihoods.Gaussian(0.5),
        )
        out[f"MLP {args.mlp_d}-{args.mlp_width}-{args.mlp_width}-1, n={args.mlp_n}"] = (model, x, y)
    if "lenet" in args.models:
        s = args.lenet_size
        x = rng.standard_normal((args.lenet_n, s, s, 1)).astype(np.float32)
        y = rng.integers(0, 10, args.lenet_n).astype(np.int32)
        model = bp.BNN(LeNet5(out=10), bp.priors.Normal(0.3), bp.likelihoods.Categorical())
        out[f"LeNet-5 {s}x{s}x1, n={args.lenet_n}"] = (model, x, y)
    return out


def measure(
    name: str,
    model: bp.BNN,
    x: np.ndarray,
    y: np.ndarray,
    args: argparse.Namespace,
    counter: _timing.CompileCounter,
) -> dict[str, float]:
    pot = full_batch_potential(model, x, y, chunk_size=args.chunk_size)
    u = jax.tree.map(jnp.asarray, pot.init_params(jax.random.key(args.seed), method="network"))
    K, S = args.steps, args.samples
    t0 = time.perf_counter()
    loop = _timing.grad_loop(pot, K)
    mcmc = MCMC(
        HMC(
            pot,
            num_steps=K,
            step_size=args.step_size,
            adapt_step_size=False,
            adapt_mass_matrix=False,
        ),
        num_warmup=0,
        num_samples=S,
        jit_model_args=True,
        progress_bar=False,
    )
    key = jax.random.key(args.seed + 1)
    mcmc.warmup(key, *pot.args, init_params=u)

    def run_hmc() -> None:
        mcmc.run(key, *pot.args)
        _timing.block((mcmc.last_state, mcmc.get_samples()))

    jobs = {
        "raw": (lambda: _timing.block(pot.value_and_grad(u)), 1),
        "loop": (lambda: _timing.block(loop(u, pot.data)), K),
        "hmc": (run_hmc, S * K),
    }
    for fn, _ in jobs.values():  # compile everything
        fn()
    setup = time.perf_counter() - t0
    c0 = counter.compiles
    times = _timing.round_robin(jobs, rounds=args.rounds, repeats=1)
    compiles = counter.compiles - c0
    steps = int(np.asarray(mcmc.last_state.num_steps))
    accept = float(mcmc.last_state.mean_accept_prob)
    print(
        f"\n## {name}: {pot.num_params} parameters, {pot.num_chunks} chunk(s) of "
        f"{pot.chunk_size} rows; HMC {S} samples x {steps} leapfrog steps (step size "
        f"{args.step_size:g}, mean accept {accept:.2f}); setup+compile {setup:.1f} s; "
        f"compilations in the timed section: {compiles}"
        + ("" if compiles == 0 else "  <-- WARNING")
    )
    med = _timing.print_table(times, "per gradient")
    ratio = {
        "hmc/raw": med["hmc"] / med["raw"],
        "hmc/loop": med["hmc"] / med["loop"],
        "loop/raw": med["loop"] / med["raw"],
        "hmc/raw (min)": min(times["hmc"]) / min(times["raw"]),
    }
    print(
        "ratios: "
        + ", ".join(f"{k} = {v:.3f}" for k, v in ratio.items())
        + f"   target hmc/raw <= 1.05 -> {'met' if ratio['hmc/raw'] <= 1.05 else 'NOT met'}"
    )
    return {
        "parameters": pot.num_params,
        **{f"{k} (ms)": round(v, 3) for k, v in med.items()},
        **{k: round(v, 3) for k, v in ratio.items()},
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=["mlp", "lenet"], choices=["mlp", "lenet"])
    p.add_argument("--mlp-n", type=int, default=10_000)
    p.add_argument("--mlp-d", type=int, default=50)
    p.add_argument("--mlp-width", type=int, default=256)
    p.add_argument("--lenet-n", type=int, default=2_000)
    p.add_argument("--lenet-size", type=int, default=28, help="image side (28: MNIST)")
    p.add_argument("--chunk-size", type=int, default=None, help="default: the library's (1024)")
    p.add_argument("--steps", type=int, default=10, help="leapfrog steps K per sample")
    p.add_argument("--samples", type=int, default=2, help="samples S per timed mcmc.run")
    p.add_argument("--step-size", type=float, default=1e-4)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test (seconds)")
    _record.add_flag(p)
    args = p.parse_args(argv)
    if args.quick:
        args.mlp_n, args.mlp_d, args.mlp_width = 200, 5, 8
        args.models, args.steps, args.samples, args.rounds = ["mlp"], 2, 1, 2
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    _timing.numpyro_jit_fix(True)
    counter = _timing.CompileCounter()
    t0 = time.perf_counter()
    print("# bnn_ppl HMC overhead benchmark: per-gradient time in mcmc.run / raw value_and_grad")
    print(_timing.machine())
    print(f"# rounds={args.rounds}, K={args.steps} steps x S={args.samples} samples per run")
    ratios = {
        name: measure(name, *problem, args, counter) for name, problem in problems(args).items()
    }
    print(
        "\nsummary (medians): "
        + "; ".join(
            f"{name}: hmc/raw {r['hmc/raw']:.3f}, hmc/loop {r['hmc/loop']:.3f}"
            for name, r in ratios.items()
        )
    )
    print(f"# total {time.perf_counter() - t0:.0f} s")
    if args.record:
        columns, rows = _record.table_of("problem", ratios)
        notes = f"Per gradient; K = {args.steps} leapfrog steps x S = {args.samples} samples."
        _record.record("hmc_overhead", columns, rows, notes=notes, to=args.record)
    return 0


if __name__ == "__main__":
    sys.exit(main())

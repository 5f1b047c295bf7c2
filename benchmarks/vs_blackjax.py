"""Benchmark: time per HMC transition on the same potential, BlackJAX's ``hmc`` vs ours (NumPyro's).

One process, same potential (``pot.potential_fn_gen(data)`` of our full-batch potential, data as
jit arguments everywhere), same K leapfrog steps of the same step size, identity mass matrix, no
adaptation, S transitions per timed call, the positions of all S transitions kept:

  (blackjax)       ``blackjax.hmc(logdensity, h, ones, K).step`` in a jitted ``lax.scan``;
  (ours, run)      ``MCMC(bnn_ppl.inference.HMC(pot, num_steps=K, step_size=h), num_warmup=0,
                   jit_model_args=True).run(...)`` - what a user runs (NumPyro's ``MCMC`` loop,
                   ``fori_collect``, ``postprocess_fn``, extra fields);
  (ours, kernel)   NumPyro's functional ``numpyro.infer.hmc.hmc`` sample function (the kernel
                   our ``HMC`` runs) in the same jitted ``lax.scan`` as BlackJAX: the kernel
                   alone, without ``MCMC``'s loop;
  (grad)           one jitted ``value_and_grad`` K times in a ``fori_loop`` (the floor).

Prints medians per transition and the ratios ours / blackjax (target <= 1.0). The two
implementations do the same arithmetic per leapfrog step (one gradient, two half-kicks, one
drift; the gradient at the end of a step is reused by the next); the script prints both mean
acceptance rates (different momentum draws, so not the same chain).
Compilation is kept out (``_timing.numpyro_jit_fix``, checked with a compile counter).

BlackJAX is an optional dependency of this benchmark only: without it the script says so and
exits 0.

Usage::

    python benchmarks/vs_blackjax.py            # MLP sizes: tiny (overhead) and 2x256, n=10k
    python benchmarks/vs_blackjax.py --quick    # smoke test (seconds)
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import _record
import _timing
import jax
import jax.numpy as jnp
import numpy as np
from numpyro.infer import MCMC
from numpyro.infer.hmc import hmc as numpyro_hmc

import bnn_ppl as bp
from bnn_ppl.inference import HMC, FullBatchPotential, full_batch_potential
from bnn_ppl.models import MLP


def blackjax_chain(pot: FullBatchPotential, step_size: float, num_steps: int, num_samples: int):
    """Jitted ``(key, position, data) -> (final state, positions)`` with BlackJAX's HMC."""
    import blackjax

    @jax.jit
    def run(key: jax.Array, position: dict, data: Any) -> tuple[Any, Any]:
        def logdensity(z: dict) -> jax.Array:
            return -pot.potential_fn_gen(data)(z)

        inv_mass = jnp.ones(sum(v.size for v in jax.tree.leaves(position)))
        kernel = blackjax.hmc(logdensity, step_size, inv_mass, num_steps)
        state = kernel.init(position)

        def one(state: Any, k: jax.Array) -> tuple[Any, Any]:
            state, info = kernel.step(k, state)
            return state, (state.position, info.acceptance_rate)

        return jax.lax.scan(one, state, jax.random.split(key, num_samples))

    return run


def numpyro_kernel_chain(
    pot: FullBatchPotential, step_size: float, num_steps: int, num_samples: int
):
    """The same scan around NumPyro's functional HMC kernel (what bnn_ppl's ``HMC`` runs)."""
    init_kernel, sample_kernel = numpyro_hmc(potential_fn_gen=pot.potential_fn_gen, algo="HMC")

    def init(key: jax.Array, position: dict, data: Any) -> Any:
        return init_kernel(
            position,
            num_warmup=0,
            step_size=step_size,
            num_steps=num_steps,
            trajectory_length=None,
            adapt_step_size=False,
            adapt_mass_matrix=False,
            model_args=(data,),
            rng_key=key,
        )

    @jax.jit
    def run(state: Any, data: Any) -> tuple[Any, Any]:
        def one(state: Any, _: None) -> tuple[Any, Any]:
            state = sample_kernel(state, model_args=(data,))
            return state, (state.z, state.accept_prob)

        return jax.lax.scan(one, state, None, length=num_samples)

    return init, run


def problems(args: argparse.Namespace) -> dict[str, tuple[bp.BNN, np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(args.seed)
    out = {}
    for n, d, width in args.sizes:
        x = rng.standard_normal((n, d)).astype(np.float32)
        y = np.sin(x @ rng.standard_normal(d) / np.sqrt(d)).astype(np.float32)
        model = bp.BNN(
            MLP(hidden=(width, width), out=1), bp.priors.Normal(1.0), bp.likelihoods.Gaussian(0.5)
        )
        out[f"MLP {d}-{width}-{width}-1, n={n}"] = (model, x, y)
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
    K, S, h = args.steps, args.samples, args.step_size
    key = jax.random.key(args.seed + 1)
    t0 = time.perf_counter()

    bj = blackjax_chain(pot, h, K, S)
    np_init, np_run = numpyro_kernel_chain(pot, h, K, S)
    np_state = np_init(key, u, pot.data)
    mcmc = MCMC(
        HMC(pot, num_steps=K, step_size=h, adapt_step_size=False, adapt_mass_matrix=False),
        num_warmup=0,
        num_samples=S,
        jit_model_args=True,
        progress_bar=False,
    )
    mcmc.warmup(key, *pot.args, init_params=u)

    grads = _timing.grad_loop(pot, K)

    def run_mcmc() -> None:
        mcmc.run(key, *pot.args)
        _timing.block((mcmc.last_state, mcmc.get_samples()))

    jobs = {
        "blackjax": (lambda: _timing.block(bj(key, u, pot.data)), S),
        "ours, run": (run_mcmc, S),
        "ours, kernel": (lambda: _timing.block(np_run(np_state, pot.data)), S),
        "grad only": (lambda: _timing.block(grads(u, pot.data)), 1),
    }
    for fn, _ in jobs.values():
        fn()
    setup = time.perf_counter() - t0
    (_, (_, acc_bj)), (_, (_, acc_np)) = bj(key, u, pot.data), np_run(np_state, pot.data)
    c0 = counter.compiles
    times = _timing.round_robin(jobs, rounds=args.rounds)
    compiles = counter.compiles - c0
    print(
        f"\n## {name}: {pot.num_params} parameters, {pot.num_chunks} chunk(s) of "
        f"{pot.chunk_size} rows; K={K} leapfrog steps of {h:g}, S={S} transitions per call; "
        f"setup+compile {setup:.1f} s; compilations in the timed section: {compiles}"
        + ("" if compiles == 0 else "  <-- WARNING")
    )
    print(
        f"# mean acceptance: blackjax {float(jnp.mean(acc_bj)):.3f}, numpyro kernel "
        f"{float(jnp.mean(acc_np)):.3f} (different momentum draws: not the same chain)"
    )
    med = _timing.print_table(times, "per transition")
    r = {
        "run/blackjax": med["ours, run"] / med["blackjax"],
        "kernel/blackjax": med["ours, kernel"] / med["blackjax"],
        "blackjax/grad": med["blackjax"] / med["grad only"],
        "run/grad": med["ours, run"] / med["grad only"],
    }
    print(
        "ratios: "
        + ", ".join(f"{k} = {v:.3f}" for k, v in r.items())
        + f"   target ours/blackjax <= 1.0 -> {'met' if r['run/blackjax'] <= 1.0 else 'NOT met'}"
    )
    return {
        "parameters": pot.num_params,
        **{f"{k} (ms)": round(v, 3) for k, v in med.items()},
        **{k: round(v, 3) for k, v in r.items()},
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--sizes",
        type=lambda s: tuple(int(v) for v in s.split(",")),
        nargs="+",
        default=[(1000, 10, 32), (10_000, 50, 256)],
        help="n,d,width per problem",
    )
    p.add_argument("--chunk-size", type=int, default=None)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--samples", type=int, default=10)
    p.add_argument("--step-size", type=float, default=1e-4)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test (seconds)")
    _record.add_flag(p)
    args = p.parse_args(argv)
    if args.quick:
        args.sizes, args.steps, args.samples, args.rounds = [(100, 3, 4)], 2, 2, 2
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        import blackjax
    except ImportError:
        print("blackjax is not installed (pip install blackjax): nothing to compare, skipping.")
        return 0
    _timing.numpyro_jit_fix(True)
    counter = _timing.CompileCounter()
    t0 = time.perf_counter()
    print("# bnn_ppl vs BlackJAX: time per HMC transition on the same potential")
    print(_timing.machine())
    print(f"# blackjax {blackjax.__version__}; rounds={args.rounds}")
    ratios = {name: measure(name, *pr, args, counter) for name, pr in problems(args).items()}
    print(
        "\nsummary (medians): "
        + "; ".join(
            f"{name}: ours(run)/blackjax {r['run/blackjax']:.3f}, ours(kernel)/blackjax "
            f"{r['kernel/blackjax']:.3f}"
            for name, r in ratios.items()
        )
    )
    print(f"# total {time.perf_counter() - t0:.0f} s")
    if args.record:
        columns, rows = _record.table_of("problem", ratios)
        notes = (
            f"Per HMC transition; K = {args.steps} leapfrog steps, S = {args.samples} "
            f"transitions per call; blackjax {blackjax.__version__}."
        )
        _record.record("vs_blackjax", columns, rows, notes=notes, to=args.record)
    return 0


if __name__ == "__main__":
    sys.exit(main())

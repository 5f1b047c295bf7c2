"""Benchmark: C vectorized chains' gradient, batched convolutions vs one chain after another.

NumPyro's ``chain_method="vectorized"`` (the drivers' default) and deep ensembles ``jax.vmap``
the potential over the chains' parameters. A convolution vmapped over its kernel becomes a
grouped convolution (one group per chain); on one H200 the vmapped gradient of 3 ResNet-20
chains over 50,000 CIFAR-shaped rows took 15,054 ms against 526 ms for one chain, **9.5x** three
one-chain gradients (``benchmarks/gpu.py``, RESULTS.md). ``full_batch_potential(...,
chain_batching=...)`` decides what the vmap does:

* ``vectorized`` - JAX's own batching (grouped convolutions);
* ``sequential`` - ``jax.custom_batching.sequential_vmap``: each chain's value and gradient is
  the one-chain program, one chain after another, inside the one compiled program;
* ``auto`` (the default) - sequential when the network has a convolution.

Candidates, in one process, interleaved (order rotated every round), per call of the 3-chain
vmapped ``value_and_grad`` (compiled before timing), for a ResNet20FRN and an MLP (and with
``--models``, LeNet-5 on MNIST-shaped inputs):

* ``vectorized``, ``sequential``, and ``C x one chain`` (the one-chain gradient called C times:
  the floor of the sequential path).

Also checked: each chain's value equals the one-chain value (printed: the largest relative
difference), and the compiled program of ``auto`` (the default) is ``sequential``'s for the
ResNet and ``vectorized``'s for the MLP.

Usage::

    python benchmarks/chain_batching.py            # ResNet20FRN width 16, 512 rows 32x32x3
    python benchmarks/chain_batching.py --quick    # tiny sizes: a smoke test
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import _timing
import jax
import numpy as np

import bnn_ppl as bp
from bnn_ppl.inference import full_batch_potential
from bnn_ppl.models import MLP, LeNet5, ResNet20FRN


def problems(args: argparse.Namespace) -> dict[str, tuple[bp.BNN, np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(0)
    s = args.image_size
    x_img = rng.standard_normal((args.n, s, s, 3), dtype=np.float32)
    x_tab = rng.standard_normal((args.n, 50), dtype=np.float32)
    x_mnist = rng.standard_normal((args.n, 28, 28, 1), dtype=np.float32)
    y = rng.integers(0, 10, args.n).astype(np.int32)
    resnet = ResNet20FRN(out=10, width=args.width, blocks_per_stage=args.blocks)
    found = {
        f"ResNet20FRN width {args.width}, {args.blocks} block(s)/stage, {args.n}x{s}x{s}x3": (
            bp.BNN(resnet, bp.priors.Normal(0.2), bp.likelihoods.Categorical()),
            x_img,
            y,
        ),
        f"LeNet5 {args.n}x28x28x1": (
            bp.BNN(LeNet5(out=10), bp.priors.Normal(0.3), bp.likelihoods.Categorical()),
            x_mnist,
            y,
        ),
        f"MLP 50-256-256-10, {args.n} rows": (
            bp.BNN(
                MLP(hidden=(256, 256), out=10), bp.priors.Normal(1.0), bp.likelihoods.Categorical()
            ),
            x_tab,
            y,
        ),
    }
    return {k: v for k, v in found.items() if k.split()[0].lower() in args.models}


def vmapped(pot: Any) -> Any:
    return jax.jit(
        jax.vmap(lambda u, d: jax.value_and_grad(pot.potential_fn_gen(d))(u), in_axes=(0, None))
    )


def measure(
    name: str, model: bp.BNN, x: np.ndarray, y: np.ndarray, args: argparse.Namespace
) -> dict:
    C = args.chains
    pots = {
        mode: full_batch_potential(model, x, y, chunk_size=args.chunk_size, chain_batching=mode)
        for mode in ("vectorized", "sequential", "auto")
    }
    u = pots["vectorized"].init_params(jax.random.key(0), num_chains=C, method="network")
    fns = {mode: vmapped(p) for mode, p in pots.items()}
    texts = {m: f.lower(u, pots[m].data).as_text() for m, f in fns.items()}
    auto_is = [m for m in ("sequential", "vectorized") if texts[m] == texts["auto"]]
    one = pots["vectorized"].value_and_grad
    chains = [jax.tree.map(lambda a, c=c: a[c], u) for c in range(C)]
    singles = [float(one(uc)[0]) for uc in chains]
    rel = {}
    for mode in ("vectorized", "sequential"):
        v = np.asarray(_timing.block(fns[mode](u, pots[mode].data))[0])
        rel[mode] = float(np.max(np.abs(v - singles) / np.abs(singles)))

    jobs = {
        "vectorized": (lambda: _timing.block(fns["vectorized"](u, pots["vectorized"].data)), 1),
        "sequential": (lambda: _timing.block(fns["sequential"](u, pots["sequential"].data)), 1),
        f"{C} x one chain": (lambda: _timing.block([one(uc) for uc in chains]), 1),
    }
    times = _timing.round_robin(jobs, args.rounds)
    print(f"\n## {name}: {C} chains, chunk {pots['auto'].chunk_size} x {pots['auto'].num_chunks}")
    print(f"# chain_batching='auto' compiles the {'/'.join(auto_is) or '?'} program")
    print(
        "# value vs one chain, largest relative difference: "
        + ", ".join(f"{m} {r:.1e}" for m, r in rel.items())
    )
    med = _timing.print_table(times, "per 3-chain gradient")
    ratio = med["vectorized"] / med["sequential"]
    floor = med["sequential"] / med[f"{C} x one chain"]
    print(
        f"ratios: vectorized / sequential = {ratio:.2f}, "
        f"sequential / ({C} x one chain) = {floor:.2f}"
    )
    return {"vectorized/sequential": ratio, "sequential/floor": floor, "auto": auto_is}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=512)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--width", type=int, default=16)
    p.add_argument("--blocks", type=int, default=3)
    p.add_argument("--chains", type=int, default=3)
    p.add_argument("--chunk-size", type=int, default=None)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument(
        "--models",
        nargs="+",
        default=["resnet20frn", "mlp"],
        choices=["resnet20frn", "lenet5", "mlp"],
    )
    p.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test")
    args = p.parse_args(argv)
    if args.quick:
        args.n, args.image_size, args.width, args.blocks, args.rounds = 32, 8, 2, 1, 2
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print("# bnn_ppl chain-batching benchmark (see the module docstring)")
    print(_timing.machine())
    summary = {name: measure(name, *prob, args) for name, prob in problems(args).items()}
    print(
        "\nsummary: "
        + "; ".join(
            f"{name}: vectorized/sequential {r['vectorized/sequential']:.2f}, "
            f"auto = {'/'.join(r['auto'])}"
            for name, r in summary.items()
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

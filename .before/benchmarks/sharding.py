"""shard_map + psum (ours) vs automatic (GSPMD) partitioning of the chunked log-likelihood.

Both compute the same masked, chunked sum over a batch-sharded data set; the script checks they
agree, then times ``value_and_grad`` of each, interleaved round-robin, and prints medians and
the ratio auto / shard_map. It also reports whether the compiled auto program contains an
all-reduce at all (if the partitioner gave up it would silently run on one device).

Run with simulated CPU devices (the flag must be set before JAX starts)::

    XLA_FLAGS=--xla_force_host_platform_device_count=4 python benchmarks/sharding.py
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import bnn_ppl as bp
from bnn_ppl.inference import full_batch_potential
from bnn_ppl.inference.potential import DATA_AXIS
from bnn_ppl.models import MLP


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=20_000)
    p.add_argument("--d", type=int, default=50)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--chunk-size", type=int, default=1024)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--quick", action="store_true", help="tiny sizes, for a smoke test")
    args = p.parse_args()
    if args.quick:
        args.n, args.d, args.width, args.chunk_size, args.rounds = 600, 5, 16, 100, 2
    return args


def auto_partitioned(pot):
    """The same log-likelihood written for GSPMD: no shard_map, sharding constraints only."""
    model, nc, c = pot.model, pot.num_chunks, pot.chunk_size
    dev = pot.num_devices
    spec = NamedSharding(pot.mesh, P(None, DATA_AXIS))

    def loglik(params, x, y, m):
        def split(a):  # rows are device-major: (devices, chunks, chunk) -> (chunks, devices*chunk)
            a = a.reshape(dev, nc, c, *a.shape[1:]).swapaxes(0, 1)
            a = a.reshape(nc, dev * c, *a.shape[3:])
            return jax.lax.with_sharding_constraint(a, spec)

        def body(total, batch):
            xb, yb, mb = batch
            ll = model.log_likelihood(params, xb, yb)
            return total + jnp.sum(jnp.where(mb, ll, 0.0)), None

        step = jax.checkpoint(body) if nc > 1 else body  # same memory bound as ours
        total, _ = jax.lax.scan(step, jnp.zeros(()), (split(x), split(y), split(m)))
        return total

    return loglik


def main(args: argparse.Namespace) -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.n, args.d)).astype(np.float32)
    y = rng.normal(size=args.n).astype(np.float32)
    model = bp.BNN(
        MLP(hidden=(args.width, args.width), out=1),
        bp.priors.Normal(1.0),
        bp.likelihoods.Gaussian(0.5),
    )
    pot = full_batch_potential(model, x, y, chunk_size=args.chunk_size)
    u = pot.init_params(jax.random.key(0))
    data = pot.data

    ours = jax.jit(jax.value_and_grad(lambda u, d: pot.log_likelihood(u, d)))
    auto_ll = auto_partitioned(pot)
    auto = jax.jit(jax.value_and_grad(lambda u, d: auto_ll(u, d.x, d.y, d.mask)))
    compiled = {"shard_map": ours.lower(u, data).compile(), "auto": auto.lower(u, data).compile()}
    hlo = compiled["auto"].as_text()
    temp = {k: c.memory_analysis().temp_size_in_bytes / 2**20 for k, c in compiled.items()}
    v1, v2 = ours(u, data)[0], auto(u, data)[0]
    np.testing.assert_allclose(v1, v2, rtol=1e-4)

    times = {"shard_map": [], "auto": []}
    for _ in range(args.rounds):
        for name, f in (("shard_map", ours), ("auto", auto)):
            t = time.perf_counter()
            jax.block_until_ready(f(u, data))
            times[name].append(time.perf_counter() - t)
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    print(
        f"devices={pot.num_devices} n={args.n} d={args.d} width={args.width} "
        f"chunk={pot.chunk_size}x{pot.num_chunks} jax={jax.__version__}"
    )
    print(f"auto program has all-reduce: {'all-reduce' in hlo}")
    print(f"{'variant':<12}{'median ms':>12}{'ratio':>8}{'temp MiB':>10}")
    for k in ("shard_map", "auto"):
        print(f"{k:<12}{med[k]:>12.2f}{med[k] / med['shard_map']:>8.2f}{temp[k]:>10.1f}")


if __name__ == "__main__":
    main(parse_args())

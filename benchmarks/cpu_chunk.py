"""The CPU backend's default chunk: time per gradient against fixed chunk sizes.

For each model, in one process: the full-batch potential's jitted ``value_and_grad`` (data as
arguments; vmapped over the chains when there are several) with ``chunk_size=None`` (the CPU
rule, ``bnn_ppl.inference.potential.bnn.cpu_chunk``: the rows whose traced activations take
about 8 MiB) and with each fixed chunk size of a sweep, 1,024 rows (the earlier default)
included. Candidates are timed round-robin, the median of the rounds is reported, and every
figure is also given as a ratio to the default rule's.

    python benchmarks/cpu_chunk.py            # MLP(50, 50) on 200,000 rows (1 and 4 chains),
                                              # LeNet-5 on 4,096 images, ResNet-FRN on 256
    python benchmarks/cpu_chunk.py --quick    # MLP on 20,000 rows only
"""

from __future__ import annotations

import argparse
import statistics
import time


def _cases(quick: bool) -> list[tuple[str, object, object, object, int | None, list[int]]]:
    import flax.linen as nn
    import numpy as np
    import numpyro.distributions as dist

    import bnn_ppl as bp
    from bnn_ppl.models import MLP, LeNet5, ResNet20FRN

    rng = np.random.default_rng(0)
    mlp = bp.BNN(MLP(hidden=(50, 50), out=1, activation=nn.tanh), bp.priors.Normal(1.0),
                 bp.likelihoods.Gaussian(dist.HalfNormal(1.0)))  # fmt: skip
    n = 20_000 if quick else 200_000
    x = rng.normal(size=(n, 3)).astype(np.float32)
    y = np.sin(x[:, 0]).astype(np.float32)
    cases = [("MLP(50, 50)", mlp, x, y, None, [1024, 4096, 16384])]
    if quick:
        return cases
    cases.append(("MLP(50, 50)", mlp, x, y, 4, [1024, 2048, 4096]))
    images = rng.normal(size=(4096, 28, 28, 1)).astype(np.float32)
    labels = rng.integers(0, 10, 4096).astype(np.int32)
    lenet = bp.BNN(LeNet5(out=10), bp.priors.Normal(0.3), bp.likelihoods.Categorical())
    cases.append(("LeNet-5", lenet, images, labels, None, [64, 256, 1024]))
    images = rng.normal(size=(256, 32, 32, 3)).astype(np.float32)
    resnet = bp.BNN(ResNet20FRN(width=8, blocks_per_stage=1), bp.priors.Normal(0.3),
                    bp.likelihoods.Categorical())  # fmt: skip
    cases.append(("ResNet-FRN", resnet, images, labels[:256], None, [16, 64, 256]))
    return cases


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="the MLP on 20,000 rows only")
    p.add_argument("--rounds", type=int, default=5, help="timing rounds (medians reported)")
    p.add_argument("--calls", type=int, default=5, help="gradients per candidate and round")
    import _record

    _record.add_flag(p)
    a = p.parse_args(argv)

    import jax

    from bnn_ppl.inference import full_batch_potential

    print(f"# jax {jax.__version__}, {jax.devices()[0].platform}, {jax.device_count()} device(s)")
    print(f"{'model':12} {'rows':>7} {'chains':>6} {'chunk':>6} {'rule':16} {'ms/grad':>9} "
          f"{'÷ default':>9}")  # fmt: skip
    table = []
    for name, model, x, y, chains, sweep in _cases(a.quick):
        fns = {}
        for size in [None, *sweep]:
            pot = full_batch_potential(model, x, y, chunk_size=size, devices=jax.devices()[:1],
                                       vectorized_chains=chains or 1)  # fmt: skip
            u = pot.init_params(jax.random.key(1), chains)
            g = jax.value_and_grad(lambda u, d, pot=pot: pot.potential_fn_gen(d)(u))
            f = jax.jit(jax.vmap(g, (0, None)) if chains else g)
            jax.block_until_ready(f(u, pot.data))  # compiled outside the timing
            fns[size] = (f, u, pot)
        times: dict[int | None, list[float]] = {k: [] for k in fns}
        order = list(fns)
        for r in range(a.rounds):
            for size in order[r % len(order) :] + order[: r % len(order)]:  # rotate the order
                f, u, pot = fns[size]
                start = time.perf_counter()
                for _ in range(a.calls):
                    jax.block_until_ready(f(u, pot.data))
                times[size].append(1e3 * (time.perf_counter() - start) / a.calls)
        base = statistics.median(times[None])
        for size, (_, _, pot) in fns.items():
            ms = statistics.median(times[size])
            rule = pot.chunk_rule if size is None else "chunk_size"
            row = [name, len(x), chains or 1, pot.chunk_size, rule, round(ms, 3),
                   round(ms / base, 2)]  # fmt: skip
            table.append(row)
            print(f"{name:12} {len(x):>7} {chains or 1:>6} {pot.chunk_size:>6} {rule:16} "
                  f"{ms:>9.3f} {ms / base:>9.2f}", flush=True)  # fmt: skip
    if a.record:
        columns = ["model", "rows", "chains", "chunk", "rule", "per gradient (ms)", "÷ default"]
        _record.record("cpu_chunk", columns, table, key=["model", "rows", "chains", "chunk"],
                       to=a.record)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""A BNN written as a plain NumPyro function, sampled with NUTS on the model and on our potential.

The model is NumPyro's own ``examples/bnn.py``: tanh layers, Normal weights, a Gamma prior on
the noise precision, the targets observed inside ``numpyro.plate("data", n)``. It is run

* with NumPyro's ``NUTS(model)`` (NumPyro traces the model on the whole data), and
* with :class:`bnn_ppl.inference.NUTS` on :func:`bnn_ppl.inference.model_potential` of the
  same function (sharded over the devices, chunked, data as jit arguments),

and the script prints the agreement of their posterior predictive means on a test grid (in
units of the predictive's pointwise standard deviation), the time of one ``value_and_grad``
of each potential, and the compiled program's working memory (XLA's temporary buffers of the
jitted ``value_and_grad``, ``memory_analysis()``, as in ``benchmarks/memory.py``) at two data
sizes: NumPyro's grows with the data, the chunked one does not.

It writes no run folder: the model is an arbitrary NumPyro function, not a :class:`bnn_ppl.BNN`,
so :func:`bnn_ppl.inference.fit` (and ``bnn-ppl evaluate``) do not apply, and there is no test
set, only a grid on which the two samplers' predictives are compared.

    python examples/numpyro_model.py          # about a minute on 2 busy CPU cores
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.diagnostics import effective_sample_size
from numpyro.infer import MCMC, NUTS, Predictive
from numpyro.infer.util import potential_energy

from bnn_ppl.inference import NUTS as PotentialNUTS
from bnn_ppl.inference import model_potential


def model(x, y=None, hidden=8):
    """NumPyro's BNN example: two tanh layers, Normal(0, 1) weights, Gamma noise precision."""
    w1 = numpyro.sample("w1", dist.Normal(0, 1).expand([x.shape[1], hidden]).to_event(2))
    w2 = numpyro.sample("w2", dist.Normal(0, 1).expand([hidden, hidden]).to_event(2))
    w3 = numpyro.sample("w3", dist.Normal(0, 1).expand([hidden, 1]).to_event(2))
    prec = numpyro.sample("prec_obs", dist.Gamma(3.0, 1.0))
    mean = (jnp.tanh(jnp.tanh(x @ w1) @ w2) @ w3)[:, 0]
    with numpyro.plate("data", x.shape[0]):
        numpyro.deterministic("mean", mean)
        numpyro.sample("y", dist.Normal(mean, 1.0 / jnp.sqrt(prec)), obs=y)


def get_data(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A noisy cubic on [-1, 1] (NumPyro's BNN example data), float32."""
    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(-1, 1, size=(n, 1)), axis=0)
    y = x[:, 0] ** 3 + 0.1 * rng.normal(size=n)
    return x.astype(np.float32), y.astype(np.float32)


def predictive_mean(samples: dict, x_test: np.ndarray, hidden: int) -> tuple[np.ndarray, ...]:
    """Per test point: the predictive mean, its sd over draws and its Monte Carlo standard
    error (sd / sqrt(ESS) of the one chain's draws)."""
    pred = Predictive(model, samples, return_sites=["mean"])(jax.random.key(1), x_test, None,
                                                            hidden)
    draws = np.asarray(pred["mean"])
    ess = effective_sample_size(draws[None])
    return draws.mean(0), draws.std(0), draws.std(0) / np.sqrt(ess)


def time_call(f, *args, repeats: int = 5) -> float:
    jax.block_until_ready(f(*args))  # compile
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(f(*args))
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def gradient_programs(n: int, args: argparse.Namespace):
    """Jitted value_and_grad of NumPyro's potential and of ours, with the data as arguments."""
    x, y = get_data(n, seed=1)
    pot = model_potential(model, data={"x": x, "y": y}, model_kwargs={"hidden": args.hidden},
                          chunk_size=args.table_chunk_size)
    u = pot.init_params(jax.random.key(0))
    theirs = jax.jit(jax.value_and_grad(
        lambda u, x, y: potential_energy(model, (x, y, args.hidden), {}, u)))
    ours = jax.jit(lambda u, d: jax.value_and_grad(pot.potential_fn_gen(d))(u))
    return (theirs, (u, x, y)), (ours, (u, pot.data)), pot


def main(args: argparse.Namespace) -> None:
    x, y = get_data(args.num_train)
    x_test = np.linspace(-1.2, 1.2, 25, dtype=np.float32)[:, None]
    kw = dict(num_warmup=args.num_warmup, num_samples=args.num_samples, progress_bar=False)

    mcmc = MCMC(NUTS(model), **kw)
    mcmc.run(jax.random.key(args.seed), x, y, args.hidden)
    theirs = predictive_mean(mcmc.get_samples(), x_test, args.hidden)

    pot = model_potential(model, data={"x": x, "y": y}, model_kwargs={"hidden": args.hidden},
                          chunk_size=args.chunk_size)
    ours_mcmc = MCMC(PotentialNUTS(pot), jit_model_args=True, **kw)
    ours_mcmc.run(jax.random.key(args.seed), *pot.args,
                  init_params=pot.init_params(jax.random.key(args.seed + 2)))
    ours = predictive_mean(ours_mcmc.get_samples(), x_test, args.hidden)

    # the network has no biases, so f(0) = 0 exactly: compare in units of the average sd, and
    # in units of the difference's Monte Carlo standard error (what a test can hold it to)
    gap = np.abs(theirs[0] - ours[0]) / np.mean(0.5 * (theirs[1] + ours[1]))
    se = np.sqrt(theirs[2] ** 2 + ours[2] ** 2)  # 0 at x = 0, where both means are 0
    z = np.divide(np.abs(theirs[0] - ours[0]), se, out=np.zeros_like(se), where=se > 0)
    print(f"predictive means on {len(x_test)} test points ({args.num_train} rows, "
          f"{pot.num_chunks} chunks of {pot.chunk_size} on {pot.num_devices} device(s))")
    print(f"  max |mean(NUTS on model) - mean(NUTS on potential)| / mean predictive sd: "
          f"{gap.max():.3f} (average {gap.mean():.3f})")
    print(f"  max |difference| / its Monte Carlo standard error: {z.max():.2f} "
          f"(average {z.mean():.2f})")

    print(f"value_and_grad, chunk size {args.table_chunk_size}:")
    print(f"{'rows':>8} {'NumPyro ms':>11} {'ours ms':>8} {'ratio':>6} "
          f"{'NumPyro XLA temp KiB':>21} {'ours XLA temp KiB':>18}")
    for n in args.memory_n:
        (f1, a1), (f2, a2), _ = gradient_programs(n, args)
        t1, t2 = time_call(f1, *a1), time_call(f2, *a2)
        m1, m2 = (f.lower(*a).compile().memory_analysis().temp_size_in_bytes / 2**10
                  for f, a in ((f1, a1), (f2, a2)))
        print(f"{n:>8} {1e3 * t1:>11.2f} {1e3 * t2:>8.2f} {t2 / t1:>6.2f} {m1:>21.1f} "
              f"{m2:>18.1f}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-train", type=int, default=100)
    p.add_argument("--hidden", type=int, default=8)
    p.add_argument("--chunk-size", type=int, default=32, help="chunk size of the NUTS run")
    p.add_argument("--table-chunk-size", type=int, default=1024,
                   help="chunk size of the timing and memory table")
    p.add_argument("--num-warmup", type=int, default=500)
    p.add_argument("--num-samples", type=int, default=500)
    p.add_argument("--memory-n", type=int, nargs="+", default=[20_000, 200_000],
                   help="data sizes of the gradient timing and memory table")
    p.add_argument("--seed", type=int, default=0, help="seed of both NUTS runs")
    return p.parse_args(argv)


if __name__ == "__main__":
    main(parse_args())

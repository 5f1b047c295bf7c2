"""End to end against NumPyro: its NUTS on its own BNN example model, and the same through bnn_ppl.

NumPyro's ``examples/bnn.py`` model (two tanh layers of 50 units without biases, N(0, 1)
weights, a Gamma(3, 1) observation precision) on that example's synthetic regression data, at
several row counts, run by

* ``numpyro``: ``MCMC(NUTS(model))`` as its example does (the data closed over by the program);
* ``model_potential``: the same model function through
  :func:`bnn_ppl.inference.model_potential` and bnn_ppl's ``NUTS`` (data sharded over the
  devices, summed in chunks, passed as arguments of the compiled loop);
* ``BNN``: ``bp.BNN(MLP(hidden=(50, 50), activation=tanh))`` with N(0, 1) weights and biases
  and a HalfNormal(1) noise scale: its :func:`bnn_ppl.inference.full_batch_potential` run by
  bnn_ppl's ``NUTS`` in NumPyro's ``MCMC`` (the programs ``fit`` runs).

Each in a fresh process (no persistent cache), with 1 or 4 devices (4 simulated on the CPU:
``--xla_force_host_platform_device_count=4``), the same warmup, draws, tree depth and seed.
``first run`` is the wall time from building the sampler to the draws, compilation included;
``per gradient`` is a second run of the same compiled sampler (continuing from the first's
state) divided by its leapfrog steps.

    python benchmarks/numpyro_end_to_end.py                          # 2k, 20k rows; 200k once
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

VARIANTS = ("numpyro", "model_potential", "BNN")


def get_data(n: int, d_x: int = 3, seed: int = 0):
    """NumPyro's ``examples/bnn.py`` data: y = x·w + 0.5 (0.5 + x₁)² sin(4 x₁) + noise."""
    import numpy as np

    rng = np.random.default_rng(seed)
    x = np.linspace(-1, 1, n)
    x = np.power(x[:, None], np.arange(d_x)).astype(np.float32)
    w = 0.5 * rng.normal(size=d_x)
    y = x @ w + 0.5 * np.power(0.5 + x[:, 1], 2.0) * np.sin(4.0 * x[:, 1])
    y = (y + 0.25 * rng.normal(size=n)).astype(np.float32)
    return x, (y - y.mean()) / y.std()


def model(X, Y=None, D_H: int = 50):
    """NumPyro's ``examples/bnn.py`` model (``nonlin = tanh``), the plate named ``data``."""
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    d_x = X.shape[1]
    w1 = numpyro.sample("w1", dist.Normal(jnp.zeros((d_x, D_H)), jnp.ones((d_x, D_H))))
    z1 = jnp.tanh(jnp.matmul(X, w1))
    w2 = numpyro.sample("w2", dist.Normal(jnp.zeros((D_H, D_H)), jnp.ones((D_H, D_H))))
    z2 = jnp.tanh(jnp.matmul(z1, w2))
    w3 = numpyro.sample("w3", dist.Normal(jnp.zeros((D_H, 1)), jnp.ones((D_H, 1))))
    z3 = jnp.matmul(z2, w3)
    prec_obs = numpyro.sample("prec_obs", dist.Gamma(3.0, 1.0))
    sigma_obs = 1.0 / jnp.sqrt(prec_obs)
    with numpyro.plate("data", X.shape[0]):
        numpyro.sample("Y", dist.Normal(z3, sigma_obs).to_event(1), obs=Y[:, None])


def _child(variant: str, n: int, warmup: int, draws: int, depth: int) -> dict:
    import jax
    import numpy as np
    import numpyro
    from numpyro.infer import NUTS

    import bnn_ppl as bp
    from bnn_ppl._compat import ReusingMCMC
    from bnn_ppl.inference import NUTS as OurNUTS
    from bnn_ppl.inference import full_batch_potential, model_potential
    from bnn_ppl.models import MLP

    x, y = get_data(n)
    key = jax.random.key(0)
    jax.block_until_ready(jax.jit(lambda v: v + 1)(1.0))  # the backend is up
    start, cpu = time.perf_counter(), time.process_time()
    if variant == "numpyro":
        mcmc = ReusingMCMC(NUTS(model, max_tree_depth=depth), num_warmup=warmup,
                           num_samples=draws, progress_bar=False)  # fmt: skip
        mcmc.run(key, x, y, extra_fields=("num_steps",))
        args: tuple = (x, y)
    else:
        if variant == "model_potential":
            pot = model_potential(model, data={"X": x, "Y": y})
        else:
            import flax.linen as nn
            import numpyro.distributions as dist

            net = MLP(hidden=(50, 50), out=1, activation=nn.tanh)
            bnn = bp.BNN(net, bp.priors.Normal(1.0),
                         bp.likelihoods.Gaussian(dist.HalfNormal(1.0)))  # fmt: skip
            pot = full_batch_potential(bnn, x, y)
        mcmc = ReusingMCMC(OurNUTS(pot, max_tree_depth=depth), num_warmup=warmup,
                           num_samples=draws, progress_bar=False, jit_model_args=True)  # fmt: skip
        init_key, run_key = jax.random.split(key)
        mcmc.run(run_key, *pot.args, init_params=pot.init_params(init_key),
                 extra_fields=("num_steps",))  # fmt: skip
        args = pot.args
    jax.block_until_ready(mcmc.get_samples())
    first, first_cpu = time.perf_counter() - start, time.process_time() - cpu
    for _ in range(2):  # the first continuation compiles its (warmup-free) loop; time the second
        mcmc.post_warmup_state = mcmc.last_state
        start, cpu = time.perf_counter(), time.process_time()
        mcmc.run(mcmc.post_warmup_state.rng_key, *args, extra_fields=("num_steps",))
        jax.block_until_ready(mcmc.get_samples())
    second, second_cpu = time.perf_counter() - start, time.process_time() - cpu
    steps = max(int(np.sum(mcmc.get_extra_fields()["num_steps"])), 1)
    return {"first": first, "first_cpu": first_cpu, "steps": steps,
            "per_grad_ms": 1e3 * second / steps, "per_grad_cpu_ms": 1e3 * second_cpu / steps,
            "devices": len(jax.devices()), "numpyro": numpyro.__version__}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, nargs="+", default=[2_000, 20_000, 200_000])
    p.add_argument("--devices", type=int, nargs="+", default=[1, 4])
    p.add_argument("--draws", type=int, default=50, help="warmup iterations and draws")
    p.add_argument("--depth", type=int, default=5, help="NUTS's max_tree_depth")
    p.add_argument("--big", type=int, default=100_000,
                   help="from this many rows: --big-draws, depth 4, 1 device")  # fmt: skip
    p.add_argument("--big-draws", type=int, default=20)
    p.add_argument("--quick", action="store_true", help="500 rows, 10 + 10 draws, depth 3")
    p.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    import _record

    _record.add_flag(p)
    a = p.parse_args(argv)
    if a.child:
        v, n, w, d, t = a.child
        print(json.dumps(_child(v, int(n), int(w), int(d), int(t))))
        return 0
    rows, draws, depth = ([500], 10, 3) if a.quick else (a.rows, a.draws, a.depth)
    print(f"{'rows':>7} {'dev':>3} {'draws':>7} {'depth':>5} {'variant':16} {'first run s':>11} "
          f"{'cpu s':>7} {'grad ms':>8} {'cpu ms':>8} {'first/np':>8} {'cpu/np':>6} "
          f"{'grad/np':>7} {'cpu/np':>6}")  # fmt: skip
    table = []
    for n in rows:
        big = n >= a.big
        w, d, t = (a.big_draws, a.big_draws, 4) if big else (draws, draws, depth)
        for dev in [1] if big else a.devices:
            env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION")}
            env |= {"JAX_PLATFORMS": "cpu", "BNN_PPL_CACHE_DIR": "off",
                    "JAX_ENABLE_COMPILATION_CACHE": "0"}  # fmt: skip
            env.pop("JAX_DISABLE_MOST_OPTIMIZATIONS", None)
            if dev > 1:
                env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={dev}"
            else:
                env.pop("XLA_FLAGS", None)
            base = None
            for variant in VARIANTS:
                out = subprocess.run(
                    [sys.executable, __file__, "--child", variant, str(n), str(w), str(d), str(t)],
                    env=env, capture_output=True, text=True,
                )  # fmt: skip
                if out.returncode != 0:
                    print(f"{n:>7} {dev:>3} {variant}: failed\n{out.stderr[-1500:]}")
                    continue
                r = json.loads(out.stdout.strip().splitlines()[-1])
                base = r if variant == "numpyro" else base
                ratios = [None if base is None else round(r[k] / base[k], 2) for k in KEYS]
                table.append([n, dev, f"{w}+{d}", t, variant, *(round(r[k], 4) for k in KEYS),
                              *ratios])  # fmt: skip
                rel = "" if base is None else " ".join(
                    f"{r[k] / base[k]:>{w_}.2f}"
                    for k, w_ in (("first", 8), ("first_cpu", 6), ("per_grad_ms", 7),
                                  ("per_grad_cpu_ms", 6)))  # fmt: skip
                print(f"{n:>7} {dev:>3} {w:>3}+{d:<3} {t:>5} {variant:16} {r['first']:>11.2f} "
                      f"{r['first_cpu']:>7.2f} {r['per_grad_ms']:>8.4f} "
                      f"{r['per_grad_cpu_ms']:>8.4f} {rel}", flush=True)  # fmt: skip
    if a.record:
        columns = ["rows", "devices", "draws", "depth", "variant", "first run (s)", "CPU (s)"]
        columns += ["per gradient (ms)", "CPU (ms)", "first ÷ np", "CPU ÷ np", "gradient ÷ np",
                    "gradient CPU ÷ np"]  # fmt: skip
        _record.record("end_to_end", columns, table, key=["rows", "devices", "variant"],
                       to=a.record)  # fmt: skip
    return 0


KEYS = ("first", "first_cpu", "per_grad_ms", "per_grad_cpu_ms")


if __name__ == "__main__":
    raise SystemExit(main())

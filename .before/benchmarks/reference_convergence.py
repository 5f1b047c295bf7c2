"""Benchmark: why does the reference HMC recipe not converge on a UCI MLP posterior?

Issue 19's reference runs converge on digits but not on UCI yacht/boston/energy split 0 (MLP(50),
N(0, 1) prior, Gaussian likelihood with a HalfNormal(1) noise prior): step size at its floor,
bulk ESS 5, R-hat 2.4-2.8. This script runs the recipe's kernel (:class:`bnn_ppl.inference.HMC`
with the reference defaults: chains from prior draws, a quarter-period trajectory in the adapted
metric, ``max_num_steps``) on one data set, *keeping the warmup draws*, and prints the figures
that tell the hypotheses apart, all measured in one process:

* per chain and warmup block: mean potential energy, median noise scale, acceptance, step size
  and leapfrog steps (still trending at the end of warmup? step size collapsing?);
* per chain in the sampling phase: mean and sd of the potential, noise scale, acceptance, steps
  (chains at different log-posterior levels are not samples of one distribution);
* per chain predictive means at the test inputs against the pooled ones (distinct modes?), and
  the function-space R-hat / bulk ESS of the reference recipe's check;
* ``--map-restarts``: the potential and test predictions of MAP estimates (Adam) from the same
  number of prior draws, as a cheap look at how many distinct optima there are.

Usage::

    python benchmarks/reference_convergence.py --dataset yacht --split 0 --warmup 500 --draws 200
    python benchmarks/reference_convergence.py --quick      # tiny: a smoke test
"""

from __future__ import annotations

import argparse
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from numpyro.infer import MCMC

import bnn_ppl as bp
from bnn_ppl.inference import HMC, default_trajectory_length, full_batch_potential
from bnn_ppl.inference.hmc_drivers import DEFAULT_EXTRA_FIELDS, QUARTER_PERIOD
from bnn_ppl.inference.reference import check_convergence

NOISE = "noise_scale"
FIELDS = (*DEFAULT_EXTRA_FIELDS, "trajectory_length")


def build(args: argparse.Namespace) -> tuple[bp.BNN, bp.data.Dataset]:
    data = bp.data.load(f"uci/{args.dataset}", split=args.split)
    if args.max_train:
        data = data._replace(x_train=data.x_train[: args.max_train],
                             y_train=data.y_train[: args.max_train])  # fmt: skip
    noise = dist.HalfNormal(1.0) if args.noise is None else args.noise
    model = bp.BNN(bp.models.MLP(hidden=(args.width,), out=1), bp.priors.Normal(args.prior_scale),
                   bp.likelihoods.Gaussian(scale=noise))  # fmt: skip
    return model, data


def table(name: str, a: np.ndarray, n: int, fmt: str, reduce=np.mean) -> None:
    """One row per chain: ``reduce`` of each of ``n`` consecutive blocks of ``a[chain]``."""
    print(f"  {name}")
    for c in range(a.shape[0]):
        row = " ".join(fmt.format(float(reduce(b))) for b in np.array_split(a[c], n))
        print(f"    chain {c}: {row}")


def noise_draws(samples: dict, args: argparse.Namespace) -> np.ndarray:
    """The noise scale's draws, or the fixed ``--noise`` broadcast to the draws' shape."""
    if NOISE in samples:
        return np.asarray(samples[NOISE])
    first = np.asarray(next(iter(samples.values())))
    return np.full(first.shape[:2], args.noise)


class ClippedHMC(HMC):
    """The kernel before this benchmark: a step size below ``L / (max_num_steps - 1/2)`` is
    raised to it (the trajectory keeps its length ``L``), for ``--step-limit clip``."""

    def bound_step_size(self, state):
        length = state.trajectory_length
        low = length / (self.max_num_steps - 0.5)
        step = jnp.minimum(jnp.maximum(state.adapt_state.step_size, low), length)
        return state._replace(adapt_state=state.adapt_state._replace(step_size=step))


def run_chains(args: argparse.Namespace, model: bp.BNN, data: bp.data.Dataset) -> dict:
    x, y = data.x_train, data.y_train
    pot = full_batch_potential(model, x, y)
    kernel = (ClippedHMC if args.step_limit == "clip" else HMC)(
        pot, trajectory_length=default_trajectory_length(model, x),
        metric_trajectory_length=QUARTER_PERIOD if args.mass_matrix != "identity" else None,
        adapt_mass_matrix=args.mass_matrix != "identity", dense_mass=args.mass_matrix == "dense",
        step_size=0.01, target_accept_prob=0.8, max_num_steps=args.max_num_steps,
    )  # fmt: skip
    mcmc = MCMC(kernel, num_warmup=args.warmup, num_samples=args.draws, num_chains=args.chains,
                chain_method="vectorized", progress_bar=False, jit_model_args=True)  # fmt: skip
    init_key, run_key = jax.random.split(jax.random.key(args.seed))
    init = pot.init_params(init_key, args.chains, method="prior")
    t = time.perf_counter()
    mcmc.warmup(run_key, *pot.args, init_params=init, collect_warmup=True,
                extra_fields=FIELDS)  # fmt: skip
    warm = {"fields": mcmc.get_extra_fields(group_by_chain=True),
            "noise": noise_draws(mcmc.get_samples(group_by_chain=True), args)}
    mcmc.run(mcmc.post_warmup_state.rng_key, *pot.args, extra_fields=FIELDS)
    samples = mcmc.get_samples(group_by_chain=True)
    jax.block_until_ready(samples)
    t_all = time.perf_counter() - t
    return {"warm": warm, "fields": mcmc.get_extra_fields(group_by_chain=True),
            "samples": samples, "noise": noise_draws(samples, args), "wall": t_all,
            "length": np.asarray(mcmc.last_state.trajectory_length)}  # fmt: skip


def report_warmup(r: dict, n_blocks: int) -> None:
    f = {k: np.asarray(v) for k, v in r["warm"]["fields"].items()}
    noise = np.asarray(r["warm"]["noise"]).reshape(f["potential_energy"].shape)
    w = noise.shape[1]
    print(f"\nWARMUP ({w} iterations) in {n_blocks} blocks of "
          f"~{w // n_blocks}: per chain, per block")
    table("mean potential energy", f["potential_energy"], n_blocks, "{:10.1f}")
    table("median noise scale", noise, n_blocks, "{:10.4f}", np.median)
    table("mean acceptance", f["accept_prob"], n_blocks, "{:10.2f}")
    table("median step size", f["adapt_state.step_size"], n_blocks, "{:10.2e}", np.median)
    table("mean leapfrog steps", f["num_steps"], n_blocks, "{:10.0f}")
    table("mean trajectory length", f["trajectory_length"], n_blocks, "{:10.3f}")


def report_sampling(r: dict, model: bp.BNN, data: bp.data.Dataset) -> dict:
    f = {k: np.asarray(v) for k, v in r["fields"].items()}
    noise = r["noise"].reshape(f["potential_energy"].shape)
    pe = f["potential_energy"]
    print(f"\nSAMPLING ({pe.shape[1]} draws/chain; last trajectory length per chain "
          f"{np.round(np.ravel(r['length']), 3)})")
    table("mean potential energy per block", pe, 4, "{:10.1f}")
    table("median noise scale per block", noise, 4, "{:10.4f}", np.median)
    print("  chain   potential mean (sd)   noise median   acceptance  steps   step size")
    for c in range(pe.shape[0]):
        print(f"  {c:5d}   {pe[c].mean():10.1f} ({pe[c].std():5.1f})   {np.median(noise[c]):12.4f}"
              f"   {f['accept_prob'][c].mean():10.2f}  {f['num_steps'][c].mean():5.0f}"
              f"   {np.median(f['adapt_state.step_size'][c]):9.2e}")  # fmt: skip
    spread = float(pe.mean(axis=1).max() - pe.mean(axis=1).min())
    within = float(np.mean(pe.std(axis=1)))
    print(f"  spread of chain mean potentials: {spread:.1f} nats = {spread / within:.1f} "
          f"within-chain sd")
    pred = bp.predict(model, r["samples"], data.x_test, chunk_size=512)
    mean = np.asarray(pred.mean).reshape(pe.shape[0], pe.shape[1], -1)
    per_chain = mean.mean(axis=1)  # (chains, n)
    sd_within = mean.std(axis=1).mean(axis=0)  # (n,)
    z = np.abs(per_chain - per_chain.mean(axis=0)) / sd_within
    print(f"  per-chain test predictive means vs pooled, in within-chain sds: median "
          f"{np.median(z):.1f}, max {z.max():.1f}; between-chain sd / noise "
          f"{np.median(per_chain.std(axis=0) / np.median(noise)):.2f} (median over test rows)")
    y = np.asarray(data.y_test)
    rmse = np.sqrt(np.mean((per_chain - y) ** 2, axis=1))
    print("  per-chain test RMSE (standardised):", " ".join(f"{v:.4f}" for v in rmse))
    conv = check_convergence(mean)
    print(f"  function-space check: R-hat max {conv['rhat_max']:.2f}, share <= 1.01 "
          f"{conv['share_rhat_ok']:.0%}, bulk ESS min {conv['ess_bulk_min']:.0f} median "
          f"{conv['ess_bulk_median']:.0f}")
    return {"spread": spread, "within": within, "conv": conv}


def map_restarts(args: argparse.Namespace, model: bp.BNN, data: bp.data.Dataset) -> None:
    """Adam from ``args.chains`` prior draws: potential and test RMSE at each optimum."""
    import optax

    pot = full_batch_potential(model, data.x_train, data.y_train)
    init_key, _ = jax.random.split(jax.random.key(args.seed))
    params = pot.init_params(init_key, args.chains, method="prior")
    opt = optax.adam(args.map_lr)
    state = jax.vmap(opt.init)(params)
    fn = pot.potential_fn

    @jax.jit
    def step(p, s):
        v, g = jax.vmap(jax.value_and_grad(fn))(p)
        u, s = jax.vmap(opt.update)(g, s)
        return optax.apply_updates(p, u), s, v

    t = time.perf_counter()
    trace = []
    for i in range(args.map_steps):
        params, state, v = step(params, state)
        if (i + 1) % (args.map_steps // 5) == 0:
            trace.append(np.asarray(v))
    const = jax.vmap(pot.postprocess_fn)(params)
    pred = bp.predict(model, {k: v[:, None] for k, v in const.items()}, data.x_test)
    mean = np.asarray(pred.mean).reshape(args.chains, -1)
    rmse = np.sqrt(np.mean((mean - np.asarray(data.y_test)) ** 2, axis=1))
    print(f"\nMAP (Adam lr {args.map_lr}, {args.map_steps} steps from each chain's prior draw, "
          f"{time.perf_counter() - t:.0f} s): potential every {args.map_steps // 5} steps")
    for c in range(args.chains):
        noise = float(jnp.ravel(const[NOISE][c])[0]) if NOISE in const else args.noise
        print(f"  start {c}: " + " ".join(f"{t_[c]:9.1f}" for t_ in trace)
              + f"   noise {noise:.4f}  test RMSE {rmse[c]:.4f}")


def main(args: argparse.Namespace) -> None:
    model, data = build(args)
    print(f"uci/{args.dataset} split {args.split}: {len(data.x_train)} training rows, "
          f"{len(data.x_test)} test rows; MLP({args.width}), N(0, {args.prior_scale}^2), noise "
          f"{args.noise or 'HalfNormal(1)'}; {args.chains} chains, {args.mass_matrix} metric, "
          f"max_num_steps {args.max_num_steps} ({args.step_limit}), warmup {args.warmup}, "
          f"draws {args.draws}")
    if args.map_steps:
        map_restarts(args, model, data)
    if args.draws:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = run_chains(args, model, data)
        report_warmup(r, args.blocks)
        report_sampling(r, model, data)
        print(f"\nwall {r['wall']:.0f} s")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="yacht")
    p.add_argument("--split", type=int, default=0)
    p.add_argument("--width", type=int, default=50)
    p.add_argument("--prior-scale", type=float, default=1.0)
    p.add_argument("--noise", type=float, default=None, help="fixed noise scale (default: "
                   "a HalfNormal(1) prior, sampled)")
    p.add_argument("--chains", type=int, default=4)
    p.add_argument("--warmup", type=int, default=500)
    p.add_argument("--draws", type=int, default=200)
    p.add_argument("--mass-matrix", choices=("identity", "diagonal", "dense"), default="dense")
    p.add_argument("--max-num-steps", type=int, default=256)
    p.add_argument("--step-limit", choices=("shorten", "clip"), default="shorten",
                   help="a step size needing more than max_num_steps: shorten the trajectory "
                   "(the library's kernel) or raise the step to L / max_num_steps (the old one)")
    p.add_argument("--blocks", type=int, default=5, help="warmup blocks in the table")
    p.add_argument("--map-steps", type=int, default=0, help="Adam steps per MAP restart (0: none)")
    p.add_argument("--map-lr", type=float, default=1e-2)
    p.add_argument("--max-train", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="tiny: a smoke test")
    args = p.parse_args(argv)
    if args.quick:
        args.width, args.warmup, args.draws, args.max_num_steps, args.max_train = 8, 40, 20, 16, 60
        args.map_steps = 50
    return args


if __name__ == "__main__":
    main(parse_args())

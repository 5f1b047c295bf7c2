"""Benchmark: which trajectory length and metric should ``bnn_ppl.inference.hmc`` use by default?

Izmailov et al.'s trajectory length (π/2)·σ_prior·√T is a quarter period of the prior with an
*identity* mass matrix. ``hmc()`` used to adapt a diagonal mass matrix too, which changes what a
trajectory length means: with the posterior's variances as inverse mass matrix every Gaussian
direction has period 2π, so (π/2)·σ_prior is a fraction σ_prior of a quarter period. With a
narrow prior that left 1-3 leapfrog steps per iteration and, on a posterior close to its prior,
a step size that ran away to 3.4e38 (0 steps: a frozen chain reported as acceptance 1.0).

Four kernels, each with the step-size guard of :class:`bnn_ppl.inference.HMC` (1 to
``max_num_steps`` leapfrog steps per iteration), on four problems:

  identity  no mass-matrix adaptation, (π/2)·σ_prior·√T throughout (Izmailov et al.)
  old       diagonal mass matrix adapted, (π/2)·σ_prior·√T throughout (the old default)
  adapted   diagonal mass matrix adapted, (π/2)·σ_prior·√T while the metric is the identity,
            then π/2: a quarter period in the adapted metric (:func:`hmc_kernel`'s default)
  prior-in-metric  diagonal mass matrix adapted, (π/2)·σ_prior / sqrt(min_i M⁻¹_ii): the
            prior's widest quarter period measured in the adapted metric

Reported per run: mean leapfrog steps, the min and median bulk ESS of the predictions at 50
test inputs (function space: predictive means, or class probabilities) over all chains, their
max R-hat, and min ESS per 1000 gradient evaluations of the sampling phase (the efficiency).

Usage::

    python benchmarks/hmc_defaults.py                      # 4 problems x 4 kernels x seeds 0, 1
    python benchmarks/hmc_defaults.py --problems digits --seeds 0 --warmup 300 --samples 300
    python benchmarks/hmc_defaults.py --quick              # conjugate only, short: a smoke test
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.infer import MCMC

import bnn_ppl as bp
from bnn_ppl.inference import HMC, default_trajectory_length, full_batch_potential
from bnn_ppl.inference.hmc_drivers import hmc_kernel
from bnn_ppl.models import MLP

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from conjugate import data as conjugate_data  # noqa: E402
from conjugate import linear_model  # noqa: E402

KERNELS = ("identity", "old", "adapted", "prior-in-metric")
PROBLEMS = ("near_prior", "conjugate", "diabetes", "digits")


class PriorInMetricHMC(HMC):
    """(π/2)·σ_prior / sqrt(min_i M⁻¹_ii): the prior's quarter period in the adapted metric."""

    def follow_metric(self, state):  # noqa: ANN001, ANN201
        m = state.adapt_state.inverse_mass_matrix
        length = self.identity_trajectory_length / jnp.sqrt(jnp.min(m, axis=-1))
        return state._replace(trajectory_length=length.astype(state.trajectory_length.dtype))


def problem(name: str) -> tuple[bp.BNN, np.ndarray, np.ndarray, np.ndarray]:
    """``(model, x, y, x_test)``."""
    rng = np.random.default_rng(0)
    if name == "near_prior":  # 2 rows, narrow prior: the posterior is close to the prior
        x = rng.normal(size=(2, 2)).astype(np.float32)
        y = np.sin(x[:, 0]).astype(np.float32)
        m = bp.BNN(MLP(hidden=(10,), out=1), bp.priors.Normal(0.3), bp.likelihoods.Gaussian(0.5))
        return m, x, y, rng.normal(size=(50, 2)).astype(np.float32)
    if name == "conjugate":  # Bayesian linear regression, 30 rows (tests/conjugate.py)
        x, y = conjugate_data()
        return linear_model(), x, y, rng.normal(size=(50, 2)).astype(np.float32)
    if name == "diabetes":
        d = bp.data.load("diabetes")
        m = bp.BNN(MLP(hidden=(20,), out=1), bp.priors.Normal(1.0), bp.likelihoods.Gaussian(0.7))
        return m, d.x_train[:100], d.y_train[:100], d.x_test[:50]
    if name == "digits":
        d = bp.data.load("digits")
        m = bp.BNN(MLP(hidden=(20,), out=10), bp.priors.Normal(0.3), bp.likelihoods.Categorical())
        return m, d.x_train[:300], d.y_train[:300], d.x_test[:50]
    raise ValueError(name)


def kernel(name: str, pot, model: bp.BNN, x: np.ndarray) -> HMC:  # noqa: ANN001
    izmailov = default_trajectory_length(model, x)
    if name == "identity":
        return hmc_kernel(pot, adapt_mass_matrix=False)
    if name == "old":
        return hmc_kernel(pot, trajectory_length=izmailov)
    if name == "adapted":
        return hmc_kernel(pot)
    return PriorInMetricHMC(pot, trajectory_length=izmailov, step_size=1e-2)


def run(problem_name: str, kernel_name: str, seed: int, warmup: int, samples: int, chains: int):
    model, x, y, x_test = problem(problem_name)
    pot = full_batch_potential(model, x, y)
    mcmc = MCMC(
        kernel(kernel_name, pot, model, x),
        num_warmup=warmup,
        num_samples=samples,
        num_chains=chains,
        chain_method="vectorized",
        progress_bar=False,
        jit_model_args=True,
    )
    init_key, run_key = jax.random.split(jax.random.key(seed))  # as hmc() splits its key
    t = time.perf_counter()
    mcmc.run(
        run_key,
        *pot.args,
        init_params=pot.init_params(init_key, chains),
        extra_fields=("accept_prob", "diverging", "num_steps"),
    )
    jax.block_until_ready(mcmc.get_samples())
    wall = time.perf_counter() - t
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rows = bp.diagnostics.sampler_summary(mcmc, warn=False)
    fs = bp.diagnostics.function_space(model, mcmc.get_samples(group_by_chain=True), x_test)
    ess = np.ravel(fs.ess_bulk["predictive"])
    rhat = np.ravel(fs.rhat["predictive"])
    grads = sum(r["num_steps"] for r in rows) * samples
    return dict(
        problem=problem_name,
        kernel=kernel_name,
        seed=seed,
        wall_s=round(wall, 1),  # compilation included
        moving=all(r["moving"] for r in rows),
        accept=round(float(np.mean([r["accept_prob"] for r in rows])), 3),
        leapfrog=round(float(np.mean([r["num_steps"] for r in rows])), 1),
        trajectory=round(float(np.mean(np.asarray(mcmc.last_state.trajectory_length))), 3),
        ess_min=round(float(np.min(ess))),
        ess_median=round(float(np.median(ess))),
        rhat_max=round(float(np.max(rhat)), 3),
        ess_min_per_1k_grad=round(float(np.min(ess)) / grads * 1000, 1),
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--problems", nargs="+", default=list(PROBLEMS), choices=PROBLEMS)
    p.add_argument("--kernels", nargs="+", default=list(KERNELS), choices=KERNELS)
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    p.add_argument("--warmup", type=int, default=300)
    p.add_argument("--samples", type=int, default=300)
    p.add_argument("--chains", type=int, default=4)
    p.add_argument("--json", action="store_true", help="one JSON object per run")
    p.add_argument("--quick", action="store_true", help="conjugate, 2 kernels, 50+50: a smoke test")
    args = p.parse_args(argv)
    if args.quick:
        args.problems, args.kernels, args.seeds = ["conjugate"], ["identity", "adapted"], [0]
        args.warmup = args.samples = 50
    head = f"{'problem':<11}{'kernel':<17}{'seed':>5}{'leapfrog':>9}{'traj':>7}{'accept':>7}"
    head += f"{'ESS min':>8}{'median':>8}{'R-hat max':>10}{'ESS/1k grad':>12}{'wall s':>8}"
    if not args.json:
        print(f"# {args.chains} chains x ({args.warmup} warmup + {args.samples} draws) per run")
        print(head)
    for name in args.problems:
        for seed in args.seeds:
            for k in args.kernels:
                r = run(name, k, seed, args.warmup, args.samples, args.chains)
                if args.json:
                    print(json.dumps(r), flush=True)
                    continue
                flag = "" if r["moving"] else "  NOT MOVING"
                print(
                    f"{name:<11}{k:<17}{seed:>5}{r['leapfrog']:>9.1f}{r['trajectory']:>7.2f}"
                    f"{r['accept']:>7.2f}{r['ess_min']:>8}{r['ess_median']:>8}{r['rhat_max']:>10.3f}"
                    f"{r['ess_min_per_1k_grad']:>12.1f}{r['wall_s']:>8.0f}{flag}",
                    flush=True,
                )
    print(f"# trajectory: the final one; pi/2 = {math.pi / 2:.3f}")


if __name__ == "__main__":
    main()

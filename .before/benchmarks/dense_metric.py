"""Benchmark: what does a dense mass matrix cost per leapfrog step, against a diagonal one?

The reference recipe's ``mass_matrix="dense"`` (NumPyro's ``dense_mass=True``) multiplies the
momentum by a full ``d x d`` matrix in every leapfrog step; the diagonal metric multiplies
elementwise. An energy reference run with the dense metric looked about four times slower per
draw than the diagonal one (``examples/references/README.md``), measured beside other jobs and
after each adapted its own step size and trajectory. This times the kernel alone: NumPyro's
``HMC`` on our potential with a fixed step size and a fixed number of leapfrog steps, nothing
adapted (the metric stays the identity, stored dense or diagonal), the same chains, the same
draws, interleaved rounds; it prints milliseconds per leapfrog step of all chains and the ratio
dense / diagonal.

Usage::

    python benchmarks/dense_metric.py --dataset energy --noise 0.05     # needs the UCI files
    python benchmarks/dense_metric.py --quick      # synthetic rows: a smoke test
"""

from __future__ import annotations

import argparse
import warnings

import _timing
import jax
import numpy as np
from numpyro.infer import MCMC

import bnn_ppl as bp
from bnn_ppl.inference import HMC, full_batch_potential
from bnn_ppl.models import MLP


def problem(args: argparse.Namespace) -> tuple[bp.BNN, np.ndarray, np.ndarray, str]:
    """The model and training rows: a UCI split, or synthetic rows for ``--quick``."""
    model = bp.BNN(
        MLP(hidden=(args.width,), out=1), bp.priors.Normal(1.0), bp.likelihoods.Gaussian(args.noise)
    )
    if args.dataset is None:
        rng = np.random.default_rng(0)
        x = rng.standard_normal((args.rows, 8), dtype=np.float32)
        y = (x @ rng.standard_normal(8) + 0.1 * rng.standard_normal(args.rows)).astype(np.float32)
        return model, x, y, f"synthetic {args.rows} x 8"
    d = bp.data.load_subset(args.dataset, split=args.split)
    return model, d.x_train, d.y_train, f"{d.name} split {args.split}, {len(d.x_train)} rows"


def main(args: argparse.Namespace) -> None:
    print(_timing.machine())
    _timing.numpyro_jit_fix()  # a repeated mcmc.run reuses its compiled loop
    model, x, y, name = problem(args)
    C = args.chains
    pot = full_batch_potential(model, x, y, vectorized_chains=C)
    init = pot.init_params(jax.random.key(0), num_chains=C)
    dim = sum(int(np.prod(a.shape[1:])) for a in jax.tree.leaves(init))
    runs = {}
    for label, dense in (("diagonal", False), ("dense", True)):
        kernel = HMC(pot, step_size=args.step_size, num_steps=args.steps, adapt_step_size=False,
                     adapt_mass_matrix=False, dense_mass=dense)  # fmt: skip
        mcmc = MCMC(kernel, num_warmup=0, num_samples=args.draws, num_chains=C,
                    chain_method="vectorized", progress_bar=False)  # fmt: skip
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (a fixed, untuned step: no acceptance to judge)
            mcmc.run(jax.random.key(1), *pot.args, init_params=init)  # compile
        runs[label] = mcmc

    def job(mcmc: MCMC) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mcmc.run(jax.random.key(2), *pot.args, init_params=init)
            _timing.block(mcmc.get_samples())

    steps = args.draws * args.steps
    jobs = {k: (lambda m=m: job(m), steps) for k, m in runs.items()}
    times = _timing.round_robin(jobs, args.rounds)
    print(f"\n## {name}: MLP({args.width}), {dim} parameters, {C} vectorized chains, "
          f"{args.draws} draws x {args.steps} leapfrog steps per call")  # fmt: skip
    med = _timing.print_table(times, "per leapfrog step (all chains)")
    print(f"ratio: dense / diagonal = {med['dense'] / med['diagonal']:.2f} per leapfrog step")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default=None, help="a UCI set (default: synthetic rows)")
    p.add_argument("--split", type=int, default=0)
    p.add_argument("--rows", type=int, default=700, help="synthetic rows (no --dataset)")
    p.add_argument("--width", type=int, default=50)
    p.add_argument("--noise", type=float, default=0.05)
    p.add_argument("--chains", type=int, default=4)
    p.add_argument("--steps", type=int, default=256, help="leapfrog steps per draw")
    p.add_argument("--draws", type=int, default=10, help="draws per timed call")
    p.add_argument("--step-size", type=float, default=1e-4)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test")
    args = p.parse_args(argv)
    if args.quick:
        args.rows, args.width, args.steps, args.draws, args.rounds = 64, 8, 8, 2, 2
    return args


if __name__ == "__main__":
    main(parse())

"""UCI regression benchmark: HMC (BMA), mean-field SVI and a deep ensemble on the standard splits.

The standard protocol (Hernandez-Lobato & Adams 2015; Gal & Ghahramani 2016): an MLP with one
hidden layer of 50 ReLU units, inputs and targets standardised with the training split's
statistics, test RMSE and test log-likelihood (LL, of the BMA: the exact Gaussian mixture over
draws) in the original target units, mean ± standard error over the splits
(:mod:`bnn_ppl.metrics.splits`), beside the published MC-dropout LL (Gal's "grid search (new)",
20 splits). Every method fits the same BNN (Normal prior, Gaussian likelihood with a HalfNormal
prior on the noise) with :func:`bnn_ppl.inference.fit`:

* ``HMC``: full-batch NUTS with tree depth at most ``--max-tree-depth`` (the noise of energy and
  yacht is so small that a fixed trajectory needs thousands of leapfrog steps) or, with
  ``--sampler hmc``, fixed-trajectory HMC;
* ``SVI``: mean-field VI started at a MAP solution (``SVIConfig.map_steps``);
* ``ensemble``: a deep ensemble of ``--num-members`` MAP solutions of ``--map-steps`` steps.

Every fit is a run folder ``--out/<dataset>/split<k>/<method>`` that ``bnn-ppl evaluate``
reads; ``--out`` also gets ``uci_regression.png`` (test LL per data set and method, with the
MC-dropout reference) and ``summary.json``. The defaults run 2 splits and short chains, so the
standard errors are rough; ``--full`` runs all 20 splits and longer chains.

    python examples/uci_regression.py                    # about 11 minutes on 2 busy CPU cores
    python examples/uci_regression.py --full             # all 20 splits, longer runs (hours)
    python examples/uci_regression.py --datasets yacht --splits 1 --data-dir ../shared/data/uci

UCI files are read from ``--data-dir`` or ``$BNN_PPL_DATA``.
"""

from __future__ import annotations

import argparse
import os
import time

import jax
import numpyro.distributions as dist

import bnn_ppl as bp
from bnn_ppl.config import EnsembleConfig, HMCConfig, NUTSConfig, SVIConfig
from bnn_ppl.inference import fit_run
from bnn_ppl.io import write_json
from bnn_ppl.metrics.splits import MC_DROPOUT_LL, reference_verdicts, split_bars, split_table
from bnn_ppl.plots import save_figure

METHODS = ("HMC", "SVI", "ensemble")


def build_model(args: argparse.Namespace) -> bp.BNN:
    """MLP(width) with a Normal prior and a Gaussian likelihood with a HalfNormal noise prior."""
    return bp.BNN(bp.models.MLP(hidden=(args.width,), out=1),
                  prior=bp.priors.Normal(args.prior_scale),
                  likelihood=bp.likelihoods.Gaussian(scale=dist.HalfNormal(args.noise_prior)))


def configs(args: argparse.Namespace) -> dict[str, bp.config.Config]:
    """The config of every method (the keys of ``METHODS``)."""
    mcmc = dict(num_warmup=args.num_warmup, num_samples=args.num_samples)
    return {
        "HMC": NUTSConfig(max_tree_depth=args.max_tree_depth, **mcmc) if args.sampler == "nuts"
        else HMCConfig(trajectory_length=args.trajectory_length, **mcmc),
        "SVI": SVIConfig(num_steps=args.num_steps, map_steps=args.map_steps,
                         num_samples=args.num_samples),
        "ensemble": EnsembleConfig(num_members=args.num_members, num_steps=args.map_steps),
    }  # fmt: skip


def main(args: argparse.Namespace) -> None:
    model, cfgs = build_model(args), configs(args)
    options = {k: vars(args)[k] for k in ("width", "prior_scale", "noise_prior")}
    print(f"UCI standard splits, MLP({args.width}) ReLU, prior Normal({args.prior_scale}), noise "
          f"HalfNormal({args.noise_prior}); splits 0..{args.splits - 1}; HMC "
          f"{args.num_warmup}+{args.num_samples}, SVI {args.map_steps} MAP + {args.num_steps} "
          f"steps, ensemble {args.num_members} x {args.map_steps} steps; the HMC row is "
          + (f"NUTS (max tree depth {args.max_tree_depth})" if args.sampler == "nuts" else
             f"HMC (trajectory length {args.trajectory_length or 'default'})"))
    results: dict[str, dict[str, dict[str, list[float]]]] = {}
    start = time.perf_counter()
    for name in args.datasets:
        results[name] = {m: {"rmse": [], "ll": []} for m in METHODS}
        for split in range(args.splits):
            data = bp.data.load(f"uci/{name}", split=split, data_dir=args.data_dir)
            keys = jax.random.split(jax.random.key(args.seed + split), len(METHODS))
            for m, key in zip(METHODS, keys, strict=True):
                folder = os.path.join(args.out, name, f"split{split}", cfgs[m].method)
                _, record = fit_run(folder, model, data, cfgs[m], key, options=options,
                                    split=split)
                results[name][m]["rmse"].append(record["metrics"]["rmse"])
                results[name][m]["ll"].append(-record["metrics"]["nll"])
        print(f"  {name}: {len(data.x_train)} train / {len(data.x_test)} test rows, "
              f"{time.perf_counter() - start:.0f} s so far", flush=True)
    wall = time.perf_counter() - start

    print("\nclaim: a BNN's BMA (HMC) on the standard protocol is competitive with or better "
          "than MC dropout in test log-likelihood (higher is better)")
    print(f"test RMSE and LL in original units, mean ± SE over {args.splits} split(s); "
          f"total wall time {wall:.0f} s")
    print(split_table(results, columns=[("rmse", "RMSE"), ("ll", "LL")],
                      reference=MC_DROPOUT_LL, reference_label="LL MC-dropout"))
    for line in reference_verdicts(results, method="HMC", metric="ll", reference=MC_DROPOUT_LL,
                                   label="LL", reference_label="MC dropout"):
        print(f"  {line}")
    png = os.path.join(args.out, "uci_regression.png")
    save_figure(split_bars(results, "ll", reference=MC_DROPOUT_LL, ylabel="test log-likelihood "
                           "(original units)", reference_label="MC dropout (Gal)"), png)
    path = os.path.join(args.out, "summary.json")
    write_json(path, {"args": vars(args), "results": results, "mc_dropout_ll": MC_DROPOUT_LL,
                      "wall_time_s": wall})
    print(f"wrote {png}, {path} and one run folder per fit under {args.out}/")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--datasets", nargs="+", default=list(MC_DROPOUT_LL), choices=sorted(
        ("boston", "concrete", "energy", "kin8nm", "naval", "power", "protein", "wine-red",
         "yacht")))  # fmt: skip
    p.add_argument("--splits", type=int, default=2, help="splits 0..k-1 (--full: all 20)")
    p.add_argument("--full", action="store_true",
                   help="all 20 splits, HMC 1000+1000, 4x the SVI/MAP steps")
    p.add_argument("--data-dir", default=os.environ.get("BNN_PPL_DATA"),
                   help="folder of the UCI split files (default: $BNN_PPL_DATA)")
    p.add_argument("--width", type=int, default=50)
    p.add_argument("--prior-scale", type=float, default=1.0)
    p.add_argument("--noise-prior", type=float, default=1.0,
                   help="scale of the HalfNormal prior on the noise sd (standardised y)")
    p.add_argument("--num-warmup", type=int, default=200)
    p.add_argument("--num-samples", type=int, default=200, help="HMC samples and SVI draws")
    p.add_argument("--sampler", choices=("nuts", "hmc"), default="nuts",
                   help="the HMC row: NUTS with a bounded tree depth, or fixed-trajectory HMC")
    p.add_argument("--max-tree-depth", type=int, default=6, help="NUTS (--full: 10)")
    p.add_argument("--trajectory-length", type=float, default=None,
                   help="HMC (default: a quarter period in the adapted metric)")
    p.add_argument("--map-steps", type=int, default=3000,
                   help="Adam steps of a MAP solution: each ensemble member, SVI's start")
    p.add_argument("--num-steps", type=int, default=3000, help="SVI steps")
    p.add_argument("--num-members", type=int, default=5, help="ensemble members")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="runs/uci_regression")
    args = p.parse_args(argv)
    if args.full:
        args.splits, args.num_warmup, args.num_samples = 20, 1000, 1000
        args.max_tree_depth, args.map_steps = 10, 4 * args.map_steps
        args.num_steps = 4 * args.num_steps
    if not 1 <= args.splits <= 20:
        p.error("--splits must be between 1 and 20")
    return args


if __name__ == "__main__":
    main(parse_args())

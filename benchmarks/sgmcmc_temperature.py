"""Kinetic temperature of the momentum SG-MCMC kernels at their defaults, on a matrix of problems.

For each data set (diabetes, digits, iris, UCI boston split 0), batch size (32 and the full
batch), hidden width (16 and 64) and kernel (SGHMC, SGNHT, ATMC), ``bp.fit`` runs at
``step_size=None`` and the automatic burn-in (``cycle_length=200``, ``num_samples=5``) and the
table gives the mean kinetic temperature over every sampling step (1 at equilibrium), the
burn-in cycles run (in brackets) and the accuracy check's problems. Usage:
``python benchmarks/sgmcmc_temperature.py [--quick] [--data ...] [--widths ...] [--batches ...]``.
"""

from __future__ import annotations

import argparse
import os
import time
import warnings
from pathlib import Path

import jax

import bnn_ppl as bp
from bnn_ppl.config import ATMCConfig, SGHMCConfig, SGNHTConfig
from bnn_ppl.models import MLP

UCI = os.environ.get("BNN_PPL_DATA") or str(
    Path(__file__).resolve().parents[2] / "shared" / "data" / "uci"
)
CONFIGS = {"SGHMC": SGHMCConfig, "SGNHT": SGNHTConfig, "ATMC": ATMCConfig}
DATASETS = {  # name: (load options, output units, likelihood)
    "diabetes": ({}, 1, lambda: bp.likelihoods.Gaussian(0.5)),
    "digits": ({}, 10, bp.likelihoods.Categorical),
    "iris": ({}, 3, bp.likelihoods.Categorical),
    "uci/boston": ({"split": 0, "data_dir": UCI}, 1,
                   lambda: bp.likelihoods.Gaussian(0.5)),
}
WIDTHS = (16, 64)


def run_case(data_name, batch, width, kernel, *, cycle_length=200, num_samples=5, seed=0):
    """``(kinetic temperature, burn-in cycles, problems)`` of one default fit."""
    options, out, likelihood = DATASETS[data_name]
    data = bp.data.load(data_name, **options)
    model = bp.BNN(MLP(hidden=(width,), out=out), bp.priors.Normal(1.0), likelihood())
    config = CONFIGS[kernel](cycle_length=cycle_length, num_samples=num_samples,
                             batch_size=batch)  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        post = bp.fit(model, data, config, jax.random.key(seed))
    acc = post.config["accuracy"]
    return acc["kinetic_temperature"], post.config["num_warmup_used"], acc["problems"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="width 16 and batch 32 only")
    parser.add_argument("--data", nargs="*", default=list(DATASETS), choices=list(DATASETS))
    parser.add_argument("--widths", nargs="*", type=int, default=list(WIDTHS))
    parser.add_argument("--batches", nargs="*", default=["32", "full"],
                        help="batch sizes ('full': the whole training set)")
    args = parser.parse_args()
    widths = tuple(args.widths)
    batches = tuple(None if b == "full" else int(b) for b in args.batches)
    if args.quick:
        widths, batches = (16,), (32,)
    print("| data | batch | width | " + " | ".join(CONFIGS) + " |")
    print("|---|---|---|" + "---|" * len(CONFIGS))
    start = time.perf_counter()
    for name in args.data:
        for batch in batches:
            for width in widths:
                cells = []
                for kernel in CONFIGS:
                    t, burn, problems = run_case(name, batch, width, kernel)
                    flag = f" ({len(problems)} warned)" if problems else ""
                    cells.append(f"{t:.3f} [{burn}]{flag}")
                print(f"| {name} | {batch or 'full'} | {width} | " + " | ".join(cells) + " |",
                      flush=True)  # fmt: skip
    print(f"\n{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()

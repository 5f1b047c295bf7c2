"""Benchmark: do longer trajectories mix a reference run's chains faster per gradient?

Every fixed-noise UCI reference run (``examples/references/README.md``) cut its trajectories to
``max_num_steps=256`` leapfrog steps, 8-16 % of the quarter period (π/2 in the adapted metric)
the recipe asks for, because the adapted step sizes are tiny (0.0005-0.002); the cap keeps
warmup affordable. Would a larger cap after warmup pay for itself? This continues one adapted
state - a reference run's newest checkpoint (:func:`bnn_ppl.inference.reference_hmc` with a
``checkpoint_dir``): the same positions, step sizes and mass matrices, nothing re-adapted -
once per cap, each for the same number of gradient evaluations, and prints per cap: leapfrog
steps per draw, trajectory length, acceptance, the bulk ESS (rank-normalised, over the
chains) of the potential energy and of the predictive mean at every test row per 1000
gradients (min and median over rows), the share of rows with R-hat > 1.01, and the ratio of
each to the first cap's. The run's own settings are read from the folder's ``run.json``; only
``max_num_steps`` changes.

Usage::

    python benchmarks/trajectory_cap.py --dataset boston --noise 0.07 \\
        --checkpoint-dir runs/boston_noise007_init --caps 256 1024 --gradients 4096000
    python benchmarks/trajectory_cap.py --quick    # a tiny run of its own: a smoke test
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import warnings

import jax
import numpy as np

import bnn_ppl as bp
from bnn_ppl.config import ReferenceHMCConfig
from bnn_ppl.diagnostics import rhat_bulk_ess
from bnn_ppl.function_values import function_values
from bnn_ppl.inference import reference_hmc
from bnn_ppl.inference.checkpoint_store import CheckpointStore, saved_fingerprint
from bnn_ppl.inference.reference_chains import (
    as_segment,
    build_chains,
    continue_chains,
    segment_arrays_of,
)
from bnn_ppl.inference.reference_kernels import chain_kernel
from bnn_ppl.inference.resume import state_from_arrays
from bnn_ppl.models import MLP, mlp_bnn


def folder_config(folder: str, cap: int) -> ReferenceHMCConfig:
    """The reference run's settings from ``folder``'s fingerprint, with ``max_num_steps=cap``."""
    fields = saved_fingerprint(folder)["fields"]
    settings = {k[len("config."):]: v for k, v in fields.items()
                if k.startswith("config.") and k != "config.method"}  # fmt: skip
    return ReferenceHMCConfig(**(settings | {"max_num_steps": cap}))


def continue_with_cap(model, x, y, x_test, folder: str, cap: int, gradients: int) -> dict:
    """The newest state in ``folder`` continued with ``cap`` for about ``gradients`` gradient
    evaluations (every trajectory at the cap: a draw costs ``cap`` per chain)."""
    c = folder_config(folder, cap)
    mcmc, pot, init, run_key = build_chains(model, x, y, c, jax.random.key(0))
    kernel = chain_kernel(c)
    keys = jax.random.split(run_key, c.num_chains)
    template = mcmc.sampler.init(keys, c.num_warmup, init, pot.args, {})
    with CheckpointStore(folder, saved_fingerprint(folder)) as store:  # verified read
        record = store.latest()
        newest = os.path.join(folder, record.state_file)
        state = state_from_arrays(store.load_state(record), template, newest)
    draws = max(gradients // (cap * c.num_chains), 8)
    t0 = time.perf_counter()
    continue_chains(mcmc, pot, state, draws, kernel.extra_fields)
    seg = as_segment(segment_arrays_of(mcmc, kernel))
    seconds = time.perf_counter() - t0
    used = kernel.gradients(seg.extra, draws)
    values = function_values(model, seg.samples, x_test, "mean")
    rhat, ess = rhat_bulk_ess(values)
    _, ess_pe = rhat_bulk_ess(seg.extra["potential_energy"])
    per = 1000.0 / used
    return {
        "cap": cap, "draws": draws, "gradients": used, "seconds": seconds,
        "steps": float(np.mean(seg.extra["num_steps"])),
        "length": float(np.mean(seg.state["trajectory_length"])),
        "accept": float(np.mean(seg.extra["accept_prob"])),
        "ess_pe": float(ess_pe) * per,
        "ess_min": float(np.min(ess)) * per, "ess_median": float(np.median(ess)) * per,
        "rhat_over": float(np.mean(rhat > 1.01)), "file": os.path.basename(newest),
    }  # fmt: skip


def quick_folder() -> tuple[object, np.ndarray, np.ndarray, np.ndarray, str]:
    """A tiny reference run of its own, checkpointed: (model, x, y, x_test, folder)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 2)).astype(np.float32)
    y = np.sin(x[:, 0]).astype(np.float32)
    model = bp.BNN(MLP(hidden=(4,), out=1), bp.priors.Normal(1.0), bp.likelihoods.Gaussian(0.1))
    folder = os.path.join(tempfile.mkdtemp(), "ckpt")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (far too short to converge: a smoke test)
        reference_hmc(model, (x, y), x_test=x[:5], rng_key=jax.random.key(0), num_warmup=40,
                      segment_draws=10, max_draws=10, max_num_steps=16, checkpoint_dir=folder)
    return model, x, y, x[:5], folder


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="boston")
    p.add_argument("--split", type=int, default=0)
    p.add_argument("--noise", type=float, default=None, help="the run's fixed noise sd")
    p.add_argument("--width", type=int, default=50)
    p.add_argument("--prior-scale", type=float, default=1.0)
    p.add_argument("--checkpoint-dir", default=None, help="the reference run's folder")
    p.add_argument("--caps", type=int, nargs="+", default=[256, 1024])
    p.add_argument("--gradients", type=int, default=4_096_000, help="per cap, all chains")
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    if args.quick:
        model, x, y, x_test, folder = quick_folder()
        args.caps, args.gradients = [8, 32], 4 * 32 * 16
    else:
        if args.checkpoint_dir is None:
            p.error("--checkpoint-dir is needed (or --quick)")
        data = bp.data.load_subset(args.dataset, split=args.split)
        model = mlp_bnn(data, args.width, args.prior_scale, noise=args.noise)
        x, y, x_test, folder = data.x_train, data.y_train, data.x_test, args.checkpoint_dir
    rows = []
    for cap in args.caps:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # LeapfrogLimitWarning: the cap is the point
            rows.append(continue_with_cap(model, x, y, x_test, folder, cap, args.gradients))
    print(f"from {rows[0]['file']} in {folder}; about {args.gradients:,} gradients per cap")
    head = ("cap", "draws", "gradients", "steps", "length", "accept", "ESS/1k pot",
            "ESS/1k min", "ESS/1k med", "R-hat>1.01", "seconds")  # fmt: skip
    print("".join(f"{h:>12}" for h in head))
    for r in rows:
        print(f"{r['cap']:>12}{r['draws']:>12}{r['gradients']:>12,}{r['steps']:>12.1f}"
              f"{r['length']:>12.3f}{r['accept']:>12.3f}{r['ess_pe']:>12.3f}{r['ess_min']:>12.3f}"
              f"{r['ess_median']:>12.3f}{r['rhat_over']:>12.2f}{r['seconds']:>12.1f}")  # fmt: skip
    base = rows[0]
    for r in rows[1:]:
        ratio = {k: r[k] / base[k] for k in ("ess_pe", "ess_min", "ess_median")}
        print(f"cap {r['cap']} / cap {base['cap']}: ESS per gradient x{ratio['ess_pe']:.2f} "
              f"(potential), x{ratio['ess_min']:.2f} (slowest row), x{ratio['ess_median']:.2f} "
              "(median row)")


if __name__ == "__main__":
    main()

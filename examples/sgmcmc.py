"""SG-MCMC against full-batch HMC: ATMC, SGNHT, SGHMC, SGLD on one BNN (ATMC paper, Table 1).

Every sampler fits the same tempered posterior through :func:`bnn_ppl.inference.fit` into a
run folder ``--out/<part>/<method>`` that ``bnn-ppl evaluate`` reads: ``hmc`` (full-batch,
``--num-chains`` chains) is the reference; ``atmc``, ``sgnht``, ``sghmc`` and ``sgld`` run
``--sg-chains`` chains on minibatches of ``--batch-size`` rows with the cyclical cosine step size
and one draw at the end of each of ``--cycles`` cycles after ``--burnin-cycles``. The step size
at cycle starts is each sampler's :func:`~bnn_ppl.inference.recommended_step_size` for the
curvature and minibatch noise measured at HMC's last draw (``--step-size`` /
``--sgld-step-size`` override it).

Table 1 (:mod:`bnn_ppl.metrics.comparison`): ``single`` accuracy and NLL of one draw, averaged
over draws; the BMA's; ``agree``/``TV`` of the BMA to HMC's (HMC's row: its first chain against
the others, the noise floor). Sampler columns (:mod:`bnn_ppl.metrics.efficiency`): ``h0``;
``grads`` in full-batch gradients (HMC: leapfrog steps; SG-MCMC: steps x batch / rows); ``ESS``
of the true-class probability and per 1,000 gradients; ``w var``/``f var``: within-chain
variance in weight and function space relative to HMC's. A diverged sampler is reported, not
averaged. ``summary.json`` holds the numbers and the scales; each can be recomputed from the run
folders. A second part repeats this with LeNet-5 on ``--cnn-dataset`` (``mnist``: the first
``--cnn-max-train`` images, skipped when tfds has not prepared it; ``digits``; ``none``).

Run it (about ten minutes on 2 CPU cores), or a quick smoke run::

    python examples/sgmcmc.py --cnn-dataset none
    python examples/sgmcmc.py --num-warmup 10 --num-samples 10 --num-chains 1 --width 8 \\
        --max-train 200 --trajectory-length 0.05 --cycle-length 20 --burnin-cycles 1 \\
        --cycles 3 --batch-size 50 --cnn-dataset none --out /tmp/sgmcmc
"""

from __future__ import annotations

import argparse
import math
import os
from typing import Any

import jax
import numpy as np

import bnn_ppl as bp
from bnn_ppl import config as cfg
from bnn_ppl.divergence import DivergedError
from bnn_ppl.inference import fit_run, full_batch_potential, gradient_scales, recommended_step_size
from bnn_ppl.io import write_json
from bnn_ppl.metrics import comparison as cmp
from bnn_ppl.metrics.efficiency import sampler_table

SG = {"ATMC": cfg.ATMCConfig, "SGNHT": cfg.SGNHTConfig, "SGHMC": cfg.SGHMCConfig,
      "SGLD": cfg.SGLDConfig}  # fmt: skip
METHODS = ("HMC", *SG)
MODEL_OPTIONS = ("width", "prior_scale", "cnn_prior_scale", "temperature")
COLUMNS = {"single_accuracy": "single acc", "single_nll": "single NLL", "accuracy": "BMA acc",
           "nll": "BMA NLL", "agreement": "agree", "tv": "TV"}  # fmt: skip
SAMPLER_COLUMNS = {"step_size": "h0", "gradients": "grads", "ess": "ESS",
                   "ess_per_kgrad": "ESS/kgrad", "weight_var_ratio": "w var",
                   "function_var_ratio": "f var"}  # fmt: skip


def build_model(args: argparse.Namespace, num_classes: int, network: str) -> bp.BNN:
    """``"mlp"``: one hidden layer, an isotropic Normal prior; ``"cnn"``: LeNet-5 with a fan-in
    scaled Normal prior. Categorical likelihood, temperature ``args.temperature``."""
    if network == "mlp":
        net, prior = bp.models.MLP(hidden=(args.width,), out=num_classes), args.prior_scale
    else:
        net, prior = bp.models.LeNet5(out=num_classes), args.cnn_prior_scale
    return bp.BNN(net, bp.priors.Normal(prior, fan_in=network == "cnn"),
                  bp.likelihoods.Categorical(), temperature=args.temperature)  # fmt: skip


def compare(args: argparse.Namespace, data: bp.data.Dataset, part: str, key: jax.Array) -> dict:
    """HMC and the SG-MCMC samplers on one (data, network): print and return the results."""
    model = build_model(args, data.num_classes, part)
    print(f"{data.name} / {part}: {len(data.x_train)} train / {len(data.x_test)} test rows, "
          f"{model.num_params(data.x_train[:1])} parameters", flush=True)  # fmt: skip
    keys = dict(zip(METHODS, jax.random.split(key, len(METHODS)), strict=True))
    out = os.path.join(args.out, part)
    options = {"network": part} | {k: getattr(args, k) for k in MODEL_OPTIONS}

    def run(name: str, config: cfg.Config) -> tuple[bp.Posterior, dict[str, Any]]:
        post, record = fit_run(os.path.join(out, name.lower()), model, data, config, keys[name],
                               options=options)  # fmt: skip
        print(f"  {name}: {record['wall_time_s']:.1f} s", flush=True)
        return post, record

    hmc, record = run("HMC", cfg.HMCConfig(num_warmup=args.num_warmup, num_chains=args.num_chains,
                                           num_samples=args.num_samples,
                                           trajectory_length=args.trajectory_length))
    pot = full_batch_potential(model, data.x_train, data.y_train)
    last = {k: v[0, -1] for k, v in hmc.samples.items()}  # a typical posterior position
    scales = gradient_scales(pot, pot.unconstrain(last), args.batch_size, rng_key=keys["HMC"])
    steps = {name: recommended_step_size(name, scales) for name in SG}
    steps |= {n: args.step_size for n in ("ATMC", "SGNHT", "SGHMC") if args.step_size}
    steps |= {"SGLD": args.sgld_step_size} if args.sgld_step_size else {}
    print(f"  scales at HMC's last draw: curvature {scales.curvature:.4g}, gradient noise "
          f"{scales.noise:.4g} (batch {args.batch_size})", flush=True)  # fmt: skip
    posts = {"HMC": hmc}
    work = {"HMC": float(np.sum(hmc.sample_stats["n_steps"]))}
    diverged = []
    for name, config_cls in SG.items():
        config = config_cls(num_warmup=args.burnin_cycles, num_samples=args.cycles,
                            num_chains=args.sg_chains, cycle_length=args.cycle_length,
                            batch_size=args.batch_size, step_size=steps[name])  # fmt: skip
        try:
            posts[name], _ = run(name, config)
        except DivergedError as err:
            print(f"  {name}: {err}")
            diverged.append(name)
        work[name] = args.cycles * args.cycle_length * args.sg_chains * args.batch_size / len(
            data.x_train)  # fmt: skip

    probs = {m: cmp.posterior_predictions(p, chains=True) for m, p in posts.items()}
    results = sampler_table(probs, {m: p.samples for m, p in posts.items()}, data.y_test, work,
                            reference="HMC")  # fmt: skip
    for m in results:
        results[m]["step_size"] = steps.get(m, math.nan)
    rows = {m: results.get(m) for m in METHODS}
    print("\n" + cmp.format_table(rows, COLUMNS, fmt=".4g"))
    print("\n" + cmp.format_table(rows, SAMPLER_COLUMNS, fmt=".4g"))
    h = record["summary"]["chains"]
    print(f"\nHMC: {args.num_chains} chain(s) x {args.num_samples} draws, accept prob "
          f"{np.mean([c['accept_prob'] for c in h]):.3f}, {sum(c['divergences'] for c in h)} "
          f"divergences. SG-MCMC: {args.sg_chains} chain(s), batch {args.batch_size}, "
          f"{args.burnin_cycles} burn-in + {args.cycles} cycles of {args.cycle_length} steps")
    return {"dataset": data.name, "results": results, "diverged": diverged,
            "scales": scales._asdict()}  # fmt: skip


def main(args: argparse.Namespace) -> None:
    mlp_key, cnn_key = jax.random.split(jax.random.key(args.seed))
    payload: dict[str, Any] = {"args": vars(args)}
    payload["mlp"] = compare(args, bp.data.load("digits").head(args.max_train), "mlp", mlp_key)
    print()
    if args.cnn_dataset == "none":
        print("CNN part skipped (--cnn-dataset none)")
    else:
        try:
            data = bp.data.load(args.cnn_dataset).head(args.cnn_max_train)
            if data.x_train.ndim == 2:  # the 8x8 digits as images
                side = math.isqrt(data.x_train.shape[1])
                data = data._replace(x_train=data.x_train.reshape(-1, side, side, 1),
                                     x_test=data.x_test.reshape(-1, side, side, 1))  # fmt: skip
        except bp.data.DataNotFoundError as err:
            reason = str(err).split(",")[0]
            print(f"CNN part skipped: {reason} (bnn_ppl never downloads).")
            payload["cnn"] = {"dataset": args.cnn_dataset, "skipped": reason}
        else:
            payload["cnn"] = compare(args, data, "cnn", cnn_key)
    path = os.path.join(args.out, "summary.json")
    write_json(path, payload)
    print(f"\nwrote {path}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    for flag, kind, default, text in (
        ("--width", int, 50, "MLP hidden units"),
        ("--prior-scale", float, 0.3, "MLP prior sd"),
        ("--cnn-prior-scale", float, 1.0, "CNN: prior sd times sqrt(fan-in)"),
        ("--temperature", float, 1.0, "posterior temperature"),
        ("--max-train", int, None, "digits: use only the first k training rows"),
        ("--num-warmup", int, 200, "HMC warmup"),
        ("--num-samples", int, 200, "HMC draws per chain"),
        ("--num-chains", int, 2, "HMC chains"),
        ("--trajectory-length", float, None, "HMC trajectory (default: (π/2)·prior sd)"),
        ("--sg-chains", int, 2, "chains per SG-MCMC sampler"),
        ("--batch-size", int, 128, "minibatch rows (at most the training rows)"),
        ("--cycle-length", int, 1000, "steps per cycle"),
        ("--burnin-cycles", int, 2, "cycles of burn-in"),
        ("--cycles", int, 20, "cycles after burn-in: one draw each"),
        ("--step-size", float, None, "ATMC/SGNHT/SGHMC step at cycle starts (recommended)"),
        ("--sgld-step-size", float, None, "SGLD step at cycle starts (default: recommended)"),
        ("--cnn-max-train", int, 2000, "CNN: use only the first k training images"),
        ("--seed", int, 0, "random seed"),
    ):
        p.add_argument(flag, type=kind, default=default, help=text)
    p.add_argument("--cnn-dataset", choices=("mnist", "fashion_mnist", "digits", "none"),
                   default="mnist")  # fmt: skip
    p.add_argument("--out", default="runs/sgmcmc", help="run folders and summary.json")
    return p.parse_args(argv)


if __name__ == "__main__":
    main(parse_args())

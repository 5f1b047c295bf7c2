"""SG-MCMC against full-batch HMC: ATMC, SGNHT, SGHMC, SGLD on one BNN (ATMC paper, Table 1).

Every sampler fits the same tempered posterior with :func:`bnn_ppl.inference.fit_run` into a
run folder ``--out/<part>/<method>`` that ``bnn-ppl evaluate`` reads: ``hmc`` (full-batch,
``--num-chains`` chains) is the reference; ``atmc``, ``sgnht``, ``sghmc`` and ``sgld`` run
``--sg-chains`` chains on minibatches of ``--batch-size`` rows with the cyclical cosine step size
and one draw at the end of each of ``--cycles`` cycles after ``--burnin-cycles`` (default: the
automatic burn-in of :class:`~bnn_ppl.config.SGMCMCConfig`), starting each
cycle at the :func:`~bnn_ppl.inference.sgmcmc.step_size.recommended_step_sizes` at HMC's last
draw (or
``--step-size`` / ``--sgld-step-size``). It prints Table 1 and the sampler columns of
:func:`bnn_ppl.metrics.efficiency.sampler_table` (``agree``/``TV`` to HMC's BMA; ``grads`` in
full-batch gradients; ``w var``/``f var``: within-chain variance relative to HMC's), then what
:func:`~bnn_ppl.inference.check_accuracy` finds in every sampling step of each SG-MCMC run
(kinetic temperature, noise share, SGNHT's cold bias, ...). A diverged sampler is reported,
not averaged (its run folder says why). ``summary.json`` holds the numbers. A second part
repeats this with LeNet-5 on ``--cnn-dataset`` (``mnist``: the first ``--cnn-max-train``
images, skipped when tfds has not prepared it; ``digits``; ``none``).
``python examples/sgmcmc.py --cnn-dataset none``: about six minutes on 2 CPU cores.
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
from bnn_ppl.inference import fit_run, full_batch_potential
from bnn_ppl.inference.sgmcmc.step_size import recommended_step_sizes
from bnn_ppl.io import write_json
from bnn_ppl.metrics import comparison as cmp
from bnn_ppl.metrics.efficiency import SAMPLER_COLUMNS, TABLE1_COLUMNS, posterior_sampler_table
from bnn_ppl.models import mlp_bnn

SG = {"ATMC": cfg.ATMCConfig, "SGNHT": cfg.SGNHTConfig, "SGHMC": cfg.SGHMCConfig,
      "SGLD": cfg.SGLDConfig}  # fmt: skip
METHODS = ("HMC", *SG)
MODEL_OPTIONS = ("width", "prior_scale", "cnn_prior_scale", "temperature")


def compare(args: argparse.Namespace, data: bp.data.Dataset, part: str, key: jax.Array) -> dict:
    """HMC and the SG-MCMC samplers on one (data, network): print and return the results."""
    if part == "mlp":  # one hidden layer; LeNet-5 with a fan-in scaled Normal prior
        model = mlp_bnn(data, args.width, args.prior_scale, temperature=args.temperature)
    else:
        model = bp.BNN(bp.models.LeNet5(out=data.num_classes),
                       bp.priors.Normal(args.cnn_prior_scale, fan_in=True),
                       bp.likelihoods.Categorical(), temperature=args.temperature)  # fmt: skip
    print(f"\n{data.name} / {part}: {len(data.x_train)} train / {len(data.x_test)} test rows, "
          f"{model.num_params(data.x_train[:1])} parameters", flush=True)  # fmt: skip
    keys = dict(zip(METHODS, jax.random.split(key, len(METHODS)), strict=True))
    options = {"network": part} | {k: getattr(args, k) for k in MODEL_OPTIONS}

    def run(name: str, config: cfg.Config) -> tuple[bp.Posterior, dict[str, Any]]:
        post, record = fit_run(os.path.join(args.out, part, name.lower()), model, data, config,
                               keys[name], options=options)  # fmt: skip
        print(f"  {name}: {record['wall_time_s']:.1f} s", flush=True)
        return post, record

    hmc, record = run("HMC", cfg.HMCConfig(num_warmup=args.num_warmup, num_chains=args.num_chains,
                                           num_samples=args.num_samples,
                                           trajectory_length=args.trajectory_length))
    steps, scales = recommended_step_sizes(  # at a typical posterior position: HMC's last draw
        full_batch_potential(model, data.x_train, data.y_train),
        {k: v[0, -1] for k, v in hmc.samples.items()}, args.batch_size, rng_key=keys["HMC"])
    steps |= {n: args.step_size for n in ("ATMC", "SGNHT", "SGHMC") if args.step_size}
    steps |= {"SGLD": args.sgld_step_size} if args.sgld_step_size else {}
    print(f"  scales at HMC's last draw: curvature {scales.curvature:.4g}, gradient noise "
          f"{scales.noise:.4g} (batch {args.batch_size})", flush=True)  # fmt: skip
    posts, accuracy, diverged = {"HMC": hmc}, {}, []
    for name, config_cls in SG.items():
        config = config_cls(num_warmup=args.burnin_cycles, num_samples=args.cycles,
                            num_chains=args.sg_chains, cycle_length=args.cycle_length,
                            batch_size=args.batch_size, step_size=steps[name])  # fmt: skip
        try:
            posts[name], sg_record = run(name, config)
            accuracy[name] = sg_record["summary"]["accuracy"]  # what check_accuracy found
        except DivergedError as err:  # (its run folder's metrics.json says so)
            print(f"  {name}: {err}")
            diverged.append(name)
    results = {m: r | {"step_size": steps.get(m, math.nan)} for m, r in
               posterior_sampler_table(posts, len(data.x_train), reference="HMC").items()}
    rows = {m: results.get(m) for m in METHODS}
    print("\n" + cmp.format_table(rows, TABLE1_COLUMNS, fmt=".4g"))
    print("\n" + cmp.format_table(rows, SAMPLER_COLUMNS, fmt=".4g"))
    h = record["summary"]["chains"]
    print(f"\nHMC: {args.num_chains} chain(s) x {args.num_samples} draws, accept prob "
          f"{np.mean([c['accept_prob'] for c in h]):.3f}, {sum(c['divergences'] for c in h)} "
          f"divergences; SG-MCMC: {args.sg_chains} chain(s), batch {args.batch_size}")
    for name, r in accuracy.items():  # (the kernels' Info over every sampling step; SGLD has
        t = r.get("kinetic_temperature", math.nan)  # no momentum, so no kinetic temperature)
        print(f"  check_accuracy {name}: kinetic temperature {t:.3g}, noise share <= "
              f"{r['noise_share']:.3g}: {'; '.join(r['problems']) or 'no problems'}")
    return {"dataset": data.name, "results": results, "diverged": diverged,
            "accuracy": accuracy, "scales": scales._asdict()}  # fmt: skip


def main(args: argparse.Namespace) -> None:
    mlp_key, cnn_key = jax.random.split(jax.random.key(args.seed))
    payload: dict[str, Any] = {"args": vars(args)}
    payload["mlp"] = compare(args, bp.data.load("digits").head(args.max_train), "mlp", mlp_key)
    if args.cnn_dataset == "none":
        print("\nCNN part skipped (--cnn-dataset none)")
    else:
        try:
            data = bp.data.load(args.cnn_dataset).head(args.cnn_max_train).as_images()  # digits
            payload["cnn"] = compare(args, data, "cnn", cnn_key)
        except bp.data.DataNotFoundError as err:  # (never raised once the data are loaded)
            payload["cnn"] = {"dataset": args.cnn_dataset, "skipped": str(err).split(",")[0]}
            print(f"\nCNN part skipped: {payload['cnn']['skipped']} (bnn_ppl never downloads).")
    write_json(path := os.path.join(args.out, "summary.json"), payload)
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
        ("--burnin-cycles", int, None, "cycles of burn-in (default: automatic)"),
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

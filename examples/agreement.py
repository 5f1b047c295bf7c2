"""How close are approximate posteriors to HMC? Agreement and total variation with HMC's BMA.

Izmailov et al. (2021, "How close are other methods to HMC?"): all scalable methods make
predictions distinct from HMC's; SG-MCMC comes closest, and deep ensembles are closer to HMC
than mean-field variational inference. This example fits one one-hidden-layer BNN on digits
(Normal prior, categorical likelihood) with :func:`bnn_ppl.inference.fit`, each method into its
own run folder under ``--out`` (default ``runs/agreement``) that ``bnn-ppl evaluate`` reads:

* ``hmc``: ``--num-chains`` (at least 2) full-batch HMC chains, the reference: the BMA pooled
  over all chains;
* ``ensemble``: ``--num-members`` MAP solutions of ``--map-steps`` each;
* ``svi``: mean-field VI started at a MAP solution, ``--svi-samples`` draws from the guide;
* ``sghmc``: SGHMC on minibatches of ``--batch-size`` with the cyclical cosine step size from
  ``--step-size`` (default: the recommended one), one draw at the end of each of ``--cycles``
  cycles after ``--burnin-cycles`` (default: the automatic burn-in).

It prints, for each method's BMA on the test set, accuracy, NLL, agreement (equal top-1
predictions) and total variation with HMC's pooled BMA (:mod:`bnn_ppl.metrics.comparison`). The
row ``HMC chains`` compares the BMA of chain 1 with that of the other chains: the Monte Carlo
noise floor of both columns. The claim counts as supported when the ensemble's agreement is
higher and its TV lower than SVI's; a second line says whether the TV gap between them exceeds
the noise floor's TV. ``agreement.png`` shows both as bars; ``summary.json`` holds the numbers.

Run it with the defaults (a few minutes on 2 CPU cores)::

    python examples/agreement.py
    python examples/agreement.py --full

or a quick smoke run::

    python examples/agreement.py --width 8 --num-warmup 10 --num-samples 10 --max-train 200 \\
        --map-steps 50 --num-steps 50 --svi-samples 10 --num-members 2 \\
        --cycle-length 20 --cycles 2 --out /tmp/agreement
"""

from __future__ import annotations

import argparse
import os

import jax
from matplotlib.figure import Figure

import bnn_ppl as bp
from bnn_ppl.config import Config, EnsembleConfig, HMCConfig, SGHMCConfig, SVIConfig
from bnn_ppl.inference import fit_run
from bnn_ppl.io import write_json
from bnn_ppl.metrics.comparison import (
    compare_to_reference,
    format_table,
    noise_floor,
    posterior_predictions,
)
from bnn_ppl.plots import save_figure

NAMES = {"hmc": "HMC", "ensemble": "ensemble", "svi": "SVI", "sghmc": "SGHMC"}
FLOOR = "HMC chains"  # chain 1 vs the other chains: the noise floor
COLUMNS = {"accuracy": "accuracy", "nll": "NLL", "agreement": "agree w/ HMC", "tv": "TV w/ HMC"}


def configs(args: argparse.Namespace, num_train: int) -> dict[str, Config]:
    """One config per method, keyed by its run folder's name."""
    return {
        "hmc": HMCConfig(num_warmup=args.num_warmup, num_samples=args.num_samples,
                         num_chains=args.num_chains),
        "ensemble": EnsembleConfig(num_members=args.num_members, num_steps=args.map_steps),
        "svi": SVIConfig(map_steps=args.map_steps, num_steps=args.num_steps,
                         num_samples=args.svi_samples),
        "sghmc": SGHMCConfig(num_warmup=args.burnin_cycles, num_samples=args.cycles,
                             cycle_length=args.cycle_length, step_size=args.step_size,
                             batch_size=min(args.batch_size, num_train)),
    }  # fmt: skip


def plot(results: dict[str, dict[str, float]], title: str) -> Figure:
    """Agreement and TV with HMC's BMA as bars, one per method (HMC's own row left out)."""
    names = [m for m in results if m != "HMC"]
    fig = Figure(figsize=(9, 3.6), layout="constrained")
    for ax, metric, label in zip(fig.subplots(1, 2), ("agreement", "tv"),
                                 ("agreement with HMC (higher: closer)",
                                  "total variation to HMC (lower: closer)"), strict=True):
        colors = ["0.6" if m == FLOOR else f"C{i}" for i, m in enumerate(names)]
        ax.bar(names, [results[m][metric] for m in names], color=colors)
        ax.set_title(label)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(title)
    return fig


def main(args: argparse.Namespace) -> None:
    data = bp.data.load("digits").head(args.max_train)
    model = bp.models.mlp_bnn(data, args.width, args.prior_scale)  # Categorical, Normal prior
    print(f"digits: {len(data.x_train)} train / {len(data.x_test)} test rows; "
          f"MLP(hidden=({args.width},)), {model.num_params(data.x_train[:1])} parameters",
          flush=True)  # fmt: skip
    options = {"width": args.width, "prior_scale": args.prior_scale, "max_train": args.max_train}
    posts, walls = {}, {}
    keys = jax.random.split(jax.random.key(args.seed), len(NAMES))
    for (folder, config), key in zip(configs(args, len(data.x_train)).items(), keys, strict=True):
        posts[folder], record = fit_run(os.path.join(args.out, folder), model, data, config, key,
                                        options=options)  # fmt: skip
        walls[NAMES[folder]] = record["wall_time_s"]
        print(f"  {NAMES[folder]}: {walls[NAMES[folder]]:.1f} s", flush=True)

    preds = {NAMES[f]: posterior_predictions(p) for f, p in posts.items()}
    results = compare_to_reference(preds, data.y_test, task="classification", reference="HMC")
    results[FLOOR] = noise_floor(posterior_predictions(posts["hmc"], chains=True), data.y_test,
                                 task="classification")  # fmt: skip
    print("\n" + format_table(results, COLUMNS))
    ens, svi, floor = results["ensemble"], results["SVI"], results[FLOOR]["tv"]
    supported = ens["agreement"] > svi["agreement"] and ens["tv"] < svi["tv"]
    closest = min((m for m in results if m not in ("HMC", FLOOR)), key=lambda m: results[m]["tv"])
    print(f"\nHMC: {args.num_chains} chains x {args.num_samples} samples; closest to HMC by TV: "
          f"{closest}; noise floor (chain 1 vs the rest): agreement "
          f"{results[FLOOR]['agreement']:.4f}, TV {floor:.4f}")
    gap = svi["tv"] - ens["tv"]
    print(f"TV gap SVI - ensemble {gap:.4f}; {'larger' if abs(gap) > floor else 'smaller'} than "
          f"the noise floor {floor:.4f} (HMC chain 1 vs the rest): the ordering is "
          f"{'beyond' if abs(gap) > floor else 'within'} HMC's own Monte Carlo noise")
    print(f"claim (Izmailov et al.): deep ensembles are closer to HMC than mean-field VI "
          f"(higher agreement and lower TV): {'supported' if supported else 'NOT supported'} "
          "here")

    png = os.path.join(args.out, "agreement.png")
    save_figure(plot(results, f"digits, MLP({args.width}): closeness to HMC's BMA"), png)
    print(f"wrote {png}")
    path = os.path.join(args.out, "summary.json")
    write_json(path, {"args": vars(args), "results": results, "supported": supported,
                      "beyond_noise_floor": bool(abs(gap) > floor),
                      "wall_time_s": walls})  # fmt: skip
    print(f"wrote {path}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--width", type=int, default=50)
    p.add_argument("--prior-scale", type=float, default=0.3)
    p.add_argument("--max-train", type=int, default=None)
    p.add_argument("--num-chains", type=int, default=2)
    p.add_argument("--num-warmup", type=int, default=200)
    p.add_argument("--num-samples", type=int, default=200)
    p.add_argument("--num-members", type=int, default=5, help="deep ensemble members")
    p.add_argument("--map-steps", type=int, default=1000, help="MAP steps (SVI start, members)")
    p.add_argument("--num-steps", type=int, default=3000, help="SVI steps")
    p.add_argument("--svi-samples", type=int, default=100)
    p.add_argument("--batch-size", type=int, default=128, help="SGHMC minibatch rows")
    p.add_argument("--step-size", type=float, default=None,
                   help="SGHMC step at cycle starts (default: the recommended one)")  # fmt: skip
    p.add_argument("--cycle-length", type=int, default=500, help="SGHMC steps per cycle")
    p.add_argument("--burnin-cycles", type=int, default=None,
                   help="SGHMC burn-in cycles (default: automatic)")  # fmt: skip
    p.add_argument("--cycles", type=int, default=20, help="SGHMC cycles kept (one draw each)")
    p.add_argument("--full", action="store_true",
                   help="the longer setting: width 100, 4 chains x 500 + 500, 10 members, "
                        "50 SGHMC cycles")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="runs/agreement", help="run folders and figures")
    args = p.parse_args(argv)
    if args.full:
        args.width, args.num_chains, args.num_warmup, args.num_samples = 100, 4, 500, 500
        args.num_members, args.map_steps, args.num_steps, args.cycles = 10, 2000, 10000, 50
    if args.num_chains < 2:
        p.error("--num-chains must be at least 2: the noise floor compares chains")
    return args


if __name__ == "__main__":
    main(parse_args())

"""Compare posterior approximations of a Bayesian MLP against full-batch HMC.

Three methods fit the same one-hidden-layer BNN (same prior, likelihood and temperature) through
:func:`bnn_ppl.inference.fit`, each into its own run folder under ``--out`` (default
``runs/compare_<dataset>``) that ``bnn-ppl evaluate`` reads:

* ``hmc``: full-batch HMC (Izmailov et al.'s trajectory length, adapted step size), the reference;
* ``svi``: mean-field SVI started at a MAP estimate of ``--map-steps`` (``SVIConfig``'s
  recipe), predicting with ``--svi-samples`` guide draws;
* ``ensemble``: ``--num-members`` MAP solutions of ``--map-steps`` each, one draw per member.

The table gives every method's Bayesian model average (BMA) on the test set and, for HMC, a
single sample (its last draw): accuracy, NLL, ECE, Brier score and the agreement and total
variation to HMC's BMA (:mod:`bnn_ppl.metrics.comparison`) for classification (``--dataset
digits``, the default, also saves ``reliability.png``); RMSE, the mixture NLL and the RMSE
between the method's and HMC's BMA means, all in original units, for regression
(``--dataset diabetes``). ``summary.json`` holds the table and each method's diagnostics.
Regression fixes the noise sd by the held-out rule (``--noise heldout``, the default; the
ensemble's MAP members would drive a learned sd towards 0); ``--noise-prior S`` learns it.

Run it with the defaults (a few minutes on 2 CPU cores), then look at a run::

    python examples/compare_hmc_svi.py
    python examples/compare_hmc_svi.py --dataset diabetes
    bnn-ppl evaluate runs/compare_digits/hmc

or a quick smoke run::

    python examples/compare_hmc_svi.py --num-warmup 20 --num-samples 10 --width 8 \\
        --max-train 200 --map-steps 50 --num-steps 50 --num-members 2 \\
        --svi-samples 10 --out /tmp/compare
"""

from __future__ import annotations

import argparse
import os

import jax
import numpy as np

import bnn_ppl as bp
from bnn_ppl.cli.settings import parse_noise
from bnn_ppl.config import Config, EnsembleConfig, HMCConfig, SVIConfig
from bnn_ppl.inference import fit_run, heldout_noise
from bnn_ppl.io import write_json
from bnn_ppl.metrics.comparison import compare_to_reference, format_table, posterior_predictions
from bnn_ppl.plots import reliability_diagram, save_figure

COLUMNS = {
    "classification": {"accuracy": "accuracy", "nll": "NLL", "ece": "ECE", "brier": "Brier",
                       "agreement": "agree w/ HMC", "tv": "TV w/ HMC"},
    "regression": {"rmse": "RMSE", "nll": "NLL", "rmse_vs_reference": "RMSE vs HMC mean"},
}  # fmt: skip


def configs(args: argparse.Namespace) -> dict[str, Config]:
    c = {"chunk_size": args.chunk_size}
    return {
        "hmc": HMCConfig(num_warmup=args.num_warmup, num_samples=args.num_samples,
                         num_chains=args.num_chains, **c),
        "svi": SVIConfig(map_steps=args.map_steps, num_steps=args.num_steps,
                         num_samples=args.svi_samples, **c),
        "ensemble": EnsembleConfig(num_members=args.num_members, num_steps=args.map_steps,
                                   **c),
    }  # fmt: skip


def diagnostics(name: str, post: bp.Posterior, record: dict) -> dict[str, float]:
    """What each method's run says about itself (HMC: per-chain sampler summary)."""
    d = {"wall_time_s": record["wall_time_s"]}
    if name == "hmc":
        chains = record["summary"]["chains"]
        d |= {k: float(np.mean([c[k] for c in chains])) for k in ("accept_prob", "num_steps")}
        d["num_divergences"] = sum(c["divergences"] for c in chains)
    elif name == "svi":
        losses = post.trace["loss"]
        d |= {"map_final_loss": post.config["map_final_loss"],
              "final_neg_elbo": float(np.mean(losses[..., -max(1, losses.shape[-1] // 10):]))}
    else:
        d |= {"mean_final_loss": float(post.trace["final_loss"].mean()),
              "max_final_loss": float(post.trace["final_loss"].max())}  # fmt: skip
    return d


def choose_noise(args: argparse.Namespace, data: bp.data.Dataset) -> float:
    """The fixed noise sd of a regression run: ``--noise`` as a number, or by the held-out
    rule (:func:`bnn_ppl.inference.heldout_noise`: the 5-fold cross-validated RMSE of MAP
    fits on the training rows, with the noise sd learned in those fits)."""
    if args.noise != "heldout":
        return float(args.noise)
    learned = bp.models.mlp_bnn(data, args.width, args.prior_scale, noise_prior=1.0,
                                temperature=args.temperature)  # fmt: skip
    choice = heldout_noise(learned, data.x_train, data.y_train, rng_key=jax.random.key(args.seed))
    print(f"noise sd {choice.noise:g} (standardised): the training rows' 5-fold held-out MAP "
          f"RMSE {choice.rmse:.3f}")
    return choice.noise


def main(args: argparse.Namespace) -> None:
    data = bp.data.load(args.dataset).head(args.max_train)
    # MLP(width), Normal prior; regression: the noise sd --noise, or inferred under --noise-prior
    inferred = args.noise_prior is not None
    noise = None if inferred or data.task != "regression" else choose_noise(args, data)
    model = bp.models.mlp_bnn(data, args.width, args.prior_scale,
                              noise_prior=args.noise_prior if inferred else 1.0,
                              noise=noise, temperature=args.temperature)  # fmt: skip
    out = args.out or os.path.join("runs", f"compare_{args.dataset}")
    print(f"{args.dataset} ({data.task}): {len(data.x_train)} train / {len(data.x_test)} test "
          f"rows; MLP(hidden=({args.width},)) with {model.num_params(data.x_train)} parameters")
    options = {k: getattr(args, k) for k in ("width", "prior_scale", "temperature", "noise",
                                             "noise_prior", "max_train")}  # fmt: skip
    options["noise_sd"] = noise
    predictions, diag = {}, {}
    keys = jax.random.split(jax.random.key(args.seed), 3)
    for (name, config), key in zip(configs(args).items(), keys, strict=True):
        post, record = fit_run(os.path.join(out, name), model, data, config, key, options=options)
        predictions[name] = posterior_predictions(post)
        diag[name] = diagnostics(name, post, record)
        print(f"  {name}: {diag[name]['wall_time_s']:.1f} s -> {os.path.join(out, name)}")
    rows = {"HMC single sample": jax.tree.map(lambda a: a[-1:], predictions["hmc"]),
            "HMC BMA": predictions["hmc"], "SVI BMA": predictions["svi"],
            "ensemble BMA": predictions["ensemble"]}  # fmt: skip
    results = compare_to_reference(rows, data.y_test, task=data.task, reference="HMC BMA",
                                   y_std=data.y_std)  # fmt: skip
    if data.task == "regression":
        print(f"\ntest metrics in original units (y std {data.y_std:.2f}); NLL: the BMA's "
              "Gaussian mixture; RMSE vs HMC mean: between the method's and HMC's BMA means")
    print("\n" + format_table(results, COLUMNS[data.task], label="predictive"))
    h, s, e = diag["hmc"], diag["svi"], diag["ensemble"]
    print(f"\nHMC: mean accept prob {h['accept_prob']:.3f}, {h['num_divergences']} divergences "
          f"in {args.num_samples * args.num_chains} samples, mean leapfrog steps "
          f"{h['num_steps']:.1f}, wall time {h['wall_time_s']:.1f} s")
    print(f"SVI: MAP ({args.map_steps} steps) then {args.num_steps} steps, final -ELBO "
          f"{s['final_neg_elbo']:.1f}, {args.svi_samples} draws, wall time "
          f"{s['wall_time_s']:.1f} s")
    print(f"ensemble: {args.num_members} members x {args.map_steps} steps, final potential "
          f"mean {e['mean_final_loss']:.1f} (max {e['max_final_loss']:.1f}), wall time "
          f"{e['wall_time_s']:.1f} s\n")
    if data.task == "classification":
        curves = {r: bp.metrics.reliability_curve(bp.bma(p), data.y_test) for r, p in rows.items()}
        png = os.path.join(out, "reliability.png")
        save_figure(reliability_diagram(curves, title=f"{args.dataset}: test set"), png)
        print(f"wrote {png}")
    path = os.path.join(out, "summary.json")
    write_json(path, {"args": vars(args), "results": results, "diagnostics": diag,
                      "dataset": {"name": args.dataset, "task": data.task, "y_std": data.y_std}})
    print(f"wrote {path}")


def _noise(text: str) -> str | float:
    """``--noise``: a fixed sd or ``heldout``, as ``bnn-ppl run`` reads it (a prior on the sd is
    ``--noise-prior`` here)."""
    try:
        value = parse_noise(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if isinstance(value, tuple):
        raise argparse.ArgumentTypeError(f"{text!r}: give a prior on the sd as --noise-prior S")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--dataset", choices=("digits", "diabetes"), default="digits")
    p.add_argument("--width", type=int, default=50, help="hidden units")
    p.add_argument("--prior-scale", type=float, default=0.3, help="Normal prior sd of every weight")
    p.add_argument("--temperature", type=float, default=1.0, help="posterior temperature")
    p.add_argument("--noise", type=_noise, default="heldout",
                   help="regression: the fixed noise sd, a number or 'heldout' (chosen from the "
                   "training rows: their 5-fold held-out MAP RMSE)")
    p.add_argument("--noise-prior", type=float, default=None,
                   help="regression: infer the noise sd under a HalfNormal of this scale")
    p.add_argument("--num-warmup", type=int, default=200)
    p.add_argument("--num-samples", type=int, default=200)
    p.add_argument("--num-chains", type=int, default=1)
    p.add_argument("--map-steps", type=int, default=1000, help="MAP steps (SVI start, members)")
    p.add_argument("--num-steps", type=int, default=3000, help="SVI steps")
    p.add_argument("--svi-samples", type=int, default=200, help="guide draws for the BMA")
    p.add_argument("--num-members", type=int, default=5, help="deep ensemble members")
    p.add_argument("--chunk-size", type=int, default=None, help="rows per network call")
    p.add_argument("--max-train", type=int, default=None, help="first k training rows only")
    p.add_argument("--seed", type=int, default=0, help="seed of every method (fixed split)")
    p.add_argument("--out", default=None, help="run folders and figures (runs/compare_<dataset>)")
    return p.parse_args(argv)


if __name__ == "__main__":
    main(parse_args())

"""How close are approximate posteriors to a *converged* HMC posterior? Digits, stored reference.

Unlike ``examples/agreement.py`` (a short HMC run of its own), this compares with the stored
reference ``examples/references/digits.{npz,json}`` (checked by SHA-256). With
:func:`bnn_ppl.fit` on the reference's model and rows (MLP(50), Normal(0.3), categorical, all of
``bp.data.load("digits")``) it fits a deep ensemble, MAP-initialised mean-field SVI, SGHMC (its
recommended step size) and a short HMC run at ``--samples`` samples each, then at about
``--gradients`` full-batch gradients each (counted with optimisation and warmup; minibatch steps
as batch/rows). It prints accuracy, NLL, ECE, agreement and TV with the reference's BMA and a
noise floor: the reference's chain 1 against its other chains, from the per-chain BMAs of the
``.npz`` (``chain_probs``; a file written before they were stored has only the pooled BMA, and
then only the short HMC run's chain 1 against its other chains is shown), and judges two claims
of Izmailov et al. (2021).

    python examples/against_reference.py     # summary.json under --out
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import jax
import numpy as np

import bnn_ppl as bp
from bnn_ppl.config import Config, EnsembleConfig, HMCConfig, SGHMCConfig, SVIConfig
from bnn_ppl.io import load_npz, read_json, read_jsonl, write_json
from bnn_ppl.metrics import comparison as cmp
from bnn_ppl.metrics.efficiency import full_batch_gradients, sgmcmc_gradients_per_draw
from bnn_ppl.metrics.suite import flat_draws
from bnn_ppl.models import mlp_bnn
from bnn_ppl.validation import InputValueError

REFERENCE = Path(__file__).resolve().parent / "references" / "digits.json"
WIDTH, PRIOR_SCALE = 50, 0.3  # the reference's network and prior (checked against its record)
REF, FLOOR, REF_FLOOR = "reference", "HMC chains", "reference chains"
COLUMNS = {"accuracy": "accuracy", "nll": "NLL", "ece": "ECE", "agreement": "agree w/ ref",
           "tv": "TV w/ ref"}  # fmt: skip
CLAIMS = {"hmc_beats_ensemble": "HMC BNNs outperform deep ensembles (lower NLL, accuracy at "
          "least as high)", "ensemble_closer_than_svi": "deep ensembles are closer to HMC than "
          "mean-field VI"}  # fmt: skip


def table(rows: dict[str, dict]) -> str:
    """The metric columns, then each row's gradients and samples as whole numbers."""
    cells = [("gradients", "samples")] + [
        (f"{r['gradients']:,.0f}", f"{r['samples']:,.0f}") if "samples" in r else ("-", "-")
        for r in rows.values()
    ]
    lines = cmp.format_table(rows, COLUMNS).splitlines()
    return "\n".join(f"{a}{g:>11}{n:>9}" for a, (g, n) in zip(lines, cells, strict=True))


def load_reference(path: Path, data: bp.data.Dataset) -> tuple[dict, dict[str, np.ndarray]]:
    """The reference's record and arrays (BMA probabilities ``probs`` ``(n_test, K)``, and each
    chain's ``chain_probs`` if stored), its file checked by SHA-256 and its data and model
    checked against ``data`` and this script's network and prior."""
    record = read_json(path)
    arrays = load_npz(path.parent / record["predictions"]["file"],
                      sha256=record["predictions"]["sha256"])  # fmt: skip
    want = {"train_rows": len(data.x_train), "test_rows": len(data.x_test),
            "network": f"MLP(hidden=({WIDTH},))", "prior": f"Normal({PRIOR_SCALE})"}  # fmt: skip
    got = {k: record["data"].get(k, record["model"].get(k)) for k in want}
    if got != want or not np.array_equal(arrays["y_test"], data.y_test):
        raise InputValueError(f"{path}: the reference is of another model or data ({got}, test "
                              f"labels equal: {np.array_equal(arrays['y_test'], data.y_test)}); "
                              f"this example compares with {want}.")  # fmt: skip
    return record, arrays


def configs(args: argparse.Namespace, n_train: int, per_draw: float) -> dict[str, dict]:
    """Per regime, one config per method: equal samples, and about equal gradients (HMC's
    draws from ``per_draw``, the reference's leapfrog steps per draw)."""
    batch = min(args.batch_size, n_train)
    sg = dict(num_warmup=args.burnin_cycles, num_chains=args.chains, map_steps=args.sg_map_steps,
              cycle_length=args.cycle_length, batch_size=batch)  # fmt: skip
    hmc = dict(num_warmup=args.hmc_warmup, num_chains=args.chains)
    g, per_cycle = args.gradients, args.chains * args.cycle_length * batch / n_train
    return {
        "equal samples": {
            "ensemble": EnsembleConfig(num_members=args.samples, num_steps=args.map_steps),
            "SVI": SVIConfig(map_steps=args.map_steps, num_steps=args.svi_steps,
                             num_samples=args.samples),
            "SGHMC": SGHMCConfig(num_samples=args.samples // args.chains, **sg),
            "HMC": HMCConfig(num_samples=args.samples // args.chains, **hmc),
        },
        "equal gradients": {
            "ensemble": EnsembleConfig(num_members=max(1, round(g / args.map_steps)),
                                       num_steps=args.map_steps),
            "SVI": SVIConfig(map_steps=args.map_steps, num_steps=max(1, g - args.map_steps),
                             num_samples=args.svi_samples),
            "SGHMC": SGHMCConfig(num_samples=max(1, round(
                (g - args.sg_map_steps * batch / n_train) / per_cycle) - args.burnin_cycles),
                **sg),
            "HMC": HMCConfig(num_samples=max(1, round(g / (args.chains * per_draw))
                                             - args.hmc_warmup), **hmc),
        },
    }  # fmt: skip


def gradients(post: bp.Posterior, config: Config, n_train: int, folder: str) -> float:
    """The full-batch gradient evaluations a fit used, its optimisation and warmup included."""
    if isinstance(config, HMCConfig):  # warmup's leapfrog steps per chain, then sampling's
        warmup = read_jsonl(os.path.join(folder, "progress.jsonl"))[0]["grad_evals"]
        warmup *= config.num_chains
        return warmup + full_batch_gradients(post, n_train)
    if isinstance(config, SGHMCConfig):  # its MAP for the step size, then burn-in + cycles
        c, step = config, sgmcmc_gradients_per_draw(1, config.batch_size, n_train)
        return step * (c.map_steps + c.num_chains * (c.num_warmup + c.num_samples) * c.cycle_length)
    if isinstance(config, SVIConfig):
        return float(config.map_steps + config.num_steps)
    return float(config.num_members * config.num_steps)  # an ensemble


def compare(args, regime, model, data, ref, ref_grads, fits, key) -> dict[str, dict]:
    """Fit each method of one regime and return the table's rows (reference and floors too)."""
    preds, counts = {REF: ref["probs"][None]}, {REF: ref_grads}
    for (name, config), k in zip(fits.items(), jax.random.split(key, len(fits)), strict=True):
        folder = os.path.join(args.out, regime.replace(" ", "_"), name.lower())
        is_hmc = isinstance(config, HMCConfig)  # a checkpoint folder records warmup's cost
        ckpt = {"checkpoint_dir": folder, "checkpoint_every": config.num_samples} if is_hmc else {}
        post = bp.fit(model, data, config, k, **ckpt)
        preds[name] = cmp.posterior_predictions(post, chains=is_hmc)
        counts[name] = gradients(post, config, len(data.x_train), folder)
        print(f"  {regime}: {name} done ({counts[name]:,.0f} gradients)", flush=True)
    chains, preds["HMC"] = preds["HMC"], flat_draws(preds["HMC"], True)
    rows = cmp.compare_to_reference(preds, data.y_test, task="classification", reference=REF)
    for name, r in rows.items():
        r |= {"gradients": counts[name], "samples": float(len(preds[name]))}
    rows[REF]["samples"] = float(args.ref_samples)
    rows[FLOOR] = cmp.noise_floor(chains, data.y_test, task="classification")
    if "chain_probs" in ref:  # each chain's BMA: one "draw" per chain, equal draws per chain
        rows[REF_FLOOR] = cmp.noise_floor(ref["chain_probs"][:, None], data.y_test,
                                          task="classification")  # fmt: skip
    return rows


def main(args: argparse.Namespace) -> None:
    data = bp.data.load("digits")
    record, arrays = load_reference(REFERENCE, data)
    conv = record["recipe"]["convergence"]
    args.ref_samples = conv["draws"] * record["recipe"]["num_chains"]
    per_draw = conv["gradients"] / args.ref_samples
    print(f"reference {REFERENCE.name}: {args.ref_samples} draws, {conv['gradients']:,} "
          f"sampling gradients ({per_draw:.1f} per draw), R-hat max {conv['rhat_max']:.4f}; "
          f"digits {len(data.x_train)} train / {len(data.x_test)} test rows")  # fmt: skip
    model = mlp_bnn(data, WIDTH, PRIOR_SCALE)
    payload = {"args": {k: str(v) for k, v in vars(args).items()}, "regimes": {}}
    keys = jax.random.split(jax.random.key(args.seed), 2)
    for (regime, fits), key in zip(configs(args, len(data.x_train), per_draw).items(), keys,
                                   strict=True):  # fmt: skip
        rows = compare(args, regime, model, data, arrays, float(conv["gradients"]), fits, key)
        ref, ens, svi = rows[REF], rows["ensemble"], rows["SVI"]  # the two CLAIMS:
        v = {"hmc_beats_ensemble": ref["nll"] < ens["nll"] and ref["accuracy"] >= ens["accuracy"],
             "ensemble_closer_than_svi": ens["agreement"] > svi["agreement"]
             and ens["tv"] < svi["tv"]}  # fmt: skip
        payload["regimes"][regime] = {"results": rows, "verdicts": v}
        print(f"\n{regime}:\n" + table(rows))
        which = REF_FLOOR if REF_FLOOR in rows else FLOOR
        gap, floor = svi["tv"] - ens["tv"], rows[which]["tv"]
        print(f"reference: gradients of its sampling phase only; {FLOOR}: the short HMC run's "
              f"chain 1 vs the rest; {REF_FLOOR}: the reference's chain 1 vs the rest"
              f"{'' if which == REF_FLOOR else ' (not in this .npz)'}\nTV gap SVI - "
              f"ensemble {gap:.4f}, noise floor ({which}) TV {floor:.4f}: "
              f"{'beyond' if abs(gap) > floor else 'within'} the floor")  # fmt: skip
        for claim, text in CLAIMS.items():
            print(f"claim ({regime}; Izmailov et al.): {text}: "
                  f"{'supported' if v[claim] else 'NOT supported'} here")  # fmt: skip
    write_json(path := os.path.join(args.out, "summary.json"), payload)
    print(f"\nwrote {path}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)  # fmt: skip
    for flag, kind, default, text in (
        ("--samples", int, 10, "samples per method (equal samples)"),
        ("--gradients", int, 10_000, "full-batch gradients per method (equal gradients)"),
        ("--chains", int, 2, "HMC and SGHMC chains"),
        ("--hmc-warmup", int, 50, "HMC warmup iterations per chain"),
        ("--map-steps", int, 1000, "Adam steps per member and before SVI"),
        ("--svi-steps", int, 3000, "SVI steps (equal samples)"),
        ("--svi-samples", int, 100, "guide draws (equal gradients; they cost no gradient)"),
        ("--batch-size", int, 128, "SGHMC minibatch rows"),
        ("--sg-map-steps", int, 200, "SGHMC: MAP steps for its recommended step size"),
        ("--cycle-length", int, 1000, "SGHMC steps per cycle"),
        ("--burnin-cycles", int, 2, "SGHMC burn-in cycles"),
        ("--seed", int, 0, "random seed"),
        ("--out", str, "runs/against_reference", "HMC checkpoints and summary.json"),
    ):
        p.add_argument(flag, type=kind, default=default, help=text)
    args = p.parse_args(argv)
    if args.chains < 2 or args.samples % args.chains:
        p.error(
            "--chains must be at least 2 (the noise floor compares chains) and divide --samples"
        )
    return args


if __name__ == "__main__":
    main(parse_args())

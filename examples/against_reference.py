"""How close are approximate posteriors to a *converged* HMC posterior? A stored reference.

Unlike ``examples/agreement.py`` (its own short HMC run), this compares with a stored reference
(``--reference``, default ``examples/references/digits.json``; its ``.npz`` checked by SHA-256).
On the model and rows its record names (MLP width, Normal prior, fixed noise sd, data set, split)
:func:`bnn_ppl.fit` fits a deep ensemble, MAP-initialised mean-field SVI, SGHMC (recommended
step size) and a short HMC run (the reference's ``max_num_steps``) at ``--samples`` samples
each, then at about ``--gradients`` full-batch gradients each (optimisation and warmup counted;
minibatch steps as batch/rows). Each method is summarised by its BMA, as the reference is stored.
Classification: accuracy, NLL, ECE, agreement and TV with the reference's BMA. Regression:
test LL and RMSE in the target's units (of the BMA moment-matched to a Gaussian, as the record's
``test_ll_original``, ``rmse_original``), the RMSE between the BMA means, and W2: the
2-Wasserstein distance between the two predictives as Gaussians with the BMA's mean and sd,
``sqrt((m1 - m2)^2 + (s1 - s2)^2)``, averaged over test rows, in the target's units. (The NeurIPS
2021 approximate-inference competition's UCI score, named "W2", is by its scoring script scipy's
1-Wasserstein distance between 1,000 predictive samples and HMC's per test row, averaged; this
reference keeps the BMA's two moments only.) A noise floor: the reference's chain 1 against its
other chains (``chain_probs``, ``chain_mean``/``chain_scale``; without them, only the short HMC
run's chains). Two claims of Izmailov et al. (2021) are judged on each regime. The budgets
``--gradients``, ``--hmc-warmup``, ``--map-steps`` and ``--svi-steps`` default to the
reference's task (:data:`TASK_DEFAULTS`: regression gets 50 times the gradients and 10 times
the optimisation, which the UCI posteriors need).

    python examples/against_reference.py     # digits; summary.json under --out
    python examples/against_reference.py --out runs/against_yacht \\
        --reference examples/references/uci_yacht_split0_noise0.05.json
"""

from __future__ import annotations

import argparse
import math
import os
import re
import time
from pathlib import Path

import jax
import numpy as np

import bnn_ppl as bp
from bnn_ppl.config import Config, EnsembleConfig, HMCConfig, SGHMCConfig, SVIConfig
from bnn_ppl.inference import heldout_noise
from bnn_ppl.inference.sgmcmc.recipe import MIN_BURN_IN
from bnn_ppl.io import load_npz, read_json, read_jsonl, write_json
from bnn_ppl.metrics import comparison as cmp
from bnn_ppl.metrics.efficiency import full_batch_gradients, sgmcmc_gradients_per_draw
from bnn_ppl.metrics.suite import flat_draws
from bnn_ppl.models import MLP, mlp_bnn
from bnn_ppl.validation import InputValueError

REFERENCE = Path(__file__).resolve().parent / "references" / "digits.json"
REF, FLOOR, REF_FLOOR = "reference", "HMC chains", "reference chains"
HET = "het. ensemble"  # Lakshminarayanan et al.: members with a per-row (heteroscedastic) noise
COLUMNS = {  # per task: metric -> header
    "classification": {"accuracy": "accuracy", "nll": "NLL", "ece": "ECE",
                       "agreement": "agree w/ ref", "tv": "TV w/ ref"},
    "regression": {"test_ll": "test LL", "rmse": "RMSE", "rmse_vs_reference": "mean diff",
                   "w2": "W2 w/ ref"},
}  # fmt: skip
# The budgets that depend on the reference's task. Classification: the digits settings the
# README's first table used. Regression: the UCI MLP(50) posteriors are far narrower than their
# prior (a reference's step size is ~1e-3 at 256 leapfrog steps), and at the digits settings no
# method came near the yacht reference (ensemble test LL -2.61 against the reference's -0.90);
# with these, the second yacht table's (README, "Against the converged reference").
TASK_DEFAULTS = {
    "gradients": {"classification": 10_000, "regression": 500_000},
    "hmc_warmup": {"classification": 50, "regression": 200},
    "map_steps": {"classification": 1000, "regression": 10_000},
    "svi_steps": {"classification": 3000, "regression": 30_000},
}
DISTANCE = {"classification": "tv", "regression": "w2"}  # the second claim's, and the floor's
BEATS = {"classification": "lower NLL, accuracy at least as high",
         "regression": "higher test LL, RMSE no higher"}  # fmt: skip
CLOSER = {"classification": "", "regression": " (lower W2)"}


def verdicts(rows: dict[str, dict], task: str) -> dict[str, bool]:
    """The two claims judged on one regime's rows (the reference's row stands for HMC)."""
    ref, ens, svi = rows[REF], rows["ensemble"], rows["SVI"]
    if task == "classification":
        return {"hmc_beats_ensemble": ref["nll"] < ens["nll"]
                and ref["accuracy"] >= ens["accuracy"],
                "ensemble_closer_than_svi": ens["agreement"] > svi["agreement"]
                and ens["tv"] < svi["tv"]}  # fmt: skip
    return {"hmc_beats_ensemble": ref["test_ll"] > ens["test_ll"] and ref["rmse"] <= ens["rmse"],
            "ensemble_closer_than_svi": ens["w2"] < svi["w2"]}  # fmt: skip


def table(rows: dict[str, dict], task: str) -> str:
    """The metric columns, then each row's gradients and samples as whole numbers."""
    cells = [("gradients", "samples")] + [
        (f"{r['gradients']:,.0f}", f"{r['samples']:,.0f}") if "samples" in r else ("-", "-")
        for r in rows.values()
    ]
    lines = cmp.format_table(rows, COLUMNS[task]).splitlines()
    return "\n".join(f"{a}{g:>11}{n:>9}" for a, (g, n) in zip(lines, cells, strict=True))


def reference_model(record: dict, path: Path) -> tuple[int, float, float | None]:
    """The width, Normal prior scale and fixed noise sd (``None``: learned or classification)
    of the reference's model, from its record; a model :func:`mlp_bnn` cannot build is refused."""
    m = record["model"]
    width = re.fullmatch(r"MLP\(hidden=\((\d+),\)\)", m["network"])
    prior = re.fullmatch(r"Normal\(([0-9.eE+-]+)\)", m["prior"])
    noise = m.get("noise")
    fixed = isinstance(noise, int | float) and not isinstance(noise, bool)
    if not (width and prior and (fixed or noise in (None, "HalfNormal(1)"))):
        raise InputValueError(f"{path}: the reference's model ({m}) is one this example cannot "
                              "build; it builds MLP(hidden=(W,)) with a Normal(s) prior and a "
                              "fixed or HalfNormal(1) noise sd.")  # fmt: skip
    return int(width[1]), float(prior[1]), float(noise) if fixed else None


def load_reference(path: Path) -> tuple[dict, dict[str, np.ndarray], bp.data.Dataset, str]:
    """The reference's record, arrays (BMA ``probs``, or ``mean`` and ``scale``; each chain's
    too if stored), data set and task: its file checked by SHA-256, its rows and test targets
    checked against the data set its record names."""
    record = read_json(path)
    arrays = load_npz(path.parent / record["predictions"]["file"],
                      sha256=record["predictions"]["sha256"])  # fmt: skip
    data = bp.data.load_subset(record["data"]["name"], split=record["data"].get("split"))
    task = "classification" if "probs" in arrays else "regression"
    want = {"train_rows": len(data.x_train), "test_rows": len(data.x_test)}
    got = {k: record["data"][k] for k in want}
    same = np.allclose(arrays["y_test"], data.y_test) and (
        task == "classification" or np.isclose(float(arrays["y_std"]), float(data.y_std))
    )
    if got != want or not same:
        raise InputValueError(f"{path}: the reference is of another model or data ({got}, "
                              f"test targets and scale equal: {same}); "
                              f"{record['data']['name']} has {want}.")  # fmt: skip
    return record, arrays, data, task


def configs(
    args: argparse.Namespace, n_train: int, per_draw: float, max_num_steps: int = 1024
) -> dict[str, dict]:
    """Per regime, one config per method: equal samples, and about equal gradients (HMC's
    draws from ``per_draw``, the reference's leapfrog steps per draw; at most its
    ``max_num_steps`` steps per draw)."""
    batch = min(args.batch_size, n_train)
    per_cycle = args.chains * args.cycle_length * batch / n_train
    # the burn-in and the MAP steps: the config's defaults unless given (automatic burn-in)
    sg = dict(num_warmup=_given(args.burnin_cycles), num_chains=args.chains,
              cycle_length=args.cycle_length, batch_size=batch)  # fmt: skip
    if _given(args.sg_map_steps) is not None:
        sg["map_steps"] = args.sg_map_steps
    planned = SGHMCConfig(**sg)  # (its MAP, pilot cycle and least burn-in, per chain)
    fixed = (
        planned.map_steps * batch / n_train
        + (1 + (MIN_BURN_IN if planned.num_warmup is None else planned.num_warmup))
        * per_cycle
        / args.chains
    )
    hmc = dict(num_warmup=args.hmc_warmup, num_chains=args.chains, max_num_steps=max_num_steps)
    g = args.gradients
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
            "SGHMC": SGHMCConfig(num_samples=max(1, round((g - args.chains * fixed)
                                                          / per_cycle)), **sg),
            "HMC": HMCConfig(num_samples=max(1, round(g / (args.chains * per_draw))
                                             - args.hmc_warmup), **hmc),
        },
    }  # fmt: skip


def gradients(post: bp.Posterior | None, config: Config, n_train: int, folder: str) -> float:
    """The full-batch gradient evaluations a fit used, its optimisation and warmup included
    (``post=None``: as planned, SG-MCMC's automatic burn-in at its least)."""
    if isinstance(config, HMCConfig):  # warmup's leapfrog steps per chain, then sampling's
        warmup = read_jsonl(os.path.join(folder, "progress.jsonl"))[0]["grad_evals"]
        warmup *= config.num_chains
        return warmup + full_batch_gradients(post, n_train)
    if isinstance(config, SGHMCConfig):  # each chain's MAP, pilot cycle, burn-in and cycles
        c, step = config, sgmcmc_gradients_per_draw(1, config.batch_size, n_train)
        if post is not None:
            burn_in = post.config["num_warmup_used"]
        else:
            burn_in = MIN_BURN_IN if c.num_warmup is None else c.num_warmup
        cycles = 1 + burn_in + c.num_samples
        return step * c.num_chains * (c.map_steps + cycles * c.cycle_length)
    if isinstance(config, SVIConfig):
        return float(config.map_steps + config.num_steps)
    return float(config.num_members * config.num_steps)  # an ensemble


def row_scores(pred: object, data: bp.data.Dataset, ref: object, task: str) -> dict:
    """Per test row, of a BMA drawn as one draw: the log density of the row's target (target
    units for regression) and the distance to the reference's BMA (W2 in target units, or the
    total variation): the paired differences' raw material."""
    if task == "classification":
        p, q = np.asarray(pred)[0], np.asarray(ref)[0]
        y = np.asarray(data.y_test).astype(int)
        return {"ll": np.log(np.maximum(p[np.arange(len(y)), y], 1e-300)),
                "dist": 0.5 * np.abs(p - q).sum(-1)}  # fmt: skip
    y_std = float(data.y_std)
    m, sd = np.asarray(pred.mean)[0], np.asarray(pred.scale)[0]
    rm, rs = np.asarray(ref.mean)[0], np.asarray(ref.scale)[0]
    y = np.asarray(data.y_test)
    ll = -0.5 * ((y - m) / sd) ** 2 - np.log(sd) - 0.5 * np.log(2 * np.pi) - np.log(y_std)
    return {"ll": ll, "dist": np.hypot(m - rm, sd - rs) * y_std}


def compare(args, regime, models, data, ref, ref_cost, fits, key, task) -> tuple[dict, dict]:
    """Fit each method of one regime and return the table's rows (reference and floors too),
    every method summarised by its BMA as one draw (``comparison.bma_draw``), and each
    method's per-row scores (:func:`row_scores`). ``models``: method -> its model (the
    reference's, but for the ensembles of another likelihood); ``ref_cost``: the reference's
    gradients and wall seconds."""
    preds, counts, chains = {REF: cmp.stored_predictions(ref)}, {REF: ref_cost[0]}, None
    draws, walls = {REF: float(args.ref_samples)}, {REF: ref_cost[1]}
    for (name, config), k in zip(fits.items(), jax.random.split(key, len(fits)), strict=True):
        folder = os.path.join(args.out, f"seed{args.run_seed}", regime.replace(" ", "_"),
                              name.lower().replace(" ", "_").replace(".", ""))  # fmt: skip
        is_hmc = isinstance(config, HMCConfig)  # a checkpoint folder records warmup's cost
        ckpt = {"checkpoint_dir": folder, "checkpoint_every": config.num_samples} if is_hmc else {}
        began = time.perf_counter()
        post = bp.fit(models.get(name, models[None]), data, config, k, **ckpt)
        walls[name] = time.perf_counter() - began
        pred = cmp.posterior_predictions(post, chains=is_hmc)
        if is_hmc:  # each chain's BMA, for the short run's own noise floor
            chains, pred = cmp.bma_draw(pred, chains=True), flat_draws(pred, True)
        draws[name], preds[name] = float(cmp.num_draws(pred)), cmp.bma_draw(pred)
        counts[name] = gradients(post, config, len(data.x_train), folder)
        print(f"  {regime}: {name} done ({counts[name]:,.0f} gradients)", flush=True)
    y_std = float(data.y_std) if task == "regression" else 1.0
    kw = {"task": task, "y_std": y_std}
    rows = cmp.compare_to_reference(preds, data.y_test, reference=REF, **kw)
    for name, r in rows.items():
        r |= {"gradients": counts[name], "samples": draws[name], "seconds": walls[name]}
    scores = {name: row_scores(p, data, preds[REF], task) for name, p in preds.items()}
    if "HMC" in fits:  # the short HMC run's chain 1 against its others
        rows[FLOOR] = cmp.noise_floor(chains, data.y_test, **kw)
    if "chain_probs" in ref or "chain_mean" in ref:  # each chain's BMA: equal draws per chain
        rows[REF_FLOOR] = cmp.noise_floor(cmp.stored_predictions(ref, chains=True), data.y_test,
                                          **kw)  # fmt: skip
    for r in rows.values():
        if task == "regression":  # the UCI protocol's test log-likelihood
            r["test_ll"] = -r["nll"]
    return rows, scores


def paired(scores: list[dict], a: str, b: str, key: str) -> tuple[float, float]:
    """Mean and standard error over test rows of ``a``'s minus ``b``'s per-row ``key``, each
    row's value first averaged over the seeds (``scores``: one dict per seed): the two methods
    are scored on the same rows, so the rows' SE is the paired one."""
    d = np.mean([s[a][key] - s[b][key] for s in scores], axis=0)
    return float(d.mean()), float(d.std(ddof=1) / np.sqrt(d.size))


def seed_cell(rows: list[dict], name: str, metric: str) -> str:
    """``mean ± SE`` over the seeds (the mean alone for one seed)."""
    v = np.array([r[name][metric] for r in rows if name in r], dtype=float)
    return f"{v.mean():.3f}" + (f" ± {v.std(ddof=1) / np.sqrt(v.size):.3f}" if v.size > 1 else "")


# The claims judged on paired per-row scores: name, method a, method b, the per-row score
# (``ll``: higher is better; ``dist``: lower is better) and the text; a claim holds when a's
# score minus b's is positive ({metric}: the task's log density).
CLAIMS = (
    ("hmc_beats_ensemble", REF, "ensemble", "ll",
     "HMC BNNs outperform deep ensembles ({metric} higher)"),
    ("hmc_beats_het_ensemble", REF, HET, "ll",
     "HMC BNNs outperform heteroscedastic deep ensembles ({metric} higher)"),
    ("ensemble_closer_than_svi", "SVI", "ensemble", "dist",
     "deep ensembles are closer to HMC than mean-field VI (distance lower)"),
)  # fmt: skip
METRIC = {"regression": "test log density", "classification": "log p(true class)"}


def verdict(difference: float, se: float) -> str:
    """``supported`` beyond 2 SE, ``contradicted`` below -2 SE, else ``undecided``."""
    if difference > 2 * se:
        return "supported"
    return "contradicted" if difference < -2 * se else "undecided"


def claim_lines(rows: list[dict], scores: list[dict], task: str, regime: str) -> tuple[list, dict]:
    """The claims (:data:`CLAIMS` whose two methods ran), each judged on paired per-row
    differences (averaged over the seeds): supported only beyond 2 paired SE."""
    lines, out = [], {}
    for claim, a, b, key, text in CLAIMS:
        if a not in scores[0] or b not in scores[0]:
            continue
        d, se = paired(scores, a, b, key)
        out[claim] = {"difference": d, "paired_se": se, "verdict": (v := verdict(d, se))}
        lines.append(f"claim ({regime}; Izmailov et al.): {text.format(metric=METRIC[task])}: "
                     f"{a} - {b} = {d:+.4f} ± {se:.4f} paired SE over {scores[0][a][key].size} "
                     f"rows and {len(scores)} seed(s) ({abs(d) / se:.1f} SE): {v}")  # fmt: skip
    return lines, out


def fixed_ensemble_noise(args, record, data, width, prior_scale, noise) -> float | None:
    """The fixed-noise ensemble's noise sd: the reference's if fixed; for a learned noise
    ``--ensemble-noise`` (a number, or ``heldout``: the training rows' 5-fold MAP RMSE)."""
    if noise is not None or data.task == "classification":
        return noise
    if args.ensemble_noise != "heldout":
        return float(args.ensemble_noise)
    choice = heldout_noise(mlp_bnn(data, width, prior_scale), data.x_train, data.y_train,
                           rng_key=jax.random.key(args.seed))  # fmt: skip
    print(
        f"fixed-noise ensemble: noise sd {choice.noise:g} (5-fold held-out MAP RMSE "
        f"{choice.rmse:.4f})"
    )
    return choice.noise


def main(args: argparse.Namespace) -> None:
    record, arrays, data, task = load_reference(path := Path(args.reference))
    args = task_defaults(args, task)
    width, prior_scale, noise = reference_model(record, path)
    recipe, conv = record["recipe"], record["recipe"]["convergence"]
    kept = conv["draws"] - (conv.get("burn_in_draws") or 0)  # per chain, after any burn-in
    args.ref_samples = kept * recipe["num_chains"]
    per_draw = conv["gradients"] / (conv["draws"] * recipe["num_chains"])
    print(f"reference {path.name}: {args.ref_samples} draws, {conv['gradients']:,} "
          f"sampling gradients ({per_draw:.1f} per draw), R-hat max {conv['rhat_max']:.4f}; "
          f"{data.name} {len(data.x_train)} train / {len(data.x_test)} test rows; "
          f"MLP({width}), Normal({prior_scale}), {task}"
          f"{'' if noise is None else f', noise sd {noise}'}")  # fmt: skip
    model = mlp_bnn(data, width, prior_scale, noise=noise)
    models = {None: model}
    if task == "regression":
        models["ensemble"] = mlp_bnn(data, width, prior_scale,
                                     noise=fixed_ensemble_noise(args, record, data, width,
                                                                prior_scale, noise))  # fmt: skip
        models[HET] = bp.BNN(MLP(hidden=(width,), out=2), bp.priors.Normal(prior_scale),
                             bp.likelihoods.HeteroscedasticGaussian())  # fmt: skip
    # the reference's cost: its sampling gradients and the wall time its checks committed
    # (warmup, the optimised starts and every segment, over all the calls that resumed it)
    ref_cost = (float(conv["gradients"]), float(conv.get("seconds") or math.nan))
    payload = {"args": {k: str(v) for k, v in vars(args).items()}, "task": task, "regimes": {},
               "reference_cost": {"sampling_gradients": ref_cost[0],
                                  "wall_seconds": ref_cost[1]}}  # fmt: skip
    regimes = configs(args, len(data.x_train), per_draw, recipe.get("max_num_steps", 1024))
    if task == "regression":  # Lakshminarayanan et al.'s members learn a per-row variance
        for fits in regimes.values():
            fits[HET] = fits["ensemble"]
    keep = set(args.methods.split(",")) if args.methods else None
    regimes = {r: {m: c for m, c in fits.items() if keep is None or m in keep}
               for r, fits in regimes.items() if r in args.regimes.split(",")}  # fmt: skip
    d = DISTANCE[task]
    seeds = range(args.seed, args.seed + args.seeds)
    for regime, fits in regimes.items():
        per_seed, scores = [], []
        for seed in seeds:
            args.run_seed = seed
            key = jax.random.split(jax.random.key(seed), 2)[list(regimes).index(regime) % 2]
            rows, score = compare(args, regime, models, data, arrays, ref_cost, fits, key, task)
            per_seed.append(rows)
            scores.append(score)
            print(f"\n{regime}, seed {seed}:\n" + table(rows, task))
        rows = per_seed[0]
        v = verdicts(rows, task) if {"ensemble", "SVI"} <= set(rows) else {}
        lines, judged = claim_lines(per_seed, scores, task, regime)
        payload["regimes"][regime] = {
            "results_per_seed": per_seed,
            "verdicts_seed0": v,
            "claims": judged,
            # per seed, method: each row's log density and distance (to pool splits)
            "row_scores": [{name: {k: a.tolist() for k, a in sc.items()}
                            for name, sc in s.items()} for s in scores],
            "mean_se_over_seeds": {
                name: {m: seed_cell(per_seed, name, m)
                       for m in (*COLUMNS[task], "gradients", "seconds")
                       if m in per_seed[0][name]}
                for name in per_seed[0]}}  # fmt: skip
        print(f"\n{regime}: mean ± SE over {len(per_seed)} seed(s)")
        for name, cells in payload["regimes"][regime]["mean_se_over_seeds"].items():
            print(f"  {name:<22}" + "; ".join(f"{k} {c}" for k, c in cells.items()))
        print("\n".join(lines))
        if not {"ensemble", "SVI"} <= set(rows):
            continue
        which = REF_FLOOR if REF_FLOOR in rows else FLOOR
        if which not in rows:
            continue
        gap, floor = rows["SVI"][d] - rows["ensemble"][d], rows[which][d]
        print(f"reference: gradients of its sampling phase only; {FLOOR}: the short HMC run's "
              f"chain 1 vs the rest; {REF_FLOOR}: the reference's chain 1 vs the rest"
              f"{'' if which == REF_FLOOR else ' (not in this .npz)'}\n{d.upper()} gap SVI - "
              f"ensemble {gap:.4f}, noise floor ({which}) {d.upper()} {floor:.4f}: "
              f"{'beyond' if abs(gap) > floor else 'within'} the floor")  # fmt: skip
        for claim, text in (
            ("hmc_beats_ensemble", f"HMC BNNs outperform deep ensembles ({BEATS[task]})"),
            (
                "ensemble_closer_than_svi",
                f"deep ensembles are closer to HMC than mean-field VI{CLOSER[task]}",
            ),
        ):
            print(f"point estimate, seed {args.seed} ({regime}): {text}: "
                  f"{'yes' if v[claim] else 'no'} (a claim needs the paired SE above)")  # fmt: skip
    write_json(path := os.path.join(args.out, "summary.json"), payload)
    print(f"\nwrote {path}")


def _count_or_auto(value: str) -> int | str:
    return value if value == "auto" else int(value)


def _given(value: int | str) -> int | None:
    """An option's number, ``None`` for ``auto`` (the config's default)."""
    return None if value == "auto" else int(value)


def task_defaults(args: argparse.Namespace, task: str) -> argparse.Namespace:
    """``args`` with every ``auto`` budget set to the reference task's default
    (:data:`TASK_DEFAULTS`)."""
    for dest, by_task in TASK_DEFAULTS.items():
        if getattr(args, dest) == "auto":
            setattr(args, dest, by_task[task])
    return args


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)  # fmt: skip
    per_task = "classification {classification:,}, regression {regression:,}"
    for flag, kind, default, text in (
        ("--samples", int, 10, "samples per method (equal samples)"),
        ("--gradients", int, "auto", "full-batch gradients per method (equal gradients)"),
        ("--chains", int, 2, "HMC and SGHMC chains"),
        ("--hmc-warmup", int, "auto", "HMC warmup iterations per chain"),
        ("--map-steps", int, "auto", "Adam steps per member and before SVI"),
        ("--svi-steps", int, "auto", "SVI steps (equal samples)"),
        ("--svi-samples", int, 100, "guide draws (equal gradients; they cost no gradient)"),
        ("--batch-size", int, 128, "SGHMC minibatch rows"),
        (
            "--sg-map-steps",
            _count_or_auto,
            "auto",
            "SGHMC: MAP steps per chain, where it starts (auto: the config's default)",
        ),
        ("--cycle-length", int, 1000, "SGHMC steps per cycle"),
        (
            "--burnin-cycles",
            _count_or_auto,
            "auto",
            "SGHMC burn-in cycles (auto: the automatic burn-in)",
        ),
        ("--reference", str, str(REFERENCE), "the stored reference's .json (examples/references)"),
        ("--seed", int, 0, "first random seed"),
        ("--seeds", int, 3, "seeds (each fits every method again; paired SEs use their mean)"),
        (
            "--methods",
            str,
            "",
            "comma-separated subset of ensemble, het. ensemble, SVI, SGHMC, HMC (default: all)",
        ),
        ("--regimes", str, "equal samples,equal gradients", "comma-separated regimes"),
        (
            "--ensemble-noise",
            str,
            "heldout",
            "learned-noise reference: the fixed-noise "
            "ensemble's noise sd, a number or 'heldout' (5-fold held-out MAP RMSE)",
        ),
        ("--out", str, "runs/against_reference", "HMC checkpoints and summary.json"),
    ):
        dest = flag[2:].replace("-", "_")
        if dest in TASK_DEFAULTS:  # the reference's task decides (main: task_defaults)
            text += f"; auto: {per_task.format(**TASK_DEFAULTS[dest])}"
            kind = _count_or_auto
        p.add_argument(flag, type=kind, default=default, help=text)
    args = p.parse_args(argv)
    if args.chains < 2 or args.samples % args.chains:
        p.error(
            "--chains must be at least 2 (the noise floor compares chains) and divide --samples"
        )
    return args


if __name__ == "__main__":
    main(parse_args())

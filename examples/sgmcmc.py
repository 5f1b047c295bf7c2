"""SG-MCMC against full-batch HMC: ATMC, SGNHT, SGHMC, SGLD on one BNN (ATMC paper, Table 1).

Every sampler targets the same tempered posterior (one :class:`bnn_ppl.BNN`, one potential):

* ``HMC``: full-batch HMC (:func:`bnn_ppl.inference.hmc`), ``--num-chains`` chains: the
  reference;
* ``ATMC`` (Heek & Kalchbrenner 2019), ``SGNHT`` (Ding et al. 2014), ``SGHMC`` (Chen et al.
  2014) and ``SGLD`` (Welling & Teh 2011), at their defaults: ``--sg-chains`` chains each, on
  minibatches of ``--batch-size`` rows (drawn independently), with the cyclical cosine step size
  ``h_t = h0·½[1 + cos(π·mod(t, n)/n)]`` of the ATMC paper; only the sample at the end of each
  cycle is kept, after ``--burnin-cycles`` cycles (``MCMC(..., thinning=n)`` collects exactly
  those). ``h0`` is each sampler's recommended step size
  (:func:`bnn_ppl.inference.recommended_step_size`) for the curvature and minibatch noise
  measured (:func:`bnn_ppl.inference.gradient_scales`) at HMC's last draw, a typical posterior
  position; ``--h0`` / ``--sgld-h0`` override it.

Table 1 columns, on the test set: ``single``: accuracy and NLL of one sample's predictive,
averaged over the samples; ``BMA``: the Bayesian model average of all of a method's samples;
``agree`` and ``TV``: agreement (equal top-1 predictions) and total variation of the BMA to
HMC's BMA. HMC's own row compares the BMA of its first chain with that of its other chains,
the Monte Carlo noise floor of those two columns (with one chain it reads ``-``).

Sampler columns: ``h0``; ``grads``: gradients of the sampling phase in full-batch equivalents
(HMC: leapfrog steps; SG-MCMC: steps × batch / rows); ``ESS``: the median over test inputs of
the effective sample size of the predicted probability of the true class (numpyro's, over the
chains); ``ESS/kgrad``: ESS per 1,000 full-batch gradients; ``w var`` and ``f var``: the
variance within a chain, averaged over all weights (weight space; permutation-invariant) or over
test inputs and classes of the predicted probabilities (function space), relative to HMC's;
HMC's row gives its first chain's relative to its other chains' (the noise floor of the ratio).
A sampler that diverges is reported, not averaged. ``check_accuracy`` prints what a run shows
went wrong.

Everything printed is in ``--out-dir`` (default ``runs/sgmcmc/``): ``metrics.json`` (the
numbers, the scales, the settings) and, per part, ``<part>_predictions.npz`` (per-draw test
probabilities with a chain axis, and the labels) and ``<part>_samples.npz`` (the draws), from
which every number can be recomputed. A second part repeats this with LeNet-5 on
``--cnn-dataset`` (``mnist``: the first ``--cnn-max-train`` images; skipped with a message when
tfds has not prepared it; ``digits``: the 8x8 images; ``none`` skips it). It is meant for an
accelerator.

Run it with the defaults (about ten minutes on 2 CPU cores)::

    python examples/sgmcmc.py --cnn-dataset none

or a quick smoke run::

    python examples/sgmcmc.py --num-warmup 10 --num-samples 10 --num-chains 1 --width 8 \\
        --max-train 200 --trajectory-length 0.05 --cycle-length 20 --burnin-cycles 1 \\
        --cycles 3 --batch-size 50 --cnn-dataset none --out-dir /tmp/sgmcmc
"""

from __future__ import annotations

import argparse
import math
import os
import time
import warnings
from typing import Any

import jax
import numpy as np
from numpyro.diagnostics import effective_sample_size
from numpyro.infer import MCMC

import bnn_ppl as bp
from bnn_ppl.inference import (
    ATMC,
    SGHMC,
    SGLD,
    SGNHT,
    check_accuracy,
    full_batch_potential,
    gradient_scales,
    recommended_step_size,
)
from bnn_ppl.inference.schedules import cyclical_cosine
from bnn_ppl.io import save_npz, write_json

KERNELS = {"ATMC": ATMC, "SGNHT": SGNHT, "SGHMC": SGHMC, "SGLD": SGLD}
METHODS = ("HMC", *KERNELS)
COLUMNS = {
    "single_accuracy": "single acc",
    "single_nll": "single NLL",
    "bma_accuracy": "BMA acc",
    "bma_nll": "BMA NLL",
    "agreement": "agree",
    "tv": "TV",
}
SAMPLER_COLUMNS = {"step_size": "h0", "gradients": "grads", "ess": "ESS",
                   "ess_per_kgrad": "ESS/kgrad", "weight_var_ratio": "w var",
                   "function_var_ratio": "f var"}  # fmt: skip


def get_data(name: str, max_train: int | None, images: bool) -> bp.data.Dataset:
    """A classification data set (a fixed split), its first ``max_train`` training rows;
    ``images=True`` gives ``(n, H, W, C)`` inputs (the 8x8 digits are reshaped)."""
    data = bp.data.load(name)
    if max_train is not None:
        data = data._replace(x_train=data.x_train[:max_train], y_train=data.y_train[:max_train])
    if images and data.x_train.ndim == 2:
        side = math.isqrt(data.x_train.shape[1])
        data = data._replace(x_train=data.x_train.reshape(-1, side, side, 1),
                             x_test=data.x_test.reshape(-1, side, side, 1))  # fmt: skip
    return data


def build_model(args: argparse.Namespace, data: bp.data.Dataset, network: str) -> bp.BNN:
    """``"mlp"``: one hidden layer, an isotropic Normal prior; ``"cnn"``: LeNet-5 with a fan-in
    scaled Normal prior. Categorical likelihood, temperature ``args.temperature``."""
    if network == "mlp":
        net = bp.models.MLP(hidden=(args.width,), out=data.num_classes)
        prior = bp.priors.Normal(args.prior_scale)
    else:
        net = bp.models.LeNet5(out=data.num_classes)
        prior = bp.priors.Normal(args.cnn_prior_scale, fan_in=True)
    return bp.BNN(net, prior, bp.likelihoods.Categorical(), temperature=args.temperature)


def run_hmc(model: bp.BNN, args: argparse.Namespace, key: jax.Array, data: bp.data.Dataset):
    """Full-batch HMC: draws grouped by chain, and diagnostics."""
    mcmc = bp.inference.hmc(model, data.x_train, data.y_train, rng_key=key,
                            num_warmup=args.num_warmup, num_samples=args.num_samples,
                            num_chains=args.num_chains,
                            trajectory_length=args.trajectory_length)  # fmt: skip
    extra = mcmc.get_extra_fields()
    return mcmc.get_samples(group_by_chain=True), {
        "num_steps": np.asarray(extra["num_steps"]),  # leapfrog steps of every draw
        "gradients": float(np.sum(extra["num_steps"])),
        "accept_prob": float(np.mean(extra["accept_prob"])),
        "num_divergences": int(np.sum(extra["diverging"])),
    }


def run_sgmcmc(name: str, pot: Any, args: argparse.Namespace, h0: float, key: jax.Array):
    """``args.cycles`` cycle-end draws per chain after ``args.burnin_cycles`` cycles."""
    n, chains = args.cycle_length, args.sg_chains
    kernel = KERNELS[name](pot, batch_size=args.batch_size, step_size=cyclical_cosine(h0, n))
    mcmc = MCMC(kernel, num_warmup=args.burnin_cycles * n, num_samples=args.cycles * n,
                thinning=n, num_chains=chains, chain_method="vectorized", progress_bar=False,
                jit_model_args=True)  # fmt: skip
    init_key, run_key = jax.random.split(key)
    init = pot.init_params(init_key, chains if chains > 1 else None)
    mcmc.run(run_key, *pot.args, init_params=init,
             extra_fields=("info",))  # fmt: skip
    info = mcmc.get_extra_fields()["info"]
    with warnings.catch_warnings(record=True):
        problems = check_accuracy(mcmc)
    return mcmc.get_samples(group_by_chain=True), {
        "gradients": args.cycles * n * chains * args.batch_size / pot.num_data,
        "kinetic_temperature": float(np.mean(getattr(info, "kinetic_temperature", np.nan))),
        "warnings": problems,
    }


def _finite(tree: Any) -> bool:
    return all(bool(np.all(np.isfinite(np.asarray(a)))) for a in jax.tree.leaves(tree))


def chain_variances(probs: np.ndarray, samples: dict) -> tuple[np.ndarray, np.ndarray]:
    """Per chain: the variance over draws averaged over all weights, and over test inputs and
    classes of the probabilities ``(chains, draws, n, K)``."""
    w = np.concatenate([np.var(np.asarray(a, np.float64), axis=1, ddof=1).reshape(len(a), -1)
                        for a in samples.values()], axis=1).mean(1)  # fmt: skip
    f = np.var(np.asarray(probs, np.float64), axis=1, ddof=1).reshape(len(probs), -1).mean(1)
    return w, f


def sampler_metrics(
    probs: np.ndarray,
    samples: dict,
    labels: np.ndarray,
    gradients: float,
    ref: dict[str, float] | None,
) -> dict[str, float]:
    """ESS, ESS per 1,000 gradients and the within-chain variances relative to ``ref``'s (for
    the reference itself, ``ref=None``: its first chain's relative to its other chains', the
    noise floor; NaN with one chain) from ``probs`` of shape ``(chains, draws, n, K)``."""
    p_true = np.take_along_axis(probs, labels[None, None, :, None], axis=-1)[..., 0]
    ess = float(np.median(effective_sample_size(np.asarray(p_true, np.float64))))
    w, f = chain_variances(probs, samples)
    m = {"gradients": gradients, "ess": ess, "ess_per_kgrad": 1000 * ess / gradients,
         "weight_var": float(w.mean()), "function_var": float(f.mean())}  # fmt: skip
    if ref is not None:
        m["weight_var_ratio"] = m["weight_var"] / ref["weight_var"]
        m["function_var_ratio"] = m["function_var"] / ref["function_var"]
    elif len(w) > 1:
        m["weight_var_ratio"] = float(w[0] / w[1:].mean())
        m["function_var_ratio"] = float(f[0] / f[1:].mean())
    else:
        m["weight_var_ratio"] = m["function_var_ratio"] = math.nan
    return m


def table1(probs: dict[str, np.ndarray], labels: np.ndarray) -> dict[str, dict[str, float]]:
    """Table 1's metrics per method from probabilities ``(chains, draws, n, K)``."""
    ref = bp.bma(probs["HMC"].reshape(-1, *probs["HMC"].shape[2:]))
    results = {}
    for method, p in probs.items():
        flat = p.reshape(-1, *p.shape[2:])
        avg = bp.bma(flat)
        r = {"single_accuracy": np.mean([bp.metrics.accuracy(q, labels) for q in flat]),
             "single_nll": np.mean([bp.metrics.nll(q, labels) for q in flat]),
             "bma_accuracy": bp.metrics.accuracy(avg, labels),
             "bma_nll": bp.metrics.nll(avg, labels),
             "agreement": bp.metrics.agreement(avg, ref),
             "tv": bp.metrics.total_variation(avg, ref)}  # fmt: skip
        if method == "HMC":
            if len(p) > 1:
                first, rest = bp.bma(p[0]), bp.bma(p[1:].reshape(-1, *p.shape[2:]))
                r["agreement"] = bp.metrics.agreement(first, rest)
                r["tv"] = bp.metrics.total_variation(first, rest)
            else:
                r["agreement"] = r["tv"] = math.nan
        results[method] = {k: float(v) for k, v in r.items()}
    return results


def format_table(rows: dict[str, dict[str, float] | None], columns: dict[str, str]) -> str:
    """One row per method; ``None`` marks a diverged sampler, NaN prints as ``-``."""
    widths = [max(10, len(h) + 2) for h in columns.values()]
    lines = [f"{'method':<8}" + "".join(f"{h:>{w}}" for h, w in zip(columns.values(), widths,
                                                                      strict=True))]  # fmt: skip
    for method, r in rows.items():
        if r is None:
            lines.append(f"{method:<8}  diverged (non-finite samples)")
            continue
        cells = [f"{'-':>{w}}" if math.isnan(r[k]) else f"{r[k]:>{w}.4g}"
                 for k, w in zip(columns, widths, strict=True)]  # fmt: skip
        lines.append(f"{method:<8}" + "".join(cells))
    return "\n".join(lines)


def compare(
    args: argparse.Namespace,
    data: bp.data.Dataset,
    network: str,
    key: jax.Array,
    out_dir: str,
    part: str,
) -> dict[str, Any]:
    """HMC and the SG-MCMC samplers on one (data, network): print, save and return results."""
    model = build_model(args, data, network)
    print(f"{data.name} / {network}: {len(data.x_train)} train / {len(data.x_test)} test rows, "
          f"{model.num_params(data.x_train[:1])} parameters", flush=True)  # fmt: skip
    keys = dict(zip(METHODS, jax.random.split(key, len(METHODS)), strict=True))
    samples, diagnostics, probs = {}, {}, {}
    start = time.perf_counter()
    samples["HMC"], diagnostics["HMC"] = run_hmc(model, args, keys["HMC"], data)
    diagnostics["HMC"]["wall_time_s"] = time.perf_counter() - start
    print(f"  HMC: {diagnostics['HMC']['wall_time_s']:.1f} s", flush=True)

    pot = full_batch_potential(model, data.x_train, data.y_train)
    last = jax.tree.map(lambda a: a[0, -1], samples["HMC"])  # a typical posterior position
    scales = gradient_scales(pot, pot.unconstrain(last), args.batch_size, rng_key=keys["HMC"])
    steps = {name: recommended_step_size(name, scales) for name in KERNELS}
    if args.h0 is not None:
        steps.update({name: args.h0 for name in ("ATMC", "SGNHT", "SGHMC")})
    if args.sgld_h0 is not None:
        steps["SGLD"] = args.sgld_h0
    print(f"  scales at HMC's last draw: curvature {scales.curvature:.4g}, gradient noise "
          f"{scales.noise:.4g} (batch {args.batch_size})", flush=True)  # fmt: skip
    diverged = []
    for name in KERNELS:
        start = time.perf_counter()
        samples[name], diagnostics[name] = run_sgmcmc(name, pot, args, steps[name], keys[name])
        diagnostics[name].update(wall_time_s=time.perf_counter() - start, step_size=steps[name])
        print(f"  {name}: {diagnostics[name]['wall_time_s']:.1f} s", flush=True)
        if not _finite(samples[name]):
            diverged.append(name)
    for name, s in samples.items():
        if name not in diverged:
            flat = jax.tree.map(lambda a: np.asarray(a).reshape(-1, *a.shape[2:]), s)
            p = np.asarray(bp.predict(model, flat, data.x_test))
            probs[name] = p.reshape(*np.shape(jax.tree.leaves(s)[0])[:2], *p.shape[1:])
    results = table1(probs, data.y_test)
    ref = None
    for name in probs:
        m = sampler_metrics(probs[name], samples[name], data.y_test,
                            diagnostics[name]["gradients"], ref)  # fmt: skip
        ref = ref or m
        results[name].update(m, step_size=diagnostics[name].get("step_size", math.nan))
    num_steps = diagnostics["HMC"].pop("num_steps")
    save_npz(
        os.path.join(out_dir, f"{part}_predictions.npz"),
        {"labels": data.y_test, "num_steps/HMC": num_steps}
        | {f"probs/{k}": v for k, v in probs.items()},
    )
    save_npz(os.path.join(out_dir, f"{part}_samples.npz"),
             {f"{m}/{k}": np.asarray(v) for m, s in samples.items() if m in probs
              for k, v in s.items()})  # fmt: skip

    print()
    print(format_table({m: results.get(m) for m in METHODS}, COLUMNS))
    print()
    print(format_table({m: results.get(m) for m in METHODS}, SAMPLER_COLUMNS))
    h = diagnostics["HMC"]
    print(f"\nHMC: {args.num_chains} chain(s) x {args.num_samples} draws, accept prob "
          f"{h['accept_prob']:.3f}, {h['num_divergences']} divergences. SG-MCMC: "
          f"{args.sg_chains} chain(s), batch {args.batch_size}, cycle {args.cycle_length} steps, "
          f"{args.burnin_cycles} burn-in + {args.cycles} cycles (one draw each)")  # fmt: skip
    for name in KERNELS:
        for message in diagnostics[name]["warnings"]:
            print(f"  check_accuracy: {message}")
    return {"results": results, "diverged": diverged, "diagnostics": diagnostics,
            "scales": scales._asdict()}  # fmt: skip


def main(args: argparse.Namespace) -> None:
    mlp_key, cnn_key = jax.random.split(jax.random.key(args.seed))
    out_dir = args.out_dir or os.path.join("runs", "sgmcmc")
    payload: dict[str, Any] = {"args": vars(args)}
    data = get_data("digits", args.max_train, images=False)
    payload["mlp"] = {"dataset": "digits", **compare(args, data, "mlp", mlp_key, out_dir, "mlp")}
    print()
    if args.cnn_dataset == "none":
        print("CNN part skipped (--cnn-dataset none)")
    else:
        try:
            cnn_data = get_data(args.cnn_dataset, args.cnn_max_train, images=True)
        except bp.data.DataNotFoundError as err:
            reason = str(err).split(",")[0]
            print(f"CNN part skipped: {reason} (bnn_ppl never downloads).")
            payload["cnn"] = {"dataset": args.cnn_dataset, "skipped": reason}
        else:
            payload["cnn"] = {
                "dataset": args.cnn_dataset,
                **compare(args, cnn_data, "cnn", cnn_key, out_dir, "cnn"),
            }
    path = os.path.join(out_dir, "metrics.json")
    write_json(path, payload)
    print(f"\nwrote {path}")


def _number(kind: type, low: float, strict: bool = False):
    def parse(s: str):
        v = kind(s)
        if not (v > low if strict else v >= low):  # NaN fails too
            raise argparse.ArgumentTypeError(f"expected {'>' if strict else '>='} {low}, got {s}")
        return v

    return parse


POS_INT, POS_FLOAT, NONNEG_INT = _number(int, 1), _number(float, 0, True), _number(int, 0)
# flag: (type, default, help)
FLAGS = {
    "--width": (POS_INT, 50, "MLP hidden units"),
    "--prior-scale": (POS_FLOAT, 0.3, "MLP prior sd"),
    "--cnn-prior-scale": (POS_FLOAT, 1.0, "CNN: prior sd times sqrt(fan-in)"),
    "--temperature": (POS_FLOAT, 1.0, "posterior temperature"),
    "--max-train": (POS_INT, None, "digits: use only the first k training rows"),
    "--num-warmup": (NONNEG_INT, 200, "HMC warmup"),
    "--num-samples": (POS_INT, 200, "HMC draws per chain"),
    "--num-chains": (POS_INT, 2, "HMC chains"),
    "--trajectory-length": (POS_FLOAT, None, "HMC trajectory (default: (π/2)·prior sd)"),
    "--sg-chains": (POS_INT, 2, "chains per SG-MCMC sampler"),
    "--batch-size": (POS_INT, 128, "minibatch rows (at most the training rows)"),
    "--cycle-length": (POS_INT, 1000, "steps per cycle"),
    "--burnin-cycles": (NONNEG_INT, 2, "cycles of burn-in (MCMC's warmup)"),
    "--cycles": (POS_INT, 20, "cycles after burn-in: one draw each"),
    "--h0": (POS_FLOAT, None, "ATMC/SGNHT/SGHMC step at cycle starts (default: recommended)"),
    "--sgld-h0": (POS_FLOAT, None, "SGLD step at cycle starts (default: recommended)"),
    "--cnn-max-train": (POS_INT, 2000, "CNN: use only the first k training images"),
    "--seed": (int, 0, "random seed"),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="ATMC, SGNHT, SGHMC and SGLD against full-batch HMC.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    for flag, (kind, default, text) in FLAGS.items():
        p.add_argument(flag, type=kind, default=default, help=text)
    p.add_argument(
        "--cnn-dataset", choices=("mnist", "fashion_mnist", "digits", "none"), default="mnist"
    )
    p.add_argument("--out-dir", default=None, help="where the results go (runs/sgmcmc)")
    return p.parse_args(argv)  # fmt: skip


if __name__ == "__main__":
    main(parse_args())

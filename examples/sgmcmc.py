"""SG-MCMC against full-batch HMC: ATMC, SGNHT, SGHMC, SGLD on one BNN (ATMC paper, Table 1).

Every sampler targets the same tempered posterior (one :class:`bnn_ppl.BNN`, one potential):

* ``HMC``: full-batch HMC (:func:`bnn_ppl.inference.hmc`), ``--num-chains`` chains, the
  reference. Its BMA over all chains is what the others are compared with;
* ``ATMC`` (Heek & Kalchbrenner 2019), ``SGNHT`` (Ding et al. 2014), ``SGHMC`` (Chen et al.
  2014) and ``SGLD`` (Welling & Teh 2011): minibatch gradients (``--batch-size`` rows, without
  replacement within an epoch), the cyclical cosine step size ``h_t = h0·½[1 + cos(π·mod(t,
  n)/n)]`` of the ATMC paper, and only the sample at the end of each cycle kept (``MCMC(...,
  thinning=n)`` collects exactly those) after ``--burnin-cycles`` cycles. ATMC, SGNHT and SGHMC
  share ``--h0`` and the momentum damping ``D = -log(0.9)/h0``; SGLD's step is a learning rate
  in other units (``--sgld-h0``).

Columns, on the test set: ``single``: accuracy and NLL of one sample's predictive, averaged over
the samples (for HMC over its draws, for the others over the cycle-end samples); ``BMA``: the
Bayesian model average of all of a method's samples; ``agree`` and ``TV``: agreement (equal
top-1 predictions) and total variation of the BMA to HMC's BMA. HMC's own row compares the BMA
of its first chain with that of its other chains, the Monte Carlo noise floor of those two
columns (with one chain it reads ``-``). A sampler that diverges is reported, not averaged.

The second part repeats the comparison with a small CNN (LeNet-5) on ``--cnn-dataset``
(``mnist`` by default, the first ``--cnn-max-train`` training images); when that data set is not
prepared on this machine (tensorflow-datasets, never downloaded) it is skipped with a message.
``--cnn-dataset digits`` runs the CNN on the 8x8 digits images; ``none`` skips it. Results land
in ``--out-dir`` (default ``runs/sgmcmc/``) as ``metrics.json``.

Run it with the defaults (a few minutes on 2 CPU cores)::

    python examples/sgmcmc.py

or a quick smoke run::

    python examples/sgmcmc.py --num-warmup 10 --num-samples 10 --num-chains 1 --width 8 \\
        --max-train 200 --trajectory-length 0.05 --cycle-length 20 --burnin-cycles 1 \\
        --cycles 2 --cnn-dataset digits --cnn-max-train 100 --out-dir /tmp/sgmcmc

The CNN part is meant for an accelerator: full-batch HMC on LeNet-5 needs hundreds of leapfrog
steps per iteration at Izmailov et al.'s trajectory length (on 2 CPU cores, one gradient on 2000
MNIST images takes about a second).
"""

from __future__ import annotations

import argparse
import math
import os
import time
from typing import Any

import jax
import numpy as np
from numpyro.infer import MCMC

import bnn_ppl as bp
from bnn_ppl.inference import ATMC, SGHMC, SGLD, SGNHT, full_batch_potential
from bnn_ppl.inference.schedules import cycle_end_samples, cyclical_cosine
from bnn_ppl.io import write_json

METHODS = ("HMC", "ATMC", "SGNHT", "SGHMC", "SGLD")

# metric key -> column header
COLUMNS = {
    "single_accuracy": "single acc",
    "single_nll": "single NLL",
    "bma_accuracy": "BMA acc",
    "bma_nll": "BMA NLL",
    "agreement": "agree",
    "tv": "TV",
}


def get_data(name: str, max_train: int | None, images: bool) -> bp.data.Dataset:
    """A classification data set (a fixed split), its first ``max_train`` training rows.

    ``images=True`` gives ``(n, H, W, C)`` inputs (the 8x8 digits are reshaped).
    """
    data = bp.data.load(name)
    if max_train is not None:
        data = data._replace(x_train=data.x_train[:max_train], y_train=data.y_train[:max_train])
    if images and data.x_train.ndim == 2:
        side = math.isqrt(data.x_train.shape[1])
        if side * side != data.x_train.shape[1]:
            raise ValueError(f"{name}: {data.x_train.shape[1]} features are not a square image.")
        data = data._replace(
            x_train=data.x_train.reshape(-1, side, side, 1),
            x_test=data.x_test.reshape(-1, side, side, 1),
        )
    return data


def build_model(args: argparse.Namespace, data: bp.data.Dataset, network: str) -> bp.BNN:
    """``"mlp"``: one hidden layer and an isotropic Normal prior; ``"cnn"``: LeNet-5 with a
    fan-in scaled Normal prior. Categorical likelihood, temperature ``args.temperature``."""
    if network == "mlp":
        net, prior = (
            bp.models.MLP(hidden=(args.width,), out=data.num_classes),
            bp.priors.Normal(args.prior_scale),
        )
    else:
        net = bp.models.LeNet5(out=data.num_classes)
        prior = bp.priors.Normal(args.cnn_prior_scale, fan_in=True)
    return bp.BNN(net, prior, bp.likelihoods.Categorical(), temperature=args.temperature)


def run_hmc(
    model: bp.BNN, args: argparse.Namespace, rng_key: jax.Array, data: bp.data.Dataset
) -> tuple[dict[str, Any], dict[str, float]]:
    """Full-batch HMC; returns the samples grouped by chain and diagnostics."""
    start = time.perf_counter()
    mcmc = bp.inference.hmc(
        model,
        data.x_train,
        data.y_train,
        rng_key=rng_key,
        num_warmup=args.num_warmup,
        num_samples=args.num_samples,
        num_chains=args.num_chains,
        trajectory_length=args.trajectory_length,
    )
    samples = jax.block_until_ready(mcmc.get_samples(group_by_chain=True))
    extra = mcmc.get_extra_fields()
    return samples, {
        "wall_time_s": time.perf_counter() - start,
        "accept_prob": float(np.mean(extra["accept_prob"])),
        "num_divergences": int(np.sum(extra["diverging"])),
        "num_steps": float(np.mean(extra["num_steps"])),
    }


def make_kernel(name: str, pot: Any, args: argparse.Namespace) -> Any:
    """The SG-MCMC kernel ``name`` on ``pot`` with the cyclical schedule."""
    batch_size = min(args.batch_size, pot.num_data)
    if name == "SGLD":
        return SGLD(pot, batch_size=batch_size,
                    step_size=cyclical_cosine(args.sgld_h0, args.cycle_length))  # fmt: skip
    common = dict(batch_size=batch_size, mass=args.mass,
                  step_size=cyclical_cosine(args.h0, args.cycle_length))  # fmt: skip
    if name == "ATMC":
        return ATMC(pot, c=args.atmc_c, **common)
    if name == "SGNHT":
        return SGNHT(pot, **common)
    return SGHMC(pot, **common)


def run_sgmcmc(
    name: str, pot: Any, args: argparse.Namespace, rng_key: jax.Array
) -> tuple[dict[str, Any], dict[str, float]]:
    """``args.cycles`` cycle-end samples after ``args.burnin_cycles`` cycles; data as jit args."""
    n = args.cycle_length
    init_key, run_key = jax.random.split(rng_key)
    start = time.perf_counter()
    mcmc = MCMC(
        make_kernel(name, pot, args),
        num_warmup=args.burnin_cycles * n,
        num_samples=args.cycles * n,
        thinning=n,  # the last step of every cycle, and only it
        progress_bar=False,
        jit_model_args=True,
    )
    mcmc.run(run_key, *pot.args, init_params=pot.init_params(init_key), extra_fields=("info",))
    samples = jax.block_until_ready(cycle_end_samples(mcmc, n))
    info = mcmc.get_extra_fields()["info"]
    diag = {"wall_time_s": time.perf_counter() - start, "num_samples": args.cycles}
    for field in ("kinetic_temperature", "xi_mean"):
        if hasattr(info, field):
            diag[field] = float(np.mean(getattr(info, field)))
    return samples, diag


def _finite(tree: Any) -> bool:
    return all(bool(np.all(np.isfinite(np.asarray(a)))) for a in jax.tree.leaves(tree))


def evaluate(
    probs: dict[str, np.ndarray], labels: np.ndarray, hmc_chains: list[np.ndarray]
) -> dict[str, dict[str, float]]:
    """Metrics per method from per-sample test probabilities ``(S, n, K)``.

    ``hmc_chains``: HMC's per-chain probabilities; HMC's row compares chain 0's BMA with the
    other chains' (the noise floor of agreement and TV).
    """
    ref = bp.bma(probs["HMC"])
    results = {}
    for method, p in probs.items():
        avg = bp.bma(p)
        r = {
            "single_accuracy": np.mean([bp.metrics.accuracy(q, labels) for q in p]),
            "single_nll": np.mean([bp.metrics.nll(q, labels) for q in p]),
            "bma_accuracy": bp.metrics.accuracy(avg, labels),
            "bma_nll": bp.metrics.nll(avg, labels),
            "agreement": bp.metrics.agreement(avg, ref),
            "tv": bp.metrics.total_variation(avg, ref),
        }
        if method == "HMC":
            if len(hmc_chains) > 1:
                first, rest = bp.bma(hmc_chains[0]), bp.bma(np.concatenate(hmc_chains[1:]))
                r["agreement"] = bp.metrics.agreement(first, rest)
                r["tv"] = bp.metrics.total_variation(first, rest)
            else:
                r["agreement"] = r["tv"] = math.nan
        results[method] = {k: float(v) for k, v in r.items()}
    return results


def format_table(results: dict[str, dict[str, float] | None]) -> str:
    """One row per method; ``None`` marks a diverged sampler, NaN prints as ``-``."""
    widths = [max(9, len(h) + 2) for h in COLUMNS.values()]
    lines = [f"{'method':<8}" + "".join(f"{h:>{w}}" for h, w in zip(COLUMNS.values(), widths,
                                                                      strict=True))]  # fmt: skip
    for method, r in results.items():
        if r is None:
            lines.append(f"{method:<8}  diverged (non-finite samples)")
            continue
        cells = [f"{'-':>{w}}" if math.isnan(r[k]) else f"{r[k]:>{w}.4f}"
                 for k, w in zip(COLUMNS, widths, strict=True)]  # fmt: skip
        lines.append(f"{method:<8}" + "".join(cells))
    return "\n".join(lines)


def compare(
    args: argparse.Namespace, data: bp.data.Dataset, network: str, rng_key: jax.Array
) -> dict[str, Any]:
    """Run HMC and the SG-MCMC samplers on one (data, network); print and return the results."""
    model = build_model(args, data, network)
    print(
        f"{data.name} / {network}: {len(data.x_train)} train / {len(data.x_test)} test rows, "
        f"{model.num_params(data.x_train[:1])} parameters",
        flush=True,
    )
    keys = dict(zip(METHODS, jax.random.split(rng_key, len(METHODS)), strict=True))
    probs: dict[str, np.ndarray] = {}
    diagnostics: dict[str, dict[str, float]] = {}
    diverged: list[str] = []

    hmc_samples, diagnostics["HMC"] = run_hmc(model, args, keys["HMC"], data)
    hmc_chains = [
        np.asarray(bp.predict(model, jax.tree.map(lambda a, c=c: a[c], hmc_samples), data.x_test))
        for c in range(args.num_chains)
    ]
    probs["HMC"] = np.concatenate(hmc_chains)
    print(f"  HMC: {diagnostics['HMC']['wall_time_s']:.1f} s", flush=True)

    pot = full_batch_potential(model, data.x_train, data.y_train)
    for name in METHODS[1:]:
        samples, diagnostics[name] = run_sgmcmc(name, pot, args, keys[name])
        print(f"  {name}: {diagnostics[name]['wall_time_s']:.1f} s", flush=True)
        if not _finite(samples):
            diverged.append(name)
            continue
        probs[name] = np.asarray(bp.predict(model, samples, data.x_test))

    results: dict[str, Any] = evaluate(probs, data.y_test, hmc_chains)
    print()
    print(format_table({m: results.get(m) for m in METHODS}))
    h = diagnostics["HMC"]
    print(
        f"\nHMC: {args.num_chains} chain(s) x {args.num_samples} samples, mean accept prob "
        f"{h['accept_prob']:.3f}, {h['num_divergences']} divergences, mean leapfrog steps "
        f"{h['num_steps']:.1f}"
    )
    print(
        f"SG-MCMC: batch {min(args.batch_size, len(data.x_train))}, cycle {args.cycle_length} "
        "steps, "
        f"{args.burnin_cycles} burn-in + {args.cycles} cycles (one sample each), h0 {args.h0} "
        f"(SGLD {args.sgld_h0})"
    )
    for name in ("ATMC", "SGNHT", "SGHMC"):
        d = diagnostics[name]
        extra = f", thermostat <xi> {d['xi_mean']:.3g}" if "xi_mean" in d else ""
        print(f"  {name}: kinetic temperature at cycle ends {d['kinetic_temperature']:.3f}{extra}")
    return {"results": results, "diverged": diverged, "diagnostics": diagnostics}


def main(args: argparse.Namespace) -> None:
    mlp_key, cnn_key = jax.random.split(jax.random.key(args.seed))
    payload: dict[str, Any] = {"args": vars(args)}
    data = get_data("digits", args.max_train, images=False)
    payload["mlp"] = {"dataset": "digits", **compare(args, data, "mlp", mlp_key)}

    print()
    if args.cnn_dataset == "none":
        print("CNN part skipped (--cnn-dataset none)")
    else:
        try:
            cnn_data = get_data(args.cnn_dataset, args.cnn_max_train, images=True)
        except bp.data.DataNotFoundError as err:
            reason = str(err).split(",")[0]  # "tfds data set 'mnist' is not prepared on ..."
            print(f"CNN part skipped: {reason} (bnn_ppl never downloads).")
            payload["cnn"] = {"dataset": args.cnn_dataset, "skipped": reason}
        else:
            payload["cnn"] = {
                "dataset": args.cnn_dataset,
                **compare(args, cnn_data, "cnn", cnn_key),
            }

    out_dir = args.out_dir or os.path.join("runs", "sgmcmc")
    path = os.path.join(out_dir, "metrics.json")
    write_json(path, payload)
    print(f"\nwrote {path}")


def _positive_int(s: str) -> int:
    v = int(s)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {s}")
    return v


def _nonnegative_int(s: str) -> int:
    v = int(s)
    if v < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {s}")
    return v


def _positive_float(s: str) -> float:
    v = float(s)
    if not v > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {s}")
    return v


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="ATMC, SGNHT, SGHMC and SGLD against full-batch HMC on one BNN.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--width", type=_positive_int, default=50, help="MLP hidden units")
    p.add_argument(
        "--prior-scale",
        type=_positive_float,
        default=0.3,
        help="MLP: sd of the Normal prior on every weight",
    )
    p.add_argument(
        "--cnn-prior-scale",
        type=_positive_float,
        default=1.0,
        help="CNN: sd of the prior times sqrt(fan-in)",
    )
    p.add_argument("--temperature", type=_positive_float, default=1.0)
    p.add_argument(
        "--max-train",
        type=_positive_int,
        default=None,
        help="digits: use only the first k training rows",
    )
    # HMC
    p.add_argument("--num-warmup", type=_nonnegative_int, default=200)
    p.add_argument("--num-samples", type=_positive_int, default=200)
    p.add_argument("--num-chains", type=_positive_int, default=2)
    p.add_argument(
        "--trajectory-length",
        type=_positive_float,
        default=None,
        help="HMC trajectory length (default: (π/2)·prior sd, Izmailov et al.)",
    )
    # SG-MCMC
    p.add_argument("--batch-size", type=_positive_int, default=128)
    p.add_argument("--cycle-length", type=_positive_int, default=500, help="steps per cycle")
    p.add_argument("--burnin-cycles", type=_nonnegative_int, default=2)
    p.add_argument(
        "--cycles", type=_positive_int, default=20, help="cycles after burn-in: one sample each"
    )
    p.add_argument(
        "--h0",
        type=_positive_float,
        default=0.02,
        help="ATMC/SGNHT/SGHMC step size at cycle starts",
    )
    p.add_argument(
        "--sgld-h0", type=_positive_float, default=2e-4, help="SGLD step size at cycle starts"
    )
    p.add_argument("--mass", type=_positive_float, default=1.0, help="momentum mass m")
    p.add_argument(
        "--atmc-c",
        type=_positive_float,
        default=None,
        help="ATMC's relativistic speed limit c (default: Gaussian momentum)",
    )
    # CNN part
    p.add_argument(
        "--cnn-dataset", choices=("mnist", "fashion_mnist", "digits", "none"), default="mnist"
    )
    p.add_argument(
        "--cnn-max-train",
        type=_positive_int,
        default=2000,
        help="CNN: use only the first k training images",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out-dir", default=None, help="where metrics.json goes (runs/sgmcmc)")
    return p.parse_args(argv)


if __name__ == "__main__":
    main(parse_args())

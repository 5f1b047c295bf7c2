"""Reference posteriors as data: run the reference recipe and keep its predictive beside its record.

Issue 19 asks for HMC posteriors that are demonstrably converged and kept as small files, like
the HMC reference predictions Izmailov et al. published, so that agreement and total variation
"with HMC" compare every method with something converged. This script runs
:func:`bnn_ppl.inference.reference_hmc` (chains from prior draws, segments until >= 99 % of
the test predictions have R-hat <= 1.01 and bulk ESS >= 400, or the budget ends) and writes,
atomically, into ``--out``:

* ``<name>.npz`` - the reference predictive at every test row: the BMA class probabilities
  ``probs`` ``(n, K)``, or the BMA's moment-matched Gaussian ``mean`` and ``scale`` ``(n,)`` (in
  the data set's standardised target units), plus the test targets ``y_test`` (and ``y_std``,
  the training targets' standard deviation, for metrics in the target's own units), each
  row's mixture log density ``log_density`` (regression), and each chain's thinned draws of
  the checked values (``draws_mean``, ``draws_log_density``, ``draws_noise_scale``: float16,
  or float32 when a value is beyond float16's range; at most 200 per chain and 256 KiB per
  record), from which R-hat and bulk ESS can be recomputed with ArviZ;
* ``<name>.json`` - the exact command, seed, git commit, package versions, data set and model, the
  recipe's settings, whether it converged and every convergence check, and the test metrics
  computed *from the stored predictions* (NLL and accuracy, or Gaussian NLL and RMSE, also in
  the target's units: the UCI protocol's test RMSE and log-likelihood), so
  they can be recomputed from the ``.npz`` alone.

A run that stops at its budget is still written (``"converged": false`` in the record) and says
so; such a file is not a reference.

    python examples/reference.py --dataset digits                     # MLP(50), N(0, 0.3^2)
    python examples/reference.py --dataset yacht --split 0 --mass-matrix dense  # N(0, 1), UCI
    python examples/reference.py --dataset boston --split 0 --noise heldout   # a fixed noise
    python examples/reference.py --checkpoint-dir runs/digits_ref    # resumable: run it again
    python examples/reference.py --dataset yacht --temperatures 16 --min-beta 1e-4  # tempering
    python examples/reference.py --dataset boston --prior-scale 0.3 --temperature 0.3  # cold
    python examples/reference.py --dataset boston --prior laplace:0.2   # another prior family
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
import warnings

import jax
import numpy as np

import bnn_ppl as bp
from bnn_ppl.cli.settings import NOISE_PRIOR_FORMS, NOISE_PRIORS, parse_noise
from bnn_ppl.cli.settings import noise_prior as make_noise_prior
from bnn_ppl.inference import ReferenceNotConvergedWarning, heldout_noise, reference_hmc
from bnn_ppl.io import save_npz, write_json
from bnn_ppl.models import mlp_bnn
from bnn_ppl.runs.config import git_commit, versions

STORED_DRAWS = 200
"""At most this many thinned draws per chain of the checked values are stored."""
STORED_BYTES = 256 * 1024
"""And at most this many bytes of them (float16) per record: 80 UCI records stay under 21 MB."""


def stored_draws(model, run, n_test: int) -> tuple[dict, dict]:
    """Each chain's thinned draws of the checked values, float16 (float32 when a value is
    beyond float16's range), one array per part
    (``draws_mean``, ``draws_log_density``, ``draws_noise_scale``; ``draws_<quantity>`` for a
    quantity of one part), and their record: the thinning, the dtype, and the rule's figures
    recomputed on exactly these stored values (what anyone can re-check with ArviZ)."""
    from bnn_ppl.diagnostics.function_values import quantity_parts
    from bnn_ppl.inference.reference.stopping import check_convergence

    values = run.values.reshape(*run.values.shape[:2], -1)
    chains, draws, size = values.shape
    # float16 unless a value is beyond its range (a log density of a very narrow predictive)
    dtype = np.float16 if np.all(np.abs(values) <= np.finfo(np.float16).max) else np.float32
    width = np.dtype(dtype).itemsize
    per_chain = max(4, min(STORED_DRAWS, STORED_BYTES // (width * chains * size)))
    thin = max(1, -(-draws // per_chain))
    kept = values[:, thin - 1 :: thin].astype(dtype)  # ends at each chain's last draw
    outputs = 1 if run.quantity != "mean_log_density" else (
        (size - n_test - len(model.likelihood.latent_sites())) // n_test)
    parts = quantity_parts(model, run.quantity, n_test, outputs)
    c = run.posterior.config
    rule = {"max_rhat": c["max_rhat"], "min_share": c["min_share"], "min_ess": c["min_ess"]}
    arrays = {f"draws_{k}": kept[..., s] for k, s in parts.items()}
    figures = {k: check_convergence(kept[..., s].astype(np.float64), **rule)
               for k, s in parts.items()}  # fmt: skip
    record = {"dtype": np.dtype(dtype).name, "thin": thin, "draws_per_chain": kept.shape[1],
              "from_draws_per_chain": draws, "arrays": sorted(arrays), "figures": figures,
              "note": "every thin-th draw of each chain's kept (post burn-in) draws, ending at "
                      "its last; the figures are the rule's on these stored values"}  # fmt: skip
    return arrays, record


def reference_predictive(model, run, data) -> tuple[dict, dict]:
    """The BMA at the test inputs as arrays, each chain's BMA too (``chain_probs``, or
    ``chain_mean`` and ``chain_scale``: one chain against the others is the reference's own Monte
    Carlo noise floor), and the test metrics computed from the pooled arrays: NLL and accuracy,
    or the Gaussian NLL and RMSE of the moment-matched predictive in standardised units and in
    the target's own (the UCI protocol's test RMSE and LL)."""
    def average(samples: dict) -> object:
        return bp.bma(bp.predict(model, samples, data.x_test, chunk_size=512))

    samples = run.posterior.samples
    pred = average(samples)
    per_chain = [average({k: v[c : c + 1] for k, v in samples.items()})
                 for c in range(run.posterior.num_chains)]  # fmt: skip
    y, y_std = data.y_test, float(data.y_std)
    if isinstance(pred, bp.likelihoods.GaussianPrediction):
        mean, scale = np.asarray(pred.mean).reshape(-1), np.asarray(pred.scale).reshape(-1)
        arrays = {"mean": mean, "scale": scale, "y_test": y, "y_std": np.asarray(y_std),
                  "chain_mean": np.stack([np.asarray(p.mean).reshape(-1) for p in per_chain]),
                  "chain_scale": np.stack([np.asarray(p.scale).reshape(-1) for p in per_chain])}
        nll, rmse = float(bp.metrics.gaussian_nll(mean, scale, y)), float(bp.metrics.rmse(mean, y))
        metrics = {"gaussian_nll": nll, "rmse": rmse, "rmse_original": rmse * y_std,
                   "test_ll_original": -nll - float(np.log(y_std)),
                   "mean_sq_std_residual": float(np.mean((y - mean) ** 2 / scale**2))}  # fmt: skip
        if run.quantity == "mean_log_density":  # the mixture's density at each test row
            n = len(y)
            logp = run.values.reshape(*run.values.shape[:2], -1)[..., n : 2 * n]
            logp = logp.reshape(-1, n).astype(np.float64)
            top = logp.max(axis=0)
            arrays["log_density"] = top + np.log(np.mean(np.exp(logp - top), axis=0))
            metrics["test_ll_mixture_original"] = float(np.mean(arrays["log_density"])
                                                        - np.log(y_std))  # fmt: skip
        return arrays, metrics
    probs = np.asarray(pred)
    arrays = {"probs": probs, "y_test": y,
              "chain_probs": np.stack([np.asarray(p) for p in per_chain])}
    return arrays, {"nll": float(bp.metrics.nll(probs, y)),
                    "accuracy": float(bp.metrics.accuracy(probs, y))}  # fmt: skip


def main(args: argparse.Namespace) -> None:
    data = bp.data.load_subset(args.dataset, split=args.split, max_train=args.max_train,
                               max_test=args.max_test)  # fmt: skip
    args.dataset = data.name  # yacht -> uci/yacht
    if args.prior_scale is None:  # the scales the repo's examples use: digits 0.3, UCI 1.0
        args.prior_scale = 1.0 if args.dataset.startswith("uci/") else 0.3
    prior = bp.priors.from_string(args.prior) if args.prior else args.prior_scale
    commit = git_commit(os.path.dirname(os.path.abspath(__file__)))  # the code that runs
    # regression: a HalfNormal(1) noise prior, or --noise fixed (README: the noise-scale funnel),
    # given or chosen from the training rows (--noise heldout: cross-validated MAP error)
    choice = None
    if args.noise == "heldout":
        choice = heldout_noise(mlp_bnn(data, args.width, prior), data.x_train,
                               data.y_train, rng_key=jax.random.key(args.seed))  # fmt: skip
        args.noise = choice.noise
        print(f"noise: {choice.noise:g}, the training rows' {len(choice.fold_rmse)}-fold held-out "
              f"MAP RMSE {choice.rmse:.4f} (folds {np.round(choice.fold_rmse, 3).tolist()})")
    noise_prior = args.noise_prior
    if isinstance(noise_prior, tuple):  # a family and its parameters
        noise_prior = make_noise_prior(*noise_prior)
    model = mlp_bnn(data, args.width, prior, noise=args.noise, noise_prior=noise_prior,
                    temperature=args.temperature, temper=args.temper)  # fmt: skip
    t0 = time.time()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = reference_hmc(model, data, x_test=data.x_test, y_test=data.y_test,
                            rng_key=jax.random.key(args.seed), num_chains=args.num_chains,
                            num_warmup=args.num_warmup, segment_draws=args.segment_draws,
                            max_draws=args.max_draws, max_seconds=args.max_seconds,
                            burn_in=args.burn_in, mass_matrix=args.mass_matrix,
                            confirm_segments=args.confirm_segments, quantity=args.quantity,
                            max_num_steps=args.max_num_steps,
                            num_temperatures=args.temperatures, min_beta=args.min_beta,
                            leapfrog_steps=args.leapfrog_steps, init_steps=args.init_steps,
                            init_learning_rate=args.init_learning_rate,
                            checkpoint_dir=args.checkpoint_dir,
                            on_check=lambda check: print(check.describe(), flush=True))  # fmt: skip
    for w in caught:
        kind = "not converged" if issubclass(w.category, ReferenceNotConvergedWarning) else (
            w.category.__name__)
        print(f"WARNING ({kind}): {w.message}")
    wall = time.time() - t0
    starts = run.posterior.config["convergence"]["starts"]
    if starts:
        print(f"starts: potential {np.round(starts['prior_potential'], 1).tolist()} at the prior "
              f"draws -> {np.round(starts['potential'], 1).tolist()} after {starts['steps']} Adam "
              "steps")
    ladder = run.posterior.config["convergence"].get("tempering")
    if ladder:
        print("ladders (beta per rung):", np.round(ladder["betas"], 4).tolist())
        print("swap rates per neighbour pair:", np.round(ladder["swap_rates"], 3).tolist())
        print("stalled pairs:", ladder["stalled"] or "none")
    arrays, metrics = reference_predictive(model, run, data)
    draws, draws_record = stored_draws(model, run, len(data.x_test))
    arrays |= draws
    uci = args.dataset.startswith("uci/")
    name = args.name or args.dataset.replace("/", "_") + (f"_split{args.split}" if uci else "")
    os.makedirs(args.out, exist_ok=True)
    npz = os.path.join(args.out, f"{name}.npz")
    sha = save_npz(npz, arrays)
    record = {
        "command": "python " + " ".join(shlex.quote(a) for a in sys.argv),
        "seed": args.seed,
        "commit": commit,
        "versions": versions() | {"backend": jax.default_backend()},
        "data": {"name": args.dataset, "split": args.split, "train_rows": len(data.x_train),
                 "test_rows": len(data.x_test), "targets": "standardised (training statistics)"},
        "model": {"network": f"MLP(hidden=({args.width},))", "prior": args.prior
                  or f"Normal({args.prior_scale})",
                  "temperature": args.temperature, "temper": args.temper,
                  "likelihood": type(model.likelihood).__name__}
                 | ({} if data.task == "classification"  # a classifier has no noise sd
                    else {"noise": noise_record(args.noise_prior) if args.noise is None
                          else args.noise})
                 | ({"noise_choice": choice.record()} if choice else {}),
        "predictions": {"file": os.path.basename(npz), "sha256": sha, "arrays": sorted(arrays)},
        "converged": run.converged,
        "stop_reason": run.stop_reason,
        "wall_seconds": wall,  # this call's; recipe.convergence.seconds: every call's
        "metrics": metrics,
        "stored_draws": draws_record,
        "recipe": run.posterior.config,
    }  # fmt: skip
    write_json(os.path.join(args.out, f"{name}.json"), record)
    status = "converged" if run.converged else f"NOT converged ({run.stop_reason})"
    committed = run.posterior.config["convergence"].get("seconds") or wall
    print(f"{name}: {status} after {run.draws} draws/chain in {committed:.0f} s committed "
          f"({wall:.0f} s in this call); "
          + ", ".join(f"{k} {v:.4f}" for k, v in metrics.items()))
    print(f"wrote {npz} and {name}.json")


def noise_value(text: str) -> float | str:
    """``--noise``: a positive number or ``heldout``."""
    if text == "heldout":
        return text
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a positive number or 'heldout', got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"a positive number or 'heldout', got {text!r}")
    return value


def noise_prior_value(text: str) -> float | tuple[str, tuple[float, ...]]:
    """``--noise-prior``: a HalfNormal's scale, or a prior of ``bnn-ppl run --noise``'s form."""
    try:
        value = parse_noise(text)
    except ValueError as e:
        if "--noise must be" not in str(e):  # a known family with a bad parameter: its message
            raise argparse.ArgumentTypeError(str(e).replace("--noise", "--noise-prior")) from None
        value = "heldout"
    if value == "heldout":
        raise argparse.ArgumentTypeError(
            f"a HalfNormal's scale (a positive number) or a prior ({NOISE_PRIOR_FORMS}), got "
            f"{text!r}"
        ) from None
    return value


def noise_record(noise_prior: float | tuple[str, tuple[float, ...]]) -> str:
    """The record's ``model.noise`` of a learned noise sd: ``HalfNormal(1)``,
    ``LogNormal(loc=-4, scale=0.5)``."""
    if not isinstance(noise_prior, tuple):
        return f"HalfNormal({noise_prior:g})"
    family, args = noise_prior
    name, names = NOISE_PRIORS[family]
    named = zip(names, args, strict=True)
    return f"{name}(" + ", ".join(f"{k}={v:g}" for k, v in named) + ")"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--dataset", default="digits",
                   help="digits, or a UCI set (yacht, boston, ... or uci/<name>) with --split")
    p.add_argument("--split", type=int, default=0)
    p.add_argument("--width", type=int, default=50)
    p.add_argument("--prior-scale", type=float, default=None,
                   help="Normal prior scale (default: 0.3 for digits, 1.0 for UCI, as in "
                   "examples/uci_regression.py; on UCI 0.3 says the function varies by ~1.4 "
                   "target sds, 1.0 by ~15, and mixes far faster: examples/references/README.md)")
    p.add_argument("--prior", default=None,
                   help="a prior of bnn_ppl.priors.from_string on every weight instead of "
                   "Normal(--prior-scale), e.g. 'laplace:0.2' or 'student_t:3,0.3'")
    p.add_argument("--temperature", type=float, default=1.0,
                   help="T of a tempered posterior (T < 1: a cold posterior; bnn_ppl.BNN)")
    p.add_argument("--temper", choices=("likelihood", "posterior"), default="likelihood",
                   help="with --temperature: log p(theta) + log p(D|theta) / T ('likelihood') "
                   "or the whole log joint / T ('posterior')")
    p.add_argument("--noise", type=noise_value, default=None,
                   help="regression: a fixed noise sd (standardised targets) instead of the "
                   "HalfNormal(1) prior, whose chains sit at different noise scales on UCI; "
                   "'heldout': the training rows' 5-fold cross-validated MAP RMSE to one "
                   "significant figure (bnn_ppl.inference.heldout_noise)")
    p.add_argument("--noise-prior", type=noise_prior_value, default=1.0,
                   help="regression, learned noise: the scale of the noise sd's HalfNormal "
                   "prior (standardised targets), or another prior on it as bnn-ppl run's "
                   "--noise takes it ('lognormal:LOC,SCALE', 'inversegamma:A,B', ...)")
    p.add_argument("--quantity", default=None,
                   help="the checked values (default: regression the predictive mean, each "
                   "test row's log density and the learned noise, 'mean_log_density'; 'mean': "
                   "the mean only; classification the probabilities)")
    p.add_argument("--confirm-segments", type=int, default=1,
                   help="segments that must meet the rule again after it is first met")
    p.add_argument("--num-chains", type=int, default=4)
    p.add_argument("--num-warmup", type=int, default=1000)
    p.add_argument("--segment-draws", type=int, default=500)
    p.add_argument("--max-draws", type=int, default=20_000, help="per chain")
    p.add_argument("--max-seconds", type=float, default=None)
    p.add_argument("--burn-in", type=float, default=0.0,
                   help="share of each chain's draws, from the first, left out of every check "
                   "and of the stored predictive (0.5: the first half)")
    p.add_argument("--mass-matrix", choices=("diagonal", "dense", "identity"), default="diagonal")
    p.add_argument("--max-num-steps", type=int, default=1024,
                   help="most leapfrog steps per iteration (caps the cost of warmup's first, "
                   "identity-metric windows on a posterior much narrower than its prior)")
    p.add_argument("--temperatures", type=int, default=None,
                   help="K >= 2: parallel tempering with K rungs per chain (default: plain HMC)")
    p.add_argument("--min-beta", type=float, default=1e-3,
                   help="tempering: the ladder's lowest inverse temperature")
    p.add_argument("--leapfrog-steps", type=int, default=16,
                   help="tempering: leapfrog steps per sweep at every rung")
    p.add_argument("--init-steps", type=int, default=0,
                   help="Adam steps from each chain's prior draw before warmup, for starts too "
                   "far out for warmup to bring in (energy with a fixed noise: 20000)")
    p.add_argument("--init-learning-rate", type=float, default=3e-3)
    p.add_argument("--max-train", type=int, default=None)
    p.add_argument("--max-test", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--name", default=None, help="file stem (default: from the data set)")
    p.add_argument("--out", default=os.path.join("examples", "references"))
    p.add_argument("--checkpoint-dir", default=None,
                   help="commit every segment here; the same command again resumes the run "
                   "(or continues it with a larger --max-draws/--max-seconds; --max-seconds "
                   "is the whole run's budget, the time earlier calls committed included)")
    args = p.parse_args(argv)
    if args.prior is not None and args.prior_scale is not None:
        p.error("give --prior or --prior-scale, not both (--prior sets the whole prior)")
    return args


if __name__ == "__main__":
    main(parse_args())

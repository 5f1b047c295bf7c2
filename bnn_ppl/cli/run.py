"""``bnn-ppl run METHOD``: fit a BNN with one method and write the run folder.

Example:
    >>> from bnn_ppl import cli
    >>> s = cli.run_settings("ensemble", cli.RunOptions(out="runs/ens"), {"num_members": 3})
    >>> s.config
    EnsembleConfig(chunk_size=None, init_method='prior', chain_batching='auto', num_steps=1000,
    learning_rate=0.01, batch_size=None, num_members=3)
"""

# Notes:
#
# The options are parsed and checked (:mod:`bnn_ppl.cli.parser`,
# :func:`~bnn_ppl.cli.run_settings`), the data and model built (:mod:`bnn_ppl.cli.build`) and
# checked against the machine (:func:`~bnn_ppl.cli.check_feasible`) before the run folder is
# claimed; then :func:`bnn_ppl.fit` runs the method's config and the folder described in
# :mod:`bnn_ppl.runs` is written: ``config.json``, ``posterior.nc``, ``samples.npz``,
# ``predictions.npz`` and ``metrics.json``. With ``--checkpoint-every k`` (hmc, nuts, SG-MCMC) the
# run is committed to ``<out>/checkpoints`` and a rerun with the same options resumes bit-exactly
# (reference_hmc always commits its segments there, and a rerun may raise its budget:
# :data:`~bnn_ppl.cli.settings.BUDGET_FIELDS`);
# ``--progress-every k`` adds a line to ``<out>/checkpoints/progress.jsonl`` every k draws (a
# resume may change it: it only respaces that file).
#
# ::
#
#     bnn-ppl run hmc --model mlp --dataset digits --prior normal:0.3 --out runs/hmc

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import time
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

import bnn_ppl as bp
from bnn_ppl import runs
from bnn_ppl.cli.build import build_model, choose_noise, inputs_for, load_data
from bnn_ppl.cli.console import count, printer, verdict
from bnn_ppl.cli.feasible import check_feasible, check_temperature
from bnn_ppl.cli.settings import (
    BUDGET_FIELDS,
    HELDOUT,
    PROG,
    SGMCMC_METHODS,
    Fit,
    RunOptions,
    RunSettings,
    default_noise,
    parse_noise,
)
from bnn_ppl.compile_cache import use_persistent_cache
from bnn_ppl.divergence import DivergedError
from bnn_ppl.inference import ReferenceNotConvergedWarning, fit
from bnn_ppl.inference.run_folder import chain_summary, convergence_summary
from bnn_ppl.io import write_json
from bnn_ppl.validation import InputValueError

# JAX and bnn_ppl.runs (which loads JAX) are imported inside the functions that use them, so that
# importing this module (``bnn-ppl --help``) stays fast.



def _diverged(s: RunSettings, what: str, value: Any, index: Any) -> InputValueError:
    return InputValueError(
        f"{s.method} diverged: {what} became {value} (at index {list(index)}); no "
        f"results were saved. Lower --learning-rate, or use a less extreme --prior "
        f"({s.options.prior}) or --temperature ({s.options.temperature:g}): float32 cannot "
        "hold the tempered density or its gradients."
    )


@contextlib.contextmanager
def _flags_for_divergence(s: RunSettings) -> Iterator[None]:
    """The library's DivergedError, restated with the options that usually cause it and
    recorded in the run folder's ``metrics.json`` (``"status": "diverged"``)."""
    try:
        yield
    except DivergedError as e:
        err = _diverged(s, e.what, e.value, e.index)
        runs.save_diverged(s.options.out, s.method, str(err))  # not left looking unfinished
        raise err from None


def _progress(o: RunOptions) -> bool | None:
    """``--progress``/``--no-progress``, or (neither given) off with ``--quiet`` and else the
    library's default (at a terminal, outside CI)."""
    return False if o.progress is None and o.quiet else o.progress


def _fit(model: bp.BNN, data: bp.data.Dataset, s: RunSettings) -> Fit:
    """Any method through :func:`bnn_ppl.fit`; with ``--checkpoint-every`` (hmc, nuts, SG-MCMC)
    the run is committed to ``<out>/checkpoints`` segment by segment and a rerun resumes."""
    import jax


    if s.method == "reference_hmc":
        return _fit_reference(model, data, s)
    checkpoints = {}
    if s.checkpoint_every is not None:  # resumes from <out>/checkpoints if it can
        checkpoints = {
            "checkpoint_dir": os.path.join(s.options.out, runs.CHECKPOINTS),
            "checkpoint_every": s.checkpoint_every,
            "progress_every": s.progress_every,  # may differ on a resume: not in config.json
        }
    post = fit(model, data, s.config, jax.random.key(s.options.seed),
               progress_bar=_progress(s.options), **checkpoints)  # fmt: skip
    resumed = post.config.get("resumed_after_segment")
    summary: dict[str, Any] = {}
    c = s.config
    if s.method in ("hmc", "nuts"):
        summary = {"chains": chain_summary(post), "resumed_after_segment": resumed}
    elif s.method in SGMCMC_METHODS:
        summary = {
            "sampler": s.method,
            "batch_size": c.batch_size,  # type: ignore[attr-defined]
            "step_size": post.config.get("step_size_used", c.step_size),  # type: ignore[attr-defined]
            "resumed_after_segment": resumed,
            "accuracy": post.config.get("accuracy"),  # what check_accuracy found
        }
    elif s.method == "svi":
        losses = np.asarray(post.trace["loss"])
        window = max(1, len(losses) // 10)
        summary = {"final_neg_elbo": float(np.mean(losses[-window:]))}
        if "map_final_loss" in post.config:
            summary["map_final_loss"] = post.config["map_final_loss"]
    else:
        final = np.asarray(post.trace["final_loss"])
        summary = {"mean_final_loss": float(final.mean()), "max_final_loss": float(final.max())}
    return Fit(post, summary)


def _fit_reference(model: bp.BNN, data: bp.data.Dataset, s: RunSettings) -> Fit:
    """reference_hmc through :func:`bnn_ppl.fit`, every segment committed to
    ``<out>/checkpoints`` (a rerun resumes it, or continues it with a larger budget), each
    convergence check printed as it is made; a run that ends unconverged says so in its
    summary (``converged``, ``stop_reason``, ``not_converged``: the warning's text)."""
    import warnings

    import jax


    say = printer(s.options.quiet)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ReferenceNotConvergedWarning)
        post = fit(model, data, s.config, jax.random.key(s.options.seed),
                   checkpoint_dir=os.path.join(s.options.out, runs.CHECKPOINTS),
                   progress_bar=_progress(s.options),
                   on_check=lambda check: say("  " + check.describe()))  # fmt: skip
    for w in caught:  # other warnings go on to the caller's filters
        if not issubclass(w.category, ReferenceNotConvergedWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    text = next((str(w.message) for w in caught
                 if issubclass(w.category, ReferenceNotConvergedWarning)), None)  # fmt: skip
    record = post.config["convergence"]
    summary = {
        "chains": chain_summary(post),
        "resumed_after_segment": record.get("resumed_after_segment"),
        "convergence": convergence_summary(post),
        "not_converged": text,
    }
    return Fit(post, summary)


def _describe_model(o: RunOptions) -> str:
    if o.model == "mlp":
        hidden = f"{o.depth} x {o.width} hidden units" if o.depth else "linear"
        return f"mlp ({hidden})"
    if o.width is not None:
        return f"{o.model} (width {o.width}, {o.depth} blocks per stage)"
    return o.model


def _plan(s: RunSettings) -> str:
    """What the method is about to do."""
    c: Any = s.config
    every = f", checkpoints every {s.checkpoint_every}" if s.checkpoint_every else ""
    if s.method in ("hmc", "nuts"):
        return (
            f"{s.method}: {count(c.num_chains, 'chain')} x ({c.num_warmup} warmup + "
            f"{c.num_samples} samples){every and every + ' draws'}"
        )
    if s.method in SGMCMC_METHODS:
        return (
            f"{s.method}: {count(c.num_chains, 'chain')} x ("
            f"{'automatic' if c.num_warmup is None else c.num_warmup} burn-in + "
            f"{c.num_samples} "
            f"cycles) of {c.cycle_length} steps, batch {c.batch_size}"
            f"{every and every + ' cycles'}"
        )
    if s.method == "reference_hmc":
        budget = f", at most {c.max_seconds:g} s in all" if c.max_seconds else ""
        return (
            f"reference_hmc: {c.num_chains} chains x {c.num_warmup} warmup, then segments of "
            f"{c.segment_draws} draws until R-hat <= {c.max_rhat:g} and bulk ESS >= "
            f"{c.min_ess:g} for {c.min_share:.0%} of the test predictions, at most "
            f"{c.max_draws} draws per chain{budget}; every segment committed to "
            f"{s.options.out}/checkpoints"
        )
    if s.method == "svi":
        first = f"MAP {c.map_steps} steps (one compiled loop), then " if c.map_steps else ""
        return f"svi: {first}{c.num_steps} SVI steps, {c.num_samples} draws from the guide"
    if s.method == "map":
        return f"map: {c.num_steps} steps in one compiled loop"
    return (
        f"ensemble: {c.num_members} members x {c.num_steps} steps, trained together in one "
        "compiled loop"
    )


def _metric_line(m: Mapping[str, float]) -> str:
    return "  ".join(f"{k} {v:.4f}" for k, v in m.items())


def cmd_run(s: RunSettings) -> int:
    o = s.options
    say = printer(o.quiet)
    use_persistent_cache(o.cache_dir)
    data = load_data(o.dataset, split=o.split, data_dir=o.data_dir, max_train=o.max_train)
    data = inputs_for(o.model, data)
    if data.task == "regression" and o.noise is None:
        # recorded: a resume must use the same
        o = dataclasses.replace(o, noise=default_noise(s.method))
    config: Any = s.config
    if s.method in SGMCMC_METHODS and not s.batch_size_given and config.batch_size is not None:
        # the default minibatch, at most the training rows: recorded
        config = dataclasses.replace(config, batch_size=min(config.batch_size, len(data.x_train)))
    s = dataclasses.replace(s, options=o, config=config)
    check_temperature(o.temperature, len(data.x_train))
    heldout = data.task == "regression" and parse_noise(o.noise) == HELDOUT
    # --noise heldout: the sd is chosen after the claim (a fit per fold); what is checked before
    # it (the sites, their sizes, memory) does not depend on the sd
    model = build_model(o, data, noise_sd=1.0 if heldout else None)
    num_params = model.num_params(data.x_train[:1])
    check_feasible(s, data, model, num_params)  # everything is checked before the claim
    config_record = runs.make_config(
        s.arguments(),
        data=runs.data_identity(data, name=o.dataset, split=o.split),
        model={"num_params": num_params},
        environment={"out": o.out, "data_dir": o.data_dir},
    )
    budget = BUDGET_FIELDS if s.method == "reference_hmc" else ()  # a rerun may raise it
    # one writer per folder: the lock is held from the claim to the last file written; a
    # second command on a busy --out is refused here, before it removes or writes anything
    if not os.path.exists(os.path.join(o.out, runs.LOCK)):  # nobody holds it: a refusal
        runs.check_claim(o.out, config_record, may_change=budget)  # here creates nothing
    with runs.FolderLock(o.out) as lock:
        return _claimed_run(s, data, model, config_record, budget, heldout, lock, say)


def _claimed_run(s: RunSettings, data: Any, model: Any, config_record: dict, budget: tuple,
                 heldout: bool, lock: Any, say: Any) -> int:
    """The run once every option is checked: claim ``--out`` (under ``lock``), fit, write."""
    o = s.options
    num_params = config_record["model"]["num_params"]
    reused = runs.claim(o.out, config_record, may_change=budget, lock=lock)
    say(
        f"{o.dataset} ({data.task}): {len(data.x_train)} train / {len(data.x_test)} test rows; "
        f"{_describe_model(o)}, {num_params} parameters; prior {o.prior}, "
        + (f"noise {o.noise}, " if data.task == "regression" else "")
        + f"T={o.temperature:g} ({o.temper})"
        + ("; reusing the run folder" if reused else "")
    )
    say(_plan(s))
    choice = choose_noise(o, data) if heldout else None
    if choice is not None:
        say(
            f"noise sd {choice.noise:g} (standardised): the training rows' "
            f"{len(choice.fold_rmse)}-fold held-out MAP RMSE {choice.rmse:.4f}"
        )
        model = build_model(o, data, noise_sd=choice.noise)
    start = time.perf_counter()
    try:
        with _flags_for_divergence(s):
            fit = _fit(model, data, s)
    except KeyboardInterrupt:
        resumable = s.checkpoint_every or s.method == "reference_hmc"
        again = "resume from the last checkpoint" if resumable else "start over"
        print(f"{PROG}: interrupted; run the same command again to {again}.", file=sys.stderr)
        return 130
    wall = time.perf_counter() - start
    if budget:  # the run went through: config.json records the budget that made its results
        write_json(os.path.join(o.out, runs.CONFIG), config_record)
    record = runs.save_posterior(
        o.out,
        fit.posterior,
        y_std=float(data.y_std) if data.task == "regression" else 1.0,
        extra={"dataset": o.dataset, "wall_time_s": wall, "summary": fit.summary}
        | ({"noise_choice": choice.record()} if choice is not None else {}),
    )
    shape = (
        f"{count(record['num_chains'], 'chain')} x "
        f"{count(record['num_draws'] // record['num_chains'], 'draw')}"
        if fit.posterior.is_markov
        else count(record["num_draws"], "draw")
    )
    say(f"{s.method}: {shape} in {wall:.1f} s")
    for row in fit.summary.get("chains", []):
        say(
            f"  chain {row['chain']}: accept prob {row['accept_prob']:.3f}, "
            f"{row['divergences']} divergences, step size {row['step_size']:.3g}"
            + (f", {row['num_steps']:.1f} leapfrog steps" if "num_steps" in row else "")
        )
    if fit.summary.get("resumed_after_segment") is not None:
        say(f"  resumed after checkpoint segment {fit.summary['resumed_after_segment']}")
    if "convergence" in fit.summary:  # reference_hmc: converged, or why not and what to do
        say(f"  {verdict(fit.summary['convergence'])}")
        if fit.summary["not_converged"]:
            say(f"  {fit.summary['not_converged']}")
    units = " (original units)" if data.task == "regression" else ""
    say(f"test, BMA of {record['num_draws']} draws{units}: {_metric_line(record['metrics'])}")
    files = (runs.CONFIG, runs.POSTERIOR, runs.PROGRESS, runs.SAMPLES, runs.PREDICTIONS,
             runs.METRICS)  # fmt: skip
    say(f"wrote {o.out}/ ({', '.join(files)})")
    return 0

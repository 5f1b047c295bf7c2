"""``bnn-ppl run``: fit a BNN with one method and write the run folder.

The options are checked (:func:`~bnn_ppl.cli.run_settings`), the data and model built
(:mod:`bnn_ppl.cli.build`) and checked against the machine
(:func:`~bnn_ppl.cli.check_feasible`) before the run folder is claimed; then
:func:`bnn_ppl.fit` runs the method's config (:func:`method_config`) and the folder described in
:mod:`bnn_ppl.runs` is written: ``config.json``, ``posterior.nc``, ``samples.npz``,
``predictions.npz`` and ``metrics.json``. With ``--checkpoint-every k`` (hmc, nuts, sgmcmc) the
run is committed to ``<out>/checkpoints`` and a rerun with the same options resumes bit-exactly.

::

    bnn-ppl run --model mlp --dataset digits --method hmc --prior normal:0.3 --out runs/hmc

Example:
    >>> from bnn_ppl import cli
    >>> s = cli.run_settings({"method": "ensemble", "model": "mlp", "dataset": "digits",
    ...                       "prior": "normal:0.3", "temperature": 1.0,
    ...                       "temper": "likelihood", "seed": 0, "members": 3})
    >>> cli.method_config(s).num_members
    3
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

import bnn_ppl as bp
from bnn_ppl.cli.build import _data_identity, _inputs_for, build_model, load_data
from bnn_ppl.cli.console import printer
from bnn_ppl.cli.feasible import check_feasible
from bnn_ppl.cli.settings import CHAIN_METHODS, NOISE_DEFAULT, PROG, run_settings
from bnn_ppl.divergence import DivergedError
from bnn_ppl.validation import InputValueError

if TYPE_CHECKING:
    from bnn_ppl.likelihoods import Prediction

# JAX and bnn_ppl.runs (which loads JAX) are imported inside the functions that use them, so that
# importing this module (``bnn-ppl --help``) stays fast.


class Fit(NamedTuple):
    """What ``bnn-ppl run`` fitted: the :class:`~bnn_ppl.Posterior` (written as
    ``posterior.nc``), whether its draws are Markov chains, and a JSON-able summary. The draws
    and test predictions of ``samples.npz``/``predictions.npz`` are derived from the Posterior:
    leading ``(chain, draw)`` axes when ``chains``, else one ``(draw,)`` axis."""

    posterior: Any
    chains: bool
    summary: dict[str, Any]

    @property
    def samples(self) -> dict[str, np.ndarray]:
        post = self.posterior
        return dict(post.samples) if self.chains else post.flat_samples()

    @property
    def predictions(self) -> Prediction:
        from bnn_ppl.likelihoods import prediction_from_fields
        from bnn_ppl.runs import flat_draws

        pred = prediction_from_fields(dict(self.posterior.predictions))
        return pred if self.chains else flat_draws(pred, True)


def _diverged(s: Mapping[str, Any], what: str, value: Any, index: Any) -> InputValueError:
    return InputValueError(
        f"{s['method']} diverged: {what} became {value} (at index {list(index)}); no "
        f"results were saved. Lower --learning-rate, or use a less extreme --prior "
        f"({s['prior']}) or --temperature ({s['temperature']:g}): float32 cannot hold the "
        "tempered density or its gradients."
    )


@contextlib.contextmanager
def _flags_for_divergence(s: Mapping[str, Any]) -> Iterator[None]:
    """The library's DivergedError, restated with the options that usually cause it."""
    try:
        yield
    except DivergedError as e:
        raise _diverged(s, e.what, e.value, e.index) from None


def _chain_summary(post: Any) -> list[dict[str, float]]:
    """Per chain: mean acceptance, divergences, the (final) step size and mean leapfrog steps."""
    stats = post.sample_stats
    rows = []
    for c in range(post.num_chains):
        row = {
            "chain": c,
            "accept_prob": float(np.mean(stats["acceptance_rate"][c])),
            "divergences": int(np.sum(stats["diverging"][c])),
            "step_size": float(np.ravel(stats["step_size"][c])[-1]),
        }
        if "n_steps" in stats:
            row["num_steps"] = float(np.mean(stats["n_steps"][c]))
        rows.append(row)
    return rows


def method_config(s: Mapping[str, Any]) -> Any:
    """The :mod:`bnn_ppl.config` dataclass of a run's settings: ``bnn-ppl run`` runs exactly
    what :func:`bnn_ppl.fit` runs with it (the recipes, such as MAP-initialised SVI and the
    SG-MCMC cycle schedule with a recommended step size, live there once).

    Example:
        >>> from bnn_ppl import cli
        >>> s = cli.run_settings({"method": "svi", "model": "mlp", "dataset": "digits",
        ...                       "prior": "normal:0.3", "temperature": 1.0,
        ...                       "temper": "likelihood", "seed": 0, "steps": 50})
        >>> cli.method_config(s)
        SVIConfig(chunk_size=None, init_method='prior', num_steps=50, learning_rate=0.01, \
batch_size=None, map_steps=1000, init_scale=0.01, num_particles=1, num_samples=100)
    """
    from bnn_ppl import config

    m, chunk = s["method"], {"chunk_size": s["chunk_size"]}
    if m in ("hmc", "nuts"):
        common = {
            "num_warmup": s["num_warmup"],
            "num_samples": s["num_samples"],
            "num_chains": s["num_chains"],
            "step_size": s["step_size"],
            **chunk,
        }
        if m == "hmc":
            return config.HMCConfig(trajectory_length=s["trajectory_length"], **common)
        return config.NUTSConfig(max_tree_depth=s["max_tree_depth"], **common)
    if m == "sgmcmc":
        return config.CONFIGS[s["sampler"]](
            num_warmup=s["burnin_cycles"],
            num_samples=s["num_samples"],
            num_chains=s["num_chains"],
            cycle_length=s["cycle_length"],
            batch_size=s["batch_size"],
            step_size=s["step_size"],
            **chunk,
        )
    optimiser = {"num_steps": s["steps"], "learning_rate": s["learning_rate"], **chunk}
    if m == "svi":
        return config.SVIConfig(
            map_steps=s["map_steps"],
            batch_size=s["batch_size"],
            num_samples=s["num_samples"],
            **optimiser,
        )
    return config.EnsembleConfig(num_members=s["members"], batch_size=s["batch_size"], **optimiser)


def _fit(model: bp.BNN, data: bp.data.Dataset, s: Mapping[str, Any], out: str) -> Fit:
    """Any method through :func:`bnn_ppl.fit`; with ``--checkpoint-every`` (hmc, nuts, sgmcmc)
    the run is committed to ``<out>/checkpoints`` segment by segment and a rerun resumes."""
    import jax

    from bnn_ppl import runs
    from bnn_ppl.inference import fit

    checkpoints = {}
    if s.get("checkpoint_every") is not None:  # resumes from <out>/checkpoints if it can
        checkpoints = {
            "checkpoint_dir": os.path.join(out, runs.CHECKPOINTS),
            "checkpoint_every": s["checkpoint_every"],
        }
    post = fit(model, data, method_config(s), jax.random.key(s["seed"]), **checkpoints)
    resumed = post.config.get("resumed_after_segment")
    summary: dict[str, Any] = {}
    if s["method"] in ("hmc", "nuts"):
        summary = {"chains": _chain_summary(post), "resumed_after_segment": resumed}
    elif s["method"] == "sgmcmc":
        summary = {
            "sampler": s["sampler"],
            "batch_size": s["batch_size"],
            "step_size": post.config.get("step_size_used", s["step_size"]),
            "resumed_after_segment": resumed,
        }
    elif s["method"] == "svi":
        losses = np.asarray(post.trace["loss"])
        window = max(1, len(losses) // 10)
        summary = {"final_neg_elbo": float(np.mean(losses[-window:]))}
        if "map_final_loss" in post.config:
            summary["map_final_loss"] = post.config["map_final_loss"]
    else:
        final = np.asarray(post.trace["final_loss"])
        summary = {"mean_final_loss": float(final.mean()), "max_final_loss": float(final.max())}
    return Fit(post, s["method"] in CHAIN_METHODS, summary)


def _describe_model(s: Mapping[str, Any]) -> str:
    if s["model"] == "mlp":
        hidden = f"{s['depth']} x {s['width']} hidden units" if s["depth"] else "linear"
        return f"mlp ({hidden})"
    if "width" in s:
        return f"{s['model']} (width {s['width']}, {s['depth']} blocks per stage)"
    return s["model"]


def _plan(s: Mapping[str, Any]) -> str:
    """What the method is about to do (the loops without a progress bar say so)."""
    method = s["method"]
    if method in ("hmc", "nuts"):
        where = (
            f", checkpoints every {s['checkpoint_every']} draws" if s["checkpoint_every"] else ""
        )
        return (
            f"{method}: {s['num_chains']} chain(s) x ({s['num_warmup']} warmup + "
            f"{s['num_samples']} samples){where}"
        )
    if method == "sgmcmc":
        return (
            f"sgmcmc ({s['sampler']}): {s['num_chains']} chain(s) x ({s['burnin_cycles']} burn-in "
            f"+ {s['num_samples']} cycles) of {s['cycle_length']} steps, batch {s['batch_size']}"
            + (
                f", checkpoints every {s['checkpoint_every']} cycles"
                if s["checkpoint_every"]
                else ""
            )
        )
    if method == "svi":
        first = f"MAP {s['map_steps']} steps (one compiled loop), then " if s["map_steps"] else ""
        return f"svi: {first}{s['steps']} SVI steps, {s['num_samples']} draws from the guide"
    return (
        f"ensemble: {s['members']} members x {s['steps']} steps, trained together in one "
        "compiled loop (no progress bar)"
    )


def _metric_line(m: Mapping[str, float]) -> str:
    return "  ".join(f"{k} {v:.4f}" for k, v in m.items())


def _cmd_run(ns: argparse.Namespace) -> int:
    from bnn_ppl import runs

    s = run_settings(vars(ns))
    say = printer(ns.quiet)
    data = load_data(s["dataset"], split=s["split"], data_dir=ns.data_dir, max_train=s["max_train"])
    data = _inputs_for(s["model"], data)
    if data.task == "regression" and s["noise"] is None:
        s["noise"] = NOISE_DEFAULT  # recorded, so that a resumed run must use the same
    if s["method"] == "sgmcmc" and ns.batch_size is None:
        s["batch_size"] = min(s["batch_size"], len(data.x_train))  # the default: recorded
    model = build_model(s, data)
    num_params = model.num_params(data.x_train[:1])
    check_feasible(s, data, model, num_params)  # everything is checked before the claim
    config = runs.make_config(
        s,
        data=_data_identity(s, data),
        model={"num_params": num_params},
        environment={"out": ns.out, "data_dir": ns.data_dir},
    )
    reused = runs.claim(ns.out, config)
    say(
        f"{s['dataset']} ({data.task}): {len(data.x_train)} train / {len(data.x_test)} test rows; "
        f"{_describe_model(s)}, {num_params} parameters; prior {s['prior']}, "
        f"T={s['temperature']:g} ({s['temper']})" + ("; reusing the run folder" if reused else "")
    )
    say(_plan(s))
    start = time.perf_counter()
    try:
        with _flags_for_divergence(s):
            fit = _fit(model, data, s, ns.out)
    except KeyboardInterrupt:
        again = "resume from the last checkpoint" if s.get("checkpoint_every") else "start over"
        print(f"{PROG}: interrupted; run the same command again to {again}.", file=sys.stderr)
        return 130
    wall = time.perf_counter() - start
    # posterior.nc before metrics.json: a run folder with metrics.json is complete
    fit.posterior.save(os.path.join(ns.out, runs.POSTERIOR))
    record = runs.save_results(
        ns.out,
        samples=fit.samples,
        predictions=fit.predictions,
        targets=data.y_test,
        chains=fit.chains,
        task=data.task,
        y_std=float(data.y_std) if data.task == "regression" else 1.0,
        extra={
            "method": s["method"],
            "dataset": s["dataset"],
            "wall_time_s": wall,
            "summary": fit.summary,
        },
    )
    shape = (
        f"{record['num_chains']} chain(s) x {record['num_draws'] // record['num_chains']} draws"
        if fit.chains
        else f"{record['num_draws']} draws"
    )
    say(f"{s['method']}: {shape} in {wall:.1f} s")
    for row in fit.summary.get("chains", []):
        say(
            f"  chain {row['chain']}: accept prob {row['accept_prob']:.3f}, "
            f"{row['divergences']} divergences, step size {row['step_size']:.3g}"
            + (f", {row['num_steps']:.1f} leapfrog steps" if "num_steps" in row else "")
        )
    if fit.summary.get("resumed_after_segment") is not None:
        say(f"  resumed after checkpoint segment {fit.summary['resumed_after_segment']}")
    units = " (original units)" if data.task == "regression" else ""
    say(f"test, BMA of {record['num_draws']} draws{units}: {_metric_line(record['metrics'])}")
    files = (runs.CONFIG, runs.POSTERIOR, runs.SAMPLES, runs.PREDICTIONS, runs.METRICS)
    say(f"wrote {ns.out}/ ({', '.join(files)})")
    return 0

"""The ``bnn-ppl`` command line: fit a BNN, evaluate the run, compare runs.

::

    bnn-ppl run --model mlp --dataset digits --method hmc --prior normal:0.3 --out runs/hmc
    bnn-ppl run --model mlp --dataset digits --method ensemble --members 5 --out runs/ens
    bnn-ppl evaluate runs/hmc            # metrics table, R-hat, reliability.png, rhat.png
    bnn-ppl compare runs/hmc runs/ens    # agreement and total variation with the first run

``run`` loads a data set (:func:`bnn_ppl.data.load`), builds a :class:`bnn_ppl.BNN` (network from
``--model``, prior from ``--prior`` through :func:`bnn_ppl.priors.from_string`, likelihood from
the data set's task), runs one method of :mod:`bnn_ppl.inference` and writes the run folder
described in :mod:`bnn_ppl.runs`: ``config.json``, ``samples.npz``, ``predictions.npz`` and
``metrics.json``. ``--method hmc``/``nuts`` with ``--checkpoint-every k`` run through
:func:`bnn_ppl.inference.run_chain` in ``<out>/checkpoints``: a killed run resumes when started
again with the same options, and a folder written with other options is refused, naming every
option that differs.

Every option is checked before the run folder is claimed (:func:`run_settings`, then
:func:`check_feasible` once the data and model are known: batch sizes, memory, float32 range,
hmc trajectory length), so that a corrected command may reuse the folder.

This module only translates: options become plain keyword arguments of library functions (which
never see argparse), and the library's own input errors (:class:`bnn_ppl.validation.InputError`)
and ``OSError`` become ``bnn-ppl: error: <message>`` on stderr with exit status 2, without a
traceback. Any other exception is a bug and keeps its traceback.

Example:
    >>> from bnn_ppl.cli import main
    >>> main(["run", "--model", "mlp", "--dataset", "digits", "--method", "svi",
    ...       "--temperature", "0", "--out", "/tmp/never-written"])
    2
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

import bnn_ppl as bp
from bnn_ppl import validation
from bnn_ppl.io import write_json
from bnn_ppl.validation import DivergedError, InputError, InputValueError

if TYPE_CHECKING:
    from bnn_ppl import runs
    from bnn_ppl.likelihoods import GaussianPrediction

# JAX, NumPyro, ArviZ and matplotlib (and ``bnn_ppl.runs``, which loads JAX) are imported inside
# the subcommands that use them, so that ``bnn-ppl --help`` and option errors stay fast
# (tests/test_imports.py checks that ``--help`` loads none of them).

__all__ = ["main", "build_parser", "run_settings", "check_feasible", "CLIError"]

PROG = "bnn-ppl"
MODELS = ("mlp", "lenet5", "resnet20frn", "resnetpp", "cnnlstm")
METHODS = ("hmc", "nuts", "svi", "ensemble", "sgmcmc")
SAMPLERS = ("atmc", "sgnht", "sghmc", "sgld")
TEMPER_MODES = ("likelihood", "posterior")
CHAIN_METHODS = ("hmc", "nuts", "sgmcmc")
"""Methods whose draws are Markov chains (stored with a chain axis)."""

METHOD_OPTIONS: dict[str, dict[str, Any]] = {
    "num_warmup": {"hmc": 200, "nuts": 200},
    "num_samples": {"hmc": 200, "nuts": 200, "sgmcmc": 20, "svi": 100},
    "num_chains": {"hmc": 2, "nuts": 2, "sgmcmc": 2},
    "step_size": {"hmc": 0.01, "nuts": 0.01, "sgmcmc": None},
    "trajectory_length": {"hmc": None},
    "max_tree_depth": {"nuts": 10},
    "checkpoint_every": {"hmc": None, "nuts": None},
    "sampler": {"sgmcmc": "atmc"},
    "batch_size": {"sgmcmc": 128, "svi": None, "ensemble": None},
    "cycle_length": {"sgmcmc": 500},
    "burnin_cycles": {"sgmcmc": 2},
    "steps": {"svi": 3000, "ensemble": 1000},
    "map_steps": {"svi": 1000},
    "learning_rate": {"svi": 0.01, "ensemble": 0.01},
    "members": {"ensemble": 5},
}
"""Option -> the methods it applies to, with each method's default (``None``: see the help)."""

MODEL_OPTIONS: dict[str, dict[str, int]] = {
    "width": {"mlp": 50, "resnet20frn": 16, "resnetpp": 32},
    "depth": {"mlp": 1, "resnet20frn": 3, "resnetpp": 9},
}
"""Option -> the networks it applies to, with each network's default."""

NOISE_DEFAULT = "0.5"
CNN_MODELS = ("lenet5", "resnet20frn", "resnetpp")

# options that are numbers: name -> minimum (">0" for a positive float)
_POSITIVE = ("temperature", "step_size", "trajectory_length", "learning_rate")
_AT_LEAST: dict[str, int] = {
    "num_warmup": 0,
    "num_samples": 1,
    "num_chains": 1,
    "max_tree_depth": 1,
    "checkpoint_every": 1,
    "batch_size": 1,
    "cycle_length": 1,
    "burnin_cycles": 0,
    "steps": 1,
    "map_steps": 0,
    "members": 1,
    "width": 1,
    "chunk_size": 1,
    "max_train": 1,
    "split": 0,
}


MAX_COUNT = 2**31 - 1
"""Largest count or iteration total: NumPyro's and our loops count iterations in int32."""
MAX_TREE_DEPTH = 30
"""nuts: deepest tree whose 2^D - 1 leapfrog steps NumPyro's int32 counters hold."""
MAX_LEAPFROG_STEPS = 100_000
"""hmc: most leapfrog steps per iteration at the initial step size (NUTS' default tree depth
allows 1,023); more is a run that does not finish, refused before it starts."""
MAX_LIKELIHOOD_SCALE = 1e15
"""Largest (training rows) / temperature: 1/T multiplies the summed log-likelihood, and beyond
this its gradients, squared by Adam (svi, ensemble) and in the kinetic energy (hmc, nuts,
sgmcmc), come within a few orders of magnitude of float32's overflow (3.4e38 = (1.8e19)^2):
Adam then silently stops moving and HMC's accept test is rounding noise."""
MEMORY_COPIES = 2
"""The draws and test predictions are held about twice while they are saved (device/host
arrays, then the .npz bytes): the memory estimate counts them twice."""


class CLIError(InputValueError):
    """A bad command line that the library itself would not catch (printed without traceback)."""


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


# -------------------------------------------------------------------------------- the parser
def _add_run_options(p: argparse.ArgumentParser) -> None:
    m = p.add_argument_group("model")
    m.add_argument("--model", choices=MODELS, default="mlp", help="network (default: mlp)")
    m.add_argument(
        "--width",
        metavar="N",
        type=int,
        help="mlp: hidden units per layer (50); resnet20frn/resnetpp: base width (16/32)",
    )
    m.add_argument(
        "--depth",
        metavar="N",
        type=int,
        help="mlp: hidden layers, 0 for a linear model (1); resnet20frn/resnetpp: blocks per "
        "stage (3/9)",
    )
    m.add_argument(
        "--prior",
        metavar="SPEC",
        default="normal:0.3",
        help="prior on every parameter, 'family:args[,fan_in]', e.g. normal:0.3, laplace:0.1, "
        "student_t:3,0.1, normal:1,fan_in (default: normal:0.3)",
    )
    m.add_argument(
        "--temperature",
        metavar="T",
        type=float,
        default=1.0,
        help="T > 0; T < 1 is a cold posterior (1)",
    )
    m.add_argument(
        "--temper",
        choices=TEMPER_MODES,
        default="likelihood",
        help="temper the likelihood only, or the whole posterior (likelihood)",
    )
    m.add_argument(
        "--noise",
        metavar="SD",
        help="regression: fixed noise sd of the standardised targets, or halfnormal:S to infer "
        f"it under a HalfNormal(S) prior ({NOISE_DEFAULT})",
    )

    d = p.add_argument_group("data")
    d.add_argument(
        "--dataset",
        metavar="NAME",
        default="digits",
        help=f"one of {', '.join(bp.data.available())} (default: digits)",
    )
    d.add_argument("--data-dir", metavar="DIR", help="where uci/* and tfds data sets are read from")
    d.add_argument("--split", metavar="K", type=int, help="uci/*: which standard split")
    d.add_argument("--max-train", metavar="K", type=int, help="use only the first k training rows")

    i = p.add_argument_group("inference")
    i.add_argument("--method", choices=METHODS, default="hmc", help="inference method (hmc)")
    i.add_argument("--sampler", choices=SAMPLERS, help="sgmcmc: the sampler (atmc)")
    i.add_argument(
        "--num-warmup", metavar="N", type=int, help="hmc/nuts: warmup iterations per chain (200)"
    )
    i.add_argument(
        "--num-samples",
        metavar="N",
        type=int,
        help="hmc/nuts: draws per chain (200); sgmcmc: sampled cycles, one draw each (20); "
        "svi: draws from the fitted guide (100)",
    )
    i.add_argument(
        "--num-chains", metavar="N", type=int, help="hmc/nuts/sgmcmc: chains, vectorised (2)"
    )
    i.add_argument(
        "--step-size",
        metavar="H",
        type=float,
        help="hmc/nuts: initial step size, adapted in warmup (0.01); sgmcmc: step size at "
        "cycle starts (default: the sampler's recommended step size, measured at a MAP "
        "estimate; see bnn_ppl.inference.recommended_step_size)",
    )
    i.add_argument(
        "--trajectory-length",
        metavar="L",
        type=float,
        help="hmc: trajectory length (default: (pi/2) prior sd, Izmailov et al.)",
    )
    i.add_argument("--max-tree-depth", metavar="D", type=int, help="nuts: maximum tree depth (10)")
    i.add_argument(
        "--checkpoint-every",
        metavar="K",
        type=int,
        help="hmc/nuts: checkpoint every k iterations into <out>/checkpoints; a killed run "
        "resumes when re-run with the same options (default: no checkpoints)",
    )
    i.add_argument(
        "--batch-size",
        metavar="B",
        type=int,
        help="sgmcmc: minibatch rows (128, or all rows if fewer); svi/ensemble: minibatch rows "
        "(default: full batch); at most the training rows",
    )
    i.add_argument(
        "--cycle-length",
        metavar="N",
        type=int,
        help="sgmcmc: steps per cyclical step-size cycle (500)",
    )
    i.add_argument(
        "--burnin-cycles", metavar="N", type=int, help="sgmcmc: cycles discarded first (2)"
    )
    i.add_argument(
        "--steps",
        metavar="N",
        type=int,
        help="svi: SVI steps (3000); ensemble: steps per member (1000)",
    )
    i.add_argument(
        "--map-steps",
        metavar="N",
        type=int,
        help="svi: MAP steps that initialise the guide's means, 0 for a prior draw (1000)",
    )
    i.add_argument(
        "--learning-rate", metavar="LR", type=float, help="svi/ensemble: Adam learning rate (0.01)"
    )
    i.add_argument("--members", metavar="M", type=int, help="ensemble: number of members (5)")
    i.add_argument(
        "--chunk-size",
        metavar="ROWS",
        type=int,
        help="rows per network call (default: the library's)",
    )
    i.add_argument(
        "--seed", metavar="S", type=int, default=0, help="random seed (0); the data split is fixed"
    )

    o = p.add_argument_group("output")
    o.add_argument(
        "--out",
        metavar="DIR",
        required=True,
        help="run folder: config.json, posterior.nc (ArviZ), samples.npz, predictions.npz, "
        "metrics.json",
    )
    o.add_argument(
        "--quiet",
        action="store_true",
        help="print nothing on success: no progress bars, status lines or summary (errors still "
        "go to stderr)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The ``bnn-ppl`` parser with its ``run``, ``evaluate`` and ``compare`` subcommands."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Bayesian neural networks from the command line: fit (run), evaluate a run, "
        "compare runs.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser(
        "run",
        usage="%(prog)s --out DIR [--model M] [--dataset NAME] [--method M] [--prior SPEC] ...",
        help="fit a BNN with one method and write a run folder",
        description="Fit a BNN on a data set with one inference method; write config.json, "
        "samples.npz, predictions.npz and metrics.json into --out. Options that belong to "
        "another method or network are refused. Defaults in parentheses.",
    )
    _add_run_options(run)
    run.set_defaults(handler=_cmd_run)

    ev = sub.add_parser(
        "evaluate",
        help="metrics, R-hat diagnostics and plots of a run",
        description="Print a run's test metrics (of the BMA, and per chain), weight- and "
        "function-space R-hat (with >= 2 chains), and write reliability.png, rhat.png and "
        "evaluation.json.",
    )
    ev.add_argument("run", help="a run folder (the --out of bnn-ppl run)")
    ev.add_argument(
        "--num-bins", metavar="N", type=int, default=15, help="reliability diagram bins (15)"
    )
    ev.add_argument(
        "--out", metavar="DIR", help="folder for evaluation.json and the plots (the run folder)"
    )
    ev.add_argument("--quiet", action="store_true", help="only the tables")
    ev.set_defaults(handler=_cmd_evaluate)

    cmp = sub.add_parser(
        "compare",
        help="agreement and total variation between runs' BMAs",
        description="Compare the Bayesian model averages of runs on the same test set: each "
        "run's accuracy and NLL (RMSE and NLL for regression), and its top-1 agreement and "
        "total variation with the first run (RMSE between BMA means for regression).",
    )
    cmp.add_argument(
        "runs", nargs="+", metavar="RUN", help="run folders; the first is the reference"
    )
    cmp.add_argument("--out", metavar="FILE", help="write the table as JSON to this file")
    cmp.add_argument("--quiet", action="store_true", help="only the table")
    cmp.set_defaults(handler=_cmd_compare)
    return parser


# ----------------------------------------------------------------------------- validation
def _parse_noise(text: str) -> float | tuple[str, float]:
    """``"0.5"`` -> 0.5 (fixed noise); ``"halfnormal:1"`` -> ``("halfnormal", 1.0)``."""
    family, sep, arg = str(text).partition(":")
    number = arg if sep else family
    try:
        value = float(number)
    except ValueError:
        value = None
    if value is None or (sep and family.strip().lower().replace("_", "") != "halfnormal"):
        raise InputValueError(
            f"--noise must be a positive number (the fixed noise sd of the standardised targets) "
            f"or 'halfnormal:S' (a HalfNormal(S) prior on it), got {text!r}."
        )
    scale = validation.check_positive("--noise", value)
    return ("halfnormal", scale) if sep else scale


def run_settings(options: Mapping[str, Any]) -> dict[str, Any]:
    """Check ``bnn-ppl run``'s options and resolve the defaults of the chosen method and network.

    Args:
        options: option name (``num_samples``, ...) -> value as parsed (``None``: not given).

    Returns:
        The run's settings: every option that applies to the method and network, with its
        value or default (what ``config.json`` records and a resumed run must repeat).

    Raises:
        ValueError: a number out of range (naming the option), an option that does not apply
            to the method or network, an unknown prior family or malformed prior arguments.
    """
    method, model = options["method"], options["model"]
    validation.check_choice("--method", method, METHODS)
    validation.check_choice("--model", model, MODELS)
    s: dict[str, Any] = {
        "model": model,
        "dataset": options["dataset"],
        "split": options.get("split"),
        "max_train": options.get("max_train"),
        "prior": options["prior"],
        "temperature": options["temperature"],
        "temper": options["temper"],
        "noise": options.get("noise"),
        "method": method,
        "seed": options["seed"],
        "chunk_size": options.get("chunk_size"),
    }
    for table, chosen, what in (
        (MODEL_OPTIONS, model, "--model"),
        (METHOD_OPTIONS, method, "--method"),
    ):
        for name, defaults in table.items():
            value = options.get(name)
            if chosen in defaults:
                s[name] = defaults[chosen] if value is None else value
            elif value is not None:
                raise InputValueError(
                    f"{_flag(name)} does not apply to {what} {chosen}; it applies to "
                    f"{what} {'/'.join(defaults)}."
                )
    validation.check_choice("--temper", s["temper"], TEMPER_MODES)
    for name in _POSITIVE:
        if s.get(name) is not None:
            s[name] = validation.check_positive(_flag(name), s[name])
    for name, low in _AT_LEAST.items():
        value = s.get(name)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < low
        ):
            raise InputValueError(f"{_flag(name)} must be an integer >= {low}, got {value!r}.")
        if value is not None and value > MAX_COUNT:
            raise InputValueError(
                f"{_flag(name)} {value} is above {MAX_COUNT}, the largest count the samplers' "
                "int32 iteration counters hold."
            )
    _check_iterations(s)
    if s.get("max_tree_depth") is not None and s["max_tree_depth"] > MAX_TREE_DEPTH:
        raise InputValueError(
            f"--max-tree-depth {s['max_tree_depth']} is above {MAX_TREE_DEPTH}: a tree of depth "
            "D takes up to 2^D - 1 leapfrog steps, which NumPyro counts in int32 (the default, "
            "10, allows 1,023)."
        )
    if s.get("depth") is not None and s["depth"] < (0 if model == "mlp" else 1):
        raise InputValueError(
            f"--depth must be an integer >= {0 if model == 'mlp' else 1} for --model {model}, "
            f"got {s['depth']}."
        )
    if isinstance(s["seed"], bool) or not isinstance(s["seed"], int) or not 0 <= s["seed"] < 2**32:
        # jax.random.key maps larger seeds onto the same key (no error): refuse them
        raise InputValueError(f"--seed must be an integer in [0, 2**32), got {s['seed']!r}.")
    if s["noise"] is not None:
        _parse_noise(s["noise"])
    try:
        bp.priors.from_string(s["prior"])
    except InputError as e:
        raise InputValueError(f"--prior {s['prior']!r}: {e}") from None
    return s


def _check_iterations(s: Mapping[str, Any]) -> None:
    """Refuse iteration totals beyond the int32 counters of the samplers' loops."""
    method = s["method"]
    if method in ("hmc", "nuts"):
        total, what = s["num_warmup"] + s["num_samples"], "--num-warmup + --num-samples"
    elif method == "sgmcmc":
        total = (s["burnin_cycles"] + s["num_samples"]) * s["cycle_length"]
        what = "(--burnin-cycles + --num-samples) x --cycle-length"
    else:
        return
    if total > MAX_COUNT:
        raise InputValueError(
            f"{what} = {total} iterations is above {MAX_COUNT}, the most the samplers' int32 "
            "iteration counters hold."
        )


def _memory_bytes() -> int | None:
    """The memory the draws must fit in: physical RAM, or an accelerator's memory if smaller
    (``None`` when neither is known)."""
    sizes = []
    with contextlib.suppress(ValueError, OSError, AttributeError):
        sizes.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    import jax

    stats = jax.devices()[0].memory_stats() or {}
    if stats.get("bytes_limit"):
        sizes.append(int(stats["bytes_limit"]))
    return min(sizes) if sizes else None


def _gib(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB" if n < 2**40 else f"{n / 2**40:,.1f} TiB"


def check_feasible(
    s: Mapping[str, Any], data: bp.data.Dataset, model: bp.BNN, num_params: int
) -> None:
    """Refuse, before the run folder is claimed, a run that cannot work on this data and machine.

    * ``--batch-size`` above the training rows (nothing is clamped silently);
    * draws and test predictions that would not fit in memory (estimated from the parameter
      count, float32, :data:`MEMORY_COPIES` copies);
    * ``--temperature`` so cold that float32 cannot hold the tempered gradients
      (:data:`MAX_LIKELIHOOD_SCALE`);
    * hmc trajectories of more than :data:`MAX_LEAPFROG_STEPS` leapfrog steps at the initial
      step size (``--prior normal:1e6`` gives a default trajectory length of 1.6e6).

    Raises:
        InputValueError: naming the option(s), the estimate and the fix.
    """
    n = len(data.x_train)
    if s.get("batch_size") is not None and s["batch_size"] > n:
        raise InputValueError(
            f"--batch-size {s['batch_size']} is larger than the {n} training rows of "
            f"{s['dataset']}; pass at most {n} (or omit it)."
        )
    if n / s["temperature"] > MAX_LIKELIHOOD_SCALE:
        raise InputValueError(
            f"--temperature {s['temperature']:g} is too cold for float32 with {n} training "
            f"rows: 1/T scales their summed log-likelihood by n/T = {n / s['temperature']:.3g} "
            f"(at most {MAX_LIKELIHOOD_SCALE:.0e} is allowed), and its gradients squared "
            f"overflow float32; pass --temperature >= {n / MAX_LIKELIHOOD_SCALE:.3g}."
        )
    method = s["method"]
    if method in CHAIN_METHODS:
        draws, counts = s["num_chains"] * s["num_samples"], "--num-chains x --num-samples"
    elif method == "svi":
        draws, counts = s["num_samples"], "--num-samples"
    else:
        draws, counts = s["members"], "--members"
    outputs = data.num_classes if data.task == "classification" else 2
    per_draw = num_params + len(data.x_test) * outputs
    need = MEMORY_COPIES * 4 * draws * per_draw
    have = _memory_bytes()
    if have is not None and need > have:
        preds = per_draw - num_params
        raise InputValueError(
            f"{counts} = {draws:,} draws of {num_params:,} parameters and {preds:,} test "
            f"predictions each need about {_gib(need)} (float32, held {MEMORY_COPIES}x while "
            f"saved), more than this machine's {_gib(have)} of memory; lower {counts}, or use "
            "a smaller network."
        )
    if method == "hmc":
        from bnn_ppl.inference import default_trajectory_length

        length = s["trajectory_length"]
        default = length is None
        if default:
            length = default_trajectory_length(model, data.x_train[:1])
        steps = math.ceil(length / s["step_size"])
        if steps > MAX_LEAPFROG_STEPS:
            origin = "the default (pi/2) x prior sd" if default else "--trajectory-length"
            raise InputValueError(
                f"--method hmc would take {steps:,} leapfrog steps per iteration (trajectory "
                f"length {length:.3g}, {origin}, over --step-size {s['step_size']:g}), more "
                f"than the {MAX_LEAPFROG_STEPS:,} allowed: the run would not finish. Pass a "
                "shorter --trajectory-length or a larger --step-size, or use --method nuts "
                "(its tree depth bounds the steps)."
            )


# ------------------------------------------------------------------------- data and model
def load_data(
    dataset: str,
    *,
    split: int | None = None,
    data_dir: str | None = None,
    max_train: int | None = None,
) -> bp.data.Dataset:
    """``bp.data.load(dataset, ...)`` with only the options given; the first ``max_train``
    training rows.

    Raises:
        ValueError: unknown data set, or ``max_train`` above the number of training rows.
        TypeError: an option the data set does not take.
        DataNotFoundError: the data set is not on this machine.
    """
    options: dict[str, Any] = {}
    if split is not None:
        options["split"] = split
    if data_dir is not None:
        options["data_dir"] = data_dir
    data = bp.data.load(dataset, **options)
    if max_train is not None:
        n = len(data.x_train)
        if max_train > n:
            raise InputValueError(
                f"--max-train {max_train} exceeds the {n} training rows of {dataset}; omit it "
                "to use them all."
            )
        data = data._replace(x_train=data.x_train[:max_train], y_train=data.y_train[:max_train])
    return data


def _inputs_for(model: str, data: bp.data.Dataset) -> bp.data.Dataset:
    """Reshape flat square images (8x8 digits) for the CNNs; check token ids for the CNN-LSTM."""
    x = data.x_train
    if model in CNN_MODELS and x.ndim == 2:
        side = math.isqrt(x.shape[1])
        if side * side != x.shape[1]:
            raise InputValueError(
                f"--model {model} needs images; {data.name} has {x.shape[1]} features, which are "
                "not a square image. Use --model mlp."
            )
        return data._replace(
            x_train=x.reshape(-1, side, side, 1), x_test=data.x_test.reshape(-1, side, side, 1)
        )
    if model in CNN_MODELS and x.ndim != 4:
        raise InputValueError(
            f"--model {model} needs (n, H, W, C) images; {data.name} has {x.shape}."
        )
    if model == "cnnlstm" and not np.issubdtype(x.dtype, np.integer):
        raise InputValueError(
            f"--model cnnlstm takes token ids (e.g. --dataset imdb_reviews); {data.name} has "
            f"{x.dtype} features. Use --model mlp."
        )
    return data


def build_model(settings: Mapping[str, Any], data: bp.data.Dataset) -> bp.BNN:
    """The BNN of ``settings`` for ``data`` (whose inputs :func:`_inputs_for` has prepared)."""
    from bnn_ppl import models

    classification = data.task == "classification"
    out = data.num_classes if classification else 1
    name = settings["model"]
    if name == "mlp":
        network: Any = models.MLP(hidden=(settings["width"],) * settings["depth"], out=out)
    elif name == "lenet5":
        network = models.LeNet5(out=out)
    elif name == "resnet20frn":
        network = models.ResNet20FRN(
            out=out, width=settings["width"], blocks_per_stage=settings["depth"]
        )
    elif name == "resnetpp":
        network = models.ResNetPP(
            out=out, width=settings["width"], blocks_per_stage=settings["depth"]
        )
    else:
        vocab = int(max(data.x_train.max(), data.x_test.max())) + 1
        network = models.CNNLSTM(out=out, vocab_size=vocab)
    if classification:
        if settings["noise"] is not None:
            raise InputValueError(
                f"--noise applies to regression; {data.name} is a classification set."
            )
        likelihood: Any = bp.likelihoods.Categorical()
    else:
        noise = _parse_noise(NOISE_DEFAULT if settings["noise"] is None else settings["noise"])
        if isinstance(noise, tuple):
            import numpyro.distributions as dist

            noise = dist.HalfNormal(noise[1])
        likelihood = bp.likelihoods.Gaussian(scale=noise)
    model = bp.BNN(
        network,
        prior=bp.priors.from_string(settings["prior"]),
        likelihood=likelihood,
        temperature=settings["temperature"],
        temper=settings["temper"],
    )
    model.check_data(data.x_train, data.y_train)
    return model


def _data_identity(settings: Mapping[str, Any], data: bp.data.Dataset) -> dict[str, Any]:
    from bnn_ppl import runs

    return {
        "name": settings["dataset"],
        "split": settings["split"],
        "task": data.task,
        "num_classes": int(data.num_classes),
        "num_train": int(len(data.x_train)),
        "num_test": int(len(data.x_test)),
        "train_sha256": runs.array_sha256(data.x_train, data.y_train),
        "test_sha256": runs.array_sha256(data.x_test, data.y_test),
    }


# ------------------------------------------------------------------------------- the methods
class Fit(NamedTuple):
    """What a method returns: draws and test predictions (leading ``(chain, draw)`` axes when
    ``chains``, else ``(draw,)``) and a JSON-able summary of the run."""

    samples: dict[str, np.ndarray]
    predictions: np.ndarray | GaussianPrediction
    chains: bool
    summary: dict[str, Any]
    posterior: Any  # a bnn_ppl.Posterior, written as posterior.nc


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


def _predictions(post: Any, chains: bool) -> np.ndarray | GaussianPrediction:
    """The Posterior's test predictions as the run folder stores them."""
    from bnn_ppl.likelihoods import GaussianPrediction

    p = post.predictions

    def lead(a: np.ndarray) -> np.ndarray:
        return a if chains else a.reshape(-1, *a.shape[2:])

    if "probs" in p:
        return lead(p["probs"])
    return GaussianPrediction(lead(p["mean"]), lead(p["scale"]))


def _fit(
    model: bp.BNN, data: bp.data.Dataset, s: Mapping[str, Any], out: str, progress: bool
) -> Fit:
    """Any method through :func:`bnn_ppl.fit` (hmc/nuts with ``--checkpoint-every`` excepted:
    :func:`_fit_checkpointed`)."""
    import jax

    from bnn_ppl.inference import fit

    if s.get("checkpoint_every") is not None:
        return _fit_checkpointed(model, data, s, out, progress)
    post = fit(model, data, method_config(s), jax.random.key(s["seed"]))
    chains = s["method"] in CHAIN_METHODS
    samples = post.samples if chains else post.flat_samples()
    summary: dict[str, Any] = {}
    if s["method"] in ("hmc", "nuts"):
        summary = {"chains": _chain_summary(post), "resumed_after_segment": None}
    elif s["method"] == "sgmcmc":
        summary = {
            "sampler": s["sampler"],
            "batch_size": s["batch_size"],
            "step_size": post.config.get("step_size_used", s["step_size"]),
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
    return Fit(dict(samples), _predictions(post, chains), chains, summary, post)


def _fit_checkpointed(
    model: bp.BNN, data: bp.data.Dataset, s: Mapping[str, Any], out: str, progress: bool
) -> Fit:
    """HMC or NUTS through ``run_chain``, checkpointed every ``--checkpoint-every`` iterations."""
    import jax

    from bnn_ppl import inference, runs
    from bnn_ppl.inference.to_posterior import NUMPYRO_STATS
    from bnn_ppl.posterior import Posterior

    key = jax.random.key(s["seed"])
    if s["method"] == "hmc":
        kernel_kwargs = {"trajectory_length": s["trajectory_length"], "step_size": s["step_size"]}
    else:
        kernel_kwargs = {"max_tree_depth": s["max_tree_depth"], "step_size": s["step_size"]}
    pot = inference.full_batch_potential(
        model, data.x_train, data.y_train, chunk_size=s["chunk_size"]
    )
    if s["method"] == "hmc":
        from bnn_ppl.inference.hmc import hmc_kernel

        # the kernel of bp.inference.hmc, with its defaults, so that both give the same chain
        kernel: Any = hmc_kernel(pot, **kernel_kwargs)
    else:
        kernel = inference.NUTS(
            pot, adapt_mass_matrix=True, target_accept_prob=0.8, **kernel_kwargs
        )
    folder = os.path.join(out, runs.CHECKPOINTS)
    result = inference.run_chain(  # a held lock is an InputError: reported by main()
        kernel,
        checkpoint_dir=folder,
        checkpoint_every=s["checkpoint_every"],
        rng_key=key,
        num_chains=s["num_chains"],
        num_warmup=s["num_warmup"],
        num_samples=s["num_samples"],
        x_predict=data.x_test,
        predict_chunk_size=s["chunk_size"],
        config=dict(s),
        progress_bar=progress,
    )
    one = s["num_chains"] == 1

    def with_chain_axis(a: Any) -> np.ndarray:
        return np.asarray(a)[None] if one else np.asarray(a)

    samples = {k: with_chain_axis(v) for k, v in result.samples.items()}
    extra = {k: with_chain_axis(v) for k, v in result.extra_fields.items()}
    stats = {NUMPYRO_STATS[k]: v for k, v in extra.items() if k in NUMPYRO_STATS}
    step = np.ravel(np.asarray(result.state.adapt_state.step_size))
    stats["step_size"] = np.broadcast_to(
        np.broadcast_to(step, (len(step) if not one else 1,))[:, None],
        stats["acceptance_rate"].shape,
    ).astype(np.float32)
    post = Posterior(s["method"], samples, sample_stats=stats, config=method_config(s).to_dict())
    post = post.with_data(
        model, data.x_train, data.y_train, data.x_test, data.y_test, chunk_size=s["chunk_size"]
    )
    summary = {"chains": _chain_summary(post), "resumed_after_segment": result.resumed_from}
    return Fit(samples, _predictions(post, True), True, summary, post)


FITTERS: dict[str, Callable[..., Fit]] = dict.fromkeys(METHODS, _fit)


# ------------------------------------------------------------------------------- commands
def _say(quiet: bool) -> Callable[..., None]:
    return (lambda *a, **k: None) if quiet else (lambda *a, **k: print(*a, **k, flush=True))


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
            f", checkpoints every {s['checkpoint_every']} iterations"
            if s["checkpoint_every"]
            else ""
        )
        return (
            f"{method}: {s['num_chains']} chain(s) x ({s['num_warmup']} warmup + "
            f"{s['num_samples']} samples){where}"
        )
    if method == "sgmcmc":
        return (
            f"sgmcmc ({s['sampler']}): {s['num_chains']} chain(s) x ({s['burnin_cycles']} burn-in "
            f"+ {s['num_samples']} cycles) of {s['cycle_length']} steps, batch {s['batch_size']}"
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
    say = _say(ns.quiet)
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
            fit = FITTERS[s["method"]](model, data, s, ns.out, not ns.quiet)
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


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table: the first column left-aligned, numbers with 4 decimals."""

    def cell(c: Any) -> str:
        if isinstance(c, str):
            return c
        return "-" if c is None or (isinstance(c, float) and math.isnan(c)) else f"{c:.4f}"

    cells = [list(header)] + [[cell(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join(
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in cells
    )


def _convergence_json(conv: Any, by: str) -> dict[str, Any]:
    return {
        "fraction_above": {str(t): conv.fraction_above(t) for t in bp.diagnostics.THRESHOLDS},
        "groups": [
            {
                "name": g.name,
                "size": g.size,
                "rhat_p50_p90_p99_max": list(g.rhat_quantiles),
                "fraction_above": {str(t): v for t, v in g.frac_above.items()},
                "ess_bulk_min": g.ess_bulk_min,
                "ess_bulk_median": g.ess_bulk_median,
                "ess_tail_min": g.ess_tail_min,
            }
            for g in conv.summary(by)
        ],
    }


def _function_space(run: runs.Run) -> Any:
    """Function-space R-hat/ESS from the saved per-draw predictions (probabilities, or the
    predictive means for regression): what ``bp.diagnostics.function_space`` computes, without
    re-running the network or reloading the data."""

    pred = run.predictions
    values = bp.likelihoods.location(pred)
    return bp.diagnostics.weight_space({"predictive": np.asarray(values)})


def _diagnostics(run: runs.Run) -> tuple[dict[str, Any], Any, Any]:
    """(JSON summary, weight-space and function-space Convergence or None, None)."""
    method = run.record.get("method", "?")
    if not run.chains:
        kind = "draws from the fitted guide" if method == "svi" else "ensemble members"
        reason = (
            f"method {method}: the {kind} are independent, not Markov chains; R-hat does not apply"
        )
        return {"skipped": reason}, None, None
    if run.num_chains < 2:
        reason = "1 chain: R-hat compares chains and needs at least 2 (re-run with --num-chains 2)"
        return {"skipped": reason}, None, None
    try:
        ws = bp.diagnostics.weight_space(run.samples or {})
        fs = _function_space(run)
    except InputError as e:  # e.g. NaN draws; a bug elsewhere keeps its traceback
        return {"skipped": f"diagnostics undefined: {e}"}, None, None
    return (
        {
            "weight_space": _convergence_json(ws, "layer"),
            "function_space": _convergence_json(fs, "site"),
        },
        ws,
        fs,
    )


def _metrics_rows(run: runs.Run) -> list[tuple[str, dict[str, float]]]:
    from bnn_ppl import runs

    rows = [
        (
            f"BMA ({run.num_draws} draws)",
            runs.predictive_metrics(
                runs.flat_draws(run.predictions, run.chains),
                run.targets,
                task=run.task,
                y_std=run.y_std,
            ),
        )
    ]
    if run.chains and run.num_chains > 1:
        for c, pred in enumerate(runs.per_chain(run.predictions)):
            m = runs.predictive_metrics(pred, run.targets, task=run.task, y_std=run.y_std)
            rows.append((f"chain {c} BMA", m))
    return rows


def _cmd_evaluate(ns: argparse.Namespace) -> int:
    from bnn_ppl import plots, runs

    say = _say(ns.quiet)
    num_bins = ns.num_bins
    if isinstance(num_bins, bool) or not isinstance(num_bins, int) or num_bins < 1:
        raise InputValueError(f"--num-bins must be an integer >= 1, got {num_bins!r}.")
    run = runs.load_run(ns.run, samples=True)
    if run.task == "classification" and num_bins > len(run.targets):
        raise InputValueError(
            f"--num-bins {num_bins} exceeds the {len(run.targets)} test rows of {ns.run}; a "
            "reliability diagram needs at most one bin per row (default 15)."
        )
    out = ns.out or run.path
    dataset, method = run.config["arguments"]["dataset"], run.config["arguments"]["method"]
    print(
        f"{run.path}: {method} on {dataset} ({run.task}), {run.num_draws} draws"
        + (f" in {run.num_chains} chains" if run.chains else "")
    )

    rows = _metrics_rows(run)
    keys = list(rows[0][1])
    print()
    print(_table(["predictive", *keys], [[name, *(m[k] for k in keys)] for name, m in rows]))
    chains = run.record.get("summary", {}).get("chains") or []
    if chains:
        print()
        print(
            _table(
                ["chain", "accept prob", "divergences", "step size"],
                [
                    [
                        str(r["chain"]),
                        r["accept_prob"],
                        str(r["divergences"]),
                        f"{r['step_size']:.3g}",
                    ]
                    for r in chains
                ],
            )
        )

    diag, ws, fs = _diagnostics(run)
    print()
    if ws is None:
        print(f"R-hat skipped: {diag['skipped']}")
    else:
        print("weight space (rank-normalised split R-hat, per layer):")
        print(ws.table("layer"))
        print("function space (predictions on the test set):")
        print(fs.table("site"))

    written = []
    if run.task == "classification":
        avg = runs.flat_draws(run.predictions, run.chains).mean(axis=0)
        curve = bp.metrics.reliability_curve(avg, run.targets, num_bins=num_bins)
        fig = plots.reliability_diagram(
            {f"{method} BMA": curve}, title=f"{dataset}: {method}, test set"
        )
        plots.save_figure(fig, os.path.join(out, "reliability.png"))
        written.append("reliability.png")
    if ws is not None:
        fig = plots.rhat_histograms({"weight space": ws, "function space": fs})
        plots.save_figure(fig, os.path.join(out, "rhat.png"))
        written.append("rhat.png")
    write_json(
        os.path.join(out, runs.EVALUATION),
        {
            "run": run.path,
            "method": method,
            "dataset": dataset,
            "task": run.task,
            "metrics": {name: m for name, m in rows},
            "sampler": chains,
            "diagnostics": diag,
            "plots": written,
        },
    )
    written.append(runs.EVALUATION)
    say(f"\nwrote {', '.join(os.path.join(out, w) for w in written)}")
    return 0


def _cmd_compare(ns: argparse.Namespace) -> int:
    from bnn_ppl import runs

    say = _say(ns.quiet)
    if len(ns.runs) < 2:
        raise CLIError("compare needs at least two run folders (the first is the reference).")
    loaded = [runs.load_run(path) for path in ns.runs]
    runs.check_comparable(loaded)
    ref = loaded[0]
    ref_bma = bp.bma(runs.flat_draws(ref.predictions, ref.chains))
    results = []
    for run in loaded:
        flat = runs.flat_draws(run.predictions, run.chains)
        row: dict[str, Any] = {
            "run": run.path,
            "method": run.config["arguments"]["method"],
            "draws": run.num_draws,
            **runs.predictive_metrics(flat, run.targets, task=run.task, y_std=run.y_std),
        }
        avg = bp.bma(flat)
        if run.task == "classification":
            row["agreement"] = float(bp.metrics.agreement(avg, ref_bma))
            row["tv"] = float(bp.metrics.total_variation(avg, ref_bma))
        else:
            row["rmse_vs_reference"] = float(
                bp.metrics.rmse(avg.mean, ref_bma.mean, y_scale=run.y_std)
            )
        results.append(row)
    if ref.task == "classification":
        columns = {"accuracy": "accuracy", "nll": "NLL", "agreement": "agreement", "tv": "TV"}
    else:
        columns = {"rmse": "RMSE", "nll": "NLL", "rmse_vs_reference": "RMSE vs ref mean"}
    dataset = ref.config["arguments"]["dataset"]
    say(f"test set of {dataset} ({len(ref.targets)} rows); reference: {ref.path}")
    print(
        _table(
            ["run", "method", "draws", *columns.values()],
            [[r["run"], r["method"], str(r["draws"]), *(r[k] for k in columns)] for r in results],
        )
    )
    if ns.out:
        write_json(
            ns.out, {"reference": ref.path, "dataset": dataset, "task": ref.task, "runs": results}
        )
        say(f"wrote {ns.out}")
    return 0


# ----------------------------------------------------------------------------------- main
def main(argv: Sequence[str] | None = None) -> int:
    """Run ``bnn-ppl`` with ``argv`` (default ``sys.argv[1:]``); return the exit status.

    0 on success; 2 for a bad command line or input (the message on stderr, no traceback);
    130 when interrupted.
    """
    parser = build_parser()
    try:
        ns = parser.parse_args(argv)
    except SystemExit as e:  # --help, or argparse's own usage errors (already printed)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    try:
        return ns.handler(ns)
    except (InputError, OSError) as e:
        # the library's own checks (and files that cannot be read or written) are the user's
        # to fix: one line, no traceback; any other exception is a bug and shows its traceback
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted.", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

"""The ``bnn-ppl`` command line: fit a BNN, evaluate the run, compare runs.

Example:
    >>> from bnn_ppl.cli import main
    >>> main(["run", "svi", "--temperature", "0", "--out", "/tmp/never-written"])
    2
"""

# Notes:
#
# ::
#
#     bnn-ppl run hmc --dataset digits --prior normal:0.3 --out runs/hmc
#     bnn-ppl run ensemble --num-members 5 --out runs/ens
#     bnn-ppl run hmc --help               # HMC's options and the shared ones, nothing else
#     bnn-ppl evaluate runs/hmc            # metrics table, R-hat, reliability.png, rhat.png
#     bnn-ppl compare runs/hmc runs/ens    # agreement and total variation with the first run
#
# ``run`` takes the method as a subcommand, one per config class of :mod:`bnn_ppl.config` (hmc,
# nuts, svi, map, ensemble, sgld, sghmc, sgnht, atmc): the class's fields are its options, parsed
# by tyro (:mod:`~bnn_ppl.cli.parser`), next to the options every method shares
# (:class:`RunOptions`). ``run`` loads a data set (:func:`bnn_ppl.data.load`), builds a
# :class:`bnn_ppl.BNN` (network from ``--model``, prior from ``--prior`` through
# :func:`bnn_ppl.priors.from_string`, likelihood from the data set's task), runs
# :func:`bnn_ppl.fit` with the config and writes the run folder described in :mod:`bnn_ppl.runs`:
# ``config.json``, ``posterior.nc``, ``samples.npz``, ``predictions.npz`` and ``metrics.json``. The
# Markov-chain methods take ``--checkpoint-every k``: the run is committed to ``<out>/checkpoints``
# every k draws (SG-MCMC: cycles) per chain, a killed run resumes bit-exactly when started again
# with the same options, and a folder written with other options is refused, naming every option
# that differs (but ``--progress-every k``, a line of ``<out>/checkpoints/progress.jsonl`` every
# k draws, which a resume may change). The earlier spelling ``bnn-ppl run --method M`` is refused
# with the new one.
#
# Every option is checked before the run folder is claimed (:func:`run_settings`, then
# :func:`check_feasible` once the data and model are known: batch sizes, memory, float32 range,
# hmc trajectory length), so that a corrected command may reuse the folder.
#
# This package only translates: options become typed dataclasses that library functions take
# (they never see the parser), and the library's own input errors
# (:class:`bnn_ppl.validation.InputError`) and ``OSError`` become ``bnn-ppl: error: <message>`` on
# stderr with exit status 2, without a traceback. Any other exception is a bug and keeps its
# traceback. One module per job:
#
# * :mod:`~bnn_ppl.cli.settings`: the typed options, the run's settings and their checks
#   (:func:`run_settings`);
# * :mod:`~bnn_ppl.cli.parser`: the tyro parsers of the subcommands;
# * :mod:`~bnn_ppl.cli.build`: the data set and the :class:`bnn_ppl.BNN` of the settings;
# * :mod:`~bnn_ppl.cli.feasible`: what the data and machine allow (:func:`check_feasible`);
# * :mod:`~bnn_ppl.cli.run`: ``bnn-ppl run`` (the fit and the run folder);
# * :mod:`~bnn_ppl.cli.evaluate`: ``bnn-ppl evaluate`` and ``bnn-ppl compare``;
# * :mod:`~bnn_ppl.cli.console`: status lines and plain-text tables.
#
# tyro, JAX, NumPyro, ArviZ and matplotlib (and :mod:`bnn_ppl.runs`, which loads JAX) are imported
# inside the subcommands that use them, so that ``bnn-ppl --help``, ``bnn-ppl run --help`` and
# option errors stay fast (tests/test_imports.py checks that ``--help`` loads none of them).

from __future__ import annotations

import sys
from collections.abc import Sequence

import bnn_ppl as bp  # noqa: F401  (``cli.bp``: tests patch ``cli.bp.diagnostics`` through it)
from bnn_ppl.cli.build import build_model, choose_noise, inputs_for, load_data
from bnn_ppl.cli.feasible import (
    MAX_LEAPFROG_STEPS,
    MAX_LIKELIHOOD_SCALE,
    MEMORY_COPIES,
    check_feasible,
)
from bnn_ppl.cli.settings import (
    CHAIN_METHODS,
    CLI_DEFAULTS,
    CNN_MODELS,
    HELDOUT,
    HELDOUT_NOISE_METHODS,
    LEARNED_NOISE,
    MAX_COUNT,
    MAX_TREE_DEPTH,
    METHOD_HELP,
    METHODS,
    MODEL_OPTIONS,
    MODELS,
    PROG,
    SGMCMC_METHODS,
    TEMPER_MODES,
    ChainRunOptions,
    CLIError,
    Fit,
    RunOptions,
    RunSettings,
    default_noise,
    did_you_mean,
    run_settings,
)
from bnn_ppl.divergence import DivergedError as DivergedError
from bnn_ppl.validation import InputError
from bnn_ppl.validation import InputValueError as InputValueError

__all__ = [
    "main",
    "run_settings",
    "check_feasible",
    "load_data",
    "build_model",
    "choose_noise",
    "RunOptions",
    "ChainRunOptions",
    "RunSettings",
    "CLIError",
    "Fit",
    "inputs_for",
    "PROG",
    "MODELS",
    "METHODS",
    "SGMCMC_METHODS",
    "TEMPER_MODES",
    "CHAIN_METHODS",
    "CLI_DEFAULTS",
    "CNN_MODELS",
    "MODEL_OPTIONS",
    "LEARNED_NOISE",
    "HELDOUT_NOISE_METHODS",
    "default_noise",
    "HELDOUT",
    "MAX_COUNT",
    "MAX_TREE_DEPTH",
    "MAX_LEAPFROG_STEPS",
    "MAX_LIKELIHOOD_SCALE",
    "MEMORY_COPIES",
]

HELP = f"""usage: {PROG} COMMAND ...

Bayesian neural networks from the command line: fit (run), evaluate a run, compare runs.

commands:
  run METHOD   fit a BNN with one method and write a run folder ({PROG} run --help)
  evaluate     metrics, R-hat diagnostics and plots of a run
  compare      agreement and total variation between runs' BMAs

{PROG} COMMAND --help shows a command's options; {PROG} run METHOD --help a method's."""

RUN_HELP = (
    f"""usage: {PROG} run METHOD [OPTIONS] --out DIR

Fit a BNN on a data set with one inference method; write config.json, posterior.nc,
samples.npz, predictions.npz and metrics.json into --out.

methods:
"""
    + "\n".join(f"  {m:<13} {h}" for m, h in METHOD_HELP.items())
    + f"""

{PROG} run METHOD --help shows the method's options and the shared ones (data, model, prior,
--out, --seed, ...), with their defaults. Example:
  {PROG} run nuts --num-warmup 100 --num-samples 100 --out runs/nuts"""
)


def _dispatch(args: list[str]) -> int:
    helps = ("-h", "--help")
    if not args or args[0] in helps:
        print(HELP, file=sys.stdout if args else sys.stderr)
        return 0 if args else 2
    command, rest = args[0], args[1:]
    if command == "run" and (not rest or rest[0] in helps):
        print(RUN_HELP, file=sys.stdout if rest else sys.stderr)
        return 0 if rest else 2
    if command not in ("run", "evaluate", "compare"):
        hint = did_you_mean(command, ("run", "evaluate", "compare"))
        raise CLIError(
            f"unknown command {command!r}{hint or ';'} {PROG} takes run, evaluate or compare."
        )
    from bnn_ppl.cli import parser  # start-up time: tyro only once a subcommand is parsed

    parse = {"run": parser.parse_run, "evaluate": parser.parse_evaluate,
             "compare": parser.parse_compare}[command]  # fmt: skip
    options = parse(rest)  # (--help exits here)
    from bnn_ppl.cli import evaluate, run  # start-up time: JAX only once options are parsed

    if command == "run":
        return run.cmd_run(options)
    if command == "evaluate":
        return evaluate.cmd_evaluate(options)
    return evaluate.cmd_compare(options)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``bnn-ppl`` with ``argv`` (default ``sys.argv[1:]``); return the exit status.

    0 on success; 2 for a bad command line or input (the message on stderr, no traceback);
    130 when interrupted.
    """
    try:
        return _dispatch(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as e:  # --help, or the parser's own usage errors (already printed)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    except (InputError, OSError) as e:
        # the library's own checks (and files that cannot be read or written) are the user's
        # to fix: one line, no traceback; any other exception is a bug and shows its traceback
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted.", file=sys.stderr)
        return 130

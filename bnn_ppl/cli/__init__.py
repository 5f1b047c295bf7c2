"""The ``bnn-ppl`` command line: fit a BNN, evaluate the run, compare runs.

::

    bnn-ppl run --model mlp --dataset digits --method hmc --prior normal:0.3 --out runs/hmc
    bnn-ppl run --model mlp --dataset digits --method ensemble --members 5 --out runs/ens
    bnn-ppl evaluate runs/hmc            # metrics table, R-hat, reliability.png, rhat.png
    bnn-ppl compare runs/hmc runs/ens    # agreement and total variation with the first run

``run`` loads a data set (:func:`bnn_ppl.data.load`), builds a :class:`bnn_ppl.BNN` (network from
``--model``, prior from ``--prior`` through :func:`bnn_ppl.priors.from_string`, likelihood from
the data set's task), runs one method of :mod:`bnn_ppl.inference` and writes the run folder
described in :mod:`bnn_ppl.runs`: ``config.json``, ``posterior.nc``, ``samples.npz``,
``predictions.npz`` and ``metrics.json``, all through :func:`bnn_ppl.fit` (the options become
the method's config, :func:`method_config`). ``--method hmc``/``nuts``/``sgmcmc`` with
``--checkpoint-every k`` commit the run to ``<out>/checkpoints`` every k draws (sgmcmc: cycles)
per chain: a killed run resumes bit-exactly when started again with the same options, and a
folder written with other options is refused, naming every option that differs.

Every option is checked before the run folder is claimed (:func:`run_settings`, then
:func:`check_feasible` once the data and model are known: batch sizes, memory, float32 range,
hmc trajectory length), so that a corrected command may reuse the folder.

This package only translates: options become plain keyword arguments of library functions (which
never see argparse), and the library's own input errors (:class:`bnn_ppl.validation.InputError`)
and ``OSError`` become ``bnn-ppl: error: <message>`` on stderr with exit status 2, without a
traceback. Any other exception is a bug and keeps its traceback. One module per job:

* :mod:`~bnn_ppl.cli.parser`: the argparse parser (:func:`build_parser`);
* :mod:`~bnn_ppl.cli.settings`: which options apply to which method and network, their defaults
  and checks (:func:`run_settings`);
* :mod:`~bnn_ppl.cli.build`: the data set and the :class:`bnn_ppl.BNN` of the settings;
* :mod:`~bnn_ppl.cli.feasible`: what the data and machine allow (:func:`check_feasible`);
* :mod:`~bnn_ppl.cli.run`: ``bnn-ppl run`` (:func:`method_config`, the fit, the run folder);
* :mod:`~bnn_ppl.cli.evaluate`: ``bnn-ppl evaluate`` and ``bnn-ppl compare``;
* :mod:`~bnn_ppl.cli.console`: status lines and plain-text tables.

JAX, NumPyro, ArviZ and matplotlib (and :mod:`bnn_ppl.runs`, which loads JAX) are imported inside
the subcommands that use them, so that ``bnn-ppl --help`` and option errors stay fast
(tests/test_imports.py checks that ``--help`` loads none of them).

Example:
    >>> from bnn_ppl.cli import main
    >>> main(["run", "--model", "mlp", "--dataset", "digits", "--method", "svi",
    ...       "--temperature", "0", "--out", "/tmp/never-written"])
    2
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import bnn_ppl as bp  # noqa: F401  (``cli.bp``: tests patch ``cli.bp.diagnostics`` through it)
from bnn_ppl.cli.build import _inputs_for as _inputs_for
from bnn_ppl.cli.build import build_model, load_data
from bnn_ppl.cli.feasible import (
    MAX_LEAPFROG_STEPS,
    MAX_LIKELIHOOD_SCALE,
    MEMORY_COPIES,
    check_feasible,
)
from bnn_ppl.cli.parser import build_parser
from bnn_ppl.cli.run import Fit, method_config
from bnn_ppl.cli.settings import (
    CHAIN_METHODS,
    CNN_MODELS,
    MAX_COUNT,
    MAX_TREE_DEPTH,
    METHOD_OPTIONS,
    METHODS,
    MODEL_OPTIONS,
    MODELS,
    NOISE_DEFAULT,
    PROG,
    SAMPLERS,
    TEMPER_MODES,
    CLIError,
    run_settings,
)
from bnn_ppl.divergence import DivergedError as DivergedError
from bnn_ppl.validation import InputError
from bnn_ppl.validation import InputValueError as InputValueError

__all__ = [
    "main",
    "build_parser",
    "run_settings",
    "check_feasible",
    "method_config",
    "load_data",
    "build_model",
    "CLIError",
    "Fit",
    "PROG",
    "MODELS",
    "METHODS",
    "SAMPLERS",
    "TEMPER_MODES",
    "CHAIN_METHODS",
    "CNN_MODELS",
    "METHOD_OPTIONS",
    "MODEL_OPTIONS",
    "NOISE_DEFAULT",
    "MAX_COUNT",
    "MAX_TREE_DEPTH",
    "MAX_LEAPFROG_STEPS",
    "MAX_LIKELIHOOD_SCALE",
    "MEMORY_COPIES",
]


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

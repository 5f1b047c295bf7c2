"""The ``bnn-ppl`` option parser: ``run``, ``evaluate`` and ``compare`` with every option, its
help and the defaults that apply (the defaults of method and network options are resolved later,
by :func:`~bnn_ppl.cli.run_settings`, so that an option given to the wrong method is refused).

Example:
    >>> from bnn_ppl.cli import build_parser
    >>> ns = build_parser().parse_args(["run", "--method", "svi", "--out", "runs/svi"])
    >>> ns.method, ns.steps, ns.prior, ns.out
    ('svi', None, 'normal:0.3', 'runs/svi')
"""

from __future__ import annotations

import argparse

import bnn_ppl as bp
from bnn_ppl.cli.evaluate import _cmd_compare, _cmd_evaluate
from bnn_ppl.cli.run import _cmd_run
from bnn_ppl.cli.settings import METHODS, MODELS, NOISE_DEFAULT, PROG, SAMPLERS, TEMPER_MODES


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
        help="hmc/nuts: checkpoint every k draws per chain (sgmcmc: every k cycles) into "
        "<out>/checkpoints; a killed run resumes, bit for bit, when re-run with the same "
        "options (warmup is redone if it was killed during warmup; default: no checkpoints)",
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

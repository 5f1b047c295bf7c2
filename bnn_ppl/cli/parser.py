"""The ``bnn-ppl`` option parser: tyro reads the typed dataclasses, so the options are the fields.

Example:
    >>> from bnn_ppl.cli.parser import parse_run
    >>> s = parse_run(["svi", "--num-steps", "50", "--out", "runs/svi"])
    >>> s.method, s.config.num_steps, s.config.map_steps, s.options.prior, s.options.out
    ('svi', 50, 1000, 'normal:0.3', 'runs/svi')
"""

# Notes:
#
# ``bnn-ppl run METHOD`` parses the method's :mod:`bnn_ppl.config` dataclass (every field is an
# option: ``--num-warmup``, ``--num-members``, ...) and the shared :class:`~bnn_ppl.cli.RunOptions`
# (:class:`~bnn_ppl.cli.ChainRunOptions` with ``--checkpoint-every`` for the Markov-chain
# methods), so that ``bnn-ppl run hmc --help`` shows HMC's options and no other method's.
# ``evaluate`` and ``compare`` parse :class:`EvaluateOptions` and :class:`CompareOptions`.
#
# tyro is imported only here, and this module only once a subcommand is parsed: ``bnn-ppl --help``
# and ``bnn-ppl run --help`` are printed without it (:mod:`bnn_ppl.cli`). The configs' own checks
# run after parsing (:func:`~bnn_ppl.cli.run_settings`), so that a bad value is reported as
# ``bnn-ppl: error: --num-samples must be ...`` like every other input error.

from __future__ import annotations

import dataclasses
import functools
import re
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import tyro

from bnn_ppl import config as configs
from bnn_ppl.cli.settings import (
    CHAIN_METHODS,
    CLI_DEFAULTS,
    METHOD_HELP,
    METHODS,
    PROG,
    ChainRunOptions,
    CLIError,
    RunOptions,
    RunSettings,
    did_you_mean,
    flag,
    run_settings,
)

RENAMED = {
    "--method": "the method is a subcommand: bnn-ppl run {value} [OPTIONS]",
    "--sampler": "the sampler is the method: bnn-ppl run {value} [OPTIONS]",
    "--members": "use --num-members",
    "--steps": "use --num-steps",
    "--burnin-cycles": "use --num-warmup (burn-in cycles)",
}
"""Options of the earlier ``bnn-ppl run --method M`` and what replaced them."""

_STYLE = (tyro.conf.OmitArgPrefixes,)  # the options are the bare field names


@dataclass(frozen=True)
class EvaluateOptions:
    """Print a run's test metrics (of the BMA, and per chain), weight- and function-space R-hat
    (with >= 2 chains), and write reliability.png, rhat.png and evaluation.json.

    The run folder is locked while it is read and written: a folder that a running
    `bnn-ppl run` (or another evaluate) holds is refused at once, naming the holder's process
    id, and nothing is read or written; wait for it to finish and evaluate again."""

    run: tyro.conf.Positional[str]  # a run folder (the --out of bnn-ppl run)
    num_bins: int = 15  # reliability diagram bins
    out: str | None = None  # folder for evaluation.json and the plots (None: the run folder)
    quiet: bool = False  # only the tables


@dataclass(frozen=True)
class CompareOptions:
    """Compare the Bayesian model averages of runs on the same test set: each run's accuracy and
    NLL (RMSE and NLL for regression), and its top-1 agreement and total variation with the
    first run (RMSE between BMA means for regression)."""

    runs: tyro.conf.Positional[tuple[str, ...]]  # run folders; the first is the reference
    out: str | None = None  # write the table as JSON to this file
    quiet: bool = False  # only the table


_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")  # :func:`~a.b.c` (the text shown: c), :class:`X`
_LITERAL = re.compile(r"``([^`]+)``")


def plain_text(text: str | None) -> str | None:
    """Docstring text without reStructuredText markup, for ``--help``.

    >>> plain_text("a :func:`bnn_ppl.fit` of ``map_steps`` (:class:`~bnn_ppl.config.MAPConfig`)")
    'a bnn_ppl.fit of map_steps (MAPConfig)'
    """
    if text is None:
        return None

    def role(m: re.Match) -> str:
        shown = m.group(1)
        return shown.rsplit(".", 1)[-1] if m.group(0).split("`")[1].startswith("~") else shown

    return _LITERAL.sub(r"\1", _ROLE.sub(role, text))


PROGRESS_HINT = "(default: on when stderr is a terminal and CI is not set)"


def one_chain_options(cls: type) -> tuple[str, ...]:
    """The fields of a config that mean nothing for a method fitting one set of weights (no
    chains, no members): left out of its options."""
    return () if getattr(cls, "several_chains", True) else ("chain_batching",)


def _for_tyro(cls: type) -> type:
    """``cls`` as tyro should read it: its checks deferred to
    :func:`~bnn_ppl.cli.run_settings` (tyro would print a config's own ValueError in a box of
    its own, without naming the option), ``X | None`` spelt ``Optional[X]`` (tyro checks
    the defaults of ``types.UnionType`` fields through typeguard, whose import alone doubles the
    time of ``--help``; see benchmarks/import_time.py), its docstring without reStructuredText
    markup, the chain options of a one-chain method hidden, and ``progress`` (None: decided at
    run time) a ``--progress/--no-progress`` flag pair (:func:`parse_run` tells whether either
    was given)."""
    hints = typing.get_type_hints(cls)
    body: dict[str, Any] = {
        "__post_init__": lambda self: None,
        "__doc__": plain_text(cls.__doc__),
        "__module__": cls.__module__,  # where tyro reads the fields' comments (the help)
        "__qualname__": cls.__qualname__,
        "__annotations__": {},
    }
    hidden = one_chain_options(cls)
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        if f.name == "progress":
            body["__annotations__"][f.name] = typing.Annotated[
                bool, tyro.conf.arg(help_behavior_hint=PROGRESS_HINT)
            ]
            body[f.name] = False
        elif f.name in hidden:
            body["__annotations__"][f.name] = typing.Annotated[hint, tyro.conf.Suppress]
            body[f.name] = f.default
        elif isinstance(hint, types.UnionType):
            body["__annotations__"][f.name] = typing.Union[hint.__args__]  # noqa: UP007
            body[f.name] = f.default
    return dataclass(frozen=True)(type(cls.__name__, (cls,), body))


@functools.cache
def command_type(method: str) -> type:
    """The dataclass tyro parses for ``bnn-ppl run METHOD``: ``run`` (the shared options) and
    the method's config under its name, with ``bnn-ppl run``'s defaults."""
    if method not in METHODS:
        raise CLIError(
            f"bnn-ppl run takes a method, one of {', '.join(METHODS)}; got {method!r}"
            + (did_you_mean(method, METHODS) or ".")
        )
    config = _for_tyro(configs.CONFIGS[method])
    shared = _for_tyro(ChainRunOptions if method in CHAIN_METHODS else RunOptions)
    fields: list[Any] = [
        ("run", shared),
        (method, config, dataclasses.field(default=config(**CLI_DEFAULTS[method]))),
    ]
    command = dataclasses.make_dataclass(f"{method}_command", fields, frozen=True)
    command.__doc__ = f"bnn-ppl run {method}: {METHOD_HELP[method]}; write the run folder --out."
    return command


def _refuse_old_spellings(args: Sequence[str]) -> None:
    for i, arg in enumerate(args):
        name, _, value = arg.partition("=")
        if name in RENAMED:
            value = value or (args[i + 1] if i + 1 < len(args) else "METHOD")
            raise CLIError(f"{name} is gone: {RENAMED[name].format(value=value)}.")


def _options(method: str) -> set[str]:
    shared = ChainRunOptions if method in CHAIN_METHODS else RunOptions
    config = configs.CONFIGS[method]
    hidden = one_chain_options(config)
    names = [f.name for c in (shared, config) for f in dataclasses.fields(c)
             if f.name not in hidden]  # fmt: skip
    return {flag(n) for n in names} | {flag("no_" + n) for n in names}


def _refuse_options_of_other_methods(method: str, args: Sequence[str]) -> None:
    own = _options(method)
    for arg in args:
        name = arg.partition("=")[0]
        if name.startswith("--") and name not in own:
            others = [m for m in METHODS if name in _options(m)]
            if others:
                raise CLIError(
                    f"{name} does not apply to bnn-ppl run {method}; it applies to "
                    f"{'/'.join(others)} (see bnn-ppl run {method} --help)."
                )


def parse_run(args: Sequence[str]) -> RunSettings:
    """``bnn-ppl run METHOD [OPTIONS]`` (``args`` after ``run``) -> the checked settings."""
    _refuse_old_spellings(args)
    method, rest = args[0], list(args[1:])
    command = command_type(method)
    _refuse_options_of_other_methods(method, rest)
    ns = tyro.cli(command, prog=f"{PROG} run {method}", args=rest, config=_STYLE)
    fields = dataclasses.asdict(getattr(ns, method))
    given = any(a == "--batch-size" or a.startswith("--batch-size=") for a in rest)
    shared = ns.run
    if not any(a in ("--progress", "--no-progress") for a in rest):  # decided when it runs
        shared = dataclasses.replace(shared, progress=None)
    return run_settings(method, shared, fields, batch_size_given=given)


def parse_evaluate(args: Sequence[str]) -> EvaluateOptions:
    """``bnn-ppl evaluate RUN [OPTIONS]``."""
    return tyro.cli(EvaluateOptions, prog=f"{PROG} evaluate", args=list(args), config=_STYLE)


def parse_compare(args: Sequence[str]) -> CompareOptions:
    """``bnn-ppl compare RUN RUN... [OPTIONS]``."""
    return tyro.cli(CompareOptions, prog=f"{PROG} compare", args=list(args), config=_STYLE)

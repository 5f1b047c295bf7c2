"""``bnn-ppl run``'s settings: which options apply to which method and network, their defaults,
and :func:`run_settings`, the checks that need no data (ranges, int32 counters, the prior).

A run's settings are a plain dict, option name -> value, with the defaults of the chosen method
and network filled in: what ``config.json`` records and what a resumed run must repeat. An option
that belongs to another method or network is refused, naming the ones it applies to.

Example:
    >>> from bnn_ppl.cli import run_settings
    >>> s = run_settings({"method": "nuts", "model": "mlp", "dataset": "digits",
    ...                   "prior": "normal:0.3", "temperature": 1.0, "temper": "likelihood",
    ...                   "seed": 0})
    >>> s["num_chains"], s["max_tree_depth"], s["width"], s["depth"]
    (2, 10, 50, 1)
    >>> run_settings({**s, "members": 5})
    Traceback (most recent call last):
    ...
    bnn_ppl.validation.InputValueError: --members does not apply to --method nuts; ...
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import bnn_ppl as bp
from bnn_ppl import validation
from bnn_ppl.validation import InputError, InputValueError

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
    "checkpoint_every": {"hmc": None, "nuts": None, "sgmcmc": None},
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


class CLIError(InputValueError):
    """A bad command line that the library itself would not catch (printed without traceback)."""


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


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

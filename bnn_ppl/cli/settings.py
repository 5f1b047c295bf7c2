"""``bnn-ppl run``'s typed settings: the options every method shares (:class:`RunOptions`), the
method's :mod:`bnn_ppl.config` dataclass, and :func:`run_settings`, the checks that need no data
(ranges, int32 counters, the prior), which resolves the network's defaults.
"""

# Notes:
#
# A run's settings are a :class:`RunSettings`: the shared options and the method's config. What
# ``config.json`` records and a resumed run must repeat is :meth:`RunSettings.arguments`, one flat
# JSON record from which :meth:`RunSettings.from_arguments` rebuilds them; ``--progress-every`` is
# not in it (it only respaces ``progress.jsonl``, so a resume may change it). This module imports
# neither tyro nor JAX: the option parser (:mod:`bnn_ppl.cli.parser`) is built from these classes
# only when a subcommand is parsed.

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import bnn_ppl as bp
from bnn_ppl import config as configs
from bnn_ppl import validation
from bnn_ppl.config import BURN_IN_CAP
from bnn_ppl.validation import InputError, InputValueError

PROG = "bnn-ppl"
MODELS = ("mlp", "lenet5", "resnet20frn", "resnetpp", "cnnlstm")
SGMCMC_METHODS = ("sgld", "sghmc", "sgnht", "atmc")
METHODS = ("hmc", "nuts", "svi", "map", "ensemble", *SGMCMC_METHODS, "reference_hmc")
"""The subcommands of ``bnn-ppl run``: one per config class of :mod:`bnn_ppl.config`."""
BUDGET_FIELDS = ("max_draws", "max_seconds", "max_rhat", "min_share", "min_ess", "quantity",
                 "burn_in", "confirm_segments")  # fmt: skip
"""reference_hmc: the options a rerun in the same ``--out`` may change (the budget, the
stopping rule and the checked values; the draws do not depend on them): it continues the
committed chains."""
TEMPER_MODES = ("likelihood", "posterior")
CHAIN_METHODS = ("hmc", "nuts", *SGMCMC_METHODS)
"""Methods whose draws are Markov chains (stored with a chain axis; ``--checkpoint-every``)."""

CLI_DEFAULTS: dict[str, dict[str, Any]] = {
    "hmc": {"num_chains": 2},
    "nuts": {"num_chains": 2},
    "svi": {"num_steps": 3000, "map_steps": 1000},
    "map": {},
    "ensemble": {"num_steps": 1000},
    **{m: {"num_chains": 2, "cycle_length": 500} for m in SGMCMC_METHODS},
    "reference_hmc": {},
}
"""Where ``bnn-ppl run`` starts from other defaults than the config classes: two chains (so that
``evaluate`` can compute R-hat), MAP-initialised SVI, shorter SG-MCMC cycles. ``--help`` shows
the defaults that apply."""

METHOD_HELP: dict[str, str] = {
    "hmc": "full-batch HMC, step size and mass matrix adapted in warmup",
    "nuts": "the No-U-Turn sampler",
    "svi": "mean-field Gaussian SVI, started from a MAP estimate",
    "map": "a MAP estimate by Adam (one draw)",
    "ensemble": "a deep ensemble of MAP solutions",
    "sgld": "stochastic-gradient Langevin dynamics, cyclical step size",
    "sghmc": "stochastic-gradient HMC, cyclical step size",
    "sgnht": "the stochastic-gradient Nose-Hoover thermostat, cyclical step size",
    "atmc": "adaptive thermostat Monte Carlo, cyclical step size",
    "reference_hmc": "HMC until the test predictions converge (R-hat and bulk ESS rule), "
    "every segment committed: rerun to resume or to continue with a larger budget",
}
"""One line per method: ``bnn-ppl run --help`` and each method's ``--help``."""

MODEL_OPTIONS: dict[str, dict[str, int]] = {
    "width": {"mlp": 50, "resnet20frn": 16, "resnetpp": 32},
    "depth": {"mlp": 1, "resnet20frn": 3, "resnetpp": 9},
}
"""Option -> the networks it applies to, with each network's default."""

LEARNED_NOISE = "halfnormal:1"
"""Regression's default ``--noise``: the noise sd learned, HalfNormal(1) on the standardised
targets."""
HELDOUT = "heldout"
"""``--noise heldout``: the fixed noise sd chosen from the training rows alone
(:func:`bnn_ppl.inference.heldout_noise`: their 5-fold cross-validated MAP RMSE to one
significant figure)."""
HELDOUT_NOISE_METHODS = ("map", "ensemble", *SGMCMC_METHODS)
"""The methods whose default ``--noise`` is ``heldout``: a point estimate's learned noise sd
shrinks towards 0 as the network fits the training rows, and the SG-MCMC samplers, started at
such a MAP estimate, sample a learned sd below the posterior's in their default runs (too
narrow a predictive)."""
CNN_MODELS = ("lenet5", "resnet20frn", "resnetpp")
MAX_COUNT = 2**31 - 1
"""Largest count or iteration total: NumPyro's and our loops count iterations in int32."""
MAX_TREE_DEPTH = 30
"""nuts: deepest tree whose 2^D - 1 leapfrog steps NumPyro's int32 counters hold."""
_AT_LEAST = {"width": 1, "max_train": 1, "split": 0, "checkpoint_every": 1, "progress_every": 1}
UNRECORDED = ("out", "data_dir", "quiet", "progress", "progress_every", "cache_dir")
"""Options :meth:`RunSettings.arguments` leaves out: a resumed run may give them differently."""


class CLIError(InputValueError):
    """A bad command line that the library itself would not catch (printed without traceback)."""


def did_you_mean(word: str, choices: Sequence[str]) -> str:
    """``"; did you mean 'nuts'?"`` for a close choice, else ``""``.

    >>> did_you_mean("nust", ("hmc", "nuts", "svi"))
    "; did you mean 'nuts'?"
    """
    import difflib

    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def flag(name: str) -> str:
    """``"num_samples"`` -> ``"--num-samples"``: the option of a field."""
    return "--" + name.replace("_", "-")


@dataclass(frozen=True)
class RunOptions:
    """Options every method shares: the data, the model and the run folder.

    Example:
        >>> from bnn_ppl.cli import RunOptions, run_settings
        >>> s = run_settings("nuts", RunOptions(out="runs/nuts"), {"num_chains": 2})
        >>> s.config.num_chains, s.config.max_tree_depth, s.options.width, s.options.depth
        (2, 10, 50, 1)
        >>> run_settings("nuts", RunOptions(out="runs/nuts", model="lenet5", width=4), {})
        Traceback (most recent call last):
        ...
        bnn_ppl.validation.InputValueError: --width does not apply to --model lenet5; ...
    """

    out: str  # run folder: config.json, posterior.nc (ArviZ), samples.npz, predictions.npz, ...
    dataset: str = "digits"  # a name of bnn_ppl.data.available()
    data_dir: str | None = None  # where uci/* and tfds data sets are read from
    split: int | None = None  # uci/*: which standard split
    max_train: int | None = None  # use only the first k training rows
    model: Literal["mlp", "lenet5", "resnet20frn", "resnetpp", "cnnlstm"] = "mlp"  # network
    width: int | None = None  # mlp: hidden units (50); resnet20frn/resnetpp: base width (16/32)
    depth: int | None = None  # mlp: hidden layers, 0: linear (1); resnets: blocks/stage (3/9)
    prior: str = "normal:0.3"  # family:args[,fan_in], e.g. laplace:0.1, student_t:3,0.1
    temperature: float = 1.0  # T > 0; T < 1 is a cold posterior
    temper: Literal["likelihood", "posterior"] = "likelihood"  # what 1/T scales
    # regression sd: a prior (halfnormal:S, the hmc/nuts/svi default; halfcauchy:S,
    # lognormal:LOC,SCALE, inversegamma:A,B), fixed (0.5) or heldout
    noise: str | None = None
    seed: int = 0  # random seed; the data split is fixed
    quiet: bool = False  # print nothing on success (errors still go to stderr)
    progress: bool | None = None  # live progress bars on stderr
    cache_dir: str | None = None  # compiled programs: a folder or "off" ($BNN_PPL_CACHE_DIR)


@dataclass(frozen=True)
class ChainRunOptions(RunOptions):
    """The shared options, and checkpoints for the methods whose draws are Markov chains."""

    checkpoint_every: int | None = None  # commit every k draws (SG-MCMC: cycles); rerun resumes
    progress_every: int | None = None  # with --checkpoint-every: progress line every k draws


@dataclass(frozen=True)
class RunSettings:
    """A checked run: the shared ``options`` and the method's ``config``. ``batch_size_given``
    is False when an SG-MCMC run took the default minibatch (then at most the training rows)."""

    options: RunOptions
    config: configs.Config
    batch_size_given: bool = True

    @property
    def method(self) -> str:
        return self.config.method

    @property
    def checkpoint_every(self) -> int | None:
        return getattr(self.options, "checkpoint_every", None)

    @property
    def progress_every(self) -> int | None:
        return getattr(self.options, "progress_every", None)

    def arguments(self) -> dict[str, Any]:
        """What ``config.json`` records (and a resumed run must repeat): the options but the
        :data:`UNRECORDED` ones (paths, ``quiet``, ``progress``, ``progress_every``,
        ``cache_dir``), and the config's fields."""
        shared = dataclasses.asdict(self.options)
        for name in UNRECORDED:
            shared.pop(name, None)
        return {**shared, **self.config.to_dict()}

    @classmethod
    def from_arguments(cls, record: Mapping[str, Any], **paths: Any) -> RunSettings:
        """The settings :meth:`arguments` recorded (``paths``: ``out``, ``data_dir``)."""
        record = dict(record)
        chain = record["method"] in CHAIN_METHODS
        kind = ChainRunOptions if chain else RunOptions
        names = {f.name for f in dataclasses.fields(kind)}
        shared = {k: record.pop(k) for k in list(record) if k in names and k != "method"}
        options = kind(**{"out": "", **paths, **shared})
        return cls(options, configs.from_dict(record))


def _checked_config(method: str, fields: Mapping[str, Any]) -> configs.Config:
    """The method's config; its own check, restated with the option's name (``--num-samples``)."""
    try:
        return configs.CONFIGS[method](**fields)
    except InputError as e:
        text = str(e)
        name = re.match(r"\w+", text)
        if name and name.group() in fields:
            text = flag(name.group()) + text[name.end() :]
        raise type(e)(text) from None


def run_settings(
    method: str, options: RunOptions, fields: Mapping[str, Any], *, batch_size_given: bool = True
) -> RunSettings:
    """Check ``bnn-ppl run``'s options; resolve the defaults of the chosen network.

    Args:
        method: one of :data:`METHODS`.
        options: the shared options.
        fields: the method's config fields (the :data:`CLI_DEFAULTS` are applied first).
        batch_size_given: see :class:`RunSettings`.

    Raises:
        ValueError: a number out of range (naming the option), an option that does not apply
            to the network, an unknown prior family or malformed prior arguments.
    """
    validation.check_choice("the method", method, METHODS)
    config = _checked_config(method, {**CLI_DEFAULTS[method], **fields})
    model = options.model
    validation.check_choice("--model", model, MODELS)
    validation.check_choice("--temper", options.temper, TEMPER_MODES)
    resolved: dict[str, Any] = {}
    for name, defaults in MODEL_OPTIONS.items():
        value = getattr(options, name)
        if model in defaults:
            resolved[name] = defaults[model] if value is None else value
        elif value is not None:
            raise InputValueError(
                f"{flag(name)} does not apply to --model {model}; it applies to --model "
                f"{'/'.join(defaults)}."
            )
    options = dataclasses.replace(
        options,
        temperature=validation.check_positive("--temperature", options.temperature),
        **resolved,
    )
    counts = {n: getattr(options, n, None) for n in _AT_LEAST}
    counts.update({k: v for k, v in dataclasses.asdict(config).items() if type(v) is int})
    for name, value in counts.items():
        if value is not None and name in _AT_LEAST and value < _AT_LEAST[name]:
            low = _AT_LEAST[name]
            raise InputValueError(f"{flag(name)} must be an integer >= {low}, got {value}.")
        if value is not None and value > MAX_COUNT:
            raise InputValueError(
                f"{flag(name)} {value} is above {MAX_COUNT}, the largest count the samplers' "
                "int32 iteration counters hold."
            )
    _check_iterations(config)
    chain = {n: getattr(options, n, None) for n in ("checkpoint_every", "progress_every")}
    if chain["progress_every"] is not None and chain["checkpoint_every"] is None:
        raise InputValueError(
            "--progress-every needs --checkpoint-every: its lines go to <out>/checkpoints/"
            "progress.jsonl as the checkpointed run goes (without checkpoints the run folder's "
            "progress.jsonl is written once, at the end)."
        )
    depth = options.depth
    if depth is not None and depth < (0 if model == "mlp" else 1):
        raise InputValueError(
            f"--depth must be an integer >= {0 if model == 'mlp' else 1} for --model {model}, "
            f"got {depth}."
        )
    seed = options.seed
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
        # jax.random.key maps larger seeds onto the same key (no error): refuse them
        raise InputValueError(f"--seed must be an integer in [0, 2**32), got {options.seed!r}.")
    if options.noise is not None:
        parse_noise(options.noise)
    try:
        bp.priors.from_string(options.prior)
    except InputError as e:
        raise InputValueError(f"--prior {options.prior!r}: {e}") from None
    return RunSettings(options, config, batch_size_given)


def _check_iterations(c: configs.Config) -> None:
    """Refuse iteration totals beyond the int32 counters of the samplers' loops, and NUTS
    trees whose leapfrog steps they cannot count."""
    if isinstance(c, configs.NUTSConfig) and c.max_tree_depth > MAX_TREE_DEPTH:
        raise InputValueError(
            f"--max-tree-depth {c.max_tree_depth} is above {MAX_TREE_DEPTH}: a tree of depth D "
            "takes up to 2^D - 1 leapfrog steps, which NumPyro counts in int32 (the default, "
            "10, allows 1,023)."
        )
    if isinstance(c, (configs.HMCConfig, configs.NUTSConfig)):
        total, what = c.num_warmup + c.num_samples, "--num-warmup + --num-samples"
    elif isinstance(c, configs.ReferenceHMCConfig):
        total, what = c.num_warmup + c.max_draws, "--num-warmup + --max-draws"
    elif c.method in SGMCMC_METHODS:
        burn = BURN_IN_CAP if c.num_warmup is None else c.num_warmup  # type: ignore[attr-defined]
        total = (burn + c.num_samples) * c.cycle_length  # type: ignore[attr-defined]
        what = "(--num-warmup + --num-samples) x --cycle-length"
        if c.num_warmup is None:  # type: ignore[attr-defined]
            what = (
                f"(automatic --num-warmup, at most {BURN_IN_CAP}, + --num-samples) x --cycle-length"
            )
    else:
        return
    if total > MAX_COUNT:
        raise InputValueError(
            f"{what} = {total} iterations is above {MAX_COUNT}, the most the samplers' int32 "
            "iteration counters hold."
        )


def default_noise(method: str) -> str:
    """``--noise`` when a regression run does not give it: the noise sd learned
    (:data:`LEARNED_NOISE`) by the methods that sample or approximate a posterior, ``heldout``
    for :data:`HELDOUT_NOISE_METHODS`."""
    return HELDOUT if method in HELDOUT_NOISE_METHODS else LEARNED_NOISE


NOISE_PRIORS: dict[str, tuple[str, tuple[str, ...]]] = {
    "halfnormal": ("HalfNormal", ("scale",)),
    "halfcauchy": ("HalfCauchy", ("scale",)),
    "lognormal": ("LogNormal", ("loc", "scale")),
    "inversegamma": ("InverseGamma", ("concentration", "rate")),
}
"""``--noise FAMILY:ARGS``: the priors on the noise sd, each NumPyro's distribution of that name
with its parameters in order (``LogNormal``'s are those of log sd)."""

NOISE_PRIOR_FORMS = ", ".join(
    f"'{family}:{','.join(a.upper() for a in args)}'" for family, (_, args) in NOISE_PRIORS.items()
)
"""The ``FAMILY:ARGS`` forms of :data:`NOISE_PRIORS`, as messages list them."""


def parse_noise(text: str) -> float | tuple[str, tuple[float, ...]] | str:
    """``"0.5"`` -> 0.5 (fixed noise); ``"halfnormal:1"`` -> ``("halfnormal", (1.0,))``, or any
    prior of :data:`NOISE_PRIORS` (``"lognormal:-3,0.5"`` -> ``("lognormal", (-3.0, 0.5))``);
    ``"heldout"`` -> ``"heldout"`` (a fixed noise sd chosen from the training rows).

    Example:
        >>> parse_noise("inversegamma:3,0.05")
        ('inversegamma', (3.0, 0.05))
    """
    if str(text).strip().lower() == HELDOUT:
        return HELDOUT
    family, sep, arg = str(text).partition(":")
    family = family.strip().lower().replace("_", "")
    try:
        values = [float(v) for v in (arg if sep else family).split(",")]
    except ValueError:
        values = None
    names = NOISE_PRIORS.get(family, ("", ()))[1] if sep else ("sd",)
    if values is None or not names or len(values) != len(names):
        raise InputValueError(
            f"--noise must be a positive number (the fixed noise sd of the standardised targets), "
            f"a prior on it ({NOISE_PRIOR_FORMS}) or 'heldout' (fixed at the training rows' "
            f"5-fold held-out MAP RMSE), got {text!r}."
        )
    if not sep:
        return validation.check_positive("--noise", values[0])
    checked = tuple(
        validation.check_number(f"--noise {family} {name}", v)
        if name == "loc"
        else validation.check_positive(f"--noise {family} {name}", v)
        for name, v in zip(names, values, strict=True)
    )
    return family, checked


def noise_prior(family: str, args: Sequence[float]) -> Any:
    """The NumPyro distribution of a parsed ``--noise`` prior (:func:`parse_noise`)."""
    import numpyro.distributions as dist  # start-up time: only when a model is built

    return getattr(dist, NOISE_PRIORS[family][0])(*args)


class Fit(NamedTuple):
    """What ``bnn-ppl run`` fitted: the :class:`~bnn_ppl.Posterior` (the run folder's files
    are written from it by :func:`bnn_ppl.runs.save_posterior`) and a JSON-able summary."""

    posterior: Any
    summary: dict[str, Any]

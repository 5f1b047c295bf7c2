"""Typed settings of every inference method: one small frozen dataclass per method."""

# Notes:
#
# :func:`bnn_ppl.inference.fit` takes one of these and returns a :class:`~bnn_ppl.Posterior`
# whose ``config`` is :meth:`Config.to_dict` of it, so a run is described by one JSON-able
# record and
# :func:`from_dict` rebuilds the dataclass from it. Every value is checked when the dataclass is
# built (an :class:`~bnn_ppl.InputError` naming the field), so a bad setting fails before anything
# is compiled. The module imports nothing heavy (no JAX), so a command line can build its options
# from these classes cheaply.
#
# One name per concept: ``num_samples`` (draws per chain, or cycles for SG-MCMC), ``num_steps``
# (optimiser steps), ``num_members`` (ensemble size), ``batch_size`` (minibatch rows; ``None`` is
# the full batch), ``chunk_size`` (rows per chunk of the full-batch potential).

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np

from bnn_ppl import validation
from bnn_ppl.validation import InputTypeError, InputValueError

__all__ = [
    "ATMCConfig",
    "CONFIGS",
    "Config",
    "EnsembleConfig",
    "HMCConfig",
    "MAPConfig",
    "MCMCConfig",
    "NUTSConfig",
    "ReferenceHMCConfig",
    "SGHMCConfig",
    "SGLDConfig",
    "SGMCMCConfig",
    "SGNHTConfig",
    "SVIConfig",
    "from_dict",
]

INIT_METHODS = ("prior", "median", "uniform")
QUANTITIES = ("probs", "p_true", "centred_logits", "mean", "mean_log_density")
"""The function-space quantities (:data:`bnn_ppl.diagnostics.function_values.QUANTITIES`, without
JAX)."""
MASS_MATRICES = ("diagonal", "dense", "identity")
CHAIN_BATCHING = ("auto", "vectorized", "sequential")
"""How vectorized chains evaluate the network
(:data:`bnn_ppl.inference.potential.sharded_sum.CHAIN_BATCHING`,
without JAX)."""


def _count(name: str, value: Any, minimum: int = 1) -> None:
    validation.check_int(name, value, minimum=minimum)


def _optional_count(name: str, value: Any) -> None:
    if value is not None:
        validation.check_int(name, value)


def _optional_positive(name: str, value: Any) -> None:
    if value is not None:
        validation.check_positive(name, value)


@dataclass(frozen=True)
class Config:
    """Fields every method shares: ``chunk_size`` of the full-batch potential,
    ``init_method`` (NumPyro's init strategy for the starting point: ``"prior"``,
    ``"median"`` or ``"uniform"``) and ``chain_batching`` (how several chains or ensemble
    members evaluate the network, :func:`~bnn_ppl.inference.full_batch_potential`; a method
    fitting one set of weights, ``several_chains = False``, refuses a forced value)."""

    method: ClassVar[str] = ""
    several_chains: ClassVar[bool] = True  # chains or members evaluated at once

    chunk_size: int | Literal["auto"] | None = None  # rows per network call (None: the library's)
    init_method: str = "prior"  # start: prior, median or uniform
    chain_batching: str = "auto"  # chains' network calls: auto, vectorized or sequential

    def __post_init__(self) -> None:
        validation.check_chunk_size(self.chunk_size)
        validation.check_choice("init_method", self.init_method, INIT_METHODS)
        validation.check_choice("chain_batching", self.chain_batching, CHAIN_BATCHING)
        if not self.several_chains and self.chain_batching != "auto":
            raise InputValueError(
                f"chain_batching={self.chain_batching!r} does nothing for {self.method}, which "
                "fits one set of weights: leave it at 'auto' (it applies to hmc, nuts, "
                "ensemble, the SG-MCMC methods and reference_hmc)."
            )

    def to_dict(self) -> dict[str, Any]:
        """The fields and ``"method"``, JSON-able."""
        return {"method": self.method, **dataclasses.asdict(self)}

    @classmethod
    def from_options(cls, options: Mapping[str, Any], **overrides: Any) -> Config:
        """The config from a script's options: every entry of ``options`` that names one of
        this config's fields (the rest are ignored), then ``overrides`` (which must be fields).

        Example:
            >>> opts = {"num_warmup": 10, "num_samples": 20, "width": 50, "seed": 0}
            >>> c = HMCConfig.from_options(opts, num_chains=2, num_samples=5)
            >>> c.num_warmup, c.num_samples, c.num_chains
            (10, 5, 2)
        """
        if not isinstance(options, Mapping):
            raise InputTypeError(f"options must be a mapping, got {type(options).__name__}.")
        known = _fields(cls, overrides)
        return cls(**{k: v for k, v in options.items() if k in known} | overrides)


@dataclass(frozen=True)
class MCMCConfig(Config):
    """Shared by HMC and NUTS: warmup, draws, chains, the step size and the mass matrix
    (``mass_matrix``: ``"diagonal"`` or ``"dense"`` adapted in warmup, ``"identity"`` fixed)."""

    num_warmup: int = 200  # warmup iterations per chain
    num_samples: int = 200  # draws per chain
    num_chains: int = 1  # chains, vectorised
    thinning: int = 1  # keep every k-th draw
    step_size: float = 0.01  # initial step size
    mass_matrix: str = "diagonal"  # diagonal or dense (adapted in warmup), or identity
    target_accept_prob: float = 0.8  # step-size adaptation target

    def __post_init__(self) -> None:
        super().__post_init__()
        _count("num_warmup", self.num_warmup, minimum=0)
        for name in ("num_samples", "num_chains", "thinning"):
            _count(name, getattr(self, name))
        validation.check_positive("step_size", self.step_size)
        validation.check_choice("mass_matrix", self.mass_matrix, MASS_MATRICES)
        validation.check_number(
            "target_accept_prob",
            self.target_accept_prob,
            low=0.0,
            high=1.0,
            low_inclusive=False,
            high_inclusive=False,
        )


@dataclass(frozen=True)
class HMCConfig(MCMCConfig):
    """Full-batch HMC (``bp.fit`` with this config): ``trajectory_length=None`` is a quarter
    period in the current metric; ``max_num_steps`` bounds the leapfrog steps.

    Example:
        >>> from bnn_ppl.config import HMCConfig, from_dict
        >>> c = HMCConfig(num_warmup=10, num_samples=20, num_chains=2)
        >>> c.method, c.to_dict()["num_chains"]
        ('hmc', 2)
        >>> from_dict(c.to_dict()) == c
        True
        >>> HMCConfig(num_samples=0)
        Traceback (most recent call last):
        ...
        bnn_ppl.validation.InputValueError: num_samples must be an int >= 1, got 0.
    """

    method: ClassVar[str] = "hmc"

    trajectory_length: float | None = None  # None: (pi/2) x prior sd
    adapt_step_size: bool = True  # adapt the step size in warmup
    max_num_steps: int = 1024  # most leapfrog steps per iteration

    def __post_init__(self) -> None:
        super().__post_init__()
        _optional_positive("trajectory_length", self.trajectory_length)
        validation.check_bool("adapt_step_size", self.adapt_step_size)
        _count("max_num_steps", self.max_num_steps)


@dataclass(frozen=True)
class NUTSConfig(MCMCConfig):
    """NUTS (``bp.fit`` with this config) with trees of depth at most ``max_tree_depth``."""

    method: ClassVar[str] = "nuts"

    max_tree_depth: int = 10  # trees of at most 2^D - 1 steps

    def __post_init__(self) -> None:
        super().__post_init__()
        _count("max_tree_depth", self.max_tree_depth)


@dataclass(frozen=True)
class MAPConfig(Config):
    """A MAP estimate by Adam (:func:`bnn_ppl.inference.map_estimate`): one chain, one draw."""

    method: ClassVar[str] = "map"
    several_chains: ClassVar[bool] = False

    num_steps: int = 2000  # Adam steps
    learning_rate: float = 0.01  # Adam learning rate
    batch_size: int | None = None  # minibatch rows (None: all)

    def __post_init__(self) -> None:
        super().__post_init__()
        _count("num_steps", self.num_steps)
        validation.check_positive("learning_rate", self.learning_rate)
        _optional_count("batch_size", self.batch_size)


@dataclass(frozen=True)
class EnsembleConfig(MAPConfig):
    """A deep ensemble of ``num_members`` MAP solutions from independent starting points
    (:func:`bnn_ppl.inference.deep_ensemble`): the members are the chains, one draw each."""

    method: ClassVar[str] = "ensemble"
    several_chains: ClassVar[bool] = True

    num_members: int = 5  # ensemble members

    def __post_init__(self) -> None:
        super().__post_init__()
        _count("num_members", self.num_members)


@dataclass(frozen=True)
class SVIConfig(MAPConfig):
    """Mean-field Gaussian SVI (:func:`bnn_ppl.inference.svi_mean_field`), started from a MAP
    estimate of ``map_steps`` steps when ``map_steps > 0`` (the recipe of Izmailov et al.:
    a guide started at the prior's scale rarely finds the data); ``num_samples`` draws from
    the fitted guide form one chain."""

    method: ClassVar[str] = "svi"

    num_steps: int = 5000  # SVI steps
    map_steps: int = 0  # MAP steps first (0: start at a prior draw)
    init_scale: float = 0.01  # initial guide scale
    num_particles: int = 1  # ELBO particles
    num_samples: int = 100  # draws from the fitted guide

    def __post_init__(self) -> None:
        super().__post_init__()
        _count("map_steps", self.map_steps, minimum=0)
        validation.check_positive("init_scale", self.init_scale)
        _count("num_particles", self.num_particles)
        _count("num_samples", self.num_samples)


MIN_BURN_IN = 2
"""The fewest burn-in cycles of an SG-MCMC automatic burn-in (``num_warmup=None``)."""
BURN_IN_CAP = 50
"""The most burn-in cycles an SG-MCMC automatic burn-in runs; beyond it the fit warns, naming
a ``num_warmup`` (and, for SGLD, a ``batch_size``) that is enough."""


@dataclass(frozen=True)
class SGMCMCConfig(Config):
    """Shared by the SG-MCMC samplers: a cyclical cosine step size of ``cycle_length`` steps
    starting each cycle at ``step_size`` and one draw at the end of each cycle;
    ``num_warmup`` burn-in cycles, then ``num_samples`` cycles (draws) per chain. Each chain
    starts at its own MAP estimate of ``map_steps`` Adam steps; ``step_size=None`` is
    :func:`~bnn_ppl.inference.recommended_step_size` for the curvature and minibatch noise
    measured there, and the momentum kernels' least friction is
    :func:`~bnn_ppl.inference.recommended_friction` at the step size. ``num_warmup=None``
    (automatic): enough cycles to span 3 relaxation times of the stiffest direction (at
    least 2, at most 50), extended while the potential energy still drifts over the sampled
    cycles (:func:`~bnn_ppl.inference.sgmcmc.recipe.run_sgmcmc`)."""

    num_warmup: int | None = None  # burn-in cycles (None: automatic)
    num_samples: int = 20  # sampled cycles, one draw each
    num_chains: int = 1  # chains, vectorised
    cycle_length: int = 1000  # steps per step-size cycle
    batch_size: int | None = 128  # minibatch rows (None: all)
    step_size: float | None = None  # None: recommended at a MAP
    map_steps: int = 2000  # MAP steps: the chains start there

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.num_warmup is not None:
            _count("num_warmup", self.num_warmup, minimum=0)
        for name in ("num_samples", "num_chains", "cycle_length"):
            _count(name, getattr(self, name))
        _optional_count("batch_size", self.batch_size)
        _optional_positive("step_size", self.step_size)
        _count("map_steps", self.map_steps)
        if self.batch_size is not None and self.batch_size < 2:
            # the minibatch noise is estimated from two half batches: by the kernels that
            # estimate it, and by the step-size recommendation after the MAP pre-fit
            raise InputValueError(
                f"batch_size={self.batch_size} is too small for {self.method}: its minibatch "
                "gradient noise is estimated from two half batches (and so is the step size "
                "recommended after the MAP pre-fit, step_size=None); pass batch_size >= 2, "
                "or None for full batches."
            )


@dataclass(frozen=True)
class SGLDConfig(SGMCMCConfig):
    """Stochastic-gradient Langevin dynamics (:class:`bnn_ppl.inference.SGLD`)."""

    method: ClassVar[str] = "sgld"


@dataclass(frozen=True)
class SGHMCConfig(SGMCMCConfig):
    """Stochastic-gradient HMC (:class:`bnn_ppl.inference.SGHMC`)."""

    method: ClassVar[str] = "sghmc"


@dataclass(frozen=True)
class SGNHTConfig(SGMCMCConfig):
    """The stochastic-gradient Nosé-Hoover thermostat (:class:`bnn_ppl.inference.SGNHT`)."""

    method: ClassVar[str] = "sgnht"


@dataclass(frozen=True)
class ATMCConfig(SGMCMCConfig):
    """Adaptive thermostat Monte Carlo (:class:`bnn_ppl.inference.ATMC`)."""

    method: ClassVar[str] = "atmc"


@dataclass(frozen=True)
class ReferenceHMCConfig(Config):
    """The reference-run recipe (:func:`bnn_ppl.inference.reference_hmc`, whose module doc
    describes it): ``num_chains`` HMC chains from prior draws, sampled in segments of
    ``segment_draws`` until ``min_share`` of the test ``quantity`` values (``None``: softmax
    probabilities, or the predictive mean, each row's log density and the learned noise sd
    with test targets, the mean without) have R-hat <= ``max_rhat`` and bulk ESS >=
    ``min_ess`` at ``1 + confirm_segments`` checks in a row, each chain's first ``burn_in``
    share left out, or until ``max_draws`` per chain
    are drawn, or the next segment would (at the last one's pace) end past ``max_seconds``, or
    a chain stops moving. Plain HMC's kernel: ``mass_matrix``
    (``"diagonal"``, ``"dense"`` or ``"identity"``), ``trajectory_length`` (``None``: a quarter
    period), ``step_size``, ``target_accept_prob``, ``max_num_steps``, and ``init_steps`` Adam
    steps from each prior draw before warmup. ``num_temperatures`` K >= 2: parallel tempering
    instead (``min_beta``, ``leapfrog_steps``, ``adapt_ladder``; plain HMC's settings refused)."""

    method: ClassVar[str] = "reference_hmc"

    num_chains: int = 4  # chains, each from its own prior draw (R-hat compares them)
    num_warmup: int = 500  # warmup iterations per chain (step size and metric adapted)
    segment_draws: int = 200  # draws per chain between convergence checks (and commits)
    max_draws: int = 10_000  # budget: draws per chain after warmup
    max_seconds: float | None = None  # budget: wall seconds of the whole run, committed included
    max_rhat: float = 1.01  # rule: rank-normalised split R-hat of a test value at most this
    min_share: float = 0.99  # rule: the share of test values meeting max_rhat (and min_ess)
    min_ess: float = 400.0  # rule: bulk ESS of a test value at least this
    burn_in: float = 0.0  # share of each chain left out of every check and of the result
    confirm_segments: int = 1  # rule: further segments that must pass too before it stops
    quantity: str | None = None  # checked: probs, ..., mean, mean_log_density (None: default)
    mass_matrix: str = "diagonal"  # diagonal, dense or identity (Izmailov et al.)
    trajectory_length: float | None = None  # None: a quarter period in the adapted metric
    step_size: float = 0.01  # initial step size (adapted in warmup)
    target_accept_prob: float = 0.8  # the step size adaptation's target
    max_num_steps: int = 1024  # most leapfrog steps per draw (longer trajectories are cut)
    num_temperatures: int | None = None  # K >= 2: parallel tempering with K rungs
    min_beta: float = 1e-3  # tempering: the ladder's lowest inverse temperature
    leapfrog_steps: int = 16  # tempering: leapfrog steps per sweep, at every rung
    adapt_ladder: bool = True  # tempering: respace the ladder in warmup (equal swap rates)
    init_steps: int = 0  # Adam steps from each chain's prior draw before warmup (0: none)
    init_learning_rate: float = 3e-3  # their learning rate (cosine-decayed to 1 %)

    @property
    def tempering(self) -> bool:
        """Whether the chains are moved by parallel tempering (``num_temperatures >= 2``)."""
        return (self.num_temperatures or 1) >= 2

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.init_method != "prior":
            raise InputValueError(
                f"init_method must be 'prior' for a reference run, got {self.init_method!r}: "
                "its chains start from independent prior draws (over-dispersed starts are "
                "what make R-hat meaningful)."
            )
        _count("num_chains", self.num_chains, minimum=2)
        _count("num_warmup", self.num_warmup, minimum=0)
        _count("segment_draws", self.segment_draws, minimum=4)
        _count("max_draws", self.max_draws, minimum=4)
        _optional_positive("max_seconds", self.max_seconds)
        validation.check_number("max_rhat", self.max_rhat, low=1.0, low_inclusive=False)
        validation.check_number("min_share", self.min_share, low=0.0, high=1.0,
                                low_inclusive=False)  # fmt: skip
        validation.check_positive("min_ess", self.min_ess)
        validation.check_number("burn_in", self.burn_in, low=0.0, high=1.0, high_inclusive=False)
        _count("confirm_segments", self.confirm_segments, minimum=0)
        first = min(self.segment_draws, self.max_draws)  # draws per chain at the first check
        if first - int(self.burn_in * first) < 4:
            raise InputValueError(
                f"burn_in={self.burn_in} leaves {first - int(self.burn_in * first)} of the "
                f"{first} draws per chain of the first convergence check (segment_draws="
                f"{self.segment_draws}, max_draws={self.max_draws}); split R-hat needs >= 4. "
                "Lower burn_in, or raise segment_draws."
            )
        if self.quantity is not None:
            validation.check_choice("quantity", self.quantity, QUANTITIES)
        validation.check_choice("mass_matrix", self.mass_matrix, MASS_MATRICES)
        _optional_positive("trajectory_length", self.trajectory_length)
        validation.check_positive("step_size", self.step_size)
        validation.check_number("target_accept_prob", self.target_accept_prob, low=0.0,
                                high=1.0, low_inclusive=False, high_inclusive=False)  # fmt: skip
        _count("max_num_steps", self.max_num_steps)
        _optional_count("num_temperatures", self.num_temperatures)
        validation.check_number("min_beta", self.min_beta, low=0.0, high=1.0,
                                low_inclusive=False, high_inclusive=False)  # fmt: skip
        if self.tempering:  # the ladder runs in float32: it must stay a ladder there
            ladder = np.geomspace(1.0, self.min_beta, self.num_temperatures).astype(np.float32)
            if ladder[-1] < np.finfo(np.float32).tiny or np.any(np.diff(ladder) >= 0):
                raise InputValueError(
                    f"min_beta={self.min_beta} with num_temperatures={self.num_temperatures}: "
                    "the ladder's inverse temperatures are not distinct positive float32 "
                    f"numbers (float32 holds {ladder.tolist()}); raise min_beta above 1.2e-38 "
                    "or use fewer temperatures for a min_beta this close to 1."
                )
        _count("leapfrog_steps", self.leapfrog_steps)
        validation.check_bool("adapt_ladder", self.adapt_ladder)
        _count("init_steps", self.init_steps, minimum=0)
        validation.check_positive("init_learning_rate", self.init_learning_rate)
        rung = "each tempering rung adapts a diagonal metric and runs leapfrog_steps steps"
        plain_hmc = {"mass_matrix": rung, "trajectory_length": rung, "max_num_steps": rung,
                     "init_steps": "a tempering ladder's hot rungs bring its chain in"}  # fmt: skip
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        for name, why in plain_hmc.items():  # with tempering: at their defaults
            if self.tempering and getattr(self, name) != defaults[name]:
                raise InputValueError(
                    f"{name}={getattr(self, name)!r} applies to plain HMC only ({why}): leave it "
                    f"at {defaults[name]!r}, or set num_temperatures=None."
                )


CONFIGS: dict[str, type[Config]] = {
    c.method: c
    for c in (
        HMCConfig,
        NUTSConfig,
        MAPConfig,
        EnsembleConfig,
        SVIConfig,
        SGLDConfig,
        SGHMCConfig,
        SGNHTConfig,
        ATMCConfig,
        ReferenceHMCConfig,
    )
}
"""Method name -> its config class."""


def from_dict(record: Mapping[str, Any]) -> Config:
    """The config :meth:`Config.to_dict` wrote (``"method"`` picks the class); an unknown
    method or field is an error naming it."""
    if not isinstance(record, Mapping):
        raise InputTypeError(f"record must be a mapping, got {type(record).__name__}.")
    fields = dict(record)
    method = fields.pop("method", None)
    if method not in CONFIGS:
        raise InputValueError(f"record['method'] must be one of {sorted(CONFIGS)}, got {method!r}.")
    if method in ("hmc", "nuts") and "adapt_mass_matrix" in fields:  # a record before mass_matrix
        fields["mass_matrix"] = "diagonal" if fields.pop("adapt_mass_matrix") else "identity"
    _fields(CONFIGS[method], fields)
    return CONFIGS[method](**fields)


def _fields(cls: type[Config], names: Mapping[str, Any]) -> set[str]:
    """``cls``'s field names; any of ``names`` that is not one is an error naming it."""
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(names) - known)
    if unknown:
        raise InputValueError(f"{cls.__name__} has no field(s) {unknown}; it has {sorted(known)}.")
    return known

"""Prior families: frozen dataclasses that turn a parameter shape into a NumPyro distribution.

Each family's ``distribution(shape)`` has event shape ``shape`` (all entries i.i.d. unless the
family says otherwise). Import them from :mod:`bnn_ppl.priors`, which also resolves a model's
prior specification (patterns, callables, strings) to one family per parameter.

Example:
    >>> from bnn_ppl.prior_families import Normal
    >>> Normal(scale=0.3).distribution((2, 3)).event_shape
    (2, 3)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import numpyro.distributions as dist
from numpyro.distributions import constraints

from bnn_ppl.types import Array, PRNGKey
from bnn_ppl.validation import (
    InputTypeError,
    InputValueError,
    check_bool,
    check_choice,
    check_number,
    check_positive,
)

__all__ = [
    "Prior",
    "Normal",
    "Laplace",
    "StudentT",
    "Logistic",
    "ScaleMixtureNormal",
    "Hierarchical",
    "WeightNormDirection",
    "GroupLaplace",
    "atmc",
    "fan_in",
]


@runtime_checkable
class Prior(Protocol):
    """What every prior provides."""

    def hyper_sites(self) -> dict[str, dist.Distribution]:
        """Hyper-parameters with their own priors, by local name (``{}`` for a fixed prior).

        The model turns each into a sample site (e.g. ``"Dense_0.prior_scale"``) that HMC
        samples with the weights.
        """
        ...

    def distribution(
        self, shape: tuple[int, ...], hyper: Mapping[str, Array] | None = None
    ) -> dist.Distribution:
        """The distribution of a parameter of this ``shape`` (``event_shape == shape``), given the
        values of the hyper-parameters (``None``: only shape and support are needed)."""
        ...

    def stddev(self, shape: tuple[int, ...]) -> float:
        """Marginal standard deviation of one entry (used to pick HMC trajectory lengths)."""
        ...


def fan_in(shape: tuple[int, ...]) -> int:
    """Inputs feeding one output unit: all axes but the last (Dense ``(in, out)``: ``in``;
    Conv ``(kh, kw, cin, cout)``: ``kh·kw·cin``); 1 for a vector or scalar (biases)."""
    return math.prod(shape[:-1]) if len(shape) >= 2 else 1


def _short_repr(obj: object) -> str:
    """``Name(field=value, ...)`` listing required fields and those that differ from defaults."""
    parts = [
        f"{f.name}={getattr(obj, f.name)!r}"
        for f in fields(obj)
        if f.default is MISSING or getattr(obj, f.name) != f.default
    ]
    return f"{type(obj).__name__}({', '.join(parts)})"


def _iid(base: dist.Distribution, shape: tuple[int, ...]) -> dist.Distribution:
    return base.expand(tuple(shape)).to_event(len(shape))


@dataclass(frozen=True, repr=False)
class _LocationScale:
    """Shared machinery of the i.i.d. location-scale families (fixed or fan-in scaled)."""

    scale: float
    loc: float = 0.0
    fan_in: bool = False

    _unit_std = 1.0

    __repr__ = _short_repr

    def __post_init__(self) -> None:
        object.__setattr__(self, "scale", check_positive("scale", self.scale))
        object.__setattr__(self, "loc", check_number("loc", self.loc))
        object.__setattr__(self, "fan_in", check_bool("fan_in", self.fan_in))

    def effective_scale(self, shape: tuple[int, ...]) -> float:
        """``scale``, or ``scale / sqrt(fan_in(shape))`` for a fan-in scaled ("He") prior."""
        return self.scale / math.sqrt(fan_in(shape)) if self.fan_in else self.scale

    def _base(self, scale: float) -> dist.Distribution:
        raise NotImplementedError

    def hyper_sites(self) -> dict[str, dist.Distribution]:
        return {}

    def distribution(
        self, shape: tuple[int, ...], hyper: Mapping[str, Array] | None = None
    ) -> dist.Distribution:
        return _iid(self._base(self.effective_scale(shape)), shape)

    def stddev(self, shape: tuple[int, ...]) -> float:
        return self._unit_std * self.effective_scale(shape)


@dataclass(frozen=True, repr=False)
class Normal(_LocationScale):
    """Gaussian prior ``N(loc, scale²)`` on every entry (``fan_in=True``: scale/√fan_in)."""

    def _base(self, scale: float) -> dist.Distribution:
        return dist.Normal(self.loc, scale)


@dataclass(frozen=True, repr=False)
class Laplace(_LocationScale):
    """Laplace prior with density ``exp(-|w - loc| / scale) / (2 scale)``."""

    _unit_std = math.sqrt(2.0)

    def _base(self, scale: float) -> dist.Distribution:
        return dist.Laplace(self.loc, scale)


@dataclass(frozen=True, repr=False)
class Logistic(_LocationScale):
    """Logistic prior with density ``e^{-z} / (scale (1 + e^{-z})²)``, ``z = (w - loc) / scale``."""

    _unit_std = math.pi / math.sqrt(3.0)

    def _base(self, scale: float) -> dist.Distribution:
        return dist.Logistic(self.loc, scale)


@dataclass(frozen=True, repr=False)
class StudentT:
    """Student-t prior with ``df`` degrees of freedom and the given ``scale``."""

    __repr__ = _short_repr

    df: float
    scale: float
    loc: float = 0.0
    fan_in: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "df", check_positive("df", self.df))
        object.__setattr__(self, "scale", check_positive("scale", self.scale))
        object.__setattr__(self, "loc", check_number("loc", self.loc))
        object.__setattr__(self, "fan_in", check_bool("fan_in", self.fan_in))

    effective_scale = _LocationScale.effective_scale
    hyper_sites = _LocationScale.hyper_sites

    def distribution(
        self, shape: tuple[int, ...], hyper: Mapping[str, Array] | None = None
    ) -> dist.Distribution:
        return _iid(dist.StudentT(self.df, self.loc, self.effective_scale(shape)), shape)

    def stddev(self, shape: tuple[int, ...]) -> float:
        # Infinite variance for df <= 2: fall back to the scale, the width of the bulk.
        unit = math.sqrt(self.df / (self.df - 2.0)) if self.df > 2 else 1.0
        return unit * self.effective_scale(shape)


@dataclass(frozen=True, repr=False)
class ScaleMixtureNormal:
    """Two-component scale mixture ``π N(0, scale1²) + (1 − π) N(0, scale2²)`` (Blundell et
    al. 2015): a spike (small ``scale2``) and a slab."""

    __repr__ = _short_repr

    pi: float
    scale1: float
    scale2: float
    fan_in: bool = False

    def __post_init__(self) -> None:
        pi = check_number(
            "pi", self.pi, low=0.0, high=1.0, low_inclusive=False, high_inclusive=False
        )
        object.__setattr__(self, "pi", pi)
        object.__setattr__(self, "fan_in", check_bool("fan_in", self.fan_in))
        object.__setattr__(self, "scale1", check_positive("scale1", self.scale1))
        object.__setattr__(self, "scale2", check_positive("scale2", self.scale2))

    hyper_sites = _LocationScale.hyper_sites

    def _scales(self, shape: tuple[int, ...]) -> tuple[float, float]:
        c = 1.0 / math.sqrt(fan_in(shape)) if self.fan_in else 1.0
        return self.scale1 * c, self.scale2 * c

    def distribution(
        self, shape: tuple[int, ...], hyper: Mapping[str, Array] | None = None
    ) -> dist.Distribution:
        s1, s2 = self._scales(shape)
        mix = dist.MixtureSameFamily(
            dist.Categorical(probs=jnp.array([self.pi, 1.0 - self.pi])),
            dist.Normal(jnp.zeros(2), jnp.array([s1, s2])),
        )
        return _iid(mix, shape)

    def stddev(self, shape: tuple[int, ...]) -> float:
        s1, s2 = self._scales(shape)
        return math.sqrt(self.pi * s1**2 + (1.0 - self.pi) * s2**2)


_HIER_FAMILIES = {
    "normal": (dist.Normal, 1.0),
    "laplace": (dist.Laplace, math.sqrt(2.0)),
    "logistic": (dist.Logistic, math.pi / math.sqrt(3.0)),
}


@dataclass(frozen=True, eq=False)
class Hierarchical:
    """A prior whose scale has its own hyper-prior, sampled by HMC with the weights.

    ``w ~ family(0, s)`` i.i.d. with ``s ~ scale_prior``; ``per="layer"`` shares one ``s``
    between the parameters of a layer (site ``"<layer>.prior_scale"``, e.g.
    ``"Dense_0.prior_scale"`` for ``Dense_0.kernel`` and ``Dense_0.bias``), ``per="parameter"``
    gives each parameter its own (``"Dense_0.kernel.prior_scale"``).
    """

    scale_prior: dist.Distribution = field(default_factory=lambda: dist.HalfNormal(1.0))
    family: str = "normal"
    per: str = "layer"

    def __post_init__(self) -> None:
        check_choice("family", self.family, tuple(_HIER_FAMILIES))
        check_choice("per", self.per, ("layer", "parameter"))
        d = self.scale_prior
        if not isinstance(d, dist.Distribution) or d.event_shape != () or d.batch_shape != ():
            raise InputTypeError(f"scale_prior must be a scalar numpyro distribution, got {d!r}.")
        if bool(d.support(jnp.asarray(-1.0))) or not bool(d.support(jnp.asarray(1.0))):
            raise InputValueError(f"scale_prior must have positive support, got {d.support}.")

    def hyper_sites(self) -> dict[str, dist.Distribution]:
        return {"scale": self.scale_prior}

    def distribution(
        self, shape: tuple[int, ...], hyper: Mapping[str, Array] | None = None
    ) -> dist.Distribution:
        scale = 1.0 if hyper is None else hyper["scale"]
        return _iid(_HIER_FAMILIES[self.family][0](0.0, scale), shape)

    def stddev(self, shape: tuple[int, ...]) -> float:
        d = self.scale_prior
        try:
            m2 = float(d.variance + d.mean**2)
        except (NotImplementedError, AttributeError):
            m2 = float("nan")
        unit = _HIER_FAMILIES[self.family][1]
        return unit * math.sqrt(m2) if math.isfinite(m2) else unit

    def __repr__(self) -> str:
        return (
            f"Hierarchical(scale_prior={type(self.scale_prior).__name__}, "
            f"family={self.family!r}, per={self.per!r})"
        )


class _DirectionDistribution(dist.Distribution):
    """Weight-norm direction prior: per feature (last axis) ``exp(-(d/2)(‖v‖² − 1)²)``.

    Unnormalised (the constant does not depend on ``v``); samples are exact: a uniform
    direction times a radius drawn by inverse CDF from ``r^{d-1} exp(-(d/2)(r² − 1)²)``.
    """

    support = constraints.real

    def __init__(self, shape: tuple[int, ...]):
        self._shape = tuple(shape)
        self.d = math.prod(shape[:-1]) if len(shape) >= 2 else (shape[0] if shape else 1)
        super().__init__(batch_shape=(), event_shape=self._shape)
        self.support = constraints.independent(constraints.real, len(shape))

    def _sq_norms(self, v: Array) -> Array:
        """Squared norm of each feature: shape ``(..., num_features)`` (``(...)`` for 1-D)."""
        if len(self._shape) >= 2:
            return jnp.sum(v**2, axis=tuple(range(v.ndim - len(self._shape), v.ndim - 1)))
        return jnp.sum(v**2, axis=-1)

    def log_prob(self, value: Array) -> Array:
        lp = -0.5 * self.d * (self._sq_norms(value) - 1.0) ** 2
        return jnp.sum(lp, axis=-1) if len(self._shape) >= 2 else lp

    def sample(self, key: PRNGKey, sample_shape: tuple[int, ...] = ()) -> Array:
        k1, k2 = jax.random.split(key)
        u = jax.random.normal(k1, tuple(sample_shape) + self._shape)
        sq = self._sq_norms(u)
        grid = jnp.linspace(1e-4, 3.0, 4096)
        logf = (self.d - 1) * jnp.log(grid) - 0.5 * self.d * (grid**2 - 1.0) ** 2
        cdf = jnp.cumsum(jnp.exp(logf - logf.max()))
        r = jnp.interp(jax.random.uniform(k2, sq.shape), cdf / cdf[-1], grid)
        factor = r / jnp.sqrt(sq)
        if len(self._shape) >= 2:
            factor = factor.reshape(
                tuple(sample_shape) + (1,) * (len(self._shape) - 1) + self._shape[-1:]
            )
        else:
            factor = factor[..., None]
        return u * factor


@dataclass(frozen=True, repr=False)
class WeightNormDirection:
    """The ATMC prior on weight-norm direction vectors (Heek & Kalchbrenner 2019, eq. 13).

    For each feature (the last axis; ``d`` = the other axes' size, the fan-in)
    ``p(v) ∝ exp(−(d/2)(‖v‖² − 1)²)``, which keeps directions near unit length.
    """

    __repr__ = _short_repr

    hyper_sites = _LocationScale.hyper_sites

    def distribution(
        self, shape: tuple[int, ...], hyper: Mapping[str, Array] | None = None
    ) -> dist.Distribution:
        return _DirectionDistribution(tuple(shape))

    def stddev(self, shape: tuple[int, ...]) -> float:
        d = _DirectionDistribution(tuple(shape)).d
        return 1.0 / math.sqrt(d)


@dataclass(frozen=True, repr=False)
class GroupLaplace(Laplace):
    """The ATMC group-Laplace prior on weight-norm scales: ``p(s) ∝ exp(−|s| / b)``.

    With ``θ = s·v/‖v‖`` the feature vector's norm is ``|s|``, so the group Laplace on ``θ``
    is a Laplace on each scale ``s`` (``b = 5`` in the paper).
    """

    scale: float = 5.0


def atmc(b: float = 5.0, default: Prior | None = None) -> dict[str, Prior]:
    """The ATMC paper's priors for weight-normalised networks (``bnn_ppl.models.ResNetPP``).

    ``"*.direction"`` parameters get :class:`WeightNormDirection`, ``"*.scale"`` ones
    :class:`GroupLaplace` ``(b)``, everything else ``default`` (``Normal(1.0)``).
    """
    return {
        "*.direction": WeightNormDirection(),
        "*.scale": GroupLaplace(b),
        "*": Normal(1.0) if default is None else default,
    }

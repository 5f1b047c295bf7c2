"""Priors over network parameters.

A prior is a small frozen dataclass that turns a parameter shape into a NumPyro distribution
whose event shape is that parameter's shape (all entries i.i.d.). A model's prior is given as

* one ``Prior`` for every parameter,
* a mapping from path patterns to priors, e.g. ``{"Dense_0": Normal(1.0), "*": Normal(0.1)}``,
  or
* a callable ``(path, shape) -> Prior`` (return ``None`` for "no prior": that is an error).

Paths are the dotted names of the network's parameters (``"Dense_0.kernel"``, ``"layers.1.bias"``).
A pattern matches a path if it equals it, if it is a prefix of it up to a dot (``"Dense_0"``
matches ``"Dense_0.kernel"`` and ``"Dense_0.bias"``), or if it matches as a shell-style glob
(``"*.bias"``). The **first** matching pattern, in the mapping's order, wins. A parameter that no
pattern matches, and a pattern that matches no parameter, are ``ValueError`` s: every parameter
gets a prior, and typos don't pass silently (NumPyro's dict priors keep unmatched parameters
fixed without a word; see numpyro issue 1873).

Example:
    >>> import bnn_ppl as bp
    >>> prior = bp.priors.Normal(scale=0.3)
    >>> prior.distribution((2, 3)).event_shape
    (2, 3)
    >>> spec = {"Dense_0": bp.priors.Laplace(1.0), "*": bp.priors.Normal(0.1)}
    >>> bp.priors.resolve(spec, {"Dense_0.kernel": (4, 2), "Dense_1.bias": (1,)})["Dense_1.bias"]
    Normal(scale=0.1, loc=0.0)
    >>> bp.priors.from_string("student_t:3,0.1")
    StudentT(df=3.0, scale=0.1, loc=0.0)
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, fields
from typing import Protocol, runtime_checkable

import numpyro.distributions as dist

from bnn_ppl.validation import check_positive

__all__ = [
    "Prior",
    "Normal",
    "Laplace",
    "StudentT",
    "PriorSpec",
    "resolve",
    "from_string",
    "REGISTRY",
]


@runtime_checkable
class Prior(Protocol):
    """What every prior provides."""

    def distribution(self, shape: tuple[int, ...]) -> dist.Distribution:
        """An i.i.d. distribution with ``event_shape == shape``."""
        ...

    @property
    def stddev(self) -> float:
        """Marginal standard deviation of one entry (used to pick HMC trajectory lengths)."""
        ...


def _iid(base: dist.Distribution, shape: tuple[int, ...]) -> dist.Distribution:
    return base.expand(tuple(shape)).to_event(len(shape))


@dataclass(frozen=True)
class Normal:
    """Gaussian prior ``N(loc, scale²)`` on every entry."""

    scale: float
    loc: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "scale", check_positive("scale", self.scale))
        object.__setattr__(self, "loc", float(self.loc))

    def distribution(self, shape: tuple[int, ...]) -> dist.Distribution:
        return _iid(dist.Normal(self.loc, self.scale), shape)

    @property
    def stddev(self) -> float:
        return self.scale


@dataclass(frozen=True)
class Laplace:
    """Laplace prior with density ``exp(-|w - loc| / scale) / (2 scale)``."""

    scale: float
    loc: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "scale", check_positive("scale", self.scale))
        object.__setattr__(self, "loc", float(self.loc))

    def distribution(self, shape: tuple[int, ...]) -> dist.Distribution:
        return _iid(dist.Laplace(self.loc, self.scale), shape)

    @property
    def stddev(self) -> float:
        return math.sqrt(2.0) * self.scale


@dataclass(frozen=True)
class StudentT:
    """Student-t prior with ``df`` degrees of freedom and the given ``scale``."""

    df: float
    scale: float
    loc: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "df", check_positive("df", self.df))
        object.__setattr__(self, "scale", check_positive("scale", self.scale))
        object.__setattr__(self, "loc", float(self.loc))

    def distribution(self, shape: tuple[int, ...]) -> dist.Distribution:
        return _iid(dist.StudentT(self.df, self.loc, self.scale), shape)

    @property
    def stddev(self) -> float:
        # Infinite variance for df <= 2: fall back to the scale, the width of the bulk.
        return self.scale * math.sqrt(self.df / (self.df - 2.0)) if self.df > 2 else self.scale


PriorSpec = Prior | Mapping[str, Prior] | Callable[[str, tuple[int, ...]], Prior | None]
"""How a model's prior is given: one prior, a pattern mapping, or a callable."""

REGISTRY: dict[str, type] = {"normal": Normal, "laplace": Laplace, "student_t": StudentT}
"""Prior families by name, as used by :func:`from_string`."""


def _matches(pattern: str, path: str) -> bool:
    return pattern == path or path.startswith(pattern + ".") or fnmatch.fnmatchcase(path, pattern)


def _check_prior(obj: object, where: str) -> Prior:
    if not isinstance(obj, Prior):
        raise TypeError(
            f"{where} must be a bnn_ppl prior (e.g. bp.priors.Normal(0.1)), got {obj!r}."
        )
    return obj


def resolve(spec: PriorSpec, shapes: Mapping[str, tuple[int, ...]]) -> dict[str, Prior]:
    """Assign a prior to every parameter path.

    Args:
        spec: one prior, a mapping ``pattern -> prior`` or a callable ``(path, shape) -> prior``.
        shapes: parameter shapes keyed by dotted path.

    Returns:
        ``{path: prior}`` for every path in ``shapes``, in the same order.

    Raises:
        ValueError: a parameter is matched by no pattern (the message lists all such paths and
            the available ones), or a pattern matches no parameter.
        TypeError: ``spec`` (or a value in it) is not a prior.
    """
    if isinstance(spec, Prior):
        return {path: spec for path in shapes}
    out: dict[str, Prior] = {}
    if isinstance(spec, Mapping):
        for pattern, prior in spec.items():
            _check_prior(prior, f"prior[{pattern!r}]")
        used = set()
        for path in shapes:
            for pattern, prior in spec.items():
                if _matches(pattern, path):
                    out[path] = prior
                    used.add(pattern)
                    break
        unused = [p for p in spec if p not in used]
        if unused:
            raise ValueError(
                f"prior patterns {unused} match no parameter (first match wins, so a pattern "
                f"may also be shadowed by an earlier one). Parameters: {list(shapes)}."
            )
    elif callable(spec):
        for path, shape in shapes.items():
            prior = spec(path, tuple(shape))
            if prior is not None:
                out[path] = _check_prior(prior, f"prior({path!r}, {tuple(shape)})")
    else:
        raise TypeError(
            "prior must be a bnn_ppl prior, a mapping from path patterns to priors, or a "
            f"callable (path, shape) -> prior; got {type(spec).__name__}."
        )
    unmatched = [path for path in shapes if path not in out]
    if unmatched:
        raise ValueError(
            f"no prior for parameters {unmatched}: every parameter needs a prior. Add a pattern "
            f"for them (e.g. '*' as the last key for a default). All parameters: {list(shapes)}."
        )
    return out


def from_string(text: str) -> Prior:
    """Parse ``"family:arg1,arg2"`` into a prior, arguments in constructor order.

    ``"normal:0.3"`` is ``Normal(0.3)``; ``"laplace:0.1"`` is ``Laplace(0.1)``;
    ``"student_t:3,0.1"`` is ``StudentT(df=3, scale=0.1)``.

    Raises:
        ValueError: unknown family (the message lists the known ones) or malformed arguments.
    """
    name, _, args = text.partition(":")
    key = name.strip().lower().replace("-", "_")
    if key == "studentt":
        key = "student_t"
    if key not in REGISTRY:
        raise ValueError(f"unknown prior {name!r}; known priors: {sorted(REGISTRY)}.")
    cls = REGISTRY[key]
    try:
        values = [float(a) for a in args.split(",")] if args.strip() else []
    except ValueError as e:
        raise ValueError(f"prior arguments in {text!r} must be numbers: {e}") from None
    names = [f.name for f in fields(cls)]
    required = sum(f.default is MISSING for f in fields(cls))
    if not required <= len(values) <= len(names):
        raise ValueError(
            f"prior {text!r}: {cls.__name__} takes {required} to {len(names)} numbers "
            f"({', '.join(names)}), e.g. '{key}:{'3,0.1' if key == 'student_t' else '0.1'}'."
        )
    return cls(*values)

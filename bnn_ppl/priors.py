"""Priors over network parameters."""

# Notes:
#
# A prior is a small frozen dataclass that turns a parameter shape into a NumPyro distribution
# whose event shape is that parameter's shape (all entries i.i.d.). A model's prior is given as
#
# * one ``Prior`` for every parameter,
# * a mapping from path patterns to priors, e.g. ``{"Dense_0": Normal(1.0), "*": Normal(0.1)}``,
#   or
# * a callable ``(path, shape) -> Prior`` (return ``None`` for "no prior": that is an error).

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Mapping
from dataclasses import MISSING, fields

from bnn_ppl.prior_families import (
    GroupLaplace,
    Hierarchical,
    Laplace,
    Logistic,
    Normal,
    Prior,
    ScaleMixtureNormal,
    StudentT,
    WeightNormDirection,
    atmc,
    fan_in,
)
from bnn_ppl.validation import InputError, InputTypeError, InputValueError

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
    "PriorSpec",
    "resolve",
    "from_string",
    "REGISTRY",
]


PriorSpec = Prior | Mapping[str, Prior] | Callable[[str, tuple[int, ...]], Prior | None]
"""How a model's prior is given: one prior, a pattern mapping, or a callable."""

REGISTRY: dict[str, type] = {
    "normal": Normal,
    "laplace": Laplace,
    "logistic": Logistic,
    "student_t": StudentT,
}
"""Prior families by name, as used by :func:`from_string`."""


def _matches(pattern: str, path: str) -> bool:
    return pattern == path or path.startswith(pattern + ".") or fnmatch.fnmatchcase(path, pattern)


def _check_prior(obj: object, where: str) -> Prior:
    if not isinstance(obj, Prior):
        raise InputTypeError(
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

    Example:
        >>> import bnn_ppl as bp
        >>> prior = bp.priors.Normal(scale=0.3)
        >>> prior.distribution((2, 3)).event_shape
        (2, 3)
        >>> spec = {"Dense_0": bp.priors.Laplace(1.0), "*": bp.priors.Normal(0.1)}
        >>> bp.priors.resolve(spec, {"Dense_0.kernel": (4, 2),
        ...     "Dense_1.bias": (1,)})["Dense_1.bias"]
        Normal(scale=0.1)
        >>> bp.priors.from_string("student_t:3,0.1")
        StudentT(df=3.0, scale=0.1)
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
        # a catch-all "*" that nothing is left for is harmless (no typo to catch)
        unused = [p for p in spec if p not in used and p != "*"]
        if unused:
            raise InputValueError(
                f"prior patterns {unused} match no parameter (first match wins, so a pattern "
                f"may also be shadowed by an earlier one). Parameters: {list(shapes)}."
            )
    elif callable(spec):
        for path, shape in shapes.items():
            prior = spec(path, tuple(shape))
            if prior is not None:
                out[path] = _check_prior(prior, f"prior({path!r}, {tuple(shape)})")
    else:
        raise InputTypeError(
            "prior must be a bnn_ppl prior, a mapping from path patterns to priors, or a "
            f"callable (path, shape) -> prior; got {type(spec).__name__}."
        )
    unmatched = [path for path in shapes if path not in out]
    if unmatched:
        raise InputValueError(
            f"no prior for parameters {unmatched}: every parameter needs a prior. Add a pattern "
            f"for them (e.g. '*' as the last key for a default). All parameters: {list(shapes)}."
        )
    return out


def from_string(text: str) -> Prior:
    """Parse ``"family:arg1,arg2[,fan_in]"`` into a prior, numbers in constructor order.

    ``"normal:0.3"`` is ``Normal(0.3)``; ``"laplace:0.1"`` is ``Laplace(0.1)``;
    ``"student_t:3,0.1"`` is ``StudentT(df=3, scale=0.1)``; ``"normal:1,fan_in"`` is
    ``Normal(1.0, fan_in=True)`` (scale/√fan_in per layer).

    Raises:
        InputValueError: unknown family (the message lists the known ones), malformed
            arguments, or values the prior refuses (NaN/inf, a scale <= 0 or beyond float32).
        InputTypeError: ``text`` is not a string.
    """
    if not isinstance(text, str):
        raise InputTypeError(
            f"a prior string must be a str like 'normal:0.3', got {text!r} ({type(text).__name__})."
        )
    name, _, args = text.partition(":")
    key = name.strip().lower().replace("-", "_")
    if key == "studentt":
        key = "student_t"
    if key not in REGISTRY:
        raise InputValueError(f"unknown prior {name!r}; known priors: {sorted(REGISTRY)}.")
    cls = REGISTRY[key]
    tokens = [a.strip() for a in args.split(",")] if args.strip() else []
    kwargs = {"fan_in": True} if "fan_in" in tokens else {}
    try:
        values = [float(a) for a in tokens if a != "fan_in"]
    except ValueError as e:
        raise InputValueError(f"prior arguments in {text!r} must be numbers: {e}") from None
    numeric = [f for f in fields(cls) if f.name != "fan_in" and not f.name.startswith("_")]
    required = sum(f.default is MISSING for f in numeric)
    if not required <= len(values) <= len(numeric):
        raise InputValueError(
            f"prior {text!r}: {cls.__name__} takes {required} to {len(numeric)} numbers "
            f"({', '.join(f.name for f in numeric)}), e.g. "
            f"'{key}:{'3,0.1' if key == 'student_t' else '0.1'}'."
        )
    try:
        return cls(*values, **kwargs)
    except InputError as e:
        raise type(e)(f"prior {text!r}: {e}") from None

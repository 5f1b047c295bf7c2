"""Running statistics of an SG-MCMC kernel's ``Info`` over every sampling step.

A cyclical SG-MCMC run keeps one draw per cycle, at the cycle's end, where the cosine step size
is near zero: the ``Info`` records of the kept draws show nothing of the large steps at each
cycle start, where the friction hits its cap or the Euler bias is largest. So each kernel's
state (:class:`~bnn_ppl.inference.SGMCMCState`) carries a :class:`StepStats`, updated by every
step after warmup (warmup steps are not counted): the number of steps, how many of them had a
gradient-noise share above the kernel's limit (``capped``: the friction was at its cap), and
per ``Info`` field the sum over steps (``total``), the sum of the field times the step size
(``timed``, e.g. ``Σ h·ξ``) and the largest value (``peak``), and the number of coordinates
(``size``: a kinetic temperature, a mean over them, fluctuates by ``√(2/size)``), and the
potential energy's least-squares ``trend`` over the steps (how far ``U`` drifted: draws still
descending from their start are not yet stationary). The sums are
Kahan-compensated float32 (``errors``), so that a run of 10⁷ steps loses no step's
contribution. Nothing is reset: the statistics of the last state (or of the last collected
draw, which NumPyro takes at the run's last step) cover every sampling step since ``init``, in
every segment of a checkpointed run and whatever the thinning. Collect them with
``extra_fields=("stats",)``; :func:`pool` combines chains into a :class:`RunStats`, which
:func:`~bnn_ppl.inference.check_accuracy` reads.

Example:
    >>> import jax.numpy as jnp
    >>> from typing import NamedTuple
    >>> class Info(NamedTuple):
    ...     step_size: jnp.ndarray
    ...     kinetic_temperature: jnp.ndarray
    >>> s = stats_init(Info(jnp.zeros(()), jnp.zeros(())), size=3)
    >>> for h, t in [(0.1, 0.5), (0.3, 1.5)]:
    ...     s = stats_update(s, Info(jnp.asarray(h), jnp.asarray(t)), jnp.asarray(True), False)
    >>> run = pool(s)
    >>> run.steps, run.mean["kinetic_temperature"], round(run.step_mean["kinetic_temperature"], 3)
    (2, 1.0, 0.25)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from bnn_ppl.types import Array

__all__ = [
    "StepStats",
    "Sums",
    "Trend",
    "RunStats",
    "stats_init",
    "stats_update",
    "pool",
    "pool_fields",
]


class Sums(NamedTuple):
    """The Kahan compensations of :class:`StepStats`' two sums."""

    total: Any
    timed: Any


class Trend(NamedTuple):
    """Sums over the sampling steps ``k = 0, 1, ...`` of ``d = U_k - origin`` (``origin``: the
    first step's potential energy, so that float32 keeps the fluctuations): ``Σ d``
    (``total``), ``Σ k·d`` (``indexed``) and ``Σ d²`` (``squares``), with their Kahan
    compensations (``*_error``)."""

    origin: Any
    total: Any
    indexed: Any
    squares: Any
    total_error: Any
    indexed_error: Any
    squares_error: Any


class StepStats(NamedTuple):
    """Statistics of a chain's sampling steps since ``init`` (see the module doc).

    ``size`` (the position's number of scalars), ``steps`` and ``capped`` are int32 counts;
    ``total``, ``timed`` and ``peak`` are the kernel's ``Info`` NamedTuple holding, per field,
    ``Σ f``, ``Σ h·f`` and ``max f``; ``errors`` the Kahan compensations of the two sums;
    ``trend``: the potential energy's :class:`Trend`."""

    size: Array
    steps: Array
    capped: Array
    total: Any
    timed: Any
    peak: Any
    errors: Sums
    trend: Trend


@dataclass(frozen=True)
class RunStats:
    """A run's :class:`StepStats`, all chains pooled (float64): ``steps``, ``capped``, and per
    ``Info`` field its ``mean`` over steps, ``step_mean`` (the mean of ``h·f``) and ``peak``;
    ``size``: the number of coordinates; ``drift``: how much the potential energy's
    least-squares line rises over the steps (``slope × steps``, mean over chains; NaN when not
    recorded) and ``drift_se`` its standard error were the residuals independent."""

    size: int
    steps: int
    capped: int
    mean: dict[str, float]
    step_mean: dict[str, float]
    peak: dict[str, float]
    drift: float = float("nan")
    drift_se: float = float("nan")


def stats_init(info: Any, size: int) -> StepStats:
    """No steps yet, in the structure of the ``Info`` record ``info`` (float32 sums), for a
    position of ``size`` scalars."""
    zeros = jax.tree.map(lambda a: jnp.zeros(jnp.shape(a), jnp.float32), info)
    low = jax.tree.map(lambda a: jnp.full(jnp.shape(a), -jnp.inf, jnp.float32), info)
    count = jnp.zeros((), jnp.int32)
    size = jnp.asarray(size, jnp.int32)
    z = jnp.zeros((), jnp.float32)
    trend = Trend(z, z, z, z, z, z, z)
    return StepStats(size, count, count, zeros, zeros, low, Sums(zeros, zeros), trend)


def _kahan(total: Any, error: Any, x: Any, active: Array) -> tuple[Any, Any]:
    def one(s: Array, c: Array, v: Array) -> tuple[Array, Array]:
        y = jnp.asarray(v, jnp.float32) - c
        t = s + y
        return jnp.where(active, t, s), jnp.where(active, (t - s) - y, c)

    pairs = jax.tree.map(one, total, error, x)
    outer = jax.tree.structure(total)
    inner = jax.tree.structure((0, 0))
    return jax.tree.transpose(outer, inner, pairs)


def stats_update(stats: StepStats, info: Any, active: Array, capped: Array | bool) -> StepStats:
    """``stats`` with one more step, whose ``Info`` is ``info``, if ``active`` (after warmup);
    ``capped``: the step's noise share exceeded the kernel's limit."""
    h = jnp.asarray(info.step_size, jnp.float32)
    e = stats.errors
    total, total_e = _kahan(stats.total, e.total, info, active)
    timed, timed_e = _kahan(stats.timed, e.timed, jax.tree.map(lambda a: h * a, info), active)
    peak = jax.tree.map(
        lambda m, a: jnp.where(active, jnp.maximum(m, jnp.asarray(a, jnp.float32)), m),
        stats.peak, info,
    )  # fmt: skip
    one = jnp.asarray(active, jnp.int32)
    capped = stats.capped + one * jnp.asarray(capped, jnp.int32)
    errors = Sums(total_e, timed_e)
    u = getattr(info, "potential_energy", None)  # (an Info without it: no trend)
    trend = stats.trend if u is None else _trend_update(stats.trend, stats.steps, u, active)
    return StepStats(stats.size, stats.steps + one, capped, total, timed, peak, errors, trend)


def _trend_update(trend: Trend, k: Array, u: Array, active: Array) -> Trend:
    u = jnp.asarray(u, jnp.float32)
    origin = jnp.where(k == 0, u, trend.origin)
    d = jnp.where(jnp.isfinite(u), u - origin, 0.0)
    sums, errors = _kahan(
        (trend.total, trend.indexed, trend.squares),
        (trend.total_error, trend.indexed_error, trend.squares_error),
        (d, k.astype(jnp.float32) * d, d * d),
        active,
    )
    return Trend(jnp.where(active, origin, trend.origin), *sums, *errors)


def _drift(a: Mapping[str, np.ndarray]) -> tuple[float, float]:
    """The potential energy's fitted rise over each chain's steps (mean over chains) and its
    standard error (residuals taken independent), from the ``trend.*`` fields."""
    if "trend.total" not in a:
        return float("nan"), float("nan")
    n = np.asarray(a["steps"], np.float64)
    s1 = a["trend.total"] - a["trend.total_error"]
    sk = a["trend.indexed"] - a["trend.indexed_error"]
    s2 = a["trend.squares"] - a["trend.squares_error"]
    with np.errstate(divide="ignore", invalid="ignore"):
        kbar = (n - 1) / 2
        skk = n * (n * n - 1) / 12  # Σ (k - k̄)²
        slope = (sk - kbar * s1) / skk
        resid = np.maximum(s2 - s1 * s1 / n - slope * slope * skk, 0.0) / np.maximum(n - 2, 1)
        drift = slope * n
        se = np.sqrt(resid / skk) * n
    ok = n > 2
    if not np.any(ok):
        return float("nan"), float("nan")
    m = int(np.sum(ok))
    return float(np.mean(drift[ok])), float(np.sqrt(np.sum(se[ok] ** 2)) / m)


def _fields(tree: Any, prefix: str = "") -> dict[str, Any]:
    if hasattr(tree, "_asdict"):
        out: dict[str, Any] = {}
        for name, value in tree._asdict().items():
            out |= _fields(value, f"{prefix}{name}.")
        return out
    return {prefix[:-1]: tree}


def pool(stats: StepStats) -> RunStats:
    """:class:`RunStats` of ``stats`` (any leading axes: chains, ...)."""
    return pool_fields(_fields(stats))


def pool_fields(fields: Mapping[str, Any]) -> RunStats:
    """:func:`pool` of a :class:`StepStats` stored field by field (``"steps"``,
    ``"total.<name>"``, ...: e.g. a checkpointed run's ``"stats.<...>"`` arrays, each chain's
    last draw)."""
    a = {k: np.asarray(v, np.float64) for k, v in fields.items()}
    steps = int(np.sum(a["steps"]))
    names = [k[6:] for k in a if k.startswith("total.")]

    def mean(kind: str, name: str) -> float:
        s = np.sum(a[f"{kind}.{name}"] - a[f"errors.{kind}.{name}"])  # Kahan: sum - error
        return float(s / steps) if steps else float("nan")

    peak = {n: float(np.max(a[f"peak.{n}"])) if steps else float("nan") for n in names}
    return RunStats(
        int(np.max(a["size"])),
        steps,
        int(np.sum(a["capped"])),
        {n: mean("total", n) for n in names},
        {n: mean("timed", n) for n in names},
        peak,
        *_drift(a),
    )

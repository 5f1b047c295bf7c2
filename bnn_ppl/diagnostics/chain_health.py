"""Did each chain move? Frozen and stuck chains are reported loudly, never as success."""

# Notes:
#
# An MCMC run can finish without an error and still be worthless: a step size that ran away to
# float32's maximum gives 0 leapfrog steps per iteration, every proposal is "accepted" (acceptance
# 1.0, no divergences) and the chain never leaves its starting point. Acceptance and divergences
# cannot see this; the draws can. :func:`check_chains` looks at
#
# * the draws: the fraction of consecutive draws that are identical in every parameter (any
#   sampler: HMC, NUTS, SG-MCMC; only ``(chains, draws, ...)`` arrays are needed),
# * the leapfrog steps, where collected (``num_steps``): an iteration with 0 steps cannot move,
# * the step size, where there is one: NaN, inf, <= 0 or absurdly large,
# * each chain against the others (two chains or more): a chain *crawling* - a step size
#   collapsed to a tiny value, so that nearly every proposal is "accepted" but hardly moves -
#   has a step size orders of magnitude below the other chains' (:data:`STEP_RATIO`), or moves
#   per draw a negligible fraction of what the other chains move (:data:`CRAWL_RATIO`), though
#   no two of its draws are identical,
#
# and warns with a :class:`StuckChainWarning` naming each chain that is not moving. The draws are
# judged only from :data:`MIN_DRAWS` draws per chain on: with fewer, a healthy chain repeats half
# its draws by chance too often for the verdict to mean anything, and the chain is reported as
# not judged on its draws (``judged=False``) instead (the other checks still apply).
# :func:`bnn_ppl.diagnostics.sampler_summary` reports the same per chain, and
# :func:`bnn_ppl.inference.hmc` / :func:`~bnn_ppl.inference.nuts` check every finished run.

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from bnn_ppl.validation import InputValueError

__all__ = [
    "StuckChainWarning",
    "STUCK_FRACTION",
    "MIN_DRAWS",
    "ABSURD_STEP_SIZE",
    "STEP_RATIO",
    "CRAWL_RATIO",
    "ChainHealth",
    "check_chains",
    "final_step_size",
]


class StuckChainWarning(UserWarning):
    """A chain that did not move, or barely: its draws are not a sample of the posterior.

    Turn it into an error with ``warnings.simplefilter("error", StuckChainWarning)``.

    Example:
        >>> import warnings
        >>> import numpy as np
        >>> from bnn_ppl.diagnostics.chain_health import check_chains
        >>> rng = np.random.default_rng(0)
        >>> draws = {"w": rng.normal(size=(2, 50, 3))}
        >>> draws["w"][1] = draws["w"][1, 0]            # chain 1 never moves
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     health = check_chains(draws)
        >>> [h.moving for h in health], health[1].problems, caught[0].category.__name__
        ([True, False], ('frozen: all 50 draws are identical',), 'StuckChainWarning')
    """


STUCK_FRACTION = 0.5
"""A chain whose draw equals the previous one on at least this fraction of its transitions is
stuck (HMC at the usual target acceptance of 0.8 repeats about 20 % of its draws)."""

MIN_DRAWS = 20
"""Fewer draws per chain than this, and the draws are not judged (neither "frozen" nor "stuck").
Why 20: HMC at acceptance 0.8 repeats a draw with probability about 0.2 per transition, so of
``d - 1`` transitions at least half are repeats with probability 5.8 % at 6 draws, 2.0 % at 10
and 0.16 % at 20 (binomial tails); at acceptance 0.65, 24 % at 6 draws and 9 % at 20. Below 20
the statistic would call healthy chains stuck; a chain frozen by a runaway step size is still
caught at any length by the step size and 0-leapfrog-step checks."""

ABSURD_STEP_SIZE = 1e10
"""A step size at or above this, or NaN, inf, or below float32's smallest normal number
(1.2e-38, which includes 0 and negative values), is absurd: no parameter of a network has a
scale for which such a step means anything. (A step size that runs away under dual averaging
ends at float32's maximum, 3.4e38.)"""

STEP_RATIO = 1e-3
"""A chain whose step size is below this fraction of the median of the other chains' step
sizes is crawling. Chains of one run sample one posterior with the same target acceptance, so
their adapted step sizes agree within a small factor (and within the metric each adapted);
three orders of magnitude apart, one chain's adaptation has collapsed."""

CRAWL_RATIO = 1e-2
"""A chain whose typical move per draw is below this fraction of the other chains' is crawling:
per parameter, the root-mean-square difference of consecutive draws over the median of the
other chains' same figure; the median over parameters is compared. A random walk of steps 1 %
of the others' needs 10,000 draws to cover the distance they cover in one. Healthy chains of one
posterior differ in this by their mixing (lag-1 autocorrelation), a factor of a few at most."""

_TINY = float(np.finfo(np.float32).tiny)


class ChainHealth(NamedTuple):
    """Whether one chain moved, and why not if it did not.

    ``identical_fraction``: the fraction of consecutive draw pairs identical in every parameter;
    ``zero_step_iterations``: kept iterations with 0 leapfrog steps (``None`` when ``num_steps``
    was not collected); ``step_size``: the final step size (``None`` if the sampler has none);
    ``moving``: no problem found; ``problems``: what was found, in words; ``judged``: whether
    the draws were judged (at least :data:`MIN_DRAWS` of them; if not, ``moving`` rests on the
    other checks only); ``relative_movement``: the chain's move per draw over the other
    chains' (see :data:`CRAWL_RATIO`; about 1 for healthy chains, NaN with one chain or fewer
    than 3 draws).
    """

    chain: int
    draws: int
    identical_fraction: float
    zero_step_iterations: int | None
    step_size: float | None
    moving: bool
    problems: tuple[str, ...]
    judged: bool = True
    relative_movement: float = float("nan")


def _absurd(step: np.ndarray) -> np.ndarray:
    return ~((step >= _TINY) & (step < ABSURD_STEP_SIZE))  # NaN compares False: absurd


def _unchanged_and_finite(leaves: list[jax.Array]) -> tuple[jax.Array, jax.Array]:
    """``(chains, draws - 1)``: draw t equals draw t-1 everywhere; ``(chains,)``: all finite."""
    chains, draws = leaves[0].shape[:2]
    same = jnp.ones((chains, draws - 1), bool)
    finite = jnp.ones((chains,), bool)
    for a in leaves:
        flat = a.reshape(chains, draws, -1)
        same = same & jnp.all(flat[:, 1:] == flat[:, :-1], axis=-1)
        if jnp.issubdtype(a.dtype, jnp.inexact):
            finite = finite & jnp.all(jnp.isfinite(flat), axis=(1, 2))
    return same, finite


def _relative_movement(leaves: list[jax.Array]) -> jax.Array:
    """``(chains,)``: per parameter, each chain's root-mean-square move per draw over the median
    of the other chains' (parameters the others never move are left out), the median over
    parameters; NaN with one chain, fewer than 3 draws or nothing to compare."""
    chains, draws = leaves[0].shape[:2]
    floats = [a for a in leaves if jnp.issubdtype(a.dtype, jnp.inexact)]
    if chains < 2 or draws < 3 or not floats:
        return jnp.full(chains, jnp.nan)
    jump = jnp.concatenate(
        [jnp.sqrt(jnp.mean(jnp.diff(a.reshape(chains, draws, -1), axis=1) ** 2, axis=1))
         for a in floats], axis=1,
    )  # fmt: skip
    others = jnp.stack([jnp.median(jnp.delete(jump, c, axis=0), axis=0) for c in range(chains)])
    ratio = jnp.where(others > 0, jump / jnp.where(others > 0, others, 1.0), jnp.nan)
    return jnp.nanmedian(ratio, axis=1)


@jax.jit
def _device_checks(leaves: list[jax.Array]) -> tuple[jax.Array, jax.Array, jax.Array]:
    """:func:`_unchanged_and_finite` and :func:`_relative_movement` as one program, run where
    the draws are (a device), so only the small results are transferred. (Op by op they were
    about 50 small compilations for every new set of shapes: ~2.5 s of a tiny CLI run.) The
    leaves of one dtype are joined into one ``(chains, draws, n)`` array first: the same
    results, and a program whose size does not grow with the number of parameter arrays."""
    chains, draws = leaves[0].shape[:2]
    by_dtype: dict[Any, list[jax.Array]] = {}
    for a in leaves:
        by_dtype.setdefault(a.dtype, []).append(a.reshape(chains, draws, -1))
    joined = [jnp.concatenate(v, axis=2) if len(v) > 1 else v[0] for v in by_dtype.values()]
    return (*_unchanged_and_finite(joined), _relative_movement(joined))


def _step_ratio(steps: list[np.ndarray]) -> np.ndarray:
    """``(chains,)``: each chain's last step size over the median of the other chains' (NaN
    where either is absurd, or with one chain)."""
    last = steps[-1][:, -1]
    out = np.full(last.shape, np.nan)
    if last.size < 2:
        return out
    for c in range(last.size):
        ref = float(np.median(np.delete(last, c)))
        if not (_absurd(last[c : c + 1])[0] or _absurd(np.array([ref]))[0]):
            out[c] = last[c] / ref
    return out


def _array_fields(extra: Mapping[str, Any]) -> dict[str, Any]:
    """The array-valued fields; a record such as an SG-MCMC ``Info`` collected whole (field
    ``"info"``) contributes its arrays as ``"info.step_size"``, ..."""
    out = {}
    for k, v in extra.items():
        if hasattr(v, "_asdict"):
            out.update({f"{k}.{f}": a for f, a in v._asdict().items() if hasattr(a, "shape")})
        elif hasattr(v, "shape"):
            out[k] = v
    return out


def check_chains(
    samples: Any,
    extra_fields: Mapping[str, Any] | None = None,
    step_size: Any = None,
    *,
    warn: bool = True,
) -> list[ChainHealth]:
    """Per chain: did it move?

    A chain is *not moving* when any of these holds: at least :data:`STUCK_FRACTION` of its
    consecutive draws are identical (all of them: "frozen"; judged only with at least
    :data:`MIN_DRAWS` draws, else ``judged`` is False); some kept iteration took 0
    leapfrog steps (``extra_fields["num_steps"]``); its final step size, or any collected extra
    field named ``step_size`` or ``....step_size``, is absurd (:data:`ABSURD_STEP_SIZE`); a
    draw is NaN/inf; or, with two chains or more, it is *crawling*: its step size (the final
    one, else the last collected) is below :data:`STEP_RATIO` times the median of the other
    chains', or its move per draw below :data:`CRAWL_RATIO` times theirs (judged, as repeats
    are, only from :data:`MIN_DRAWS` draws).

    Args:
        samples: a pytree of ``(chains, draws, ...)`` arrays, as from
            ``mcmc.get_samples(group_by_chain=True)`` (with one draw per chain,
            ``identical_fraction`` is NaN; below :data:`MIN_DRAWS` draws only the other checks
            apply).
        extra_fields: ``mcmc.get_extra_fields(group_by_chain=True)``, if any (a record such as
            an SG-MCMC ``info`` is read field by field; anything else that is not an array is
            ignored).
        step_size: the final step size, a scalar or one per chain, if the sampler has one.
        warn: emit one :class:`StuckChainWarning` naming every chain that is not moving.

    Raises:
        ValueError: no arrays, or arrays without a common ``(chains, draws)``.
    """
    leaves = [jnp.asarray(a) for a in jax.tree.leaves(samples)]
    if not leaves:
        raise InputValueError("samples is empty; pass mcmc.get_samples(group_by_chain=True).")
    lead = {tuple(a.shape[:2]) if a.ndim >= 2 else tuple(a.shape) for a in leaves}
    if len(lead) != 1 or leaves[0].ndim < 2:
        raise InputValueError(
            f"samples must be (chains, draws, ...) arrays sharing (chains, draws), got leading "
            f"shapes {sorted(lead)}; use mcmc.get_samples(group_by_chain=True)."
        )
    chains, draws = leaves[0].shape[:2]
    same, finite, movement = (np.asarray(a) for a in _device_checks(leaves))
    movement = movement.astype(np.float64)
    extra = _array_fields(extra_fields or {})
    zero = np.asarray(extra["num_steps"]).reshape(chains, -1) == 0 if "num_steps" in extra else None
    steps = [
        np.asarray(v, np.float64).reshape(chains, -1)
        for k, v in extra.items()
        if k.rsplit(".", 1)[-1] == "step_size"
    ]
    final = None
    if step_size is not None:
        final = np.broadcast_to(np.ravel(np.asarray(step_size, np.float64)), (chains,))
        steps.append(final[:, None])
    step_ratio = _step_ratio(steps) if steps else np.full(chains, np.nan)
    out, judged = [], draws >= MIN_DRAWS  # fewer: the fraction says nothing (MIN_DRAWS)
    for c in range(chains):
        frac = float(np.mean(same[c])) if draws > 1 else float("nan")
        problems = []
        if judged and frac == 1.0:
            problems.append(f"frozen: all {draws} draws are identical")
        elif judged and frac >= STUCK_FRACTION:
            problems.append(f"stuck: {frac:.0%} of consecutive draws are identical")
        if zero is not None and zero[c].any():
            problems.append(
                f"0 leapfrog steps on {int(zero[c].sum())} of {zero.shape[1]} iterations"
            )
        absurd = np.concatenate([s[c][_absurd(s[c])] for s in steps]) if steps else np.array([])
        if absurd.size:
            problems.append(f"absurd step size {absurd[-1]:.3g}")
        if not finite[c]:
            problems.append("NaN/inf draws")
        if step_ratio[c] < STEP_RATIO:
            problems.append(f"crawling: step size {steps[-1][c, -1]:.3g} is {step_ratio[c]:.1e} "
                            "of the other chains' median")  # fmt: skip
        if judged and not problems and movement[c] < CRAWL_RATIO:
            problems.append(f"crawling: moves {movement[c]:.1e} of the other chains' distance "
                            "per draw")  # fmt: skip
        out.append(
            ChainHealth(
                chain=c,
                draws=int(draws),
                identical_fraction=frac,
                zero_step_iterations=None if zero is None else int(zero[c].sum()),
                step_size=None if final is None else float(final[c]),
                moving=not problems,
                problems=tuple(problems),
                judged=judged,
                relative_movement=float(movement[c]),
            )
        )
    if warn:
        warn_if_stuck(out, stacklevel=2)
    return out


def warn_if_stuck(health: list[ChainHealth], *, stacklevel: int = 2) -> None:
    """One :class:`StuckChainWarning` naming every chain of ``health`` that is not moving."""
    bad = [h for h in health if not h.moving]
    if bad:
        lines = "; ".join(f"chain {h.chain}: {', '.join(h.problems)}" for h in bad)
        warnings.warn(
            f"{len(bad)} of {len(health)} chain(s) did not move ({lines}). These draws are not "
            "a posterior sample: do not use them.",
            StuckChainWarning,
            stacklevel=stacklevel + 1,
        )


def final_step_size(state: Any) -> Any:
    """The step size in a sampler's last state, or ``None``: NumPyro's HMC/NUTS keep it in
    ``state.adapt_state.step_size``, our SG-MCMC kernels in ``state.info.step_size``."""
    for path in (("adapt_state", "step_size"), ("info", "step_size")):
        value = state
        for part in path:
            value = getattr(value, part, None)
        if value is not None:
            return value
    return None

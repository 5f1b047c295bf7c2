"""Convergence diagnostics in weight space and in function space, side by side.

Example:
    >>> import numpy as np
    >>> import bnn_ppl as bp
    >>> rng = np.random.default_rng(0)
    >>> draws = {"w": rng.normal(size=(4, 500, 3))}
    >>> s = bp.diagnostics.weight_space(draws)
    >>> bool(s.rhat["w"].max() < 1.01), s.fraction_above(1.1)
    (True, 0.0)
"""

# Notes:
#
# Izmailov et al. (2021) judged HMC's convergence with R-hat ≤ 1.1 on the *predictions*; Vehtari
# et al. (2021) recommend rank-normalised split R-hat ≤ 1.01; and in *weight* space R-hat of a
# neural network is poor almost by construction (permutation symmetry: chains that settle in
# equivalent modes disagree on every weight while agreeing on every prediction). This module
# computes both, through ArviZ (rank-normalised split R-hat, bulk and tail ESS), so users can see
# the two side by side:
#
# * :func:`weight_space` - every parameter of every site,
# * :func:`function_space` - the predictive probabilities (classification) or predictive means
#   (regression) at given inputs, computed over chunks of inputs,
# * :func:`sampler_summary` - per chain: whether it moved at all (:func:`check_chains`: a frozen
#   or stuck chain is a :class:`StuckChainWarning`, never a success), acceptance, divergences,
#   step size and leapfrog steps,
# * :func:`to_inference_data` - ArviZ's ``from_numpyro`` plus a ``function_space`` group.
#
# Samples must keep their chains apart: ``mcmc.get_samples(group_by_chain=True)``, i.e. every
# array is ``(chains, draws, *shape)``.

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from bnn_ppl import validation
from bnn_ppl._compat import arviz
from bnn_ppl.diagnostics import rank as rank_diagnostics
from bnn_ppl.diagnostics.chain_health import (
    check_chains,
    final_step_size,
    warn_if_stuck,
)
from bnn_ppl.diagnostics.function_values import function_values
from bnn_ppl.likelihoods import prediction_fields
from bnn_ppl.model import BNN
from bnn_ppl.predictive import predict
from bnn_ppl.types import Array
from bnn_ppl.validation import InputValueError

__all__ = [
    "THRESHOLDS",
    "Convergence",
    "GroupSummary",
    "weight_space",
    "function_space",
    "convergence",
    "rhat_bulk_ess",
    "unknown_as_failing",
    "varying_values",
    "sampler_summary",
    "to_inference_data",
]

THRESHOLDS = (1.01, 1.05, 1.1)
"""R-hat thresholds reported: Vehtari et al.'s 1.01, a middle one, and Izmailov et al.'s 1.1."""

TAIL_PROB = (0.05, 0.95)
"""Quantiles whose ESS define the tail ESS."""


class GroupSummary(NamedTuple):
    """R-hat and ESS of one group of quantities (a layer, or the predictions).

    ``rhat_quantiles`` are the 50/90/99% quantiles and the maximum; ``frac_above`` maps each
    threshold of :data:`THRESHOLDS` to the fraction of quantities whose R-hat exceeds it.
    """

    name: str
    size: int
    rhat_quantiles: tuple[float, float, float, float]
    frac_above: dict[float, float]
    ess_bulk_min: float
    ess_bulk_median: float
    ess_tail_min: float


class Convergence(NamedTuple):
    """Per-quantity rank-normalised split R-hat and bulk/tail ESS, keyed by site (or by
    ``"predictive"`` in function space); each array has the quantity's shape."""

    rhat: dict[str, np.ndarray]
    ess_bulk: dict[str, np.ndarray]
    ess_tail: dict[str, np.ndarray]

    def all_rhat(self) -> np.ndarray:
        """Every R-hat value, flattened."""
        return np.concatenate([np.ravel(v) for v in self.rhat.values()])

    def fraction_above(self, threshold: float) -> float:
        """Fraction of all quantities with R-hat above ``threshold``."""
        return float(np.mean(self.all_rhat() > threshold))

    def summary(self, by: str = "layer") -> list[GroupSummary]:
        """Summaries per layer (the site name up to its last dot), per site, or overall."""
        validation.check_choice("by", by, ("layer", "site", "all"))
        groups: dict[str, list[str]] = {}
        for k in self.rhat:
            g = {"layer": k.rsplit(".", 1)[0], "site": k, "all": "all"}[by]
            groups.setdefault(g, []).append(k)
        out = []
        for g, keys in groups.items():
            r = np.concatenate([np.ravel(self.rhat[k]) for k in keys])
            eb = np.concatenate([np.ravel(self.ess_bulk[k]) for k in keys])
            et = np.concatenate([np.ravel(self.ess_tail[k]) for k in keys])
            q = np.nanquantile(r, [0.5, 0.9, 0.99]) if r.size else [np.nan] * 3
            out.append(
                GroupSummary(
                    name=g,
                    size=int(r.size),
                    rhat_quantiles=(float(q[0]), float(q[1]), float(q[2]), float(np.nanmax(r))),
                    frac_above={t: float(np.mean(r > t)) for t in THRESHOLDS},
                    ess_bulk_min=float(np.nanmin(eb)),
                    ess_bulk_median=float(np.nanmedian(eb)),
                    ess_tail_min=float(np.nanmin(et)),
                )
            )
        return out

    def table(self, by: str = "layer") -> str:
        """A plain-text table of :meth:`summary`."""
        head = (
            f"{'group':<24}{'size':>8}{'R-hat p50':>11}{'p90':>8}{'max':>8}"
            + "".join(f"{'>' + str(t):>8}" for t in THRESHOLDS)
            + f"{'ESS bulk min':>14}{'ESS tail min':>14}"
        )
        rows = [head]
        for s in self.summary(by):
            rows.append(
                f"{s.name:<24}{s.size:>8}{s.rhat_quantiles[0]:>11.3f}{s.rhat_quantiles[1]:>8.3f}"
                f"{s.rhat_quantiles[3]:>8.3f}"
                + "".join(f"{s.frac_above[t]:>8.1%}" for t in THRESHOLDS)
                + f"{s.ess_bulk_min:>14.1f}{s.ess_tail_min:>14.1f}"
            )
        return "\n".join(rows)


def _chains_draws(name: str, a: Any) -> np.ndarray:
    arr = np.asarray(a)
    if arr.ndim < 2:
        raise InputValueError(
            f"{name} has shape {arr.shape}; diagnostics need (chains, draws, ...): use "
            "mcmc.get_samples(group_by_chain=True)."
        )
    if arr.shape[1] < 4:
        raise InputValueError(f"{name} has {arr.shape[1]} draws per chain; split R-hat needs >= 4.")
    if not np.all(np.isfinite(arr)):
        raise InputValueError(f"{name} contains NaN/inf draws; diagnostics are undefined.")
    return arr


def _flat(a: np.ndarray) -> np.ndarray:
    return a.reshape(a.shape[0], a.shape[1], -1).astype(np.float64)


def varying_values(values: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(chains, draws, ...)`` values flattened to ``(chains, draws, q)``, keeping only the
    quantities that vary (a constant one, one value in every draw of every chain, has no
    R-hat), and the kept quantities' flat indices.

    >>> v = np.zeros((2, 5, 3)); v[..., 1] = np.arange(5)
    >>> kept, index = varying_values(v)
    >>> kept.shape, index.tolist()
    ((2, 5, 1), [1])
    """
    a = np.asarray(values)
    flat = a.reshape(*a.shape[:2], -1)
    index = np.flatnonzero(~np.all(flat == flat[:1, :1], axis=(0, 1)))
    return flat[..., index], index


def rhat_bulk_ess(values: Any) -> tuple[np.ndarray, np.ndarray]:
    """Rank-normalised split R-hat and bulk ESS of ``(chains, draws, ...)`` values, each with
    the quantities' shape: ArviZ's figures, computed for all quantities at once
    (:mod:`bnn_ppl.diagnostics.rank`); :func:`convergence` adds the tail ESS.

    Example:
        >>> import numpy as np
        >>> rhat, ess = rhat_bulk_ess(np.random.default_rng(0).normal(size=(4, 300, 2)))
        >>> rhat.shape, bool(np.all(rhat < 1.05)), bool(np.all(ess > 400))
        ((2,), True, True)
    """
    return rank_diagnostics.rhat_bulk_ess(_chains_draws("values", values))


def unknown_as_failing(rhat: np.ndarray, ess: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``rhat`` and ``ess`` with the figures that could not be computed (NaN) at their failing
    extremes, R-hat ``inf`` and ESS 0, for rules that rank or scale them. An infinite R-hat
    (chains with no variance within) stays infinite: ``np.nan_to_num`` would make it the
    largest float, whose square overflows.

    Example:
        >>> unknown_as_failing(np.array([np.nan, np.inf, 1.0]), np.array([np.nan, 5.0, 9.0]))
        (array([inf, inf,  1.]), array([0., 5., 9.]))
    """
    return np.where(np.isnan(rhat), np.inf, rhat), np.where(np.isnan(ess), 0.0, ess)


def _diagnose(arrays: Mapping[str, np.ndarray]) -> Convergence:
    """The figures of arrays already checked by :func:`_chains_draws`."""
    az = arviz()  # loaded on first use: ``import bnn_ppl`` never loads ArviZ
    rhat, bulk, tail = {}, {}, {}
    for k, a in arrays.items():
        rhat[k], bulk[k] = rank_diagnostics.rhat_bulk_ess(a)
        # tail ESS: the smaller of the 5% and 95% quantile ESS (Vehtari et al. 2021); ArviZ 1.3
        # needs ``prob`` spelled out for plain arrays
        tail[k] = np.asarray(az.ess(_flat(a), method="tail", prob=TAIL_PROB)).reshape(a.shape[2:])
    return Convergence(rhat, bulk, tail)


def weight_space(samples: Mapping[str, Array]) -> Convergence:
    """R-hat and ESS of every parameter (every entry of every site).

    Args:
        samples: site -> ``(chains, draws, *shape)``, as from
            ``mcmc.get_samples(group_by_chain=True)``.

    Raises:
        ValueError: arrays without a chain axis, fewer than 4 draws, or non-finite draws.
    """
    if not samples:
        raise InputValueError("samples is empty; pass mcmc.get_samples(group_by_chain=True).")
    arrays = {k: _chains_draws(f"samples[{k!r}]", v) for k, v in samples.items()}
    lead = {v.shape[:2] for v in arrays.values()}
    if len(lead) != 1:
        raise InputValueError(f"sites disagree on (chains, draws): {sorted(lead)}.")
    return _diagnose(arrays)


def function_space(
    model: BNN,
    samples: Mapping[str, Array],
    x: Any,
    *,
    chunk_size: int | None = 256,
    quantity: str | None = None,
    y: Any = None,
) -> Convergence:
    """R-hat and ESS of the predictions at inputs ``x`` (key ``"predictive"``).

    ``quantity`` picks what is diagnosed (:mod:`bnn_ppl.diagnostics.function_values`): by default
    the
    class probabilities ``(n, K)`` for classification (``"probs"``, what Izmailov et al.
    used) and the predictive means ``(n,)`` for regression (``"mean"``); ``"p_true"`` (needs
    the labels ``y``) and ``"centred_logits"`` are the alternatives for classification.
    Predictions are computed and diagnosed ``chunk_size`` inputs at a time, so only one chunk
    of per-sample predictions is in memory.
    """
    x = validation.as_array("x", x)
    arrays = {k: _chains_draws(f"samples[{k!r}]", v) for k, v in samples.items()}
    chunk = (
        x.shape[0]
        if chunk_size is None
        else int(validation.check_positive("chunk_size", chunk_size))
    )
    if y is not None:
        y = validation.as_array("y", y)
        validation.check_same_length("x", x, "y", y)
    parts = []
    for start in range(0, x.shape[0], chunk):
        rows = slice(start, start + chunk)
        values = function_values(model, arrays, x[rows], quantity, y=None if y is None else y[rows])
        parts.append(_diagnose({"predictive": values}))

    def joined(field: str) -> dict[str, np.ndarray]:
        return {"predictive": np.concatenate([getattr(p, field)["predictive"] for p in parts])}

    return Convergence(joined("rhat"), joined("ess_bulk"), joined("ess_tail"))


def convergence(values: Mapping[str, Array]) -> Convergence:
    """R-hat and ESS of any quantities given as ``(chains, draws, ...)`` arrays, keyed by name
    (e.g. :func:`bnn_ppl.diagnostics.function_values.function_values` of a run).

    Example:
        >>> import numpy as np
        >>> rng = np.random.default_rng(0)
        >>> c = convergence({"f": rng.normal(size=(4, 300, 5))})
        >>> c.rhat["f"].shape, c.fraction_above(1.1)
        ((5,), 0.0)
    """
    if not values:
        raise InputValueError("values is empty; pass name -> (chains, draws, ...) arrays.")
    return _diagnose({k: _chains_draws(f"values[{k!r}]", v) for k, v in values.items()})


def sampler_summary(mcmc: Any, *, warn: bool = True) -> list[dict[str, Any]]:
    """Per chain: whether it moved (:func:`check_chains`) and what the sampler recorded.

    Every row has ``chain``, ``draws``, ``moving`` (``False`` for a frozen or stuck chain),
    ``identical_fraction``, ``judged`` (``False`` below
    :data:`~bnn_ppl.diagnostics.chain_health.MIN_DRAWS`
    draws: too few to judge the draws), ``relative_movement`` (its move per draw over the
    other chains', NaN with one chain) and ``warning`` (the problems found, ``""`` if none). Where
    available it also has ``accept_prob`` (mean), ``divergences``, ``step_size`` (final,
    adapted) and ``num_steps`` (mean leapfrog steps): collect ``accept_prob``, ``diverging`` and
    ``num_steps`` through ``extra_fields`` (:func:`~bnn_ppl.inference.fit` does for HMC and
    NUTS). Works for any ``numpyro.infer.MCMC`` after ``run``, SG-MCMC kernels included.

    A chain that is not moving is never reported as a success: its row says so and, with
    ``warn``, a :class:`StuckChainWarning` is raised.
    """
    samples = mcmc.get_samples(group_by_chain=True)
    extra = mcmc.get_extra_fields(group_by_chain=True)
    health = check_chains(samples, extra, final_step_size(mcmc.last_state), warn=False)
    if warn:
        warn_if_stuck(health)
    rows = []
    for h in health:
        row: dict[str, Any] = {
            "chain": h.chain,
            "draws": h.draws,
            "moving": h.moving,
            "identical_fraction": h.identical_fraction,
            "judged": h.judged,
            "relative_movement": h.relative_movement,
            "warning": "; ".join(h.problems),
        }
        if "accept_prob" in extra:
            row["accept_prob"] = float(np.mean(np.asarray(extra["accept_prob"])[h.chain]))
        if "diverging" in extra:
            row["divergences"] = int(np.sum(np.asarray(extra["diverging"])[h.chain]))
        if h.step_size is not None:
            row["step_size"] = h.step_size
        if "num_steps" in extra:
            row["num_steps"] = float(np.mean(np.asarray(extra["num_steps"])[h.chain]))
        rows.append(row)
    return rows


def to_inference_data(
    mcmc: Any, model: BNN | None = None, x: Any = None, *, chunk_size: int | None = None
) -> Any:
    """``arviz.from_numpyro(mcmc)`` plus, given ``model`` and ``x``, a ``function_space`` group
    holding the per-draw predictions at ``x`` (``probs`` with dims chain/draw/obs/class, or
    ``mean`` and ``scale`` with dims chain/draw/obs)."""
    import xarray as xr

    idata = arviz().from_numpyro(mcmc)
    if model is None:
        return idata
    if x is None:
        raise InputValueError("x is required with model: the inputs to predict at.")
    samples = mcmc.get_samples(group_by_chain=True)
    chains, draws = next(iter(samples.values())).shape[:2]
    pred = predict(model, samples, x, chunk_size=chunk_size)

    def dims(a: Array, *tail: str) -> tuple[tuple[str, ...], np.ndarray]:
        a = np.asarray(a).reshape(chains, draws, *np.shape(a)[1:])
        return ("chain", "draw", *tail[: a.ndim - 2]), a

    ds = xr.Dataset(
        {
            k: dims(v, "obs", "class" if k == "probs" else "output")
            for k, v in prediction_fields(pred).items()
        }
    )
    idata["function_space"] = ds
    return idata

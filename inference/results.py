"""Every inference result as a :class:`~bnn_ppl.posterior.Posterior`."""

# Notes:
#
# * :func:`from_mcmc` - a finished ``numpyro.infer.MCMC``: :func:`~bnn_ppl.inference.hmc`,
#   :func:`~bnn_ppl.inference.nuts`, or any kernel run by hand, our SG-MCMC kernels included.
#   Draws keep their ``(chain, draw)`` axes; NumPyro's ``extra_fields`` become ArviZ's sample
#   statistics (:data:`NUMPYRO_STATS`; ``potential_energy`` becomes ``lp = -potential_energy``,
#   NUTS's ``tree_depth`` is ``ceil(log2(num_steps + 1))``; an SG-MCMC kernel's ``info`` gives
#   ``step_size`` and ``lp`` from its (minibatch) potential estimate).
# * :func:`from_svi` - a fitted mean-field guide: ``num_draws`` draws from it as one chain, the
#   negative ELBO curve as the ``trace`` ``"loss"``.
# * :func:`from_map` - :func:`~bnn_ppl.inference.map_estimate` (one chain, one draw) or
#   :func:`~bnn_ppl.inference.deep_ensemble` (its members as chains, one draw each), with the loss
#   curves and ``lp = -final_loss``.
#
# Add the data groups (per-row log-likelihoods, predictions) with
# :func:`~bnn_ppl.predictive.attach_data`.

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numpyro.infer import HMC, MCMC, NUTS

from bnn_ppl import validation
from bnn_ppl.inference.ensemble import MAPResult
from bnn_ppl.inference.svi import SVIResult
from bnn_ppl.posterior import Posterior
from bnn_ppl.types import PRNGKey
from bnn_ppl.validation import InputTypeError

__all__ = [
    "NUMPYRO_STATS",
    "flat_fields",
    "from_draws",
    "from_map",
    "from_mcmc",
    "from_svi",
]

NUMPYRO_STATS = {
    "accept_prob": "acceptance_rate",
    "diverging": "diverging",
    "energy": "energy",
    "adapt_state.step_size": "step_size",
    "num_steps": "n_steps",
    "info.step_size": "step_size",
}
"""NumPyro ``extra_fields`` -> ArviZ sample-statistic names (``potential_energy`` and an SG-MCMC
kernel's ``info.potential_energy`` become ``lp``, their negative)."""


def _numpy(tree: Mapping[str, Any]) -> dict[str, np.ndarray]:
    return {k: np.asarray(v) for k, v in tree.items()}


def flat_fields(extra: Mapping[str, Any]) -> dict[str, Any]:
    """``{"info": Info(step_size=..., ...)}`` -> ``{"info.step_size": ..., ...}``."""
    out: dict[str, Any] = {}
    for k, v in extra.items():
        if hasattr(v, "_asdict"):
            out.update(flat_fields({f"{k}.{f}": a for f, a in v._asdict().items()}))
        else:
            out[k] = v
    return out


def _method(kernel: Any) -> str:
    if isinstance(kernel, NUTS):
        return "nuts"
    if isinstance(kernel, HMC):
        return "hmc"
    return type(kernel).__name__.lower()


def from_mcmc(
    mcmc: MCMC, *, method: str | None = None, config: Mapping[str, Any] | None = None
) -> Posterior:
    """The Posterior of a finished ``numpyro.infer.MCMC`` (see the module doc).

    Args:
        mcmc: after ``run``; its sample statistics are the ``extra_fields`` it collected
            (:func:`~bnn_ppl.inference.fit` collects all of them for HMC and NUTS; for an SG-MCMC
            kernel run by hand pass ``extra_fields=("info",)`` to get ``step_size`` and ``lp``).
        method: the method's name (default from the kernel: ``"hmc"``, ``"nuts"``, ``"sgld"``,
            ...).
        config: JSON-able settings to record; ``num_warmup``, ``num_samples``, ``num_chains``,
            ``thinning`` and ``kernel`` are filled in from ``mcmc`` unless given.

    Example:
        >>> import numpy as np
        >>> import bnn_ppl as bp
        >>> from bnn_ppl.models import MLP
        >>> from bnn_ppl.inference import hmc, from_mcmc
        >>> model = bp.BNN(MLP(hidden=(), out=1), bp.priors.Normal(1.0),
        ...     bp.likelihoods.Gaussian(0.5))
        >>> x = np.linspace(-1, 1, 20, dtype=np.float32)[:, None]
        >>> mcmc = hmc(model, x, 2 * x[:, 0], num_warmup=100, num_samples=10, num_chains=2)
        >>> post = from_mcmc(mcmc)
        >>> post.method, post.samples["Dense_0.kernel"].shape, sorted(post.sample_stats)
        ('hmc', (2, 10, 1, 1), ['acceptance_rate', 'diverging', 'energy', 'lp', 'n_steps',
        'step_size'])
    """
    if not isinstance(mcmc, MCMC):
        raise InputTypeError(f"mcmc must be a numpyro.infer.MCMC, got {type(mcmc).__name__}.")
    base = {
        "num_warmup": int(mcmc.num_warmup),
        "num_samples": int(mcmc.num_samples),
        "num_chains": int(mcmc.num_chains),
        "thinning": int(mcmc.thinning),
    }
    return from_draws(
        mcmc.get_samples(group_by_chain=True),
        flat_fields(mcmc.get_extra_fields(group_by_chain=True)),
        mcmc.sampler,
        method=method,
        config={**base, **dict(config or {})},
    )


def from_draws(
    samples: Mapping[str, Any],
    extra: Mapping[str, Any],
    kernel: Any,
    *,
    method: str | None = None,
    config: Mapping[str, Any] | None = None,
) -> Posterior:
    """As :func:`from_mcmc`, from ``(chain, draw)``-shaped ``samples`` and flattened extra
    fields (``{"adapt_state.step_size": ...}``) that ``kernel`` produced (e.g. the
    :class:`~bnn_ppl.inference.checkpoint.segments.Draws` of a checkpointed run)."""
    samples = _numpy(samples)
    extra = _numpy(extra)
    stats = {NUMPYRO_STATS[k]: v for k, v in extra.items() if k in NUMPYRO_STATS}
    for k in ("potential_energy", "info.potential_energy"):
        if k in extra:
            stats["lp"] = -extra[k]
    if isinstance(kernel, NUTS) and "num_steps" in extra:
        stats["tree_depth"] = np.ceil(np.log2(extra["num_steps"] + 1.0)).astype(np.int32)
    lead = next(iter(samples.values())).shape[:2]
    stats = {k: v for k, v in stats.items() if v.shape == lead}  # per-draw scalars only
    base = {"kernel": type(kernel).__name__}
    return Posterior(
        method or _method(kernel), samples, stats, config={**base, **dict(config or {})}
    )


def from_svi(
    result: SVIResult,
    rng_key: PRNGKey,
    num_draws: int,
    *,
    config: Mapping[str, Any] | None = None,
) -> Posterior:
    """``num_draws`` draws from a fitted guide (:func:`~bnn_ppl.inference.svi_mean_field`) as
    one chain, method ``"svi"``, with the negative-ELBO curve as ``trace["loss"]``."""
    if not isinstance(result, SVIResult):
        raise InputTypeError(f"result must be an SVIResult, got {type(result).__name__}.")
    num_draws = validation.check_int("num_draws", num_draws)
    draws = result.sample_posterior(validation.check_key("rng_key", rng_key), num_draws)
    samples = {k: np.asarray(v)[None] for k, v in draws.items()}
    base = {"num_steps": int(np.shape(result.losses)[0]), "num_draws": num_draws}
    return Posterior(
        "svi",
        samples,
        config={**base, **dict(config or {})},
        trace={"loss": np.asarray(result.losses)},
    )


def from_map(
    result: MAPResult, *, method: str | None = None, config: Mapping[str, Any] | None = None
) -> Posterior:
    """A MAP estimate (``method="map"``: one chain of one draw) or a deep ensemble
    (``"ensemble"``: members as chains, one draw each), told apart by the loss curves' shape
    (``(steps,)`` or ``(members, steps)``). ``trace`` holds ``"loss"`` and ``"final_loss"``,
    ``sample_stats`` ``lp = -final_loss``."""
    if not isinstance(result, MAPResult):
        raise InputTypeError(f"result must be a MAPResult, got {type(result).__name__}.")
    losses = np.asarray(result.losses)
    final = np.asarray(result.final_loss)
    ensemble = losses.ndim == 2
    if ensemble:
        samples = {k: np.asarray(v)[:, None] for k, v in result.params.items()}
    else:
        samples = {k: np.asarray(v)[None, None] for k, v in result.params.items()}
        losses, final = losses[None], final[None]
    lp = -final.reshape(-1, 1)
    base = {"num_steps": int(losses.shape[1]), "num_members": int(losses.shape[0])}
    return Posterior(
        method or ("ensemble" if ensemble else "map"),
        samples,
        {"lp": lp},
        config={**base, **dict(config or {})},
        trace={"loss": losses, "final_loss": final},
    )

"""What moves a reference run's chains: plain HMC, or parallel tempering."""

# Notes:
#
# :func:`~bnn_ppl.inference.reference_hmc` decides when to stop and
# :mod:`~bnn_ppl.inference.reference.chains` warms the chains up, samples them in segments and
# (:mod:`~bnn_ppl.inference.reference.checkpoint`) commits and replays them, the same for every
# kernel. What differs between kernels is here, behind one interface, :class:`ChainKernel`:
#
# * ``build`` - the NumPyro ``MCMCKernel`` on the run's potential;
# * ``init_params`` - the chains' starts: independent prior draws, one per chain
#   (:class:`HMCChains`) or one per rung of every chain's ladder (:class:`TemperingChains`);
#   ``first_params`` is one of them (what the checkpoint's fingerprint traces);
# * ``extra_fields`` - what ``MCMC`` collects per draw (``potential_energy`` at least: the
#   chains' ``lp`` levels);
# * ``summary`` - what a segment keeps of the chains' last state, ``(chains, ...)`` arrays
#   (committed with its draws by a checkpointed run): ``step_size``, the final step size per
#   chain that :func:`~bnn_ppl.diagnostics.chain_health.check_chains` reads, and the kernel's own
# figures;
# * ``gradients`` - the gradient evaluations a segment took;
# * ``record`` and ``problem`` - the kernel's figures in ``config["convergence"]``, and what the
#   not-converged warning should add; ``after_first_segment`` - warnings once sampling began.
#
# :func:`chain_kernel` picks the kernel from a :class:`~bnn_ppl.config.ReferenceHMCConfig`
# (``num_temperatures`` >= 2: tempering).

from __future__ import annotations

from typing import Any, ClassVar

import jax
import numpy as np
from numpyro.infer.mcmc import MCMCKernel

from bnn_ppl.config import ReferenceHMCConfig
from bnn_ppl.diagnostics.chain_health import final_step_size
from bnn_ppl.inference.mcmc.checks import warn_if_shortened
from bnn_ppl.inference.mcmc.run import DEFAULT_EXTRA_FIELDS, HMC, hmc_kwargs
from bnn_ppl.inference.potential.bnn import FullBatchPotential
from bnn_ppl.inference.reference.tempering import ParallelTempering
from bnn_ppl.model import BNN

__all__ = [
    "STALLED_SWAP_RATE",
    "TEMPERING_FIELDS",
    "ChainKernel",
    "HMCChains",
    "TemperingChains",
    "chain_kernel",
]

TEMPERING_FIELDS = ("num_temperatures", "min_beta", "leapfrog_steps", "adapt_ladder")
"""The :class:`~bnn_ppl.config.ReferenceHMCConfig` fields only parallel tempering reads."""

STALLED_SWAP_RATE = 0.01
"""A neighbour pair whose swaps are accepted at a lower mean rate *stalls*: a state crosses it
about once per 200 sweeps (each pair is proposed every second sweep), so the ladder is cut in
two there and the ``β = 1`` rung does not receive the hot rungs' states."""


class ChainKernel:
    """The kernel-specific part of a reference run (see the module doc); ``c`` its settings."""

    name: ClassVar[str] = ""
    extra_fields: ClassVar[tuple[str, ...]] = ("potential_energy",)

    def __init__(self, c: ReferenceHMCConfig):
        self.c = c

    def build(self, model: BNN, x: Any, pot: FullBatchPotential) -> MCMCKernel:
        raise NotImplementedError

    def init_params(self, pot: FullBatchPotential, key: jax.Array) -> Any:
        """One independent prior draw (unconstrained) per chain."""
        return pot.init_params(key, self.c.num_chains, method="prior")

    def first_params(self, init: Any) -> Any:
        """The first chain's start (one set of parameters)."""
        return jax.tree.map(lambda a: a[0], init)

    def summary(self, state: Any) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def gradients(self, extra: dict[str, np.ndarray], draws: int) -> int:
        raise NotImplementedError

    def record(self, summary: dict[str, np.ndarray]) -> dict[str, Any]:
        return {}

    def problem(self, summary: dict[str, np.ndarray]) -> str | None:
        return None

    def after_first_segment(self, summary: dict[str, np.ndarray]) -> None:
        return None


class HMCChains(ChainKernel):
    """:class:`~bnn_ppl.inference.HMC` as :func:`~bnn_ppl.inference.hmc` builds it: step size
    adapted in warmup, the ``mass_matrix`` metric, a fixed trajectory length."""

    name = "HMC"
    extra_fields = DEFAULT_EXTRA_FIELDS

    def build(self, model: BNN, x: Any, pot: FullBatchPotential) -> MCMCKernel:
        c = self.c
        kwargs = hmc_kwargs(
            model, x, c.trajectory_length, c.step_size, True, c.mass_matrix != "identity",
            c.target_accept_prob, c.max_num_steps, c.mass_matrix == "dense",
        )  # fmt: skip
        return HMC(pot, **kwargs)

    def summary(self, state: Any) -> dict[str, np.ndarray]:
        return {"step_size": np.asarray(final_step_size(state)),
                "trajectory_length": np.asarray(state.trajectory_length)}  # fmt: skip

    def gradients(self, extra: dict[str, np.ndarray], draws: int) -> int:
        return int(np.sum(extra["num_steps"]))

    def record(self, summary: dict[str, np.ndarray]) -> dict[str, Any]:
        return {"trajectory_length_used": float(np.mean(summary["trajectory_length"]))}

    def after_first_segment(self, summary: dict[str, np.ndarray]) -> None:
        # as hmc() warns after its run: trajectories shortened to max_num_steps
        warn_if_shortened(summary["step_size"], summary["trajectory_length"],
                          self.c.max_num_steps, stacklevel=3)  # fmt: skip


class TemperingChains(ChainKernel):
    """:class:`~bnn_ppl.inference.ParallelTempering` with ``num_temperatures`` rungs per chain
    (every rung of every ladder started from its own prior draw); ``MCMC`` collects the
    ``β = 1`` rung. ``summary``: ``step_size`` (the ``β = 1`` rung's), ``step_sizes``,
    ``betas`` ``(chains, K)`` and ``swap_rate`` ``(chains, K - 1)``: each neighbour pair's mean
    swap acceptance since sampling began."""

    name = "ParallelTempering"

    def build(self, model: BNN, x: Any, pot: FullBatchPotential) -> MCMCKernel:
        c = self.c
        return ParallelTempering(
            pot, num_temperatures=c.num_temperatures, min_beta=c.min_beta,
            num_steps=c.leapfrog_steps, step_size=c.step_size,
            target_accept_prob=c.target_accept_prob, adapt_ladder=c.adapt_ladder,
        )  # fmt: skip

    def init_params(self, pot: FullBatchPotential, key: jax.Array) -> Any:
        """``(chains, K, ...)``: an independent prior draw for every rung of every ladder."""
        chains, k = self.c.num_chains, self.c.num_temperatures
        flat = pot.init_params(key, chains * k, method="prior")
        return jax.tree.map(lambda a: a.reshape(chains, k, *a.shape[1:]), flat)

    def first_params(self, init: Any) -> Any:
        return jax.tree.map(lambda a: a[0, 0], init)

    def summary(self, state: Any) -> dict[str, np.ndarray]:
        steps = np.exp(np.asarray(state.log_step, np.float64))
        return {
            "step_size": steps[:, 0],
            "step_sizes": steps,
            "betas": np.asarray(state.betas),
            "swap_rate": np.asarray(state.swap_rate),
        }

    def gradients(self, extra: dict[str, np.ndarray], draws: int) -> int:
        c = self.c
        return c.num_chains * draws * c.num_temperatures * c.leapfrog_steps

    def record(self, summary: dict[str, np.ndarray]) -> dict[str, Any]:
        """``{"tempering": ...}``: the ladder and swap rates per chain, and the stalled pairs
        (mean swap rate below :data:`STALLED_SWAP_RATE`) by chain, also in words."""
        betas, rates = np.asarray(summary["betas"]), np.asarray(summary["swap_rate"])
        where = zip(*np.nonzero(rates < STALLED_SWAP_RATE), strict=True)
        stalled = [{"chain": int(c), "pair": [int(k), int(k) + 1],
                    "betas": [float(betas[c, k]), float(betas[c, k + 1])],
                    "swap_rate": float(rates[c, k])} for c, k in where]  # fmt: skip
        pairs = sorted({s["pair"][0] for s in stalled})
        text = "; ".join(_stalled_pair(k, betas, rates) for k in pairs)
        return {"tempering": {
            "num_temperatures": int(betas.shape[-1]),
            "betas": betas.tolist(),
            "swap_rates": rates.tolist(),
            "stalled_pairs": stalled,
            "stalled": text or None,
        }}  # fmt: skip

    def problem(self, summary: dict[str, np.ndarray]) -> str | None:
        text = self.record(summary)["tempering"]["stalled"]
        if text is None:
            return None
        return (
            f"The tempering ladder stalls ({text}): states do not cross those pairs, so the "
            "beta = 1 rung does not get the hot rungs' states; raise num_temperatures (with "
            "adapt_ladder the rungs crowd where swaps fail)."
        )


def _span(values: np.ndarray, fmt: str) -> str:
    lo, hi = float(np.min(values)), float(np.max(values))
    return format(lo, fmt) if format(lo, fmt) == format(hi, fmt) else f"{lo:{fmt}}-{hi:{fmt}}"


def _stalled_pair(k: int, betas: np.ndarray, rates: np.ndarray) -> str:
    """``"rungs k-(k+1) in chain(s) ... (beta ... -> ..., swap rate <= ...)"``."""
    chains = np.flatnonzero(rates[:, k] < STALLED_SWAP_RATE)
    return (f"rungs {k}-{k + 1} in chain(s) {', '.join(map(str, chains))} (beta "
            f"{_span(betas[chains, k], '.3g')} -> {_span(betas[chains, k + 1], '.3g')}, swap "
            f"rate <= {float(np.max(rates[chains, k])):.3f})")  # fmt: skip


def chain_kernel(c: ReferenceHMCConfig) -> ChainKernel:
    """:class:`TemperingChains` when ``c.num_temperatures >= 2``, else :class:`HMCChains`.

    Example:
        >>> from bnn_ppl.config import ReferenceHMCConfig
        >>> import numpy as np
        >>> chain_kernel(ReferenceHMCConfig()).name
        'HMC'
        >>> k = chain_kernel(ReferenceHMCConfig(num_chains=2, num_temperatures=3))
        >>> k.name
        'ParallelTempering'
        >>> summary = {"betas": np.array([[1.0, 0.1, 0.01], [1.0, 0.2, 0.01]]),
        ...            "swap_rate": np.array([[0.0, 0.4], [0.003, 0.5]])}
        >>> k.record(summary)["tempering"]["stalled"]
        'rungs 0-1 in chain(s) 0, 1 (beta 1 -> 0.1-0.2, swap rate <= 0.003)'
    """
    return TemperingChains(c) if c.tempering else HMCChains(c)

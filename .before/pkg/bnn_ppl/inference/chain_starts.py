"""Where a reference run's chains start: independent prior draws, optionally optimised first.

:func:`~bnn_ppl.inference.reference_hmc` starts every chain from an independent prior draw:
over-dispersed starts are what make R-hat meaningful. On a sharp likelihood a prior draw can
be so far out (energy with the noise fixed at 0.05: potential ~10⁷ against ~−600 in the
posterior) that HMC's warmup does not bring it in: the chain's step size and mass matrix are
adapted to where it is stuck, and it stays there (``chains_not_moving``; README, "Reference
posteriors"). :func:`optimised_starts` moves each prior draw by ``steps`` full-batch Adam
steps on the run's own potential first (the optimiser of
:func:`~bnn_ppl.inference.map_estimate`, here unconstrained:
:func:`~bnn_ppl.inference.ensemble.unconstrained_fitter`; Adam with its learning rate
cosine-decayed to 1 %), all chains at once (``jax.vmap``), so warmup begins where the
posterior's mass is.

What this keeps and what it gives up: each chain still starts from its own prior draw, and
the optimisations from different draws end in different basins (the chains' potentials after
it differ by tens of nats on energy), so chains that would sample different modes still
disagree and R-hat still sees it; what is lost is the over-dispersion *within* a basin - a
start at a mode is inside the typical set's shell rather than outside it. Starting HMC from
optimised solutions is the recipe of Sommer et al. (2024, "Microcanonical Langevin Ensembles"),
who start each chain from a deep-ensemble member. The potentials before and after are kept
(:class:`Starts`) and written to the run's record, so a reader sees how far each start moved.

Example:
    >>> import jax, numpy as np
    >>> import bnn_ppl as bp
    >>> from bnn_ppl.inference import full_batch_potential
    >>> from bnn_ppl.models import MLP
    >>> x = np.random.default_rng(0).normal(size=(50, 2)).astype(np.float32)
    >>> y = x @ np.array([1.0, -2.0], np.float32)
    >>> model = bp.BNN(MLP(hidden=(), out=1), bp.priors.Normal(10.0), bp.likelihoods.Gaussian(0.1))
    >>> pot = full_batch_potential(model, x, y)
    >>> prior_draws = pot.init_params(jax.random.key(0), 3, method="prior")
    >>> starts = optimised_starts(pot, prior_draws, steps=500, learning_rate=0.05)
    >>> bool(np.all(starts.potential < starts.prior_potential))
    True
    >>> starts.record()["steps"], len(starts.record()["potential"])
    (500, 3)
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import numpy as np

from bnn_ppl.inference.ensemble import unconstrained_fitter
from bnn_ppl.inference.potential import FullBatchPotential
from bnn_ppl.inference.svi import default_optimizer

__all__ = ["STARTS_PREFIX", "Starts", "optimised_starts", "starts_from_arrays"]

STARTS_PREFIX = "starts/"
"""The prefix of the :class:`Starts` arrays a checkpointed run commits with its warmup."""


class Starts(NamedTuple):
    """The chains' starts after :func:`optimised_starts`: ``params`` (unconstrained,
    ``(chains, ...)``), the potential at each chain's prior draw (``prior_potential``) and after
    ``steps`` Adam steps at ``learning_rate`` (``potential``), ``(chains,)`` each."""

    params: Any
    prior_potential: np.ndarray
    potential: np.ndarray
    steps: int
    learning_rate: float

    def record(self) -> dict[str, Any]:
        """JSON-ready figures: ``steps``, ``learning_rate``, ``gradients`` (``steps`` per chain)
        and both potentials per chain."""
        return {
            "steps": self.steps,
            "learning_rate": self.learning_rate,
            "gradients": self.steps * len(self.potential),
            "prior_potential": [float(v) for v in self.prior_potential],
            "potential": [float(v) for v in self.potential],
        }

    def arrays(self) -> dict[str, np.ndarray]:
        """The figures as arrays (:data:`STARTS_PREFIX` names), for a checkpoint's warmup record
        (the parameters are not kept: warmup's final state replaces them)."""
        return {
            f"{STARTS_PREFIX}prior_potential": np.asarray(self.prior_potential),
            f"{STARTS_PREFIX}potential": np.asarray(self.potential),
            f"{STARTS_PREFIX}steps": np.asarray(self.steps),
            f"{STARTS_PREFIX}learning_rate": np.asarray(self.learning_rate),
        }


def starts_from_arrays(arrays: dict[str, np.ndarray]) -> Starts | None:
    """The :class:`Starts` figures read back from :meth:`Starts.arrays` (``params=None``), or
    ``None`` when ``arrays`` holds none (a run without ``init_steps``)."""
    if f"{STARTS_PREFIX}potential" not in arrays:
        return None
    a = {k[len(STARTS_PREFIX) :]: v for k, v in arrays.items() if k.startswith(STARTS_PREFIX)}
    return Starts(None, np.asarray(a["prior_potential"]), np.asarray(a["potential"]),
                  int(a["steps"]), float(a["learning_rate"]))  # fmt: skip


def optimised_starts(
    pot: FullBatchPotential, init: Any, steps: int, learning_rate: float
) -> Starts:
    """Each chain's start (``init``: unconstrained, ``(chains, ...)``) moved by ``steps``
    full-batch Adam steps on ``pot``'s potential (learning rate ``learning_rate``,
    cosine-decayed to 1 %), all chains at once; deterministic (no key)."""
    fit = unconstrained_fitter(pot, default_optimizer(learning_rate, steps), steps, None)

    def one(u0: Any, data: Any) -> tuple[Any, jax.Array, jax.Array]:
        res = fit(jax.random.key(0), u0, data)  # (full batch: the key is not used)
        return res.params, pot.potential_fn_gen(data)(u0), res.final_loss

    params, before, after = jax.jit(jax.vmap(one, in_axes=(0, None)))(init, pot.data)
    after = np.asarray(after)
    bad = np.flatnonzero(~np.isfinite(after))
    if bad.size:
        raise FloatingPointError(
            f"the optimised starts of chain(s) {bad.tolist()} diverged (potential "
            f"{after[bad].tolist()} after {steps} Adam steps at learning rate {learning_rate}): "
            "lower init_learning_rate."
        )
    return Starts(params, np.asarray(before), after, int(steps), float(learning_rate))

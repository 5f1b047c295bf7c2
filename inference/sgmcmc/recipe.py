"""The SG-MCMC recipe :func:`~bnn_ppl.inference.fit` runs for an SG-MCMC config.

A cyclical cosine step size of ``cycle_length`` steps and one draw per cycle end; when the
config gives no ``step_size``, the recommended one for the curvature and minibatch noise
measured at a MAP estimate of ``map_steps`` Adam steps. Checkpointed fits build the same
kernel, keys and initial parameters through :func:`sgmcmc_setup`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from numpyro.infer import MCMC

from bnn_ppl import validation
from bnn_ppl.config import SGMCMCConfig
from bnn_ppl.divergence import DivergedError
from bnn_ppl.inference.ensemble import map_estimate
from bnn_ppl.inference.potential.bnn import FullBatchPotential, full_batch_potential
from bnn_ppl.inference.sgmcmc.accuracy import accuracy_summary
from bnn_ppl.inference.sgmcmc.atmc import ATMC
from bnn_ppl.inference.sgmcmc.schedules import cycle_end_samples, cyclical_cosine
from bnn_ppl.inference.sgmcmc.sghmc import SGHMC
from bnn_ppl.inference.sgmcmc.sgld import SGLD
from bnn_ppl.inference.sgmcmc.sgnht import SGNHT
from bnn_ppl.inference.sgmcmc.step_size import gradient_scales, recommended_step_size
from bnn_ppl.model import BNN
from bnn_ppl.posterior import Posterior
from bnn_ppl.types import Params, PRNGKey

__all__ = ["KERNELS", "run_sgmcmc", "sgmcmc_posterior", "sgmcmc_setup"]

KERNELS = {"sgld": SGLD, "sghmc": SGHMC, "sgnht": SGNHT, "atmc": ATMC}
"""The kernel class of each SG-MCMC method name."""


def sgmcmc_setup(
    model: BNN, x: Any, y: Any, c: SGMCMCConfig, key: PRNGKey, *,
    devices: Sequence[jax.Device] | None = None, dtype: Any = None, progress_bar: bool = False,
) -> tuple[Callable[[], Any], FullBatchPotential, Params, PRNGKey, dict[str, Any]]:  # fmt: skip
    """``(kernel factory, potential, init params, run key, extra config)`` of an SG-MCMC fit:
    the step size (given, or recommended at a MAP estimate: ``progress_bar`` shows that MAP's
    progress) and the cyclical schedule."""
    kernel_cls = KERNELS[c.method]
    pot = full_batch_potential(  # chains are vectorized
        model, x, y, chunk_size=c.chunk_size, vectorized_chains=c.num_chains,
        chain_batching=c.chain_batching, devices=devices, dtype=dtype,
    )  # fmt: skip
    batch = validation.check_batch_size("batch_size", c.batch_size, pot.num_data)
    map_key, scale_key, init_key, run_key = jax.random.split(key, 4)
    step, extra = c.step_size, {}
    if step is None:
        found = map_estimate(
            model, x, y, num_steps=c.map_steps, batch_size=batch,
            init_method=c.init_method, rng_key=map_key, chunk_size=c.chunk_size,
            progress_bar=progress_bar,
        )  # fmt: skip
        scales = gradient_scales(pot, pot.unconstrain(found.params), batch, rng_key=scale_key)
        step = recommended_step_size(c.method.upper(), scales)
        extra = {"step_size_used": step, "scales": scales._asdict()}
    n, chains = c.cycle_length, c.num_chains
    init = pot.init_params(init_key, chains if chains > 1 else None, method=c.init_method)
    extra = {k: (float(v) if isinstance(v, np.floating | float) else v) for k, v in extra.items()}
    extra["scales"] = {k: float(v) for k, v in extra.get("scales", {}).items()} or None

    def kernel() -> Any:
        return kernel_cls(pot, batch_size=batch, step_size=cyclical_cosine(step, n))

    return kernel, pot, init, run_key, extra


def sgmcmc_posterior(c: SGMCMCConfig, samples: dict, extra: dict) -> Posterior:
    """The Posterior of SG-MCMC cycle-end ``samples`` (refused if not finite)."""
    for name, value in samples.items():
        if not np.all(np.isfinite(value)):
            raise DivergedError(
                c.method, f"the draws of {name!r}", value, np.argwhere(~np.isfinite(value))[0]
            )
    return Posterior(c.method, samples, config=c.to_dict() | extra)


def run_sgmcmc(
    model: BNN, x: Any, y: Any, c: SGMCMCConfig, key: PRNGKey, *,
    devices: Sequence[jax.Device] | None = None, dtype: Any = None, progress_bar: bool = False,
) -> Posterior:  # fmt: skip
    """Run the recipe: vectorized chains, the last step of every cycle kept; what the
    statistics of every sampling step show went wrong is warned about and kept in
    ``config["accuracy"]``."""
    kernel, pot, init, run_key, extra = sgmcmc_setup(
        model, x, y, c, key, devices=devices, dtype=dtype, progress_bar=progress_bar
    )
    n = c.cycle_length
    mcmc = MCMC(
        kernel(),
        num_warmup=c.num_warmup * n,
        num_samples=c.num_samples * n,
        thinning=n,  # the last step of every cycle, and only it
        num_chains=c.num_chains,
        chain_method="vectorized",
        progress_bar=False,
        jit_model_args=True,
        progress_rate=n,  # (with the bar: one update per cycle)
    )
    mcmc.progress_bar = progress_bar  # (NumPyro turns it off whenever CI is set)
    mcmc.run(run_key, *pot.args, init_params=init)
    samples = {k: np.asarray(v) for k, v in cycle_end_samples(mcmc, n, group_by_chain=True).items()}
    return sgmcmc_posterior(c, samples, extra | {"accuracy": accuracy_summary(mcmc)})

"""Inference for Bayesian neural networks (installed as ``bnn_ppl.inference``).

* :func:`full_batch_potential` - the sharded, chunked, tempered potential of a BNN.
* :class:`HMC`, :class:`NUTS` - NumPyro's kernels on that potential, data as jit arguments.
* :func:`hmc`, :func:`nuts` - one call from ``(model, x, y)`` to a finished ``numpyro.infer.MCMC``.
* :func:`svi_mean_field` - the mean-field VI baseline on NumPyro's SVI.
* :func:`map_estimate`, :func:`deep_ensemble` - MAP by optax on the same potential, and
  ensembles of MAP solutions trained in parallel.
"""

from bnn_ppl.inference.ensemble import MAPResult, deep_ensemble, map_estimate
from bnn_ppl.inference.hmc import HMC, NUTS, default_trajectory_length, hmc, nuts
from bnn_ppl.inference.potential import FullBatchPotential, ShardedData, full_batch_potential
from bnn_ppl.inference.svi import SVIResult, svi_mean_field

__all__ = [
    "FullBatchPotential",
    "HMC",
    "MAPResult",
    "NUTS",
    "SVIResult",
    "ShardedData",
    "deep_ensemble",
    "default_trajectory_length",
    "full_batch_potential",
    "hmc",
    "map_estimate",
    "nuts",
    "svi_mean_field",
]

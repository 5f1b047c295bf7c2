"""Inference for Bayesian neural networks (installed as ``bnn_ppl.inference``).

* :func:`full_batch_potential` - the sharded, chunked, tempered potential of a BNN.
* :class:`HMC`, :class:`NUTS` - NumPyro's kernels on that potential, data as jit arguments.
* :func:`hmc`, :func:`nuts` - one call from ``(model, x, y)`` to a finished ``numpyro.infer.MCMC``.
"""

from bnn_ppl.inference.hmc import HMC, NUTS, default_trajectory_length, hmc, nuts
from bnn_ppl.inference.potential import FullBatchPotential, ShardedData, full_batch_potential

__all__ = [
    "FullBatchPotential",
    "HMC",
    "NUTS",
    "ShardedData",
    "default_trajectory_length",
    "full_batch_potential",
    "hmc",
    "nuts",
]

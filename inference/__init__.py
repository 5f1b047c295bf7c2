"""Inference for Bayesian neural networks (installed as ``bnn_ppl.inference``).

* :func:`full_batch_potential` - the sharded, chunked, tempered potential of a BNN.
* :class:`HMC`, :class:`NUTS` - NumPyro's kernels on that potential, data as jit arguments.
* :func:`hmc`, :func:`nuts` - one call from ``(model, x, y)`` to a finished ``numpyro.infer.MCMC``.
* :func:`run_chain` - checkpointed, resumable runs with streamed samples and predictions.
* :class:`SGLD`, :class:`SGHMC`, :class:`SGNHT`, :class:`ATMC` - SG-MCMC kernels for NumPyro's
  ``MCMC`` on minibatch gradients (:func:`gradient_estimator`), with :mod:`schedules`.
* :func:`svi_mean_field` - the mean-field VI baseline on NumPyro's SVI.
* :func:`map_estimate`, :func:`deep_ensemble` - MAP by optax on the same potential, and
  ensembles of MAP solutions trained in parallel.
"""

from bnn_ppl.inference import schedules
from bnn_ppl.inference.atmc import ATMC
from bnn_ppl.inference.checkpoint import (
    ChainResult,
    SegmentInfo,
    iter_segments,
    load_bma,
    load_extra_fields,
    load_predictions,
    load_samples,
    run_chain,
    run_config,
)
from bnn_ppl.inference.ensemble import MAPResult, deep_ensemble, map_estimate
from bnn_ppl.inference.gradients import (
    GradientEstimator,
    SGMCMCKernel,
    SGMCMCState,
    full_batch_estimator,
    gradient_estimator,
)
from bnn_ppl.inference.hmc import HMC, NUTS, default_trajectory_length, hmc, nuts
from bnn_ppl.inference.potential import FullBatchPotential, ShardedData, full_batch_potential
from bnn_ppl.inference.sghmc import SGHMC
from bnn_ppl.inference.sgld import SGLD
from bnn_ppl.inference.sgnht import SGNHT
from bnn_ppl.inference.streaming import RunningBMA
from bnn_ppl.inference.svi import SVIResult, svi_mean_field

__all__ = [
    "ATMC",
    "ChainResult",
    "FullBatchPotential",
    "GradientEstimator",
    "HMC",
    "MAPResult",
    "NUTS",
    "RunningBMA",
    "SGHMC",
    "SGLD",
    "SGMCMCKernel",
    "SGMCMCState",
    "SGNHT",
    "SVIResult",
    "SegmentInfo",
    "ShardedData",
    "deep_ensemble",
    "default_trajectory_length",
    "full_batch_estimator",
    "full_batch_potential",
    "gradient_estimator",
    "hmc",
    "iter_segments",
    "load_bma",
    "load_extra_fields",
    "load_predictions",
    "load_samples",
    "map_estimate",
    "nuts",
    "run_chain",
    "run_config",
    "schedules",
    "svi_mean_field",
]

from bnn_ppl.inference import distributed  # noqa: E402  (multi-process runs: jax.distributed)

__all__ += ["distributed"]

"""Inference for Bayesian neural networks (installed as ``bnn_ppl.inference``).

:func:`fit` runs any :mod:`bnn_ppl.config` method to a :class:`~bnn_ppl.Posterior`
(:func:`fit_run`: into a run folder); :func:`full_batch_potential` and :func:`model_potential`
give NumPyro's kernels (:class:`HMC`, :class:`NUTS`, the SG-MCMC kernels) a sharded, chunked
potential. Everything else lives in the concept subpackages: ``potential``, ``mcmc``,
``sgmcmc``, ``reference``, ``checkpoint`` (``docs/architecture.md``).
"""

from bnn_ppl.inference.checkpoint.segments import MCMCPlan, run_segments
from bnn_ppl.inference.ensemble import deep_ensemble, map_estimate
from bnn_ppl.inference.fitting import FitData, fit
from bnn_ppl.inference.mcmc.run import HMC, NUTS, default_trajectory_length
from bnn_ppl.inference.mcmc.run import hmc as hmc  # deprecated
from bnn_ppl.inference.mcmc.run import nuts as nuts  # deprecated
from bnn_ppl.inference.potential import distributed
from bnn_ppl.inference.potential.bnn import FullBatchPotential, full_batch_potential
from bnn_ppl.inference.potential.numpyro_model import ModelData, ModelPotential, model_potential
from bnn_ppl.inference.reference.noise import heldout_noise
from bnn_ppl.inference.reference.recipe import (
    ConvergenceCheck,
    ReferenceNotConvergedWarning,
    ReferenceRun,
    reference_hmc,
)
from bnn_ppl.inference.reference.tempering import ParallelTempering
from bnn_ppl.inference.results import from_map, from_mcmc, from_svi
from bnn_ppl.inference.run_folder import fit_run
from bnn_ppl.inference.sgmcmc import schedules
from bnn_ppl.inference.sgmcmc.accuracy import SGMCMCAccuracyWarning, check_accuracy
from bnn_ppl.inference.sgmcmc.atmc import ATMC
from bnn_ppl.inference.sgmcmc.gradients import full_batch_estimator, gradient_estimator
from bnn_ppl.inference.sgmcmc.kernel import SGMCMCKernel
from bnn_ppl.inference.sgmcmc.sghmc import SGHMC
from bnn_ppl.inference.sgmcmc.sgld import SGLD
from bnn_ppl.inference.sgmcmc.sgnht import SGNHT
from bnn_ppl.inference.sgmcmc.step_size import (
    gradient_scales,
    recommended_friction,
    recommended_step_size,
)
from bnn_ppl.inference.svi import svi_mean_field

# hmc() and nuts() are deprecated (DeprecationWarning): importable, not listed
__all__ = [
    "fit",
    "FitData",
    "fit_run",
    "full_batch_potential",
    "FullBatchPotential",
    "model_potential",
    "ModelPotential",
    "ModelData",
    "distributed",
    "HMC",
    "NUTS",
    "default_trajectory_length",
    "run_segments",
    "MCMCPlan",
    "SGLD",
    "SGHMC",
    "SGNHT",
    "ATMC",
    "SGMCMCKernel",
    "gradient_estimator",
    "full_batch_estimator",
    "gradient_scales",
    "recommended_friction",
    "recommended_step_size",
    "schedules",
    "check_accuracy",
    "SGMCMCAccuracyWarning",
    "reference_hmc",
    "ReferenceRun",
    "ConvergenceCheck",
    "ReferenceNotConvergedWarning",
    "ParallelTempering",
    "heldout_noise",
    "svi_mean_field",
    "map_estimate",
    "deep_ensemble",
    "from_mcmc",
    "from_svi",
    "from_map",
]

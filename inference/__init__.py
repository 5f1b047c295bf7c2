"""Inference for Bayesian neural networks (installed as ``bnn_ppl.inference``).

* :func:`fit` - one driver from a model, data and a :mod:`bnn_ppl.config` dataclass to a
  :class:`bnn_ppl.Posterior`; :func:`fit_run` - the same into a run folder that
  ``bnn-ppl evaluate`` reads (what the examples write).
* :func:`full_batch_potential` - the sharded, chunked, tempered potential of a BNN.
* :func:`model_potential` - the same for any NumPyro model with a data plate.
* :class:`HMC`, :class:`NUTS` - NumPyro's kernels on that potential, data as jit arguments.
* :func:`hmc`, :func:`nuts` - one call from ``(model, x, y)`` to a finished ``numpyro.infer.MCMC``.
* :func:`fit` - one driver from a model and data to a :class:`bnn_ppl.Posterior`, for every
  method; MCMC and SG-MCMC runs checkpoint and resume bit-exactly with ``checkpoint_dir`` and
  log ``progress.jsonl`` there (:mod:`fit_checkpoint`).
* :func:`run_segments` - checkpoint and resume for any NumPyro ``MCMCKernel`` on NumPyro's
  public API (what ``fit(..., checkpoint_dir=...)`` uses; :mod:`resume`); its segments run on
  a :class:`ReusingMCMC`, whose repeated ``run`` reuses the compiled loop (:mod:`loop_reuse`).
* :class:`SGLD`, :class:`SGHMC`, :class:`SGNHT`, :class:`ATMC` - SG-MCMC kernels for NumPyro's
  ``MCMC`` on minibatch gradients (:func:`gradient_estimator`, independent batches and an
  estimate of their noise), with :mod:`schedules` and cycle-end selection (:mod:`cycles`);
  :func:`gradient_scales` and :func:`recommended_step_size` give each sampler's step size, and
  :func:`check_accuracy` warns about a run that could not be accurate, from the statistics of
  every sampling step that the kernels' state carries (:mod:`step_stats`).
* :func:`reference_hmc` - HMC (or, with ``num_temperatures``, parallel tempering;
  :mod:`reference_kernels`) in segments until the test predictions have converged
  (R-hat and ESS checked by the recipe, :mod:`stopping_rule`), or its budget ends (warmup's
  included, :mod:`reference_chains`) or a chain stops moving, and it says so; with a
  ``checkpoint_dir`` it commits every segment and resumes (:mod:`reference_checkpoint`).
* :class:`ParallelTempering` - replica-exchange HMC over a ladder of likelihood temperatures,
  for posteriors whose modes an HMC chain cannot cross (:mod:`tempering`).
* :func:`svi_mean_field` - the mean-field VI baseline on NumPyro's SVI (its guide:
  :class:`MeanFieldGuide`).
* :func:`map_estimate`, :func:`deep_ensemble` - MAP by optax on the same potential, and
  ensembles of MAP solutions trained in parallel.
* :func:`heldout_noise` - a regression reference's fixed noise sd from the training rows alone:
  the cross-validated RMSE of MAP fits (:mod:`noise_choice`).
* :func:`from_mcmc`, :func:`from_svi`, :func:`from_map`, :func:`as_posterior` - any of these
  results as a :class:`bnn_ppl.Posterior` (draws, sample statistics, ArviZ file).
"""

from bnn_ppl._compat import ReusingMCMC
from bnn_ppl.diagnostics.slow_values import Laggard, describe_laggards, laggards
from bnn_ppl.inference.checkpoint.segments import MCMCPlan, run_segments
from bnn_ppl.inference.ensemble import MAPResult, deep_ensemble, map_estimate
from bnn_ppl.inference.fitting import FitData, fit
from bnn_ppl.inference.mcmc.run import HMC, NUTS, default_trajectory_length, hmc, nuts
from bnn_ppl.inference.potential.bnn import FullBatchPotential, ShardedData, full_batch_potential
from bnn_ppl.inference.potential.model_structure import DeterministicSiteWarning
from bnn_ppl.inference.potential.numpyro_model import ModelData, ModelPotential, model_potential
from bnn_ppl.inference.reference.noise import HeldoutNoise, heldout_noise
from bnn_ppl.inference.reference.recipe import (
    ConvergenceCheck,
    ReferenceNotConvergedWarning,
    ReferenceRun,
    reference_hmc,
)
from bnn_ppl.inference.reference.stopping import Projection, project_convergence
from bnn_ppl.inference.reference.tempering import ParallelTempering, TemperingState
from bnn_ppl.inference.results import as_posterior, from_map, from_mcmc, from_svi
from bnn_ppl.inference.run_folder import (
    CONVERGENCE_HEADER,
    chain_summary,
    convergence_cells,
    convergence_summary,
    fit_run,
)
from bnn_ppl.inference.sgmcmc import schedules
from bnn_ppl.inference.sgmcmc import schedules as cycles
from bnn_ppl.inference.sgmcmc.accuracy import (
    SGMCMCAccuracyWarning,
    accuracy_summary,
    check_accuracy,
)
from bnn_ppl.inference.sgmcmc.atmc import ATMC
from bnn_ppl.inference.sgmcmc.gradients import (
    GradientEstimate,
    GradientEstimator,
    full_batch_estimator,
    gradient_estimator,
)
from bnn_ppl.inference.sgmcmc.kernel import SGMCMCKernel, SGMCMCState
from bnn_ppl.inference.sgmcmc.sghmc import SGHMC
from bnn_ppl.inference.sgmcmc.sgld import SGLD
from bnn_ppl.inference.sgmcmc.sgnht import SGNHT
from bnn_ppl.inference.sgmcmc.step_size import (
    GradientScales,
    gradient_scales,
    recommended_step_size,
    recommended_step_sizes,
)
from bnn_ppl.inference.svi import MeanFieldGuide, SVIResult, svi_mean_field

__all__ = [
    "ATMC",
    "CONVERGENCE_HEADER",
    "ConvergenceCheck",
    "DeterministicSiteWarning",
    "FitData",
    "FullBatchPotential",
    "GradientEstimate",
    "GradientEstimator",
    "GradientScales",
    "HMC",
    "HeldoutNoise",
    "Laggard",
    "MAPResult",
    "MCMCPlan",
    "ModelData",
    "ModelPotential",
    "NUTS",
    "ParallelTempering",
    "Projection",
    "ReferenceNotConvergedWarning",
    "ReferenceRun",
    "ReusingMCMC",
    "SGHMC",
    "SGLD",
    "SGMCMCAccuracyWarning",
    "SGMCMCKernel",
    "SGMCMCState",
    "SGNHT",
    "SVIResult",
    "ShardedData",
    "TemperingState",
    "as_posterior",
    "chain_summary",
    "convergence_cells",
    "convergence_summary",
    "deep_ensemble",
    "fit",
    "fit_run",
    "from_map",
    "from_mcmc",
    "from_svi",
    "accuracy_summary",
    "check_accuracy",
    "default_trajectory_length",
    "describe_laggards",
    "full_batch_estimator",
    "full_batch_potential",
    "gradient_estimator",
    "gradient_scales",
    "heldout_noise",
    "hmc",
    "laggards",
    "model_potential",
    "map_estimate",
    "nuts",
    "project_convergence",
    "recommended_step_size",
    "recommended_step_sizes",
    "reference_hmc",
    "run_segments",
    "schedules",
    "cycles",
    "svi_mean_field",
    "MeanFieldGuide",
]

from bnn_ppl.inference.potential import distributed  # noqa: E402  (multi-process runs: jax.distributed)

__all__ += ["distributed"]

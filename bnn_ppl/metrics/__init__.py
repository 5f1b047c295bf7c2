"""Predictive-performance and calibration metrics."""

# Notes:
#
# Every function here is a pure function of *already model-averaged*
# predictions and targets, written in :mod:`jax.numpy`. Inputs may be NumPy or
# JAX arrays; outputs are JAX scalars or arrays.
#
# Conventions
# -----------
# Classification
#     ``probs`` has shape ``(n, K)``: the predictive class probabilities of the
#     Bayesian model average (BMA), i.e. already averaged over posterior
#     samples. ``labels`` are integers of shape ``(n,)`` with values in
#     ``[0, K)``. Per-sample predictions with a leading sample axis
#     ``(S, n, K)`` must be averaged first (``bma`` lives elsewhere in the
#     package). The predicted class is ``argmax`` over the last axis; ties go
#     to the lowest class index.
# Regression
#     Predictive means / scales and targets have shape ``(n,)`` or ``(n, d)``.
#     For ``(n, d)`` the output dimensions are treated as independent, so
#     log-densities are *summed* over ``d`` and *averaged* over ``n``.
#     :func:`mixture_nll` takes per-sample means and scales with a leading
#     sample axis, ``(S, n)`` or ``(S, n, d)``.
# Student-t and Poisson
#     :func:`student_t_mixture_nll` and :func:`poisson_mixture_nll` take
#     per-sample predictions ``(S, n)`` or ``(S, n, d)``, like
#     :func:`mixture_nll`: the exact NLL of the model average of the
#     :class:`~bnn_ppl.likelihoods.StudentT` and
#     :class:`~bnn_ppl.likelihoods.Poisson` likelihoods. A
#     :class:`~bnn_ppl.likelihoods.Bernoulli` model predicts class
#     probabilities ``(n, 2)``: the classification metrics apply.
# Units
#     When targets were standardised, ``y_std = (y - y_mean) / y_scale``,
#     pass ``y_scale`` to report :func:`rmse`, :func:`gaussian_nll` and
#     :func:`mixture_nll` in the original units of ``y``.
# Signs
#     Every ``*nll`` function returns a *negative* log-likelihood (lower is
#     better, usually positive). The "test log-likelihood" reported in UCI
#     benchmarks is minus :func:`mixture_nll`.
# Validation
#     Every argument is checked and a problem raises :class:`ValueError` naming
#     the argument and saying what is wrong. Shapes are checked first, always
#     (shapes are static, so this also works under :func:`jax.jit`); empty
#     inputs (``n == 0``) are rejected. Checks on *values* are then performed
#     only when the argument is concrete, i.e. not a JAX tracer inside a
#     transformed function (under ``jit`` the values are unknown):
#
#     * probabilities (``probs``, ``probs_a``, ``probs_b``) must be finite and
#       non-negative, and every row must sum to 1 within ``atol = 1e-3``
#       (``sqrt(eps)`` for 16-bit floats), loose enough for float32 softmax
#       outputs and model averages, tight enough to catch logits,
#       log-probabilities and unnormalised scores;
#     * labels must lie in ``[0, K)``;
#     * regression means, targets and scales must be finite, and ``scale``,
#       ``scales`` and ``y_scale`` must be positive.
#
#     The value checks are a few vectorised NumPy reductions over the array
#     (negligible next to the metric itself); the explanations of a failure
#     are computed only once it has failed.
#
# Arguments that select code paths (``num_bins``, ``binning``) must be static
# under :func:`jax.jit`, e.g. bound with :func:`functools.partial`. Each public
# function validates its inputs in Python and then calls a small jitted kernel,
# so eager calls compile once per input shape instead of dispatching op by op.

from bnn_ppl.metrics.calibration import ReliabilityCurve, ece, reliability_curve
from bnn_ppl.metrics.classification import accuracy, agreement, brier, nll, total_variation
from bnn_ppl.metrics.counts import poisson_mixture_nll
from bnn_ppl.metrics.regression import (
    gaussian_nll,
    gaussian_w2,
    mixture_nll,
    rmse,
    student_t_mixture_nll,
)

__all__ = [
    "ReliabilityCurve",
    "accuracy",
    "agreement",
    "brier",
    "ece",
    "gaussian_nll",
    "gaussian_w2",
    "mixture_nll",
    "nll",
    "poisson_mixture_nll",
    "reliability_curve",
    "rmse",
    "student_t_mixture_nll",
    "total_variation",
]

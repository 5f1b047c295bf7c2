"""The Bayesian model average of per-draw predictions: the one implementation."""

# Notes:
#
# :func:`bma` averages the draws of a prediction (leading axis = draws): classification
# probabilities are averaged; a Poisson's rate is averaged; a Gaussian or Student-t mixture is
# moment-matched (its mean and standard deviation). Everything that averages predictions over
# draws goes through the three steps below, so a streamed average (a checkpointed run's
# ``RunningBMA``), the metric suite (:mod:`bnn_ppl.metrics.suite`) and ``bp.bma`` agree:
#
# * :func:`summarize` - the average of one batch of draws as an :class:`Average`: the count, the
#   mean over draws of the probabilities / rates / means, and for a mixture the mean within-draw
#   variance and the sum of squared deviations of the draws' means from their mean;
# * :func:`merge` - two :class:`Average` s of disjoint draws combined exactly (Chan et al.'s
#   pairwise update: no ``E[m²] - E[m]²`` cancellation, so float32 stays accurate for means far
#   from zero);
# * :func:`result` - the prediction an :class:`Average` stands for.
#
# The exact density of the average (the equal-weight mixture of the draws, not its moment match)
# at the targets is :func:`log_density` of the draws' log densities; the mixture NLLs of
# :mod:`bnn_ppl.metrics` use it.
#
# The arithmetic follows its inputs: JAX arrays (traceable, as in ``bp.bma``) or NumPy arrays
# (float64 sums, as in a streamed average).

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import logsumexp

from bnn_ppl import validation
from bnn_ppl.likelihoods import (
    GaussianPrediction,
    PoissonPrediction,
    Prediction,
    StudentTPrediction,
)
from bnn_ppl.types import Array
from bnn_ppl.validation import InputValueError

__all__ = ["Average", "bma", "summarize", "merge", "result", "log_density", "predictive_variance"]

KINDS = ("probs", "gaussian", "poisson")
"""What an :class:`Average` averages (a Student-t mixture is moment-matched: ``"gaussian"``).
A streamed average saves the index in checkpoints: append only."""


class Average(NamedTuple):
    """The Bayesian model average of ``count`` draws, in a form that merges exactly.

    ``mean``: the mean over draws of the probabilities, the rates or the Gaussian means;
    ``within``: (mixtures) the mean over draws of each draw's predictive variance;
    ``spread``: (mixtures) the sum over draws of ``(mean_s - mean)²``. ``None`` where unused.
    """

    kind: str
    count: int
    mean: Any
    within: Any = None
    spread: Any = None


def _xp(a: Any) -> Any:
    """NumPy for NumPy inputs (a streamed float64 average), else jax.numpy (traceable)."""
    return np if isinstance(a, np.ndarray | np.generic) else jnp


def predictive_variance(pred: GaussianPrediction | StudentTPrediction) -> Any:
    """Each draw's predictive variance, ``scale²`` (a Student-t: ``scale² df / (df - 2)``,
    infinite where ``df <= 2``).

    Example:
        >>> import numpy as np
        >>> from bnn_ppl.likelihoods import StudentTPrediction
        >>> predictive_variance(StudentTPrediction(np.zeros(2), np.ones(2), np.array([4.0, 2.0])))
        array([ 2., inf])
    """
    xp = _xp(pred.scale)
    var = pred.scale**2
    if isinstance(pred, StudentTPrediction):
        df = pred.df
        var = xp.where(df > 2, var * df / xp.where(df > 2, df - 2, 1.0), xp.inf)
    return var


def summarize(predictions: Prediction) -> Average:
    """The :class:`Average` of a batch of draws (leading axis = draws), without checks (see
    :func:`bma` for them); at least one draw.

    Example:
        >>> import numpy as np
        >>> from bnn_ppl.likelihoods import GaussianPrediction
        >>> from bnn_ppl.model_average import bma, merge, result, summarize
        >>> draws = GaussianPrediction(np.array([[0.0], [2.0], [4.0]]), np.ones((3, 1)))
        >>> whole = bma(draws)                              # mixture sd: sqrt(1 + 8/3)
        >>> round(float(whole.mean[0]), 4), round(float(whole.scale[0]), 4)
        (2.0, 1.9149)
        >>> first = summarize(GaussianPrediction(draws.mean[:1], draws.scale[:1]))
        >>> rest = summarize(GaussianPrediction(draws.mean[1:], draws.scale[1:]))
        >>> round(float(result(merge(first, rest)).scale[0]), 4)    # in parts: the same
        1.9149
    """
    if isinstance(predictions, PoissonPrediction):
        return Average("poisson", predictions.rate.shape[0], predictions.rate.mean(axis=0))
    if isinstance(predictions, GaussianPrediction | StudentTPrediction):
        means = predictions[0]  # the mean, or a Student-t's location
        # summed as deviations from the first draw: a float32 sum of values near 1e4 would
        # round at ulp(count * 1e4) and move the mean by several ulps (and merge's delta with it)
        mean = means[0] + (means - means[0]).mean(axis=0)
        spread = ((means - mean) ** 2).sum(axis=0)
        within = predictive_variance(predictions).mean(axis=0)
        return Average("gaussian", means.shape[0], mean, within, spread)
    return Average("probs", predictions.shape[0], predictions.mean(axis=0))


def merge(a: Average, b: Average) -> Average:
    """The :class:`Average` of the draws of ``a`` and ``b`` together (exact; either may be
    empty, ``count == 0``).

    Raises:
        InputValueError: the two average different kinds of prediction or shapes.
    """
    if a.kind != b.kind:
        raise InputValueError(f"cannot average {a.kind!r} predictions with {b.kind!r} ones.")
    if a.count == 0 or b.count == 0:
        return b if a.count == 0 else a
    if np.shape(a.mean) != np.shape(b.mean):
        raise InputValueError(
            f"predictions of shape {np.shape(b.mean)} do not match the average of shape "
            f"{np.shape(a.mean)}; average predictions for the same inputs."
        )
    n = a.count + b.count
    w = b.count / n
    delta = b.mean - a.mean
    mean = a.mean + delta * w
    if a.kind != "gaussian":
        return Average(a.kind, n, mean)
    within = a.within * (1 - w) + b.within * w  # not a difference: a variance may be inf
    spread = a.spread + b.spread + delta**2 * (a.count * w)
    return Average(a.kind, n, mean, within, spread)


def result(avg: Average) -> Array | GaussianPrediction | PoissonPrediction:
    """The prediction an :class:`Average` stands for: probabilities ``(n, K)``, a
    :class:`PoissonPrediction` of the mean rate, or the mixture's moment-matched
    :class:`GaussianPrediction` (law of total variance)."""
    if avg.kind == "probs":
        return avg.mean
    if avg.kind == "poisson":
        return PoissonPrediction(avg.mean)
    xp = _xp(avg.mean)
    return GaussianPrediction(avg.mean, xp.sqrt(avg.within + avg.spread / avg.count))


def log_density(logp: Array) -> Array:
    """Log density of the model average (the equal-weight mixture of the ``S`` draws) from
    each draw's log densities ``(S, n)``, or ``(S, n, d)`` summed over ``d`` first: ``(n,)``,
    ``logsumexp_s logp_s - log S`` (stable). Below: the mixture of densities 0.2 and 0.4.

    Example:
        >>> import jax.numpy as jnp
        >>> [round(v, 4) for v in log_density(jnp.log(jnp.array([[0.2], [0.4]]))).tolist()]
        [-1.204]
    """
    if logp.ndim == 3:
        logp = jnp.sum(logp, axis=-1)
    return logsumexp(logp, axis=0) - math.log(logp.shape[0])


def bma(predictions: Prediction) -> Array | GaussianPrediction | PoissonPrediction:
    """Bayesian model average over the leading sample axis.

    Classification (Categorical, Bernoulli): the mean of the per-sample probabilities, shape
    ``(n, num_classes)``. Gaussian and Student-t: a :class:`GaussianPrediction` with the
    mixture's mean and standard deviation (moment-matched; a Student-t draw with ``df <= 2``
    has infinite variance, so its mixture's scale is inf, and the location stands in for the
    mean, which only exists for ``df > 1``). Poisson: the Poisson of the mixture's mean rate
    (the mixture itself is overdispersed). For the exact mixture likelihood use
    :func:`bnn_ppl.metrics.mixture_nll`, :func:`~bnn_ppl.metrics.student_t_mixture_nll` or
    :func:`~bnn_ppl.metrics.poisson_mixture_nll` on the per-sample predictions.

    Example:
        >>> import numpy as np
        >>> bma(PoissonPrediction(np.array([[1.0, 2.0], [3.0, 4.0]]))).rate
        Array([2., 3.], dtype=float32)
    """
    if isinstance(predictions, PoissonPrediction):
        rates = _check_draws("predictions.rate", predictions.rate)
        if not isinstance(rates, jax.core.Tracer) and np.any(np.asarray(rates) <= 0):
            raise InputValueError("predictions.rate holds values <= 0; Poisson rates are > 0.")
        checked: Prediction = PoissonPrediction(jnp.asarray(rates))
    elif isinstance(predictions, StudentTPrediction):
        locs = _check_draws("predictions.loc", predictions.loc)
        scales = _check_scales("predictions", locs, predictions.scale)
        dfs = _check_scales("predictions", locs, predictions.df, "df")
        checked = StudentTPrediction(*(jnp.asarray(a) for a in (locs, scales, dfs)))
    elif isinstance(predictions, GaussianPrediction):
        means = _check_draws("predictions.mean", predictions.mean)
        scales = _check_scales("predictions", means, predictions.scale)
        checked = GaussianPrediction(jnp.asarray(means), jnp.asarray(scales))
    else:
        checked = jnp.asarray(_check_draws("predictions", predictions))
    return result(summarize(checked))


def _check_scales(name: str, means: Any, scales: Any, field: str = "scale") -> Any:
    """A positive field of the prediction with the shape of its location."""
    what = "df" if field == "df" else "scale"
    scales = _check_draws(f"{name}.{field}", scales)
    if np.shape(scales) != np.shape(means):
        raise InputValueError(
            f"{name}.{field} has shape {np.shape(scales)} but the location has "
            f"{np.shape(means)}; they must match."
        )
    if not isinstance(scales, jax.core.Tracer) and np.any(np.asarray(scales) < 0):
        raise InputValueError(f"{name}.{field} holds negative values; a {what} is >= 0.")
    return scales


def _check_draws(name: str, a: Any) -> Any:
    """Per-draw predictions with a leading draw axis: at least one draw, finite (checked on
    the host, so nothing is compiled before an error)."""
    if isinstance(a, jax.core.Tracer):
        return a
    arr = validation.as_array(name, a, min_ndim=2)
    if arr.ndim < 2:
        raise InputValueError(
            f"{name} has shape {arr.shape}; bma averages over a leading axis of draws, e.g. "
            f"(num_samples, n, num_classes) as returned by bp.predict."
        )
    return a

"""What every likelihood shares: the :class:`Likelihood` protocol, the one target-shape rule
(:func:`conform_targets`) and the predictive types a likelihood's ``predict`` returns.

Example:
    >>> import numpy as np
    >>> pred = PoissonPrediction(rate=np.ones((3, 5)))
    >>> sorted(prediction_fields(pred)), type(prediction_from_fields({"rate": pred.rate})).__name__
    (['rate'], 'PoissonPrediction')
"""

# Notes:
#
# Predictions of one parameter draw (and, with a leading sample axis, of many) are:
#
# * class probabilities, an array ``(n, K)`` (``Categorical``; ``Bernoulli`` gives ``(n, 2)``:
#   ``[P(y=0), P(y=1)]``, so every classification metric and tool applies unchanged);
# * :class:`GaussianPrediction` ``(mean, scale)`` (``Gaussian``, ``HeteroscedasticGaussian``);
# * :class:`StudentTPrediction` ``(loc, scale, df)`` (``StudentT``);
# * :class:`PoissonPrediction` ``(rate,)`` (``Poisson``).

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple, Protocol, runtime_checkable

import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist

from bnn_ppl.types import Array
from bnn_ppl.validation import InputTypeError, InputValueError

__all__ = [
    "Likelihood",
    "GaussianPrediction",
    "StudentTPrediction",
    "PoissonPrediction",
    "Prediction",
    "PREDICTION_TYPES",
    "prediction_fields",
    "prediction_from_fields",
    "location",
    "conform_targets",
]


class GaussianPrediction(NamedTuple):
    """Predictive Gaussian of a regression network: ``y ~ N(mean, scale²)``.

    ``mean`` and ``scale`` have the targets' shape, with leading sample axes where the
    prediction is per posterior sample.
    """

    mean: Array
    scale: Array


class StudentTPrediction(NamedTuple):
    """Predictive Student-t: ``y ~ loc + scale * t(df)``; all three fields have the targets'
    shape (``df`` broadcast), with leading sample axes where the prediction is per sample."""

    loc: Array
    scale: Array
    df: Array


class PoissonPrediction(NamedTuple):
    """Predictive Poisson of a count network: ``y ~ Poisson(rate)``; ``rate`` has the targets'
    shape, with leading sample axes where the prediction is per sample."""

    rate: Array


PREDICTION_TYPES = (GaussianPrediction, StudentTPrediction, PoissonPrediction)
Prediction = Array | GaussianPrediction | StudentTPrediction | PoissonPrediction
"""What a likelihood's ``predict`` (and :func:`bnn_ppl.predict`) returns."""


def prediction_fields(prediction: Any) -> dict[str, Any]:
    """A prediction as named arrays: ``{"probs": ...}`` for class probabilities, else the
    fields of its NamedTuple (the names under which runs and checkpoints store it)."""
    if isinstance(prediction, PREDICTION_TYPES):
        return dict(prediction._asdict())
    return {"probs": prediction}


def prediction_from_fields(fields: Mapping[str, Any]) -> Prediction:
    """The inverse of :func:`prediction_fields` (extra keys are an error).

    Raises:
        InputValueError: the names fit no predictive type.
    """
    names = set(fields)
    if names == {"probs"}:
        return fields["probs"]
    for kind in PREDICTION_TYPES:
        if names == set(kind._fields):
            return kind(**fields)
    known = [["probs"]] + [list(k._fields) for k in PREDICTION_TYPES]
    raise InputValueError(
        f"predictions hold the fields {sorted(names)}, which fit no predictive type; "
        f"expected one of {known}."
    )


def location(prediction: Any) -> Any:
    """The per-draw centre of a prediction: the probabilities of a classifier, the Gaussian
    mean, the Student-t location or the Poisson rate (what agreement diagnostics compare)."""
    return prediction[0] if isinstance(prediction, PREDICTION_TYPES) else prediction


@runtime_checkable
class Likelihood(Protocol):
    """What every likelihood provides."""

    task: str
    """``"classification"`` or ``"regression"`` (counts are regression)."""

    def latent_sites(self) -> dict[str, dist.Distribution]:
        """Priors of the likelihood's own latent parameters, keyed by site name."""
        ...

    def target_shape(self, out_shape: tuple[int, ...]) -> tuple[int, ...]:
        """The shape of the targets for a network output of shape ``out_shape = (n, ...)``."""
        ...

    def check_targets(self, y: np.ndarray, out_shape: tuple[int, ...]) -> np.ndarray:
        """Validate targets against the network's output shape ``(n, ...)``; return them in
        :meth:`target_shape` (see :func:`conform_targets`)."""
        ...

    def log_prob(self, out: Array, y: Array, latent: dict[str, Array]) -> Array:
        """Per-example log-likelihood, shape ``(n,)``."""
        ...

    def predict(self, out: Array, latent: dict[str, Array]) -> Prediction:
        """Predictive distribution at the network output (see :data:`Prediction`)."""
        ...

    def numpyro_dist(self, out: Array, latent: dict[str, Array]) -> dist.Distribution:
        """The observation distribution of the NumPyro model, batch shape ``(n,)``."""
        ...


def conform_targets(likelihood: Likelihood, y: Any, out_shape: tuple[int, ...]) -> Any:
    """The one target-shape rule, applied by every path (model, potential, SVI, metrics).

    Targets must have ``likelihood.target_shape(out_shape)``: ``(n,)`` class indices for a
    categorical, ``(n,)`` for a one-output regression network and ``(n, d)`` for ``d``
    outputs. For a one-output network, ``(n, 1)`` targets mean the same as ``(n,)`` and are
    reshaped to it (never broadcast against ``(n,)`` outputs into ``(n, n)``). Any other shape
    is an error. Works on NumPy arrays and on traced JAX arrays (shapes are static).

    Example:
        >>> import numpy as np
        >>> from bnn_ppl.likelihoods import Gaussian
        >>> conform_targets(Gaussian(0.1), np.zeros((5, 1)), (5, 1)).shape
        (5,)
        >>> conform_targets(Gaussian(0.1), np.zeros((5, 2)), (5, 1))
        Traceback (most recent call last):
        ...
        bnn_ppl.validation.InputValueError: y has shape (5, 2), which does not fit ...
    """
    want = tuple(likelihood.target_shape(tuple(out_shape)))
    shape = tuple(np.shape(y))
    if shape == want:
        return y
    if len(out_shape) >= 2 and out_shape[-1] == 1 and shape == tuple(out_shape):
        return y.reshape(want)
    if len(shape) == 1 and len(out_shape) == 2 and out_shape[1] != 1 and want == out_shape:
        raise InputValueError(
            f"y has shape {shape} but the network has {out_shape[1]} outputs; pass y of shape "
            f"(n, {out_shape[1]}) or use a network with one output."
        )
    raise InputValueError(
        f"y has shape {shape}, which does not fit the network output {tuple(out_shape)}: "
        f"{type(likelihood).__name__} needs targets of shape {want}."
    )


def real_target_shape(out_shape: tuple[int, ...]) -> tuple[int, ...]:
    """Targets of a likelihood with one value per output: ``(n,)`` for a one-output network
    (``(n, 1)``), else the output's shape."""
    out_shape = tuple(out_shape)
    return out_shape[:1] if len(out_shape) == 2 and out_shape[1] == 1 else out_shape


def check_float_targets(likelihood: Likelihood, y: np.ndarray, out_shape: tuple) -> np.ndarray:
    """Floating-point targets in the likelihood's target shape (regression likelihoods)."""
    if not np.issubdtype(y.dtype, np.floating):
        raise InputTypeError(
            f"y must be floating point for a {type(likelihood).__name__} likelihood, got "
            f"{y.dtype}; convert with y.astype(float)."
        )
    return conform_targets(likelihood, y, out_shape)


def check_positive_prior(owner: str, name: str, d: dist.Distribution) -> None:
    """A prior of a positive scalar likelihood parameter (a noise scale, degrees of freedom):
    scalar, with positive support."""
    if d.event_shape != () or d.batch_shape != ():
        raise InputValueError(
            f"{owner} {name} prior must be a scalar distribution, got batch shape "
            f"{d.batch_shape} and event shape {d.event_shape}."
        )
    if bool(d.support(jnp.asarray(-1.0))) or not bool(d.support(jnp.asarray(1.0))):
        raise InputValueError(
            f"{owner} {name} prior must have positive support (e.g. HalfNormal, "
            f"LogNormal, Gamma), got {type(d).__name__} with support {d.support}."
        )

"""Likelihoods: how the network's output explains the targets.

A likelihood turns the network output ``f(x)`` into a per-example log-likelihood and into
predictions. It may own latent parameters of its own (the Gaussian noise scale with a prior);
these are sampled like the weights, by HMC, and appear in ``MCMC.get_samples()`` under their
site names (``"noise_scale"``).

Example:
    >>> import jax.numpy as jnp
    >>> import numpyro.distributions as dist
    >>> import bnn_ppl as bp
    >>> lik = bp.likelihoods.Categorical()
    >>> lik.log_prob(jnp.zeros((2, 4)), jnp.array([0, 3]), {}).round(4)   # log(1/4) each
    Array([-1.3863, -1.3863], dtype=float32)
    >>> noisy = bp.likelihoods.Gaussian(scale=dist.HalfNormal(1.0))   # noise sampled by HMC
    >>> list(noisy.latent_sites())
    ['noise_scale']
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist

from bnn_ppl.types import Array
from bnn_ppl.validation import InputTypeError, InputValueError, check_labels, check_positive

__all__ = ["Likelihood", "Categorical", "Gaussian", "GaussianPrediction", "conform_targets"]


class GaussianPrediction(NamedTuple):
    """Predictive Gaussian of a regression network: ``y ~ N(mean, scale²)``.

    ``mean`` and ``scale`` have the targets' shape, with leading sample axes where the
    prediction is per posterior sample.
    """

    mean: Array
    scale: Array


@runtime_checkable
class Likelihood(Protocol):
    """What every likelihood provides."""

    task: str
    """``"classification"`` or ``"regression"``."""

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

    def predict(self, out: Array, latent: dict[str, Array]) -> Array | GaussianPrediction:
        """Predictive distribution at the network output (probabilities or a Gaussian)."""
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


@dataclass(frozen=True)
class Categorical:
    """Categorical likelihood on logits: the network's last axis holds one logit per class.

    Targets are integer class indices of shape ``(n,)`` in ``[0, num_outputs)``.
    """

    task: str = "classification"

    def latent_sites(self) -> dict[str, dist.Distribution]:
        return {}

    def target_shape(self, out_shape: tuple[int, ...]) -> tuple[int, ...]:
        if len(out_shape) != 2:
            raise InputValueError(
                f"Categorical needs a network output of shape (n, num_classes), got {out_shape}."
            )
        return tuple(out_shape[:1])

    def check_targets(self, y: np.ndarray, out_shape: tuple[int, ...]) -> np.ndarray:
        self.target_shape(out_shape)
        return check_labels("y", y, out_shape[-1])

    def log_prob(self, out: Array, y: Array, latent: dict[str, Array]) -> Array:
        logp = jax.nn.log_softmax(out, axis=-1)
        return jnp.take_along_axis(logp, y[..., None].astype(jnp.int32), axis=-1)[..., 0]

    def predict(self, out: Array, latent: dict[str, Array]) -> Array:
        return jax.nn.softmax(out, axis=-1)

    def numpyro_dist(self, out: Array, latent: dict[str, Array]) -> dist.Distribution:
        """The observation distribution, for the NumPyro model."""
        return dist.Categorical(logits=out)


NOISE_SITE = "noise_scale"


@dataclass(frozen=True)
class Gaussian:
    """Gaussian likelihood ``y ~ N(f(x), scale²)`` with fixed or inferred noise.

    Args:
        scale: a fixed noise standard deviation (float > 0), or a NumPyro distribution with
            positive support (e.g. ``dist.HalfNormal(1.0)``, ``dist.LogNormal(-2, 1)``) that
            becomes the prior of a latent site ``"noise_scale"`` sampled with the weights.

    Targets are ``(n,)`` for a network with one output, or ``(n, d)`` for ``d`` outputs
    (independent noise of the same scale on each).
    """

    scale: float | dist.Distribution = 1.0
    task: str = "regression"

    def __post_init__(self) -> None:
        if isinstance(self.scale, dist.Distribution):
            d = self.scale
            if d.event_shape != () or d.batch_shape != ():
                raise InputValueError(
                    f"Gaussian scale prior must be a scalar distribution, got batch shape "
                    f"{d.batch_shape} and event shape {d.event_shape}."
                )
            if bool(d.support(jnp.asarray(-1.0))) or not bool(d.support(jnp.asarray(1.0))):
                raise InputValueError(
                    f"Gaussian scale prior must have positive support (e.g. HalfNormal, "
                    f"LogNormal, Gamma), got {type(d).__name__} with support {d.support}."
                )
        else:
            object.__setattr__(self, "scale", check_positive("scale", self.scale))

    def latent_sites(self) -> dict[str, dist.Distribution]:
        return {NOISE_SITE: self.scale} if isinstance(self.scale, dist.Distribution) else {}

    def _noise(self, latent: dict[str, Array]) -> Array:
        return latent[NOISE_SITE] if isinstance(self.scale, dist.Distribution) else self.scale

    def target_shape(self, out_shape: tuple[int, ...]) -> tuple[int, ...]:
        out_shape = tuple(out_shape)
        return out_shape[:1] if len(out_shape) == 2 and out_shape[1] == 1 else out_shape

    def check_targets(self, y: np.ndarray, out_shape: tuple[int, ...]) -> np.ndarray:
        if not np.issubdtype(y.dtype, np.floating):
            raise InputTypeError(
                f"y must be floating point for a Gaussian likelihood, got {y.dtype}; "
                f"convert with y.astype(float)."
            )
        return conform_targets(self, y, out_shape)

    @staticmethod
    def _match(out: Array, y: Array) -> Array:
        return out[..., 0] if out.ndim == y.ndim + 1 else out

    def log_prob(self, out: Array, y: Array, latent: dict[str, Array]) -> Array:
        mean = self._match(out, y)
        lp = dist.Normal(mean, self._noise(latent)).log_prob(y)
        return lp.reshape(lp.shape[0], -1).sum(-1)

    def predict(self, out: Array, latent: dict[str, Array]) -> GaussianPrediction:
        mean = out[..., 0] if out.shape[-1] == 1 else out
        return GaussianPrediction(mean, jnp.broadcast_to(self._noise(latent), mean.shape))

    def numpyro_dist(self, out: Array, latent: dict[str, Array]) -> dist.Distribution:
        """The observation distribution, for the NumPyro model (batch shape ``(n,)``)."""
        mean = out[..., 0] if out.shape[-1] == 1 else out
        d = dist.Normal(mean, self._noise(latent))
        return d.to_event(mean.ndim - 1) if mean.ndim > 1 else d

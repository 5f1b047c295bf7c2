"""Likelihoods of real-valued targets: ``Gaussian`` (homoscedastic: fixed or inferred noise),
``HeteroscedasticGaussian`` (the network predicts the noise too) and ``StudentT`` (heavy tails,
fixed or inferred degrees of freedom and scale).
"""

# Notes:
#
# A likelihood's own latent parameters (``"noise_scale"``, ``"df"``) are sites of the model,
# sampled with the weights (in unconstrained space, through the log transform of their positive
# support), and appear in ``MCMC.get_samples()`` under these names.

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist

from bnn_ppl.likelihoods.base import (
    GaussianPrediction,
    StudentTPrediction,
    check_float_targets,
    check_positive_prior,
    real_target_shape,
)
from bnn_ppl.types import Array
from bnn_ppl.validation import InputValueError, check_number, check_positive

__all__ = ["Gaussian", "HeteroscedasticGaussian", "StudentT", "NOISE_SITE", "DF_SITE"]


NOISE_SITE = "noise_scale"
DF_SITE = "df"


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
            check_positive_prior("Gaussian", "scale", self.scale)
        else:
            object.__setattr__(self, "scale", check_positive("scale", self.scale))

    def latent_sites(self) -> dict[str, dist.Distribution]:
        return {NOISE_SITE: self.scale} if isinstance(self.scale, dist.Distribution) else {}

    def _noise(self, latent: dict[str, Array]) -> Array:
        return latent[NOISE_SITE] if isinstance(self.scale, dist.Distribution) else self.scale

    def target_shape(self, out_shape: tuple[int, ...]) -> tuple[int, ...]:
        return real_target_shape(out_shape)

    def check_targets(self, y: np.ndarray, out_shape: tuple[int, ...]) -> np.ndarray:
        return check_float_targets(self, y, out_shape)

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


def _positive_or_prior(owner: str, name: str, value: float | dist.Distribution) -> Any:
    if isinstance(value, dist.Distribution):
        check_positive_prior(owner, name, value)
        return value
    return check_positive(name, value)


def _mean(out: Array) -> Array:
    """The network output as the targets' location: ``(n,)`` for one output, else as is."""
    return out[..., 0] if out.shape[-1] == 1 else out


@dataclass(frozen=True)
class StudentT:
    """Student-t likelihood ``y ~ f(x) + scale * t(df)``, robust to outliers.

    Args:
        df: degrees of freedom (float > 0), or a prior with positive support (e.g.
            ``dist.Gamma(2.0, 0.1)``) of a latent site ``"df"``.
        scale: the noise scale (float > 0), or a prior with positive support of a latent site
            ``"noise_scale"``.

    Targets as for :class:`Gaussian`: ``(n,)`` for one output, ``(n, d)`` for ``d``.
    Predictions are :class:`~bnn_ppl.likelihoods.StudentTPrediction` ``(loc, scale, df)``.

    Example:
        >>> import jax.numpy as jnp
        >>> import numpyro.distributions as dist
        >>> lik = StudentT(df=dist.Gamma(2.0, 0.1), scale=0.5)      # df sampled, scale fixed
        >>> list(lik.latent_sites())
        ['df']
        >>> het = HeteroscedasticGaussian()                         # outputs (mean, raw scale)
        >>> het.predict(jnp.array([[1.0, 0.0]]), {}).scale.round(4)  # softplus(0) + 1e-6
        Array([0.6931], dtype=float32)
    """

    df: float | dist.Distribution = 4.0
    scale: float | dist.Distribution = 1.0
    task: str = "regression"

    def __post_init__(self) -> None:
        object.__setattr__(self, "df", _positive_or_prior("StudentT", "df", self.df))
        object.__setattr__(self, "scale", _positive_or_prior("StudentT", "scale", self.scale))

    def latent_sites(self) -> dict[str, dist.Distribution]:
        sites = {NOISE_SITE: self.scale, DF_SITE: self.df}
        return {k: d for k, d in sites.items() if isinstance(d, dist.Distribution)}

    def _params(self, latent: dict[str, Array]) -> tuple[Array, Array]:
        df = latent[DF_SITE] if isinstance(self.df, dist.Distribution) else self.df
        scale = latent[NOISE_SITE] if isinstance(self.scale, dist.Distribution) else self.scale
        return df, scale

    def target_shape(self, out_shape: tuple[int, ...]) -> tuple[int, ...]:
        return real_target_shape(out_shape)

    def check_targets(self, y: np.ndarray, out_shape: tuple[int, ...]) -> np.ndarray:
        return check_float_targets(self, y, out_shape)

    def log_prob(self, out: Array, y: Array, latent: dict[str, Array]) -> Array:
        df, scale = self._params(latent)
        lp = dist.StudentT(df, _mean(out), scale).log_prob(y)
        return lp.reshape(lp.shape[0], -1).sum(-1)

    def predict(self, out: Array, latent: dict[str, Array]) -> StudentTPrediction:
        df, scale = self._params(latent)
        loc = _mean(out)
        return StudentTPrediction(
            loc, jnp.broadcast_to(scale, loc.shape), jnp.broadcast_to(df, loc.shape)
        )

    def numpyro_dist(self, out: Array, latent: dict[str, Array]) -> dist.Distribution:
        """The observation distribution, for the NumPyro model (batch shape ``(n,)``)."""
        df, scale = self._params(latent)
        loc = _mean(out)
        d = dist.StudentT(df, loc, scale)
        return d.to_event(loc.ndim - 1) if loc.ndim > 1 else d


@dataclass(frozen=True)
class HeteroscedasticGaussian:
    """Gaussian likelihood whose noise the network predicts: ``y ~ N(m(x), s(x)²)``.

    The network has two outputs (shape ``(n, 2)``): the mean ``m(x) = f(x)[:, 0]`` and a raw
    scale mapped to ``s(x) = softplus(f(x)[:, 1]) + min_scale``. Targets are real, ``(n,)``.
    Predictions are a :class:`~bnn_ppl.likelihoods.GaussianPrediction` with a scale per row.

    Args:
        min_scale: a floor (>= 0) added to the softplus, so that a network that drives its
            raw scale to -inf cannot make the density infinite (float32 softplus underflows
            to 0 below about -104).
    """

    min_scale: float = 1e-6
    task: str = "regression"

    def __post_init__(self) -> None:
        object.__setattr__(self, "min_scale", check_number("min_scale", self.min_scale, low=0.0))

    def latent_sites(self) -> dict[str, dist.Distribution]:
        return {}

    def target_shape(self, out_shape: tuple[int, ...]) -> tuple[int, ...]:
        out_shape = tuple(out_shape)
        if len(out_shape) != 2 or out_shape[1] != 2:
            raise InputValueError(
                f"HeteroscedasticGaussian needs a network with two outputs (the mean and the "
                f"raw scale), output shape (n, 2); got {out_shape}. Build the network with two "
                f"outputs."
            )
        return out_shape[:1]

    def check_targets(self, y: np.ndarray, out_shape: tuple[int, ...]) -> np.ndarray:
        self.target_shape(out_shape)
        return check_float_targets(self, y, out_shape)

    def _loc_scale(self, out: Array) -> tuple[Array, Array]:
        return out[..., 0], jax.nn.softplus(out[..., 1]) + self.min_scale

    def log_prob(self, out: Array, y: Array, latent: dict[str, Array]) -> Array:
        return dist.Normal(*self._loc_scale(out)).log_prob(y)

    def predict(self, out: Array, latent: dict[str, Array]) -> GaussianPrediction:
        return GaussianPrediction(*self._loc_scale(out))

    def numpyro_dist(self, out: Array, latent: dict[str, Array]) -> dist.Distribution:
        """The observation distribution, for the NumPyro model (batch shape ``(n,)``)."""
        return dist.Normal(*self._loc_scale(out))

"""The likelihood of counts: ``Poisson`` on a log-rate output.

Example:
    >>> import jax.numpy as jnp
    >>> lik = Poisson()
    >>> lik.log_prob(jnp.zeros((2, 1)), jnp.array([0, 2]), {}).round(4)  # rate 1: -1, -1-log 2
    Array([-1.    , -1.6931], dtype=float32)
    >>> lik.predict(jnp.log(jnp.array([[3.0]])), {}).rate
    Array([3.], dtype=float32)
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist

from bnn_ppl.likelihoods.base import PoissonPrediction, conform_targets, real_target_shape
from bnn_ppl.types import Array
from bnn_ppl.validation import InputTypeError, InputValueError

__all__ = ["Poisson", "first_non_count"]


MAX_EXACT_COUNT = 2**24
"""The largest count a float32 holds exactly (every whole number up to it is exact); the
Poisson likelihood refuses larger counts rather than round them."""


def first_non_count(y: np.ndarray) -> str | None:
    """``"y[i] = v"`` for the first entry of ``y`` that is not a count (a non-negative whole
    number), or ``None`` if all are.

    Example:
        >>> import numpy as np
        >>> first_non_count(np.array([[0, 2], [1.5, -1]])), first_non_count(np.arange(3))
        ('y[(1, 0)] = 1.5', None)
    """
    bad = (y < 0) | (np.mod(y, 1) != 0)
    if not np.any(bad):
        return None
    i = tuple(int(j) for j in np.argwhere(bad)[0])
    return f"y[{i[0] if len(i) == 1 else i}] = {y[i]}"


@dataclass(frozen=True)
class Poisson:
    """Poisson likelihood ``y ~ Poisson(exp(f(x)))``: the network outputs the log-rate.

    Targets are counts, non-negative whole numbers (an integer dtype, or floats holding whole
    numbers), of shape ``(n,)`` for a network with one output or ``(n, d)`` for ``d`` outputs
    (independent counts). Predictions are :class:`~bnn_ppl.likelihoods.PoissonPrediction`
    ``(rate,)``. With no hidden layer this is a Bayesian Poisson GLM.
    """

    task: str = "regression"

    def latent_sites(self) -> dict[str, dist.Distribution]:
        return {}

    def target_shape(self, out_shape: tuple[int, ...]) -> tuple[int, ...]:
        return real_target_shape(out_shape)

    def check_targets(self, y: np.ndarray, out_shape: tuple[int, ...]) -> np.ndarray:
        y = conform_targets(self, y, out_shape)
        if np.issubdtype(y.dtype, np.bool_) or not (
            np.issubdtype(y.dtype, np.integer) or np.issubdtype(y.dtype, np.floating)
        ):
            raise InputTypeError(
                f"y must hold counts (non-negative whole numbers, integer dtype) for a Poisson "
                f"likelihood, got dtype {y.dtype}; convert with y.astype(int)."
            )
        bad = first_non_count(y)
        if bad is not None:
            raise InputValueError(
                f"y must hold counts (non-negative whole numbers) for a Poisson likelihood, got "
                f"{bad}. Use Gaussian or StudentT for real-valued targets."
            )
        if y.size and float(np.max(y)) > MAX_EXACT_COUNT:
            i = tuple(int(j) for j in np.argwhere(y > MAX_EXACT_COUNT)[0])
            raise InputValueError(
                f"y[{i[0] if len(i) == 1 else i}] = {y[i]} is above {MAX_EXACT_COUNT} (2**24), "
                "the largest count float32 holds exactly: the Poisson log density would see a "
                "rounded count. Rescale the counts (e.g. model them in thousands with a "
                "Gaussian likelihood) or drop those rows."
            )
        return y

    def log_prob(self, out: Array, y: Array, latent: dict[str, Array]) -> Array:
        log_rate = out[..., 0] if out.ndim == y.ndim + 1 else out
        y = y.astype(log_rate.dtype)
        lp = y * log_rate - jnp.exp(log_rate) - jax.scipy.special.gammaln(y + 1)
        return lp.reshape(lp.shape[0], -1).sum(-1)

    def predict(self, out: Array, latent: dict[str, Array]) -> PoissonPrediction:
        log_rate = out[..., 0] if out.shape[-1] == 1 else out
        return PoissonPrediction(jnp.exp(log_rate))

    def numpyro_dist(self, out: Array, latent: dict[str, Array]) -> dist.Distribution:
        """The observation distribution, for the NumPyro model (batch shape ``(n,)``)."""
        log_rate = out[..., 0] if out.shape[-1] == 1 else out
        d = dist.Poisson(jnp.exp(log_rate))
        return d.to_event(log_rate.ndim - 1) if log_rate.ndim > 1 else d

"""Likelihoods of class labels: ``Categorical`` (one logit per class) and ``Bernoulli`` (one
logit, binary labels).

Example:
    >>> import jax.numpy as jnp
    >>> lik = Bernoulli()
    >>> lik.log_prob(jnp.zeros((2, 1)), jnp.array([0, 1]), {}).round(4)   # log(1/2) each
    Array([-0.6931, -0.6931], dtype=float32)
    >>> lik.predict(jnp.array([[0.0], [2.0]]), {}).tolist()  # [P(y=0), P(y=1)] per row
    [[0.5, 0.5], [0.11920291930437088, 0.8807970285415649]]
"""

# Notes:
#
# Both predict class probabilities: ``(n, K)`` for a categorical, ``(n, 2)`` = ``[P(y=0),
# P(y=1)]`` for a Bernoulli, so accuracy, NLL, ECE and Brier score (:mod:`bnn_ppl.metrics`),
# :func:`bnn_ppl.bma` and the run tools treat a Bernoulli model as binary classification. (The
# Brier score of :func:`bnn_ppl.metrics.brier` sums over both classes: twice the binary
# ``mean((p - y)²)``.)

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist

from bnn_ppl.likelihoods.base import conform_targets
from bnn_ppl.types import Array
from bnn_ppl.validation import InputTypeError, InputValueError, check_labels

__all__ = ["Categorical", "Bernoulli"]


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


@dataclass(frozen=True)
class Bernoulli:
    """Bernoulli likelihood on one logit: ``P(y=1 | x) = sigmoid(f(x))``.

    The network has one output (shape ``(n, 1)``: the logit of ``y = 1``). Targets are binary
    labels of shape ``(n,)`` (or ``(n, 1)``), integers or booleans in ``{0, 1}``. Predictions
    are class probabilities ``(n, 2)``, ``[P(y=0), P(y=1)]``. With no hidden layer and a
    Normal prior this is Bayesian logistic regression.
    """

    task: str = "classification"

    def latent_sites(self) -> dict[str, dist.Distribution]:
        return {}

    def target_shape(self, out_shape: tuple[int, ...]) -> tuple[int, ...]:
        out_shape = tuple(out_shape)
        if len(out_shape) != 2 or out_shape[1] != 1:
            raise InputValueError(
                f"Bernoulli needs a network with one output (the logit of y=1), output shape "
                f"(n, 1); got {out_shape}. Build the network with one output, or use "
                f"Categorical for one logit per class."
            )
        return out_shape[:1]

    def check_targets(self, y: np.ndarray, out_shape: tuple[int, ...]) -> np.ndarray:
        y = conform_targets(self, y, out_shape)
        if np.issubdtype(y.dtype, np.bool_):
            return y.astype(np.int32)
        if not np.issubdtype(y.dtype, np.integer):
            fix = (
                " Convert with y.astype(int)."
                if np.issubdtype(y.dtype, np.floating) and np.all(np.isin(y, (0, 1)))
                else ""
            )
            raise InputTypeError(
                f"y must hold binary labels (integers or booleans in {{0, 1}}) for a Bernoulli "
                f"likelihood, got dtype {y.dtype}.{fix}"
            )
        bad = ~np.isin(y, (0, 1))
        if np.any(bad):
            i = int(np.argmax(bad))
            raise InputValueError(
                f"y must hold binary labels in {{0, 1}} for a Bernoulli likelihood, got "
                f"y[{i}] = {y[i]} (values in [{y.min()}, {y.max()}]). For more than two "
                f"classes use Categorical with one output per class."
            )
        return y

    def log_prob(self, out: Array, y: Array, latent: dict[str, Array]) -> Array:
        logit = out[..., 0]
        return y.astype(logit.dtype) * logit - jax.nn.softplus(logit)

    def predict(self, out: Array, latent: dict[str, Array]) -> Array:
        logit = out[..., 0]
        # sigmoid(-l) rather than 1 - sigmoid(l): no cancellation for confident predictions
        return jnp.stack([jax.nn.sigmoid(-logit), jax.nn.sigmoid(logit)], axis=-1)

    def numpyro_dist(self, out: Array, latent: dict[str, Array]) -> dist.Distribution:
        """The observation distribution, for the NumPyro model (batch shape ``(n,)``)."""
        return dist.Bernoulli(logits=out[..., 0])

"""Multi-layer perceptrons, in flax.linen (:class:`MLP`) and flax.nnx (:class:`NnxMLP`).

Example:
    >>> import jax, jax.numpy as jnp
    >>> from bnn_ppl.models import MLP
    >>> net = MLP(hidden=(16, 16), out=3)
    >>> variables = net.init(jax.random.key(0), jnp.zeros((1, 5)))
    >>> net.apply(variables, jnp.ones((2, 5))).shape
    (2, 3)
"""

# Notes:
#
# Both compute ``Dense -> act -> ... -> Dense(out)`` with a linear output layer (logits for
# classification, the mean for regression). ``hidden=()`` gives a linear model: with a Gaussian
# likelihood that is Bayesian linear regression.
#
# Parameter tree of ``MLP(hidden=(50,), out=1)`` on 8 inputs (the BNN puts a prior on each leaf)::
#
#     Dense_0.bias    (50,)
#     Dense_0.kernel  (8, 50)
#     Dense_1.bias    (1,)
#     Dense_1.kernel  (50, 1)
#
# and of ``NnxMLP(8, hidden=(50,), out=1, rngs=nnx.Rngs(0))``::
#
#     layers.0.bias   (50,)
#     layers.0.kernel (8, 50)
#     layers.1.bias   (1,)
#     layers.1.kernel (50, 1)

from __future__ import annotations

from collections.abc import Callable, Sequence

import flax.linen as nn
import jax
from flax import nnx

__all__ = ["MLP", "NnxMLP"]


class MLP(nn.Module):
    """Fully connected network (flax.linen).

    Attributes:
        hidden: widths of the hidden layers (``()`` for a linear model).
        out: number of outputs (classes, or regression targets).
        activation: elementwise nonlinearity between layers (default ReLU).
    """

    hidden: Sequence[int] = (50,)
    out: int = 1
    activation: Callable[[jax.Array], jax.Array] = nn.relu

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = x.reshape(x.shape[0], -1)
        for width in self.hidden:
            x = self.activation(nn.Dense(width)(x))
        return nn.Dense(self.out)(x)


class NnxMLP(nnx.Module):
    """Fully connected network (flax.nnx); same function and initialisers as :class:`MLP`.

    Args:
        in_features: number of input features.
        hidden: widths of the hidden layers.
        out: number of outputs.
        activation: elementwise nonlinearity between layers (default ReLU).
        rngs: ``nnx.Rngs`` for the initial values.
    """

    def __init__(
        self,
        in_features: int,
        hidden: Sequence[int] = (50,),
        out: int = 1,
        activation: Callable[[jax.Array], jax.Array] = nnx.relu,
        *,
        rngs: nnx.Rngs,
    ):
        widths = [in_features, *hidden, out]
        self.layers = nnx.List(
            [nnx.Linear(a, b, rngs=rngs) for a, b in zip(widths[:-1], widths[1:], strict=True)]
        )
        self.activation = activation

    def __call__(self, x: jax.Array) -> jax.Array:
        x = x.reshape(x.shape[0], -1)
        for layer in self.layers[:-1]:
            x = self.activation(layer(x))
        return self.layers[-1](x)

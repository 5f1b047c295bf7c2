"""Filter response normalisation with a thresholded linear unit (FRN + TLU)."""

# Notes:
#
# Singh & Krishnan (2019), as in bnn_hmc's ``FeatureResponseNorm``: for each example and each
# channel ``c``, with ``ν²`` the mean of ``x²`` over the spatial axes (every axis but the first,
# the batch, and the last, the channels),
#
#     y = γ_c · x / sqrt(ν² + ε) + β_c,        z = max(y, τ_c).
#
# It normalises each example on its own, so it has no running statistics: its three learned
# per-channel vectors are ordinary ``"params"`` (a BNN puts a prior on them like on any weight).
# On inputs without spatial axes, ``(n, C)``, ``ν² = x²`` and the normalisation degenerates to
# ``γ · sign(x) + β`` (up to ε); use it after convolutions.
#
# Parameter tree of ``FRN()`` on ``(n, H, W, 8)`` inputs::
#
#     beta   (8,)    init 0
#     gamma  (8,)    init 1
#     tau    (8,)    init 0

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax.typing import Initializer

__all__ = ["FRN"]


class FRN(nn.Module):
    """Filter response normalisation followed by a thresholded linear unit (TLU).

    Attributes:
        eps: ε added to the mean square (bnn_hmc's default 1e-6).
        gamma_init, beta_init, tau_init: initialisers of the per-channel scale ``γ``, offset
            ``β`` and threshold ``τ`` (default 1, 0, 0).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from bnn_ppl.models import FRN
        >>> frn = FRN()
        >>> variables = frn.init(jax.random.key(0), jnp.zeros((1, 4, 4, 8)))
        >>> {k: v.shape for k, v in sorted(variables["params"].items())}
        {'beta': (8,), 'gamma': (8,), 'tau': (8,)}
        >>> x = jax.random.normal(jax.random.key(1), (2, 4, 4, 8))
        >>> z = frn.apply(variables, x)
        >>> z.shape
        (2, 4, 4, 8)
        >>> bool(jnp.allclose(frn.apply(variables, 10.0 * x), z, atol=1e-5))  # scale-invariant
        True
    """

    eps: float = 1e-6
    gamma_init: Initializer = nn.initializers.ones
    beta_init: Initializer = nn.initializers.zeros
    tau_init: Initializer = nn.initializers.zeros

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        channels = x.shape[-1]
        gamma = self.param("gamma", self.gamma_init, (channels,))
        beta = self.param("beta", self.beta_init, (channels,))
        tau = self.param("tau", self.tau_init, (channels,))
        nu2 = jnp.mean(jnp.square(x), axis=tuple(range(1, x.ndim - 1)), keepdims=True)
        y = gamma * (x * jax.lax.rsqrt(nu2 + self.eps)) + beta
        return jnp.maximum(y, tau)

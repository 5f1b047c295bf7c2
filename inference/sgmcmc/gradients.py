"""Minibatch gradients of the potential, and an estimate of their noise, for SG-MCMC."""

# Notes:
#
# :func:`gradient_estimator` turns a :class:`~bnn_ppl.inference.FullBatchPotential` into a
# :class:`GradientEstimator`: ``init(key)`` starts an index stream, and ``batch(stream)`` returns
# ``grad_fn`` for the next minibatch plus the advanced stream, where ``grad_fn(position)`` is a
# :class:`GradientEstimate`. The estimate is unbiased for the tempered potential
# ``U(θ) = -[s_p log p(θ) + s_l log p(D | θ) + log|J|]`` (the one HMC samples, with the
# temperature of the :class:`~bnn_ppl.BNN`): the batch log-likelihood is scaled by ``N / b``,
# the prior counted once (:meth:`FullBatchPotential.minibatch_potential_fn_gen`). Batches are
# drawn inside the compiled loop (:mod:`bnn_ppl.inference.sgmcmc.gradients`: independent batches
# with
# replacement by default, or epochs); the data stay on device, sharded as in the full-batch
# potential. With ``batch_size=None`` ``grad_fn`` is the exact full-batch gradient.
#
# Gradient-noise estimate (``noise=True``). The batch is evaluated as two halves ``a`` and ``b``
# (sizes ``⌊b/2⌋`` and ``⌈b/2⌉``, the same rows and cost as one batch) whose gradients ``g_a``,
# ``g_b`` are independent unbiased estimates (rows drawn with replacement). The batch gradient is
# their size-weighted mean, and per coordinate
#
#     σ̂² = (g_a - g_b)² · |a|·|b| / b²
#
# is an unbiased estimate of the variance of the batch gradient's noise (the prior cancels in
# the difference). For Gaussian noise it is independent of the batch gradient itself. Full batch:
# ``σ̂² = 0``. SGHMC uses it to cancel the noise (``noise_estimate="auto"``).
#
# ``grad_fn`` is built per step from the batch indices; a kernel's pure ``step(rng_key, state,
# grad_fn, step_size)`` calls it where its integrator needs a gradient and never sees the data.

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from bnn_ppl import validation
from bnn_ppl.inference.potential.bnn import FullBatchPotential, ShardedData
from bnn_ppl.inference.potential.minibatch import (
    SCHEMES,
    epoch_init,
    independent_batch,
    independent_init,
    next_batch,
)
from bnn_ppl.types import Array, Params, PRNGKey, PyTree
from bnn_ppl.validation import InputTypeError

__all__ = [
    "GradientEstimate",
    "GradFn",
    "GradientEstimator",
    "gradient_estimator",
    "full_batch_estimator",
    "NoiseAverage",
    "noise_average_init",
    "noise_average_update",
]


class GradientEstimate(NamedTuple):
    """What ``grad_fn(position)`` returns: the (minibatch) estimate ``potential_energy`` of
    ``U``, its gradient ``grad``, and ``noise_variance``: per coordinate, an estimate of the
    variance of ``grad``'s noise (zeros for full batch; ``None`` unless asked for)."""

    potential_energy: Array
    grad: Params
    noise_variance: Params | None


GradFn = Callable[[Params], GradientEstimate]
"""``grad_fn(position) -> GradientEstimate``."""


class GradientEstimator(NamedTuple):
    """A stream of per-step gradient functions.

    ``init(key) -> stream`` starts the index stream (``None`` for full batch);
    ``batch(stream) -> (grad_fn, stream)`` gives the gradient function of the next batch.
    """

    init: Callable[[PRNGKey], Any]
    batch: Callable[[Any], tuple[GradFn, Any]]
    batch_size: int | None


def gradient_estimator(
    potential: FullBatchPotential,
    data: ShardedData | None = None,
    batch_size: int | None = None,
    *,
    sampling: str = "independent",
    noise: bool = False,
) -> GradientEstimator:
    """Minibatch (or full-batch) gradients of ``potential`` on ``data`` (default: its own).

    Args:
        potential: the tempered potential.
        data: the sharded data (pass the jit argument here; ``None`` closes over
            ``potential.data``).
        batch_size: rows per batch, ``1 <= batch_size <= num_data`` (``>= 2`` with
            ``noise``); ``None``: full batch.
        sampling: ``"independent"`` (rows with replacement, fresh each step) or ``"epoch"``
            (see :mod:`bnn_ppl.inference.sgmcmc.gradients`).
        noise: also estimate the gradient-noise variance (two half batches, see the module doc).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> import bnn_ppl as bp
        >>> from bnn_ppl.models import MLP
        >>> from bnn_ppl.inference import full_batch_potential, gradient_estimator
        >>> data = bp.data.load("digits")
        >>> model = bp.BNN(MLP(hidden=(8,), out=10), bp.priors.Normal(0.3),
        ...                bp.likelihoods.Categorical())
        >>> pot = full_batch_potential(model, data.x_train, data.y_train)
        >>> est = gradient_estimator(pot, batch_size=100, noise=True)
        >>> stream = est.init(jax.random.key(0))
        >>> grad_fn, stream = est.batch(stream)
        >>> estimate = grad_fn(pot.init_params(jax.random.key(1)))
        >>> estimate.grad["Dense_0.kernel"].shape, estimate.noise_variance["Dense_0.kernel"].shape
        ((64, 8), (64, 8))
    """
    if not isinstance(potential, FullBatchPotential):
        raise InputTypeError(
            f"potential must be a FullBatchPotential, got {type(potential).__name__}."
        )
    if data is not None and not isinstance(data, ShardedData):
        raise InputTypeError(
            f"data must be the potential's ShardedData (pot.data, or pot.args[0] as a jit "
            f"argument) or None, got {type(data).__name__}."
        )
    noise = validation.check_bool("noise", noise)
    validation.check_choice("sampling", sampling, SCHEMES)
    n = potential.num_data
    batch_size = validation.check_batch_size("batch_size", batch_size, n, 2 if noise else 1)
    if batch_size is None:
        full = jax.value_and_grad(potential.potential_fn_gen(data))

        def full_fn(position: Params) -> GradientEstimate:
            u, g = full(position)
            return GradientEstimate(u, g, jax.tree.map(jnp.zeros_like, g) if noise else None)

        return GradientEstimator(lambda key: None, lambda s: (full_fn, s), None)

    mini = jax.value_and_grad(potential.minibatch_potential_fn_gen(data))
    if sampling == "independent":
        init: Callable[[PRNGKey], Any] = independent_init

        def draw(stream: Any) -> tuple[Array, Any]:
            return independent_batch(stream, batch_size, n)
    else:

        def init(key: PRNGKey) -> Any:
            return epoch_init(key, n)

        def draw(stream: Any) -> tuple[Array, Any]:
            return next_batch(stream, batch_size)

    def batch(stream: Any) -> tuple[GradFn, Any]:
        idx, stream = draw(stream)
        if not noise:

            def grad_fn(position: Params) -> GradientEstimate:
                u, g = mini(position, idx)
                return GradientEstimate(u, g, None)

            return grad_fn, stream
        return (lambda position: _two_halves(mini, position, idx)), stream

    return GradientEstimator(init, batch, batch_size)


def _two_halves(mini: Callable, position: Params, idx: Array) -> GradientEstimate:
    """The batch estimate from its two halves, and the noise variance from their difference."""
    b = idx.shape[0]
    na, nb = b // 2, b - b // 2
    ua, ga = mini(position, idx[:na])
    ub, gb = mini(position, idx[na:])
    u = (na * ua + nb * ub) / b
    g = jax.tree.map(lambda a, c: (na * a + nb * c) / b, ga, gb)
    var = jax.tree.map(lambda a, c: (a - c) ** 2 * (na * nb / b**2), ga, gb)
    return GradientEstimate(u, g, var)


def full_batch_estimator(
    potential_fn: Callable[[Any], Array], noise: bool = False
) -> GradientEstimator:
    """Exact gradients of a plain ``potential_fn(position) -> scalar`` (e.g. a test target).

    With ``noise=True`` the estimate carries a zero noise variance.

    Example:
        >>> import jax.numpy as jnp
        >>> est = full_batch_estimator(lambda z: 0.5 * jnp.sum(z["x"] ** 2))
        >>> grad_fn, _ = est.batch(est.init(None))
        >>> grad_fn({"x": jnp.array([1.0, 2.0])}).grad["x"].tolist()
        [1.0, 2.0]
    """
    if not callable(potential_fn):
        raise InputTypeError(f"potential_fn must be callable, got {type(potential_fn).__name__}.")
    noise = validation.check_bool("noise", noise)
    full = jax.value_and_grad(potential_fn)

    def grad_fn(position: Any) -> GradientEstimate:
        u, g = full(position)
        return GradientEstimate(u, g, jax.tree.map(jnp.zeros_like, g) if noise else None)

    return GradientEstimator(lambda key: None, lambda s: (grad_fn, s), None)


# ----------------------------------------------------------------- running noise average
class NoiseAverage(NamedTuple):
    """Running (exponential) average ``value`` of the per-coordinate noise-variance estimates
    and their ``count`` (for Adam-style debiasing)."""

    value: PyTree
    count: Array


def noise_average_init(position: PyTree) -> NoiseAverage:
    """No estimate yet: zeros like ``position``."""
    return NoiseAverage(jax.tree.map(jnp.zeros_like, position), jnp.zeros((), jnp.int32))


def noise_average_update(
    avg: NoiseAverage, sigma2: PyTree, decay: float
) -> tuple[NoiseAverage, PyTree]:
    """Average ``sigma2`` (a ``GradientEstimate.noise_variance``) in; returns the new average
    and its debiased value ``value / (1 - decay^count)``, the current estimate of ``σ²``.

    Example:
        >>> import jax.numpy as jnp
        >>> avg = noise_average_init(jnp.zeros(2))
        >>> avg, est = noise_average_update(avg, jnp.array([4.0, 1.0]), 0.9)
        >>> [round(v, 5) for v in est.tolist()]  # one estimate: itself
        [4.0, 1.0]
    """
    count = avg.count + 1
    value = jax.tree.map(lambda v, s: decay * v + (1 - decay) * s, avg.value, sigma2)
    debias = 1 - decay ** count.astype(jnp.result_type(float))
    est = jax.tree.map(lambda v: v / debias.astype(v.dtype), value)
    return NoiseAverage(value, count), est

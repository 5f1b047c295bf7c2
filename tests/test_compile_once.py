"""A fit compiles the potential's gradient once per program that needs it, and no more.

NumPyro's HMC/NUTS need the gradient in two programs: the initial state (``init_kernel``) and
the sampling loop (warmup and sampling in one loop). Counted here: every XLA lowering of a
program that contains the gradient of the network (a persistent-cache hit is lowered too, so
the count does not depend on the cache), recognised by a marker whose backward pass is traced
only when the network is differentiated.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import flax.linen as nn
import jax
import numpy as np
import pytest

import bnn_ppl as bp
from bnn_ppl.config import HMCConfig, NUTSConfig
from bnn_ppl.inference import fit
from bnn_ppl.models import MLP

GRADIENT_PROGRAMS = 2  # the initial state and the sampling loop
_LOWERED = "/jax/core/compile/jaxpr_to_mlir_module_duration"


class _Marks:
    """Set when the marker's backward pass is traced: a gradient of the network is built."""

    differentiated = False


@jax.custom_vjp
def _marker(y: jax.Array) -> jax.Array:
    return y


def _marker_fwd(y: jax.Array) -> tuple[jax.Array, None]:
    return y, None


def _marker_bwd(_: None, g: jax.Array) -> tuple[jax.Array]:
    _Marks.differentiated = True
    return (g,)


_marker.defvjp(_marker_fwd, _marker_bwd)


class Marked(nn.Module):
    """``inner`` with the marker on its output."""

    inner: nn.Module

    def __call__(self, x: jax.Array) -> jax.Array:
        return _marker(self.inner(x))


@contextlib.contextmanager
def gradient_lowerings() -> Iterator[list[str]]:
    """Names of the programs lowered inside the block that contain the network's gradient.

    A marked trace is attributed to the next lowering: a trace that is never lowered (as
    ``jax.eval_shape`` makes) can only add to the count, never hide a program.
    """
    found: list[str] = []

    def on_duration(event: str, duration: float, **kwargs: object) -> None:
        if event == _LOWERED and _Marks.differentiated:
            found.append(str(kwargs.get("fun_name", "?")))
            _Marks.differentiated = False

    _Marks.differentiated = False
    jax.monitoring.register_event_duration_secs_listener(on_duration)
    try:
        yield found
    finally:
        jax.monitoring.unregister_event_duration_listener(on_duration)


def _tiny() -> tuple[bp.BNN, tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(24, 2)).astype(np.float32)
    y = (x @ np.array([1.0, -0.5], np.float32)).astype(np.float32)
    model = bp.BNN(Marked(MLP(hidden=(3,), out=1)), bp.priors.Normal(1.0),
                   bp.likelihoods.Gaussian(scale=0.5))  # fmt: skip
    return model, (x, y)


def test_the_marker_sees_a_gradient_and_not_a_forward_pass():
    model, (x, y) = _tiny()
    params = model.init(jax.random.key(0), x)
    with gradient_lowerings() as found:
        jax.jit(lambda p: model.log_likelihood(p, x, y).sum())(params)
    assert found == []
    with gradient_lowerings() as found:
        jax.jit(jax.grad(lambda p: model.log_likelihood(p, x, y).sum()))(params)
    assert len(found) == 1


@pytest.mark.parametrize(
    "config",
    [
        HMCConfig(num_warmup=4, num_samples=3, trajectory_length=0.05),
        NUTSConfig(num_warmup=4, num_samples=3, max_tree_depth=2),
    ],
    ids=["hmc", "nuts"],
)
def test_a_fit_compiles_the_gradient_once_per_program(config):
    model, data = _tiny()
    with gradient_lowerings() as found:
        post = fit(model, data, config, jax.random.key(1))
    assert post.num_draws == 3
    assert len(found) <= GRADIENT_PROGRAMS, found
    assert len(found) >= 1  # (the marker works: the loop holds the gradient)

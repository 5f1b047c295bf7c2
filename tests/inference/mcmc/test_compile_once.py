"""A fit compiles the potential's gradient once per program that needs it, and no more.

NumPyro's HMC/NUTS need the gradient in two programs: the initial state (``init_kernel``) and
the sampling loop (warmup and sampling in one loop). Counted here: every program handed to XLA
(compiled, or read from the persistent cache, so the count does not depend on the cache) that
contains the gradient of the network, recognised by a mark that only the network's backward
pass puts in the program.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Iterator
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bnn_ppl as bp
from bnn_ppl.config import HMCConfig, NUTSConfig
from bnn_ppl.inference import fit
from bnn_ppl.models import MLP

GRADIENT_PROGRAMS = 2  # the initial state and the sampling loop
MARK = 7654321.0  # exact in float32
# as the module prints it
MARK_TEXT = "0x{:08X}".format(*struct.unpack("<I", struct.pack("<f", MARK)))


@jax.custom_vjp
def _marker(y: jax.Array) -> jax.Array:
    return y


def _marker_fwd(y: jax.Array) -> tuple[jax.Array, None]:
    return y, None


def _marker_bwd(_: None, g: jax.Array) -> tuple[jax.Array]:
    return (jnp.where(g == MARK, g, g),)  # (the identity, with the mark in the program)


_marker.defvjp(_marker_fwd, _marker_bwd)


class Marked(nn.Module):
    """``inner`` with the marker on its output: its backward pass (only) holds the mark."""

    inner: nn.Module

    def __call__(self, x: jax.Array) -> jax.Array:
        return _marker(self.inner(x))


@contextlib.contextmanager
def gradient_compilations(folder: Path) -> Iterator[list[str]]:
    """Names of the programs handed to XLA inside the block (compiled, or read from the
    persistent cache) that contain the network's gradient: JAX writes each such module to
    ``folder`` (``jax_dump_ir_to``) and those holding the mark are listed on exit."""
    found: list[str] = []
    before = jax.config.read("jax_dump_ir_to")
    jax.config.update("jax_dump_ir_to", str(folder))
    try:
        yield found
    finally:
        jax.config.update("jax_dump_ir_to", before)
        for f in sorted(folder.glob("*.mlir")):
            if MARK_TEXT in f.read_text():
                found.append(f.name)


def _tiny() -> tuple[bp.BNN, tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(24, 2)).astype(np.float32)
    y = (x @ np.array([1.0, -0.5], np.float32)).astype(np.float32)
    model = bp.BNN(Marked(MLP(hidden=(3,), out=1)), bp.priors.Normal(1.0),
                   bp.likelihoods.Gaussian(scale=0.5))  # fmt: skip
    return model, (x, y)


def test_the_marker_sees_a_gradient_and_not_a_forward_pass(tmp_path):
    model, (x, y) = _tiny()
    params = model.init(jax.random.key(0), x)
    with gradient_compilations(tmp_path / "a") as found:
        jax.jit(lambda p: model.log_likelihood(p, x, y).sum())(params)
    assert found == []
    with gradient_compilations(tmp_path / "b") as found:
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
def test_a_fit_compiles_the_gradient_once_per_program(config, tmp_path):
    model, data = _tiny()
    with gradient_compilations(tmp_path) as found:
        post = fit(model, data, config, jax.random.key(1))
    assert post.num_draws == 3
    assert len(found) <= GRADIENT_PROGRAMS, found
    assert len(found) >= 1  # (the marker works: the loop holds the gradient)

"""A fit compiles the potential's gradient once per program that needs it, and no more.

NumPyro's HMC/NUTS need the gradient in two programs: the initial state's potential energy and
gradient (a program of its own, so that the program running ``init_kernel`` holds none) and the
sampling loop (warmup and sampling in one loop). Counted here: every program handed to XLA
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

GRADIENT_PROGRAMS = 2  # the initial energy and gradient, and the sampling loop
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


# 4 warmup iterations adapt nothing: NUTS's trees reach depth 2 (this test counts programs)
@pytest.mark.filterwarnings("ignore::bnn_ppl.inference.mcmc.checks.TreeDepthWarning")
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
    assert any("fori_collect_loop" in name for name in found), found  # (the marker works)
    assert not any("compiled_states" in name for name in found), found  # init: no gradient


def test_the_flat_layout_ravels_and_unravels_the_parameter_tree():
    """NumPyro's functions see one vector (the leaves in jax.tree order, as ravel_pytree);
    mixed dtypes, or flatten=False, leave the tree as it is."""
    from jax.flatten_util import ravel_pytree

    from bnn_ppl.inference.mcmc.kernels import FlatLayout

    tree = {"b": jnp.arange(6.0).reshape(2, 3), "a": jnp.ones(2), "c": jnp.zeros(())}
    lay = FlatLayout(tree)
    v = lay.ravel(tree)
    assert lay.flat and v.shape == (9,)
    np.testing.assert_array_equal(v, ravel_pytree(tree)[0])
    back = lay.unravel(v)
    assert jax.tree.structure(back) == jax.tree.structure(tree)
    for k in tree:
        np.testing.assert_array_equal(back[k], tree[k])
    assert lay.matches(tree) and not lay.matches({**tree, "c": jnp.zeros(1)})
    mixed = {**tree, "n": jnp.zeros(2, jnp.int32)}
    for kept in (FlatLayout(mixed), FlatLayout(tree, flatten=False)):
        assert not kept.flat and kept.ravel(tree) is tree and kept.unravel(tree) is tree

"""``bnn_ppl.models.conv.conv_general_dilated``: same values and gradients as ``lax``, and
gradients whose convolutions XLA:CPU canonicalises inside loops (jax-ml/jax#12868)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import bnn_ppl as bp
from bnn_ppl.inference import full_batch_potential
from bnn_ppl.models import LeNet5
from bnn_ppl.models.conv import conv_general_dilated

CASES = {
    "2d same stride 1": ((3, 9, 9, 2), (3, 3, 2, 4), dict(window_strides=(1, 1), padding="SAME")),
    "2d valid stride 2": ((3, 9, 9, 2), (3, 3, 2, 4), dict(window_strides=(2, 2), padding="VALID")),
    "2d explicit pad, rhs dilation": (
        (2, 8, 7, 3),
        (2, 3, 3, 5),
        dict(window_strides=(1, 2), padding=((1, 2), (0, 1)), rhs_dilation=(2, 1)),
    ),
    "2d grouped": (
        (2, 6, 6, 4),
        (3, 3, 2, 6),
        dict(window_strides=(1, 1), padding="SAME", feature_group_count=2),
    ),
    "1d": ((4, 11, 3), (5, 3, 2), dict(window_strides=(1,), padding="VALID")),
}


def _dn(x_ndim):
    return {3: ("NWC", "WIO", "NWC"), 4: ("NHWC", "HWIO", "NHWC")}[x_ndim]


@pytest.mark.parametrize("case", sorted(CASES))
def test_values_and_gradients_equal_lax(case):
    xs, ws, kw = CASES[case]
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=xs), jnp.float32)
    w = jnp.asarray(rng.normal(size=ws), jnp.float32)
    kw = dict(kw, dimension_numbers=_dn(len(xs)))

    def loss(conv, x, w):
        y = conv(x, w, **kw)
        return jnp.sum(jnp.sin(y) * y), y

    (v0, y0), g0 = jax.value_and_grad(loss, argnums=(1, 2), has_aux=True)(
        lax.conv_general_dilated, x, w
    )
    (v1, y1), g1 = jax.jit(
        jax.value_and_grad(loss, argnums=(1, 2), has_aux=True), static_argnums=0
    )(conv_general_dilated, x, w)
    np.testing.assert_allclose(y1, y0, rtol=1e-5, atol=1e-5)
    for a, b in zip(g1, g0, strict=True):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_gradient_under_vmap_matches_lax():
    """Vectorised chains vmap the gradient over parameter sets."""
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.normal(size=(2, 6, 6, 2)), jnp.float32)
    ws = jnp.asarray(rng.normal(size=(3, 3, 3, 2, 4)), jnp.float32)
    dn = ("NHWC", "HWIO", "NHWC")

    def grad_of(conv):
        f = lambda w: jnp.sum(conv(x, w, (1, 1), "SAME", dimension_numbers=dn) ** 2)  # noqa: E731
        return jax.jit(jax.vmap(jax.grad(f)))(ws)

    np.testing.assert_allclose(
        grad_of(conv_general_dilated), grad_of(lax.conv_general_dilated), rtol=1e-4, atol=1e-4
    )


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="an XLA:CPU layout property")
def test_chunked_lenet_gradient_has_only_channels_last_convolutions():
    """In the chunked potential's scan, every convolution of the gradient is channels-last
    (``b01f_01io->b01f``), the form XLA:CPU runs on its fast path; with plain ``lax``
    convolutions three of them are not (the upstream issue this module works around)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(24, 12, 12, 1)).astype(np.float32)
    y = rng.integers(0, 10, 24)
    model = bp.BNN(LeNet5(out=10), bp.priors.Normal(0.3), bp.likelihoods.Categorical())
    pot = full_batch_potential(model, x, y, chunk_size=8)
    assert pot.num_chunks == 3
    u = pot.init_params(jax.random.key(0))
    f = jax.jit(lambda u, d: jax.value_and_grad(pot.potential_fn_gen(d))(u))
    hlo = f.lower(u, pot.data).compile().as_text()
    convs = [ln for ln in hlo.splitlines() if " convolution(" in ln]
    assert len(convs) >= 5, convs  # 2 forward, 2 kernel- and 1 input-gradient
    assert all("dim_labels=b01f_01io->b01f" in ln for ln in convs), convs

"""``bnn_ppl.models.conv.conv_general_dilated``: same values and gradients as ``lax``, and
gradients whose convolutions XLA:CPU canonicalises inside loops (jax-ml/jax#12868)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from tolerances import assert_sums_close

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


def _magnitudes(x, w, kw, ct):
    """Sums of |terms| behind every entry of the output and of its input and kernel gradients
    for the cotangent ``ct``: the same (bilinear) convolution and its VJP, on |x|, |w|, |ct|."""
    conv = lambda a, b: lax.conv_general_dilated(a, b, **kw)  # noqa: E731
    y_mag, vjp = jax.vjp(conv, jnp.abs(x), jnp.abs(w))
    return (y_mag, *vjp(jnp.abs(ct)))


def _num_terms(w_shape, y_shape, groups=1):
    """Terms summed per entry: output (window x input channels per group), input gradient
    (window x output channels per group), kernel gradient (batch x output positions)."""
    window = int(np.prod(w_shape[:-2]))
    return window * w_shape[-2], window * w_shape[-1] // groups, int(np.prod(y_shape[:-1]))


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
    # float32 sums in other orders (tests/tolerances.py)
    mags = _magnitudes(x, w, kw, jnp.sin(y0) + y0 * jnp.cos(y0))  # ct = d loss / d y
    terms = _num_terms(ws, y0.shape, kw.get("feature_group_count", 1))
    for what, a, b, mag, n in zip(
        ("output", "input gradient", "kernel gradient"),
        (y1, *g1),
        (y0, *g0),
        mags,
        terms,
        strict=True,
    ):
        assert a.shape == b.shape
        assert_sums_close(a, b, mag, n, what=what)
    # a real difference is far outside: a flipped kernel (correlation vs convolution), the
    # kernel gradient of all but the last example
    flipped = lax.conv_general_dilated(x, jnp.flip(w, range(len(xs) - 2)), **kw)
    with pytest.raises(AssertionError, match="output"):
        assert_sums_close(y1, flipped, mags[0], terms[0], what="output")
    short = jax.grad(lambda w: loss(lax.conv_general_dilated, x[:-1], w)[0])(w)
    with pytest.raises(AssertionError, match="kernel gradient"):
        assert_sums_close(g1[1], short, mags[2], terms[2], what="kernel gradient")


def test_gradient_under_vmap_matches_lax():
    """Vectorised chains vmap the gradient over parameter sets."""
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.normal(size=(2, 6, 6, 2)), jnp.float32)
    ws = jnp.asarray(rng.normal(size=(3, 3, 3, 2, 4)), jnp.float32)
    dn = ("NHWC", "HWIO", "NHWC")
    kw = dict(window_strides=(1, 1), padding="SAME", dimension_numbers=dn)

    def grad_of(conv):
        f = lambda w: jnp.sum(conv(x, w, **kw) ** 2)  # noqa: E731
        return jax.jit(jax.vmap(jax.grad(f)))(ws)

    # kernel gradient entries: float32 sums of x * 2y over 2 examples x 36 positions
    ys = jax.vmap(lambda w: lax.conv_general_dilated(x, w, **kw))(ws)
    mag = jax.vmap(lambda w, y: _magnitudes(x, w, kw, 2 * y)[2])(ws, ys)
    assert_sums_close(grad_of(conv_general_dilated), grad_of(lax.conv_general_dilated), mag,
                      2 * 6 * 6, what="kernel gradient")  # fmt: skip


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

"""ResNet++ of Heek & Kalchbrenner (2019), the ATMC paper: SELU, Fixup-style init, weight norm."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax.typing import Initializer

from bnn_ppl.models.conv import conv_general_dilated as conv
from bnn_ppl.validation import InputValueError

__all__ = ["ResNetPP", "ResNetPPBlock", "WNConv", "WNDense", "weight_norm"]


def weight_norm(direction: jax.Array, scale: jax.Array) -> jax.Array:
    """The effective kernel ``scale · direction / ‖direction‖``, normalised per output feature.

    The feature axis is the last one: column ``i`` (``direction[..., i]``) is divided by its
    Euclidean norm over all other axes and multiplied by ``scale[i]``. No ε is added, so a
    direction column of exactly zero gives NaN (the eq. 13 prior keeps ``‖v_i‖`` near 1).
    """
    axes = tuple(range(direction.ndim - 1))
    inv_norm = jax.lax.rsqrt(jnp.sum(jnp.square(direction), axis=axes))
    return direction * (scale * inv_norm)


class WNDense(nn.Module):
    """Weight-normalised dense layer: ``x @ weight_norm(direction, scale) + bias``.

    Parameters: ``direction`` ``(d_in, features)``, ``scale`` ``(features,)``, ``bias``
    ``(features,)``; the feature axis of ``direction`` is the last one, ``d = d_in``.

    Attributes:
        features: number of output features.
        use_bias: add a bias.
        direction_init, scale_init, bias_init: initialisers (LeCun normal, ones, zeros).
    """

    features: int
    use_bias: bool = True
    direction_init: Initializer = nn.initializers.lecun_normal()
    scale_init: Initializer = nn.initializers.ones
    bias_init: Initializer = nn.initializers.zeros

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        direction = self.param("direction", self.direction_init, (x.shape[-1], self.features))
        scale = self.param("scale", self.scale_init, (self.features,))
        y = jnp.dot(x, weight_norm(direction, scale))
        if self.use_bias:
            y = y + self.param("bias", self.bias_init, (self.features,))
        return y


class WNConv(nn.Module):
    """Weight-normalised convolution on channels-last inputs (1-, 2- or 3-D).

    Parameters: ``direction`` ``(*kernel_size, C_in, features)``, ``scale`` ``(features,)``,
    ``bias`` ``(features,)``; the feature axis of ``direction`` is the last one and
    ``d = prod(kernel_size) · C_in``.

    Attributes:
        features: number of output channels.
        kernel_size: spatial size of the kernel, e.g. ``(3, 3)``.
        strides: an int or one stride per spatial axis.
        padding: ``'SAME'`` (default) or ``'VALID'`` (or explicit pairs, as in ``lax``).
        use_bias: add a bias.
        direction_init, scale_init, bias_init: initialisers (LeCun normal, ones, zeros).
    """

    features: int
    kernel_size: Sequence[int] = (3, 3)
    strides: int | Sequence[int] = 1
    padding: str | Sequence[tuple[int, int]] = "SAME"
    use_bias: bool = True
    direction_init: Initializer = nn.initializers.lecun_normal()
    scale_init: Initializer = nn.initializers.ones
    bias_init: Initializer = nn.initializers.zeros

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        ks = tuple(self.kernel_size)
        n = len(ks)
        if not 1 <= n <= 3 or x.ndim != n + 2:
            raise InputValueError(
                f"WNConv with a {n}-D kernel takes inputs (batch, {n} spatial axes, channels), "
                f"got shape {x.shape}."
            )
        strides = (self.strides,) * n if isinstance(self.strides, int) else tuple(self.strides)
        direction = self.param("direction", self.direction_init, (*ks, x.shape[-1], self.features))
        scale = self.param("scale", self.scale_init, (self.features,))
        spatial = "HWD"[:n]
        y = conv(
            x,
            weight_norm(direction, scale).astype(x.dtype),
            window_strides=strides,
            padding=self.padding,
            dimension_numbers=(f"N{spatial}C", f"{spatial}IO", f"N{spatial}C"),
        )
        if self.use_bias:
            y = y + self.param("bias", self.bias_init, (self.features,))
        return y


class ResNetPPBlock(nn.Module):
    """ResNet++ residual block (post-activation, no normaliser); see the module docstring.

    Attributes:
        features: channels of the branch; the block outputs ``features`` (basic) or
            ``4 · features`` (bottleneck) channels.
        strides: stride of the 3x3 convolution and of the projection shortcut.
        bottleneck: Fig. 1's 1x1 -> 3x3 -> 1x1 block instead of two 3x3 convolutions.
        fixup_scale: initial scale of the branch's last layer.
        activation: nonlinearity (default SELU).
    """

    features: int
    strides: int = 1
    bottleneck: bool = False
    fixup_scale: float = 1e-3
    activation: Callable[[jax.Array], jax.Array] = nn.selu

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        act, f, s = self.activation, self.features, self.strides
        fixup = nn.initializers.constant(self.fixup_scale)
        if self.bottleneck:
            out = 4 * f
            y = act(WNConv(f, (1, 1), name="conv0")(x))
            y = act(WNConv(f, (3, 3), s, name="conv1")(y))
            y = WNConv(out, (1, 1), scale_init=fixup, name="conv2")(y)
        else:
            out = f
            y = act(WNConv(f, (3, 3), s, name="conv0")(x))
            y = WNConv(f, (3, 3), scale_init=fixup, name="conv1")(y)
        if s != 1 or x.shape[-1] != out:
            x = WNConv(out, (1, 1), s, name="shortcut")(x)
        return act(x + y)


class ResNetPP(nn.Module):
    """ResNet++ (CIFAR layout): depth ``6 · blocks_per_stage + 2`` (``9 ·`` with bottlenecks).

    Attributes:
        out: number of outputs (classes).
        width: branch features of the first stage (stages: ``width``, ``2 width``, ``4 width``).
        blocks_per_stage: residual blocks per stage (9 for the paper's ResNet-56).
        bottleneck: use Fig. 1's bottleneck blocks (outputs ``4x`` the branch features).
        fixup_scale: initial scale of the last layer of every residual branch.
        activation: nonlinearity (default SELU).

    A ResNet without batch normalisation, built so that its posterior is easy to sample (paper, Sec.
    4): SELU activations, no normaliser, residual branches whose last layer starts with a small
    scale
    ("a simplified version of Fixup": each block starts close to ``SELU(shortcut)``), and weight
    normalisation on *every* dense and convolutional layer, the stem, the projection shortcuts and
    the
    classifier included.

    Weight normalisation (paper, eq. 12). Each output feature ``i`` of a layer has the weight vector

        θ_i = s_i · v_i / ‖v_i‖

    where the direction ``v_i`` and the scale ``s_i`` are separate parameters. Layout, for
    :class:`WNDense` and :class:`WNConv`:

    * ``<layer>.direction``: the kernel-shaped direction ``v``, ``(d_in, F)`` for a dense layer and
      ``(kh, kw, C_in, F)`` for a 2-D convolution. **The feature axis is the last axis**; the
      feature
      vector ``v_i = direction[..., i]`` has ``d = prod(direction.shape[:-1])`` entries, the fan-in
      of that feature (``d_in``, or ``kh · kw · C_in``).
    * ``<layer>.scale``: ``(F,)``, one scale ``s_i`` per feature.
    * ``<layer>.bias``: ``(F,)`` (``use_bias=True``, the default).

    :func:`weight_norm` computes the effective kernel. The paper's priors are meant for these
    paths: ``p(v_i) ∝ exp(-(d/2) (‖v_i‖² - 1)²)`` (eq. 13) on each column of a ``"*.direction"``
    (it pins ``‖v_i‖`` near 1, which does not change the function but fixes the effective step
    size),
    and a group Laplace ``p(s_i) ∝ exp(-|s_i| / b)`` (``b = 5`` in the paper) on ``"*.scale"``.

    Initialisation. Directions are LeCun-normal (``‖v_i‖² ≈ 1``, the region eq. 13 favours), biases
    zero and scales 1, so every layer's effective weights are exactly unit-norm per feature: the
    variance ``1/d`` that SELU's self-normalisation assumes. The last layer of each residual branch
    has its scales set to ``fixup_scale`` (default ``1e-3``, "a small constant"): with
    ``fixup_scale=0`` a block is exactly ``SELU(shortcut(x))`` at init (Fixup's zero init); a
    non-zero default keeps the gradient of the branch's direction non-zero and keeps a norm-based
    scale prior differentiable at the initial point.

    Architecture (CIFAR layout; paper Fig. 1, post-activation, no normaliser)::

        stem:   WNConv 3x3 (width) -> SELU
        basic block (default):   y = SELU(WNConv 3x3, stride s (x));  y = WNConv 3x3 (y)   [fixup]
        bottleneck=True (Fig. 1): y = SELU(WNConv 1x1 (x)); y = SELU(WNConv 3x3, stride s (y));
                                  y = WNConv 1x1, 4x features (y)                          [fixup]
        shortcut = x, or WNConv 1x1, stride s (x) when the shape changes;  out = SELU(shortcut + y)
        3 stages of ``blocks_per_stage`` blocks with ``width``, ``2 width``, ``4 width`` features,
        stride 2 in the first block of stages 2 and 3
        head:   global average pool -> WNDense out

    The paper's CIFAR-10 net is ResNet-56 with the filters doubled to 32: the defaults
    (``width=32``, ``blocks_per_stage=9``, basic blocks; depth 6·9 + 2 = 56), 3,412,404 parameters
    for 10 classes. Fig. 1 draws the bottleneck block of the ImageNet ResNet-50
    (``bottleneck=True``; this module has only the CIFAR stem).

    Parameter tree of ``ResNetPP(out=10, width=4, blocks_per_stage=1)`` on 32x32x3 inputs
    (generated by the code; this is a doctest)::

        >>> import jax.numpy as jnp
        >>> from bnn_ppl.network import as_network
        >>> from bnn_ppl.models import ResNetPP
        >>> net = ResNetPP(out=10, width=4, blocks_per_stage=1)
        >>> shapes = as_network(net).shapes(jnp.zeros((1, 32, 32, 3)))
        >>> for path, s in shapes.items():
        ...     print(f"{path:<36}{s.shape}")
        head.bias                           (10,)
        head.direction                      (16, 10)
        head.scale                          (10,)
        stage0_block0.conv0.bias            (4,)
        stage0_block0.conv0.direction       (3, 3, 4, 4)
        stage0_block0.conv0.scale           (4,)
        stage0_block0.conv1.bias            (4,)
        stage0_block0.conv1.direction       (3, 3, 4, 4)
        stage0_block0.conv1.scale           (4,)
        stage1_block0.conv0.bias            (8,)
        stage1_block0.conv0.direction       (3, 3, 4, 8)
        stage1_block0.conv0.scale           (8,)
        stage1_block0.conv1.bias            (8,)
        stage1_block0.conv1.direction       (3, 3, 8, 8)
        stage1_block0.conv1.scale           (8,)
        stage1_block0.shortcut.bias         (8,)
        stage1_block0.shortcut.direction    (1, 1, 4, 8)
        stage1_block0.shortcut.scale        (8,)
        stage2_block0.conv0.bias            (16,)
        stage2_block0.conv0.direction       (3, 3, 8, 16)
        stage2_block0.conv0.scale           (16,)
        stage2_block0.conv1.bias            (16,)
        stage2_block0.conv1.direction       (3, 3, 16, 16)
        stage2_block0.conv1.scale           (16,)
        stage2_block0.shortcut.bias         (16,)
        stage2_block0.shortcut.direction    (1, 1, 8, 16)
        stage2_block0.shortcut.scale        (16,)
        stem.bias                           (4,)
        stem.direction                      (3, 3, 3, 4)
        stem.scale                          (4,)

    Example:
        >>> import jax
        >>> variables = net.init(jax.random.key(0), jnp.zeros((1, 32, 32, 3)))
        >>> net.apply(variables, jnp.ones((2, 32, 32, 3))).shape
        (2, 10)
        >>> from bnn_ppl.models.resnetpp import WNDense, weight_norm
        >>> p = WNDense(3).init(jax.random.key(1), jnp.zeros((1, 5)))["params"]
        >>> {k: p[k].shape for k in sorted(p)}
        {'bias': (3,), 'direction': (5, 3), 'scale': (3,)}
        >>> p["scale"] = jnp.array([0.5, 1.0, 2.0])
        >>> jnp.linalg.norm(weight_norm(p["direction"], p["scale"]), axis=0).round(4)  # = scale
        Array([0.5, 1. , 2. ], dtype=float32)
    """

    out: int = 10
    width: int = 32
    blocks_per_stage: int = 9
    bottleneck: bool = False
    fixup_scale: float = 1e-3
    activation: Callable[[jax.Array], jax.Array] = nn.selu

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        if x.ndim != 4:
            raise InputValueError(f"ResNetPP takes NHWC images (n, H, W, C), got shape {x.shape}.")
        x = self.activation(WNConv(self.width, (3, 3), name="stem")(x))
        features = self.width
        for stage in range(3):
            for block in range(self.blocks_per_stage):
                x = ResNetPPBlock(
                    features,
                    strides=2 if stage > 0 and block == 0 else 1,
                    bottleneck=self.bottleneck,
                    fixup_scale=self.fixup_scale,
                    activation=self.activation,
                    name=f"stage{stage}_block{block}",
                )(x)
            features *= 2
        x = jnp.mean(x, axis=(1, 2))
        return WNDense(self.out, name="head")(x)

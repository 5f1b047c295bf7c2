"""The model zoo: shapes, parameter trees, FRN, weight norm and Fixup, potentials and HMC.

Most tests build parameters with NumPy from the abstract parameter shapes instead of calling the
Flax initialisers: on CPU, compiling ``jax.random`` draws of rank-4 (convolution-kernel) shapes
is slow with JAX's default partitionable Threefry (seconds per shape), and the forward pass is
what these tests are about. The tests that check initial values do call the initialisers.
"""

from __future__ import annotations

import ast
import re
import types

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax.traverse_util import flatten_dict
from tolerances import assert_sums_close

import bnn_ppl as bp
from bnn_ppl.inference import full_batch_potential, hmc
from bnn_ppl.models import (
    CNNLSTM,
    FRN,
    LeNet5,
    ResNet20FRN,
    ResNetPP,
    WNConv,
    WNDense,
    cnn_lstm,
    lenet,
    lenet5_bnn_hmc,
    resnet,
    resnetpp,
)
from bnn_ppl.models.resnetpp import ResNetPPBlock, weight_norm
from bnn_ppl.network import as_network

# Tiny configurations: (network, shape of one input, dtype of the input).
TINY = {
    "lenet5": (LeNet5(out=3, features=(2, 3), hidden=(4,)), (8, 8, 1), np.float32),
    "resnet20_frn": (ResNet20FRN(out=3, width=2, blocks_per_stage=1), (8, 8, 3), np.float32),
    "resnetpp": (ResNetPP(out=3, width=2, blocks_per_stage=1), (8, 8, 3), np.float32),
    "cnn_lstm": (
        CNNLSTM(
            out=3,
            vocab_size=20,
            embed_dim=4,
            conv_features=3,
            kernel_size=3,
            pool_size=2,
            lstm_features=3,
        ),
        (12,),
        np.int32,
    ),
}


def _inputs(shape: tuple[int, ...], n: int, dtype: type, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(0, 20, size=(n, *shape)).astype(dtype)
    return rng.normal(size=(n, *shape)).astype(dtype)


def _shapes(net: nn.Module, x: np.ndarray) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in as_network(net).shapes(x[:1]).items()}


def _numpy_params(net: nn.Module, x: np.ndarray, seed: int = 0) -> dict[str, np.ndarray]:
    """LeCun-scaled normal values for every parameter (no jax.random, no compilation)."""
    rng = np.random.default_rng(seed)
    out = {}
    for k, shape in _shapes(net, x).items():
        fan_in = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
        out[k] = (rng.normal(size=shape) / np.sqrt(fan_in)).astype(np.float32)
    return out


def _forward(net: nn.Module, x: np.ndarray, seed: int = 0) -> np.ndarray:
    network = as_network(net)
    return np.asarray(jax.jit(network.apply)(_numpy_params(net, x, seed), x))


# ------------------------------------------------------------------- forward shapes
@pytest.mark.parametrize("name", list(TINY))
def test_tiny_forward_shape_and_finite(name):
    net, shape, dtype = TINY[name]
    x = _inputs(shape, 5, dtype)
    y = _forward(net, x)
    assert y.shape == (5, 3)
    assert np.all(np.isfinite(y))


@pytest.mark.parametrize(
    "net",
    [
        ResNet20FRN(out=10, width=2, blocks_per_stage=1),
        ResNetPP(out=10, width=2, blocks_per_stage=1),
        ResNetPP(out=10, width=1, blocks_per_stage=1, bottleneck=True),
    ],
)
def test_resnets_run_at_cifar_shape(net):
    y = _forward(net, _inputs((32, 32, 3), 2, np.float32))
    assert y.shape == (2, 10) and np.all(np.isfinite(y))


@pytest.mark.parametrize(
    "net, side, flat_features",
    [
        (LeNet5(), 28, 7 * 7 * 16),
        (LeNet5(), 32, 8 * 8 * 16),
        (LeNet5(), 8, 2 * 2 * 16),
        (LeNet5(), 4, 1 * 1 * 16),
        (LeNet5(padding="VALID"), 16, 1 * 1 * 16),
        (LeNet5(padding="VALID"), 32, 5 * 5 * 16),
        (lenet5_bnn_hmc(), 28, 2 * 2 * 120),
        (lenet5_bnn_hmc(), 32, 3 * 3 * 120),
        (lenet5_bnn_hmc(), 15, 1 * 1 * 120),
    ],
)
def test_lenet_input_sizes(net, side, flat_features):
    channels = 3 if side == 32 else 1
    shapes = _shapes(net, np.zeros((1, side, side, channels), np.float32))
    assert shapes["Dense_0.kernel"][0] == flat_features
    assert shapes[f"Dense_{len(net.hidden)}.kernel"][1] == 10
    assert net.min_input_size() <= side


@pytest.mark.parametrize(
    "net, side", [(LeNet5(), 3), (LeNet5(padding="VALID"), 15), (lenet5_bnn_hmc(), 14)]
)
def test_lenet_refuses_too_small_inputs(net, side):
    with pytest.raises(ValueError, match=f"at least {side + 1}x{side + 1}"):
        _shapes(net, np.zeros((1, side, side, 1), np.float32))


def test_lenet_forward_on_mnist_cifar_and_digits_shapes():
    for shape in [(28, 28, 1), (32, 32, 3), (8, 8, 1)]:
        y = _forward(LeNet5(out=10), _inputs(shape, 2, np.float32))
        assert y.shape == (2, 10) and np.all(np.isfinite(y))


def test_bad_input_ranks_are_refused():
    with pytest.raises(ValueError, match="NHWC"):
        _shapes(LeNet5(), np.zeros((2, 64), np.float32))
    with pytest.raises(ValueError, match="NHWC"):
        _shapes(ResNet20FRN(), np.zeros((2, 8, 8), np.float32))
    with pytest.raises(ValueError, match="NHWC"):
        _shapes(ResNetPP(), np.zeros((2, 8, 8), np.float32))
    with pytest.raises(ValueError, match=r"\(n, T\)"):
        _shapes(CNNLSTM(), np.zeros((2, 8, 1), np.int32))
    with pytest.raises(ValueError, match="at least kernel_size"):
        _shapes(CNNLSTM(), np.zeros((2, 7), np.int32))


def test_cnn_lstm_float_token_ids_equal_int_ones():
    net, shape, _ = TINY["cnn_lstm"]
    x = _inputs(shape, 4, np.int32)
    params = _numpy_params(net, x)
    apply = as_network(net).apply
    np.testing.assert_array_equal(apply(params, x), apply(params, x.astype(np.float32)))


def test_cnn_lstm_out_of_range_token_gives_nan_as_documented():
    net, shape, _ = TINY["cnn_lstm"]
    x = _inputs(shape, 2, np.int32)
    x[1, 0] = net.vocab_size
    y = as_network(net).apply(_numpy_params(net, x), x)
    assert np.all(np.isfinite(y[0])) and np.all(np.isnan(y[1]))


# ------------------------------------------------------------------ parameter trees
@pytest.mark.parametrize("name", list(TINY))
def test_only_params_collection(name):
    net, shape, dtype = TINY[name]
    variables = jax.eval_shape(net.init, jax.random.key(0), _inputs(shape, 1, dtype))
    assert set(variables) == {"params"}


def _documented_tree(module: types.ModuleType, cls: type) -> dict[str, tuple[int, ...]]:
    """The ``path  (shape)`` lines of the parameter-tree doctest in a network's docstring (or
    its module's)."""
    pattern = re.compile(r"^ {4,}([A-Za-z_][\w.]*)\s+(\([\d, ]*\))\s*$")
    out = {}
    for line in f"{module.__doc__}\n{cls.__doc__}".splitlines():
        m = pattern.match(line)
        if m:
            out[m.group(1)] = ast.literal_eval(m.group(2))
    return out


@pytest.mark.parametrize(
    "module, net, x",
    [
        (lenet, LeNet5(out=10), np.zeros((1, 28, 28, 1), np.float32)),
        (
            resnet,
            ResNet20FRN(out=10, width=4, blocks_per_stage=1),
            np.zeros((1, 32, 32, 3), np.float32),
        ),
        (
            resnetpp,
            ResNetPP(out=10, width=4, blocks_per_stage=1),
            np.zeros((1, 32, 32, 3), np.float32),
        ),
        (
            cnn_lstm,
            CNNLSTM(out=2, vocab_size=50, embed_dim=8, conv_features=6, lstm_features=5),
            np.zeros((1, 20), np.int32),
        ),
    ],
)
def test_documented_parameter_tree_is_the_real_one(module, net, x):
    documented = _documented_tree(module, type(net))
    assert documented, f"no parameter tree found in {module.__name__}'s docstring"
    assert documented == _shapes(net, x)


@pytest.mark.parametrize(
    "net, x, count",
    [
        (LeNet5(out=10), np.zeros((1, 28, 28, 1), np.float32), 107_786),
        (ResNet20FRN(out=10), np.zeros((1, 32, 32, 3), np.float32), 274_042),
        (ResNetPP(out=10), np.zeros((1, 32, 32, 3), np.float32), 3_412_404),
        (CNNLSTM(), np.zeros((1, 100), np.int32), 2_638_966),
    ],
)
def test_default_parameter_counts(net, x, count):
    assert sum(int(np.prod(s)) for s in _shapes(net, x).values()) == count


def test_resnet20_frn_layout():
    shapes = _shapes(ResNet20FRN(out=10), np.zeros((1, 32, 32, 3), np.float32))
    convs = [k for k in shapes if k.endswith(".kernel") and len(shapes[k]) == 4]
    assert len(convs) == 1 + 2 * 9 + 2  # stem, two per block, two projection shortcuts
    frns = {k.rsplit(".", 1)[0] for k in shapes if k.endswith(".tau")}
    assert len(frns) == len(convs)  # every convolution is followed by an FRN
    assert shapes["stage1_block0.shortcut_conv.kernel"] == (1, 1, 16, 32)
    assert shapes["stage2_block2.conv1.kernel"] == (3, 3, 64, 64)
    assert shapes["head.kernel"] == (64, 10)


def test_resnetpp_every_layer_is_weight_normalised():
    for net in [
        ResNetPP(out=10, width=2, blocks_per_stage=2),
        ResNetPP(out=10, width=2, blocks_per_stage=1, bottleneck=True),
    ]:
        shapes = _shapes(net, np.zeros((1, 8, 8, 3), np.float32))
        layers = {k.rsplit(".", 1)[0] for k in shapes}
        assert all(k.rsplit(".", 1)[1] in {"direction", "scale", "bias"} for k in shapes)
        for layer in layers:
            direction = shapes[f"{layer}.direction"]
            assert shapes[f"{layer}.scale"] == (direction[-1],)
            assert shapes[f"{layer}.bias"] == (direction[-1],)
        n_blocks = 3 * net.blocks_per_stage
        shortcuts = 3 if net.bottleneck else 2
        per_block = 3 if net.bottleneck else 2
        assert len(layers) == 1 + per_block * n_blocks + shortcuts + 1


def test_resnetpp_uses_selu_by_default():
    assert ResNetPP().activation is nn.selu and ResNetPPBlock(4).activation is nn.selu


# --------------------------------------------------------------------------- FRN
def _frn_reference(x, gamma, beta, tau, eps):
    x = x.astype(np.float64)
    nu2 = np.mean(x**2, axis=tuple(range(1, x.ndim - 1)), keepdims=True)
    return np.maximum(gamma * x / np.sqrt(nu2 + eps) + beta, tau)


def _frn_terms(x, gamma, beta, eps):
    """Magnitude and rounding count of FRN's ``gamma * x / sqrt(mean(x^2) + eps) + beta`` for
    tests/tolerances.py: the two terms of the final sum; the positions summed in the mean of
    squares, then eps, the square root, the division, gamma, beta (and a scaled input): 5."""
    x = x.astype(np.float64)
    axes = tuple(range(1, x.ndim - 1))
    nu2 = np.mean(x**2, axis=axes, keepdims=True)
    positions = int(np.prod([x.shape[a] for a in axes]))
    return np.abs(gamma * x / np.sqrt(nu2 + eps)) + np.abs(beta), positions + 5


@pytest.mark.parametrize("shape", [(3, 5, 4, 6), (3, 7, 6), (3, 6)])
def test_frn_matches_numpy_reference(shape):
    rng = np.random.default_rng(1)
    x = rng.normal(size=shape).astype(np.float32) * 3.0
    c = shape[-1]
    params = {k: rng.normal(size=(c,)).astype(np.float32) for k in ("gamma", "beta", "tau")}
    for eps in (1e-6, 0.5):
        got = FRN(eps=eps).apply({"params": params}, x)
        want = _frn_reference(x, params["gamma"], params["beta"], params["tau"], eps)
        assert_sums_close(got, want, *_frn_terms(x, params["gamma"], params["beta"], eps))


def test_frn_init_and_scale_invariance():
    x = np.random.default_rng(2).normal(size=(2, 4, 4, 3)).astype(np.float32)
    variables = jax.eval_shape(FRN().init, jax.random.key(0), x)
    assert {k: v.shape for k, v in variables["params"].items()} == {
        "gamma": (3,),
        "beta": (3,),
        "tau": (3,),
    }
    params = {
        "gamma": np.ones(3, np.float32),
        "beta": np.zeros(3, np.float32),
        "tau": np.zeros(3, np.float32),
    }
    # γ = 1, β = τ = 0 (the initial values): max(x / rms(x), 0) per example and channel, with
    # rms(x) = sqrt(mean(x^2) + eps); each output is held to its float64 value
    x = x.astype(np.float64)
    want = {}
    for scale in (1.0, 7.0):
        xs = scale * x
        want[scale] = np.maximum(xs / np.sqrt(np.mean(xs**2, axis=(1, 2), keepdims=True) + 1e-6), 0)
        got = FRN().apply({"params": params}, xs.astype(np.float32))
        assert_sums_close(got, want[scale], *_frn_terms(xs, params["gamma"], params["beta"], 1e-6))
    # scale-invariant up to eps = 1e-6, which changes the outputs by eps / (2 mean(x^2))
    # relative (float64 here)
    np.testing.assert_allclose(want[7.0], want[1.0], rtol=1e-5)


# ------------------------------------------------------------------- weight norm
def test_weight_norm_per_feature_norm_is_scale():
    rng = np.random.default_rng(3)
    v = rng.normal(size=(3, 3, 4, 5)).astype(np.float32)
    s = rng.normal(size=(5,)).astype(np.float32)
    w = weight_norm(v, s)
    np.testing.assert_allclose(np.linalg.norm(np.reshape(w, (-1, 5)), axis=0), np.abs(s), rtol=1e-5)
    # The direction's length does not matter; its sign per feature and the scale's do.
    np.testing.assert_allclose(weight_norm(2.5 * v, s), w, rtol=1e-5, atol=1e-7)


def test_wn_layers_equal_plain_layers_with_the_effective_kernel():
    rng = np.random.default_rng(4)
    x = rng.normal(size=(2, 6, 6, 3)).astype(np.float32)
    conv = WNConv(4, (3, 3), strides=2)
    p = {
        "direction": rng.normal(size=(3, 3, 3, 4)).astype(np.float32),
        "scale": rng.normal(size=(4,)).astype(np.float32),
        "bias": rng.normal(size=(4,)).astype(np.float32),
    }
    plain = nn.Conv(4, (3, 3), strides=(2, 2), padding="SAME")
    want = plain.apply(
        {"params": {"kernel": weight_norm(p["direction"], p["scale"]), "bias": p["bias"]}}, x
    )
    # float32 sums of 3x3x3 products and the bias (tests/tolerances.py): the same layer on
    # |x| with |kernel| and |bias| adds up their absolute values
    magnitude = plain.apply({"params": {"kernel": np.abs(weight_norm(p["direction"], p["scale"])),
                                        "bias": np.abs(p["bias"])}}, np.abs(x))  # fmt: skip
    assert_sums_close(conv.apply({"params": p}, x), want, magnitude, 3 * 3 * 3 + 1)

    xd = rng.normal(size=(2, 5)).astype(np.float32)
    pd = {
        "direction": rng.normal(size=(5, 3)).astype(np.float32),
        "scale": rng.normal(size=(3,)).astype(np.float32),
        "bias": rng.normal(size=(3,)).astype(np.float32),
    }
    want = nn.Dense(3).apply(
        {"params": {"kernel": weight_norm(pd["direction"], pd["scale"]), "bias": pd["bias"]}}, xd
    )
    magnitude = nn.Dense(3).apply(
        {"params": {"kernel": np.abs(weight_norm(pd["direction"], pd["scale"])),
                    "bias": np.abs(pd["bias"])}}, np.abs(xd)
    )  # fmt: skip
    assert_sums_close(WNDense(3).apply({"params": pd}, xd), want, magnitude, 5 + 1)


@pytest.fixture(scope="module")
def resnetpp_init():
    """A tiny ResNet++ (two blocks per stage) and its Flax initial parameters, flattened."""
    net = ResNetPP(out=3, width=2, blocks_per_stage=2)
    x = _inputs((8, 8, 3), 2, np.float32)
    variables = net.init(jax.random.key(0), x)
    flat = {".".join(k): np.asarray(v) for k, v in flatten_dict(variables["params"]).items()}
    return net, x, variables, flat


def test_resnetpp_initial_values(resnetpp_init):
    net, _, _, flat = resnetpp_init
    layers = sorted({k.rsplit(".", 1)[0] for k in flat})
    last_in_branch = {f"stage{s}_block{b}.conv1" for s in range(3) for b in range(2)}
    for layer in layers:
        v, s = flat[f"{layer}.direction"], flat[f"{layer}.scale"]
        w = np.reshape(weight_norm(v, s), (-1, v.shape[-1]))
        np.testing.assert_allclose(np.linalg.norm(w, axis=0), s, rtol=1e-5, atol=1e-7)
        np.testing.assert_array_equal(flat[f"{layer}.bias"], 0.0)
        expected_scale = net.fixup_scale if layer in last_in_branch else 1.0
        np.testing.assert_allclose(s, expected_scale)
        # LeCun-normal directions: squared feature norms near 1 (the mode region of eq. 13).
        sq = np.sum(np.reshape(v, (-1, v.shape[-1])) ** 2, axis=0)
        assert 0.1 < sq.mean() < 3.0, (layer, sq)


def test_resnetpp_fixup_branches_start_at_zero(resnetpp_init):
    net, x, variables, flat = resnetpp_init
    params = jax.tree.map(jnp.asarray, variables["params"])
    for block in [k for k in params if k.startswith("stage")]:
        params[block]["conv1"]["scale"] = jnp.zeros_like(params[block]["conv1"]["scale"])
    _, state = net.apply({"params": params}, x, capture_intermediates=True)
    inter = state["intermediates"]
    previous = nn.selu(inter["stem"]["__call__"][0])
    for block in [k for k in params if k.startswith("stage")]:
        branch_end = inter[block]["conv1"]["__call__"][0]
        np.testing.assert_array_equal(branch_end, 0.0)  # the residual branch adds exactly 0
        out = inter[block]["__call__"][0]
        if "shortcut" in inter[block]:
            shortcut = inter[block]["shortcut"]["__call__"][0]
        else:
            shortcut = previous
        np.testing.assert_allclose(out, nn.selu(shortcut), rtol=1e-6, atol=1e-6)
        previous = out


@pytest.mark.parametrize(
    "block, in_channels",
    [
        (ResNetPPBlock(4, fixup_scale=0.0), 4),
        (ResNetPPBlock(8, strides=2, fixup_scale=0.0), 4),
        (ResNetPPBlock(2, bottleneck=True, fixup_scale=0.0), 8),
    ],
)
def test_resnetpp_block_is_selu_of_shortcut_at_init(block, in_channels):
    x = _inputs((6, 6, in_channels), 2, np.float32, seed=5) * 2.0
    variables = block.init(jax.random.key(1), x)
    out = block.apply(variables, x)
    if "shortcut" in variables["params"]:
        shortcut = WNConv(out.shape[-1], (1, 1), block.strides).apply(
            {"params": variables["params"]["shortcut"]}, x
        )
    else:
        shortcut = x
    np.testing.assert_allclose(out, nn.selu(shortcut), rtol=1e-6, atol=1e-6)
    assert np.any(np.asarray(shortcut) < 0)  # so SELU (not the identity) is what was applied


def test_resnetpp_default_fixup_scale_is_small():
    block = ResNetPPBlock(4)
    x = _inputs((6, 6, 4), 2, np.float32, seed=6)
    variables = block.init(jax.random.key(2), x)
    np.testing.assert_allclose(variables["params"]["conv1"]["scale"], 1e-3)
    out = np.asarray(block.apply(variables, x))
    ref = np.asarray(nn.selu(x))
    assert 0 < np.linalg.norm(out - ref) < 0.05 * np.linalg.norm(ref)


# ------------------------------------------------------------ potential and HMC
def _bnn(net: nn.Module) -> bp.BNN:
    return bp.BNN(net, prior=bp.priors.Normal(0.1), likelihood=bp.likelihoods.Categorical())


@pytest.mark.parametrize("name", list(TINY))
def test_potential_is_finite(name):
    net, shape, dtype = TINY[name]
    x = _inputs(shape, 6, dtype, seed=7)
    y = np.arange(6) % 3
    model = _bnn(net)
    pot = full_batch_potential(model, x, y)
    rng = np.random.default_rng(8)
    params = {
        k: (0.1 * rng.normal(size=d.event_shape)).astype(np.float32)
        for k, d in model.sites(x).items()
    }
    value, grad = pot.value_and_grad(pot.unconstrain(params))
    assert np.isfinite(value)
    assert set(grad) == set(params)
    assert all(np.all(np.isfinite(g)) for g in grad.values())
    assert any(np.any(g != 0) for g in grad.values())


@pytest.mark.slow
@pytest.mark.parametrize("name", list(TINY))
def test_hmc_smoke(name):
    net, shape, dtype = TINY[name]
    x = _inputs(shape, 16, dtype, seed=9)
    y = np.arange(16) % 3
    mcmc = hmc(
        _bnn(net),
        x,
        y,
        num_warmup=5,
        num_samples=5,
        trajectory_length=0.05,
        rng_key=jax.random.key(0),
        extra_fields=("accept_prob", "potential_energy"),
    )
    extra = mcmc.get_extra_fields()
    assert np.all(np.isfinite(extra["potential_energy"]))
    assert np.any(extra["accept_prob"] > 0)
    samples = mcmc.get_samples()
    assert all(np.all(np.isfinite(v)) for v in samples.values())
    moved = [np.any(np.diff(np.asarray(v), axis=0) != 0) for v in samples.values()]
    assert any(moved)  # at least one accepted step changed the parameters

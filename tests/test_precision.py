"""Reduced-precision compute (``BNN(compute_dtype="bfloat16")``): the network's pass in bfloat16,
everything the sampler sees in float32."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bnn_ppl as bp
from bnn_ppl.inference import full_batch_potential, hmc
from bnn_ppl.models import MLP
from bnn_ppl.validation import InputValueError

BF16_EPS = 2.0**-8  # bfloat16's unit roundoff (8 bits of significand)


def _models(compute_dtype="bfloat16"):
    data = bp.data.load("digits")
    make = lambda dt: bp.BNN(MLP(hidden=(16,), out=10), bp.priors.Normal(0.3),  # noqa: E731
                             bp.likelihoods.Categorical(), compute_dtype=dt)  # fmt: skip
    return data, make(None), make(compute_dtype)


def test_the_network_runs_in_bfloat16_and_returns_float32():
    data, f32, bf16 = _models()
    params = f32.init(jax.random.key(0), data.x_train)
    bf16.num_params(data.x_train)  # (the model learns its parameter names from the inputs)
    x = data.x_train[:8]
    assert "bf16[" in str(jax.make_jaxpr(bf16.apply)(params, x))
    assert "bf16[" not in str(jax.make_jaxpr(f32.apply)(params, x))
    assert bf16.apply(params, x).dtype == jnp.float32
    assert bf16.log_likelihood(params, x, data.y_train[:8]).dtype == jnp.float32


def test_potential_and_gradient_are_float32_and_close_to_float32_compute():
    data, f32, bf16 = _models()
    pot32 = full_batch_potential(f32, data.x_train, data.y_train)
    pot16 = full_batch_potential(bf16, data.x_train, data.y_train)
    u = pot32.init_params(jax.random.key(1))
    v32, g32 = jax.jit(jax.value_and_grad(pot32.potential_fn))(u)
    v16, g16 = jax.jit(jax.value_and_grad(pot16.potential_fn))(u)
    assert v16.dtype == jnp.float32
    assert all(leaf.dtype == jnp.float32 for leaf in jax.tree.leaves(g16))
    # per row: the logits carry a relative error of a few bfloat16 roundoffs, and so does the
    # row's log-likelihood; the sum's error is at most the sum of the rows' magnitudes times it
    params = pot32.postprocess_fn(u)
    ll = np.asarray(f32.log_likelihood(params, data.x_train, data.y_train), np.float64)
    logits = np.abs(np.asarray(f32.apply(params, data.x_train), np.float64)).max(axis=1)
    scale = float(np.sum(np.abs(ll) + logits))
    assert abs(float(v16) - float(v32)) <= 8 * BF16_EPS * scale
    assert float(v16) != float(v32)  # (it is computed in bfloat16)
    # the gradient: agrees in direction, each leaf within bfloat16's error of its norm
    for a, b in zip(jax.tree.leaves(g32), jax.tree.leaves(g16), strict=True):
        a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
        assert np.linalg.norm(a - b) <= 16 * BF16_EPS * np.linalg.norm(a) + 1e-6
        assert a @ b > 0.99 * np.linalg.norm(a) * np.linalg.norm(b)


def test_hmc_state_and_draws_stay_float32():
    data, _, bf16 = _models()
    mcmc = hmc(bf16, data.x_train[:200], data.y_train[:200], num_warmup=5, num_samples=3,
               trajectory_length=0.05, rng_key=jax.random.key(2))  # fmt: skip
    state = mcmc.last_state
    assert state.potential_energy.dtype == jnp.float32
    for tree in (state.z, state.z_grad, mcmc.get_samples()):
        assert all(leaf.dtype == jnp.float32 for leaf in jax.tree.leaves(tree))
    assert np.isfinite(np.asarray(state.potential_energy)).all()


@pytest.mark.parametrize("bad", ["int8", "bf17", np.int32, 3])
def test_a_bad_compute_dtype_is_an_input_error(bad):
    with pytest.raises(InputValueError, match="compute_dtype"):
        bp.BNN(MLP(), bp.priors.Normal(1.0), bp.likelihoods.Gaussian(0.5), compute_dtype=bad)


def _numpyro_bnn(x, y=None):
    """NumPyro's own BNN example's shape: one tanh layer, Normal noise with a learnt scale."""
    import numpyro
    import numpyro.distributions as dist

    w1 = numpyro.sample("w1", dist.Normal(jnp.zeros((x.shape[1], 8)), 1.0).to_event(2))
    w2 = numpyro.sample("w2", dist.Normal(jnp.zeros((8,)), 1.0).to_event(1))
    sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
    mean = jnp.tanh(x @ w1) @ w2
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Normal(mean, sigma), obs=y)


def test_model_potential_in_bfloat16_keeps_targets_and_density_float32():
    from bnn_ppl.inference import model_potential

    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 5)).astype(np.float32)
    y = (np.tanh(x[:, :2]).sum(1) + 0.1 * rng.normal(size=300)).astype(np.float32)
    pot32 = model_potential(_numpyro_bnn, data={"x": x, "y": y})
    pot16 = model_potential(_numpyro_bnn, data={"x": x, "y": y}, compute_dtype="bfloat16")
    u = pot32.init_params(jax.random.key(0))
    v32, g32 = jax.jit(jax.value_and_grad(pot32.potential_fn))(u)
    v16, g16 = jax.jit(jax.value_and_grad(pot16.potential_fn))(u)
    assert "bf16[" in str(jax.make_jaxpr(pot16.potential_fn)(u))
    assert v16.dtype == jnp.float32
    assert all(leaf.dtype == jnp.float32 for leaf in jax.tree.leaves(g16))
    # each row's residual (y - mean)/sigma carries bfloat16's error in the mean only: with
    # float32 targets, the error per row is about |y - mean| |mean| eps / sigma^2
    params = pot32.postprocess_fn(u)
    mean = np.tanh(x @ np.asarray(params["w1"], np.float64)) @ np.asarray(params["w2"], np.float64)
    s2 = float(params["sigma"]) ** 2
    scale = float(np.sum((np.abs(y - mean) + 1.0) * (np.abs(mean) + 1.0))) / s2
    assert abs(float(v16) - float(v32)) <= 8 * BF16_EPS * scale
    assert float(v16) != float(v32)
    with pytest.raises(InputValueError, match="compute_dtype"):
        model_potential(_numpyro_bnn, data={"x": x, "y": y}, compute_dtype="int4")

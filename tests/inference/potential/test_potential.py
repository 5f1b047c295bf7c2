"""The full-batch potential: exact value and gradient, padding, tempering, sharding, HLO."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import pytest
from conftest import ROOT
from flax import nnx
from numpyro.infer.util import initialize_model
from tolerances import assert_sums_close, potential_magnitudes

import bnn_ppl as bp
from bnn_ppl.inference import full_batch_potential
from bnn_ppl.models import MLP, NnxMLP


def _regression_data(n=37, d=3, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)).astype(dtype)
    y = (np.sin(x[:, 0]) + 0.1 * rng.normal(size=n)).astype(dtype)
    return x, y


def _hand_log_joint(params, x, y, prior_scale, noise, lik_t=1.0, prior_t=1.0):
    """The log joint of a 2-layer tanh MLP written out by hand (no Flax, no NumPyro)."""
    h = jnp.tanh(x @ params["Dense_0.kernel"] + params["Dense_0.bias"])
    h = jnp.tanh(h @ params["Dense_1.kernel"] + params["Dense_1.bias"])
    mean = (h @ params["Dense_2.kernel"] + params["Dense_2.bias"])[:, 0]
    log_prior = sum(
        jnp.sum(-0.5 * (w / prior_scale) ** 2 - jnp.log(prior_scale) - 0.5 * jnp.log(2 * jnp.pi))
        for w in params.values()
    )
    log_lik = jnp.sum(-0.5 * ((y - mean) / noise) ** 2 - jnp.log(noise) - 0.5 * jnp.log(2 * jnp.pi))
    return log_prior / prior_t + log_lik / lik_t


@pytest.mark.parametrize(
    "temperature,temper", [(1.0, "likelihood"), (0.3, "likelihood"), (0.3, "posterior")]
)
@pytest.mark.parametrize("chunk_size", [None, 5])
def test_potential_equals_hand_written_log_joint(x64, temperature, temper, chunk_size):
    x, y = _regression_data()
    model = bp.BNN(
        MLP(hidden=(4, 3), out=1, activation=jnp.tanh),
        prior=bp.priors.Normal(0.7),
        likelihood=bp.likelihoods.Gaussian(scale=0.3),
        temperature=temperature,
        temper=temper,
    )
    pot = full_batch_potential(model, x, y, chunk_size=chunk_size, dtype=jnp.float64)
    if chunk_size:  # 37 rows in chunks of at most 5: 8 chunks of 5 with 3 padded rows
        assert (pot.num_chunks, pot.chunk_size) == (8, 5)
    params = jax.tree.map(lambda a: a.astype(jnp.float64), pot.init_params(jax.random.key(1)))
    prior_t = temperature if temper == "posterior" else 1.0

    def expected(p):
        return -_hand_log_joint(p, jnp.asarray(x), jnp.asarray(y), 0.7, 0.3, temperature, prior_t)

    value, grad = jax.jit(jax.value_and_grad(pot.potential_fn))(params)
    want_value, want_grad = jax.jit(jax.value_and_grad(expected))(params)
    assert value.dtype == jnp.float64
    np.testing.assert_allclose(value, want_value, rtol=1e-12)
    for k in params:
        np.testing.assert_allclose(grad[k], want_grad[k], rtol=1e-10, atol=1e-12)
    # the data-as-argument route is the same function
    v2, g2 = pot.value_and_grad(params)
    np.testing.assert_allclose(v2, want_value, rtol=1e-12)


def test_padding_is_masked_even_when_padded_rows_would_be_nan(x64):
    # A network whose output is -inf/NaN on an all-zero row. Zero padding rows masked by
    # multiplication (0 * NaN = NaN) would poison the value, and masked by jnp.where they still
    # poison the gradient (its zero cotangent meets an infinite derivative): the padding must not.
    class Weird(MLP):
        def __call__(self, x):
            out = super().__call__(x)
            return out + jnp.log(jnp.sum(x**2, axis=-1, keepdims=True))

    x, y = _regression_data(n=11)
    model = bp.BNN(Weird(hidden=(), out=1), bp.priors.Normal(1.0), bp.likelihoods.Gaussian(0.5))
    pot = full_batch_potential(model, x, y, chunk_size=4, dtype=jnp.float64)
    assert pot.data.x.shape[0] == 12  # one padded row
    assert not np.asarray(pot.data.mask)[11]
    params = pot.init_params(jax.random.key(0))
    value, grad = pot.value_and_grad(params)
    assert np.isfinite(value)
    ll = model.log_likelihood(params, jnp.asarray(x), jnp.asarray(y)).sum()
    np.testing.assert_allclose(pot.log_likelihood(params), ll, rtol=1e-12)
    # the gradient equals the unpadded one (one chunk of exactly the 11 rows, no padding)
    exact = full_batch_potential(model, x, y, chunk_size=11, dtype=jnp.float64)
    assert exact.data.x.shape[0] == 11
    want_value, want_grad = exact.value_and_grad(params)
    np.testing.assert_allclose(value, want_value, rtol=1e-12)
    for k in params:
        assert np.all(np.isfinite(grad[k])), k
        np.testing.assert_allclose(grad[k], want_grad[k], rtol=1e-10, atol=1e-12)


def test_padding_rows_repeat_real_rows():
    from bnn_ppl.inference.potential.bnn import pad_rows

    a = np.arange(10).reshape(5, 2)
    np.testing.assert_array_equal(pad_rows(a, 8)[5:], a[:3])
    np.testing.assert_array_equal(pad_rows(a, 13)[5:], np.concatenate([a, a[:3]]))
    assert pad_rows(a, 5) is a


def test_float_targets_stay_floats_with_integer_or_bool_inputs():
    # integer inputs (token ids) with float targets: the targets stay floats (issue: 0.7 -> 0)
    rng = np.random.default_rng(0)
    x = rng.integers(0, 5, size=(9, 3))
    y = rng.normal(size=9) + 0.5
    model = bp.BNN(MLP(hidden=(), out=1), bp.priors.Normal(1.0), bp.likelihoods.Gaussian(0.5))
    pot = full_batch_potential(model, x, y, chunk_size=4)
    assert pot.data.x.dtype == jnp.int32 and pot.data.y.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(pot.data.y)[:9], y, rtol=1e-6)
    bools = full_batch_potential(model, x > 2, y, chunk_size=4)
    assert bools.data.x.dtype == jnp.bool_ and bools.data.y.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(bools.data.y)[:9], y, rtol=1e-6)
    u = pot.init_params(jax.random.key(0))
    want = model.log_likelihood(pot.postprocess_fn(u), jnp.asarray(x), jnp.asarray(y, jnp.float32))
    got = pot.log_likelihood(pot.postprocess_fn(u))
    scale = float(jnp.sum(jnp.abs(want)))
    assert abs(float(got) - float(jnp.sum(want))) <= 8 * np.finfo(np.float32).eps * scale


@pytest.mark.parametrize("temper", ["likelihood", "posterior"])
@pytest.mark.parametrize("hierarchical", [False, True])
def test_potential_matches_numpyro_potential_energy(x64, hierarchical, temper):
    """Our sharded potential and NumPyro's own (from the same model) agree, with a noise prior
    and, optionally, a hierarchical per-layer prior scale (both positive, log-transformed), in
    both temper modes: every path tempers the density over the constrained parameters and
    leaves the Jacobian of the log transform untempered."""
    x, y = _regression_data()
    first = (bp.priors.Hierarchical(dist.HalfNormal(1.0)) if hierarchical
             else bp.priors.Laplace(0.5))
    model = bp.BNN(
        MLP(hidden=(4,), out=1),
        prior={"Dense_0": first, "*": bp.priors.StudentT(4.0, 0.8)},
        likelihood=bp.likelihoods.Gaussian(scale=dist.LogNormal(-1.0, 0.5)),
        temperature=0.5,
        temper=temper,
    )
    pot = full_batch_potential(model, x, y, chunk_size=7, dtype=jnp.float64)
    info = initialize_model(jax.random.key(0), model, model_args=(x, y))
    theirs = jax.jit(jax.value_and_grad(info.potential_fn))
    for seed in range(3):
        u = pot.init_params(jax.random.key(seed))
        (v_ours, g_ours), (v_numpyro, g_numpyro) = pot.value_and_grad(u), theirs(u)
        np.testing.assert_allclose(v_ours, v_numpyro, rtol=1e-10)
        for k in u:
            np.testing.assert_allclose(g_ours[k], g_numpyro[k], rtol=1e-8, atol=1e-10)
    # postprocess: unconstrained -> constrained noise scale
    u = pot.init_params(jax.random.key(0))
    np.testing.assert_allclose(pot.postprocess_fn(u)["noise_scale"], np.exp(u["noise_scale"]))
    # and both equal the documented density: -[s_p log p(θ) + s_l log p(D|θ) + log|J|]
    params = pot.postprocess_fn(u)
    log_det = sum(float(u[k]) if np.ndim(u[k]) == 0 else float(np.sum(u[k]))
                  for k in u if k == "noise_scale" or k.endswith("prior_scale"))
    want = -(model.prior_scale * model.log_prior(params, x)
             + model.likelihood_scale * model.log_likelihood(params, x, y).sum() + log_det)
    np.testing.assert_allclose(info.potential_fn(u), want, rtol=1e-10)


@pytest.mark.parametrize("shape", [(37,), (37, 1)])
def test_one_output_targets_of_shape_n_1_mean_the_same_on_every_path(x64, shape):
    """(n, 1) targets of a one-output network are (n,) everywhere: the NumPyro model used to
    broadcast them against (n,) outputs into an (n, n) log-likelihood."""
    x, y = _regression_data()
    model = bp.BNN(MLP(hidden=(3,), out=1), bp.priors.Normal(1.0), bp.likelihoods.Gaussian(0.3))
    pot = full_batch_potential(model, x, y, dtype=jnp.float64)
    info = initialize_model(jax.random.key(0), model, model_args=(x, y.reshape(shape)))
    u = pot.init_params(jax.random.key(1))
    np.testing.assert_allclose(info.potential_fn(u), pot.potential_fn(u), rtol=1e-12)
    # traced targets (NUTS(model) with jit_model_args=True) follow the same rule
    from numpyro.infer.util import potential_energy

    traced = jax.jit(lambda yy: potential_energy(model, (x, yy), {}, u))(y.reshape(shape))
    np.testing.assert_allclose(traced, pot.potential_fn(u), rtol=1e-12)
    with pytest.raises(ValueError, match=r"y has shape \(37, 2\)"):
        jax.jit(lambda yy: potential_energy(model, (x, yy), {}, u))(np.zeros((37, 2)))


def test_linen_and_nnx_mlp_give_the_same_potential():
    x, y = _regression_data(dtype=np.float32)
    linen = bp.BNN(MLP(hidden=(5, 4), out=1), bp.priors.Normal(0.5), bp.likelihoods.Gaussian(0.2))
    nnx_net = NnxMLP(3, hidden=(5, 4), out=1, rngs=nnx.Rngs(0))
    nnxm = bp.BNN(nnx_net, bp.priors.Normal(0.5), bp.likelihoods.Gaussian(0.2))
    p_linen = full_batch_potential(linen, x, y, chunk_size=8)
    p_nnx = full_batch_potential(nnxm, x, y, chunk_size=8)
    u = p_linen.init_params(jax.random.key(0))
    rename = {f"Dense_{i}.{w}": f"layers.{i}.{w}" for i in range(3) for w in ("kernel", "bias")}
    u_nnx = {rename[k]: v for k, v in u.items()}
    assert set(u_nnx) == set(p_nnx.init_params(jax.random.key(0)))
    (v1, g1), (v2, g2) = p_linen.value_and_grad(u), p_nnx.value_and_grad(u_nnx)
    # float32 sums of 37 per-row terms and the prior (tests/tolerances.py)
    value_mag, grad_mag = potential_magnitudes(p_linen, u, x, y)
    assert_sums_close(v1, v2, value_mag, 37 + 1, what="value")
    assert_sums_close(g1, {k: g2[rename[k]] for k in u}, grad_mag, 37 + 1, what="gradient")


def test_classification_potential_counts_every_row():
    data = bp.data.load("digits")
    model = bp.BNN(MLP(hidden=(8,), out=10), bp.priors.Normal(0.3), bp.likelihoods.Categorical())
    pot = full_batch_potential(model, data.x_train, data.y_train, chunk_size=100)
    assert pot.num_data == len(data.x_train) == int(pot.data.mask.sum())
    u = pot.init_params(jax.random.key(0))
    rows = model.log_likelihood(u, jnp.asarray(data.x_train), jnp.asarray(data.y_train))
    full, magnitude = rows.sum(), np.abs(np.asarray(rows, np.float64)).sum()
    assert_sums_close(pot.log_likelihood(u), full, magnitude, pot.num_data)
    with pytest.raises(AssertionError):  # one row left out would be seen
        assert_sums_close(pot.log_likelihood(u), full - rows[0], magnitude, pot.num_data)
    assert pot.num_params == 64 * 8 + 8 + 8 * 10 + 10


def _main_signature(hlo: str) -> str:
    return next(line for line in hlo.splitlines() if "func.func public @main" in line)


def test_data_are_arguments_not_constants_of_the_hmc_program():
    """The data-as-argument route keeps the data out of the compiled program's constants."""
    x, y = _regression_data(n=4000, d=20, dtype=np.float32)
    model = bp.BNN(MLP(hidden=(4,), out=1), bp.priors.Normal(1.0), bp.likelihoods.Gaussian(0.5))
    pot = full_batch_potential(model, x, y)
    u = pot.init_params(jax.random.key(0))
    data_bytes = x.nbytes
    as_args = jax.jit(lambda u, data: pot.potential_fn_gen(data)(u)).lower(u, pot.data).as_text()
    closed = jax.jit(pot.potential_fn).lower(u).as_text()
    assert "4000x20xf32" in _main_signature(as_args)  # data enter as an argument
    assert len(as_args) < data_bytes / 10
    assert len(closed) > data_bytes  # the closure embeds them (documented behaviour)


def test_potential_validates_before_compiling():
    from conftest import count_compiles

    model = bp.BNN(MLP(hidden=(3,), out=4), bp.priors.Normal(1.0), bp.likelihoods.Categorical())
    x = np.random.default_rng(0).normal(size=(10, 2)).astype(np.float32)
    y = np.arange(10) % 4
    cases = [
        (dict(x=np.where(np.eye(10, 2) > 0, np.nan, x), y=y), ValueError, "x contains 2 NaN"),
        (dict(x=x, y=np.where(np.arange(10) == 3, np.inf, y.astype(float))), ValueError, "NaN/inf"),
        (dict(x=x, y=np.arange(10)), ValueError, r"y must lie in \[0, 4\)"),
        (dict(x=x, y=-y), ValueError, r"y must lie in \[0, 4\)"),
        (dict(x=x, y=y[:9]), ValueError, "same number of rows"),
        (dict(x=x[:0], y=y[:0]), ValueError, "empty"),
        (dict(x=x, y=y.astype(float)), TypeError, "astype"),
        (dict(x=x, y=y, chunk_size=0), ValueError, "chunk_size"),
        (dict(x=x, y=y, chunk_size=2.5), TypeError, "chunk_size"),
        (dict(x=x, y=y, dtype=jnp.float64), ValueError, "jax_enable_x64"),
        (dict(x=x, y=y, devices=[]), ValueError, "devices"),
    ]
    with count_compiles() as compiles:
        for kwargs, exc, match in cases:
            with pytest.raises(exc, match=match):
                full_batch_potential(model, **kwargs)
        reg = bp.BNN(MLP(hidden=(3,), out=2), bp.priors.Normal(1.0), bp.likelihoods.Gaussian(1.0))
        with pytest.raises(ValueError, match=r"y has shape \(10,\) but the network has 2"):
            full_batch_potential(reg, x, y.astype(np.float32))
    assert compiles == []


SHARDED_SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    import jax, jax.numpy as jnp, numpy as np
    import bnn_ppl as bp
    from bnn_ppl.models import MLP
    from bnn_ppl.inference import full_batch_potential
    sys.path.insert(0, "tests")
    from tolerances import potential_magnitudes
    assert len(jax.devices()) == 4, jax.devices()
    rng = np.random.default_rng(0)
    out, arrays = {}, {}
    # several chunks with padding (1003 rows: 4 x 4 chunks of 64, 21 rows padded), a short
    # chunk, and one chunk holding fewer rows than there are devices
    for n, chunk in [(1003, 64), (37, 5), (3, None)]:
        x = rng.normal(size=(n, 6)).astype(np.float32)
        y = (rng.integers(0, 3, size=n)).astype(np.int32)
        model = bp.BNN(MLP(hidden=(16,), out=3), bp.priors.Normal(0.5),
                       bp.likelihoods.Categorical())
        one = full_batch_potential(model, x, y, devices=jax.devices()[:1], chunk_size=chunk)
        four = full_batch_potential(model, x, y, devices=jax.devices(), chunk_size=chunk)
        default = full_batch_potential(model, x, y, chunk_size=chunk)
        u = one.init_params(jax.random.key(0))
        v1, g1 = one.value_and_grad(u)
        v4, g4 = four.value_and_grad(u)
        vmag, gmag = potential_magnitudes(one, u, x, y)
        case = f"{n}/{chunk}"
        arrays.update({f"{case}/value/one": v1, f"{case}/value/four": v4,
                       f"{case}/value/magnitude": vmag})
        for k in g1:
            arrays.update({f"{case}/{k}/one": g1[k], f"{case}/{k}/four": g4[k],
                           f"{case}/{k}/magnitude": gmag[k]})
        f = jax.jit(lambda u, d: four.potential_fn_gen(d)(u))
        hlo = f.lower(u, four.data).compile().as_text()
        out[case] = dict(
            rows_per_device=four.num_chunks * four.chunk_size,
            padded=int(four.data.x.shape[0]), devices=four.num_devices,
            default_devices=default.num_devices,
            shard_shapes=sorted({tuple(s.data.shape) for s in four.data.x.addressable_shards}),
            all_reduce="all-reduce" in hlo,
        )
    np.savez(sys.argv[1], **{k: np.asarray(v) for k, v in arrays.items()})
    print(json.dumps(out))
    """
)


def test_sharded_equals_unsharded_on_four_simulated_devices(tmp_path):
    env = dict(
        os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu"
    )
    proc = subprocess.run(
        [sys.executable, "-c", SHARDED_SCRIPT, str(tmp_path / "sums.npz")],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    with np.load(tmp_path / "sums.npz") as f:
        arrays = dict(f)
    for case, r in results.items():
        n = int(case.split("/")[0])
        assert r["devices"] == 4
        # by default, only devices that get a whole chunk: 1003 // 64 = 15 and 37 // 5 = 7
        # (all 4); 3 rows are less than one chunk of 1024 (one device)
        assert r["default_devices"] == {"1003/64": 4, "37/5": 4, "3/None": 1}[case], case
        assert r["padded"] >= n and r["padded"] == 4 * r["rows_per_device"]
        assert r["shard_shapes"] == [[r["rows_per_device"], 6]], case  # really split 4 ways
        assert r["all_reduce"], case  # the per-device sums meet in a collective
        # value and every gradient entry: float32 sums of n per-row terms and the prior,
        # added in another order (tests/tolerances.py)
        entries = sorted({k.rsplit("/", 1)[0] for k in arrays if k.startswith(case + "/")})
        assert len(entries) == 1 + 4, entries  # the value and four parameter arrays
        for e in entries:
            assert_sums_close(
                arrays[f"{e}/one"], arrays[f"{e}/four"], arrays[f"{e}/magnitude"], n + 1, what=e
            )


def test_gradient_memory_does_not_grow_with_the_data():
    """Value and gradient are accumulated in one pass over the chunks: XLA's temporary buffers
    for value_and_grad stay the same size whether the data hold 4 or 16 chunks (plain reverse
    mode through the scan keeps every chunk's activations and grows linearly)."""
    temps = []
    for n in (4 * 256, 16 * 256):
        x, y = _regression_data(n=n, d=20, dtype=np.float32)
        model = bp.BNN(
            MLP(hidden=(64, 64), out=1), bp.priors.Normal(1.0), bp.likelihoods.Gaussian(0.5)
        )
        pot = full_batch_potential(model, x, y, chunk_size=256)
        u = pot.init_params(jax.random.key(0))
        f = jax.jit(lambda u, d, pot=pot: jax.value_and_grad(pot.potential_fn_gen(d))(u))
        temps.append(f.lower(u, pot.data).compile().memory_analysis().temp_size_in_bytes)
    assert temps[1] <= temps[0] * 1.05, temps


def test_one_chunk_compiles_without_a_loop_and_equals_many_chunks():
    """One chunk per device runs without a loop (no scan in the program; XLA:CPU handles
    loop-body convolution gradients badly, jax-ml/jax#12868) and every convolution of the
    gradient is channels-last; value and gradient equal the 5-chunk ones to the float32
    rounding of their sums (``tests/tolerances.py``), and a dropped row, a chunk counted twice
    or one row's inputs off by 0.1% are all told apart."""
    from bnn_ppl.models import LeNet5

    rng = np.random.default_rng(0)
    x = rng.normal(size=(24, 12, 12, 1)).astype(np.float32)
    y = rng.integers(0, 10, 24)
    model = bp.BNN(LeNet5(out=10), bp.priors.Normal(0.3), bp.likelihoods.Categorical())
    results, programs = {}, {}
    for chunk_size in (24, 5):
        pot = full_batch_potential(model, x, y, chunk_size=chunk_size)
        u = pot.init_params(jax.random.key(0))
        f = jax.jit(lambda u, d, pot=pot: jax.value_and_grad(pot.potential_fn_gen(d))(u))
        jaxpr = str(jax.make_jaxpr(f)(u, pot.data))
        assert ("scan[" in jaxpr) == (pot.num_chunks > 1), (chunk_size, pot.num_chunks)
        hlo = f.lower(u, pot.data).compile().as_text()
        convs = [ln for ln in hlo.splitlines() if " convolution(" in ln]
        if pot.num_chunks == 1 and jax.default_backend() == "cpu":
            assert len(convs) == 5, convs  # 2 forward, 2 kernel- and 1 input-gradient
            assert all("dim_labels=b01f_01io->b01f" in ln for ln in convs), convs
        results[pot.num_chunks], programs[pot.num_chunks] = f(u, pot.data), f

    # The two programs add the same terms in different orders: 24 per-row terms and the prior
    # for the value; for a gradient entry, the rows times the output positions that a
    # convolution's kernel and bias gradients sum over within each row (12x12 for Conv_0,
    # 6x6 after the first pool for Conv_1), plus the prior.
    value_mag, grad_mag = potential_magnitudes(pot, u, x, y)
    positions = {"Conv_0": 12 * 12, "Conv_1": 6 * 6}
    num_terms = {k: 24 * positions.get(k.split(".")[0], 1) + 1 for k in u}
    (v1, g1), (v5, g5) = results[1], results[5]
    assert_sums_close(v1, v5, value_mag, 24 + 1, what="value")
    assert_sums_close(g1, g5, grad_mag, num_terms, what="gradient")

    # ... and the comparison has power: the same 5-chunk program (same shapes, no recompile)
    # on wrong data differs by far more than the tolerance, in the value and the gradient
    def five_chunks(xb, yb):
        wrong = full_batch_potential(model, xb, yb, chunk_size=5)
        assert (wrong.num_chunks, wrong.chunk_size, wrong.data.x.shape[0]) == (5, 5, 25)
        return programs[5](u, wrong.data)

    keep = np.arange(24) != 7
    twice = np.r_[0:10, 5:10, 15:24]  # rows 10-14 replaced by rows 5-9
    nudged = x.copy()
    nudged[3] *= 1.001
    bugs = {
        "row 7 dropped": (x[keep], y[keep]),
        "rows 5-9 counted twice": (x[twice], y[twice]),
        "row 3's inputs 0.1% off": (nudged, y),
    }
    for bug, (xb, yb) in bugs.items():
        vb, gb = five_chunks(xb, yb)
        with pytest.raises(AssertionError, match=f"value with {bug}"):
            assert_sums_close(v1, vb, value_mag, 24 + 1, what=f"value with {bug}")
        with pytest.raises(AssertionError, match=f"gradient with {bug}"):
            assert_sums_close(g1, gb, grad_mag, num_terms, what=f"gradient with {bug}")


def test_float64_accumulation_keeps_digits_that_float32_loses(x64):
    """``dtype=float64`` sums 200 chunks of per-row log-likelihoods to float64 precision; the
    float32 default cannot (its total of -7.1e7 is only resolved to a few units)."""
    rng = np.random.default_rng(0)
    n = 200_000
    x = rng.normal(size=(n, 3)).astype(np.float32)
    y = (3 + rng.normal(size=n)).astype(np.float32)
    model = bp.BNN(MLP(hidden=(4,), out=1), bp.priors.Normal(1.0), bp.likelihoods.Gaussian(0.1))
    totals = {}
    for dtype in (jnp.float32, jnp.float64):
        pot = full_batch_potential(model, x, y, chunk_size=1000, dtype=dtype)
        params, _ = pot.constrain(pot.init_params(jax.random.key(0)))
        totals[dtype] = pot.log_likelihood(params)
        assert totals[dtype].dtype == dtype and pot.num_chunks == 200
    rows = jax.jit(model.log_likelihood)
    ref = sum(
        np.sum(np.asarray(rows(params, x[i : i + 1000], y[i : i + 1000]), np.float64))
        for i in range(0, n, 1000)
    )
    err = {k: abs(float(v) - ref) / abs(ref) for k, v in totals.items()}
    assert err[jnp.float64] < 1e-12, err
    assert err[jnp.float32] > 1e-9, err  # the test would notice float64 silently not applied


def test_gradient_with_respect_to_the_data_is_refused_when_chunked_and_exact_otherwise():
    """The one-pass chunked gradient covers the parameters only: asking for d/dx is a clear
    error, not silent zeros; with one chunk it is ordinary autodiff."""
    x, y = _regression_data(n=12, dtype=np.float32)
    model = bp.BNN(MLP(hidden=(4,), out=1), bp.priors.Normal(1.0), bp.likelihoods.Gaussian(0.5))
    for chunk_size in (5, 12):
        pot = full_batch_potential(model, x, y, chunk_size=chunk_size)
        params, _ = pot.constrain(pot.init_params(jax.random.key(0)))
        dx = lambda p, pot=pot: jax.grad(  # noqa: E731
            lambda x: pot.log_likelihood(p, pot.data._replace(x=x))
        )(pot.data.x)
        if pot.num_chunks > 1:
            with pytest.raises(NotImplementedError, match="chunk_size >= the rows"):
                dx(params)
        else:
            ref = jax.grad(lambda x, p: jnp.sum(model.log_likelihood(p, x, jnp.asarray(y))))
            got, want = dx(params)[:12], ref(jnp.asarray(x), params)
            assert_sums_close(got, want, *_input_gradient_terms(params, x, y, noise=0.5))


def _input_gradient_terms(params, x, y, noise):
    """Magnitude and term count (tests/tolerances.py) of d log N(y_i; f(x_i), noise^2) / d x_ij
    for a one-hidden-layer ReLU MLP f: r_i sum_h W1[j, h] relu'(h_ih) W2[h] with
    r_i = (y_i - f_i) / noise^2, where f_i = sum_h W2[h] relu(h_ih) + b2 and
    h_ih = sum_j x_ij W1[j, h] + b1[h] are sums that can cancel, as can y_i - f_i."""
    w1, b1 = (np.asarray(params[f"Dense_0.{k}"], np.float64) for k in ("kernel", "bias"))
    w2, b2 = (np.asarray(params[f"Dense_1.{k}"], np.float64)[..., 0] for k in ("kernel", "bias"))
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    h = x @ w1 + b1
    r = (y - (np.maximum(h, 0) @ w2 + b2)) / noise**2
    h_terms = np.abs(x) @ np.abs(w1) + np.abs(b1)
    r_terms = (np.abs(y) + (h > 0) * h_terms @ np.abs(w2) + np.abs(b2)) / noise**2
    paths = ((h > 0) * np.abs(w2))[:, None, :] * np.abs(w1)[None]  # (n, j, h)
    hidden, inputs = w1.shape[1], w1.shape[0]
    num_terms = 2 * (inputs + 1) + 2 * (hidden + 1) + 1  # h, f, y - f and the sum over h
    return (np.abs(r) + r_terms)[:, None] * paths.sum(axis=2), num_terms


def test_networks_with_inner_scans_and_integer_inputs_work():
    """User networks may scan with a constant initial carry (RNNs) and take integer tokens."""
    import flax.linen as nn

    class TinyRNN(nn.Module):
        @nn.compact
        def __call__(self, tokens):
            emb = nn.Embed(10, 4)(tokens)  # integer ids must arrive as integers
            cell = nn.SimpleCell(5)
            carry = jnp.zeros((tokens.shape[0], 5))  # a constant initial carry

            def step(c, x_t):
                c, _ = cell(c, x_t)
                return c, None

            carry, _ = nn.scan(
                lambda m, c, x: step(c, x),
                variable_broadcast="params",
                split_rngs={"params": False},
                in_axes=1,
            )(self, carry, emb)
            return nn.Dense(2)(carry)

    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 10, size=(9, 6)).astype(np.int32)
    y = (tokens[:, 0] > 4).astype(np.int32)
    model = bp.BNN(TinyRNN(), bp.priors.Normal(0.5), bp.likelihoods.Categorical())
    pot = full_batch_potential(model, tokens, y, chunk_size=4)
    assert pot.data.x.dtype == jnp.int32
    u = pot.init_params(jax.random.key(0))
    value, grad = pot.value_and_grad(u)
    assert np.isfinite(value) and all(np.all(np.isfinite(g)) for g in grad.values())

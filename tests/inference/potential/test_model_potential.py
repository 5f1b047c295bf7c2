"""model_potential: any NumPyro model's sharded, chunked potential equals NumPyro's own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from conftest import ROOT, count_compiles
from numpyro import handlers
from numpyro.contrib.module import random_flax_module, random_nnx_module
from numpyro.infer import MCMC, NUTS, Predictive
from numpyro.infer.util import constrain_fn, log_density, potential_energy

from bnn_ppl.inference import FullBatchPotential, model_potential
from bnn_ppl.validation import InputTypeError


# ------------------------------------------------------------------------------ models
def mlp_model(x, y=None):
    """NumPyro's examples/bnn.py: tanh layers, Normal weights, Gamma noise precision."""
    d, h = x.shape[1], 4
    w1 = numpyro.sample("w1", dist.Normal(0, 1).expand([d, h]).to_event(2))
    w2 = numpyro.sample("w2", dist.Normal(0, 1).expand([h, h]).to_event(2))
    w3 = numpyro.sample("w3", dist.Normal(0, 1).expand([h, 1]).to_event(2))
    prec = numpyro.sample("prec_obs", dist.Gamma(3.0, 1.0))
    z = jnp.tanh(jnp.tanh(x @ w1) @ w2) @ w3
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Normal(z[:, 0], 1.0 / jnp.sqrt(prec)), obs=y)


class _Net(nn.Module):
    out: int = 1

    @nn.compact
    def __call__(self, x):
        return nn.Dense(self.out)(nn.tanh(nn.Dense(5)(x)))


def flax_model(x, y=None):
    net = random_flax_module("nn", _Net(), dist.Normal(0, 0.8), input_shape=(1, x.shape[1]))
    sigma = numpyro.sample("sigma", dist.LogNormal(-1.0, 0.5))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Normal(net(x)[:, 0], sigma), obs=y)


def nnx_model(x, y=None):
    """numpyro.contrib.module.random_nnx_module on a pre-initialised nnx MLP."""
    from flax import nnx

    class Net(nnx.Module):
        def __init__(self, d: int, rngs: nnx.Rngs):
            self.hidden, self.out = nnx.Linear(d, 5, rngs=rngs), nnx.Linear(5, 1, rngs=rngs)

        def __call__(self, x):
            return self.out(nnx.tanh(self.hidden(x)))

    net = random_nnx_module("nn", Net(x.shape[1], nnx.Rngs(0)), dist.Normal(0, 0.8))
    sigma = numpyro.sample("sigma", dist.LogNormal(-1.0, 0.5))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Normal(net(x)[:, 0], sigma), obs=y)


def hetero_model(x, y=None):
    """Mean and scale from the network (softplus), a hierarchical prior scale."""
    tau = numpyro.sample("tau", dist.HalfNormal(1.0))
    net = random_flax_module("nn", _Net(out=2), dist.Normal(0, 1), input_shape=(1, x.shape[1]))
    w = numpyro.sample("w", dist.Normal(0, tau).expand([2]).to_event(1))
    numpyro.deterministic("w_scaled", w / tau)  # global, data-free: in postprocess_fn
    out = net(x) * w
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Normal(out[:, 0], jax.nn.softplus(out[:, 1]) + 1e-3), obs=y)


def two_obs_model(x, y=None, label=None):
    """A Gaussian and a Bernoulli observed site in the plate, sharing the weights."""
    w = numpyro.sample("w", dist.Normal(0, 1).expand([x.shape[1], 2]).to_event(2))
    sigma = numpyro.sample("sigma", dist.HalfCauchy(1.0))
    f = jnp.tanh(x) @ w
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Normal(f[:, 0], sigma), obs=y)
        numpyro.sample("label", dist.Bernoulli(logits=f[:, 1]), obs=label)


def _data(n=37, d=3, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    y = np.sin(x[:, 0]) + 0.1 * rng.normal(size=n)
    return {"x": x, "y": y, "label": (x[:, 1] > 0).astype(np.int32)}


MODELS = {
    "mlp": (mlp_model, ("x", "y")),
    "flax": (flax_model, ("x", "y")),
    "nnx": (nnx_model, ("x", "y")),
    "hetero": (hetero_model, ("x", "y")),
    "two_obs": (two_obs_model, ("x", "y", "label")),
}


def _reference(model, kw, temperature, temper):
    """The tempered potential from NumPyro's own functions: the plate sites' log density is
    the full potential energy minus that of the model with those sites blocked."""
    globals_only = handlers.block(
        model, hide_fn=lambda s: any(f.name == "data" for f in s.get("cond_indep_stack", ()))
    )
    lik_s, prior_s = 1.0 / temperature, (1.0 / temperature if temper == "posterior" else 1.0)

    def ref(z):
        pe_full = potential_energy(model, (), kw, z)
        pe_glob = potential_energy(globals_only, (), kw, z)
        log_prior = log_density(globals_only, (), kw, constrain_fn(model, (), kw, z))[0]
        log_det = -pe_glob - log_prior
        log_lik = pe_glob - pe_full
        return -(prior_s * log_prior + lik_s * log_lik + log_det), pe_full

    return ref


# -------------------------------------------------------------------------------- tests
# every model untempered; tempering (model-independent code) on two of them by default, the
# other combinations -m slow (each is a 64-bit compilation of the model: 5-20 s quiet)
_TEMPERED = [(0.5, "likelihood"), (0.5, "posterior")]
_TEMPERED_BY_DEFAULT = {"mlp", "two_obs"}


@pytest.mark.parametrize(
    "name,temperature,temper",
    [(name, 1.0, "likelihood") for name in MODELS]
    + [
        pytest.param(name, t, mode, marks=()
                     if name in _TEMPERED_BY_DEFAULT else pytest.mark.slow)  # fmt: skip
        for name in MODELS
        for t, mode in _TEMPERED
    ],
)
def test_potential_equals_numpyro_potential_energy(x64, name, temperature, temper):
    model, keys = MODELS[name]
    data = {k: v for k, v in _data().items() if k in keys}
    ref = _reference(model, data, temperature, temper)
    want_vg = jax.jit(jax.value_and_grad(lambda z: ref(z)[0]))
    for chunk_size in (None, 7):  # one chunk; 6 chunks of 7 rows with 5 padded
        pot = model_potential(
            model,
            data=data,
            chunk_size=chunk_size,
            dtype=jnp.float64,
            temperature=temperature,
            temper=temper,
        )
        assert isinstance(pot, FullBatchPotential)
        assert pot.num_chunks == (1 if chunk_size is None else 6)
        for seed in range(2):
            u = pot.init_params(jax.random.key(seed))
            value, grad = pot.value_and_grad(u)
            want, want_grad = want_vg(u)
            assert value.dtype == jnp.float64
            np.testing.assert_allclose(value, want, rtol=1e-11)
            if temperature == 1.0:  # the untouched model's potential energy itself
                np.testing.assert_allclose(value, ref(u)[1], rtol=1e-11)
            assert set(grad) == set(want_grad)
            for k in grad:
                np.testing.assert_allclose(grad[k], want_grad[k], rtol=1e-9, atol=1e-11)
    # the potential's temperature has an effect the reference sees (the test has power)
    if temperature != 1.0:
        np.testing.assert_raises(
            AssertionError, np.testing.assert_allclose, value, ref(u)[1], rtol=1e-6
        )


def test_postprocess_gives_the_model_sites_in_their_supports(x64):
    data = {k: v for k, v in _data().items() if k in ("x", "y")}
    pot = model_potential(hetero_model, data=data, dtype=jnp.float64)
    u = pot.init_params(jax.random.key(0), num_chains=3)
    assert u["tau"].shape == (3,)
    params = jax.vmap(pot.postprocess_fn)(u)
    assert set(params) == {
        "tau",
        "w",
        "w_scaled",
        "nn/Dense_0.kernel",
        "nn/Dense_0.bias",
        "nn/Dense_1.kernel",
        "nn/Dense_1.bias",
    }
    np.testing.assert_allclose(params["tau"], np.exp(u["tau"]), rtol=1e-12)
    np.testing.assert_allclose(params["w_scaled"], params["w"] / params["tau"][:, None])
    back = pot.unconstrain(jax.tree.map(lambda a: a[0], params))
    assert set(back) == set(u)  # the deterministic site is no parameter
    np.testing.assert_allclose(back["tau"], u["tau"][0], rtol=1e-12)
    assert pot.num_params == 2 + 1 + 3 * 5 + 5 + 5 * 2 + 2


def deterministic_model(x, y=None):
    """Deterministic sites of each kind: global and data-free (kept), inside the plate, and
    outside it but depending on the data's values or on their number of rows (left out)."""
    w = numpyro.sample("w", dist.Normal(0, 1).expand([x.shape[1]]).to_event(1))
    numpyro.deterministic("w_norm", jnp.sum(w**2))
    numpyro.deterministic("fit", jnp.mean(x @ w))
    numpyro.deterministic("w_per_row", jnp.sum(w) / x.shape[0])
    with numpyro.plate("data", x.shape[0]):
        mean = numpyro.deterministic("mean", x @ w)
        numpyro.sample("y", dist.Normal(mean, 0.5), obs=y)


def test_global_deterministic_sites_are_in_get_samples_and_the_others_named_once():
    from bnn_ppl.inference import NUTS as PotentialNUTS
    from bnn_ppl.inference.potential.model_structure import DeterministicSiteWarning

    data = {k: v.astype(np.float32) for k, v in _data(n=20).items() if k in ("x", "y")}
    with pytest.warns(DeterministicSiteWarning) as caught:
        pot = model_potential(deterministic_model, data=data, chunk_size=8)
    assert len(caught) == 1
    message = str(caught[0].message)
    assert "['fit', 'mean', 'w_per_row']" in message and "Predictive" in message
    assert pot.deterministic_sites == ("w_norm",)
    mcmc = MCMC(PotentialNUTS(pot, max_tree_depth=3), num_warmup=10, num_samples=10,
                jit_model_args=True, progress_bar=False)
    mcmc.run(jax.random.key(0), *pot.args, init_params=pot.init_params(jax.random.key(1)))
    s = mcmc.get_samples()
    assert set(s) == {"w", "w_norm"}
    assert np.ptp(s["w_norm"]) > 0  # the chain moved: the check compares distinct values
    np.testing.assert_allclose(s["w_norm"], np.sum(s["w"] ** 2, axis=1), rtol=1e-6)
    # what the warning points to gives the left-out sites from the same samples
    pred = Predictive(deterministic_model, s, return_sites=["mean", "fit"])
    out = pred(jax.random.key(2), data["x"])
    assert out["mean"].shape == (10, 20) and out["fit"].shape == (10,)


def test_a_model_whose_deterministic_sites_are_all_global_gives_no_warning():
    def model(x, y=None):
        w = numpyro.sample("w", dist.Normal(0, 1).expand([x.shape[1]]).to_event(1))
        numpyro.deterministic("w_norm", jnp.sqrt(jnp.sum(w**2)))
        with numpyro.plate("data", x.shape[0]):
            numpyro.sample("y", dist.Normal(x @ w, 0.5), obs=y)

    data = {k: v.astype(np.float32) for k, v in _data().items() if k in ("x", "y")}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pot = model_potential(model, data=data)
    assert pot.deterministic_sites == ("w_norm",)


def test_minibatch_potential_on_every_row_equals_the_full_potential(x64):
    data = {k: v for k, v in _data().items() if k in ("x", "y", "label")}
    pot = model_potential(two_obs_model, data=data, chunk_size=5, dtype=jnp.float64)
    u = pot.init_params(jax.random.key(0))
    mini = pot.minibatch_potential_fn_gen()
    np.testing.assert_allclose(mini(u, jnp.arange(37)), pot.potential_fn(u), rtol=1e-11)


def _local_latent(x, y=None):
    with numpyro.plate("data", x.shape[0]):
        z = numpyro.sample("z_row", dist.Normal(0, 1))
        numpyro.sample("y", dist.Normal(z, 1.0), obs=y)


def _observed_outside(x, y=None):
    w = numpyro.sample("w", dist.Normal(0, 1))
    numpyro.sample("y_mean", dist.Normal(w, 1.0), obs=jnp.mean(y))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Normal(w * x[:, 0], 1.0), obs=y)


def _data_dependent_prior(x, y=None):
    w = numpyro.sample("w", dist.Normal(jnp.mean(x), 1.0))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Normal(w * x[:, 0], 1.0), obs=y)


def _fixed_plate_size(x, y=None):
    w = numpyro.sample("w", dist.Normal(0, 1))
    with numpyro.plate("data", 37):
        numpyro.sample("y", dist.Normal(w * x[:, 0], 1.0), obs=y)


def _prior_scaled_by_rows(x, y=None):  # silently 1 row on the probe: refused
    w = numpyro.sample("w", dist.Normal(0.0, 1.0 / jnp.sqrt(x.shape[0])))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Normal(w * x[:, 0], 1.0), obs=y)


def _latent_per_row_outside_the_likelihood(x, y=None):  # shape (1,) on the probe: refused
    w = numpyro.sample("w", dist.Normal(0, 1))
    with numpyro.plate("units", x.shape[0]):
        s = numpyro.sample("s", dist.HalfNormal(1.0))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Normal(w * x[:, 0], jnp.mean(s)), obs=y)


def _wrong_plate_name(x, y=None):
    w = numpyro.sample("w", dist.Normal(0, 1))
    with numpyro.plate("rows", x.shape[0]):
        numpyro.sample("y", dist.Normal(w * x[:, 0], 1.0), obs=y)


@pytest.mark.parametrize(
    "model,match",
    [
        (_local_latent, "site 'z_row' is a latent inside plate 'data'"),
        (_observed_outside, "site 'y_mean' is observed outside plate 'data'"),
        (_data_dependent_prior, "site 'w' is outside plate 'data' but its density depends"),
        (_fixed_plate_size, "site 'y': plate 'data' has the data's 37 rows, but on one row of "
                            "the data it has size 37"),
        (_wrong_plate_name, r"no sample site inside numpyro.plate\('data'"),
        (_prior_scaled_by_rows, "site 'w' is outside plate 'data' but its shape or density "
         r"depends on the number of rows \(37 here.*Pass the number of rows as a model arg"),
        (_latent_per_row_outside_the_likelihood, "site 's' .* shape or density depends on the "
         "number of rows"),
    ],
)
def test_models_it_cannot_handle_are_refused_naming_the_site(model, match):
    data = {k: v.astype(np.float32) for k, v in _data().items() if k in ("x", "y")}
    with count_compiles() as compiles, pytest.raises(ValueError, match=match):
        model_potential(model, data=data)
    assert compiles == []


def test_a_prior_given_the_number_of_rows_as_an_argument_is_exact(x64):
    """The fix the refusal above names: ``n`` as a model argument; no false alarm, and the
    potential equals NumPyro's potential energy (the prior scale is 1/sqrt(37), not 1)."""

    def model(n, x, y=None):
        w = numpyro.sample("w", dist.Normal(0.0, 1.0 / jnp.sqrt(n)))
        with numpyro.plate("data", x.shape[0]):
            numpyro.sample("y", dist.Normal(w * x[:, 0], 1.0), obs=y)

    data = {k: v for k, v in _data().items() if k in ("x", "y")}
    with count_compiles() as compiles:
        pot = model_potential(model, 37, data=data, chunk_size=7, dtype=jnp.float64)
    assert compiles == []  # the structure checks compile nothing
    u = {"w": jnp.asarray(0.3)}
    np.testing.assert_allclose(pot.potential_fn(u), potential_energy(model, (37,), data, u),
                               rtol=1e-11)


def test_bad_data_and_arguments_are_refused():
    d = {k: v.astype(np.float32) for k, v in _data().items() if k in ("x", "y")}
    cases = [
        (dict(data={"x": d["x"], "y": d["y"][:30]}), "has 30 rows"),
        (dict(data={}), "non-empty mapping"),
        (dict(data=d, model_kwargs={"y": d["y"]}), "both data and model_kwargs"),
        (dict(data=d, temperature=0.0), "temperature"),
        (dict(data=d, temper="prior"), "temper"),
        (dict(data=d, chunk_size=0), "chunk_size"),
        (dict(data={"x": d["x"], "y": np.where(np.arange(37) == 3, np.nan, d["y"])}), "NaN"),
        (dict(data=d, dtype=jnp.float64), "needs 64-bit JAX"),
        (dict(data=d, devices=[]), "devices is empty"),
    ]
    for kwargs, match in cases:
        with pytest.raises(ValueError, match=match):
            model_potential(mlp_model, **kwargs)
    # the same argument checks as full_batch_potential's, with the same InputError kinds
    with pytest.raises(InputTypeError, match="dtype must be a floating dtype, got int32"):
        model_potential(mlp_model, data=d, dtype=jnp.int32)


SHARDED_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import jax, jax.numpy as jnp, numpy as np
    jax.config.update("jax_enable_x64", True)
    sys.path[:0] = ["tests", "tests/inference/potential"]  # conftest, this module
    from test_model_potential import two_obs_model, _data
    from bnn_ppl.inference import model_potential
    assert len(jax.devices()) == 4, jax.devices()
    out = {}
    for n, chunk in [(37, 5), (40, None), (3, None)]:
        data = _data(n=n)
        one = model_potential(two_obs_model, data=data, devices=jax.devices()[:1],
                              chunk_size=chunk, dtype=jnp.float64)
        four = model_potential(two_obs_model, data=data, devices=jax.devices(),
                               chunk_size=chunk, dtype=jnp.float64)
        default = model_potential(two_obs_model, data=data, chunk_size=chunk, dtype=jnp.float64)
        u = one.init_params(jax.random.key(0))
        (v1, g1), (v4, g4) = jax.device_get((one.value_and_grad(u), four.value_and_grad(u)))
        hlo = jax.jit(lambda u, d: four.potential_fn_gen(d)(u)).lower(u, four.data)
        out[f"{n}/{chunk}"] = dict(
            value=[float(v1), float(v4)],
            grad_err=max(float(np.max(np.abs(g1[k] - g4[k]) / (1e-12 + np.abs(g1[k]))))
                         for k in g1),
            shards=sorted({s.data.shape[0] for s in four.data.arrays["x"].addressable_shards}),
            padded=int(four.data.mask.shape[0]), real=int(four.data.mask.sum()),
            default_devices=default.num_devices,
            all_reduce="all-reduce" in hlo.compile().as_text())
    from test_model_potential import deterministic_model  # a global deterministic, sharded
    det = model_potential(deterministic_model, data={k: data[k] for k in ("x", "y")},
                          dtype=jnp.float64)
    s = det.postprocess_fn(det.init_params(jax.random.key(0)))
    out["deterministic"] = dict(sites=sorted(s), value=float(s["w_norm"]),
                                want=float(jnp.sum(s["w"] ** 2)))
    print(json.dumps(out))
    """
)


def test_sharded_on_four_simulated_devices_equals_one_device():
    env = dict(
        os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu"
    )
    proc = subprocess.run(
        [sys.executable, "-c", SHARDED_SCRIPT],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    det = results.pop("deterministic")
    assert det["sites"] == ["w", "w_norm"]
    np.testing.assert_allclose(det["value"], det["want"], rtol=1e-12)
    assert len(results) == 3
    for case, r in results.items():
        n = int(case.split("/")[0])
        assert r["real"] == n and r["padded"] >= n and r["padded"] % 4 == 0, case
        assert r["shards"] == [r["padded"] // 4], case  # really split 4 ways
        assert r["all_reduce"], case
        # by default, only devices that get a whole chunk: 37 // 5 = 7 (all 4); 40 and 3 rows
        # are less than one chunk of 1024 (one device)
        assert r["default_devices"] == {"37/5": 4, "40/None": 1, "3/None": 1}[case], case
        np.testing.assert_allclose(*r["value"], rtol=1e-12, err_msg=case)
        assert r["grad_err"] < 1e-9, (case, r["grad_err"])


def linreg_model(x, y=None):
    """A tiny regression with a unimodal posterior (so two samplers must agree)."""
    w = numpyro.sample("w", dist.Normal(0, 1).expand([x.shape[1]]).to_event(1))
    b = numpyro.sample("b", dist.Normal(0, 1))
    prec = numpyro.sample("prec", dist.Gamma(2.0, 0.5))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Normal(x @ w + b, 1.0 / jnp.sqrt(prec)), obs=y)


@pytest.mark.slow  # about 20 s: two NUTS runs of 2 x 900 iterations
def test_nuts_on_the_potential_and_on_the_model_agree_within_mcse():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(30, 2)).astype(np.float32)
    y = (x @ np.array([1.0, -0.5]) + 0.3 + 0.5 * rng.normal(size=30)).astype(np.float32)
    x_test = np.array([[-1.0, 0.5], [0.0, 0.0], [1.5, -1.0]], np.float32)
    kw = dict(
        num_warmup=300, num_samples=600, num_chains=2, chain_method="vectorized", progress_bar=False
    )
    pot = model_potential(linreg_model, data={"x": x, "y": y}, chunk_size=8)
    assert pot.num_chunks == 4
    ours = MCMC(NUTS(potential_fn=pot.potential_fn), postprocess_fn=pot.postprocess_fn, **kw)
    ours.run(jax.random.key(0), init_params=pot.init_params(jax.random.key(1), num_chains=2))
    theirs = MCMC(NUTS(linreg_model), **kw)
    theirs.run(jax.random.key(2), x, y)
    means, mcse2 = [], []
    for mcmc in (ours, theirs):
        s = mcmc.get_samples(group_by_chain=True)
        f = s["w"] @ x_test.T + s["b"][..., None]  # (chains, draws, test points)
        ess = numpyro.diagnostics.effective_sample_size(np.asarray(f))
        means.append(f.mean(axis=(0, 1)))
        mcse2.append(f.var(axis=(0, 1)) / ess)
    tol = 4.5 * np.sqrt(mcse2[0] + mcse2[1])
    assert np.all(np.abs(means[0] - means[1]) < tol), (means, tol)
    # the samples carry the model's site names: Predictive on the model uses them
    pred = Predictive(linreg_model, ours.get_samples())(jax.random.key(3), x_test)
    assert pred["y"].shape == (1200, 3)


@pytest.mark.slow  # ~30 s quiet; test_resume's default tests cover run_segments for the BNN
def test_a_model_potential_run_checkpoints_and_resumes_bit_for_bit(tmp_path):
    """run_segments (NumPyro's public API) takes any kernel: NUTS on a model_potential run in
    segments, stopped after the first and resumed, equals one MCMC.run draw for draw."""
    from bnn_ppl.inference import NUTS as PotentialNUTS
    from bnn_ppl.inference import MCMCPlan, run_segments
    from bnn_ppl.inference.checkpoint.store import CheckpointStore, run_fingerprint

    data = {k: v for k, v in _data(n=20).items() if k in ("x", "y")}
    pot = model_potential(linreg_model, data=data, chunk_size=8)
    plan = MCMCPlan(lambda: PotentialNUTS(pot, max_tree_depth=3), num_warmup=20, num_samples=9)
    key, init = jax.random.key(3), pot.init_params(jax.random.key(4))
    fingerprint = run_fingerprint({"demo": 1}, data["x"], data["y"], key, pot.potential_fn, init)
    folder = tmp_path / "ckpt"
    with CheckpointStore(folder, fingerprint) as store:  # a "killed" run: 1 of 3 segments
        run_segments(plan._replace(num_samples=3), key, pot.args, init, store, 3)
    with CheckpointStore(folder, fingerprint) as store:
        resumed = run_segments(plan, key, pot.args, init, store, 3)
    assert (resumed.resumed_from, resumed.segments) == (1, 3)
    one = MCMC(plan.kernel(), num_warmup=20, num_samples=9, progress_bar=False)
    one.run(key, *pot.args, init_params=init)
    want = one.get_samples(group_by_chain=True)
    for name, value in want.items():
        np.testing.assert_array_equal(resumed.samples[name], value, err_msg=name)

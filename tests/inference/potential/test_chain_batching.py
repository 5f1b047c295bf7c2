"""Vectorized chains and convolutions: ``chain_batching`` of the full-batch potential.

``jax.vmap`` of a convolution over its kernel (one kernel per chain) becomes a grouped
convolution, which ran 9.5x slower than the chains one after another on an H200 (ResNet-20,
3 chains; ``benchmarks/RESULTS.md``). With ``chain_batching="auto"`` (the default) a network with
a convolution evaluates each chain's value and gradient as the one-chain program, one chain
after another; these tests prove that each chain then gets exactly its own one-chain value and
gradient, that no grouped convolution is compiled, that second derivatives (the step-size rule)
still work, that MLPs keep the batched path, and what the memory rule counts.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from conftest import subprocess_env
from numpyro.infer import MCMC
from tolerances import assert_sums_close, potential_magnitudes

import bnn_ppl as bp
from bnn_ppl.inference import (
    HMC,
    SGLD,
    deep_ensemble,
    full_batch_potential,
    hmc,
    map_estimate,
    model_potential,
    nuts,
)
from bnn_ppl.inference.potential import bnn as chunking
from bnn_ppl.inference.sgmcmc.step_size import gradient_scales
from bnn_ppl.models import MLP
from bnn_ppl.models.conv import conv_general_dilated
from bnn_ppl.validation import InputValueError

CHAINS = 3
ROOT = Path(__file__).resolve().parents[3]


class _TinyCNN(nn.Module):
    """Two 3x3 convolutions, a mean pool and a dense layer: convolutions that compile fast."""

    @nn.compact
    def __call__(self, x):
        for _ in range(2):  # the second one's batched form is a grouped convolution
            x = nn.swish(nn.Conv(4, (3, 3), conv_general_dilated=conv_general_dilated)(x))
        return nn.Dense(10)(jnp.mean(x, axis=(1, 2)))


def _conv_problem(n: int = 40):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, 6, 6, 3)).astype(np.float32)
    y = rng.integers(0, 10, n).astype(np.int32)
    return bp.BNN(_TinyCNN(), bp.priors.Normal(0.3), bp.likelihoods.Categorical()), x, y


def _mlp_problem(n: int = 40):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((n, 5)).astype(np.float32)
    y = rng.integers(0, 3, n).astype(np.int32)
    model = bp.BNN(MLP(hidden=(8,), out=3), bp.priors.Normal(0.5), bp.likelihoods.Categorical())
    return model, x, y


def _vmapped(pot):
    """What NumPyro's ``chain_method="vectorized"`` does to the potential: vmap over chains."""
    return jax.jit(
        jax.vmap(lambda u, d: jax.value_and_grad(pot.potential_fn_gen(d))(u), in_axes=(0, None))
    )


def _group_counts(pot, u) -> set[int]:
    """The feature/batch group counts of every convolution in the vmapped program."""
    text = _vmapped(pot).lower(u, pot.data).as_text()
    return {int(c) for c in re.findall(r"(?:feature|batch)_group_count = (\d+)", text)}


def _chain(u, c):
    return jax.tree.map(lambda a: a[c], u)


@pytest.mark.parametrize("chunk", [16, 40], ids=["3 chunks", "one chunk"])
def test_each_chain_gets_its_own_one_chain_value_and_gradient(chunk):
    """Under vmap, the sequential path gives chain c exactly what the one-chain potential gives
    at chain c's parameters (to the float32 rounding of the sums), and so does the batched path;
    chain 1's result is not chain 0's (the comparison can fail)."""
    model, x, y = _conv_problem()
    pot = full_batch_potential(model, x, y, chunk_size=chunk)  # chain_batching="auto"
    assert pot.chain_batching == "auto"
    u = pot.init_params(jax.random.key(0), num_chains=CHAINS)
    single = full_batch_potential(model, x, y, chunk_size=chunk, chain_batching="vectorized")
    batched = full_batch_potential(model, x, y, chunk_size=chunk, chain_batching="vectorized")
    v_seq, g_seq = _vmapped(pot)(u, pot.data)
    v_bat, g_bat = _vmapped(batched)(u, batched.data)
    n = len(x) + 1  # rows and the prior
    for c in range(CHAINS):
        v1, g1 = single.value_and_grad(_chain(u, c))
        value_mag, grad_mag = potential_magnitudes(single, _chain(u, c), x, y)
        assert_sums_close(v_seq[c], v1, value_mag, n, what=f"sequential value, chain {c}")
        assert_sums_close(_chain(g_seq, c), g1, grad_mag, n, what=f"sequential grad, chain {c}")
        assert_sums_close(v_bat[c], v1, value_mag, n, what=f"batched value, chain {c}")
        assert_sums_close(_chain(g_bat, c), g1, grad_mag, n, what=f"batched grad, chain {c}")
    v0, g0 = single.value_and_grad(_chain(u, 0))
    value_mag, grad_mag = potential_magnitudes(single, _chain(u, 0), x, y)
    with pytest.raises(AssertionError, match="value"):
        assert_sums_close(v_seq[1], v0, value_mag, n, what="value")


def test_auto_compiles_no_grouped_convolution_and_keeps_mlps_batched():
    """``auto`` and ``sequential``: every convolution of the 3-chain program is ungrouped (the
    one-chain convolutions); ``vectorized``: grouped ones (one group per chain), lowered, not
    compiled. An MLP under
    ``auto`` compiles the same program as under ``vectorized``."""
    model, x, y = _conv_problem()
    u = full_batch_potential(model, x, y).init_params(jax.random.key(1), num_chains=CHAINS)
    for mode, groups in (("auto", {1}), ("sequential", {1}), ("vectorized", {1, CHAINS})):
        pot = full_batch_potential(model, x, y, chunk_size=16, chain_batching=mode)
        assert _group_counts(pot, u) == groups, mode
    model, x, y = _mlp_problem()
    texts = {}
    for mode in ("auto", "vectorized", "sequential"):
        pot = full_batch_potential(model, x, y, chunk_size=16, chain_batching=mode)
        u = pot.init_params(jax.random.key(2), num_chains=CHAINS)
        texts[mode] = _vmapped(pot).lower(u, pot.data).as_text()
    assert texts["auto"] == texts["vectorized"]
    assert texts["sequential"] != texts["vectorized"]


def test_minibatch_potentials_run_conv_chains_one_after_another():
    """SG-MCMC's and minibatch ensembles' vmapped minibatch potential (each chain its own rows):
    ``auto`` compiles the sequential program for a ConvNet, and each chain gets the one-chain
    value and gradient on its own rows."""
    model, x, y = _conv_problem(24)
    pots = {
        m: full_batch_potential(model, x, y, chunk_size=8, chain_batching=m)
        for m in ("auto", "sequential", "vectorized")
    }
    u = pots["auto"].init_params(jax.random.key(9), num_chains=CHAINS)
    idx = jnp.arange(CHAINS * 6).reshape(CHAINS, 6)  # 6 rows per chain, each its own

    def vmapped_mini(pot):
        vg = jax.value_and_grad(pot.minibatch_potential_fn_gen())
        return jax.jit(jax.vmap(vg))

    texts = {m: vmapped_mini(p).lower(u, idx).as_text() for m, p in pots.items()}
    assert texts["auto"] == texts["sequential"] != texts["vectorized"]
    v, g = vmapped_mini(pots["auto"])(u, idx)
    one = jax.jit(jax.value_and_grad(pots["vectorized"].minibatch_potential_fn_gen()))
    scale = len(x) / idx.shape[1]
    for c in range(CHAINS):
        v1, g1 = one(_chain(u, c), idx[c])
        rows = np.asarray(idx[c])
        # the batch's terms are scaled by n / b (the prior's are not: an overestimate)
        value_mag, grad_mag = potential_magnitudes(
            pots["vectorized"], _chain(u, c), x[rows], y[rows]
        )
        n = idx.shape[1] + 1
        assert_sums_close(v[c], v1, scale * value_mag, n, what=f"value, chain {c}")
        grad_mag = {k: scale * m for k, m in grad_mag.items()}
        assert_sums_close(_chain(g, c), g1, grad_mag, n, what=f"gradient, chain {c}")


# the full-batch case runs with -m slow: the minibatch members run the same sequential path
# (through the minibatch potential), and the full-batch sequential gradient is proven below
@pytest.mark.parametrize(
    "batch_size", [pytest.param(None, marks=pytest.mark.slow), 8], ids=["full batch", "minibatches"]
)
def test_ensemble_members_of_a_convnet_are_their_map_estimates(batch_size):
    """``deep_ensemble`` vmaps its members' optimisation; for a ConvNet each member now runs the
    one-member program (``auto``), and member i equals ``map_estimate`` with its key."""
    model, x, y = _conv_problem(24)
    kw = dict(num_steps=4, learning_rate=1e-2, batch_size=batch_size, chunk_size=8)
    key = jax.random.key(10)
    ens = deep_ensemble(model, x, y, 2, rng_key=key, **kw)
    for i, k in enumerate(jax.random.split(key, 2)):
        one = map_estimate(model, x, y, rng_key=k, **kw)
        for name, a in one.params.items():
            b = np.asarray(ens.params[name][i])
            # 4 optimiser steps from the same start: float32 rounding of the gradients' sums
            np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6 * np.max(np.abs(a)), err_msg=name)


# -m slow: test_minibatch_potentials_run_conv_chains_one_after_another proves the per-chain
# minibatch values and gradients that SGLD's vectorized chains use
@pytest.mark.slow
def test_vectorized_sgld_chains_of_a_convnet_match_the_chains_run_one_by_one():
    """SGLD's vectorized chains (each on its own minibatches) on a ConvNet: each chain's draws
    are those of the same chain run alone, to float32 rounding."""
    model, x, y = _conv_problem(24)
    pot = full_batch_potential(model, x, y, chunk_size=8)
    init = pot.init_params(jax.random.key(11), num_chains=2, method="network")
    draws = {}
    for method in ("vectorized", "sequential"):
        kernel = SGLD(pot, batch_size=6, step_size=1e-4)
        mcmc = MCMC(
            kernel, num_warmup=0, num_samples=3, num_chains=2, chain_method=method,
            progress_bar=False,
        )  # fmt: skip
        mcmc.run(jax.random.key(12), init_params=init)
        draws[method] = mcmc.get_samples(group_by_chain=True)
    for k, a in draws["vectorized"].items():
        b = draws["sequential"][k]
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5 * max(1.0, float(np.max(np.abs(b)))))
    assert not np.allclose(draws["vectorized"][k][0], draws["vectorized"][k][1])


def test_the_drivers_take_chain_batching():
    """``hmc``/``nuts`` and ``deep_ensemble`` pass ``chain_batching`` to their potential: HMC
    forced either way gives the same draws (to float32 rounding), and a bad value is refused
    before anything compiles (the ensemble's members through the sequential path: above)."""
    model, x, y = _conv_problem(16)
    kw = dict(num_warmup=0, num_samples=2, num_chains=2, step_size=1e-3, adapt_step_size=False,
              trajectory_length=3e-3, chunk_size=8, rng_key=jax.random.key(13))  # fmt: skip
    draws = {}
    for mode in ("sequential", "vectorized"):
        mcmc = hmc(model, x, y, chain_batching=mode, **kw)
        assert mcmc.sampler.potential.chain_batching == mode
        draws[mode] = mcmc.get_samples()
    for k, a in draws["sequential"].items():
        b = draws["vectorized"][k]
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5 * max(1.0, float(np.max(np.abs(b)))))
    for driver in (hmc, nuts):
        with pytest.raises(InputValueError, match="chain_batching must be one of"):
            driver(model, x, y, chain_batching="batched", num_warmup=1, num_samples=1)
    with pytest.raises(InputValueError, match="chain_batching must be one of"):
        deep_ensemble(model, x, y, 2, chain_batching="batched")


def _numpyro_conv_model(x, y=None):
    w = numpyro.sample("w", dist.Normal(0.0, 0.5).expand([3, 3, 3, 2]).to_event(4))
    b = numpyro.sample("b", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
    h = jax.lax.conv_general_dilated(
        x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
    )
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Categorical(logits=jnp.mean(h, axis=(1, 2)) + b), obs=y)


def test_numpyro_models_get_the_same_rule():
    """``model_potential`` decides from the chunk's program: a NumPyro model with a convolution
    compiles under ``auto`` the program of ``sequential`` (each chain's value its own), not
    the batched one."""
    _, x, _ = _conv_problem(24)
    y = np.random.default_rng(2).integers(0, 2, len(x)).astype(np.int32)
    data = {"x": x, "y": y}
    pots = {
        m: model_potential(_numpyro_conv_model, data=data, chunk_size=8, chain_batching=m)
        for m in ("auto", "vectorized", "sequential")
    }
    u = pots["auto"].init_params(jax.random.key(8), num_chains=CHAINS)
    texts = {m: _vmapped(p).lower(u, p.data).as_text() for m, p in pots.items()}
    assert texts["auto"] == texts["sequential"] != texts["vectorized"]
    v, _ = _vmapped(pots["auto"])(u, pots["auto"].data)
    for c in range(CHAINS):
        v1 = pots["vectorized"].potential_fn(_chain(u, c))
        # magnitude: the potential's own size bounds its summed terms' here (few rows, O(1) each)
        assert_sums_close(v[c], v1, 10 * abs(float(v1)), len(x) + 2, what=f"chain {c}")
    with pytest.raises(InputValueError, match="chain_batching must be one of"):
        model_potential(_numpyro_conv_model, data=data, chain_batching="map")


def test_second_derivatives_work_on_the_sequential_path():
    """The step-size rule differentiates the gradient again (Hessian-vector products by reverse
    over reverse): the sequential path gives the batched path's curvature."""
    model, x, y = _conv_problem(24)
    curvature = {}
    for mode in ("sequential", "vectorized"):
        pot = full_batch_potential(model, x, y, chunk_size=8, chain_batching=mode)
        u = pot.init_params(jax.random.key(3))
        scales = gradient_scales(pot, u, rng_key=jax.random.key(4), num_iterations=5)
        curvature[mode] = scales.curvature
    assert np.isfinite(curvature["sequential"]) and curvature["sequential"] > 0
    # the same arithmetic on one chain; only the float32 rounding of the sums may differ
    np.testing.assert_allclose(curvature["sequential"], curvature["vectorized"], rtol=1e-4)


def test_data_derivatives_are_refused_on_the_sequential_path_only():
    model, x, y = _conv_problem(16)
    for mode, refused in (("sequential", True), ("vectorized", False)):
        pot = full_batch_potential(model, x, y, chunk_size=16, chain_batching=mode)
        u = pot.init_params(jax.random.key(5))

        def of_inputs(xd, pot=pot, u=u):
            return pot.potential_fn_gen(pot.data._replace(x=xd))(u)

        if refused:
            with pytest.raises(NotImplementedError, match="parameters only"):
                jax.grad(of_inputs)(pot.data.x)
        else:
            assert np.all(np.isfinite(jax.grad(of_inputs)(pot.data.x)))


# -m slow: test_the_drivers_take_chain_batching runs HMC on the sequential path against the
# batched one in the default suite
@pytest.mark.slow
def test_vectorized_hmc_chains_match_the_chains_run_one_by_one():
    """NumPyro's vectorized HMC on the (auto) sequential potential: each chain's draws are the
    draws of the same chain run alone (``chain_method="sequential"``), to float32 rounding."""
    model, x, y = _conv_problem(24)
    pot = full_batch_potential(model, x, y, chunk_size=8)
    init = pot.init_params(jax.random.key(6), num_chains=2, method="network")
    draws = {}
    for method in ("vectorized", "sequential"):
        kernel = HMC(pot, num_steps=3, step_size=1e-3, adapt_step_size=False)
        mcmc = MCMC(
            kernel, num_warmup=0, num_samples=3, num_chains=2, chain_method=method,
            progress_bar=False,
        )  # fmt: skip
        mcmc.run(jax.random.key(7), *pot.args, init_params=init)
        draws[method] = mcmc.get_samples(group_by_chain=True)
    for k, a in draws["vectorized"].items():
        b = draws["sequential"][k]
        scale = max(1.0, float(np.max(np.abs(b))))
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5 * scale, err_msg=k)
    moved = [k for k, a in draws["vectorized"].items() if np.any(a[:, -1] != init[k])]
    assert moved  # the chains moved: the comparison is of real transitions


def test_the_memory_rule_counts_one_chain_when_chains_run_one_after_another(monkeypatch):
    seen = []

    def spy(*args, **kwargs):
        seen.append(kwargs["chains"])
        raise _Stop

    monkeypatch.setattr(chunking, "memory_chunk", spy)
    for problem, mode, want in (
        (_conv_problem, "auto", 1),
        (_conv_problem, "sequential", 1),
        (_conv_problem, "vectorized", CHAINS),
        (_mlp_problem, "auto", CHAINS),
        (_mlp_problem, "sequential", 1),
    ):
        model, x, y = problem()
        with pytest.raises(_Stop):
            full_batch_potential(
                model, x, y, chunk_size="auto", vectorized_chains=CHAINS, chain_batching=mode
            )
        assert seen[-1] == want, (problem.__name__, mode)


def test_bad_chain_batching_is_refused_before_compilation(monkeypatch):
    def no_compile(*args, **kwargs):
        raise AssertionError("compiled before refusing chain_batching")

    monkeypatch.setattr(chunking, "potential_probe", no_compile)
    model, x, y = _mlp_problem()
    for bad in ("vmap", "Sequential", None):
        with pytest.raises(InputValueError, match="chain_batching must be one of"):
            full_batch_potential(model, x, y, chain_batching=bad)


SHARDED_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import jax, numpy as np
    sys.path[:0] = sys.argv[2:4]  # this test's folder, then tests/ (conftest, tolerances)
    from test_chain_batching import CHAINS, _chain, _conv_problem, _vmapped
    from tolerances import potential_magnitudes
    from bnn_ppl.inference import full_batch_potential

    model, x, y = _conv_problem(30)
    out, arrays = {}, {}
    for chunk in (5, 15):  # 3 chunks and one chunk per device
        two = full_batch_potential(model, x, y, chunk_size=chunk)
        one = full_batch_potential(
            model, x, y, chunk_size=chunk, devices=jax.devices()[:1], chain_batching="vectorized"
        )
        u = two.init_params(jax.random.key(0), num_chains=CHAINS)
        v, g = _vmapped(two)(u, two.data)
        for c in range(CHAINS):
            v1, g1 = one.value_and_grad(_chain(u, c))
            vm, gm = potential_magnitudes(one, _chain(u, c), x, y)
            arrays.update({f"{chunk}/{c}/value/{k}": a for k, a in
                           (("two", v[c]), ("one", v1), ("magnitude", vm))})
            for name in g1:
                arrays.update({f"{chunk}/{c}/{name}/{k}": a for k, a in
                               (("two", g[name][c]), ("one", g1[name]), ("magnitude", gm[name]))})
        out[chunk] = dict(devices=two.num_devices, num_chunks=two.num_chunks)
    np.savez(sys.argv[1], **{k: np.asarray(v) for k, v in arrays.items()})
    print(json.dumps(out))
    """
)


def test_sequential_chains_on_two_simulated_devices_equal_one_device(tmp_path):
    """Sharded over 2 (simulated) devices, each device runs the chains one after another on its
    rows and the sums meet in the psum: each chain's value and gradient equal the one-device,
    one-chain ones to the float32 rounding of the sums."""
    env = subprocess_env(XLA_FLAGS="--xla_force_host_platform_device_count=2")
    proc = subprocess.run(
        [sys.executable, "-c", SHARDED_SCRIPT, str(tmp_path / "a.npz"), str(Path(__file__).parent),
         str(ROOT / "tests")],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    layout = json.loads(proc.stdout.strip().splitlines()[-1])
    assert layout == {"5": {"devices": 2, "num_chunks": 3}, "15": {"devices": 2, "num_chunks": 1}}
    with np.load(tmp_path / "a.npz") as f:
        arrays = dict(f)
    entries = sorted({k.rsplit("/", 1)[0] for k in arrays})
    sites = len(full_batch_potential(*_conv_problem(30)).transforms)
    assert len(entries) == 2 * CHAINS * (1 + sites)  # the value and every parameter array
    for e in entries:
        assert_sums_close(
            arrays[f"{e}/two"], arrays[f"{e}/one"], arrays[f"{e}/magnitude"], 31, what=e
        )


class _Stop(Exception):
    """Raised where the test has seen what it needs."""


# ------------------------------------------------------------------ fit and its configs
@pytest.mark.parametrize(
    "config, checkpointed",
    [
        (bp.config.HMCConfig(num_warmup=1, num_samples=1, num_chains=2), False),
        (bp.config.HMCConfig(num_warmup=1, num_samples=1, num_chains=2), True),
        (bp.config.NUTSConfig(num_warmup=1, num_samples=1, num_chains=2), False),
        (bp.config.EnsembleConfig(num_steps=1, num_members=2), False),
        (bp.config.SGLDConfig(num_chains=2, cycle_length=2, num_samples=1), False),
        (bp.config.SGLDConfig(num_chains=2, cycle_length=2, num_samples=1), True),
        (bp.config.ReferenceHMCConfig(num_chains=2, num_warmup=1, segment_draws=4), False),
    ],
    ids=["hmc", "hmc checkpointed", "nuts", "ensemble", "sgld", "sgld checkpointed", "reference"],
)
@pytest.mark.parametrize("mode", ["sequential", "vectorized"])
def test_fit_builds_its_potential_with_the_configs_chain_batching(
    config, checkpointed, mode, monkeypatch, tmp_path
):
    """``fit`` (and its checkpointed path) hands ``config.chain_batching`` to the potential of
    every method with several chains; seen where the potential is built, before anything
    compiles."""
    import dataclasses

    from bnn_ppl.inference.potential import bnn as potential

    seen = []

    def spy(**kwargs):
        seen.append(kwargs["chain_batching"])
        raise _Stop

    monkeypatch.setattr(potential, "FullBatchPotential", spy)
    model, x, y = _mlp_problem()
    c = dataclasses.replace(config, chain_batching=mode)
    where = {"checkpoint_dir": tmp_path / "ckpt"} if checkpointed else {}
    with pytest.raises(_Stop):
        bp.fit(model, (x, y, x[:5]), c, jax.random.key(0), **where)
    assert seen == [mode]


def test_chain_batching_is_refused_where_one_set_of_weights_is_fitted():
    for cls in (bp.config.MAPConfig, bp.config.SVIConfig):
        with pytest.raises(InputValueError, match="does nothing for"):
            cls(chain_batching="sequential")
        assert cls(chain_batching="auto").chain_batching == "auto"
    with pytest.raises(InputValueError, match="chain_batching must be one of"):
        bp.config.HMCConfig(chain_batching="batched")


def test_the_fingerprint_records_chain_batching_only_when_forced():
    """At ``"auto"`` a run's fingerprint is the one written before ``chain_batching`` existed
    (the same fields and digest: old checkpoint folders resume); forced either way it is a
    field, so a resume with the other value is refused, naming it."""
    from bnn_ppl.inference.checkpoint.store import CheckpointError, check_same, run_fingerprint

    model, x, y = _mlp_problem()
    pot = full_batch_potential(model, x, y)
    u = pot.init_params(jax.random.key(0))
    key = jax.random.key(1)
    prints = {}
    for mode in ("auto", "sequential", "vectorized"):
        c = bp.config.HMCConfig(chain_batching=mode).to_dict()
        prints[mode] = run_fingerprint(c, x, y, key, pot.potential_fn, u)
    old = bp.config.HMCConfig().to_dict()
    del old["chain_batching"]  # a config written before the field existed
    assert prints["auto"] == run_fingerprint(old, x, y, key, pot.potential_fn, u)
    assert "config.chain_batching" not in prints["auto"]["fields"]
    assert prints["sequential"]["fields"]["config.chain_batching"] == "sequential"
    refused = "config.chain_batching is 'sequential' there and 'vectorized' now"
    with pytest.raises(CheckpointError, match=refused):
        check_same(prints["sequential"], prints["vectorized"], "runs/x")

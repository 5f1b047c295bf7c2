"""Multi-process full-batch HMC (jax.distributed), and sharding on many simulated devices.

The two-process test is real: two local processes join through ``jax.distributed`` (CPU
collectives: gloo, loopback only), each with 2 simulated CPU devices and only its own block of
rows, and run a short HMC chain; their samples must be identical to each other and equal, to
float tolerance, to a single-process run on 4 simulated devices.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from tolerances import assert_sums_close

from bnn_ppl.inference.potential import distributed
from bnn_ppl.inference.potential.bnn import _device_rows
from bnn_ppl.inference.potential.distributed import (
    DistributedSettings,
    process_rows,
    settings_from_env,
)
from bnn_ppl.io import load_npz

ROOT = Path(__file__).resolve().parents[3]
TIMEOUT_S = 240  # the whole two-process test; it takes ~20-40 s on 2 busy cores


# ----------------------------------------------------------------------------- settings
def test_settings_from_jax_variables():
    env = {"JAX_COORDINATOR_ADDRESS": "h:1", "JAX_NUM_PROCESSES": "4", "JAX_PROCESS_ID": "3"}
    assert settings_from_env(env) == DistributedSettings("h:1", 4, 3)
    env = {"JAX_COORDINATOR_ADDRESS": "h:1", "JAX_PROCESS_COUNT": "2", "JAX_PROCESS_INDEX": "0"}
    assert settings_from_env(env) == DistributedSettings("h:1", 2, 0)


def test_settings_from_torchrun_variables():
    env = {"MASTER_ADDR": "10.1.2.3", "MASTER_PORT": "29500", "WORLD_SIZE": "8", "RANK": "5"}
    assert settings_from_env(env) == DistributedSettings("10.1.2.3:29500", 8, 5)


def test_settings_nothing_set_is_one_process_and_cluster_is_auto_detected():
    assert settings_from_env({}) is None
    assert settings_from_env({"HOME": "/root"}) is None
    assert settings_from_env({"SLURM_JOB_ID": "17"}) == DistributedSettings(None, None, None)


@pytest.mark.parametrize(
    "env, match",
    [
        ({"JAX_PROCESS_ID": "0"}, "coordinator missing.*process count missing"),
        ({"JAX_COORDINATOR_ADDRESS": "h:1", "JAX_NUM_PROCESSES": "2"}, "process id missing"),
        ({"JAX_COORDINATOR_ADDRESS": "h:1", "WORLD_SIZE": "two", "RANK": "0"}, "integer"),
        ({"JAX_COORDINATOR_ADDRESS": "h:1", "WORLD_SIZE": "2", "RANK": "2"}, "must be <"),
        ({"JAX_COORDINATOR_ADDRESS": "h:1", "WORLD_SIZE": "0", "RANK": "0"}, ">= 1"),
        ({"JAX_COORDINATOR_ADDRESS": "host", "WORLD_SIZE": "2", "RANK": "0"}, "host:port"),
        ({"MASTER_ADDR": "h", "WORLD_SIZE": "2", "RANK": "0"}, "MASTER_PORT"),
    ],
)
def test_incomplete_or_bad_settings_are_refused(env, match):
    with pytest.raises(ValueError, match=match):
        settings_from_env(env)


def test_initialize_from_env_without_settings_does_nothing():
    assert distributed.initialize_from_env({}) is None


# ----------------------------------------------------------------------------- row blocks
@pytest.mark.parametrize("n, chunk", [(37, 4), (1000, 64), (1000, None), (8, 1), (4099, 512)])
@pytest.mark.parametrize("layout", [(2, 2), (4, 1), (1, 3, 2)])
def test_process_blocks_tile_the_single_process_layout(n, chunk, layout):
    """Blocks are contiguous, cover every row once, and put device k on rows [kR, (k+1)R)."""
    devices = [SimpleNamespace(process_index=p) for p, k in enumerate(layout) for _ in range(k)]
    rows_per_device = np.prod(_device_rows(n, len(devices), chunk))
    stop = 0
    for p in range(len(layout)):
        try:
            s = process_rows(n, chunk_size=chunk, devices=devices, process_index=p)
        except ValueError as e:  # tiny data: a trailing process may get nothing
            assert "no rows" in str(e) and sum(layout[:p]) * rows_per_device >= n
            continue
        assert s.start == stop == min(sum(layout[:p]) * rows_per_device, n)
        assert s.stop - s.start <= layout[p] * rows_per_device
        stop = s.stop
    assert stop == n


def test_process_rows_orders_devices_by_process_and_validates():
    devices = [SimpleNamespace(process_index=p) for p in (1, 0, 1, 0)]
    assert process_rows(40, devices=devices, process_index=0) == slice(0, 20)
    assert process_rows(40, devices=devices, process_index=1) == slice(20, 40)
    with pytest.raises(ValueError, match="positive int"):
        process_rows(0, devices=devices, process_index=0)
    with pytest.raises(ValueError, match="owns none"):
        process_rows(40, devices=devices, process_index=2)


# ----------------------------------------------------------------------------- two processes
WORKER = textwrap.dedent(
    """
    import json, sys, time
    t0 = time.perf_counter()
    from bnn_ppl.inference.potential import distributed
    settings = distributed.initialize_from_env(initialization_timeout=60,
                                               heartbeat_timeout_seconds=30)
    import jax
    import numpy as np
    import bnn_ppl as bp
    from numpyro.infer import MCMC
    from bnn_ppl.inference import HMC, full_batch_potential
    from bnn_ppl.io import save_npz
    from bnn_ppl.models import MLP

    out = sys.argv[1]
    n, chunk = 37, 4        # 4 devices x 3 chunks x 4 rows = 48 rows: 11 padding rows
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 3)).astype(np.float32)
    y = (np.sin(x @ np.array([1.0, -0.5, 0.3])) + 0.3 * rng.normal(size=n)).astype(np.float32)
    rows = distributed.process_rows(n, chunk_size=chunk)
    x, y = x[rows], y[rows]  # this process holds only its own rows from here on
    model = bp.BNN(MLP(hidden=(5,), out=1), bp.priors.Normal(1.0), bp.likelihoods.Gaussian(0.5))
    # as docs/howto/multi_host.md runs it: NumPyro's MCMC, the data as jit arguments
    pot = full_batch_potential(model, x, y, chunk_size=chunk)
    mcmc = MCMC(HMC(pot, trajectory_length=0.3), num_warmup=15, num_samples=15,
                progress_bar=False, jit_model_args=True)
    init_key, run_key = jax.random.split(jax.random.key(42))
    mcmc.run(run_key, *pot.args, init_params=pot.init_params(init_key),
             extra_fields=("accept_prob",))
    samples = {k: np.asarray(v) for k, v in mcmc.get_samples().items()}
    samples["accept_prob"] = np.asarray(mcmc.get_extra_fields()["accept_prob"])
    save_npz(out + ".npz", samples)
    shards = sorted((s.index[0].start, s.index[0].stop, int(np.asarray(s.data).sum()))
                    for s in pot.data.mask.addressable_shards)
    report = dict(
        settings=None if settings is None else list(settings),
        process=jax.process_index(), processes=jax.process_count(),
        devices=jax.device_count(), local_devices=jax.local_device_count(),
        rows=[rows.start, rows.stop], num_data=pot.num_data, chunk=pot.chunk_size,
        num_chunks=pot.num_chunks, padded=int(pot.data.x.shape[0]), mask_shards=shards,
    )
    if settings is not None:  # a wrong block is refused on EVERY process, naming the blocks
        try:
            full_batch_potential(model, x[:-1] if jax.process_index() else x, y[:-1]
                                 if jax.process_index() else y, chunk_size=chunk)
            report["refused"] = None
        except ValueError as e:
            report["refused"] = str(e)
        try:  # a global jax.Array is refused with the fix, not failing deep in np.asarray
            full_batch_potential(model, pot.data.x, y, chunk_size=chunk)
            report["refused_global"] = None
        except ValueError as e:
            report["refused_global"] = str(e)
    report["seconds"] = time.perf_counter() - t0
    with open(out + ".json", "w") as f:
        json.dump(report, f)
    """
)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(devices: int, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("JAX_COORDINATOR", "JAX_NUM_PROC", "JAX_PROCESS", "MASTER_"))
        and k not in ("WORLD_SIZE", "RANK", "XLA_FLAGS")
    }
    env.update(
        XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
        JAX_PLATFORMS="cpu",
        JAX_CPU_COLLECTIVES_IMPLEMENTATION="gloo",
        PYTHONUNBUFFERED="1",
        **extra,
    )
    return env


def _run_all(jobs: list[tuple[list[str], dict[str, str], Path]], timeout: float) -> None:
    """Start every job at once, wait with one deadline; on any failure kill them all."""
    procs = []
    try:
        for argv, env, log in jobs:
            with open(log, "w") as f:
                procs.append(
                    subprocess.Popen(argv, env=env, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT)
                )
        deadline = time.monotonic() + timeout
        while any(p.poll() is None for p in procs):
            failed = [p for p in procs if p.poll() not in (None, 0)]
            if failed or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        codes = [p.poll() for p in procs]
        if any(c != 0 for c in codes):
            logs = "\n".join(f"--- {log.name}:\n{log.read_text()[-2500:]}" for *_, log in jobs)
            raise AssertionError(f"exit codes {codes} (None: killed at the deadline)\n{logs}")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)


def test_two_processes_sample_like_one_process_with_four_devices(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    port = _free_port()
    jobs = [
        (
            [sys.executable, str(script), str(tmp_path / f"proc{p}")],
            _env(
                2,
                JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}",
                JAX_NUM_PROCESSES="2",
                JAX_PROCESS_ID=str(p),
            ),
            tmp_path / f"proc{p}.log",
        )
        for p in (0, 1)
    ]
    jobs.append(
        ([sys.executable, str(script), str(tmp_path / "single")], _env(4), tmp_path / "single.log")
    )
    t0 = time.monotonic()
    _run_all(jobs, TIMEOUT_S)
    wall = time.monotonic() - t0

    reports = [
        json.loads((tmp_path / f"{name}.json").read_text()) for name in ("proc0", "proc1", "single")
    ]
    samples = [load_npz(tmp_path / f"{name}.npz") for name in ("proc0", "proc1", "single")]
    r0, r1, single = reports
    for p, r in enumerate((r0, r1)):
        assert r["settings"] == [f"127.0.0.1:{port}", 2, p]
        assert (r["process"], r["processes"], r["devices"], r["local_devices"]) == (p, 2, 4, 2)
    assert (single["processes"], single["devices"], single["rows"]) == (1, 4, [0, 37])
    # process 0 holds rows 0:24, process 1 rows 24:37 (13 real + 11 padding rows)
    assert (r0["rows"], r1["rows"]) == ([0, 24], [24, 37])
    for r in reports:
        assert (r["num_data"], r["chunk"], r["num_chunks"], r["padded"]) == (37, 4, 3, 48)
    assert r0["mask_shards"] == [[0, 12, 12], [12, 24, 12]]
    assert r1["mask_shards"] == [[24, 36, 12], [36, 48, 1]]
    assert [s[:2] for s in single["mask_shards"]] == [[0, 12], [12, 24], [24, 36], [36, 48]]
    for r in (r0, r1):
        assert "process 1: rows 18:36 (18 rows, got 12)" in r["refused"], r["refused"]
        assert "x is a global jax.Array" in r["refused_global"], r["refused_global"]

    assert set(samples[0]) == set(samples[1]) == set(samples[2])
    for k in samples[0]:
        assert samples[0][k].shape[0] == 15
        np.testing.assert_array_equal(samples[0][k], samples[1][k], err_msg=k)
        np.testing.assert_allclose(samples[0][k], samples[2][k], rtol=1e-4, atol=1e-5, err_msg=k)
    assert np.ptp(samples[0]["Dense_0.bias"], axis=0).min() > 0  # the chain really moved
    print(
        f"two-process test: {wall:.1f} s wall; worker seconds",
        [round(r["seconds"], 1) for r in reports],
    )


# ------------------------------------------------------------- two processes, any NumPyro model
MODEL_WORKER = textwrap.dedent(
    """
    import json, sys
    from bnn_ppl.inference.potential import distributed
    settings = distributed.initialize_from_env(initialization_timeout=60,
                                               heartbeat_timeout_seconds=30)
    import jax, numpy as np
    sys.path.insert(0, "tests")
    from test_distributed import global_site_model, model_data
    from numpyro.infer import MCMC
    from bnn_ppl.inference import NUTS, model_potential
    from bnn_ppl.io import save_npz

    out, (x, y), chunk = sys.argv[1], model_data(), 4
    rows = distributed.process_rows(len(x), chunk_size=chunk)
    data = {"x": x[rows], "y": y[rows]}  # this process's rows only
    pot = model_potential(global_site_model, data=data, chunk_size=chunk)
    u = pot.init_params(jax.random.key(0))
    value, grad = pot.value_and_grad(u)
    arrays = {"value": value, **{f"u/{k}": v for k, v in u.items()},
              **{f"grad/{k}": v for k, v in grad.items()},
              **{f"param/{k}": v for k, v in pot.postprocess_fn(u).items()}}
    mcmc = MCMC(NUTS(pot, max_tree_depth=3), num_warmup=10, num_samples=5,
                progress_bar=False, jit_model_args=True)  # the data as jit arguments
    mcmc.run(jax.random.key(1), *pot.args, init_params=u)
    arrays.update({f"sample/{k}": v for k, v in mcmc.get_samples().items()})
    save_npz(out + ".npz", {k: np.asarray(v) for k, v in arrays.items()})
    report = dict(
        process=jax.process_index(), devices=jax.device_count(), rows=[rows.start, rows.stop],
        num_data=pot.num_data, chunk=pot.chunk_size, num_chunks=pot.num_chunks,
        padded=int(pot.data.mask.shape[0]), probe=pot.probe["x"].tolist(),
        mask_shards=sorted((s.index[0].start, s.index[0].stop, int(np.asarray(s.data).sum()))
                           for s in pot.data.mask.addressable_shards))
    me = jax.process_index()
    bad = {  # inconsistent input, refused on every process alike
        "rows": dict(data={k: v[:-1] if me else v for k, v in data.items()}),
        "temperature": dict(data=data, temperature=0.5 if me else 1.0),
        "global": dict(data={"x": pot.data.arrays["x"], "y": data["y"]}),
    }
    for name, kwargs in bad.items():
        try:
            model_potential(global_site_model, chunk_size=chunk, **kwargs)
            report["refused_" + name] = None
        except ValueError as e:
            report["refused_" + name] = str(e)
    with open(out + ".json", "w") as f:
        json.dump(report, f)
    """
)


def global_site_model(x, y=None):
    """Normal weights, a Gamma noise precision and a LogNormal output scale; y in the plate."""
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    w = numpyro.sample("w", dist.Normal(0, 1).expand([x.shape[1], 3]).to_event(2))
    prec = numpyro.sample("prec", dist.Gamma(3.0, 1.0))
    scale = numpyro.sample("scale", dist.LogNormal(0.0, 0.5))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Normal(scale * jnp.tanh(x @ w).sum(-1), prec**-0.5), obs=y)


def model_data(n: int = 37) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 2)).astype(np.float32)
    return x, (np.sin(x[:, 0]) + 0.2 * rng.normal(size=n)).astype(np.float32)


def _model_magnitudes(pot, u, x, y):
    """Sum of |terms| of the potential and, per gradient entry, of its gradient: the per-row
    negative log-likelihoods, and the negative log prior and log-Jacobian (tests/tolerances)."""
    import jax
    import jax.numpy as jnp
    from tolerances import per_row_magnitudes

    def row(v, xi, yi):
        values = pot.postprocess_fn(v)
        return -jnp.sum(pot._trace(values, {"x": xi, "y": yi})["y"]["fn"].log_prob(yi))

    def rest(v):
        _, log_det, log_prior = pot._globals(v)
        return -(log_prior + log_det)

    value_mag, grad_mag = per_row_magnitudes(row, u, x, y)
    _, log_det, _ = pot._globals(u)
    params = pot.postprocess_fn(u)
    tr = pot._trace(params, pot.probe)
    prior = sum(float(np.sum(np.abs(tr[k]["fn"].log_prob(params[k])))) for k in params)
    value_mag += prior + abs(float(log_det))
    rest_grad = jax.grad(rest)(u)
    return value_mag, jax.tree.map(lambda m, g: m + np.abs(np.asarray(g, np.float64)),
                                   grad_mag, rest_grad)


@pytest.mark.slow  # ~20 s quiet; the BNN two-process test runs by default, the model path
# is test_model_potential's four-device equality
def test_two_processes_evaluate_a_numpyro_model_like_one_process(tmp_path):
    """model_potential over 2 processes x 2 devices (37 rows, 11 of them padding) gives the
    value, gradient and constrained sites of one process on one device, to float32 tolerance;
    NUTS on it runs with the data as jit arguments and every process gets the same draws."""
    import jax
    from tolerances import assert_sums_close

    from bnn_ppl.inference import model_potential

    script = tmp_path / "model_worker.py"
    script.write_text(MODEL_WORKER)
    port = _free_port()
    env = dict(JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", JAX_NUM_PROCESSES="2")
    jobs = [
        ([sys.executable, str(script), str(tmp_path / f"proc{p}")],
         _env(2, JAX_PROCESS_ID=str(p), **env), tmp_path / f"proc{p}.log")
        for p in (0, 1)
    ]  # fmt: skip
    _run_all(jobs, TIMEOUT_S)
    r0, r1 = (json.loads((tmp_path / f"proc{p}.json").read_text()) for p in (0, 1))
    out0, out1 = (load_npz(tmp_path / f"proc{p}.npz") for p in (0, 1))

    x, y = model_data()
    assert (r0["rows"], r1["rows"]) == ([0, 24], [24, 37])
    for r in (r0, r1):
        assert (r["devices"], r["num_data"], r["chunk"], r["num_chunks"], r["padded"]) == (
            4, 37, 4, 3, 48)  # fmt: skip
        assert r["probe"] == x[:1].tolist()  # global row 0, also on process 1
        refused = r["refused_rows"]  # 36 rows in all: the blocks are 18 and 18 rows
        assert "(data) to model_potential" in refused, refused
        assert "process 1: rows 18:36 (18 rows, got 12)" in refused, refused
        assert "different arguments" in r["refused_temperature"], r["refused_temperature"]
        assert "data['x'] is a global jax.Array" in r["refused_global"], r["refused_global"]
    assert r0["mask_shards"] == [[0, 12, 12], [12, 24, 12]]
    assert r1["mask_shards"] == [[24, 36, 12], [36, 48, 1]]
    assert set(out0) == set(out1)
    for k in out0:  # every process holds the same (replicated) result and samples
        np.testing.assert_array_equal(out0[k], out1[k], err_msg=k)
    assert out0["sample/w"].shape == (5, 2, 3) and np.ptp(out0["sample/w"], axis=0).max() > 0

    one = model_potential(global_site_model, data={"x": x, "y": y}, chunk_size=4,
                          devices=jax.devices()[:1])  # fmt: skip
    u = {k.split("/", 1)[1]: v for k, v in out0.items() if k.startswith("u/")}
    assert set(u) == {"w", "prec", "scale"}
    value, grad = one.value_and_grad(u)
    value_mag, grad_mag = _model_magnitudes(one, u, x, y)
    num_terms = len(x) + 6 + 2 + 1  # rows, prior entries, log-Jacobian
    assert_sums_close(out0["value"], value, value_mag, num_terms, what="value")
    assert_sums_close({k: out0[f"grad/{k}"] for k in grad}, dict(grad), grad_mag, num_terms,
                      what="grad")  # fmt: skip
    for k, v in one.postprocess_fn(u).items():
        np.testing.assert_allclose(out0[f"param/{k}"], v, rtol=1e-6, err_msg=k)
    # the rule has power: one dropped row moves the value by far more than the tolerance
    short = model_potential(global_site_model, data={"x": x[:-1], "y": y[:-1]}, chunk_size=4,
                            devices=jax.devices()[:1])  # fmt: skip
    with pytest.raises(AssertionError, match="value"):
        assert_sums_close(out0["value"], short.value_and_grad(u)[0], value_mag, num_terms,
                          what="value")  # fmt: skip


# ----------------------------------------------------------------------------- 8 devices
RESNET_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import jax, jax.numpy as jnp, numpy as np
    import bnn_ppl as bp
    from bnn_ppl.inference import full_batch_potential
    from bnn_ppl.models import ResNet20FRN
    sys.path.insert(0, "tests")
    from tolerances import potential_magnitudes

    assert jax.device_count() == 8, jax.devices()
    rng = np.random.default_rng(0)
    n = 45                                  # 8 devices x 2 chunks x 3 rows: 3 padding rows
    x = rng.normal(size=(n, 8, 8, 3)).astype(np.float32)
    y = rng.integers(0, 10, size=n).astype(np.int32)
    model = bp.BNN(ResNet20FRN(out=10, width=2, blocks_per_stage=1), bp.priors.Normal(0.5),
                   bp.likelihoods.Categorical(), temperature=0.5)
    one = full_batch_potential(model, x, y, devices=jax.devices()[:1], chunk_size=16)
    eight = full_batch_potential(model, x, y, chunk_size=3)
    u = one.init_params(jax.random.key(0), method="network")
    v1, g1 = one.value_and_grad(u)
    v8, g8 = eight.value_and_grad(u)
    vmag, gmag = potential_magnitudes(one, u, x, y)
    arrays = {"value/one": v1, "value/eight": v8, "value/magnitude": vmag}
    for k in g1:
        arrays.update({f"{k}/one": g1[k], f"{k}/eight": g8[k], f"{k}/magnitude": gmag[k]})
    np.savez(sys.argv[1], **{k: np.asarray(v) for k, v in arrays.items()})
    hlo = jax.jit(lambda u, d: jax.value_and_grad(eight.potential_fn_gen(d))(u)).lower(
        u, eight.data).compile().as_text()
    print(json.dumps(dict(
        shards=sorted({tuple(s.data.shape) for s in eight.data.x.addressable_shards}),
        num_shards=len(eight.data.x.addressable_shards), chunks=[one.num_chunks, eight.num_chunks],
        all_reduce="all-reduce" in hlo)))
    """
)


@pytest.mark.slow  # ~40 s on 2 cores; test_potential's four-device equality runs by default
def test_resnet20frn_on_eight_simulated_devices_equals_one_device(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", RESNET_SCRIPT, str(tmp_path / "sums.npz")],
        capture_output=True,
        text=True,
        env=_env(8),
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["num_shards"] == 8 and r["shards"] == [[6, 8, 8, 3]], r  # really split 8 ways
    assert r["chunks"] == [3, 2] and r["all_reduce"], r  # chunked and one all-reduce
    with np.load(tmp_path / "sums.npz") as f:
        arrays = dict(f)
    # float32 sums in another order (tests/tolerances.py): the value adds 45 per-row terms and
    # the prior; a gradient entry at most 45 rows x 8x8 positions (a convolution's kernel
    # gradient, an FRN layer's mean over positions) and the prior
    entries = sorted({k.rsplit("/", 1)[0] for k in arrays})
    assert "value" in entries and len(entries) > 20, entries
    for e in entries:
        assert_sums_close(arrays[f"{e}/one"], arrays[f"{e}/eight"], arrays[f"{e}/magnitude"],
                          45 + 1 if e == "value" else 45 * 8 * 8 + 1, what=e)  # fmt: skip

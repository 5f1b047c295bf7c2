"""Right or refused: settings and models that used to give a wrong answer, lose data or fail
late are refused early with an error naming them, or now work.

Each test reproduces one failure from its description: a per-row array outside ``data``
(the potential was silently wrong with one-row chunks), a discrete latent, ``chunk_size=
"auto"``, a self-contradicting plate message, Poisson counts float32 rounds, a burn-in that
leaves too few draws, SG-MCMC batches of one row, a tempering ladder float32 collapses, chain
health judged on short segments, damaged older checkpoint files, a resume on another number of
devices, and a finished checkpoint on read-only storage.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from conftest import count_compiles, subprocess_env
from numpyro import handlers
from numpyro.infer.util import potential_energy

import bnn_ppl as bp
from bnn_ppl import config as cfg
from bnn_ppl.diagnostics.chain_health import MIN_DRAWS
from bnn_ppl.inference import fit, full_batch_potential, model_potential
from bnn_ppl.inference.checkpoint.store import (
    CheckpointDamageWarning,
    CheckpointError,
    CheckpointStore,
)
from bnn_ppl.inference.reference.chains import Segment, segment_health
from bnn_ppl.inference.reference.tempering import ParallelTempering
from bnn_ppl.models import MLP
from bnn_ppl.validation import InputValueError

N = 12
_rng = np.random.default_rng(0)
X = _rng.normal(size=(N, 2)).astype(np.float32)
OFFSET = (3.0 * _rng.normal(size=N)).astype(np.float32)  # a per-row array
WEIGHT = _rng.uniform(0.5, 2.0, size=N).astype(np.float32)  # per-row weights
Y = (X @ np.array([1.0, -0.5]) + OFFSET + 0.3 * _rng.normal(size=N)).astype(np.float32)


def _offset_model(x, offset, y=None):
    w = numpyro.sample("w", dist.Normal(0, 1).expand([2]).to_event(1))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Normal(x @ w + offset, 1.0), obs=y)


def _weighted_model(x, weight, y=None):
    w = numpyro.sample("w", dist.Normal(0, 1).expand([2]).to_event(1))
    with numpyro.plate("data", x.shape[0]), handlers.scale(scale=weight):
        numpyro.sample("y", dist.Normal(x @ w, 1.0), obs=y)


# ----------------------------------------------------- per-row arrays outside data
@pytest.mark.parametrize("chunk_size", [1, 5, None])
@pytest.mark.parametrize("how", ["model_kwargs", "model_args", "scale_weights"])
def test_a_per_row_array_outside_data_is_refused_before_compiling(how, chunk_size) -> None:
    data = {"x": X, "y": Y}
    if how == "model_kwargs":
        call = dict(data=data, model_kwargs={"offset": OFFSET})
        args, model = (), _offset_model
    elif how == "model_args":
        def model(offset, x, y=None):
            _offset_model(x, offset, y)
        args, call = (OFFSET,), dict(data=data)
    else:
        call = dict(data=data, model_kwargs={"weight": WEIGHT})
        args, model = (), _weighted_model
    with count_compiles() as compiles, pytest.raises(InputValueError) as e:
        model_potential(model, *args, chunk_size=chunk_size, **call)
    assert "site 'y'" in str(e.value) and "per-row array passed outside data" in str(e.value)
    assert compiles == []


@pytest.mark.parametrize("chunk_size", [1, 5, None])
@pytest.mark.parametrize("model,key,value", [(_offset_model, "offset", OFFSET),
                                             (_weighted_model, "weight", WEIGHT)])
def test_per_row_arrays_in_data_give_numpyros_potential_at_every_chunk_size(
    model, key, value, chunk_size
) -> None:
    pot = model_potential(model, data={"x": X, "y": Y, key: value}, chunk_size=chunk_size)
    u = {"w": jnp.array([0.3, -0.2])}
    want = potential_energy(model, (), {"x": X, "y": Y, key: value}, u)
    got = pot.potential_fn(u)
    # float32 sums of N terms: a tolerance scaled by the terms' magnitude
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * N * (1 + abs(float(want)) / N))


def _sliced_offset_model(x, offset, y=None, idx=None):
    """Reads ``offset`` by position: ``offset[:m]``, or at ``idx`` (rows of data) if given."""
    w = numpyro.sample("w", dist.Normal(0, 1).expand([2]).to_event(1))
    rows = offset[: x.shape[0]] if idx is None else jnp.asarray(offset)[idx]
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Normal(x @ w + rows, 1.0), obs=y)


def _arange_offset_model(x, offset, y=None):
    w = numpyro.sample("w", dist.Normal(0, 1).expand([2]).to_event(1))
    with numpyro.plate("data", x.shape[0]):
        rows = jnp.asarray(offset)[jnp.arange(x.shape[0])]
        numpyro.sample("y", dist.Normal(x @ w + rows, 1.0), obs=y)


@pytest.mark.parametrize("how", ["model_kwargs", "model_args"])
@pytest.mark.parametrize("model", [_sliced_offset_model, _arange_offset_model])
def test_a_per_row_array_outside_data_read_by_position_is_refused(model, how) -> None:
    # offset[:x.shape[0]] keeps one row per data row, so every site has the plate's rows; but
    # a chunk of rows 5..9 would read offset[:5]: refused, naming the argument
    if how == "model_kwargs":
        args, call, name = (), dict(model_kwargs={"offset": OFFSET}), "model_kwargs['offset']"
    else:
        def first(offset, x, y=None, model=model):
            model(x, offset, y)
        args, call, name, model = (OFFSET,), {}, "model_args[0]", first
    with count_compiles() as compiles, pytest.raises(InputValueError) as e:
        model_potential(model, *args, data={"x": X, "y": Y}, chunk_size=5, **call)
    assert str(e.value).startswith(f"{name} has the data's {N} rows") and "data={" in str(e.value)
    assert compiles == []


@pytest.mark.parametrize("chunk_size", [1, 5])
def test_an_array_outside_data_read_at_rows_of_data_is_exact(chunk_size) -> None:
    # offset[idx] with idx in data is split with the rows: every chunk reads its own rows
    idx = np.arange(N)[::-1].copy()
    data = {"x": X, "y": Y, "idx": idx}
    pot = model_potential(_sliced_offset_model, data=data, model_kwargs={"offset": OFFSET},
                          chunk_size=chunk_size)  # fmt: skip
    u = {"w": jnp.array([0.3, -0.2])}
    want = potential_energy(_sliced_offset_model, (), {**data, "offset": OFFSET}, u)
    got = pot.potential_fn(u)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * N * (1 + abs(float(want)) / N))


def test_a_discrete_latent_is_refused_naming_the_site() -> None:
    def model(x, y=None):
        z = numpyro.sample("z", dist.Bernoulli(0.5))
        w = numpyro.sample("w", dist.Normal(0, 1).expand([2]).to_event(1))
        with numpyro.plate("data", x.shape[0]):
            numpyro.sample("y", dist.Normal(x @ w + z, 1.0), obs=y)

    with count_compiles() as compiles, pytest.raises(InputValueError,
                                                     match="site 'z' is a discrete latent"):
        model_potential(model, data={"x": X, "y": Y})
    assert compiles == []


def test_chunk_size_auto_works_as_in_full_batch_potential() -> None:
    data = {"x": X, "y": Y, "offset": OFFSET}
    auto = model_potential(_offset_model, data=data, chunk_size="auto")
    assert auto.chunk_rule in ("no memory stats", "fits in memory", "largest that fits")
    plain = model_potential(_offset_model, data=data, chunk_size=4)
    u = {"w": jnp.array([0.3, -0.2])}
    np.testing.assert_allclose(auto.potential_fn(u), plain.potential_fn(u), rtol=1e-5)
    with pytest.raises(InputValueError, match="chunk_size must be a positive int, None"):
        model_potential(_offset_model, data=data, chunk_size="big")


def test_the_memory_rule_compiles_the_models_own_probe_chunk() -> None:
    from bnn_ppl.inference.potential.bnn import memory_chunk
    from bnn_ppl.inference.potential.numpyro_model import _model_probe

    pot = model_potential(_offset_model, data={"x": X, "y": Y, "offset": OFFSET}, chunk_size=4)
    fields = {k: getattr(pot, k) for k in (
        "model", "model_args", "model_kwargs", "probe", "data_plate", "plate_sites",
        "temperature", "temper", "init_strategy", "deterministic_sites", "chain_batching",
        "dtype")}  # fmt: skip
    arrays = {"x": X, "y": Y, "offset": OFFSET}
    probe = _model_probe(fields, arrays, jax.devices()[0])
    chunk, rule = memory_chunk(N, probe, jax.devices(), data_bytes_per_row=17,
                               free_bytes=10**9)  # fmt: skip
    assert (chunk, rule) == (N, "fits in memory")
    chunk, rule = memory_chunk(N, probe, jax.devices(), data_bytes_per_row=17, free_bytes=0)
    assert (chunk, rule) == (1, "largest that fits")


def test_a_fixed_plate_size_message_does_not_contradict_itself() -> None:
    def model(x, y=None):
        w = numpyro.sample("w", dist.Normal(0, 1).expand([2]).to_event(1))
        with numpyro.plate("data", N):
            numpyro.sample("y", dist.Normal(x @ w, 1.0), obs=y)

    with pytest.raises(InputValueError) as e:
        model_potential(model, data={"x": X, "y": Y})
    text = str(e.value)
    assert f"has the data's {N} rows, but on one row of the data it has size {N}" in text
    assert f"has size {N} but the data have {N} rows" not in text


# ----------------------------------------------------------------- likelihoods
def test_poisson_counts_float32_cannot_hold_are_refused() -> None:
    lik = bp.likelihoods.Poisson()
    ok = lik.check_targets(np.array([0, 3, 2**24]), (3, 1))
    assert ok.max() == 2**24
    with pytest.raises(InputValueError, match=r"y\[1\] = 16777217 is above 16777216"):
        lik.check_targets(np.array([0, 2**24 + 1]), (2, 1))


# ------------------------------------------------------------- settings, combined
def test_a_burn_in_that_leaves_too_few_draws_is_refused_naming_both_settings() -> None:
    with pytest.raises(InputValueError, match=r"burn_in=0\.99 .*segment_draws=200"):
        cfg.ReferenceHMCConfig(burn_in=0.99)
    with pytest.raises(InputValueError, match="burn_in=0.5 leaves 3 of the 6 draws"):
        cfg.ReferenceHMCConfig(burn_in=0.5, segment_draws=6)
    with pytest.raises(InputValueError, match="max_draws=6"):
        cfg.ReferenceHMCConfig(burn_in=0.5, segment_draws=200, max_draws=6)
    assert cfg.ReferenceHMCConfig(burn_in=0.5, segment_draws=8).burn_in == 0.5


@pytest.mark.parametrize("method", ["sgld", "sghmc", "sgnht", "atmc"])
def test_sgmcmc_batches_of_one_row_are_refused_when_configured(method) -> None:
    with pytest.raises(InputValueError, match=f"batch_size=1 is too small for {method}"):
        cfg.CONFIGS[method](batch_size=1)
    assert cfg.CONFIGS[method](batch_size=2).batch_size == 2


def test_the_cli_refuses_batch_size_one_before_claiming_out(tmp_path: Path) -> None:
    from bnn_ppl import cli

    out = tmp_path / "run"
    with count_compiles() as compiles:
        rc = cli.main(["run", "sgld", "--model", "mlp", "--width", "8", "--dataset", "digits",
                       "--max-train", "50", "--batch-size", "1", "--out", str(out)])  # fmt: skip
    assert rc == 2 and not out.exists() and compiles == []


def test_a_ladder_that_float32_collapses_is_refused() -> None:
    model = bp.BNN(MLP(hidden=(2,), out=1), bp.priors.Normal(1.0), bp.likelihoods.Gaussian(0.5))
    pot = full_batch_potential(model, X, Y)
    with pytest.raises(InputValueError, match="not a ladder in float32"):
        ParallelTempering(pot, betas=[1.0, 1.0 - 1e-9, 0.5])
    with pytest.raises(InputValueError, match="not a ladder in float32"):
        ParallelTempering(pot, betas=[1.0, 0.5, 1e-46])
    kernel = ParallelTempering(pot, betas=[1.0, 0.5, 0.25])
    assert kernel.betas.tolist() == [1.0, 0.5, 0.25]
    with pytest.raises(InputValueError, match="min_beta=1e-45 with num_temperatures=3"):
        cfg.ReferenceHMCConfig(num_temperatures=3, min_beta=1e-45)
    with pytest.raises(InputValueError, match="num_temperatures=50"):
        cfg.ReferenceHMCConfig(num_temperatures=50, min_beta=0.9999999)


# ----------------------------------------------------------------- chain health
def _segment(draws: np.ndarray, step: float = 0.1) -> Segment:
    chains, n = draws.shape[:2]
    return Segment({"w": draws}, {"num_steps": np.full((chains, n), 4)},
                   {"step_size": np.full(chains, step)})  # fmt: skip


def test_short_segments_are_judged_together_a_frozen_chain_is_not_moving() -> None:
    rng = np.random.default_rng(0)

    def part() -> Segment:
        draws = rng.normal(size=(2, 5, 3))
        draws[1] = 0.25  # chain 1 never moves
        return _segment(draws)

    segments = [part() for _ in range(MIN_DRAWS // 5)]
    alone = segment_health(segments[-1])  # 5 draws: not judged
    assert not alone[1].judged
    health = segment_health(segments[-1], segments[:-1])
    assert health[0].moving and not health[1].moving
    assert health[1].problems == (f"frozen: all {MIN_DRAWS} draws are identical",)


@pytest.mark.slow
def test_a_reference_run_with_short_segments_stops_on_frozen_chains() -> None:
    from bnn_ppl.inference import reference_hmc

    x = np.linspace(-1, 1, 16, dtype=np.float32)[:, None]
    model = bp.BNN(MLP(hidden=(3,), out=1), bp.priors.Normal(1.0), bp.likelihoods.Gaussian(0.2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run = reference_hmc(model, (x, np.sin(3 * x[:, 0])), x_test=x[:4], num_chains=2,
                            num_warmup=0, segment_draws=5, max_draws=40, step_size=30.0,
                            rng_key=jax.random.key(0))  # fmt: skip
    assert run.stop_reason == "chains_not_moving"
    assert not any(h["moving"] for h in run.posterior.config["convergence"]["chain_health"])


# ----------------------------------------------------------------- checkpoints
def _fake_run(folder: Path, segments: int = 3) -> None:
    with CheckpointStore(folder, {"digest": "run-a"}) as store:
        store.commit(0, {"leaf_0": np.zeros(3)}, None, [])
        for k in range(1, segments + 1):
            store.commit(k, {"leaf_0": np.full(3, float(k))},
                         {"sample/w": np.full((1, 2), float(k))}, [2] * k)  # fmt: skip


@pytest.mark.parametrize("damaged,kept", [(1, 0), (2, 1), (3, 2)])
def test_damage_to_any_draws_file_keeps_the_intact_prefix_and_says_so(
    tmp_path: Path, damaged: int, kept: int
) -> None:
    _fake_run(tmp_path)
    path = tmp_path / f"draws_{damaged:06d}.npz"
    data = bytearray(path.read_bytes())
    data[-30] ^= 1
    path.write_bytes(bytes(data))
    with CheckpointStore(tmp_path, {"digest": "run-a"}) as store:
        with pytest.warns(CheckpointDamageWarning, match=f"resuming after segment {kept}"):
            rec = store.latest()
        assert rec.segment == kept
        assert [d["sample/w"][0, 0] for d in store.load_draws(rec)] == list(range(1, kept + 1))
        assert store.load_state(rec)["leaf_0"].tolist() == [float(kept)] * 3
    assert any((tmp_path / "aside").rglob(path.name))


def test_when_every_record_is_damaged_the_advice_is_current(tmp_path: Path) -> None:
    _fake_run(tmp_path, segments=1)
    for name in ("state_000000.npz", "draws_000001.npz"):  # every record needs one
        data = bytearray((tmp_path / name).read_bytes())
        data[-30] ^= 1
        (tmp_path / name).write_bytes(bytes(data))
    with CheckpointStore(tmp_path, {"digest": "run-a"}) as store:
        with pytest.raises(CheckpointError, match="Run the same command again to start over"):
            store.latest()
    with CheckpointStore(tmp_path, {"digest": "run-a"}) as store:
        assert store.latest() is None  # as the message said: a rerun starts over


def _read_only(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """Every write under ``folder`` fails with EROFS, as on read-only storage (tests may run
    as root, whom file modes do not stop)."""
    root = str(folder)
    real_open, real_makedirs = os.open, os.makedirs

    def refuse(path) -> None:
        if os.path.abspath(os.fspath(path)).startswith(root):
            raise OSError(errno.EROFS, "Read-only file system", os.fspath(path))

    def fake_open(path, flags, *a, **k):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            refuse(path)
        return real_open(path, flags, *a, **k)

    def fake_makedirs(path, *a, **k):
        if not os.path.isdir(path):
            refuse(path)
        return real_makedirs(path, *a, **k)

    monkeypatch.setattr(os, "open", fake_open)
    monkeypatch.setattr(os, "makedirs", fake_makedirs)
    for name in ("replace", "unlink", "rename"):
        real = getattr(os, name)
        monkeypatch.setattr(os, name, lambda p, *a, _r=real, **k: (refuse(p), _r(p, *a, **k))[1])


def test_a_finished_checkpoint_on_read_only_storage_is_read_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import jax.numpy as jnp
    from numpyro.infer import HMC

    from bnn_ppl.inference.checkpoint.segments import MCMCPlan, run_segments

    plan = MCMCPlan(lambda: HMC(potential_fn=lambda z: 0.5 * jnp.sum(z**2)),
                    num_warmup=5, num_samples=6)  # fmt: skip
    with CheckpointStore(tmp_path, {"digest": "demo"}) as store:
        whole = run_segments(plan, jax.random.key(0), (), jnp.zeros(2), store, 3)
    _read_only(monkeypatch, tmp_path)
    with CheckpointStore(tmp_path, {"digest": "demo"}) as store:
        assert store.read_only
        again = run_segments(plan, jax.random.key(0), (), jnp.zeros(2), store, 3)
        np.testing.assert_array_equal(again.samples["z"], whole.samples["z"])
        with pytest.raises(CheckpointError, match="read-only storage"):
            store.commit(3, {"leaf_0": np.zeros(1)}, {"sample/z": np.zeros((1, 1))}, [3, 3, 3])


_WRITE_ON_TWO_DEVICES = """
import os, sys
os.environ["JAX_PLATFORMS"] = "cpu"
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
import jax, numpy as np
import bnn_ppl as bp
from bnn_ppl import config as cfg
from bnn_ppl.inference import fit
from bnn_ppl.models import MLP
x = np.linspace(-1, 1, 16, dtype=np.float32)[:, None]
model = bp.BNN(MLP(hidden=(3,), out=1), bp.priors.Normal(1.0), bp.likelihoods.Gaussian(0.2))
c = cfg.HMCConfig(num_warmup=4, num_samples=2, trajectory_length=0.2, max_num_steps=4)
fit(model, (x, np.sin(3 * x[:, 0])), c, jax.random.key(0), checkpoint_dir=sys.argv[1],
    devices=jax.devices())  # both (by default 16 rows would use one)
"""


def test_a_resume_on_another_number_of_devices_is_named_as_such(tmp_path: Path) -> None:
    folder = tmp_path / "ckpt"
    done = subprocess.run([sys.executable, "-c", _WRITE_ON_TWO_DEVICES, str(folder)],
                          env=subprocess_env(), capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads((folder / "run.json").read_text())["fingerprint"]["devices"] == 2
    x = np.linspace(-1, 1, 16, dtype=np.float32)[:, None]
    model = bp.BNN(MLP(hidden=(3,), out=1), bp.priors.Normal(1.0), bp.likelihoods.Gaussian(0.2))
    c = cfg.HMCConfig(num_warmup=4, num_samples=2, trajectory_length=0.2, max_num_steps=4)
    with pytest.raises(CheckpointError) as e:  # this process: one CPU device
        fit(model, (x, np.sin(3 * x[:, 0])), c, jax.random.key(0), checkpoint_dir=folder)
    text = str(e.value)
    assert "written by a run on 2 device(s) and this one has 1" in text
    assert "network's computation changed" not in text

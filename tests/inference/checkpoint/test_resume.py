"""Checkpoint and resume (``fit(..., checkpoint_dir=...)``): bit-exact after SIGKILL, verified
records, refusal of another run, one writer, no private NumPyro attribute."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import numpy as np
import numpyro.infer
import pytest
from conftest import sigkill_when
from flax import linen as nn
from flax import nnx

import bnn_ppl as bp
from bnn_ppl import config as cfg
from bnn_ppl.inference import fit
from bnn_ppl.inference.checkpoint.store import (
    CheckpointDamageWarning,
    CheckpointError,
    CheckpointStore,
    record_checksum,
    run_fingerprint,
)
from bnn_ppl.inference.potential.bnn import full_batch_potential
from bnn_ppl.models import MLP, NnxMLP

ROOT = Path(__file__).resolve().parents[3]
NEW_MODULES = ["checkpoint/segments.py", "checkpoint/store.py", "checkpoint/fit.py"]
X = np.linspace(-1, 1, 16, dtype=np.float32)[:, None]
Y = np.sin(3 * X[:, 0])


def _model(network=None):
    return bp.BNN(
        network or MLP(hidden=(3,), out=1), bp.priors.Normal(1.0), bp.likelihoods.Gaussian(0.2)
    )


# ------------------------------------------------------------------------ public API only
# the checkpoint modules, and the HMC/NUTS and SG-MCMC kernels they run (issue 16 item 3)
SGMCMC_MODULES = [f"sgmcmc/{m}.py" for m in ("kernel", "sgld", "sghmc", "sgnht", "atmc")]
PUBLIC_API_MODULES = [
    *NEW_MODULES, "mcmc/kernels.py", "mcmc/run.py", *SGMCMC_MODULES,
    "reference/chains.py", "reference/checkpoint.py",  # (the reference run's checkpoints)
    "../bnn_ppl/_compat.py",  # (the MCMC every segment runs on)
]  # fmt: skip
NAMEDTUPLE_API = {"_replace", "_fields", "_asdict", "_make", "_field_defaults"}


def _numpyro_kernel_private_names():
    """The private names of a NumPyro HMC/NUTS kernel: set by its constructor or on its class
    (our HMC and NUTS subclass them, so ``self._name`` could be one of NumPyro's)."""
    kernel = numpyro.infer.NUTS(potential_fn=lambda z: 0.0)
    names = {*vars(kernel), *dir(numpyro.infer.NUTS), *dir(numpyro.infer.HMC)}
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def test_public_api_modules_use_no_private_numpyro_attribute():
    """No ``x._name`` except on ``self`` (and namedtuple's public ``_replace``/``_fields``...);
    on ``self`` none of NumPyro's kernels' private names; no private name in ``getattr``; nothing
    private imported from numpyro."""
    numpyro_private = _numpyro_kernel_private_names()
    assert {"_init_fn", "_sample_fn", "_algo", "_kinetic_fn"} <= numpyro_private
    for name in PUBLIC_API_MODULES:
        tree = ast.parse((ROOT / "inference" / name).read_text())
        for node in ast.walk(tree):
            where = f"{name}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
                if node.attr.startswith("__") or node.attr in NAMEDTUPLE_API:
                    continue
                on_self = isinstance(node.value, ast.Name) and node.value.id == "self"
                assert on_self, f"{where}: private attribute .{node.attr}"
                assert node.attr not in numpyro_private, f"{where}: NumPyro's .{node.attr}"
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in {
                "getattr", "setattr", "hasattr", "delattr"
            }:  # fmt: skip
                arg = node.args[1] if len(node.args) > 1 else None
                text = arg.value if isinstance(arg, ast.Constant) else ""
                assert not str(text).startswith("_"), f"{where}: {node.func.id}(..., {text!r})"
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("numpyro"):
                bad = [a.name for a in node.names if a.name.startswith("_")]
                bad += [p for p in node.module.split(".") if p.startswith("_")]
                assert not bad, f"{where}: imports private {bad} from numpyro"
            if isinstance(node, ast.Import):
                for a in node.names:
                    private = [p for p in a.name.split(".") if p.startswith("_")]
                    assert not (a.name.startswith("numpyro") and private), f"{where}: {a.name}"


def test_sgmcmc_kernels_continue_from_post_warmup_state_without_a_private_hook():
    """MCMC.run calls kernel.init again when it continues from post_warmup_state (the SG-MCMC
    kernels set none of NumPyro's private attributes): a run continued in two parts equals one
    run, also with a bare potential_fn (no init_params on the second part)."""
    import jax.numpy as jnp
    from numpyro.infer import MCMC

    from bnn_ppl.inference import SGLD

    def run(num_samples):
        kernel = SGLD(potential_fn=lambda z: 0.5 * jnp.sum(z**2), step_size=0.05)
        mcmc = MCMC(kernel, num_warmup=5, num_samples=num_samples, progress_bar=False)
        mcmc.run(jax.random.key(0), init_params=jnp.zeros(2))
        return mcmc

    one, two = run(6), run(3)
    first = two.get_samples()
    two.post_warmup_state = two.last_state
    two.run(two.last_state.rng_key)
    both = np.concatenate([first, two.get_samples()])
    np.testing.assert_array_equal(both, one.get_samples())


def test_an_sgmcmc_state_without_step_statistics_is_refused_naming_the_cause():
    """A checkpoint written before the SG-MCMC state carried its step statistics has fewer
    state arrays: resuming it is refused with the reason and what to do, not a bare count."""
    import jax.numpy as jnp

    from bnn_ppl.inference import SGLD
    from bnn_ppl.inference.checkpoint.segments import state_arrays, state_from_arrays

    kernel = SGLD(potential_fn=lambda z: 0.5 * jnp.sum(z**2), step_size=0.05)
    state = kernel.init(jax.random.key(0), 5, jnp.zeros(2), (), {})
    old = state_arrays(state._replace(stats=None))  # the layout written before
    with pytest.raises(CheckpointError, match="another version of the kernel.*new folder"):
        state_from_arrays(old, state, "runs/old/state_001.npz")
    again = state_from_arrays(state_arrays(state), state, "runs/new/state_001.npz")
    assert int(again.stats.size) == 2 and int(again.stats.steps) == 0


# ------------------------------------------------------------------------ the store
def _fake_run(folder, segments=3):
    """A store with warmup and ``segments`` committed segments of 2 draws (no sampler)."""
    store = CheckpointStore(folder, {"digest": "run-a"})
    with store:
        store.commit(0, {"leaf_0": np.zeros(3)}, None, [])
        for k in range(1, segments + 1):
            draws = {"sample/w": np.full((1, 2), float(k))}
            store.commit(k, {"leaf_0": np.full(3, float(k))}, draws, [2] * k)
    return store


def _snapshot(folder):
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in Path(folder).rglob("*")
        if p.is_file() and p.name != "lock"
    }


def _assert_nothing_lost(before, folder):
    """Every file's bytes are still somewhere in the folder (in place or moved aside)."""
    after = _snapshot(folder)
    held = set(after.values())
    for name, data in before.items():
        assert data in held, f"{name} was overwritten or deleted"


def test_intact_store_resumes_from_its_newest_record(tmp_path):
    _fake_run(tmp_path)
    with CheckpointStore(tmp_path, {"digest": "run-a"}) as store:
        rec = store.latest()
        assert (rec.segment, rec.draws_done) == (3, 6)
        assert [d["sample/w"][0, 0] for d in store.load_draws(rec)] == [1.0, 2.0, 3.0]
        assert store.load_state(rec)["leaf_0"].tolist() == [3.0] * 3


def test_every_single_bit_flip_of_the_newest_record_falls_back_and_loses_nothing(tmp_path):
    _fake_run(tmp_path / "run")
    record = (tmp_path / "run" / "record_000003.json").read_bytes()
    rng = np.random.default_rng(0)
    for trial, bit in enumerate(rng.choice(len(record) * 8, size=120, replace=False)):
        folder = tmp_path / f"flip{trial}"
        shutil.copytree(tmp_path / "run", folder)
        flipped = bytearray(record)
        flipped[bit // 8] ^= 1 << (bit % 8)
        (folder / "record_000003.json").write_bytes(bytes(flipped))
        before = _snapshot(folder)
        with CheckpointStore(folder, {"digest": "run-a"}) as store:
            with pytest.warns(CheckpointDamageWarning, match="resuming after segment 2"):
                rec = store.latest()
            assert rec.segment == 2, f"bit {bit}"
            assert [d["sample/w"][0, 0] for d in store.load_draws(rec)] == [1.0, 2.0]
            # the resume's next commit never overwrites the moved-aside segment 3
            store.commit(3, {"leaf_0": np.zeros(3)}, {"sample/w": np.zeros((1, 2))}, [2, 2, 2])
        _assert_nothing_lost(before, folder)


@pytest.mark.parametrize(
    "edit",
    [
        "earlier_segment",
        "drop_a_segment",
        "resigned_drop",
        "malformed_entry",
        "damaged_draws",
        "truncated_state",
        "missing_draws",
    ],
)
def test_a_tampered_or_damaged_newest_checkpoint_falls_back(tmp_path, edit):
    _fake_run(tmp_path)
    path = tmp_path / "record_000003.json"
    rec = json.loads(path.read_text())
    if edit == "earlier_segment":
        rec["segment"] = 1
        path.write_text(json.dumps(rec))
    elif edit == "drop_a_segment":
        del rec["files"]["draws_000002.npz"]
        path.write_text(json.dumps(rec))
    elif edit == "resigned_drop":  # even with a valid checksum, a short record is refused
        del rec["files"]["draws_000002.npz"]
        rec["draws_per_segment"] = [2, 2]
        rec["checksum"] = record_checksum(rec)
        path.write_text(json.dumps(rec))
    elif edit == "malformed_entry":  # a dict, not a SHA-256 string, even re-signed
        rec["files"]["draws_000002.npz"] = {"sha256": rec["files"]["draws_000002.npz"]}
        rec["checksum"] = record_checksum(rec)
        path.write_text(json.dumps(rec))
    elif edit == "truncated_state":
        state = tmp_path / "state_000003.npz"
        state.write_bytes(state.read_bytes()[:100])
    elif edit == "damaged_draws":
        data = bytearray((tmp_path / "draws_000003.npz").read_bytes())
        data[-30] ^= 4
        (tmp_path / "draws_000003.npz").write_bytes(bytes(data))
    else:
        os.unlink(tmp_path / "draws_000003.npz")
    before = _snapshot(tmp_path)
    with CheckpointStore(tmp_path, {"digest": "run-a"}) as store:
        with pytest.warns(CheckpointDamageWarning, match="moved to"):
            assert store.latest().segment == 2
    _assert_nothing_lost(before, tmp_path)
    assert not (tmp_path / "record_000003.json").exists()
    assert any((tmp_path / "aside").rglob("record_000003.json"))


def test_a_crafted_object_array_is_never_unpickled(tmp_path):
    """A re-signed record naming a state file that holds a pickled object: the SHA-256 matches,
    only the format protects us."""
    _fake_run(tmp_path)
    state = tmp_path / "state_000003.npz"
    np.savez(state, leaf_0=np.array([{"payload": 1}], dtype=object))
    path = tmp_path / "record_000003.json"
    rec = json.loads(path.read_text())
    rec["files"]["state_000003.npz"] = hashlib.sha256(state.read_bytes()).hexdigest()
    rec["checksum"] = record_checksum(rec)
    path.write_text(json.dumps(rec))
    with CheckpointStore(tmp_path, {"digest": "run-a"}) as store:
        with pytest.raises(CheckpointError, match="Python objects"):
            store.load_state(store.latest())


def test_a_bug_while_reading_is_not_taken_for_damage(tmp_path, monkeypatch):
    """Only damage moves files aside; a bug (here in hashing) propagates and moves nothing."""
    _fake_run(tmp_path)
    before = _snapshot(tmp_path)
    monkeypatch.setattr("bnn_ppl.io.sha256_file", lambda path: None + 1)
    with CheckpointStore(tmp_path, {"digest": "run-a"}) as store:
        with pytest.raises(TypeError, match="unsupported operand"):
            store.latest()
    assert _snapshot(tmp_path) == before


def test_damage_shared_by_every_sampling_record_falls_back_to_warmup(tmp_path):
    _fake_run(tmp_path)
    data = bytearray((tmp_path / "draws_000001.npz").read_bytes())
    data[-30] ^= 1
    (tmp_path / "draws_000001.npz").write_bytes(bytes(data))
    before = _snapshot(tmp_path)
    with CheckpointStore(tmp_path, {"digest": "run-a"}) as store:
        with pytest.warns(UserWarning, match="resuming after segment 0"):
            assert store.latest().segment == 0
    _assert_nothing_lost(before, tmp_path)


def test_another_runs_folder_and_a_damaged_run_file_are_refused(tmp_path):
    _fake_run(tmp_path)
    with pytest.raises(CheckpointError, match="another run"):
        CheckpointStore(tmp_path, {"digest": "run-b", "fields": {}}).__enter__()
    (tmp_path / "run.json").write_text(
        (tmp_path / "run.json").read_text().replace("run-a", "run-c")
    )
    with pytest.raises(CheckpointError, match="run.json is damaged"):
        CheckpointStore(tmp_path, {"digest": "run-a"}).__enter__()


def test_one_writer_per_folder_and_temporaries_cleaned(tmp_path):
    (tmp_path / ".run.json.0123abcd.tmp").write_text("{")  # a kill during the first write
    store = CheckpointStore(tmp_path, {"digest": "run-a"})
    with store:
        assert not list(tmp_path.glob("*.tmp")) and (tmp_path / "run.json").exists()
        with pytest.raises(CheckpointError, match="in use by another process"):
            CheckpointStore(tmp_path, {"digest": "run-a"}).__enter__()
    with CheckpointStore(tmp_path, {"digest": "run-a"}) as again:  # released on exit
        assert again.latest() is None


# ------------------------------------------------------------------------ the fingerprint
class _Act(nn.Module):
    act: object

    @nn.compact
    def __call__(self, x):
        return nn.Dense(1)(self.act(nn.Dense(3)(x)))


def _network_fields(network):
    model = _model(network)
    pot = full_batch_potential(model, X, Y)
    init = pot.init_params(jax.random.key(1))
    fp = run_fingerprint({"method": "hmc"}, X, Y, jax.random.key(0), pot.potential_fn, init)
    return fp["fields"]


def test_fingerprint_sees_what_the_network_computes():
    relu = _network_fields(NnxMLP(1, hidden=(3,), out=1, rngs=nnx.Rngs(0)))
    tanh = _network_fields(NnxMLP(1, hidden=(3,), out=1, activation=nnx.tanh, rngs=nnx.Rngs(0)))
    assert relu["model.param_shapes"] == tanh["model.param_shapes"]
    assert relu["model.network"] != tanh["model.network"]
    twice = _network_fields(_Act(act=lambda v: 2.0 * v))
    thrice = _network_fields(_Act(act=lambda v: 3.0 * v))
    assert twice["model.network"] != thrice["model.network"]
    assert twice == _network_fields(_Act(act=lambda v: 2.0 * v))  # same program, same digest


_FINGERPRINT_SCRIPT = textwrap.dedent("""
    import json, sys
    import jax, numpy as np
    from flax import linen as nn, nnx
    import bnn_ppl as bp
    from bnn_ppl.inference.checkpoint.store import run_fingerprint
    from bnn_ppl.inference.potential.bnn import full_batch_potential

    def networks(act):  # classes defined inside a function: '<locals>' in their qualnames
        class Net(nn.Module):
            @nn.compact
            def __call__(self, x):
                return nn.Dense(1)(act(nn.Dense(3)(x)))

        class NnxNet(nnx.Module):
            def __init__(self, rngs):
                self.a, self.b = nnx.Linear(1, 3, rngs=rngs), nnx.Linear(3, 1, rngs=rngs)

            def __call__(self, x):
                return self.b(act(self.a(x)))

        return {"linen": Net(), "nnx": NnxNet(nnx.Rngs(0))}

    x = np.linspace(-1, 1, 16, dtype=np.float32)[:, None]
    out = {}
    for act in ("tanh", "relu"):
        for kind, net in networks(getattr(jax.nn, act)).items():
            model = bp.BNN(net, bp.priors.Normal(1.0), bp.likelihoods.Gaussian(0.2))
            pot = full_batch_potential(model, x, np.sin(3 * x[:, 0]))
            fp = run_fingerprint({"method": "hmc"}, x, x, jax.random.key(0), pot.potential_fn,
                                 pot.init_params(jax.random.key(1)))
            out[f"{kind} {act}"] = fp["digest"]
    print(json.dumps(out))
""")


def test_a_network_defined_in_a_function_has_one_fingerprint_in_every_process():
    """Resuming from another process (a new notebook kernel) finds the same fingerprint for
    the same network code, classes defined inside a function included, and another one for a
    different activation."""
    from conftest import subprocess_env

    digests = []
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-c", _FINGERPRINT_SCRIPT], capture_output=True,
                              text=True, env=subprocess_env(), timeout=300)  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        digests.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    assert digests[0] == digests[1]
    assert len(set(digests[0].values())) == 4  # linen/nnx x tanh/relu: four programs


def test_fit_refuses_a_changed_configuration_naming_the_field(tmp_path):
    c = cfg.HMCConfig(num_warmup=4, num_samples=1, trajectory_length=0.2, max_num_steps=4)
    fit(_model(), (X, Y), c, jax.random.key(0), checkpoint_dir=tmp_path)
    other = cfg.HMCConfig(num_warmup=4, num_samples=3, trajectory_length=0.2, max_num_steps=4)
    with pytest.raises(CheckpointError, match="config.num_samples is 1 there and 3 now"):
        fit(_model(), (X, Y), other, jax.random.key(0), checkpoint_dir=tmp_path)
    tanh = _model(MLP(hidden=(3,), out=1, activation=nn.tanh))
    with pytest.raises(CheckpointError, match="model.network differs"):
        fit(tanh, (X, Y), c, jax.random.key(0), checkpoint_dir=tmp_path)
    with pytest.raises(CheckpointError, match="seed is"):
        fit(_model(), (X, Y), c, jax.random.key(1), checkpoint_dir=tmp_path)
    with pytest.raises(ValueError, match="checkpoint_dir applies to MCMC"):
        fit(
            _model(), (X, Y), cfg.MAPConfig(num_steps=2), jax.random.key(0), checkpoint_dir=tmp_path
        )


class _Killed(Exception):
    pass


def _killed_after_one_segment(monkeypatch, c, folder) -> None:
    """A checkpointed fit of ``c`` in ``folder`` that dies after its warmup and one segment of
    2 draws are committed (at the third commit)."""
    commit, calls = CheckpointStore.commit, []

    def dies_at_the_third_commit(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise _Killed
        return commit(self, *args, **kwargs)

    monkeypatch.setattr(CheckpointStore, "commit", dies_at_the_third_commit)
    with pytest.raises(_Killed):
        fit(_model(), (X, Y), c, jax.random.key(0), checkpoint_dir=folder, checkpoint_every=2)
    monkeypatch.setattr(CheckpointStore, "commit", commit)


def test_a_resume_takes_the_chunk_the_memory_rule_chose_whatever_memory_is_free(
    tmp_path, monkeypatch
):
    # chunk_size="auto" on the CPU: no free-memory figure, so 1024 rows (all 16 here). The run
    # is killed after its first segment; on resume the device has next to no free memory (a
    # new potential would take 1-row chunks: another program), yet the run continues with its
    # 16-row chunk and ends with the uninterrupted run's draws, bit for bit
    c = cfg.HMCConfig(num_warmup=4, num_samples=6, trajectory_length=0.2, max_num_steps=8,
                      chunk_size="auto")  # fmt: skip
    whole = fit(_model(), (X, Y), c, jax.random.key(0))
    _killed_after_one_segment(monkeypatch, c, tmp_path)
    saved = json.loads((tmp_path / "run.json").read_text())
    assert saved["fingerprint"]["fields"]["potential.memory_chunk"] == 16
    monkeypatch.setattr("bnn_ppl.inference.potential.bnn.free_device_bytes", lambda devices: 1)
    assert full_batch_potential(_model(), X, Y, chunk_size="auto").chunk_size == 1
    resumed = fit(_model(), (X, Y), c, jax.random.key(0), checkpoint_dir=tmp_path,
                  checkpoint_every=2)  # fmt: skip
    assert resumed.config["resumed_after_segment"] == 1
    for name, value in whole.samples.items():
        np.testing.assert_array_equal(resumed.samples[name], value)


@pytest.mark.parametrize("written_by", ["this version", "a version with a fixed CPU chunk"])
def test_a_cpu_run_resumes_with_the_chunk_it_was_written_with(tmp_path, monkeypatch, written_by):
    """The CPU rule's chunk is recorded and taken again on resume, whatever the rule would
    choose now; a folder that recorded none (written when the CPU default was a fixed
    ``EARLIER_CPU_CHUNK``, here made 4 rows) resumes with that fixed chunk. Both end with the
    uninterrupted run's draws, bit for bit."""
    from bnn_ppl.inference.checkpoint import store
    from bnn_ppl.inference.potential import bnn as chunking

    c = cfg.HMCConfig(num_warmup=4, num_samples=6, trajectory_length=0.2, max_num_steps=8)
    monkeypatch.setattr(chunking, "cpu_chunk", lambda rows, per_row, chains=1: min(rows, 4))
    assert full_batch_potential(_model(), X, Y).num_chunks == 4
    whole = fit(_model(), (X, Y), c, jax.random.key(0))
    if written_by != "this version":
        monkeypatch.setattr(store, "RECORDED_RULES", chunking.MEMORY_RULES)  # recorded nothing
        monkeypatch.setattr(store, "EARLIER_CPU_CHUNK", 4)  # ... and its fixed chunk was 4
    _killed_after_one_segment(monkeypatch, c, tmp_path)
    fields = json.loads((tmp_path / "run.json").read_text())["fingerprint"]["fields"]
    assert fields.get("potential.memory_chunk") == (4 if written_by == "this version" else None)
    # the rule now takes every row in one chunk (another program, other float32 sums)
    monkeypatch.setattr(chunking, "cpu_chunk", lambda rows, per_row, chains=1: rows)
    monkeypatch.setattr(store, "RECORDED_RULES", chunking.RECORDED_RULES)
    assert full_batch_potential(_model(), X, Y).num_chunks == 1
    resumed = fit(_model(), (X, Y), c, jax.random.key(0), checkpoint_dir=tmp_path,
                  checkpoint_every=2)  # fmt: skip
    assert resumed.config["resumed_after_segment"] == 1
    for name, value in whole.samples.items():
        np.testing.assert_array_equal(resumed.samples[name], value)


# ------------------------------------------------------------------------ SIGKILL, bit-exact
CHILD = textwrap.dedent(
    """
    import os, sys
    os.environ["JAX_PLATFORMS"] = "cpu"
    import jax, numpy as np
    jax.config.update("jax_compilation_cache_dir", sys.argv[4])  # as conftest.py
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
    import bnn_ppl as bp
    from bnn_ppl import config as cfg
    from bnn_ppl.inference import fit
    from bnn_ppl.models import MLP
    x = np.linspace(-1, 1, 16, dtype=np.float32)[:, None]
    model = bp.BNN(MLP(hidden=(3,), out=1), bp.priors.Normal(1.0), bp.likelihoods.Gaussian(0.2))
    config = cfg.from_dict(eval(sys.argv[1]))
    post = fit(model, (x, np.sin(3 * x[:, 0])), config, jax.random.key(0),
               checkpoint_dir=sys.argv[2], checkpoint_every=1)
    np.savez(sys.argv[3], **post.samples)
    """
)

CONFIGS = {
    "hmc": cfg.HMCConfig(num_warmup=10, num_samples=4, num_chains=2, trajectory_length=0.3),
    "nuts": cfg.NUTSConfig(num_warmup=10, num_samples=6, max_tree_depth=3),
    "atmc": cfg.ATMCConfig(
        num_warmup=1, num_samples=6, num_chains=2, cycle_length=4, batch_size=8, step_size=1e-3
    ),
    # the automatic burn-in (43 cycles) extended by three windows of 2 cycles (to 49)
    "sghmc-burn-in": cfg.SGHMCConfig(cycle_length=20, num_samples=2, batch_size=8, map_steps=1),
}


def _child(tmp_path, config, out):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    folder, cache = str(tmp_path / "ckpt"), str(ROOT / ".jax_cache")
    args = [sys.executable, str(script), repr(config.to_dict()), folder, str(out), cache]
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _kill_after_segment(tmp_path, config, segment):
    """SIGKILL the child once segment ``segment``'s record exists (-1: once ``run.json`` does,
    i.e. during warmup)."""
    proc = _child(tmp_path, config, tmp_path / "never.npz")
    name = "run.json" if segment < 0 else f"record_{segment:06d}.json"
    sigkill_when(proc, tmp_path / "ckpt" / name)
    assert not (tmp_path / "never.npz").exists()


def _resumed_equals_uninterrupted(tmp_path, method, segment=2):
    config = CONFIGS[method]
    _kill_after_segment(tmp_path, config, segment)
    if segment < 0:  # killed in warmup: nothing committed, warmup is redone
        assert not (tmp_path / "ckpt" / "record_000000.json").exists()
        _kill_after_segment(tmp_path, config, 1)
    first = (tmp_path / "ckpt" / "record_000001.json").stat()
    proc = _child(tmp_path, config, tmp_path / "resumed.npz")
    assert proc.wait(timeout=600) == 0, proc.stderr.read().decode()[-2000:]
    again = (tmp_path / "ckpt" / "record_000001.json").stat()
    assert (first.st_ino, first.st_mtime_ns) == (again.st_ino, again.st_mtime_ns)  # resumed
    assert not list((tmp_path / "ckpt").glob(".*.tmp"))
    resumed = np.load(tmp_path / "resumed.npz")
    # the uninterrupted run: one MCMC.run, no checkpoints (segmenting changes nothing)
    post = fit(_model(), (X, Y), config, jax.random.key(0))
    assert set(resumed.files) == set(post.samples)
    for name, value in post.samples.items():
        assert resumed[name].shape == value.shape
        np.testing.assert_array_equal(resumed[name], value, err_msg=name)
    # a finished run is read back: the same draws, and no file changes
    before = _snapshot(tmp_path / "ckpt")
    again = fit(_model(), (X, Y), config, jax.random.key(0), checkpoint_dir=tmp_path / "ckpt")
    assert _snapshot(tmp_path / "ckpt") == before
    for name, value in post.samples.items():
        np.testing.assert_array_equal(again.samples[name], value, err_msg=name)


@pytest.mark.slow  # ~50 s; the default suite kills an HMC bnn-ppl run (through fit) in test_cli
@pytest.mark.timeout(600)
def test_sigkill_resume_is_bit_exact_hmc(tmp_path):
    _resumed_equals_uninterrupted(tmp_path, "hmc")


@pytest.mark.slow
def test_a_kill_during_warmup_redoes_warmup_and_stays_bit_exact(tmp_path):
    _resumed_equals_uninterrupted(tmp_path, "hmc", segment=-1)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["nuts", "atmc"])
def test_sigkill_resume_is_bit_exact(tmp_path, method):
    _resumed_equals_uninterrupted(tmp_path, method)


@pytest.mark.slow
def test_sigkill_in_a_burn_in_extension_resumes_bit_exact(tmp_path):
    """Killed once segment 3 is committed (in the windows that extend the automatic burn-in,
    43 -> 49 cycles), the resumed run's draws and progress.jsonl (but wall times) are an
    uninterrupted checkpointed run's, each in its own process; the in-memory fit in this one
    extends the burn-in as much, to the same draws (to float32 rounding: another process)."""
    from bnn_ppl.inference.sgmcmc.recipe import burn_in_cycles

    config = CONFIGS["sghmc-burn-in"]
    _kill_after_segment(tmp_path, config, 3)
    first = (tmp_path / "ckpt" / "record_000003.json").stat()
    proc = _child(tmp_path, config, tmp_path / "resumed.npz")
    assert proc.wait(timeout=600) == 0, proc.stderr.read().decode()[-2000:]
    again = (tmp_path / "ckpt" / "record_000003.json").stat()
    assert (first.st_ino, first.st_mtime_ns) == (again.st_ino, again.st_mtime_ns)  # resumed
    whole = tmp_path / "whole"
    whole.mkdir()
    proc = _child(whole, config, whole / "whole.npz")
    assert proc.wait(timeout=600) == 0, proc.stderr.read().decode()[-2000:]
    resumed, uninterrupted = np.load(tmp_path / "resumed.npz"), np.load(whole / "whole.npz")
    assert set(resumed.files) == set(uninterrupted.files)
    for name in resumed.files:
        np.testing.assert_array_equal(resumed[name], uninterrupted[name], err_msg=name)
    unwall = lambda lines: [{**p, "wall_seconds": 0} for p in lines]  # noqa: E731
    lines = _progress(tmp_path / "ckpt")
    assert unwall(lines) == unwall(_progress(whole / "ckpt"))
    assert [p.get("phase") for p in lines[1:]] == ["burn-in"] * 6 + [None] * 2
    post = fit(_model(), (X, Y), config, jax.random.key(0))
    rule = burn_in_cycles(post.config["relaxations_per_cycle"])
    assert post.config["num_warmup_used"] == rule + 6, (rule, post.config["num_warmup_used"])
    for name, value in post.samples.items():
        np.testing.assert_allclose(resumed[name], value, rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"checkpoint_every": 5}, ValueError, "checkpoint_every needs a checkpoint_dir"),
        ({"checkpoint_dir": 3}, TypeError, "checkpoint_dir must be a folder path"),
        ({"checkpoint_dir": "DIR", "checkpoint_every": 0}, ValueError, "checkpoint_every"),
        ({"checkpoint_dir": "DIR", "checkpoint_every": 1.5}, TypeError, "checkpoint_every"),
        ({"checkpoint_dir": "FILE"}, ValueError, "is not a folder"),
    ],
)
def test_bad_checkpoint_arguments_are_refused_before_anything_runs(tmp_path, kwargs, error, match):
    (tmp_path / "file").write_text("")
    paths = {"DIR": str(tmp_path / "ckpt"), "FILE": str(tmp_path / "file")}
    kwargs = {k: paths.get(v, v) if isinstance(v, str) else v for k, v in kwargs.items()}
    with pytest.raises(error, match=match):
        fit(_model(), (X, Y), cfg.HMCConfig(), jax.random.key(0), **kwargs)
    assert not (tmp_path / "ckpt").exists()


@pytest.mark.slow
@pytest.mark.parametrize("config", [cfg.SGLDConfig, cfg.SGHMCConfig, cfg.SGNHTConfig])
def test_segments_equal_one_run_for_every_sgmcmc_kernel(tmp_path, config):
    c = config(num_warmup=1, num_samples=4, cycle_length=3, batch_size=8, step_size=1e-3)
    one = fit(_model(), (X, Y), c, jax.random.key(0))
    seg = fit(_model(), (X, Y), c, jax.random.key(0), checkpoint_dir=tmp_path, checkpoint_every=1)
    for name, value in one.samples.items():
        np.testing.assert_array_equal(seg.samples[name], value, err_msg=name)


@pytest.mark.slow  # ~25 s of CPU
def test_segments_with_chains_and_thinning_equal_one_run(tmp_path):
    """The iterations NumPyro's thinning skips come first, as in one MCMC.run."""
    c = cfg.HMCConfig(num_warmup=5, num_samples=7, num_chains=2, thinning=2, trajectory_length=0.3)
    one = fit(_model(), (X, Y), c, jax.random.key(0))
    seg = fit(_model(), (X, Y), c, jax.random.key(0), checkpoint_dir=tmp_path, checkpoint_every=1)
    assert seg.samples["Dense_0.bias"].shape[:2] == (2, 3)
    assert seg.config["segments"] == 3
    for name, value in one.samples.items():
        np.testing.assert_array_equal(seg.samples[name], value, err_msg=name)
    for name, value in one.sample_stats.items():
        np.testing.assert_array_equal(seg.sample_stats[name], value, err_msg=name)


# ------------------------------------------------------------------------ progress.jsonl
def _progress(folder):
    return [json.loads(line) for line in (Path(folder) / "progress.jsonl").read_text().splitlines()]


def test_progress_log_is_the_running_bma_and_a_resume_rebuilds_it(tmp_path, monkeypatch):
    """progress.jsonl: warmup's line, then a line per draw (progress_every=1, two segments),
    equal to running_metrics of the finished Posterior; a run resumed after segment 1 (killed
    before its lines were written) writes the same file but for the resumed segment's wall
    time; a finished rerun changes nothing, or, with another progress_every, the spacing.
    Each segment's draws are predicted at x_test once, and the Posterior reuses those
    predictions: bit for bit those of one prediction call over all draws (what it held before)."""
    from bnn_ppl import predictive as pointwise
    from bnn_ppl.runs.progress import running_metrics

    c = cfg.HMCConfig(num_warmup=5, num_samples=4, trajectory_length=0.3)
    data, every = (X, Y, X[:5], Y[:5]), {"checkpoint_every": 2, "progress_every": 1}
    calls, predict = [], pointwise.chain_predictions

    def counted(model, samples, x, **kwargs):
        calls.append(next(iter(samples.values())).shape[:2])
        return predict(model, samples, x, **kwargs)

    monkeypatch.setattr(pointwise, "chain_predictions", counted)
    post = fit(_model(), data, c, jax.random.key(0), checkpoint_dir=tmp_path / "a", **every)
    assert calls == [(1, 2), (1, 2)]  # one call per segment, none for the Posterior
    monkeypatch.undo()
    # predicts all draws at once
    again = pointwise.attach_data(post.replace(predictions={}), _model(), *data)
    for group in ("predictions", "log_likelihood", "observed"):
        want, got = getattr(again, group), getattr(post, group)
        assert set(got) == set(want), group
        for name, value in want.items():
            np.testing.assert_array_equal(got[name], value, err_msg=f"{group}.{name}")
    warm, *lines = _progress(tmp_path / "a")
    assert warm["phase"] == "warmup" and warm["iterations"] == 5
    assert warm["wall_seconds"] > 0 and warm["grad_evals"] > 0 and warm["step_size"] > 0
    assert [(p["segment"], p["draws"]) for p in lines] == [(1, 1), (1, 2), (2, 3), (2, 4)]
    assert all(p["grad_evals"] > 0 for p in lines)
    assert [p["wall_seconds"] is None for p in lines] == [True, False, True, False]
    for line, point in zip(lines, running_metrics(post, every=1), strict=True):
        assert line.keys() == point.keys() | {"segment", "wall_seconds"}
        for k, v in point.items():
            assert line[k] == pytest.approx(v, rel=1e-6), k
    # killed after committing segment 1, before its progress line: segment 2's files go
    folder = Path(shutil.copytree(tmp_path / "a", tmp_path / "b"))
    for name in ("record_000002.json", "draws_000002.npz", "state_000002.npz"):
        os.unlink(folder / name)
    (folder / "progress.jsonl").write_text("")
    again = fit(_model(), data, c, jax.random.key(0), checkpoint_dir=folder, **every)
    assert again.config["resumed_after_segment"] == 1
    resumed = _progress(folder)
    # rebuilt from the committed warmup and segment, wall times included
    assert resumed[:3] == [warm, *lines[:2]]
    assert [{**p, "wall_seconds": 0} for p in resumed[3:]] == [
        {**p, "wall_seconds": 0} for p in lines[2:]
    ]
    before = _snapshot(folder)
    fit(_model(), data, c, jax.random.key(0), checkpoint_dir=folder, **every)
    assert _snapshot(folder) == before
    fit(_model(), data, c, jax.random.key(0), checkpoint_dir=folder, checkpoint_every=2)
    # one line per segment; the metrics of a BMA summed in another order: to float64 rounding
    assert _progress(folder) == [
        {k: pytest.approx(v, rel=1e-12) if isinstance(v, float) else v for k, v in p.items()}
        for p in (resumed[0], resumed[2], resumed[4])
    ]


# ------------------------------------------------ SG-MCMC: the automatic burn-in, extended
def _settling_sghmc():
    """SGHMC from a MAP of 3 Adam steps: the relaxation rule's burn-in (23 cycles) ends while
    the chain still descends, and the drift rule extends it by two windows of 2 cycles."""
    d = bp.data.load("diabetes")
    model = bp.BNN(MLP(hidden=(16,), out=1), bp.priors.Normal(1.0), bp.likelihoods.Gaussian(0.5))
    c = cfg.SGHMCConfig(cycle_length=40, num_samples=2, batch_size=64, map_steps=3)
    return model, d, c


@pytest.fixture(scope="module")
def extended(tmp_path_factory):
    """The in-memory fit and the checkpointed one (a segment per cycle) of the same run."""
    model, d, c = _settling_sghmc()
    one = fit(model, d, c, jax.random.key(0))
    folder = tmp_path_factory.mktemp("extended") / "whole"
    seg = fit(model, d, c, jax.random.key(0), checkpoint_dir=folder, checkpoint_every=1)
    return one, seg, folder


def _assert_same_fit(a, b):
    assert a.config["num_warmup_used"] == b.config["num_warmup_used"]
    assert set(a.samples) == set(b.samples)
    for name, value in a.samples.items():
        np.testing.assert_array_equal(b.samples[name], value, err_msg=name)
    assert a.config["accuracy"] == b.config["accuracy"]


@pytest.mark.xdist_group("sgmcmc_burn_in")
def test_a_checkpointed_fit_extends_the_automatic_burn_in_as_the_in_memory_fit(extended):
    """The same burn-in (the relaxation rule's, extended while the draws drift), the same
    draws bit for bit, the same accuracy record and test predictions; progress.jsonl marks the
    windows that became burn-in, and its sampling lines count the kept draws only. A rerun of
    the finished folder reads it back (the last window's end is decided again: no new run)."""
    one, seg, folder = extended
    from bnn_ppl.inference.sgmcmc.recipe import burn_in_cycles

    rule = burn_in_cycles(one.config["relaxations_per_cycle"])
    used = one.config["num_warmup_used"]
    assert used == rule + 4, (rule, used)  # two windows of num_samples=2 cycles
    _assert_same_fit(one, seg)
    assert seg.config["segments"] == 6  # three windows of two one-cycle segments
    for name, value in one.predictions.items():
        np.testing.assert_allclose(seg.predictions[name], value, rtol=1e-6, err_msg=name)
    warm, *lines = _progress(folder)
    assert warm["phase"] == "warmup" and warm["iterations"] == rule * 40
    assert [(p["segment"], p.get("phase"), p["draws"]) for p in lines] == [
        (1, "burn-in", 1), (2, "burn-in", 2), (3, "burn-in", 1), (4, "burn-in", 2),
        (5, None, 1), (6, None, 2),
    ]  # fmt: skip
    before = _snapshot(folder)
    model, d, c = _settling_sghmc()
    again = fit(model, d, c, jax.random.key(0), checkpoint_dir=folder, checkpoint_every=1)
    assert _snapshot(folder) == before
    assert again.config["resumed_after_segment"] == 6
    _assert_same_fit(one, again)


@pytest.mark.xdist_group("sgmcmc_burn_in")
@pytest.mark.parametrize("segment", [3, 4])
def test_a_resume_in_a_burn_in_extension_continues_it(extended, tmp_path, segment):
    """Killed after segment 3 (the first of the first extension window) or 4 (its last: the
    decision to extend again is taken by the resume): the resumed fit equals the
    uninterrupted one, and so does its progress.jsonl but for the new segments' wall times."""
    one, _, whole = extended
    folder = Path(shutil.copytree(whole, tmp_path / "ckpt"))
    # what a kill while committing the next segment leaves: its state and draws, no record
    for k in range(segment + 1, 7):
        os.unlink(folder / f"record_{k:06d}.json")
        if k > segment + 1:
            os.unlink(folder / f"state_{k:06d}.npz")
            os.unlink(folder / f"draws_{k:06d}.npz")
    model, d, c = _settling_sghmc()
    resumed = fit(model, d, c, jax.random.key(0), checkpoint_dir=folder, checkpoint_every=1)
    assert resumed.config["resumed_after_segment"] == segment
    assert resumed.config["segments"] == 6
    _assert_same_fit(one, resumed)
    unwall = lambda lines: [{**p, "wall_seconds": 0} for p in lines]  # noqa: E731
    assert unwall(_progress(folder)) == unwall(_progress(whole))


@pytest.mark.xdist_group("sgmcmc_burn_in")
def test_the_advice_names_the_extended_burn_in_in_memory_and_checkpointed(
    extended, tmp_path, monkeypatch
):
    """With the burn-in's cap at 25 cycles the run above is extended once (23 -> 25) and stops
    there, its draws still drifting: both fits warn the same, naming the 25 cycles run."""
    from bnn_ppl.inference.sgmcmc import recipe
    from bnn_ppl.inference.sgmcmc.accuracy import SGMCMCAccuracyWarning

    monkeypatch.setattr(recipe, "BURN_IN_CAP", 25)
    model, d, c = _settling_sghmc()
    with pytest.warns(SGMCMCAccuracyWarning, match=r"\(this run: 25\)"):
        one = fit(model, d, c, jax.random.key(0))
    with pytest.warns(SGMCMCAccuracyWarning, match=r"\(this run: 25\)"):
        seg = fit(model, d, c, jax.random.key(0), checkpoint_dir=tmp_path, checkpoint_every=1)
    assert one.config["num_warmup_used"] == 25
    _assert_same_fit(one, seg)
    problems = one.config["accuracy"]["problems"]
    assert problems and all("(this run: 25)" in p for p in problems if "num_warmup=" in p)


@pytest.mark.slow  # ~20 s of CPU (two chains: two more compilations of both fits)
def test_an_extended_burn_in_with_chains_is_the_same_checkpointed(tmp_path, monkeypatch):
    """Two vectorized chains (each window's key split over them): a burn-in of 2 cycles (the
    rule's, shortened here) from a MAP of 3 Adam steps is extended to 4 in both fits, to the
    same draws."""
    from bnn_ppl.inference.sgmcmc import recipe

    monkeypatch.setattr(recipe, "burn_in_cycles", lambda per_cycle: 2)
    c = cfg.SGHMCConfig(cycle_length=10, num_samples=2, batch_size=8, map_steps=3, num_chains=2)
    one = fit(_model(), (X, Y), c, jax.random.key(0))
    seg = fit(_model(), (X, Y), c, jax.random.key(0), checkpoint_dir=tmp_path, checkpoint_every=1)
    assert one.config["num_warmup_used"] == 4
    assert seg.samples["Dense_0.kernel"].shape[:2] == (2, 2)
    _assert_same_fit(one, seg)

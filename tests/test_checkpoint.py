"""Checkpointed chains: killed with SIGKILL and resumed bit-exactly, damage detected, no pickle.

One small run (conjugate linear regression, 2 warmup + 4 sampling segments, thinning, streamed
predictions) is the reference; the other tests copy its folder and damage or resume it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import jax
import numpy as np
import numpyro
import pytest
from conftest import count_compiles
from conjugate import NOISE, data, linear_model

import bnn_ppl as bp
from bnn_ppl.inference import (
    HMC,
    NUTS,
    full_batch_potential,
    hmc,
    iter_segments,
    load_bma,
    load_extra_fields,
    load_predictions,
    load_samples,
    run_chain,
    run_config,
)
from bnn_ppl.inference.checkpoint import _state_from_host, _state_template, _state_to_host
from bnn_ppl.io import load_npz
from bnn_ppl.models import MLP
from bnn_ppl.validation import InputError

TESTS = Path(__file__).resolve().parent
EPS32 = float(np.finfo(np.float32).eps)
SETTINGS = dict(num_warmup=20, num_samples=40, checkpoint_every=10, thinning=2)
LAST = 5  # segments 0-1 warm up, 2-5 sample


def run_small(folder, model=None, **kwargs):
    """The reference run (also what the killed subprocess runs)."""
    x, y = data()
    pot = full_batch_potential(linear_model() if model is None else model, x, y)
    opts = dict(SETTINGS, rng_key=jax.random.key(3), x_predict=x[:7]) | kwargs
    return run_chain(HMC(pot, trajectory_length=1.0, step_size=0.1), checkpoint_dir=folder, **opts)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    folder = tmp_path_factory.mktemp("reference")
    return folder, run_small(folder)


def copy_of(reference, tmp_path):
    return Path(shutil.copytree(reference[0], tmp_path / "run"))


def assert_same_run(res, ref):
    assert res.samples.keys() == ref.samples.keys()
    for k in ref.samples:
        np.testing.assert_array_equal(res.samples[k], ref.samples[k])
    for k in ref.extra_fields:
        np.testing.assert_array_equal(res.extra_fields[k], ref.extra_fields[k])
    np.testing.assert_array_equal(res.bma.mean, ref.bma.mean)
    np.testing.assert_array_equal(res.bma.scale, ref.bma.scale)


# ------------------------------------------------------------------------ kill and resume
def test_sigkill_after_first_checkpoint_then_resume_is_bit_exact(reference, tmp_path):
    folder = tmp_path / "killed"
    child = textwrap.dedent(
        f"""
        import sys, time
        sys.path.insert(0, {str(TESTS)!r})
        import jax
        jax.config.update("jax_compilation_cache_dir", {str(TESTS.parent / ".jax_cache")!r})
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
        from test_checkpoint import run_small
        run_small({str(folder)!r}, on_segment=lambda info: time.sleep(0.5))
        print("FINISHED")
        """
    )
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    proc = subprocess.Popen(
        [sys.executable, "-c", child], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 240
    while not (folder / "LATEST").exists():
        if proc.poll() is not None:
            pytest.fail(f"child exited early: {proc.communicate()[1].decode()[-2000:]}")
        assert time.monotonic() < deadline, "child wrote no checkpoint in 240 s"
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    out, _ = proc.communicate()
    assert proc.returncode == -signal.SIGKILL and b"FINISHED" not in out
    killed_at = json.loads((folder / "LATEST").read_text())["segment"]
    assert killed_at < LAST

    res = run_small(folder)
    ref = reference[1]
    assert res.resumed_from is not None and killed_at <= res.resumed_from < LAST
    assert_same_run(res, ref)
    assert res.samples["Dense_0.kernel"].shape == (20, 2, 1)  # 40 samples, thinning 2: none lost
    for name in sorted(os.listdir(reference[0])):
        if name.startswith(("samples_", "extra_", "predictions_")):  # byte-identical files
            assert (folder / name).read_bytes() == (reference[0] / name).read_bytes(), name
    assert not [n for n in os.listdir(folder) if n.endswith(".tmp")]


def test_finished_run_resumes_to_the_same_result(reference):
    res = run_small(reference[0])
    assert res.resumed_from == LAST
    assert_same_run(res, reference[1])


# ------------------------------------------------------------------- what a run produces
def test_same_chain_as_numpyro_mcmc_with_chains_and_thinning(tmp_path):
    """run_chain drives the kernel exactly as MCMC does: same seed, same draws, bit for bit."""
    x, y = data()
    kw = dict(num_warmup=7, num_samples=13, num_chains=2, thinning=3)
    res = run_chain(
        HMC(full_batch_potential(linear_model(), x, y), trajectory_length=1.0, step_size=1e-2),
        checkpoint_dir=tmp_path,
        checkpoint_every=5,
        rng_key=jax.random.key(0),
        **kw,
    )
    mcmc = hmc(linear_model(), x, y, trajectory_length=1.0, rng_key=jax.random.key(0), **kw)
    want = mcmc.get_samples(group_by_chain=True)
    assert res.samples["Dense_0.kernel"].shape == (2, 4, 2, 1)
    for k, v in want.items():
        np.testing.assert_array_equal(res.samples[k], np.asarray(v))
    np.testing.assert_array_equal(
        res.extra_fields["num_steps"],
        np.asarray(mcmc.get_extra_fields(group_by_chain=True)["num_steps"]),
    )


def test_streamed_predictions_and_bma(reference):
    folder, ref = reference
    x, _ = data()
    model = linear_model()
    want = bp.predict(model, ref.samples, x[:7])  # all draws at once, in float32
    got = load_predictions(folder)  # segment by segment
    # float32 sums differ by a few eps of the summed terms' magnitudes (issue 14, item 6):
    # per draw, mean = x . w + b, whose terms are |x| |w| and |b|
    w, b = ref.samples["Dense_0.kernel"][..., 0], ref.samples["Dense_0.bias"]
    terms = np.abs(w) @ np.abs(x[:7]).T + np.abs(b)  # (draws, n)
    assert np.all(np.abs(got.mean - want.mean) <= 4 * EPS32 * terms)
    np.testing.assert_allclose(got.scale, want.scale, rtol=4 * EPS32)
    bma = bp.bma(want)
    # the BMA: a float64 running sum (RunningBMA) vs a float32 mean over the S draws, whose
    # worst-case rounding is (S - 1) eps/2 of the summed magnitudes (plus squaring, dividing)
    k = len(w) + 4
    np.testing.assert_array_less(
        np.abs(ref.bma.mean - bma.mean), k * EPS32 * (terms + np.abs(want.mean)).mean(axis=0)
    )
    # variances, E[scale^2 + mean^2] - mean^2: off by eps of the second moment it cancels
    second = np.asarray(want.scale, np.float64) ** 2 + np.asarray(want.mean, np.float64) ** 2
    np.testing.assert_array_less(
        np.abs(ref.bma.scale**2 - np.asarray(bma.scale, np.float64) ** 2),
        k * EPS32 * second.mean(axis=0),
    )
    np.testing.assert_array_equal(load_bma(folder).mean, ref.bma.mean)
    # lazily, one segment at a time: 4 sampling segments of 10 iterations = 5 draws each
    assert [s["Dense_0.bias"].shape for s in iter_segments(folder)] == [(1, 5, 1)] * 4
    assert load_extra_fields(folder)["accept_prob"].shape == (20,)
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["schema_version"] == 1 and cfg["config"]["model"]["temperature"] == 1.0


def test_samples_only_on_disk(reference, tmp_path):
    folder = copy_of(reference, tmp_path)
    res = run_small(folder, keep_samples_in_memory=False)
    assert res.samples is None
    np.testing.assert_array_equal(
        load_samples(folder)["Dense_0.bias"], reference[1].samples["Dense_0.bias"]
    )


# ----------------------------------------------------------------------------- damage
def test_truncated_newest_state_falls_back_to_the_previous_checkpoint(reference, tmp_path):
    folder = copy_of(reference, tmp_path)
    state = folder / f"state_{LAST:05d}.npz"
    state.write_bytes(state.read_bytes()[:100])
    (folder / ".state_00006.npz.x1y2.tmp").write_bytes(b"half a file")  # an interrupted write
    with pytest.warns(UserWarning, match=r"state_00005\.npz: checksum mismatch"):
        res = run_small(folder)
    assert res.resumed_from == LAST - 1
    assert_same_run(res, reference[1])
    assert not (folder / ".state_00006.npz.x1y2.tmp").exists()


def test_truncated_record_falls_back(reference, tmp_path):
    folder = copy_of(reference, tmp_path)
    record = folder / f"state_{LAST:05d}.json"
    record.write_bytes(record.read_bytes()[:-40])
    with pytest.warns(UserWarning, match="unreadable"):
        res = run_small(folder)
    assert res.resumed_from == LAST - 1
    assert_same_run(res, reference[1])


def test_no_usable_checkpoint_is_a_clear_error(reference, tmp_path):
    folder = copy_of(reference, tmp_path)
    samples = folder / "samples_00002.npz"  # the first draws: part of every checkpoint
    samples.write_bytes(samples.read_bytes()[:-10])
    with pytest.raises(ValueError, match=r"no usable checkpoint.*samples_00002\.npz"):
        run_small(folder)
    with pytest.raises(ValueError, match=r"samples_00002\.npz does not match|checksum"):
        load_samples(folder)


def test_crafted_object_array_is_never_unpickled(reference, tmp_path):
    folder = copy_of(reference, tmp_path)
    state = folder / f"state_{LAST:05d}.npz"
    np.savez(state, leaf_00000=np.array([{"payload": 1}], dtype=object))  # pickled inside
    record = folder / f"state_{LAST:05d}.json"
    rec = json.loads(record.read_text())
    rec["state"]["sha256"] = hashlib.sha256(state.read_bytes()).hexdigest()
    record.write_text(json.dumps(rec))  # the checksum matches: only the format protects us
    with pytest.raises(ValueError, match="Python objects"):
        load_npz(state)
    with pytest.warns(UserWarning, match="Python objects"):
        res = run_small(folder)
    assert res.resumed_from == LAST - 1
    assert_same_run(res, reference[1])


# ------------------------------------------------------------------------ configuration
def test_changed_prior_scale_is_refused_naming_the_field(reference, tmp_path):
    folder = copy_of(reference, tmp_path)
    other = bp.BNN(MLP(hidden=(), out=1), bp.priors.Normal(2.0), bp.likelihoods.Gaussian(NOISE))
    with pytest.raises(ValueError, match="different configuration") as e:
        run_small(folder, model=other)
    msg = str(e.value)
    assert 'model.prior: "Normal(scale=1.0, loc=0.0, fan_in=False)" (checkpoint) != ' in msg
    assert "Normal(scale=2.0" in msg and "model.sites.Dense_0.kernel.prior" in msg
    with pytest.raises(ValueError, match=r"run\.checkpoint_every: 10 \(checkpoint\) != 5"):
        run_small(folder, checkpoint_every=5)


def test_run_config_is_stable_and_complete():
    x, y = data()
    pot = full_batch_potential(linear_model(), x, y)
    kw = dict(num_warmup=5, num_samples=5, checkpoint_every=5, rng_key=jax.random.key(1))
    a = run_config(HMC(pot, trajectory_length=1.0), **kw)
    b = run_config(HMC(full_batch_potential(linear_model(), x, y), trajectory_length=1.0), **kw)
    assert a == b and json.loads(json.dumps(a)) == a
    assert {"model", "data", "potential", "kernel", "run", "predict"} <= set(a)
    assert a["model"]["likelihood"] == "Gaussian(scale=0.5, task=regression)"
    assert a["kernel"]["trajectory_length"] == 1.0 and a["kernel"]["algo"] == "HMC"
    c = run_config(HMC(full_batch_potential(linear_model(), x, y + 1), trajectory_length=1.0), **kw)
    assert c["data"]["sha256"] != a["data"]["sha256"]
    # a noise prior is a numpyro distribution: described by its parameters, not its address
    noisy = bp.BNN(
        MLP(hidden=(), out=1),
        bp.priors.Normal(1.0),
        bp.likelihoods.Gaussian(scale=numpyro.distributions.HalfNormal(1.0)),
    )
    d = run_config(HMC(full_batch_potential(noisy, x, y), trajectory_length=1.0), **kw)
    assert d["model"]["sites"]["noise_scale"]["prior"] == "HalfNormal(scale=1.0)"


def test_nuts_state_round_trips_through_the_host():
    x, y = data()
    pot = full_batch_potential(linear_model(), x, y)
    kern = NUTS(pot)
    init = pot.init_params(jax.random.key(0), 2)
    state = _state_template(kern, jax.random.split(jax.random.key(1), 2), 10, init, pot)
    meta, arrays = _state_to_host(state)
    assert state.trajectory_length is None and any(m["key_impl"] for m in meta)
    back = _state_from_host(state, meta, meta, arrays)
    assert _state_to_host(back)[0] == meta
    for a, b in zip(_state_to_host(back)[1], arrays, strict=True):
        np.testing.assert_array_equal(a, b)


def test_bad_arguments(tmp_path):
    x, y = data()
    pot = full_batch_potential(linear_model(), x, y)
    with pytest.raises(TypeError, match="bnn_ppl.inference.HMC or NUTS"):
        run_chain(
            numpyro.infer.HMC(potential_fn=pot.potential_fn),
            num_warmup=1,
            num_samples=1,
            checkpoint_dir=tmp_path,
            checkpoint_every=1,
            rng_key=jax.random.key(0),
        )
    kw = dict(checkpoint_dir=tmp_path, rng_key=jax.random.key(0), num_warmup=2)
    with pytest.raises(ValueError, match="thinning"):
        run_chain(HMC(pot), num_samples=2, thinning=3, checkpoint_every=2, **kw)
    with pytest.raises(ValueError, match="checkpoint_every"):
        run_chain(HMC(pot), num_samples=2, checkpoint_every=0, **kw)
    with pytest.raises(ValueError, match="leading axis of num_chains=2"):
        run_chain(
            HMC(pot),
            num_samples=2,
            checkpoint_every=2,
            num_chains=2,
            init_params=pot.init_params(jax.random.key(0)),
            **kw,
        )
    with pytest.raises(ValueError, match="no field 'accept_rate'"):
        run_chain(HMC(pot), num_samples=2, checkpoint_every=2, extra_fields=("accept_rate",), **kw)


def test_two_processes_cannot_share_a_folder(tmp_path):
    fcntl = pytest.importorskip("fcntl")
    with open(tmp_path / ".lock", "a") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        with pytest.raises(RuntimeError, match="another process"):
            run_small(tmp_path)


# ------------------------------------------------------------- every argument, checked first
def _bad_arguments():
    x, _ = data()
    ok_init = {
        "Dense_0.bias": np.zeros(1, np.float32),
        "Dense_0.kernel": np.zeros((2, 1), np.float32),
    }
    return {  # name: (overrides of SETTINGS + x_predict, error type, message)
        "num_warmup float": (dict(num_warmup=2.5), TypeError, "num_warmup must be an int"),
        "num_samples str": (dict(num_samples="40"), TypeError, "num_samples must be an int"),
        "checkpoint_every None": (dict(checkpoint_every=None), TypeError, "checkpoint_every"),
        "checkpoint_every 10.0": (dict(checkpoint_every=10.0), TypeError, "Pass 10"),
        "num_chains bool": (dict(num_chains=True), TypeError, "num_chains must be an int"),
        "thinning 0": (dict(thinning=0), ValueError, "thinning must be an int >= 1"),
        "keep_checkpoints 1": (dict(keep_checkpoints=1), ValueError, "keep_checkpoints"),
        "iterations beyond int32": (dict(num_warmup=2**31 - 10), ValueError, "int32"),
        "predict_chunk_size 2.5": (dict(predict_chunk_size=2.5), TypeError, "predict_chunk_size"),
        "predict_chunk_size 0": (dict(predict_chunk_size=0), ValueError, "predict_chunk_size"),
        "save_predictions str": (dict(save_predictions="yes"), TypeError, "save_predictions"),
        "keep_samples 1": (dict(keep_samples_in_memory=1), TypeError, "keep_samples_in_memory"),
        "progress_bar None": (dict(progress_bar=None), TypeError, "progress_bar"),
        "config list": (dict(config=[1, 2]), TypeError, "config must be a mapping"),
        "on_segment int": (dict(on_segment=3), TypeError, "on_segment must be a function"),
        "extra_fields str": (dict(extra_fields="accept_prob"), TypeError, "extra_fields must be"),
        "extra_fields unknown": (dict(extra_fields=("accept_rate",)), ValueError, "accept_rate"),
        "extra_fields too deep": (
            dict(extra_fields=("adapt_state.step_size.x",)),
            ValueError,
            "no field",
        ),
        "x_predict features": (
            dict(x_predict=x[:7, :1]),
            ValueError,
            r"x_predict has shape \(7, 1\)",
        ),  # fmt: skip
        "x_predict 1-D": (dict(x_predict=x[:7, 0]), ValueError, r"x_predict has shape \(7,\)"),
        "x_predict NaN": (
            dict(x_predict=np.full((3, 2), np.nan)),
            ValueError,
            "x_predict contains",
        ),
        "init_params site": (
            dict(init_params={"w": np.zeros(3)}),
            ValueError,
            "init_params must map",
        ),
        "init_params shape": (
            dict(init_params=ok_init | {"Dense_0.kernel": np.zeros((3, 1))}),
            ValueError,
            r"init_params\['Dense_0.kernel'\] has shape \(3, 1\), expected \(2, 1\)",
        ),
        "init_params NaN": (
            dict(init_params=ok_init | {"Dense_0.bias": np.full(1, np.nan, np.float32)}),
            ValueError,
            "finite floating-point",
        ),
        "rng_key int": (dict(rng_key=0), TypeError, "rng_key must be a key"),
    }


@pytest.mark.parametrize("case", list(_bad_arguments()))
def test_every_argument_is_checked_before_anything_is_compiled_or_written(case, tmp_path):
    """Found after the warmup, a bad argument would cost the warmup; and since the arguments
    are the saved configuration, the corrected call could not resume it (issue 14, 11c)."""
    overrides, error, message = _bad_arguments()[case]
    folder = tmp_path / "run"
    x, y = data()
    kernel = HMC(full_batch_potential(linear_model(), x, y), trajectory_length=1.0, step_size=0.1)
    kwargs = dict(SETTINGS, rng_key=jax.random.key(3), x_predict=x[:7]) | overrides
    with count_compiles() as compiles, pytest.raises(error, match=message) as info:
        run_chain(kernel, checkpoint_dir=folder, **kwargs)
    assert isinstance(info.value, InputError)
    assert compiles == [] and not folder.exists()


def test_checkpoint_dir_that_is_a_file_is_refused(tmp_path):
    path = tmp_path / "file"
    path.write_text("mine")
    with pytest.raises(ValueError, match="exists and is not a folder"):
        run_small(path)
    with pytest.raises(TypeError, match="checkpoint_dir must be a folder path"):
        run_small(3)
    assert path.read_text() == "mine"


def test_a_corrected_x_predict_runs_in_the_same_folder(reference, tmp_path):
    x, _ = data()
    folder = tmp_path / "run"
    with pytest.raises(ValueError, match="x_predict has shape"):
        run_small(folder, x_predict=x[:7, :1])
    assert not folder.exists()
    assert_same_run(run_small(folder), reference[1])


def test_a_malformed_record_entry_counts_as_damage(reference, tmp_path):
    folder = copy_of(reference, tmp_path)
    record = folder / f"state_{LAST:05d}.json"
    rec = json.loads(record.read_text())
    rec["segments"][0]["samples"] = "samples_00002.npz"  # a string, not {"file", "sha256"}
    record.write_text(json.dumps(rec))
    with pytest.warns(UserWarning, match="malformed entry 'samples_00002.npz'"):
        res = run_small(folder)
    assert res.resumed_from == LAST - 1
    assert_same_run(res, reference[1])


def test_a_bug_while_reading_checkpoints_is_not_taken_for_damage(reference, tmp_path, monkeypatch):
    """Only bnn_ppl's own errors and OSError mean a damaged checkpoint; a bug propagates."""
    import bnn_ppl.inference.checkpoint as checkpoint

    def bug(path):
        return None + 1

    monkeypatch.setattr(checkpoint, "sha256_file", bug)
    with pytest.raises(TypeError, match="unsupported operand"):
        run_small(copy_of(reference, tmp_path))

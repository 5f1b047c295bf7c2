"""Checkpointed reference runs (``reference_hmc(..., checkpoint_dir=...)``): an interrupted run
resumed from its folder gives the uninterrupted run's draws bit for bit; a larger budget
continues a finished run; changed draw-determining settings are refused naming the field; a
damaged segment file is detected and the segment redone.

All runs share one tiny problem (the conjugate regression, 4 chains, 50 warmup iterations,
segments of 10 draws, 20 draws per chain), so that their programs are compiled once.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
import types
import warnings
from pathlib import Path

import jax
import numpy as np
import pytest
from conftest import count_compiles, fake_sampling_clock, sigkill_when, subprocess_env
from conjugate import data, linear_model

from bnn_ppl.config import ReferenceHMCConfig
from bnn_ppl.inference import ReferenceNotConvergedWarning, fit, reference_hmc
from bnn_ppl.inference.checkpoint.store import CheckpointDamageWarning, CheckpointError
from bnn_ppl.inference.reference import checkpoint as rc

KEY = jax.random.key(3)
SETTINGS = dict(num_warmup=50, segment_draws=10, max_draws=20)  # as test_reference.py runs
XT = np.random.default_rng(7).normal(size=(8, 2)).astype(np.float32)


def _run(folder=None, key=KEY, x_test=XT, **changes):
    x, y = data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ReferenceNotConvergedWarning)  # (20 draws: too few)
        return reference_hmc(linear_model(), (x, y), x_test=x_test, rng_key=key,
                             checkpoint_dir=folder, **(SETTINGS | changes))  # fmt: skip


def _assert_same_draws(run, want, draws=None):
    for group in ("samples", "sample_stats"):
        got, ref = getattr(run.posterior, group), getattr(want.posterior, group)
        assert set(got) == set(ref)
        for k, v in ref.items():
            np.testing.assert_array_equal(got[k][:, :draws], v, err_msg=k)


def _same_checks(run, want):
    """Every figure of every check but the wall time."""
    return [c._replace(seconds=0.0) for c in run.checks] == [
        c._replace(seconds=0.0) for c in want.checks
    ]


def _snapshot(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in Path(folder).rglob("*")
            if p.is_file() and p.name != "lock"}  # fmt: skip


def _interrupted_in_segment_2(folder, **changes):
    """Run into ``folder``, stopped by an exception during segment 2 (segment 1 committed)."""
    original, calls = rc.continue_chains, []

    def interrupted(*args):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("stopped during segment 2")
        original(*args)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(rc, "continue_chains", interrupted)
        with pytest.raises(RuntimeError, match="during segment 2"):
            _run(folder, **changes)


@pytest.fixture(scope="module")
def uninterrupted():
    """The run in memory, no checkpoint: 2 segments of 10 draws, stopped by max_draws."""
    run = _run()
    assert run.stop_reason == "max_draws" and run.segments == 2 and run.resumed_after is None
    return run


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A folder whose run was cut short in warmup by max_seconds (nothing committed), then
    interrupted by an exception during segment 2, then resumed to its end: (folder, run)."""
    folder = tmp_path_factory.mktemp("reference") / "ckpt"
    cut = _run(folder, max_seconds=1e-3)  # the budget ends warmup after its first 10 iterations
    assert cut.warmup_cut_short and cut.warmup_done == 10 and cut.stop_reason == "max_seconds"
    assert (folder / "run.json").exists() and not list(folder.glob("record_*.json"))
    _interrupted_in_segment_2(folder)
    assert [p.name for p in sorted(folder.glob("record_*.json"))][-1] == "record_000001.json"
    seen = []  # on_check: the replayed segment's check, then the sampled one's
    run = _run(folder, on_check=seen.append)
    assert seen == list(run.checks) and len(seen) == 2
    return folder, run


def test_an_interrupted_run_resumed_equals_the_uninterrupted_one(finished, uninterrupted):
    folder, run = finished
    assert run.resumed_after == 1  # segment 1 replayed, segment 2 sampled
    _assert_same_draws(run, uninterrupted)
    assert run.stop_reason == "max_draws" and _same_checks(run, uninterrupted)
    np.testing.assert_array_equal(run.values, uninterrupted.values)
    record = run.posterior.config["convergence"]
    assert record["resumed_after_segment"] == 1 and record["warmup_done"] == 50
    # a check's time is the committed time: warmup's and each segment's, never decreasing
    assert 0 < run.warmup_seconds <= run.checks[0].seconds <= run.checks[-1].seconds


def test_a_resumed_run_stopped_by_the_budget_says_the_earlier_time_counts(finished, tmp_path):
    """max_seconds is the whole run's budget (decisions replay): a rerun whose budget the
    committed segments already spent samples nothing, and its warning says so, with the time
    committed before it and the max_seconds that would give more."""
    folder = tmp_path / "ckpt"
    shutil.copytree(finished[0], folder)
    before, committed = _snapshot(folder), finished[1].checks[-1].seconds
    x, y = data()
    with pytest.warns(ReferenceNotConvergedWarning) as caught:
        run = reference_hmc(linear_model(), (x, y), x_test=XT, rng_key=KEY, checkpoint_dir=folder,
                            **(SETTINGS | {"max_draws": 30, "max_seconds": committed + 1e-3}))
    assert run.stop_reason == "max_seconds" and run.draws == 20 and _snapshot(folder) == before
    text = str(caught[0].message)
    assert (f"the {committed:,.0f} s committed by earlier calls on this checkpoint_dir (warmup "
            "and 2 segment(s)) count against it, so this call had 0 s") in text
    assert f"max_seconds={committed:.0f} + S" in text


def test_a_finished_run_is_read_back_and_a_larger_budget_continues(finished, uninterrupted,
                                                                   tmp_path):  # fmt: skip
    folder = tmp_path / "ckpt"
    shutil.copytree(finished[0], folder)
    before = _snapshot(folder)
    again = _run(folder)  # nothing to sample: every decision replays from the stored draws
    assert _snapshot(folder) == before and again.resumed_after == 2
    # the tempering settings do not move plain HMC's chains, nor init_learning_rate without
    # init_steps: not in its fingerprint (a folder written before the fields existed resumes)
    assert _run(folder, min_beta=0.5, leapfrog_steps=3,
                init_learning_rate=0.1).checks == again.checks  # fmt: skip
    _assert_same_draws(again, uninterrupted)
    assert again.checks == finished[1].checks  # (the committed times too)
    # through fit: the same folder, the same draws, and the Posterior's data groups
    config = ReferenceHMCConfig(**SETTINGS)
    x, y = data()
    with pytest.warns(ReferenceNotConvergedWarning):
        post = fit(linear_model(), (x, y, XT), config, KEY, checkpoint_dir=folder)
    np.testing.assert_array_equal(post.samples["Dense_0.kernel"],
                                  uninterrupted.posterior.samples["Dense_0.kernel"])  # fmt: skip
    assert post.predictions["mean"].shape == (4, 20, len(XT)) and _snapshot(folder) == before
    # the budget is not in the fingerprint: a larger one continues the run
    longer = _run(folder, max_draws=30)
    assert longer.resumed_after == 2 and longer.draws == 30 and longer.segments == 3
    _assert_same_draws(longer, uninterrupted, draws=20)
    assert (folder / "record_000003.json").exists()


@pytest.mark.parametrize(
    "changes, match",
    [
        ({"key": jax.random.key(4)}, "seed is"),
        ({"segment_draws": 5}, "config.segment_draws is 10 there and 5 now"),
        ({"num_warmup": 40}, "config.num_warmup is 50 there and 40 now"),
        ({"mass_matrix": "dense"}, "config.mass_matrix is 'diagonal' there and 'dense' now"),
    ],
)
def test_a_changed_draw_setting_is_refused_naming_it(finished, tmp_path, changes, match):
    folder = tmp_path / "ckpt"
    shutil.copytree(finished[0], folder)
    before = _snapshot(folder)
    with pytest.raises(CheckpointError, match=match):
        _run(folder, **changes)
    assert _snapshot(folder) == before


def test_a_resume_takes_the_chunk_the_memory_rule_chose(tmp_path, uninterrupted, monkeypatch):
    # chunk_size="auto" on the CPU: no free-memory figure, so 1024 rows (all 30 here); on the
    # rerun the device has next to no free memory (a new potential would take 1-row chunks)
    folder = tmp_path / "ckpt"
    first = _run(folder, chunk_size="auto", max_draws=10)
    assert first.draws == 10
    monkeypatch.setattr("bnn_ppl.inference.potential.bnn.free_device_bytes", lambda devices: 1)
    resumed = _run(folder, chunk_size="auto")
    assert resumed.resumed_after == 1
    _assert_same_draws(resumed, uninterrupted)


def test_checkpoint_arguments_of_a_reference_fit_are_checked(tmp_path):
    x, y = data()
    config = ReferenceHMCConfig(**SETTINGS)
    with pytest.raises(ValueError, match="checkpoint_every does not apply to a ReferenceHMC"):
        fit(linear_model(), (x, y, XT), config, KEY, checkpoint_dir=tmp_path, checkpoint_every=5)
    (tmp_path / "file").write_text("")
    with count_compiles() as compiles:  # refused before anything is compiled
        with pytest.raises(ValueError, match="is not a folder"):
            reference_hmc(linear_model(), (x, y), x_test=XT, checkpoint_dir=tmp_path / "file")
        with pytest.raises(TypeError, match="checkpoint_dir must be a folder path"):
            reference_hmc(linear_model(), (x, y), x_test=XT, checkpoint_dir=3)
    assert compiles == []


def test_a_damaged_segment_file_is_set_aside_and_the_segment_redone(finished, uninterrupted,
                                                                    tmp_path):  # fmt: skip
    folder = tmp_path / "ckpt"
    shutil.copytree(finished[0], folder)
    damaged = folder / "draws_000002.npz"
    raw = bytearray(damaged.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # one flipped byte: its SHA-256 no longer matches the record
    damaged.write_bytes(bytes(raw))
    with pytest.warns(CheckpointDamageWarning, match="resuming after segment 1"):
        run = _run(folder)
    assert run.resumed_after == 1  # record 2 failed verification; segment 2 was sampled again
    _assert_same_draws(run, uninterrupted)
    aside = list((folder / "aside").rglob("draws_000002.npz"))
    assert len(aside) == 1 and aside[0].read_bytes() == bytes(raw)


TEMPERING = dict(num_temperatures=2, leapfrog_steps=4)


# -m slow: the commits and replay are the HMC runs' code (reference_kernels), tested above;
# this adds the tempering state (ladders, swap counts) to what is restored
@pytest.mark.slow
def test_a_tempering_run_resumed_equals_the_uninterrupted_one(tmp_path):
    """Parallel tempering through the same commits and replay: interrupted during segment 2
    and resumed, its draws, checks and ladder are the uninterrupted run's, bit for bit; a
    changed tempering setting is refused, naming it."""
    whole = _run(**TEMPERING)
    assert whole.posterior.config["kernel"] == "ParallelTempering" and whole.segments == 2
    folder = tmp_path / "ckpt"
    _interrupted_in_segment_2(folder, **TEMPERING)
    resumed = _run(folder, **TEMPERING)
    assert resumed.resumed_after == 1
    _assert_same_draws(resumed, whole)
    assert _same_checks(resumed, whole)
    np.testing.assert_array_equal(resumed.values, whole.values)
    ladder = resumed.posterior.config["convergence"]["tempering"]
    assert ladder == whole.posterior.config["convergence"]["tempering"]
    assert np.shape(ladder["betas"]) == (4, 2) and np.shape(ladder["swap_rates"]) == (4, 1)
    before = _snapshot(folder)
    changes = [("leapfrog_steps", 5, 4), ("min_beta", 0.01, 0.001), ("num_temperatures", 3, 2),
               ("adapt_ladder", False, True)]  # fmt: skip
    for name, value, was in changes:
        with pytest.raises(CheckpointError, match=f"config.{name} is {was!r} there and"):
            _run(folder, **(TEMPERING | {name: value}))
    with pytest.raises(CheckpointError, match="num_temperatures is 2 there and '<missing>' now"):
        _run(folder)  # plain HMC
    assert _snapshot(folder) == before


def test_a_run_with_optimised_starts_resumes_and_reads_its_starts_back(tmp_path):
    """``init_steps``: the starts' figures are committed with warmup and read back by a rerun,
    which resumes with the uninterrupted run's draws bit for bit (the optimisation is not
    redone: warmup's state is read back); a changed ``init_steps`` or learning rate is refused,
    naming it, and so is the folder run without them."""
    starts = dict(init_steps=30, init_learning_rate=0.01)
    whole = _run(**starts)
    record = whole.posterior.config["convergence"]["starts"]
    assert record["steps"] == 30 and len(record["potential"]) == 4
    folder = tmp_path / "ckpt"
    _interrupted_in_segment_2(folder, **starts)
    resumed = _run(folder, **starts)
    assert resumed.resumed_after == 1
    _assert_same_draws(resumed, whole)
    assert resumed.posterior.config["convergence"]["starts"] == record
    before = _snapshot(folder)
    for name, value, was in (("init_steps", 31, 30), ("init_learning_rate", 0.02, 0.01)):
        with pytest.raises(CheckpointError, match=f"config.{name} is {was!r} there and"):
            _run(folder, **(starts | {name: value}))
    with pytest.raises(CheckpointError, match="init_steps is 30 there and '<missing>' now"):
        _run(folder)
    assert _snapshot(folder) == before


# ------------------------------------------------------------------------ SIGKILL, bit-exact
CHILD = textwrap.dedent(
    """
    import sys, warnings
    sys.path.insert(0, sys.argv[3])
    import jax, numpy as np
    from conjugate import data, linear_model
    from bnn_ppl.inference import reference_hmc
    warnings.simplefilter("ignore")
    x, y = data()
    xt = np.random.default_rng(7).normal(size=(8, 2)).astype(np.float32)
    run = reference_hmc(linear_model(), (x, y), x_test=xt, rng_key=jax.random.key(3),
                        num_warmup=50, segment_draws=10, max_draws=20, checkpoint_dir=sys.argv[1])
    np.savez(sys.argv[2], **run.posterior.samples)
    """
)


@pytest.mark.slow  # two child processes, each compiling the run's programs
@pytest.mark.timeout(600)
def test_a_reference_run_killed_by_sigkill_resumes_bit_exact(tmp_path, uninterrupted):
    script, folder = tmp_path / "child.py", tmp_path / "ckpt"
    script.write_text(CHILD)
    tests = str(Path(__file__).resolve().parents[2])

    def child(out):
        args = [sys.executable, str(script), str(folder), str(out), tests]
        return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                env=subprocess_env())  # fmt: skip

    proc = child(tmp_path / "never.npz")
    record = folder / "record_000001.json"  # (segment 2 left to kill it in)
    sigkill_when(proc, record)
    assert not (tmp_path / "never.npz").exists()
    first = record.stat()
    proc = child(tmp_path / "resumed.npz")
    assert proc.wait(timeout=600) == 0, proc.stderr.read().decode()[-2000:]
    again = record.stat()
    assert (first.st_ino, first.st_mtime_ns) == (again.st_ino, again.st_mtime_ns)  # resumed
    assert (folder / "record_000002.json").exists() and not list(folder.glob(".*.tmp"))
    resumed = np.load(tmp_path / "resumed.npz")
    assert set(resumed.files) == set(uninterrupted.posterior.samples)
    for name, value in uninterrupted.posterior.samples.items():
        np.testing.assert_array_equal(resumed[name], value, err_msg=name)


def test_a_rerun_reads_its_checks_back_instead_of_recomputing_them(finished, tmp_path,
                                                                    monkeypatch):  # fmt: skip
    """The replayed checks come from checks.json (the rule is not run again) and equal the
    computed ones; other test inputs are other values: computed; without the file, the same
    checks are recomputed."""
    folder = tmp_path / "ckpt"
    shutil.copytree(finished[0], folder)
    calls, original = [], rc.rule_check
    monkeypatch.setattr(rc, "rule_check", lambda *a: calls.append(1) or original(*a))
    assert _run(folder).checks == finished[1].checks and calls == []
    other = _run(folder, x_test=XT[:5])
    assert len(calls) == 2 and other.values.shape[-1] == 5
    (folder / "checks.json").unlink()
    assert _run(folder).checks == finished[1].checks and len(calls) == 4


def test_a_checkpointed_run_stops_before_a_segment_past_its_budget(tmp_path, monkeypatch):
    """On a fake clock where each segment takes 300 s (warmup none): 1,000 s stops the run
    after 3 segments (900 s committed; a 4th would end at 1,200 s); the same folder with
    1,200 s replays those 3 and runs the 4th, which now fits exactly."""
    fake_sampling_clock(monkeypatch, 30.0, (rc,), rc)
    folder = tmp_path / "ckpt"
    run = _run(folder, max_draws=100, max_seconds=1000.0)
    assert run.stop_reason == "max_seconds" and run.segments == 3
    assert [c.seconds for c in run.checks] == [300.0, 600.0, 900.0]
    longer = _run(folder, max_draws=100, max_seconds=1200.0)
    assert longer.resumed_after == 3 and longer.segments == 4
    assert longer.checks[:3] == run.checks and longer.checks[-1].seconds == 1200.0


def test_replaying_the_committed_segments_is_not_counted_as_the_runs_time(finished, tmp_path,
                                                                         monkeypatch):  # fmt: skip
    """A rerun's first new segment is timed from the last replayed one: a slow read-back (here
    1,000 s on a fake clock) is not committed as sampling time."""
    folder = tmp_path / "ckpt"
    shutil.copytree(finished[0], folder)
    now = [0.0]
    monkeypatch.setattr(rc, "time", types.SimpleNamespace(monotonic=lambda: now[0]))
    load = rc.CheckpointStore.load_draws

    def slow_load(self, record):
        now[0] += 1000.0  # reading back the committed segments took long
        return load(self, record)

    monkeypatch.setattr(rc.CheckpointStore, "load_draws", slow_load)
    longer = _run(folder, max_draws=30)
    assert longer.resumed_after == 2 and longer.segments == 3
    committed = longer.checks[1].seconds  # warmup and segments 1-2, as first committed
    assert committed == finished[1].checks[1].seconds
    assert longer.checks[2].seconds - committed < 1000.0

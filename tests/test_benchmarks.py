"""Every benchmark script runs with tiny settings (no benchmark is a test: no numbers checked).

Each script is run as a user would run it (``python benchmarks/<name>.py --quick``, from the
repository root, in a subprocess) and must exit 0 and print its report. ``sharding.py`` has no
``--quick``; it gets tiny explicit sizes. ``potential.py --quick`` is run without its HMC part
here (``--no-hmc``, ~25 s on 2 busy cores) and in full under ``-m slow`` (~60 s). ``gpu``,
``memory``, ``vs_blackjax``, ``reference_mass_matrix``, ``hmc_overhead``, ``trajectory_cap``,
``reference_convergence``, ``noise_funnel`` (these two need the UCI data), ``chain_batching``,
``dense_metric``, ``progress_metrics`` and ``segments`` (~4 min: eight fresh processes) run
under ``-m slow`` only (20-90 s each on 2 cores, unless said).
``import_time.py --quick`` starts one fresh interpreter per candidate (~10 s). The
subprocesses share the tests' persistent compilation cache, so repeated runs are faster.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

CASES = {
    # name: (arguments, text the report must contain, XLA device count or None)
    "potential": (["--quick", "--no-hmc"], "target ours <= 1.00x numpyro", None),
    "sharding": (
        ["--n", "200", "--d", "4", "--width", "8", "--chunk-size", "32", "--rounds", "2"],
        "auto program has all-reduce",
        4,
    ),
    "hmc_overhead": (["--quick"], "hmc/raw", None),
    "cpu_chunk": (["--quick"], "÷ default", None),
    "reference_mass_matrix": (["--quick"], "per 1000 gradients", None),
    "vs_blackjax": (["--quick"], "blackjax", None),
    "scaling": (["--quick"], "vs simulated devices", None),
    "memory": (["--quick"], "peak - data", None),
    "gpu": (["--quick"], "HMC step / gradient", None),
    "import_time": (["--quick"], "target import bnn_ppl <= import numpyro", None),
    "rank_diagnostics": (["--quick"], "figures agree with ArviZ", None),
    "trajectory_cap": (["--quick"], "ESS per gradient", None),
    "init_draw": (["--quick"], "site by site / init", None),
    "chain_batching": (["--quick"], "vectorized/sequential", None),
    "dense_metric": (["--quick"], "dense / diagonal", None),
    "progress_metrics": (["--quick"], "per prefix / streamed", None),
    "segments": (["--quick", "--rounds", "1"], "with ReusingMCMC", None),
    "time_to_first_draw": (["--quick"], "target <= 2", None),
    "compile_cache": (["--quick"], "target <= 20 %", None),
    "numpyro_end_to_end": (["--quick"], "model_potential", None),
    "precision_posterior": (["--quick"], "total variation", None),
}


def run_script(name: str, args: list[str], devices: int | None) -> tuple[str, float]:
    env = dict(
        os.environ,
        JAX_PLATFORMS="cpu",
        JAX_COMPILATION_CACHE_DIR=str(ROOT / ".jax_cache"),
        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="1",
    )
    env.pop("XLA_FLAGS", None)
    if devices is not None:
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / f"{name}.py"), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 0, f"{name}: exit {proc.returncode}\n{proc.stderr[-3000:]}"
    return proc.stdout, time.monotonic() - t0


# the slowest smoke tests (ResNet compile for gpu.py, 20-60 s each on 2 cores) run under
# ``-m slow`` only, to keep the default suite within its time budget
SLOW_CASES = {
    "gpu", "memory", "vs_blackjax", "reference_mass_matrix", "hmc_overhead", "import_time",
    "scaling", "sharding", "potential", "trajectory_cap", "init_draw", "chain_batching",
    "dense_metric", "progress_metrics", "segments", "time_to_first_draw", "compile_cache",
    "numpyro_end_to_end", "precision_posterior",
}  # fmt: skip


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_CASES else n for n in sorted(CASES)],
)
def test_benchmark_runs_quick(name):
    args, expected, devices = CASES[name]
    out, seconds = run_script(name, args, devices)
    assert expected in out, out[-2000:]
    assert "WARNING" not in out, out[-2000:]  # e.g. a compilation inside a timed section


@pytest.mark.slow
def test_potential_benchmark_runs_quick_with_hmc():
    out, _ = run_script("potential", ["--quick"], None)
    assert "target HMC per gradient" in out and "WARNING" not in out, out[-2000:]


def test_vs_blackjax_skips_cleanly_without_blackjax(tmp_path):
    """Without blackjax the script says so and exits 0 (blackjax is not a dependency)."""
    (tmp_path / "blackjax.py").write_text("raise ImportError('not installed')\n")
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(tmp_path))
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "vs_blackjax.py"), "--quick"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "blackjax is not installed" in proc.stdout


@pytest.mark.slow  # ~60-90 s on 2 busy cores: two HMC compilations and an Adam loop
def test_reference_convergence_benchmark_runs_quick(monkeypatch):
    from conftest import UCI_DIR

    if not (UCI_DIR / "yacht").is_dir():
        pytest.skip(f"no UCI data at {UCI_DIR}")
    monkeypatch.setenv("BNN_PPL_DATA", str(UCI_DIR))
    out, _ = run_script("reference_convergence", ["--quick"], None)
    assert "function-space check: R-hat max" in out and "MAP (Adam" in out, out[-2000:]


@pytest.mark.slow  # two reference_hmc compilations (learned and fixed noise), ~90 s of CPU
def test_noise_funnel_benchmark_runs_quick(monkeypatch):
    from conftest import UCI_DIR

    if not (UCI_DIR / "yacht").is_dir():
        pytest.skip(f"no UCI data at {UCI_DIR}")
    monkeypatch.setenv("BNN_PPL_DATA", str(UCI_DIR))
    out, _ = run_script("noise_funnel", ["--quick"], None)
    assert "noise learned" in out and "noise fixed 0.05" in out and "scale gap" in out, out[-2000:]


def test_gpu_kernel_profile_reproduces_the_recorded_h200_profile(monkeypatch):
    """``gpu.py``'s trace summary, re-run on the H200 trace kept in ``benchmarks/gpu_runs``,
    gives the profile recorded in that run's JSONL (RESULTS.md quotes it): no GPU needed."""
    import json

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import gpu

    runs = ROOT / "benchmarks" / "gpu_runs"
    records = [json.loads(line) for line in (runs / "h200_run3.jsonl").read_text().splitlines()]
    recorded = next(r for r in records if r["section"] == "profile")
    wall_s = recorded["wall_ms_per_call"] * recorded["calls"] / 1e3
    got = gpu.kernel_profile(runs / "h200_run3_resnet_trace.json.gz", recorded["calls"], wall_s)
    for field in ("kernel_ms_per_call", "by_kind_ms_per_call", "top_kernels", "kernel_lines"):
        assert got[field] == recorded[field], field
    assert got["by_kind_ms_per_call"]["convolution"] > 0.6 * got["kernel_ms_per_call"]

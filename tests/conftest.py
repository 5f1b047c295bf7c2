"""Shared test set-up: CPU only, a persistent compilation cache, and small helpers."""

from __future__ import annotations

import contextlib
import gc
import os
import resource
import signal
import subprocess
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# XLA's backend at optimization level 0, without LLVM's expensive passes: the suite's programs
# are tiny and run for milliseconds, so compiling them is most of its time (measured on four of
# the slowest tests, fresh cache: 93-96 s of CPU at the default level, 79 s at this one; see
# benchmarks/RESULTS.md, "Test suite time"). Set in the environment, so the child processes of
# tests (examples, the CLI's SIGKILL run) compile the same way and share the persistent cache.
_NO_OPT = "JAX_DISABLE_MOST_OPTIMIZATIONS"
os.environ.setdefault(_NO_OPT, "1")

import jax  # noqa: E402
import pytest  # noqa: E402

# ...and in this process too: pytest imports bnn_ppl (and so JAX, which reads the variable once,
# at import) to resolve the warning categories of the ini's filterwarnings before this file
# runs, so the variable alone left the test processes at the default level and their children
# at level 0 (draws that differ in the last bit between a test and its child process)
jax.config.update("jax_disable_most_optimizations", os.environ[_NO_OPT] not in ("0", "false", ""))

ROOT = Path(__file__).resolve().parents[1]
# the UCI standard splits: ../shared/data/uci beside the checkout, or $BNN_PPL_DATA (a checkout
# elsewhere, e.g. a git worktree)
UCI_DIR = Path(os.environ.get("BNN_PPL_DATA") or ROOT.parent / "shared" / "data" / "uci")

jax.config.update("jax_compilation_cache_dir", str(ROOT / ".jax_cache"))
# bnn_ppl's own default (fit, the CLI) in the tests and their child processes: never the
# user's ~/.cache
os.environ.setdefault("BNN_PPL_CACHE_DIR", str(ROOT / ".jax_cache"))
# every program, however quick to compile: the suite's tail of small tests compiles hundreds of
# small programs each, most of them again in the other xdist worker, in child processes, or by a
# later test that builds the same sampler afresh (measured: the CLI's tiny HMC run repeated in a
# fresh process, 25 s of CPU with the default 1 s threshold, 14 s with none)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)


def _atomic_cache_writes() -> bool:
    """Make the persistent cache's writes atomic in this process (temp file + rename).

    JAX's ``LRUCache.put`` (without eviction) writes an entry in place, so the other xdist
    worker can read it half-written: JAX then warns ("Error reading persistent compilation cache
    entry ... incomplete or truncated stream") and compiles instead, which is harmless unless
    the test turned warnings into errors (``warnings.simplefilter("error")``, as some do) — a
    failure that depends on timing. A private class of JAX: if it has changed, nothing is
    patched (``False``) and the race is back, not an error.
    """
    try:
        from jax._src import lru_cache
    except ImportError:
        return False
    cls, suffix = getattr(lru_cache, "LRUCache", None), getattr(lru_cache, "_CACHE_SUFFIX", None)
    put = getattr(cls, "put", None)
    if put is None or suffix is None or getattr(put, "_bnn_ppl_atomic", False):
        return put is not None and suffix is not None

    def atomic_put(self, key: str, value: bytes) -> None:
        if getattr(self, "eviction_enabled", True) or not key:
            return put(self, key, value)  # (with eviction JAX locks reads and writes itself)
        path = self.path / f"{key}{suffix}"
        if path.exists():
            return None
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(value)
        os.replace(tmp, path)  # readers see no entry or the whole entry
        return None

    atomic_put._bnn_ppl_atomic = True
    cls.put = atomic_put
    return True


ATOMIC_CACHE_WRITES = _atomic_cache_writes()


def subprocess_env(**extra: str) -> dict[str, str]:
    """The environment for a child Python process of a test: this one's, on the CPU, sharing
    the tests' persistent compilation cache (most of a tiny run is XLA compilation, and a
    program another test compiled is read back instead), plus ``extra``."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.setdefault("JAX_COMPILATION_CACHE_DIR", str(jax.config.jax_compilation_cache_dir))
    env.setdefault(
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS",
        str(jax.config.jax_persistent_cache_min_compile_time_secs),
    )
    return {**env, **extra}


CRASH_SIGNALS = (signal.SIGSEGV, signal.SIGBUS)
"""Signals by which a child Python process crashes in native code (XLA's compiler or runtime,
not Python: a Python error exits with a status, an XLA check failure aborts)."""


def run_child(args: list[str], node: pytest.Item, **kwargs: Any) -> subprocess.CompletedProcess:
    """``subprocess.run(args, **kwargs)`` with Python's fault handler on in the child; a child
    killed by one of :data:`CRASH_SIGNALS` is run once more. The crash, with the fault
    handler's traceback, is kept on the test's report and listed in the run's summary
    (``pytest_terminal_summary``), so that a crash the second run does not repeat is seen, not
    lost; a second crash is the test's result."""
    env = {**(kwargs.pop("env", None) or os.environ), "PYTHONFAULTHANDLER": "1"}
    result = subprocess.run(args, env=env, **kwargs)
    if -result.returncode in CRASH_SIGNALS:
        err = result.stderr if isinstance(result.stderr, str) else (result.stderr or b"").decode()
        node.user_properties.append(
            ("child_crash", f"{signal.Signals(-result.returncode).name}, run again:\n{err[-3000:]}")
        )
        result = subprocess.run(args, env=env, **kwargs)
    return result


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Lists every child process that crashed in native code and was run again (see
    :func:`run_child`), whatever the test's outcome."""
    crashes = [
        (report.nodeid, text)
        for reports in terminalreporter.stats.values()
        for report in reports
        if getattr(report, "when", None) == "call"
        for name, text in getattr(report, "user_properties", ())
        if name == "child_crash"
    ]
    if crashes:
        terminalreporter.section("child processes that crashed and were run again")
        for nodeid, text in crashes:
            terminalreporter.write_line(f"{nodeid}: {text}")


def sigkill_when(proc: subprocess.Popen, path: Path, timeout: float = 300.0) -> None:
    """SIGKILL the child ``proc`` as soon as ``path`` exists (a checkpoint's commit record)
    and check that the kill, not an exit, ended it and that ``path`` was written."""
    deadline = time.monotonic() + timeout
    while not path.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()[-2000:]
    assert path.exists()


@contextlib.contextmanager
def count_compiles() -> Iterator[list[str]]:
    """Every lowering to XLA, backend compilation or persistent-cache hit inside the block.

    A program read from the persistent compilation cache records no backend compilation, but
    it was lowered first, which is recorded here. (Tracing alone, as ``jax.eval_shape`` does,
    is not counted.)
    """
    events: list[str] = []
    watched = {
        "/jax/core/compile/jaxpr_to_mlir_module_duration",
        "/jax/core/compile/backend_compile_duration",
    }

    def on_duration(event: str, duration: float, **kwargs: object) -> None:
        if event in watched:
            events.append(event)

    def on_event(event: str, **kwargs: object) -> None:
        if event == "/jax/compilation_cache/cache_hits":
            events.append(event)

    jax.monitoring.register_event_duration_secs_listener(on_duration)
    jax.monitoring.register_event_listener(on_event)
    try:
        yield events
    finally:
        jax.monitoring.unregister_event_duration_listener(on_duration)
        jax.monitoring.unregister_event_listener(on_event)


def _cpu_seconds() -> float:
    """User + system CPU of this process and of its children that have been waited for."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _count_lines(path: str) -> int | None:
    """The number of lines of ``path`` (``None`` if it cannot be read: not Linux)."""
    try:
        with open(path, "rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return None


def _map_budget() -> int | None:
    """A third of the kernel's limit on one process's memory mappings (``vm.max_map_count``,
    65,530 by default; ``None`` where there is no such file)."""
    try:
        with open("/proc/sys/vm/max_map_count") as f:
            return int(f.read()) // 3
    except (OSError, ValueError):
        return None


class ReleaseCompiledPrograms:
    """Clears JAX's in-memory caches after a test file when this process holds more than
    ``budget`` memory mappings.

    Every program JAX compiles stays loaded while its caches hold it, and at XLA's optimisation
    level 0 (above) one reference-run program maps thousands of regions: an xdist worker
    reached ~63,600 of Linux's 65,530 by 85 % of the suite (2026-11-27), and past the limit XLA
    segfaults while compiling or loading a program - in a different test each run (seen in
    three runs: doctests of ``inference/mcmc/kernels.py``, ``inference/checkpoint/fit.py`` and
    ``bnn_ppl/model.py``). ``jax.clear_caches()`` and a collection release them (measured:
    ``tests/test_reference_checkpoint.py`` alone, 18,279 -> 1,061); later tests read their
    programs back from the persistent cache. Registered as a plugin, not a conftest hook, so
    that it also runs after the doctest modules outside ``tests/``."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.clears = 0

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_teardown(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> Iterator[None]:
        yield  # (the file's module fixtures are torn down by now when the next test is elsewhere)
        if nextitem is not None and nextitem.path == item.path:
            return
        mappings = _count_lines("/proc/self/maps")
        if mappings is not None and mappings > self.budget:
            jax.clear_caches()
            gc.collect()
            self.clears += 1


def pytest_configure(config: pytest.Config) -> None:
    budget = _map_budget()
    if budget is not None and _count_lines("/proc/self/maps") is not None:
        config.pluginmanager.register(ReleaseCompiledPrograms(budget), "release_compiled")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """With ``BNN_PPL_TEST_CPU_LOG=path``, append each test's CPU seconds (set-up, call and
    tear-down, child processes included; a module fixture counts towards its first test) and
    node id, tab-separated, to ``path``: unlike ``--durations``, CPU time hardly depends on how
    busy the machine is, so it compares runs on a shared machine (README, "Testing")."""
    path = os.environ.get("BNN_PPL_TEST_CPU_LOG")
    start = _cpu_seconds() if path else 0.0
    yield
    if path:
        with open(path, "a") as f:
            f.write(f"{_cpu_seconds() - start:.2f}\t{item.nodeid}\n")


def fake_sampling_clock(monkeypatch: pytest.MonkeyPatch, seconds_per_draw: float,
                        clocked: tuple[types.ModuleType, ...],
                        sampler: types.ModuleType) -> list[float]:  # fmt: skip
    """Replace ``time`` in each module of ``clocked`` by a fake clock on which every draw (or
    warmup iteration) that ``sampler.continue_chains`` runs takes ``seconds_per_draw`` and
    nothing else takes any time; returns the clock's reading (a one-element list)."""
    now = [0.0]
    clock = types.SimpleNamespace(monotonic=lambda: now[0])
    for module in clocked:
        monkeypatch.setattr(module, "time", clock)
    original = sampler.continue_chains

    def timed(mcmc, pot, state, n, fields):
        now[0] += seconds_per_draw * n
        original(mcmc, pot, state, n, fields)

    monkeypatch.setattr(sampler, "continue_chains", timed)
    return now


@contextlib.contextmanager
def jax_flag(name: str, value: object) -> Iterator[None]:
    """Set the JAX configuration option ``name`` inside the block, restoring it afterwards."""
    prev = jax.config.read(name)
    jax.config.update(name, value)
    try:
        yield
    finally:
        jax.config.update(name, prev)


@pytest.fixture(autouse=True)
def _xla_optimised_when_run_bound(request: pytest.FixtureRequest) -> Iterator[None]:
    """Tests marked ``run_bound`` (long vectorised chains: running, not compiling, is their
    time) compile with XLA's optimisations on, in this process and in its children; every
    other test at level 0 (above): the whole suite takes 1,352 s of CPU optimised and 978 s at
    level 0, these two files 156 s at level 0 and 125 s marked (benchmarks/RESULTS.md, "Test
    suite time: run-bound tests")."""
    if request.node.get_closest_marker("run_bound") is None:
        yield
        return
    request.getfixturevalue("monkeypatch").setenv(_NO_OPT, "0")
    with jax_flag("jax_disable_most_optimizations", False):
        yield


@pytest.fixture
def x64() -> Iterator[None]:
    """Run a test with 64-bit JAX, restoring the previous setting afterwards."""
    with jax_flag("jax_enable_x64", True):
        yield

"""The test suite's own machinery (``tests/conftest.py``) that the suite depends on to pass."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import types
from pathlib import Path

import jax
import pytest
from conftest import ReleaseCompiledPrograms, run_child


def _teardown(plugin: ReleaseCompiledPrograms, item: object, nextitem: object) -> None:
    """Drive the plugin's teardown hook wrapper as pytest would, around an empty teardown."""
    hook = plugin.pytest_runtest_teardown(item, nextitem)
    next(hook)
    with contextlib.suppress(StopIteration):
        next(hook)


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="Linux's /proc/self/maps")
def test_compiled_programs_are_released_after_a_file_once_over_the_mapping_budget():
    """JAX's caches are cleared after the last test of a file, only when the process holds more
    memory mappings than the budget (an xdist worker passed Linux's limit and XLA segfaulted)."""
    f = jax.jit(lambda x: x + 1.0)
    f(1.0)
    assert f._cache_size() == 1
    a, b = (types.SimpleNamespace(path=Path(name)) for name in ("test_a.py", "test_b.py"))
    plugin = ReleaseCompiledPrograms(budget=10**9)
    _teardown(plugin, a, b)  # a file ends, under the budget: kept
    assert f._cache_size() == 1 and plugin.clears == 0
    plugin.budget = 0
    _teardown(plugin, a, a)  # over the budget, but the file goes on: kept
    assert f._cache_size() == 1 and plugin.clears == 0
    _teardown(plugin, a, None)  # the last test of the run: released
    assert f._cache_size() == 0 and plugin.clears == 1
    f(1.0)  # (and compiled again on demand)
    assert f._cache_size() == 1


def test_the_persistent_cache_writes_entries_whole(tmp_path):
    """conftest makes JAX's cache writes a temp file + rename, so the other xdist worker never
    reads a half-written entry (and a test that turns warnings into errors cannot fail on
    JAX's "truncated stream" warning)."""
    import conftest
    from jax._src import lru_cache

    assert conftest.ATOMIC_CACHE_WRITES
    cache = lru_cache.LRUCache(str(tmp_path), max_size=-1)
    cache.put("k", b"x" * 1000)
    assert cache.get("k") == b"x" * 1000
    cache.put("k", b"other")  # an existing entry is kept, as JAX's put keeps it
    assert cache.get("k") == b"x" * 1000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k-cache"]  # no temporary left


def test_a_child_that_crashes_in_native_code_is_run_once_more_and_the_crash_reported(
    tmp_path: Path,
):
    """A child killed by SIGSEGV is run again; the crash, with the fault handler's traceback,
    stays on the test's report. A child that crashes twice returns the crash."""
    once = (
        "import ctypes, os, sys\n"
        "if not os.path.exists(sys.argv[1]):\n"
        "    open(sys.argv[1], 'w').close()\n"
        "    ctypes.string_at(0)\n"  # a read at address 0: SIGSEGV in native code
        "print('ran')\n"
    )
    node = types.SimpleNamespace(user_properties=[])
    args = [sys.executable, "-c", once, str(tmp_path / "crashed")]
    result = run_child(args, node, capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout == "ran\n"
    [(name, text)] = node.user_properties
    assert name == "child_crash" and text.startswith("SIGSEGV, run again")
    assert "Segmentation fault" in text  # the fault handler's report of the first run

    node.user_properties.clear()
    always = [sys.executable, "-c", "import ctypes; ctypes.string_at(0)"]
    result = run_child(always, node, capture_output=True)
    assert result.returncode == -signal.SIGSEGV and len(node.user_properties) == 1
    # an ordinary failure is not run again
    result = run_child([sys.executable, "-c", "raise SystemExit(3)"], node)
    assert result.returncode == 3 and len(node.user_properties) == 1

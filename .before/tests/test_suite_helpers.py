"""The test suite's own machinery (``tests/conftest.py``) that the suite depends on to pass."""

from __future__ import annotations

import contextlib
import os
import types
from pathlib import Path

import jax
import pytest
from conftest import ReleaseCompiledPrograms


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

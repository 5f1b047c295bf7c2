"""The persistent compilation cache that ``fit`` and the CLI turn on: where, off, and reuse."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import pytest

from bnn_ppl import compile_cache
from bnn_ppl.compile_cache import cache_dir, use_persistent_cache
from bnn_ppl.validation import InputValueError


def test_cache_dir_follows_the_setting_the_variable_and_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("BNN_PPL_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "bnn_ppl" / "jax"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "bnn_ppl" / "jax"
    monkeypatch.setenv("BNN_PPL_CACHE_DIR", str(tmp_path / "moved"))
    assert cache_dir() == tmp_path / "moved"
    assert cache_dir(tmp_path / "given") == tmp_path / "given"  # the option wins
    for off in ("off", "OFF", "none", "0", "false"):
        monkeypatch.setenv("BNN_PPL_CACHE_DIR", off)
        assert cache_dir() is None
        assert cache_dir(tmp_path / "given") == tmp_path / "given"
        assert cache_dir(off) is None


@pytest.fixture
def jax_cache_unset(monkeypatch):
    """JAX's cache options as a user's fresh process has them; restored afterwards."""
    names = (
        "jax_compilation_cache_dir",
        "jax_compilation_cache_max_size",
        "jax_persistent_cache_min_compile_time_secs",
        "jax_enable_compilation_cache",
    )
    saved = {n: getattr(jax.config, n) for n in names}
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    jax.config.update("jax_compilation_cache_dir", None)
    jax.config.update("jax_compilation_cache_max_size", -1)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
    try:
        yield
    finally:
        for n, v in saved.items():
            jax.config.update(n, v)


def test_use_persistent_cache_sets_jax_up_unless_it_is_configured(
    jax_cache_unset, monkeypatch, tmp_path
):
    monkeypatch.setenv("BNN_PPL_CACHE_DIR", "off")
    assert use_persistent_cache() is None
    assert jax.config.jax_compilation_cache_dir is None

    monkeypatch.setenv("BNN_PPL_CACHE_DIR", str(tmp_path / "c"))
    assert use_persistent_cache() == tmp_path / "c"
    assert jax.config.jax_compilation_cache_dir == str(tmp_path / "c")
    assert (tmp_path / "c").is_dir() and (tmp_path / "c").stat().st_mode & 0o077 == 0
    assert jax.config.jax_compilation_cache_max_size == compile_cache.MAX_BYTES  # locked, LRU
    assert jax.config.jax_persistent_cache_min_compile_time_secs < 1.0

    # configured now (as a user's own jax_compilation_cache_dir would be): left alone
    assert use_persistent_cache(tmp_path / "other") == tmp_path / "c"
    assert jax.config.jax_compilation_cache_dir == str(tmp_path / "c")
    assert not (tmp_path / "other").exists()


def test_a_user_setting_of_jax_wins(jax_cache_unset, monkeypatch, tmp_path):
    monkeypatch.setenv("BNN_PPL_CACHE_DIR", str(tmp_path / "ours"))
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "theirs"))
    use_persistent_cache()
    assert jax.config.jax_compilation_cache_dir is None and not (tmp_path / "ours").exists()
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR")
    jax.config.update("jax_enable_compilation_cache", False)
    assert use_persistent_cache() is None
    assert jax.config.jax_compilation_cache_dir is None


def test_a_folder_that_cannot_be_made_is_an_input_error(jax_cache_unset, tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputValueError, match="BNN_PPL_CACHE_DIR"):
        use_persistent_cache(tmp_path / "file" / "cache")


_CHILD = """
import json, sys, jax, numpy as np
hits = []
jax.monitoring.register_event_listener(
    lambda e, **k: hits.append(e) if e == "/jax/compilation_cache/cache_hits" else None)
import bnn_ppl as bp
from bnn_ppl.config import MAPConfig
from bnn_ppl.models import MLP
x = np.linspace(-1, 1, 16, dtype=np.float32)[:, None]
model = bp.BNN(MLP(hidden=(2,), out=1), bp.priors.Normal(1.0), bp.likelihoods.Gaussian(0.3))
post = bp.inference.fit(model, (x, x[:, 0]), MAPConfig(num_steps=5), jax.random.key(0))
print(json.dumps({"hits": len(hits), "dir": jax.config.jax_compilation_cache_dir,
                  "loss": float(np.asarray(post.trace["final_loss"]).sum())}))
"""


def test_a_rerun_reads_its_programs_back(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}
    env |= {"JAX_PLATFORMS": "cpu", "BNN_PPL_CACHE_DIR": str(tmp_path / "cache")}

    def run() -> dict:
        proc = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True,
                              text=True, timeout=600)  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-2000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])

    first, second = run(), run()
    assert first["dir"] == str(tmp_path / "cache") and first["hits"] == 0
    assert any(Path(tmp_path / "cache").glob("*-cache"))
    assert second["hits"] > 0  # compiled programs read back, not compiled
    assert second["loss"] == first["loss"]  # same seed, same result

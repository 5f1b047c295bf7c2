"""Live progress bars: on at a terminal, off in CI and when not a terminal, and never a change
in the results (the same draws, bit for bit, with the bar as without)."""

from __future__ import annotations

import io
import sys

import jax
import numpy as np
import pytest
from conjugate import data, linear_model

from bnn_ppl import config as cfg
from bnn_ppl.inference import fit
from bnn_ppl.inference import progress_bar as pb
from bnn_ppl.validation import InputTypeError

KEY = jax.random.key(3)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_default_is_on_at_a_terminal_outside_ci(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setattr(sys, "stderr", _Terminal())
    assert pb.default_progress_bar() and pb.check_progress_bar(None)
    monkeypatch.setenv("CI", "true")
    assert not pb.default_progress_bar() and not pb.check_progress_bar(None)
    monkeypatch.delenv("CI")
    monkeypatch.setattr(sys, "stderr", io.StringIO())  # a file or a pipe: no bar
    assert not pb.default_progress_bar()
    assert pb.check_progress_bar(True) and not pb.check_progress_bar(False)
    with pytest.raises(InputTypeError, match="progress_bar"):
        pb.check_progress_bar("yes")


def _fit(config, bar, capsys, test_data=False, **kwargs):
    x, y = data(n=24)
    d = (x, y, x[:5], y[:5]) if test_data else (x, y)
    capsys.readouterr()
    post = fit(linear_model(), d, config, KEY, progress_bar=bar, **kwargs)
    return post, capsys.readouterr().err


def _same(a, b, rtol=0.0):
    """Bit for bit (``rtol=0``), or to ``rtol`` relative to each array's largest magnitude."""

    def check(x, y, name):
        if rtol == 0.0:
            np.testing.assert_array_equal(x, y, err_msg=name)
        else:
            scale = max(float(np.max(np.abs(x))), 1e-30)
            np.testing.assert_allclose(x, y, rtol=0, atol=rtol * scale, err_msg=name)

    assert a.samples.keys() == b.samples.keys()
    for k in a.samples:
        check(a.samples[k], b.samples[k], k)
    for k in a.sample_stats:
        check(a.sample_stats[k], b.sample_stats[k], k)


CONFIGS = {
    "nuts": (cfg.NUTSConfig(num_warmup=20, num_samples=15, num_chains=2, max_tree_depth=4),
             ["warmup", "sample"]),
    "hmc": (cfg.HMCConfig(num_warmup=20, num_samples=15), ["warmup", "sample"]),
    "svi": (cfg.SVIConfig(num_steps=40, map_steps=20, num_samples=5), ["map", "svi", "ELBO"]),
    "map": (cfg.MAPConfig(num_steps=40), ["map", "loss"]),
    "ensemble": (cfg.EnsembleConfig(num_steps=40, num_members=2), ["ensemble", "loss"]),
    "sghmc": (cfg.SGHMCConfig(num_warmup=1, num_samples=3, cycle_length=10, batch_size=8,
                              map_steps=20, num_chains=1), ["map", "sample", "T_kin"]),
}  # fmt: skip


# (3 cycles of 10 steps from a 20-step MAP are too short to be accurate: not the point here)
_NOT_ACCURATE = pytest.mark.filterwarnings("ignore::bnn_ppl.inference.SGMCMCAccuracyWarning")


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=_NOT_ACCURATE) if n == "sghmc" else n for n in CONFIGS]
)
def test_bar_shows_when_on_and_changes_no_draw(name, capsys, monkeypatch):
    monkeypatch.setenv("CI", "true")  # asked for explicitly, a bar shows even in CI
    config, words = CONFIGS[name]
    off, quiet = _fit(config, False, capsys)
    on, shown = _fit(config, True, capsys)
    assert "%|" not in quiet and "it/s" not in quiet
    assert "%|" in shown, shown[-500:]
    for word in words:
        assert word in shown, (word, shown[-800:])
    # SG-MCMC under NumPyro's bar: separate step programs, float32 rounding may differ
    _same(off, on, rtol=1e-6 if name == "sghmc" else 0.0)


def test_checkpointed_run_shows_warmup_and_segments_with_the_same_draws(
    capsys, tmp_path, monkeypatch
):
    monkeypatch.delenv("CI", raising=False)
    c = cfg.NUTSConfig(num_warmup=20, num_samples=12, num_chains=2, max_tree_depth=4)
    off, quiet = _fit(c, False, capsys, checkpoint_dir=tmp_path / "a", checkpoint_every=6)
    on, shown = _fit(c, True, capsys, checkpoint_dir=tmp_path / "b", checkpoint_every=6)
    assert "%|" not in quiet
    assert shown.count("sample") >= 2 and "warmup" in shown  # warmup, then one bar a segment
    _same(off, on)


def test_default_bar_is_off_when_stderr_is_not_a_terminal(capsys):
    _, err = _fit(cfg.MAPConfig(num_steps=20), None, capsys)
    assert "%|" not in err


def test_reference_run_bar_shows_draws_and_converged_shares(capsys):
    import warnings

    from bnn_ppl.diagnostics import StuckChainWarning
    from bnn_ppl.inference import ReferenceNotConvergedWarning

    c = cfg.ReferenceHMCConfig(num_chains=2, num_warmup=20, segment_draws=10, max_draws=20)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ReferenceNotConvergedWarning)  # (20 draws: not the point)
        warnings.simplefilter("ignore", StuckChainWarning)  # (nor is a 20-step warmup's chain)
        off, quiet = _fit(c, False, capsys, test_data=True)
        on, shown = _fit(c, True, capsys, test_data=True)
    assert "%|" not in quiet
    assert "reference_hmc" in shown and "20/20" in shown and "R-hat ok" in shown
    _same(off, on)


def test_loop_bar_counts_vmapped_members_as_one_step(capsys):
    import jax.numpy as jnp

    with pb.loop_bar(10, "demo", True, every=5, members=2) as tick:

        def run(v):
            def body(c, i):
                tick(i, c)
                return c + 1.0, c

            return jax.lax.scan(body, v, jnp.arange(10))[1]

        out = jax.jit(jax.vmap(run))(jnp.array([0.0, 10.0]))
    err = capsys.readouterr().err
    assert "10/10" in err and "loss 14" in err  # step 9: members at 9 and 19, mean 14
    np.testing.assert_array_equal(out[0], np.arange(10.0))

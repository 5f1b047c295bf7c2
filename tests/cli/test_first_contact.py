"""What a new user meets first: the CLI's help and errors, NUTS's tree-depth hint, a NumPyro
model's signature clash, the R-hat figure's axis, the LICENSE."""

from __future__ import annotations

import hashlib
import warnings
from pathlib import Path

import jax
import numpy as np
import pytest

from bnn_ppl import cli
from bnn_ppl.cli.console import count
from bnn_ppl.cli.parser import parse_run, plain_text
from bnn_ppl.inference.mcmc.checks import TreeDepthWarning, warn_if_saturated
from bnn_ppl.validation import InputTypeError

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--model", "mlp", "--width", "4", "--dataset", "digits", "--max-train", "100"]


def _main(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = cli.main(list(args))
    got = capsys.readouterr()
    return rc, got.out, got.err


# ------------------------------------------------------------------------------------- CLI
@pytest.mark.parametrize("method", ["svi", "map", "nuts", "atmc", "reference_hmc"])
def test_help_has_no_restructured_text_markup(method, capsys):
    rc, out, _ = _main(capsys, "run", method, "--help")
    assert rc == 0 and "options" in out
    for markup in (":func:", ":class:", ":mod:", ":data:", "``"):
        assert markup not in out, (markup, method)
    assert "--progress, --no-progress" in out


def test_plain_text_strips_roles_and_literals():
    text = "see :func:`~bnn_ppl.inference.svi_mean_field` and ``map_steps > 0`` (:mod:`a.b`)"
    assert plain_text(text) == "see svi_mean_field and map_steps > 0 (a.b)"


@pytest.mark.parametrize("method", ["svi", "map"])
def test_one_chain_methods_show_and_take_no_chain_option(method, capsys):
    _, out, _ = _main(capsys, "run", method, "--help")
    assert "--chain-batching" not in out and "--num-chains" not in out
    rc, _, err = _main(capsys, "run", method, "--chain-batching", "sequential", "--out", "x")
    assert rc == 2 and "--chain-batching does not apply to bnn-ppl run " + method in err
    _, out, _ = _main(capsys, "run", "ensemble", "--help")  # members: it applies
    assert "--chain-batching" in out


def test_a_mistyped_method_or_command_gets_did_you_mean(capsys, tmp_path):
    rc, _, err = _main(capsys, "run", "nust", "--out", str(tmp_path / "x"))
    assert rc == 2 and "did you mean 'nuts'?" in err
    rc, _, err = _main(capsys, "evalute", "runs/x")
    assert rc == 2 and "did you mean 'evaluate'?" in err
    rc, _, err = _main(capsys, "run", "zzz", "--out", str(tmp_path / "x"))
    assert rc == 2 and "did you mean" not in err and "one of hmc, nuts" in err


def test_one_chain_is_singular():
    assert (count(1, "chain"), count(2, "chain"), count(1, "draw")) == ("1 chain", "2 chains",
                                                                       "1 draw")  # fmt: skip
    from bnn_ppl.cli.run import _plan

    s = parse_run(["nuts", "--num-chains", "1", "--out", "x"])
    assert _plan(s).startswith("nuts: 1 chain x (")


def test_progress_flag_is_unset_unless_given_and_never_recorded():
    assert parse_run(["map", "--out", "x"]).options.progress is None
    assert parse_run(["map", "--progress", "--out", "x"]).options.progress is True
    s = parse_run(["map", "--no-progress", "--out", "x"])
    assert s.options.progress is False and "progress" not in s.arguments()


def test_cli_run_shows_a_bar_with_progress_and_none_without(capsys, tmp_path):
    args = ["run", "map", *TINY, "--num-steps", "20"]
    rc, _, err = _main(capsys, *args, "--progress", "--out", str(tmp_path / "a"))
    assert rc == 0 and "map: 100%" in err and "loss" in err, err
    rc, _, err = _main(capsys, *args, "--no-progress", "--out", str(tmp_path / "b"))
    assert rc == 0 and "%|" not in err


# ------------------------------------------------------------------------- NUTS tree depth
def test_saturated_trees_warn_naming_max_tree_depth_and_step_size():
    full = 2**4 - 1
    steps = np.array([[full] * 8 + [3] * 2, [full] * 3 + [7] * 7])  # chain 0: 80 % at the depth
    with pytest.warns(TreeDepthWarning) as caught:
        warn_if_saturated(steps, 4, [0.01, 0.2])
    text = str(caught[0].message)
    assert "max_tree_depth=4 (15 leapfrog steps) on 80% of the draws of chain 0" in text
    assert "step size 0.01" in text and "Raise max_tree_depth" in text
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_if_saturated(steps[1:], 4)  # 30 %: no warning
        warn_if_saturated(steps, None)  # HMC: nothing to check
        warn_if_saturated(steps, (10, 6))  # (warmup, sampling) depth: sampling's, 6


def test_nuts_whose_trees_hit_the_depth_warns():
    from conjugate import data, linear_model

    from bnn_ppl.inference import nuts

    x, y = data(n=24)
    with pytest.warns(TreeDepthWarning, match="max_tree_depth=1"):
        mcmc = nuts(linear_model(), x, y, num_warmup=10, num_samples=10, max_tree_depth=1,
                    rng_key=jax.random.key(0), progress_bar=False)  # fmt: skip
    # the progress bar's figures say it too, for a NUTS kernel in the user's own MCMC
    assert "(max_tree_depth=1 reached)" in mcmc.sampler.get_diagnostics_str(mcmc.last_state)


# --------------------------------------------------------------- a NumPyro model's signature
def test_model_potential_names_a_positional_keyword_clash():
    import numpyro
    import numpyro.distributions as dist

    from bnn_ppl.inference import model_potential

    def model(X, Y, D_H, D_Y=1):  # NumPyro's examples/bnn.py
        w = numpyro.sample("w", dist.Normal(np.zeros((X.shape[1], D_H), np.float32), 1.0))
        with numpyro.plate("data", X.shape[0]):
            numpyro.sample("Y", dist.Normal((X @ w).sum(-1), 1.0), obs=Y)

    x, y = np.ones((10, 3), np.float32), np.ones(10, np.float32)
    with pytest.raises(InputTypeError) as e:
        model_potential(model, 5, data={"X": x, "Y": y})
    text = str(e.value)
    assert "model(X, Y, D_H, D_Y=1) cannot take model_args (5,)" in text
    assert "multiple values for argument 'X'" in text
    assert "model_kwargs={'D_H': 5} and no model_args" in text
    assert model_potential(model, data={"X": x, "Y": y}, model_kwargs={"D_H": 5}).num_data == 10


# ------------------------------------------------------------------------- R-hat figure, LICENSE
@pytest.mark.parametrize("spread", [0.01, 0.05, 1.0])
def test_rhat_figure_tick_labels_are_plain_and_do_not_overlap(spread):
    from bnn_ppl.plots import rhat_histograms

    rng = np.random.default_rng(0)
    fig = rhat_histograms({"weight space": 1 + np.abs(rng.normal(0, spread, 2000)),
                           "function space": 1 + np.abs(rng.normal(0, spread / 3, 2000))})
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    bottom = fig.axes[-1]  # (the axes share x: the bottom one shows the labels)
    for ax in fig.axes:
        labels = [t for t in ax.get_xticklabels() if t.get_text() and t.get_visible()]
        assert len(labels) >= 2 or ax is not bottom
        for t in labels:
            assert "times" not in t.get_text() and "^" not in t.get_text(), t.get_text()
            float(t.get_text())
        boxes = sorted((t.get_window_extent(renderer) for t in labels), key=lambda b: b.x0)
        for a, b in zip(boxes, boxes[1:], strict=False):
            assert a.x1 < b.x0, (a, b)


def test_license_is_the_apache_2_0_text_pyproject_declares():
    text = (ROOT / "LICENSE").read_bytes()
    # the sha-256 of https://www.apache.org/licenses/LICENSE-2.0.txt
    assert hashlib.sha256(text).hexdigest() == (
        "c71d239df91726fc519c6eb72d318ec65820627232b2f796219e87dcf35d0ab4"
    )
    assert 'license = { text = "Apache-2.0" }' in (ROOT / "pyproject.toml").read_text()

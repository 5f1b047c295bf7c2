"""``examples/sgmcmc.py`` runs end to end with tiny settings, and every number it reports is the
metric recomputed here, independently, from the predictions and draws it saved.

Same conventions and runner as ``tests/test_examples.py`` (``{out}`` stands for a folder in a
fresh temporary working directory); this module keeps its own registries, which
``test_examples.py`` merges for its registration check.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import jax
import numpy as np
import pytest
from numpyro.diagnostics import effective_sample_size
from test_examples import _check_ok, _run, check_run_folders

import bnn_ppl as bp
from bnn_ppl import runs
from bnn_ppl.inference import recommended_step_size
from bnn_ppl.inference.sgmcmc.step_size import GradientScales

METHODS = ("HMC", "ATMC", "SGNHT", "SGHMC", "SGLD")

TINY_FLAGS: dict[str, list[str]] = {
    "sgmcmc.py": [
        "--num-warmup", "10", "--num-samples", "10", "--num-chains", "2", "--width", "8",
        "--max-train", "200", "--trajectory-length", "0.05", "--cycle-length", "20",
        "--burnin-cycles", "1", "--cycles", "3", "--sg-chains", "1", "--batch-size", "30",
        "--cnn-dataset", "none", "--out", "{out}",
    ],
}  # fmt: skip
# the CNN part (LeNet-5 on 60 digits) doubles the run time: with -m slow only
CNN_FLAGS = ["--cnn-dataset", "digits", "--cnn-max-train", "60"]

EXPECTED_ROWS: dict[str, list[str]] = {
    "sgmcmc.py": ["single acc", "BMA acc", "agree", "ESS/kgrad", "w var", "f var", "ATMC",
                  "SGNHT", "SGHMC", "SGLD", "scales at HMC's last draw", "summary.json",
                  "check_accuracy ATMC", "check_accuracy SGLD"],
}  # fmt: skip

TABLE1 = ("single_accuracy", "single_nll", "accuracy", "nll", "agreement", "tv")
SAMPLER = ("step_size", "gradients", "ess", "ess_per_kgrad", "weight_var_ratio",
           "function_var_ratio")  # fmt: skip


def _load(out_dir: Path, part: str) -> tuple[dict, dict, np.ndarray, np.ndarray]:
    """Per method, from its run folder: test probabilities and draws ``(chain, draw, ...)``;
    the test labels and HMC's leapfrog steps per draw."""
    probs, draws = {}, {}
    for m in METHODS:
        run = runs.load_run(out_dir / part / m.lower(), samples=True)
        assert run.chains and run.record["method"] == m.lower()
        probs[m], draws[m], labels = np.asarray(run.predictions), run.samples, run.targets
    post = bp.Posterior.load(out_dir / part / "hmc" / "posterior.nc")
    return probs, draws, labels, np.asarray(post.sample_stats["n_steps"])


def _recompute(probs: dict, draws: dict, labels: np.ndarray, num_steps: np.ndarray,
               payload: dict, part: str) -> dict[str, dict]:
    """Every reported metric, from the saved arrays, with NumPy (float64)."""
    args = payload["args"]
    probs = {m: np.asarray(p, np.float64) for m, p in probs.items()}
    n, k = probs["HMC"].shape[2:]
    rows = np.arange(n)

    def acc(q):
        return np.mean(q.argmax(-1) == labels)

    def nll(q):
        return -np.mean(np.log(np.maximum(q[rows, labels], 1e-12)))

    def tv(a, b):
        return np.mean(0.5 * np.abs(a - b).sum(-1))

    ref = probs["HMC"].reshape(-1, n, k).mean(0)
    out = {}
    for m, p in probs.items():
        flat = p.reshape(-1, n, k)
        bma = flat.mean(0)
        r = {"single_accuracy": np.mean([acc(q) for q in flat]),
             "single_nll": np.mean([nll(q) for q in flat]), "accuracy": acc(bma),
             "nll": nll(bma), "agreement": np.mean(bma.argmax(-1) == ref.argmax(-1)),
             "tv": tv(bma, ref)}  # fmt: skip
        if m == "HMC":
            if len(p) > 1:
                first, rest = p[0].mean(0), p[1:].reshape(-1, n, k).mean(0)
                r["agreement"], r["tv"] = (
                    np.mean(first.argmax(-1) == rest.argmax(-1)),
                    tv(first, rest),
                )
            else:
                r["agreement"] = r["tv"] = math.nan
        p_true = p[..., rows, labels]  # (chains, draws, n)
        r["ess"] = float(np.median(effective_sample_size(p_true)))
        sites = [np.asarray(v, np.float64) for v in draws[m].values()]
        # per chain: mean over weights (or over inputs and classes) of the variance over draws
        w = np.array([np.mean(np.concatenate([a[c].var(0, ddof=1).ravel() for a in sites]))
                      for c in range(len(p))])  # fmt: skip
        f = np.array([p[c].var(0, ddof=1).mean() for c in range(len(p))])
        r["weight_var"], r["function_var"], r["_w"], r["_f"] = w.mean(), f.mean(), w, f
        if m == "HMC":
            r["gradients"] = float(np.sum(num_steps))
            r["step_size"] = math.nan
        else:
            name, limit = (("digits", args["max_train"]) if part == "mlp"
                           else (args["cnn_dataset"], args["cnn_max_train"]))  # fmt: skip
            n_rows = len(bp.data.load(name).x_train[:limit])
            r["gradients"] = (args["cycles"] * args["cycle_length"] * args["sg_chains"]
                              * args["batch_size"] / n_rows)  # fmt: skip
            scales = GradientScales(**payload[part]["scales"])
            r["step_size"] = recommended_step_size(m, scales)
        r["ess_per_kgrad"] = 1000 * r["ess"] / r["gradients"]
        out[m] = r
    for m, r in out.items():
        if m != "HMC":
            r["weight_var_ratio"] = r["weight_var"] / out["HMC"]["weight_var"]
            r["function_var_ratio"] = r["function_var"] / out["HMC"]["function_var"]
        elif len(r["_w"]) > 1:  # HMC: the noise floor, chain 0 against the others
            r["weight_var_ratio"] = r["_w"][0] / r["_w"][1:].mean()
            r["function_var_ratio"] = r["_f"][0] / r["_f"][1:].mean()
        else:
            r["weight_var_ratio"] = r["function_var_ratio"] = math.nan
    return out


EPS32 = float(np.finfo(np.float32).eps)


def _tolerance(key: str, expected: float, shape: tuple) -> float:
    """Table 1's metrics come from bp.metrics in float32: sums over up to ``draws x n`` terms
    (and the BMA's over the draws), all non-negative, so the float32-sum rule gives
    ``3 sqrt(terms) eps32 sum|terms| = 3 sqrt(terms) eps32 |mean| x terms`` for the sum, i.e.
    relative ``3 sqrt(terms) eps32`` for the mean. The sampler columns are computed in float64
    from the same saved arrays by the same formulas: equal to rounding."""
    if key in TABLE1:
        terms = shape[0] * shape[1] * shape[2]  # chains x draws x test inputs
        return 3 * math.sqrt(terms) * EPS32 * abs(expected)
    return 1e-9 * abs(expected)


def _printed_rows(stdout: str) -> dict[str, list[list[str]]]:
    """Per method, its table rows in the order printed (mlp Table 1, mlp samplers, cnn ...)."""
    rows: dict[str, list[list[str]]] = {m: [] for m in METHODS}
    for line in stdout.splitlines():
        cells = line.split()
        if cells and cells[0] in rows and len(cells) == 7:
            rows[cells[0]].append(cells[1:])
    return rows


def _check_sgmcmc(stdout: str, out_dir: Path, variant: str) -> None:
    payload = json.loads((out_dir / "summary.json").read_text())
    parts = ("mlp", "cnn") if variant == "cnn" else ("mlp",)
    assert set(payload) == {"args", *parts}
    # one run folder per (part, method), each passing `bnn-ppl evaluate`
    assert check_run_folders(out_dir) == sorted(f"{p}/{m.lower()}" for p in parts for m in METHODS)
    printed = _printed_rows(stdout)
    for index, part in enumerate(parts):
        results = payload[part]["results"]
        assert payload[part]["diverged"] == []
        assert set(results) == set(METHODS)
        # what check_accuracy found in each SG-MCMC run: printed, in summary.json and in the
        # run folder's metrics.json (the kernels' Info over every sampling step of both chains)
        accuracy = payload[part]["accuracy"]
        assert set(accuracy) == set(METHODS[1:])
        for m, report in accuracy.items():
            record = runs.load_run(out_dir / part / m.lower()).record
            assert record["summary"]["accuracy"] == report
            args = payload["args"]
            assert report["steps"] == args["cycles"] * args["cycle_length"] * args["sg_chains"]
            assert isinstance(report["problems"], list) and 0 <= report["noise_share"]
            assert ("kinetic_temperature" in report) == (m != "SGLD")
            line = next(r for r in stdout.splitlines() if r.startswith(f"  check_accuracy {m}:"))
            assert line.endswith("; ".join(report["problems"]) or "no problems")
        probs, draws, labels, num_steps = _load(out_dir, part)
        want = _recompute(probs, draws, labels, num_steps, payload, part)
        for m in METHODS:
            for key in (*TABLE1, *SAMPLER):
                got, exp = results[m][key], want[m][key]
                if math.isnan(exp):
                    assert math.isnan(got), (part, m, key, got)
                    continue
                assert abs(got - exp) <= _tolerance(key, exp, probs[m].shape), (
                    part, m, key, got, exp)  # fmt: skip
            table, sampler = printed[m][2 * index], printed[m][2 * index + 1]
            for cells, keys in ((table, TABLE1), (sampler, SAMPLER)):
                shown = ["-" if math.isnan(results[m][k]) else f"{results[m][k]:.4g}"
                         for k in keys]  # fmt: skip
                assert cells == shown, (part, m, cells, shown)
    # the saved probabilities are the model's predictions of the saved draws (MLP part)
    args = payload["args"]
    data = bp.data.load("digits")
    model = bp.BNN(bp.models.MLP(hidden=(args["width"],), out=10),
                   bp.priors.Normal(args["prior_scale"]), bp.likelihoods.Categorical())  # fmt: skip
    probs, draws, _, _ = _load(out_dir, "mlp")
    for m in ("HMC", "ATMC"):
        flat = jax.tree.map(lambda a: a.reshape(-1, *a.shape[2:]), dict(draws[m]))
        got = np.asarray(bp.predict(model, flat, data.x_test))
        np.testing.assert_allclose(got, probs[m].reshape(got.shape), rtol=1e-5,
                                   atol=1e-6)  # fmt: skip


CHECKS: dict[str, Callable[[str, Path, str], None]] = {"sgmcmc.py": _check_sgmcmc}


@pytest.mark.parametrize(
    ("script", "variant"),
    # both -m slow (~45 s quiet for the MLP part, mostly compilation): the SG-MCMC recipe, its
    # accuracy summary and run folders are test_fit's and test_cli's in the default suite
    [*(pytest.param(s, "default", marks=pytest.mark.slow) for s in sorted(TINY_FLAGS)),
     pytest.param("sgmcmc.py", "cnn", marks=pytest.mark.slow)],
)  # fmt: skip
def test_example_runs(
    script: str, variant: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    out_dir = tmp_path / "out"
    flags = [f.replace("{out}", str(out_dir)) for f in TINY_FLAGS[script]]
    if variant == "cnn":
        flags = [*flags, *CNN_FLAGS]  # the last --cnn-dataset wins
    proc = _run(script, flags, cwd=tmp_path, node=request.node)
    _check_ok(proc)
    for row in EXPECTED_ROWS[script]:
        assert row in proc.stdout, f"{row!r} not in the output of {script}:\n{proc.stdout}"
    CHECKS[script](proc.stdout, out_dir, variant)

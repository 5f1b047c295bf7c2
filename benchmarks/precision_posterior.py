"""What bfloat16 compute changes in the posterior: BMA against float32, beside chain-to-chain noise.

For digits (MLP, Categorical) and one UCI split (MLP, Gaussian noise), NUTS is run three
times: float32 with seeds 0 and 1, and ``compute_dtype="bfloat16"`` with seed 0. Each run's
Bayesian model average on the test set is computed in float32 (the same model for all, so only
the draws differ). Reported per pair: classification - agreement of the BMA's labels and mean
total variation between the BMA's class probabilities; regression - the mean |difference| of
the BMA's predictive means in units of its predictive sd, and the test RMSE / log-likelihood of
each run. The float32-float32 pair (different seeds) is the chain-to-chain noise; bfloat16 is
within it when its pairs differ no more.

    python benchmarks/precision_posterior.py            # digits and uci/yacht split 0
"""

from __future__ import annotations

import argparse
import time

import _record
import jax
import numpy as np

import bnn_ppl as bp
from bnn_ppl.config import NUTSConfig
from bnn_ppl.inference import fit
from bnn_ppl.models import MLP


def _label(run: str) -> str:
    """``"bf16 s0"`` -> ``"bfloat16 seed 0"`` (the tables' labels)."""
    dtype, seed = run.split()
    return f"{ {'f32': 'float32', 'bf16': 'bfloat16'}[dtype] } seed {seed[1:]}"


def _runs(make, data, config) -> dict:
    out = {}
    for name, dtype, seed in (("f32 s0", None, 0), ("f32 s1", None, 1), ("bf16 s0", "bfloat16", 0)):
        start = time.perf_counter()
        post = fit(make(dtype), data, config, jax.random.key(seed))
        out[name] = (post, time.perf_counter() - start)
    return out


def _digits(config: NUTSConfig, width: int) -> list[list]:
    data = bp.data.load("digits")
    make = lambda dt: bp.BNN(MLP(hidden=(width,), out=10), bp.priors.Normal(0.3),  # noqa: E731
                             bp.likelihoods.Categorical(), compute_dtype=dt)  # fmt: skip
    runs = _runs(make, data, config)
    ref = make(None)
    probs = {k: np.asarray(bp.bma(bp.predict(ref, p.flat_samples(), data.x_test)))
             for k, (p, _t) in runs.items()}  # fmt: skip
    print(
        f"digits, MLP({width}), NUTS {config.num_warmup}+{config.num_samples}, "
        f"depth {config.max_tree_depth}; test rows {len(data.x_test)}"
    )
    for k, (_post, t) in runs.items():
        acc = float(np.mean(probs[k].argmax(1) == data.y_test))
        print(f"  {k:8} test accuracy {acc:.4f}   {t:6.1f} s")
    rows = []
    for a, b in (("f32 s0", "f32 s1"), ("bf16 s0", "f32 s1"), ("bf16 s0", "f32 s0")):
        agree = float(np.mean(probs[a].argmax(1) == probs[b].argmax(1)))
        tv = float(np.mean(0.5 * np.abs(probs[a] - probs[b]).sum(1)))
        print(f"  {a} vs {b}: agreement {agree:.4f}, total variation {tv:.4f}")
        rows.append([f"digits, MLP({width})", f"{_label(a)} vs {_label(b)}", round(agree, 4)])
        rows[-1].append(round(tv, 4))
    return rows


def _uci(config: NUTSConfig, width: int, name: str) -> list[list]:
    data = bp.data.load(f"uci/{name}", split=0)
    make = lambda dt: bp.BNN(MLP(hidden=(width,), out=1), bp.priors.Normal(1.0),  # noqa: E731
                             bp.likelihoods.Gaussian(scale=0.3), compute_dtype=dt)  # fmt: skip
    runs = _runs(make, data, config)
    ref = make(None)
    pred = {k: bp.bma(bp.predict(ref, p.flat_samples(), data.x_test))
            for k, (p, _t) in runs.items()}  # fmt: skip
    y = np.asarray(data.y_test, np.float64).reshape(-1)
    print(
        f"uci/{name} split 0, MLP({width}), NUTS {config.num_warmup}+{config.num_samples}, "
        f"depth {config.max_tree_depth}; test rows {len(y)}"
    )
    rows = []
    for k, (_post, t) in runs.items():
        m, s = np.asarray(pred[k].mean).reshape(-1), np.asarray(pred[k].scale).reshape(-1)
        rmse = float(np.sqrt(np.mean((m - y) ** 2)))
        ll = float(np.mean(-0.5 * ((y - m) / s) ** 2 - np.log(s) - 0.5 * np.log(2 * np.pi)))
        print(f"  {k:8} test RMSE {rmse:.4f}  test LL {ll:.4f} (standardised)   {t:6.1f} s")
        rows.append([f"uci/{name} split 0, MLP({width})", _label(k), round(rmse, 4), round(ll, 4)])
    for a, b in (("f32 s0", "f32 s1"), ("bf16 s0", "f32 s1"), ("bf16 s0", "f32 s0")):
        ma, sa = np.asarray(pred[a].mean).reshape(-1), np.asarray(pred[a].scale).reshape(-1)
        mb = np.asarray(pred[b].mean).reshape(-1)
        print(f"  {a} vs {b}: mean |d mean| / sd {float(np.mean(np.abs(ma - mb) / sa)):.4f}")
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="20 + 20 draws, depth 4")
    p.add_argument("--draws", type=int, default=100, help="warmup iterations and draws")
    p.add_argument("--depth", type=int, default=6)
    p.add_argument("--uci", default="yacht")
    _record.add_flag(p)
    a = p.parse_args(argv)
    n, depth = (20, 4) if a.quick else (a.draws, a.depth)
    config = NUTSConfig(num_warmup=n, num_samples=n, max_tree_depth=depth)
    digits, uci = _digits(config, 16), _uci(config, 50, a.uci)
    if a.record:
        title = f"NUTS {n} warmup + {n} draws, tree depth {depth}, one chain per run"
        columns = ["data", "pair", "agreement", "total variation"]
        _record.record("digits", columns, digits, title=title, to=a.record)
        columns = ["data", "run", "test RMSE", "test LL (standardised)"]
        _record.record("uci", columns, uci, title=title, to=a.record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Benchmark: the running metrics of a run folder's ``progress.jsonl``, per prefix or streamed.

Every run folder writes ``progress.jsonl``: the test metrics of the BMA of the first ``t``
draws of every chain at about 100 values of ``t``. Evaluating
:func:`bnn_ppl.metrics.suite.predictive_metrics` on each prefix (what
:func:`bnn_ppl.progress.running_metrics` did until 2026-11-28) compiles its programs once per
prefix length; :func:`bnn_ppl.metrics.suite.prefix_metrics` computes the same metrics in one
pass with programs of one shape. This times both in one fresh process each time (a first call
is what a run folder pays: the compilations are the cost), on synthetic predictions of a
10-class classifier and of a Gaussian regression, checks that they agree, and prints the ratio.

Usage::

    python benchmarks/progress_metrics.py                # 2 chains x 200 draws, 360 / 100 rows
    python benchmarks/progress_metrics.py --quick        # tiny: a smoke test
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import _timing

CHILD = """
import json, sys, time
import numpy as np
from bnn_ppl.likelihoods import GaussianPrediction
from bnn_ppl.metrics.suite import flat_draws, predictive_metrics, prefix_metrics
from bnn_ppl.progress import _points

way, kind, chains, draws, rows = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
rng = np.random.default_rng(0)
if kind == "classification":
    pred = rng.dirichlet(np.ones(10), size=(chains, draws, rows)).astype(np.float32)
    y = rng.integers(0, 10, rows)
else:
    pred = GaussianPrediction(rng.normal(size=(chains, draws, rows)).astype(np.float32),
                              np.full((chains, draws, rows), 0.5, np.float32))
    y = rng.normal(size=rows).astype(np.float32)
points = _points(draws, None)
t0 = time.perf_counter()
if way == "streamed":
    out = prefix_metrics(pred, y, points, task=kind)
else:
    out = []
    for t in points:
        part = pred[:, :t] if kind == "classification" else GaussianPrediction(
            pred.mean[:, :t], pred.scale[:, :t])
        out.append(predictive_metrics(flat_draws(part, True), y, task=kind))
print(json.dumps({"seconds": time.perf_counter() - t0, "points": len(points), "last": out[-1]}))
"""


def run(way: str, kind: str, args: argparse.Namespace) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, way, kind, str(args.chains), str(args.draws),
         str(args.rows if kind == "classification" else args.regression_rows)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(args: argparse.Namespace) -> None:
    print(_timing.machine())
    for kind in ("classification", "regression"):
        t0 = time.perf_counter()
        per_prefix, streamed = run("per_prefix", kind, args), run("streamed", kind, args)
        rel = max(abs(streamed["last"][k] - v) / max(abs(v), 1e-12)
                  for k, v in per_prefix["last"].items())  # fmt: skip
        print(f"\n## {kind}: {args.chains} chains x {args.draws} draws, {per_prefix['points']} "
              f"points ({time.perf_counter() - t0:.0f} s in all)")  # fmt: skip
        print(f"per prefix (predictive_metrics each point): {per_prefix['seconds']:.2f} s")
        print(f"streamed (prefix_metrics):                  {streamed['seconds']:.2f} s")
        print(f"largest relative difference of the last point's metrics: {rel:.1e}")
        print(f"ratio: per prefix / streamed = {per_prefix['seconds'] / streamed['seconds']:.1f}")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--chains", type=int, default=2)
    p.add_argument("--draws", type=int, default=200)
    p.add_argument("--rows", type=int, default=360, help="test rows of the classifier")
    p.add_argument("--regression-rows", type=int, default=100)
    p.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test")
    args = p.parse_args(argv)
    if args.quick:
        args.draws, args.rows, args.regression_rows = 6, 20, 10
    return args


if __name__ == "__main__":
    main(parse())

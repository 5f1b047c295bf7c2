"""Benchmark: a reference run's convergence check, ArviZ's per-quantity R-hat and bulk ESS
against :func:`bnn_ppl.rank_diagnostics.rhat_bulk_ess` (vectorised over quantities).

After every segment a reference run computes the rank-normalised split R-hat and the bulk
ESS of every test prediction over all draws kept so far: on digits 3,600 probabilities, 4
chains, thousands of draws per chain. This script times both implementations on the same
random ``(4, draws, quantities)`` values, interleaved (``round_robin``: the order rotates each
round, to damp a shared machine's noise), checks that they agree to float64 rounding, and
prints the ratio ArviZ / ours measured in this one process.

Usage::

    python benchmarks/rank_diagnostics.py                 # 4 chains x 1,000 and 4,000 draws x 3,600
    python benchmarks/rank_diagnostics.py --quick         # tiny: a smoke test
"""

from __future__ import annotations

import argparse
import statistics
import warnings

import arviz as az
import numpy as np
from _timing import machine, round_robin

from bnn_ppl.rank_diagnostics import rhat_bulk_ess


def arviz_figures(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """What ``bnn_ppl.diagnostics`` computed before: ArviZ's rank R-hat and bulk ESS."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.asarray(az.rhat(values, method="rank")), np.asarray(az.ess(values, method="bulk"))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--draws", type=int, nargs="+", default=[1000, 4000], help="per chain")
    p.add_argument("--quantities", type=int, default=3600)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test")
    a = p.parse_args()
    if a.quick:
        a.draws, a.quantities, a.rounds = [100], 50, 2
    print(machine())
    rng = np.random.default_rng(0)
    print(f"{'draws/chain':>12}{'quantities':>12}{'ArviZ s':>10}{'ours s':>10}{'ArviZ/ours':>12}")
    for draws in a.draws:
        # autocorrelated values, one chain shifted: R-hat and ESS away from their ideal values
        values = np.cumsum(rng.normal(size=(4, draws, a.quantities)), axis=1) * 0.1
        values += rng.normal(size=(4, draws, a.quantities))
        values[0] += 0.3
        values = values.astype(np.float32)  # as the function values are
        mine, theirs = rhat_bulk_ess(values), arviz_figures(values.astype(np.float64))
        for got, want in zip(mine, theirs, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-8)
        times = round_robin(
            {
                "arviz": (lambda v=values: arviz_figures(v.astype(np.float64)), 1),
                "ours": (lambda v=values: rhat_bulk_ess(v), 1),
            },
            rounds=a.rounds,
        )
        t_arviz, t_ours = (statistics.median(times[k]) for k in ("arviz", "ours"))
        ratio = t_arviz / t_ours
        print(f"{draws:>12}{a.quantities:>12}{t_arviz:>10.2f}{t_ours:>10.2f}{ratio:>11.1f}x")
    print("figures agree with ArviZ to rtol 1e-8")


if __name__ == "__main__":
    main()

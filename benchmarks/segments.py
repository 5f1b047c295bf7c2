"""Benchmark: what does a checkpoint segment cost, with and without reusing the compiled loop?

Every checkpoint segment of ``fit(..., checkpoint_dir=...)`` (and of the reference recipe) is a
new ``MCMC.run``. Stock NumPyro 0.22 compiles its sampling loop again on every run
(``bnn_ppl/_compat.py`` says why); the library's runs use
:class:`~bnn_ppl._compat.ReusingMCMC`, whose repeated runs reuse it. This measures
the CPU seconds of one process per case (a fresh Python process each, no persistent
compilation cache, cases interleaved over rounds):

* ``hmc``: ``fit`` with HMC (diabetes, MLP(16), 2 chains, 100 warmup + 100 draws) in one go,
  and checkpointed in 10 segments of 10 draws, with stock ``MCMC`` and with ``ReusingMCMC``;
* ``atmc``: ``fit`` with ATMC (2 warmup + 10 sampled cycles of 100 steps) in one go, and
  checkpointed one cycle per segment, stock and reusing;
* ``ref``: the reference recipe's kernel at concrete's size (927 synthetic rows x 8, MLP(50),
  4 vectorized chains, 256 leapfrog steps of a fixed step, nothing adapted): the CPU seconds of
  the second and third of three runs of 10 draws, stock and reusing (what each segment after
  the first costs).

It prints each case's median and the ratios. Usage::

    python benchmarks/segments.py --rounds 3
    python benchmarks/segments.py --quick --rounds 1   # 3 segments, shorter runs: a smoke test
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

CASES = ("hmc_one_go", "hmc_segments_stock", "hmc_segments_reusing",
         "atmc_one_go", "atmc_segments_stock", "atmc_segments_reusing",
         "ref_stock", "ref_reusing")  # fmt: skip


def segment_count(quick: bool) -> int:
    """Segments of the checkpointed ``fit`` cases (10; 3 for ``--quick``)."""
    return 3 if quick else 10


def _stock_segments() -> None:
    """Make the checkpointed runs use NumPyro's own MCMC (what they did before ReusingMCMC)."""
    from numpyro.infer import MCMC

    import bnn_ppl.inference.checkpoint.segments as resume

    resume.ReusingMCMC = MCMC


def _fit_case(case: str, quick: bool) -> float:
    import jax

    import bnn_ppl as bp
    from bnn_ppl.inference import fit
    from bnn_ppl.models import MLP

    data = bp.data.load("diabetes")
    model = bp.BNN(MLP(hidden=(16,), out=1), bp.priors.Normal(1.0), bp.likelihoods.Gaussian())
    n = segment_count(quick)
    if case.startswith("hmc"):
        config = bp.config.HMCConfig(num_warmup=10 * n, num_samples=10 * n, num_chains=2)
        every = 10
    else:
        config = bp.config.ATMCConfig(num_warmup=2, num_samples=n, num_chains=2,
                                      cycle_length=100, map_steps=50)  # fmt: skip
        every = 1
    if "stock" in case:
        _stock_segments()
    kwargs = {}
    if "segments" in case:
        kwargs = {"checkpoint_dir": tempfile.mkdtemp(), "checkpoint_every": every}
    start = time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (short runs: their warnings are not the subject)
        fit(model, data, config, jax.random.key(0), **kwargs)
    return time.process_time() - start


def _ref_case(case: str, quick: bool) -> float:
    import jax
    import numpy as np
    from numpyro.infer import MCMC

    import bnn_ppl as bp
    from bnn_ppl.inference import HMC, full_batch_potential
    from bnn_ppl.inference.checkpoint.segments import ReusingMCMC
    from bnn_ppl.models import MLP

    rng = np.random.default_rng(0)
    x = rng.standard_normal((927, 8), dtype=np.float32)
    y = (x @ rng.standard_normal(8) + 0.2 * rng.standard_normal(927)).astype(np.float32)
    model = bp.BNN(MLP(hidden=(50,), out=1), bp.priors.Normal(1.0), bp.likelihoods.Gaussian(0.2))
    pot = full_batch_potential(model, x, y, vectorized_chains=4)
    kernel = HMC(pot, step_size=0.0016, num_steps=64 if quick else 256, adapt_step_size=False,
                 adapt_mass_matrix=False)  # fmt: skip
    cls = ReusingMCMC if case == "ref_reusing" else MCMC
    mcmc = cls(kernel, num_warmup=0, num_samples=10, num_chains=4, chain_method="vectorized",
               progress_bar=False)  # fmt: skip
    init = pot.init_params(jax.random.key(1), num_chains=4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc.run(jax.random.key(0), *pot.args, init_params=init)  # (compiles: not timed)
        jax.block_until_ready(mcmc.last_state)
        start = time.process_time()
        for _ in range(2):
            mcmc.post_warmup_state = mcmc.last_state
            mcmc.run(mcmc.post_warmup_state.rng_key, *pot.args)
            jax.block_until_ready(mcmc.last_state)
    return time.process_time() - start


def child(case: str, quick: bool) -> None:
    seconds = _ref_case(case, quick) if case.startswith("ref") else _fit_case(case, quick)
    print(json.dumps({"case": case, "cpu_seconds": seconds}))


def main(args: argparse.Namespace) -> None:
    sys.path.insert(0, os.path.dirname(__file__))
    import _timing

    print(_timing.machine())
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("JAX_COMPILATION_CACHE_DIR", None)  # (no persistent cache: what a user's run has)
    times: dict[str, list[float]] = {c: [] for c in CASES}
    for r in range(args.rounds):
        order = CASES[r % len(CASES):] + CASES[: r % len(CASES)]  # (rotated every round)
        for case in order:
            cmd = [sys.executable, __file__, "--child", case] + (["--quick"] if args.quick else [])
            out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
            times[case].append(json.loads(out.stdout.strip().splitlines()[-1])["cpu_seconds"])
            print(f"round {r}: {case} {times[case][-1]:.1f} s", flush=True)
    med = {c: statistics.median(v) for c, v in times.items()}
    print("\n| case | CPU seconds (median) | all rounds |\n|---|---|---|")
    for c in CASES:
        print(f"| {c} | {med[c]:.1f} | {', '.join(f'{t:.1f}' for t in times[c])} |")
    for kind in ("hmc", "atmc"):
        one, stock, reuse = (med[f"{kind}_{s}"] for s in ("one_go", "segments_stock",
                                                          "segments_reusing"))  # fmt: skip
        print(f"{kind}: {segment_count(args.quick)} segments cost {stock / one:.2f}x one go "
              f"with stock MCMC, "
              f"{reuse / one:.2f}x with ReusingMCMC ({stock / reuse:.2f}x less)")
    print(f"ref: a segment after the first costs {med['ref_stock'] / med['ref_reusing']:.2f}x "
          f"as much with stock MCMC ({(med['ref_stock'] - med['ref_reusing']) / 2:.1f} s more "
          "per segment)")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--child", choices=CASES, default=None)
    a = p.parse_args()
    child(a.child, a.quick) if a.child else main(a)

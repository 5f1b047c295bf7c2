"""Benchmark: compiling the draw of initial values from the prior (``BNN.init``).

``BNN.init`` draws every site with its own key. Site by site, a compiled draw holds one
random-number program per site, and XLA:CPU compiles a draw of a 4- or 5-axis shape slowly
(a ``jax.random.normal`` of a 3x3x16x16 kernel's shape: seconds; of its 1-axis flattening:
0.1 s, the same values). ``init`` now draws those sites flat and reshaped, one vmapped call per
distinct prior (:func:`bnn_ppl.flat_draws.prior_draws`); the values are the same (bit for bit here,
at XLA's default optimisation; ``tests/test_model.py``). The draw is what ``pot.init_params``
computes, and what the HMC/NUTS kernels' ``init`` compiles for ``init_params=None``
(``MCMC.run`` after ``MCMC.warmup``): 18.8 s of a ResNet-20's 49 s sampling-loop set-up on
an H200 (RESULTS.md).

Candidates, in one process, interleaved (order rotated every round), each a fresh ``jax.jit``
lowered and compiled (nothing cached: the programs differ from round to round by a constant):

* ``site by site`` - ``model._sample_sites(x, lambda name, d: d.sample(keys[name]))``, the
  draw before the change (the same values);
* ``init`` - ``model.init(key, x)``, the draw now;

for one chain and for ``--chains`` chains (vmapped over keys, as ``pot.init_params(key, C)``).
Then the SG-MCMC kernels' noise (compiled into every SG-MCMC step), one normal per parameter:

* ``leaf by leaf`` - ``jax.random.normal(keys[i], shape)`` per leaf, the noise before;
* ``normal_like`` - :func:`bnn_ppl.inference.sgmcmc.kernel.normal_like` now (flat, one vmapped
  call per size).

Then mean-field SVI's set-up (``--svi-rounds``; 0 skips it): NumPyro's ``SVI.run`` for 2 steps
on 8 rows, from the start (its eager initialisation, whose op-by-op programs compile one by one,
and its compiled loop), each round after ``jax.clear_caches()`` with the persistent cache off:

* ``AutoNormal`` - NumPyro's guide with ``init_to_sample``, what ``svi_mean_field`` used;
* ``MeanFieldGuide`` - :class:`bnn_ppl.inference.svi.MeanFieldGuide` with
  :func:`bnn_ppl.flat_draws.init_to_prior_draw`, what it uses now (the same draws, flat);

and the two ELBO traces must be equal.

Usage::

    python benchmarks/init_draw.py               # ResNet-20 FRN (width 16), 3 rounds (SVI: 2)
    python benchmarks/init_draw.py --quick       # width 2, 1 round: a smoke test
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Callable
from typing import Any

import _record
import _timing
import jax
import numpy as np
import optax
from numpyro.infer import SVI, TraceMeanField_ELBO
from numpyro.infer.autoguide import AutoNormal
from numpyro.infer.initialization import init_to_sample
from numpyro.optim import optax_to_numpyro

import bnn_ppl as bp
from bnn_ppl.flat_draws import init_to_prior_draw
from bnn_ppl.inference.sgmcmc.kernel import normal_like
from bnn_ppl.inference.svi import MeanFieldGuide
from bnn_ppl.models import MLP, ResNet20FRN


def site_by_site(model: bp.BNN, x: Any) -> Callable[[Any], Any]:
    def draw(key: Any) -> Any:
        names = list(model.sites(x))
        keys = dict(zip(names, jax.random.split(key, len(names) + 1)[1:], strict=True))
        return model._sample_sites(x, lambda name, d: d.sample(keys[name]))

    return draw


def leaf_by_leaf(key: Any, tree: Any) -> Any:
    leaves, treedef = jax.tree.flatten(tree)
    keys = jax.random.split(key, len(leaves))
    draws = [jax.random.normal(k, x.shape, x.dtype) for k, x in zip(keys, leaves, strict=True)]
    return jax.tree.unflatten(treedef, draws)


def compile_job(draw: Callable[[Any], Any], chains: int) -> Callable[[], None]:
    """A call that lowers and compiles ``draw`` (vmapped over ``chains`` keys when > 1) as a
    new program each time (a different constant folded into the key), so nothing comes from a
    cache."""
    salt = itertools.count()

    def compile_once() -> None:
        s = next(salt)

        def f(key: Any) -> Any:
            key = jax.random.fold_in(key, s)
            if chains == 1:
                return draw(key)
            return jax.vmap(draw)(jax.random.split(key, chains))

        jax.jit(f).lower(jax.random.key(0)).compile()

    return compile_once


REPORTED: list[list] = []  # one row per report: what --record writes


def report(times: dict[str, list[float]], label: str) -> None:
    """Each candidate's median and rounds (seconds), then the first's median over the second's."""
    med = {name: float(np.median(ts)) for name, ts in times.items()}
    for name, ts in times.items():
        print(f"{label}, {name}: median {med[name]:.2f} s  {[round(t, 2) for t in ts]}")
    first, second = times
    print(f"{label}: {first} / {second} = {med[first] / med[second]:.2f}")
    REPORTED.append(
        [label, first, round(med[first], 2), second, round(med[second], 2)]
        + [round(med[first] / med[second], 2)]
    )


def svi_setup(model: bp.BNN, x: Any, y: Any, guide: str) -> np.ndarray:
    """From nothing compiled to 2 SVI steps done; the ELBO trace. ``guide`` is
    ``"AutoNormal"`` (with ``init_to_sample``) or ``"MeanFieldGuide"`` (``init_to_prior_draw``)."""
    jax.clear_caches()
    cls, init = {
        "AutoNormal": (AutoNormal, init_to_sample),
        "MeanFieldGuide": (MeanFieldGuide, init_to_prior_draw),
    }[guide]
    svi = SVI(model, cls(model, init_loc_fn=init, init_scale=1e-2),
              optax_to_numpyro(optax.adam(1e-3)), TraceMeanField_ELBO())  # fmt: skip
    return np.asarray(svi.run(jax.random.key(0), 2, x, y, progress_bar=False).losses)


def svi_section(model: bp.BNN, rounds: int, row_shape: tuple[int, ...]) -> bool:
    jax.config.update("jax_enable_compilation_cache", False)  # every round compiles afresh
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, *row_shape), dtype=np.float32)
    y = rng.integers(0, 10, 8).astype(np.int32)
    losses: dict[str, np.ndarray] = {}

    def job(name: str) -> tuple[Callable[[], None], int]:
        return (lambda: losses.__setitem__(name, svi_setup(model, x, y, name))), 1

    times = _timing.round_robin({n: job(n) for n in ("AutoNormal", "MeanFieldGuide")}, rounds)
    same = bool(np.array_equal(losses["AutoNormal"], losses["MeanFieldGuide"]))
    print(f"# SVI, same ELBO trace: {same} {losses['MeanFieldGuide'].tolist()}")
    report(times, "SVI set-up")
    return same


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--width", type=int, default=16)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--chains", type=int, default=4)
    p.add_argument("--svi-rounds", type=int, default=2, help="SVI set-up rounds (0: none)")
    p.add_argument("--quick", action="store_true", help="width 2, 1 round")
    _record.add_flag(p)
    args = p.parse_args(argv)
    if args.quick:
        args.width, args.rounds, args.svi_rounds = 2, 1, min(args.svi_rounds, 1)
    print(_timing.machine())
    model = bp.BNN(ResNet20FRN(out=10, width=args.width), bp.priors.Normal(0.2),
                   bp.likelihoods.Categorical())  # fmt: skip
    x = jax.ShapeDtypeStruct((1, 32, 32, 3), np.float32)
    print(f"# ResNet20FRN width {args.width}: {len(model.sites(x))} sites")
    key = jax.random.key(1)
    old, new = site_by_site(model, x)(key), model.init(key, x)
    same = all(np.array_equal(old[k], new[k]) for k in old) and set(old) == set(new)
    print(f"# same values: {same}")
    candidates = {"site by site": site_by_site(model, x), "init": lambda k: model.init(k, x)}
    for chains in (1, args.chains):
        jobs = {name: (compile_job(draw, chains), 1) for name, draw in candidates.items()}
        report(_timing.round_robin(jobs, args.rounds), f"{chains} chain(s)")
    tree = model.init(key, x)
    noise = {
        "leaf by leaf": lambda k: leaf_by_leaf(k, tree),
        "normal_like": lambda k: normal_like(k, tree),
    }
    old, new = noise["leaf by leaf"](key), noise["normal_like"](key)
    pairs = zip(jax.tree.leaves(old), jax.tree.leaves(new), strict=True)
    same_noise = all(np.array_equal(a, b) for a, b in pairs)
    print(f"# SG-MCMC noise, same values: {same_noise}")
    jobs = {name: (compile_job(draw, 1), 1) for name, draw in noise.items()}
    report(_timing.round_robin(jobs, args.rounds), "noise")
    row_shape: tuple[int, ...] = (32, 32, 3)
    if args.quick:  # an MLP: the same code path in seconds (a ResNet's SVI set-up: ~1 minute)
        model = bp.BNN(MLP(hidden=(8,), out=10), bp.priors.Normal(0.2),
                       bp.likelihoods.Categorical())  # fmt: skip
        row_shape = (5,)
    same_svi = svi_section(model, args.svi_rounds, row_shape) if args.svi_rounds > 0 else True
    if args.record:
        _record.record(
            "compile",
            ["part", "before", "before (s)", "now", "now (s)", "before / now"],
            REPORTED,
            title=f"Seconds to compile, ResNet20FRN width {args.width}",
            notes=f"Medians of {args.rounds} rounds ({args.svi_rounds} for SVI); same values: "
            f"{same}, same noise: {same_noise}, same ELBO trace: {same_svi}.",
            to=args.record,
        )
    return 0 if same and same_noise and same_svi else 1


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: cost of one full-batch potential gradient, ours vs. plain JAX vs. NumPyro.

Prints, from ONE process, the median time of one ``(value, grad)`` of the full-batch potential of
a regression BNN (MLP, Normal(1) prior, Gaussian(0.5) likelihood) for

  (a)  a hand-written jitted log joint in plain jax (jnp MLP forward, Normal log prior,
       Gaussian log-likelihood; same parameter dict; data as jit arguments) - the reference;
  (b)  NumPyro's own potential from ``numpyro.infer.util.initialize_model``:
       (b)  ``jit(value_and_grad(potential_fn))`` with the data closed over (the plain recipe),
       (b') the same with ``dynamic_args=True``, i.e. the data as jit arguments;
  (c)  ours, ``FullBatchPotential.value_and_grad`` (data as jit arguments) with
       ``chunk_size=None`` (the library default: on the CPU, ``cpu_chunk``'s working-set rule),
       ``chunk_size=1024`` (the earlier default) and ``chunk_size=n`` (1 chunk);
  (d)  the time per gradient inside a compiled ``mcmc.run`` of fixed-step HMC
       (``num_steps=K``, no adaptation, ``num_warmup=0``), wall time / (num_samples * K), for
       ``numpyro.infer.HMC(potential_fn=pot.potential_fn)`` (data closed over) and for
       ``bnn_ppl.inference.HMC(pot)`` (data as jit arguments), on the default-chunked potential
       and on the one-chunk potential; also ``numpyro.infer.HMC`` on (a) itself (HMC machinery
       on a plain-jax potential);
  and, as loop references without any HMC, (a) and (c) inside one jitted ``lax.fori_loop`` of
  K ``value_and_grad`` steps (per gradient).

Every number is also given as a ratio to (a). The table also has the minimum, the IQR and the
median number of minor page faults per call (or per gradient): on this CPU backend a standalone
call whose XLA temp buffer exceeds glibc's 32 MiB mmap-threshold cap gets that buffer freshly
mmap'ed, and page-faulted, on every call, which is most of the difference between standalone
calls and gradients inside a loop (see RESULTS.md). Candidates are measured round-robin (the order
rotates every round) and the medians are reported, to damp the noise of a shared machine.
Before timing, the script asserts that (a), (b), (b') and (c) agree on the value (1e-4
relative) and on the gradient (1e-3 relative, as one vector). Compilation is kept out of
every timing: everything is run once before timing, and a ``jax.monitoring`` listener counts
traces/compilations during the timed sections (they must be zero; the script says so if not).

HMC runs: ``mcmc.warmup`` (with ``num_warmup=0``) builds the initial state once (NumPyro's HMC
initialisation evaluates the potential eagerly, outside jit); then every ``mcmc.run`` starts
from that same ``post_warmup_state`` and does exactly ``num_samples * K`` gradients. The HMC
kernels get ``num_steps=K, trajectory_length=None``: with NumPyro's default
``trajectory_length=2*pi`` a fixed ``num_steps`` silently overrides ``step_size`` with
``trajectory_length / num_steps`` (every transition then diverges).

NumPyro 0.22 recompiles the sampling loop on EVERY ``mcmc.run`` when ``progress_bar=False``:
``fori_collect`` wraps its (cached) body in a fresh ``jax.jit`` object on each call, and that
object is a static argument of the outer jitted loop, so JAX's cache never hits (see
pyro-ppl/numpyro#2171). A second run is therefore NOT "already compiled". To measure the
steady-state cost anyway, this script memoises ``numpyro.util.maybe_jit`` (same function and
options -> same jit object) in this process only; with it, the timed runs do no compilation
(checked with the counter). ``--no-numpyro-jit-fix`` turns that off (then every HMC timing
contains a compilation and the script says so). Either way the script also times one extra run
of the two main HMC kernels with stock NumPyro behaviour and prints it, so the cost a user
actually pays per ``mcmc.run`` is visible.

Usage::

    python benchmarks/potential.py            # MLP 2x256, n=10000, d=50 (~2 min if idle)
    python benchmarks/potential.py --quick    # tiny smoke test (seconds)
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import resource
import statistics
import sys
import time
from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
from _record import add_flag, record
from _timing import numpyro_jit_fix  # (the library's own, scoped form: ReusingMCMC)
from jax import monitoring
from numpyro.infer import MCMC
from numpyro.infer.util import initialize_model

import bnn_ppl as bp
from bnn_ppl.inference import HMC as BHMC
from bnn_ppl.inference import full_batch_potential
from bnn_ppl.models import MLP

PRIOR_SCALE = 1.0
NOISE_SCALE = 0.5

# ----------------------------------------------------------------------------- compile counter
_EVENTS: Counter = Counter()
_TRACE = "/jax/core/compile/jaxpr_trace_duration"
_COMPILE = "/jax/core/compile/backend_compile_duration"


def _listener(event: str, duration: float, **kwargs) -> None:
    if event in (_TRACE, _COMPILE):
        _EVENTS[event] += 1


monitoring.register_event_duration_secs_listener(_listener)


def compile_counts() -> tuple[int, int]:
    return _EVENTS[_TRACE], _EVENTS[_COMPILE]


# ----------------------------------------------------------------------------- candidates
def handwritten_potential_fn(num_layers: int):
    """(a): the negative log joint in plain jax, same parameter names as the Flax MLP."""
    log_norm_prior = math.log(PRIOR_SCALE) + 0.5 * math.log(2 * math.pi)
    log_norm_lik = math.log(NOISE_SCALE) + 0.5 * math.log(2 * math.pi)

    def potential(u, x, y):
        h = x
        for i in range(num_layers):
            h = h @ u[f"Dense_{i}.kernel"] + u[f"Dense_{i}.bias"]
            if i < num_layers - 1:
                h = jax.nn.relu(h)
        mean = h[:, 0]
        log_prior = sum(
            jnp.sum(-0.5 * jnp.square(w / PRIOR_SCALE) - log_norm_prior) for w in u.values()
        )
        log_lik = jnp.sum(-0.5 * jnp.square((y - mean) / NOISE_SCALE) - log_norm_lik)
        return -(log_prior + log_lik)

    return potential


def handwritten_potential(num_layers: int):
    """(a), jitted ``(value, grad)`` with the data as jit arguments."""
    return jax.jit(jax.value_and_grad(handwritten_potential_fn(num_layers)))


def block(tree):
    return jax.block_until_ready(tree)


def rel_err(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def tree_rel_err(ga: dict, gb: dict) -> float:
    assert set(ga) == set(gb), (sorted(ga), sorted(gb))
    fa = np.concatenate([np.ravel(np.asarray(ga[k], np.float64)) for k in sorted(ga)])
    fb = np.concatenate([np.ravel(np.asarray(gb[k], np.float64)) for k in sorted(gb)])
    return rel_err(fa, fb)


class HMCCandidate:
    """A fixed-step HMC ``MCMC``, warmed up (0 steps) and compiled; ``run()`` does one timed run."""

    def __init__(self, name, kernel, run_args, init, jit_model_args, num_samples, num_steps, key):
        self.name = name
        self.num_grads = num_samples * num_steps
        self.mcmc = MCMC(
            kernel,
            num_warmup=0,
            num_samples=num_samples,
            jit_model_args=jit_model_args,
            progress_bar=False,
        )
        self.run_args = run_args
        self.key = key
        t0 = time.perf_counter()
        self.mcmc.warmup(key, *run_args, init_params=init, extra_fields=("num_steps",))
        block(self.mcmc.post_warmup_state)
        self.init_s = time.perf_counter() - t0
        c0 = compile_counts()[1]
        self.first_run_s = self._run()  # compiles the sampling loop
        self.first_run_compiles = compile_counts()[1] - c0
        self.stock_run_s = self.stock_run_compiles = None

    def _run(self) -> float:
        t0 = time.perf_counter()
        self.mcmc.run(self.key, *self.run_args, extra_fields=("num_steps",))
        block((self.mcmc.last_state, self.mcmc.get_samples()))
        return time.perf_counter() - t0

    def run(self) -> None:
        self.mcmc.run(self.key, *self.run_args, extra_fields=("num_steps",))
        block((self.mcmc.last_state, self.mcmc.get_samples()))

    def time_stock_run(self, fix: bool) -> None:
        """One run with NumPyro's stock ``maybe_jit`` (what a user pays per ``mcmc.run``)."""
        numpyro_jit_fix(False)
        c0 = compile_counts()[1]
        self.stock_run_s = self._run()
        self.stock_run_compiles = compile_counts()[1] - c0
        numpyro_jit_fix(fix)

    def diagnostics(self) -> str:
        extra = self.mcmc.get_extra_fields()
        steps = np.asarray(extra["num_steps"])
        assert np.all(steps == steps.flat[0]), steps
        div = int(np.sum(np.asarray(extra["diverging"])))
        st = self.mcmc.last_state
        return (
            f"{int(steps.flat[0])} leapfrog steps/sample, mean accept prob "
            f"{float(st.mean_accept_prob):.2f}, {div}/{self.mcmc.num_samples} divergent"
        )


# ----------------------------------------------------------------------------- main
def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=10_000, help="number of data rows")
    p.add_argument("--d", type=int, default=50, help="input dimension")
    p.add_argument("--width", type=int, default=256, help="hidden width")
    p.add_argument("--depth", type=int, default=2, help="number of hidden layers")
    p.add_argument("--rounds", type=int, default=15, help="round-robin rounds")
    p.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="value_and_grad calls per candidate per round (each timed)",
    )
    p.add_argument("--hmc-samples", type=int, default=2, help="HMC num_samples per timed run")
    p.add_argument("--hmc-steps", type=int, default=10, help="HMC leapfrog steps K per sample")
    p.add_argument("--step-size", type=float, default=1e-4, help="HMC step size")
    p.add_argument("--no-hmc", action="store_true", help="skip the HMC measurements (d)")
    p.add_argument(
        "--no-numpyro-jit-fix",
        action="store_true",
        help="do not memoise numpyro.util.maybe_jit (every mcmc.run then recompiles)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--quick",
        action="store_true",
        help="tiny sizes for a smoke test (n=300, d=5, width=16, 2 rounds)",
    )
    add_flag(p)
    args = p.parse_args(argv)
    if args.quick:
        args.n, args.d, args.width = 300, 5, 16
        args.rounds, args.repeats, args.hmc_samples, args.hmc_steps = 2, 2, 2, 3
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    fix = not args.no_numpyro_jit_fix
    numpyro_jit_fix(fix)
    n, d = args.n, args.d
    hidden = (args.width,) * args.depth
    t_script = time.perf_counter()
    print(f"# bnn_ppl potential benchmark  {datetime.datetime.now().isoformat(timespec='seconds')}")
    print(
        f"# python {platform.python_version()}, jax {jax.__version__}, numpyro "
        f"{numpyro.__version__}, devices {jax.devices()}, {os.cpu_count()} CPUs"
    )
    print(
        f"# MLP hidden={hidden} out=1, n={n}, d={d}; rounds={args.rounds}, "
        f"repeats/round={args.repeats}; HMC: {args.hmc_samples} samples x K={args.hmc_steps} "
        f"steps, step_size={args.step_size:g}; numpyro maybe_jit memo fix: {fix}"
    )

    # ---- data, model, parameters
    rng = np.random.default_rng(args.seed)
    x = rng.standard_normal((n, d)).astype(np.float32)
    w_true = rng.standard_normal(d).astype(np.float32) / math.sqrt(d)
    y = (np.sin(3 * x @ w_true) + 0.5 * rng.standard_normal(n)).astype(np.float32)
    model = bp.BNN(
        MLP(hidden=hidden, out=1),
        prior=bp.priors.Normal(PRIOR_SCALE),
        likelihood=bp.likelihoods.Gaussian(scale=NOISE_SCALE),
    )

    pot = full_batch_potential(model, x, y, chunk_size=None)  # library default chunking
    pot_1024 = full_batch_potential(model, x, y, chunk_size=1024)
    pot_one = full_batch_potential(model, x, y, chunk_size=n)  # a single chunk
    print(
        f"# ours: chunk_size=None -> {pot.num_chunks} chunk(s) of {pot.chunk_size} rows; "
        f"chunk_size=1024 -> {pot_1024.num_chunks} x {pot_1024.chunk_size}; chunk_size={n} -> "
        f"{pot_one.num_chunks} x {pot_one.chunk_size}; {pot.num_params} parameters"
    )
    # Flax initialisers (network outputs O(1)), so HMC with a small fixed step stays sane.
    u = jax.tree.map(jnp.asarray, pot.init_params(jax.random.key(args.seed), method="network"))
    xj, yj = jnp.asarray(x), jnp.asarray(y)

    # ---- (a) hand-written, (b) NumPyro's own potential
    vg_a = handwritten_potential(len(hidden) + 1)
    info = initialize_model(jax.random.key(1), model, model_args=(x, y))
    vg_b = jax.jit(jax.value_and_grad(info.potential_fn))
    info_dyn = initialize_model(jax.random.key(1), model, model_args=(x, y), dynamic_args=True)
    vg_b2 = jax.jit(lambda u, x, y: jax.value_and_grad(info_dyn.potential_fn(x, y))(u))

    A = "(a) hand-written jax, data args"
    B = "(b) numpyro initialize_model, closed over"
    B2 = "(b') numpyro initialize_model, data args"
    C = "(c) ours chunk_size=None"
    candidates = {
        A: lambda: vg_a(u, xj, yj),
        B: lambda: vg_b(u),
        B2: lambda: vg_b2(u, xj, yj),
        C: lambda: pot.value_and_grad(u),
        "(c) ours chunk_size=1024": lambda: pot_1024.value_and_grad(u),
        f"(c) ours chunk_size={n} (1 chunk)": lambda: pot_one.value_and_grad(u),
    }

    # ---- correctness: all compute the same function (this also compiles everything)
    results = {name: block(f()) for name, f in candidates.items()}
    va, ga = results[A]
    print(f"# check: (a) potential = {float(va):.8g}")
    for name, (v, g) in results.items():
        ev, eg = rel_err(v, va), tree_rel_err(g, ga)
        print(f"#   {name:<44} value rel.err {ev:.1e}, grad rel.err {eg:.1e}")
        assert ev < 1e-4, f"{name}: value differs from (a) by {ev:.2e} (relative)"
        assert eg < 1e-3, f"{name}: gradient differs from (a) by {eg:.2e} (relative)"
    del results

    # ---- (d) HMC
    hmc: list[HMCCandidate] = []
    HA, HN, HO = (
        "(d) numpyro HMC(potential_fn=(a) closed over)",
        "(d) numpyro HMC(potential_fn=pot.potential_fn)",
        "(d) bnn_ppl HMC(pot)",
    )
    if not args.no_hmc:
        kw = dict(
            num_steps=args.hmc_steps,
            trajectory_length=None,
            step_size=args.step_size,
            adapt_step_size=False,
            adapt_mass_matrix=False,
        )
        key = jax.random.key(args.seed + 2)
        S, K = args.hmc_samples, args.hmc_steps
        pe_a = lambda z: handwritten_potential_fn(len(hidden) + 1)(z, xj, yj)  # noqa: E731
        t0 = time.perf_counter()
        hmc = [
            HMCCandidate(HA, numpyro.infer.HMC(potential_fn=pe_a, **kw), (), u, False, S, K, key),
            HMCCandidate(
                HN, numpyro.infer.HMC(potential_fn=pot.potential_fn, **kw), (), u, False, S, K, key
            ),
            HMCCandidate(HO, BHMC(pot, **kw), pot.args, u, True, S, K, key),
            HMCCandidate(
                "(d) numpyro HMC(potential_fn), 1 chunk",
                numpyro.infer.HMC(potential_fn=pot_one.potential_fn, **kw),
                (),
                u,
                False,
                S,
                K,
                key,
            ),
            HMCCandidate(
                "(d) bnn_ppl HMC(pot), 1 chunk",
                BHMC(pot_one, **kw),
                pot_one.args,
                u,
                True,
                S,
                K,
                key,
            ),
        ]
        print(f"# HMC setup (init + compile) {time.perf_counter() - t0:.1f} s")

    # ---- (a) and (c) inside a plain jitted fori_loop: K gradient steps per call, no HMC
    K = args.hmc_steps

    def grad_loop(potential):  # potential(z, data) -> scalar
        @jax.jit
        def loop(z, data):
            def body(i, carry):
                z, acc = carry
                v, g = jax.value_and_grad(potential)(z, data)
                return jax.tree.map(lambda w, gw: w - 1e-9 * gw, z, g), acc + v

            return jax.lax.fori_loop(0, K, body, (z, jnp.zeros((), jnp.float32)))

        return loop

    pe_a_fn = handwritten_potential_fn(len(hidden) + 1)
    a_loop = grad_loop(lambda z, data: pe_a_fn(z, *data))
    c_loop = grad_loop(lambda z, data: pot.potential_fn_gen(data)(z))
    AL = f"(a) in a jitted fori_loop of K={K} grads"
    CL = f"(c) ours in a jitted fori_loop of K={K} grads"
    loops = {AL: lambda: a_loop(u, (xj, yj)), CL: lambda: c_loop(u, pot.data)}
    for f in loops.values():
        block(f())

    # ---- round-robin timing: (name, function that blocks, gradients per call, calls per round)
    jobs = [(name, (lambda f=f: block(f())), 1, args.repeats) for name, f in candidates.items()]
    jobs += [(name, (lambda f=f: block(f())), K, 1) for name, f in loops.items()]
    jobs += [(h.name, h.run, h.num_grads, 1) for h in hmc]
    times: dict[str, list[float]] = {name: [] for name, *_ in jobs}  # seconds per gradient
    faults: dict[str, list[float]] = {name: [] for name, *_ in jobs}  # minor page faults / grad
    per_round: dict[str, list[float]] = {name: [] for name, *_ in jobs}  # round medians
    counts0 = compile_counts()
    t_start = time.perf_counter()
    for r in range(args.rounds):
        k = r % len(jobs)
        for name, f, grads, calls in jobs[k:] + jobs[:k]:
            for _ in range(calls):
                f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                t0 = time.perf_counter()
                f()
                times[name].append((time.perf_counter() - t0) / grads)
                faults[name].append(
                    (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / grads
                )
            per_round[name].append(statistics.median(times[name][-calls:]))
    t_total = time.perf_counter() - t_start
    traces, compiles = (c1 - c0 for c1, c0 in zip(compile_counts(), counts0, strict=True))
    for h in hmc:
        if h.name in (HN, HO):
            h.time_stock_run(fix)

    # ---- report
    ref = statistics.median(times[A])
    print(
        f"# timed section: {t_total:.1f} s; jaxpr traces during it: {traces}, "
        f"backend compilations during it: {compiles}"
        + ("" if compiles == 0 else "   <-- WARNING: compilation inside the timed section")
    )
    for h in hmc:
        med = statistics.median(times[h.name]) * h.num_grads
        print(f"# {h.name}: {h.diagnostics()}")
        stock = (
            ""
            if h.stock_run_s is None
            else f"; one run with stock numpyro {h.stock_run_s:.2f} s "
            f"({h.stock_run_compiles} compiles)"
        )
        print(
            f"#   warmup(0) {h.init_s:.2f} s; 1st run {h.first_run_s:.2f} s "
            f"({h.first_run_compiles} compiles); timed runs median {med:.3f} s "
            f"({h.first_run_s / med:.1f}x faster than the 1st){stock}"
        )
        if h.first_run_s < 2 * med:
            print(f"#   WARNING: the timed runs of {h.name} are not much faster than the first")
    print()
    w = max(len(k) for k in times) + len(" [per grad]") + 2
    print(
        f"{'candidate':<{w}}{'median ms':>10}{'min ms':>8}{'IQR ms':>14}{'ratio to (a)':>13}"
        f"{'paired':>8}{'min/min':>8}{'faults':>8}{'n':>4}"
    )
    table = []
    for name, ts in times.items():
        ms = np.asarray(ts) * 1e3
        q1, q3 = np.percentile(ms, [25, 75])
        med = float(np.median(ms))
        label = name + (" [per grad]" if name.startswith("(d)") or name in loops else "")
        paired = statistics.median(
            [c / a for c, a in zip(per_round[name], per_round[A], strict=True)]
        )
        print(
            f"{label:<{w}}{med:>10.2f}{ms.min():>8.2f}{f'{q1:.1f}-{q3:.1f}':>14}"
            f"{med / (ref * 1e3):>13.3f}{paired:>8.3f}{min(ts) / min(times[A]):>8.3f}"
            f"{statistics.median(faults[name]):>8.0f}{len(ts):>4}"
        )
        table.append(
            [label, round(med, 2), round(float(ms.min()), 2), f"{q1:.1f}-{q3:.1f}"]
            + [round(med / (ref * 1e3), 3), round(paired, 3), round(min(ts) / min(times[A]), 3)]
            + [round(statistics.median(faults[name])), len(ts)]
        )
    print(
        "ms and faults (minor page faults) are per value_and_grad call, or per gradient for\n"
        "[per grad] rows. ratio to (a) = median / median of (a); paired = median over rounds of\n"
        "(this round's median / (a)'s median in the same round); min/min = min / min of (a)."
    )

    def ratio(a: str, b: str) -> float:
        return statistics.median(times[a]) / statistics.median(times[b])

    print()
    print(
        f"target ours <= 1.00x numpyro:   ours/(b) = {ratio(C, B):.3f}, "
        f"ours/(b') = {ratio(C, B2):.3f}   -> {'met' if ratio(C, B) <= 1.0 else 'NOT met'}"
    )
    if hmc:
        print(
            f"target HMC per gradient <= 1.05x (a):   bnn_ppl HMC(pot) {ratio(HO, A):.3f}x, "
            f"numpyro HMC(pot.potential_fn) {ratio(HN, A):.3f}x, numpyro HMC on (a) itself "
            f"{ratio(HA, A):.3f}x   -> {'met' if ratio(HO, A) <= 1.05 else 'NOT met'}"
        )
        print(
            f"same, relative to (a) in a plain fori_loop instead:   bnn_ppl HMC(pot) "
            f"{ratio(HO, AL):.3f}x, numpyro HMC(pot.potential_fn) {ratio(HN, AL):.3f}x, "
            f"numpyro HMC on (a) {ratio(HA, AL):.3f}x; ours (c) in the plain loop "
            f"{ratio(CL, AL):.3f}x"
        )
    print(f"# total script time {time.perf_counter() - t_script:.0f} s")
    if args.record:
        columns = ["candidate", "median (ms)", "min (ms)", "IQR (ms)", "ratio to (a)", "paired"]
        record(
            "potential",
            [*columns, "min / min", "faults", "n"],
            table,
            title=f"MLP {d}-{'-'.join(map(str, hidden))}-1, n = {n}",
            notes="Per `value_and_grad` call, or per gradient for the [per grad] rows; faults: "
            "minor page faults per call; paired: the median over rounds of the round's ratio.",
            to=args.record,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

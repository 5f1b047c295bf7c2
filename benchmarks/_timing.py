"""Shared timing helpers for the benchmark scripts (not a benchmark itself).

* :func:`numpyro_jit_fix` - NumPyro 0.22 recompiles its sampling loop on every ``mcmc.run`` with
  ``progress_bar=False`` (``fori_collect`` wraps its body in a fresh ``jax.jit`` object that is a
  static argument of the outer loop; fixed upstream by pyro-ppl/numpyro#2171). Memoising
  ``numpyro.util.maybe_jit`` in the benchmark's own process makes a repeated ``mcmc.run`` reuse
  its compiled loop, so the steady-state cost can be timed. (Copied from
  ``benchmarks/potential.py``, which documents it in full. The library does the same, scoped
  to each run of a ``bnn_ppl.inference.checkpoint.segments.ReusingMCMC``: ``bnn_ppl/_compat.py``;
  this switch
  stays for the scripts that time stock ``numpyro.infer.MCMC``.)
* :class:`CompileCounter` - counts jaxpr traces and XLA compilations (``jax.monitoring``), so
  a script can check that nothing compiled inside a timed section.
* :func:`round_robin` - times several candidates interleaved (the order rotates every round),
  which damps the noise of a shared machine; :func:`summary` gives median, min and IQR.
* :func:`print_table` - the median/min/IQR table the scripts print; returns the medians.
* :func:`grad_loop` - K ``value_and_grad`` steps of a potential in one jitted ``fori_loop``: what
  a gradient costs when it is not a standalone call (the floor an HMC loop is compared with).
* :func:`machine` - the lines every RESULTS.md entry needs: date, versions, CPU, load.
"""

from __future__ import annotations

import datetime
import os
import platform
import statistics
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.util
from jax import monitoring

_STOCK_MAYBE_JIT = numpyro.util.maybe_jit
_JIT_MEMO: dict = {}


def _memo_maybe_jit(fn: Callable, *args: Any, **kwargs: Any) -> Callable:
    key = (fn, args, tuple(sorted(kwargs.items())))
    if key not in _JIT_MEMO:
        _JIT_MEMO[key] = _STOCK_MAYBE_JIT(fn, *args, **kwargs)
    return _JIT_MEMO[key]


def numpyro_jit_fix(on: bool = True) -> None:
    """Memoise ``numpyro.util.maybe_jit`` (a repeated ``mcmc.run`` reuses its compiled loop)."""
    numpyro.util.maybe_jit = _memo_maybe_jit if on else _STOCK_MAYBE_JIT


_TRACE = "/jax/core/compile/jaxpr_trace_duration"
_COMPILE = "/jax/core/compile/backend_compile_duration"


class CompileCounter:
    """Counts jaxpr traces and backend compilations in this process (from creation on)."""

    def __init__(self) -> None:
        self.events: Counter = Counter()
        self.compile_log: list[tuple[str, float]] = []

        def listener(event: str, duration: float, **kwargs: Any) -> None:
            if event in (_TRACE, _COMPILE):
                self.events[event] += 1
            if event == _COMPILE:
                self.compile_log.append((str(kwargs.get("fun_name", "?")), duration))

        monitoring.register_event_duration_secs_listener(listener)

    @property
    def compiles(self) -> int:
        return self.events[_COMPILE]

    @property
    def traces(self) -> int:
        return self.events[_TRACE]

    def compile_seconds(self) -> list[list]:
        """``[function name, seconds]`` of each backend compilation so far, in order."""
        return [[name, round(sec, 2)] for name, sec in self.compile_log]


def block(tree: Any) -> Any:
    return jax.block_until_ready(tree)


def round_robin(
    jobs: dict[str, tuple[Callable[[], Any], int]], rounds: int, repeats: int = 1
) -> dict[str, list[float]]:
    """Time ``jobs`` interleaved; returns seconds per work unit for every call.

    Args:
        jobs: name -> (function that runs one call and blocks, work units per call: e.g. the
            number of gradients a call computes).
        rounds: rounds; the order of the jobs rotates by one each round.
        repeats: calls per job per round.
    """
    names = list(jobs)
    times: dict[str, list[float]] = {k: [] for k in names}
    for r in range(rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            fn, units = jobs[name]
            for _ in range(repeats):
                t0 = time.perf_counter()
                fn()
                times[name].append((time.perf_counter() - t0) / units)
    return times


def summary(seconds: list[float]) -> dict[str, float]:
    """Median, min and interquartile range, in milliseconds."""
    ms = np.asarray(seconds) * 1e3
    q1, q3 = np.percentile(ms, [25, 75])
    return {"median": float(np.median(ms)), "min": float(ms.min()), "q1": q1, "q3": q3}


def print_table(times: dict[str, list[float]], label: str) -> dict[str, float]:
    """Print median, min and IQR (ms) per candidate under a ``label`` column; return medians."""
    w = max(len(label), *(len(k) for k in times)) + 2
    print(f"{label:<{w}}{'median ms':>10}{'min ms':>9}{'IQR ms':>16}{'n':>4}")
    med = {}
    for k, ts in times.items():
        s = summary(ts)
        med[k] = s["median"]
        iqr = f"{s['q1']:.2f}-{s['q3']:.2f}"
        print(f"{k:<{w}}{s['median']:>10.3f}{s['min']:>9.3f}{iqr:>16}{len(ts):>4}")
    return med


def grad_loop(pot: Any, k: int) -> Callable[[Any, Any], Any]:
    """Jitted ``(u, data) ->`` K ``value_and_grad`` steps of ``pot`` in a ``fori_loop``."""

    @jax.jit
    def loop(u: Any, data: Any) -> Any:
        def body(i: int, carry: tuple) -> tuple:
            z, acc = carry
            v, g = jax.value_and_grad(pot.potential_fn_gen(data))(z)
            return jax.tree.map(lambda w, gw: w - 1e-9 * gw, z, g), acc + v

        return jax.lax.fori_loop(0, k, body, (u, jnp.zeros((), pot.dtype)))

    return loop


def median(seconds: list[float]) -> float:
    return statistics.median(seconds)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine() -> str:
    """Date, versions, devices, CPU and load average, as ``#`` comment lines."""
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    import jaxlib

    return "\n".join(
        [
            f"# {datetime.datetime.now(datetime.UTC).isoformat(timespec='seconds')}",
            f"# python {platform.python_version()}, jax {jax.__version__}, jaxlib "
            f"{jaxlib.__version__}, numpyro {numpyro.__version__}",
            f"# devices {jax.devices()}",
            f"# {os.cpu_count()} CPUs ({cpu_model()}), load average {load}",
        ]
    )

"""Live progress bars on stderr: whether to show them, and tqdm bars for compiled loops.

``progress_bar=None`` (the default of :func:`~bnn_ppl.inference.fit` and the drivers) means
:func:`default_progress_bar`: on when stderr is a terminal and the environment variable ``CI``
is not set. MCMC and SVI show NumPyro's own bars; :func:`loop_bar` follows a ``lax.scan`` (MAP,
deep ensembles) through ``jax.debug.callback`` without splitting the compiled loop, and
:func:`segment_bar` a Python loop of segments (reference runs). A bar changes no result.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from bnn_ppl import validation

__all__ = ["default_progress_bar", "check_progress_bar", "loop_bar", "segment_bar", "LoopTick"]

LoopTick = Callable[[Any, Any], None]
"""``tick(step, loss)`` inside a compiled loop (``step`` 0-based)."""


def default_progress_bar() -> bool:
    """True when stderr is a terminal and ``CI`` is not set in the environment."""
    isatty = getattr(sys.stderr, "isatty", None)
    try:
        terminal = bool(isatty()) if isatty is not None else False
    except (OSError, ValueError):  # (a closed stream)
        terminal = False
    return terminal and "CI" not in os.environ


def check_progress_bar(progress_bar: Any) -> bool:
    """``progress_bar`` as a bool: ``None`` is :func:`default_progress_bar`."""
    if progress_bar is None:
        return default_progress_bar()
    return validation.check_bool("progress_bar", progress_bar)


def force_mcmc_bar(mcmc: Any, progress_bar: bool) -> Any:
    """Set ``mcmc.progress_bar`` as asked (NumPyro turns it off whenever ``CI`` is set, even
    when asked for it)."""
    mcmc.progress_bar = progress_bar
    return mcmc


def _tqdm(**kwargs: Any) -> Any:
    from tqdm.auto import tqdm

    return tqdm(file=sys.stderr, dynamic_ncols=True, **kwargs)


@contextlib.contextmanager
def loop_bar(
    total: int,
    desc: str,
    enabled: bool,
    *,
    label: str = "loss",
    every: int | None = None,
    members: int = 1,
) -> Iterator[LoopTick]:
    """A bar over ``total`` steps of a compiled loop; yields ``tick`` to call inside the loop
    body as ``tick(step, value)`` (``step`` counts from 0).

    ``tick`` reports every ``every``-th step (default about 50 reports) and the last one
    through ``jax.debug.callback``; the bar shows the step and ``label`` with the mean of the
    values reported for that step (a vmapped loop of ``members``, e.g. an ensemble, reports
    once per member; the bar counts ``members`` reports as one step). The compiled loop is the
    same whether the bar is ``enabled`` or not (the host function just does nothing when it
    is not), so its results are the same bit for bit: a callback can change how XLA fuses the
    loop, and so the last bits of float32 sums, but it is there either way.
    """
    every = max(1, total // 50) if every is None else max(1, int(every))
    bar = _tqdm(total=total, desc=f"{desc} (compiling)", unit="step") if enabled else None
    seen: dict[int, list[float]] = {}
    done = [0]  # steps reported, summed over members

    def report(step: Any, value: Any) -> None:
        if bar is None:
            return
        if not done[0]:  # the rate counts from the first step, not from compilation
            bar.reset(total=total)
            bar.set_description_str(desc, refresh=False)
        step = int(np.asarray(step).reshape(-1)[0])
        values = [float(v) for v in np.asarray(value).reshape(-1)]
        since = (step + 1) % every or every  # steps since the previous report of this member
        done[0] += since * len(values)
        bar.update(min(total, done[0] // members) - bar.n)
        now = seen.setdefault(step, [])
        now.extend(values)
        if len(seen) > 2 * members + 2:  # (members one after another: forget old steps)
            del seen[min(seen)]
        bar.set_postfix_str(f"{label} {np.mean(now):.4g}", refresh=True)

    def tick(step: Any, value: Any) -> None:
        due = jnp.logical_or(step % every == every - 1, step == total - 1)
        jax.lax.cond(due, lambda: jax.debug.callback(report, step, value), lambda: None)

    try:
        yield tick
    finally:
        if bar is not None:
            bar.close()


@contextlib.contextmanager
def segment_bar(total: int, desc: str, enabled: bool, *, unit: str = "draw") -> Iterator[Any]:
    """A bar over ``total`` units advanced by Python code between segments; yields the tqdm
    object (``update(n)``, ``set_postfix_str(text)``) or a stand-in that does nothing."""
    if not enabled:
        yield _NoBar()
        return
    bar = _tqdm(total=total, desc=desc, unit=unit)
    try:
        yield bar
    finally:
        bar.close()


class _NoBar:
    """What :func:`segment_bar` yields when off."""

    n = 0

    def update(self, n: int = 1) -> None:
        self.n += n

    def set_postfix_str(self, text: str = "", refresh: bool = True) -> None:
        pass

    def set_description_str(self, text: str = "", refresh: bool = True) -> None:
        pass

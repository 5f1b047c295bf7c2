"""What the subcommands print: status lines that ``--quiet`` silences, and plain-text tables.

Example:
    >>> from bnn_ppl.cli.console import table
    >>> print(table(["run", "NLL"], [["runs/hmc", 0.25], ["runs/svi", float("nan")]]))
    run          NLL
    runs/hmc  0.2500
    runs/svi       -
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def verdict(convergence: Mapping[str, Any]) -> str:
    """A reference run's verdict in words, from its ``convergence_summary``.

    >>> verdict({"converged": False, "stop_reason": "max_draws", "draws": 20})
    'NOT converged (max_draws) after 20 draws per chain'
    >>> verdict({"converged": False, "stop_reason": "max_seconds", "draws": None})
    'NOT converged (max_seconds) during warmup: no draw sampled'
    """
    head = "converged" if convergence.get("converged") else "NOT converged"
    draws = convergence.get("draws")
    where = "during warmup: no draw sampled" if draws is None else f"after {draws} draws per chain"
    return f"{head} ({convergence.get('stop_reason')}) {where}"


def count(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1.

    >>> count(1, "chain"), count(2, "chain"), count(0, "draw")
    ('1 chain', '2 chains', '0 draws')
    """
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def printer(quiet: bool) -> Callable[..., None]:
    """``print`` (flushed), or a function that prints nothing when ``quiet``."""
    return (lambda *a, **k: None) if quiet else (lambda *a, **k: print(*a, **k, flush=True))


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table: the first column left-aligned, numbers with 4 decimals."""

    def cell(c: Any) -> str:
        if isinstance(c, str):
            return c
        return "-" if c is None or (isinstance(c, float) and math.isnan(c)) else f"{c:.4f}"

    cells = [list(header)] + [[cell(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join(
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in cells
    )

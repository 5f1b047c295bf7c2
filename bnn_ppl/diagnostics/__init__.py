"""Convergence diagnostics: R-hat and ESS in weight and function space, and chain health.

This package is the one public surface: ``bp.diagnostics.weight_space``, ``function_space``,
``convergence``, ``sampler_summary`` and the rest of ``__all__``, each imported from its module
on first use (``import bnn_ppl.diagnostics`` loads nothing heavy). The parts:
:mod:`~.summary`, :mod:`~.rank` (rank-normalised R-hat, bulk ESS), :mod:`~.function_values`
(the quantities judged), :mod:`~.chain_health`, :mod:`~.chain_levels`, :mod:`~.scale_levels`,
:mod:`~.slow_values`.
"""

from importlib import import_module
from typing import Any

_WHERE = {
    "THRESHOLDS": "summary",
    "Convergence": "summary",
    "GroupSummary": "summary",
    "weight_space": "summary",
    "function_space": "summary",
    "convergence": "summary",
    "rhat_bulk_ess": "summary",
    "unknown_as_failing": "summary",
    "sampler_summary": "summary",
    "check_chains": "chain_health",
    "ChainHealth": "chain_health",
    "StuckChainWarning": "chain_health",
    "to_inference_data": "summary",
}
"""Each public name and the module (of this package) that defines it."""

__all__ = list(_WHERE)


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        value = getattr(import_module(f"bnn_ppl.diagnostics.{_WHERE[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'bnn_ppl.diagnostics' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

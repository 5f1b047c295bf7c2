"""Convergence diagnostics: R-hat and ESS in weight and function space, and chain health.

``bp.diagnostics.weight_space``, ``function_space``, ``convergence``, ``sampler_summary`` and
the rest of ``__all__`` come from :mod:`~bnn_ppl.diagnostics.summary`, imported on first use
(``import bnn_ppl.diagnostics`` loads nothing heavy). The parts: :mod:`~.summary`,
:mod:`~.rank` (rank-normalised R-hat, bulk ESS), :mod:`~.function_values` (the quantities
judged), :mod:`~.chain_health`, :mod:`~.chain_levels`, :mod:`~.scale_levels`, :mod:`~.slow_values`.
"""

from importlib import import_module
from typing import Any

__all__ = [
    "THRESHOLDS",
    "Convergence",
    "GroupSummary",
    "weight_space",
    "function_space",
    "convergence",
    "rhat_bulk_ess",
    "unknown_as_failing",
    "sampler_summary",
    "check_chains",
    "ChainHealth",
    "StuckChainWarning",
    "to_inference_data",
]


def __getattr__(name: str) -> Any:
    if name in __all__:
        value = getattr(import_module("bnn_ppl.diagnostics.summary"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'bnn_ppl.diagnostics' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

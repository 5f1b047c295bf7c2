"""Run folders: what a run folder holds, how it is written, read back and checked.

``bnn_ppl.runs`` is the one name to import, the one public surface: the names of
:mod:`~bnn_ppl.runs.config` (``config.json``, the folder's claim and lock),
:mod:`~bnn_ppl.runs.load` (reading back) and :mod:`~bnn_ppl.runs.write` (the results), and the
metric helpers evaluating a folder needs; :mod:`~bnn_ppl.runs.progress` (``progress.jsonl``)
is imported as a module. Part of the core: it never imports ``bnn_ppl.inference``.
"""

from bnn_ppl.metrics.suite import flat_draws, per_chain, predictive_metrics
from bnn_ppl.runs import config, load, write
from bnn_ppl.runs.config import *  # noqa: F403
from bnn_ppl.runs.load import *  # noqa: F403
from bnn_ppl.runs.write import *  # noqa: F403

__all__ = [
    *config.__all__,
    *load.__all__,
    *write.__all__,
    "flat_draws",
    "per_chain",
    "predictive_metrics",
]

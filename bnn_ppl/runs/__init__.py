"""Run folders: what a run folder holds, how it is written, read back and checked.

``bnn_ppl.runs`` is the one name to import; the parts live in :mod:`~bnn_ppl.runs.write`,
:mod:`~bnn_ppl.runs.config` (``config.json``), :mod:`~bnn_ppl.runs.load` (reading back) and
:mod:`~bnn_ppl.runs.progress` (``progress.jsonl``). Part of the core: it never imports
``bnn_ppl.inference``.
"""

from bnn_ppl.runs.write import *  # noqa: F403
from bnn_ppl.runs.write import __all__  # noqa: F401

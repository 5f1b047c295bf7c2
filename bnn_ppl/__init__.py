"""bnn_ppl: Bayesian neural networks as NumPyro models.

The data flow is the architecture, one module per stage::

    data -> BNN (network + prior + likelihood + temperature) -> potential (sharded, chunked)
         -> kernel (NumPyro HMC/NUTS) -> samples -> predict / bma -> metrics

* :mod:`bnn_ppl.data` - embedded datasets (``bp.data.load("digits")``)
* :mod:`bnn_ppl.priors`, :mod:`bnn_ppl.likelihoods`, :class:`bnn_ppl.BNN` - the model
* :mod:`bnn_ppl.predictive` - ``bp.predict`` and ``bp.bma``
* :mod:`bnn_ppl.metrics` - accuracy, NLL, calibration, agreement
* ``bnn_ppl.models`` (architectures) and ``bnn_ppl.inference`` (potential, HMC) are
  subpackages installed from the top-level ``models/`` and ``inference/`` folders.

Example:
    >>> import bnn_ppl as bp
    >>> from bnn_ppl.models import MLP
    >>> data = bp.data.load("diabetes")
    >>> model = bp.BNN(MLP(hidden=(16,), out=1), prior=bp.priors.Normal(1.0),
    ...                likelihood=bp.likelihoods.Gaussian(scale=0.5))
    >>> model.num_params(data.x_train)
    193
"""

import sys
from importlib import import_module
from typing import Any

import numpyro.distributions  # noqa: F401  (load NumPyro for real before ArviZ; see below)

from bnn_ppl import data, diagnostics, likelihoods, metrics, priors, validation
from bnn_ppl.model import BNN
from bnn_ppl.predictive import bma, predict, prior_predictive
from bnn_ppl.validation import InputError

__all__ = [
    "BNN",
    "InputError",
    "config",
    "fit",
    "Posterior",
    "bma",
    "data",
    "diagnostics",
    "likelihoods",
    "metrics",
    "predict",
    "prior_predictive",
    "priors",
    "validation",
]
__version__ = "0.1.0"


def _rebind_numpyro_submodules() -> None:
    """Re-attach NumPyro submodules to their packages.

    ArviZ 1.x registers ``numpyro`` through ``lazy_loader``; when ArviZ is imported before
    NumPyro, the real import later leaves submodules out of their parents' namespaces (e.g.
    ``numpyro.distributions.distribution``), and ``numpyro.factor`` then fails with an
    AttributeError. Binding them back is harmless when nothing is missing.
    """
    for name, module in list(sys.modules.items()):
        if not name.startswith("numpyro.") or module is None:
            continue
        parent, _, child = name.rpartition(".")
        if parent in sys.modules and not hasattr(sys.modules[parent], child):
            setattr(sys.modules[parent], child, module)


_rebind_numpyro_submodules()


def __getattr__(name: str) -> Any:
    # ``bp.inference`` and ``bp.models`` are subpackages; import them on first use so that
    # importing the core never pulls in inference code (and ``bp.plots`` never loads matplotlib
    # unless asked for).
    if name in ("inference", "models", "plots"):
        return import_module(f"bnn_ppl.{name}")
    if name == "Posterior":
        return import_module("bnn_ppl.posterior").Posterior
    if name == "config":
        return import_module("bnn_ppl.config")
    if name == "fit":  # the driver lives in inference; imported on first use only
        return import_module("bnn_ppl.inference.fitting").fit
    raise AttributeError(f"module 'bnn_ppl' has no attribute {name!r}")

"""bnn_ppl: Bayesian neural networks as NumPyro models.

Example:
    >>> import bnn_ppl as bp
    >>> from bnn_ppl.models import MLP
    >>> data = bp.data.load("diabetes")
    >>> model = bp.BNN(MLP(hidden=(16,), out=1), prior=bp.priors.Normal(1.0),
    ...                likelihood=bp.likelihoods.Gaussian(scale=0.5))
    >>> model.num_params(data.x_train)
    193
"""

# Notes:
#
# The data flow is the architecture, one module per stage::
#
#     data -> BNN (network + prior + likelihood + temperature) -> potential (sharded, chunked)
#          -> kernel (NumPyro HMC/NUTS) -> samples -> predict / bma -> metrics
#
# * :mod:`bnn_ppl.data` - embedded datasets (``bp.data.load("digits")``)
# * :mod:`bnn_ppl.priors`, :mod:`bnn_ppl.likelihoods`, :class:`bnn_ppl.BNN` - the model
# * :mod:`bnn_ppl.predictive` - ``bp.predict`` and ``bp.bma``
# * :mod:`bnn_ppl.metrics` - accuracy, NLL, calibration, agreement
# * ``bnn_ppl.models`` (architectures) and ``bnn_ppl.inference`` (potential, HMC) are
#   subpackages installed from the top-level ``models/`` and ``inference/`` folders.
#
# ``import bnn_ppl`` itself is cheap: each name is imported on first use, so JAX, NumPyro and
# Flax load with the first model or computation, ArviZ with the first diagnostic or ArviZ file
# (always after NumPyro: :mod:`bnn_ppl._compat`), and matplotlib only with ``bp.plots``.

from importlib import import_module
from importlib.util import find_spec
from typing import TYPE_CHECKING, Any

from bnn_ppl import _compat

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

# Nothing heavy is imported here: ``import bnn_ppl`` loads neither JAX, NumPyro, ArviZ nor
# matplotlib (tests/test_imports.py checks it). Each public name is imported on first access
# (PEP 562) and then cached in this module's namespace, so later accesses are plain lookups.
_LAZY: dict[str, tuple[str, str | None]] = {
    # name: (module, attribute of that module; None: the module itself)
    "BNN": ("bnn_ppl.model", "BNN"),
    "InputError": ("bnn_ppl.validation", "InputError"),
    "Posterior": ("bnn_ppl.posterior", "Posterior"),
    "bma": ("bnn_ppl.predictive", "bma"),
    "predict": ("bnn_ppl.predictive", "predict"),
    "prior_predictive": ("bnn_ppl.predictive", "prior_predictive"),
    "fit": ("bnn_ppl.inference.fitting", "fit"),  # the driver lives in inference
    "config": ("bnn_ppl.config", None),
    "data": ("bnn_ppl.data", None),
    "diagnostics": ("bnn_ppl.diagnostics", None),
    "likelihoods": ("bnn_ppl.likelihoods", None),
    "metrics": ("bnn_ppl.metrics", None),
    "priors": ("bnn_ppl.priors", None),
    "validation": ("bnn_ppl.validation", None),
    # subpackages installed from the top-level ``inference/`` and ``models/`` folders, and the
    # plotting module (the only one that loads matplotlib)
    "inference": ("bnn_ppl.inference", None),
    "models": ("bnn_ppl.models", None),
    "plots": ("bnn_ppl.plots", None),
}

if TYPE_CHECKING:  # for type checkers and IDEs; at run time these come from __getattr__
    from bnn_ppl import (  # noqa: F401
        config,
        data,
        diagnostics,
        inference,
        likelihoods,
        metrics,
        models,
        plots,
        priors,
        validation,
    )
    from bnn_ppl.inference.fitting import fit  # noqa: F401
    from bnn_ppl.model import BNN  # noqa: F401
    from bnn_ppl.posterior import Posterior  # noqa: F401
    from bnn_ppl.predictive import bma, predict, prior_predictive  # noqa: F401
    from bnn_ppl.validation import InputError  # noqa: F401

# an ArviZ imported before bnn_ppl may have left NumPyro as a lazy proxy; make it real before
# any bnn_ppl module imports a NumPyro submodule (see bnn_ppl._compat)
_compat.ensure_numpyro()


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module_name, attr = _LAZY[name]
    elif not name.startswith("_") and find_spec(f"bnn_ppl.{name}") is not None:
        module_name, attr = f"bnn_ppl.{name}", None  # any other submodule, e.g. ``bp.io``
    else:
        raise AttributeError(f"module 'bnn_ppl' has no attribute {name!r}")
    _compat.ensure_numpyro()
    module = import_module(module_name)
    _compat.rebind_numpyro_submodules()
    value = module if attr is None else getattr(module, attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))

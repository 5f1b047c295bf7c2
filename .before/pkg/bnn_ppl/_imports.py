"""Heavy optional imports, loaded on first use and in a safe order.

``import bnn_ppl`` imports nothing heavy (see :mod:`bnn_ppl`); JAX and NumPyro load with the
first module that computes, ArviZ with the first diagnostic or file that needs it and matplotlib
with :mod:`bnn_ppl.plots`. Two of these imports must happen in a fixed order:

ArviZ 1.x registers ``numpyro`` (and ``jax``) in ``sys.modules`` as ``lazy_loader`` proxies when
NumPyro is not imported yet. A later ``import numpyro.distributions`` then loads
``numpyro.distributions`` twice (the proxy's ``__path__`` runs NumPyro's ``__init__``, which
imports the subpackage, and the import machinery then executes it again), and the module left
in ``sys.modules`` lacks its own submodules as attributes: ``numpyro.factor`` fails with
``AttributeError: module 'numpyro.distributions' has no attribute 'distribution'``. So:

* :func:`arviz` imports NumPyro for real before ArviZ: every bnn_ppl module that needs ArviZ
  gets it from here, never through ``import arviz``;
* :func:`ensure_numpyro` turns a proxy left by an ArviZ the user imported first into the real
  module, and re-attaches any submodule that a double load left unbound
  (:func:`rebind_numpyro_submodules`). ``import bnn_ppl`` and every lazy attribute of
  ``bnn_ppl`` call it; it costs nothing when NumPyro is absent or already loaded.

One order is not repaired: ``import bnn_ppl``, then ``import arviz``, then a bnn_ppl submodule
imported directly (``from bnn_ppl.likelihoods import Gaussian``) before any ``bnn_ppl.X``
attribute. Import ArviZ first (the sorted order) or after NumPyro, or reach the module through
``bnn_ppl.X`` (e.g. ``bp.likelihoods.Gaussian``).

Example:
    >>> from bnn_ppl import _imports
    >>> az = _imports.arviz()
    >>> import numpyro
    >>> numpyro.distributions.distribution.Unit is not None
    True
"""

from __future__ import annotations

import sys
from types import ModuleType

__all__ = ["arviz", "ensure_numpyro", "rebind_numpyro_submodules"]


def rebind_numpyro_submodules() -> None:
    """Re-attach loaded NumPyro submodules to their parent packages where a double load (see
    the module docstring) left them out. Harmless when nothing is missing."""
    for name, module in list(sys.modules.items()):
        if not name.startswith("numpyro.") or module is None:
            continue
        parent, _, child = name.rpartition(".")
        if parent in sys.modules and not hasattr(sys.modules[parent], child):
            setattr(sys.modules[parent], child, module)


def ensure_numpyro() -> None:
    """If ``numpyro`` is in ``sys.modules`` (possibly as ArviZ's lazy proxy), load it for real
    and rebind its submodules; if it is absent, do nothing (nothing can be broken yet)."""
    module = sys.modules.get("numpyro")
    if module is None:
        return
    getattr(module, "__version__", None)  # any attribute access executes a lazy proxy
    rebind_numpyro_submodules()


def arviz() -> ModuleType:
    """The ``arviz`` module, imported after NumPyro (the order ArviZ 1.x needs; see above)."""
    ensure_numpyro()
    import numpyro.distributions  # noqa: F401  (real NumPyro first: ArviZ then finds it)

    # isort: split
    import arviz as az

    rebind_numpyro_submodules()
    return az

"""Sphinx configuration of bnn_ppl's documentation: ``sphinx-build -W docs docs/_build/html``."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "docs"))
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# the notebooks' kernels inherit this: tqdm's notebook bars need ipywidgets, which the docs do not
# install, and tqdm says so on import; the text bars it falls back to are what the pages show
os.environ["PYTHONWARNINGS"] = "ignore:IProgress not found:Warning"

import _generate  # noqa: E402  (docs/_generate.py: pages generated from the JSON records)

_generate.main()

project = "bnn_ppl"
author = "bnn_ppl authors"
copyright = "2026, bnn_ppl authors"
release = version = importlib.import_module("bnn_ppl").__version__

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.intersphinx",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "sphinx_autodoc_typehints",
    "sphinx_copybutton",
    "_xref",  # docs/_xref.py: references to private module paths resolve to the public names
]

# benchmarks/_generated: tables the benchmark pages include, not pages of their own
exclude_patterns = [
    "_build",
    "jupyter_execute",
    ".jupyter_cache",
    "**.ipynb_checkpoints",
    "benchmarks/_generated",
]
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
root_doc = "index"

# --- MyST and notebook execution ----------------------------------------------------------------
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 4
# a fence without a language is a command or a program's output: shown as typed, not coloured as
# Python (every Python block of these pages says ```python)
highlight_language = "text"
# notebooks (MyST Markdown with a ``kernelspec`` front matter) execute at build time, cached by
# jupyter-cache in docs/_build/.jupyter_cache: an unchanged notebook is not re-run
nb_execution_mode = os.environ.get("BNN_PPL_DOCS_EXECUTE", "cache")
nb_execution_cache_path = str(ROOT / "docs" / "_build" / ".jupyter_cache")
nb_execution_timeout = 300
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_merge_streams = True

# --- API reference ------------------------------------------------------------------------------
autosummary_generate = True
autosummary_imported_members = True
autodoc_default_options = {"members": False, "show-inheritance": False}
autodoc_typehints = "description"
autodoc_member_order = "bysource"
autodoc_class_signature = "mixed"
autoclass_content = "class"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
typehints_fully_qualified = False
always_document_param_types = False
typehints_document_rtype = True

# --- Cross-references ---------------------------------------------------------------------------
nitpicky = True
# Inventories of the libraries this one builds on. CI has no network: an inventory is used only
# when a local copy exists in docs/_inventories/ (``python docs/_inventories/fetch.py`` refreshes
# them); otherwise references into that library render as code, unlinked (see nitpick_ignore_regex).
_INVENTORIES = {
    "python": "https://docs.python.org/3",
    "numpy": "https://numpy.org/doc/stable",
    "jax": "https://docs.jax.dev/en/latest",
    "numpyro": "https://num.pyro.ai/en/stable",
    "flax": "https://flax.readthedocs.io/en/latest",
    "arviz": "https://python.arviz.org/en/stable",
    "optax": "https://optax.readthedocs.io/en/latest",
    "xarray": "https://docs.xarray.dev/en/stable",
    "matplotlib": "https://matplotlib.org/stable",
}
_INV_DIR = ROOT / "docs" / "_inventories"
intersphinx_mapping = {
    name: (url, str(_INV_DIR / f"{name}.inv"))
    for name, url in _INVENTORIES.items()
    if (_INV_DIR / f"{name}.inv").exists()
}
intersphinx_timeout = 5
_EXTERNAL = (
    r"(jax|jaxlib|numpyro|flax|arviz|optax|numpy|np|jnp|xarray|matplotlib|scipy|sklearn|tyro|h5py"
    r"|tensorflow_datasets|tfds|tqdm|typing|collections|pathlib|os|json|enum|dataclasses"
    r"|concurrent|threading|warnings|io|functools|contextlib|builtins|abc|types)"
)
nitpick_ignore_regex = [
    (r"py:.*", _EXTERNAL + r"(\..*)?"),
]
if "python" not in intersphinx_mapping:
    # without Python's inventory, builtins (int, float, str, ...) cannot link
    import builtins

    nitpick_ignore_regex.append(
        (r"py:.*", "|".join(n for n in dir(builtins) if not n.startswith("_")) + r"|None|Ellipsis")
    )

# --- HTML ---------------------------------------------------------------------------------------
html_theme = "furo"
html_title = f"bnn_ppl {version}"
html_static_path = []
templates_path = ["_templates"]
html_show_sourcelink = False

# a name imported for type checking only (``if TYPE_CHECKING:``) renders as written
suppress_warnings = ["sphinx_autodoc_typehints.forward_reference"]


def _optional_pages(app, docname, source):
    """docs/architecture.md is linked from the index when it exists (an optional page)."""
    if docname == "index" and not (ROOT / "docs" / "architecture.md").exists():
        source[0] = source[0].replace("architecture*\n", "")


def _public_bases(app, name, obj, options, bases):
    """A class page lists its public bases only (a private mixin is an implementation detail)."""
    bases[:] = [b for b in bases if not getattr(b, "__name__", "").startswith("_")]


def setup(app):
    app.connect("source-read", _optional_pages)
    # before sphinx_autodoc_typehints renders the bases as text (priority 500)
    app.connect("autodoc-process-bases", _public_bases, priority=400)

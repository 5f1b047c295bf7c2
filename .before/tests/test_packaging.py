"""Packaging: every subpackage in the tree is installed, under bnn_ppl.* only; the shipped
documentation has no placeholder left in it."""

from __future__ import annotations

import tomllib

from conftest import ROOT


def test_every_package_directory_is_listed_in_pyproject():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(cfg["packages"])
    mapping = cfg["package-dir"]
    found = set()
    for pkg, folder in mapping.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            if "__pycache__" in rel.parts:
                continue
            found.add(".".join([pkg, *rel.parts]) if rel.parts else pkg)
    # subpackages of a mapped folder that are themselves mapped appear twice; dedupe by name
    assert found <= listed, f"not installed: {sorted(found - listed)}"
    assert all(p.startswith("bnn_ppl") for p in listed)


def test_models_and_inference_are_not_top_level_names(tmp_path):
    """From outside the checkout, only bnn_ppl.* names exist (no bare models/inference)."""
    import subprocess
    import sys

    code = (
        "import importlib.util, pathlib, bnn_ppl.models, bnn_ppl.inference\n"
        "assert importlib.util.find_spec('models') is None, 'bare models importable'\n"
        "assert importlib.util.find_spec('inference') is None, 'bare inference importable'\n"
        "print(pathlib.Path(bnn_ppl.models.__file__).parent.name,"
        " pathlib.Path(bnn_ppl.inference.__file__).parent.name)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["models", "inference"]


def test_importing_arviz_first_does_not_break_numpyro(tmp_path):
    """ArviZ's lazy loader used to leave numpyro.distributions.distribution unbound."""
    import subprocess
    import sys

    code = (
        "import arviz, bnn_ppl, numpyro\n"
        "assert numpyro.distributions.distribution.Unit is not None\n"
        "from numpyro import handlers\n"
        "handlers.seed(lambda: numpyro.factor('f', 0.0), 0)()\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_the_documentation_has_no_placeholder_left():
    """A stand-in written while a result was pending (``LAPLACE_PLACEHOLDER``, ``TODO`` ...) must
    not reach the README or the references' README: it once sat in the Findings for a session."""
    import re

    pattern = re.compile(r"\b[A-Z][A-Z0-9_]*(PLACEHOLDER|_NOTE|_CONTINUED)\b|\b(TODO|FIXME|XXX)\b")
    for doc in (ROOT / "README.md", ROOT / "examples" / "references" / "README.md"):
        lines = enumerate(doc.read_text().splitlines(), 1)
        found = [f"{doc.name}:{i}: {line.strip()}" for i, line in lines if pattern.search(line)]
        assert not found, found

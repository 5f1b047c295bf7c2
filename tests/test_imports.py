"""``import bnn_ppl`` and ``bnn-ppl --help`` load nothing heavy; every public name still works.

What a fresh interpreter has loaded is read from ``sys.modules`` (or, for the installed
``bnn-ppl`` script, from ``-X importtime``'s list of imports) in a subprocess, since this test
process has long imported everything. No wall-clock time is asserted: the timings are in
``benchmarks/import_time.py``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import bnn_ppl

HEAVY = ("jax", "jaxlib", "numpyro", "flax", "optax", "arviz", "xarray", "matplotlib", "scipy")
"""Packages that neither ``import bnn_ppl`` nor ``bnn-ppl --help`` may load."""

ENV = dict(os.environ, JAX_PLATFORMS="cpu")


def _python(code: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=ENV, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def _loaded_heavy(code: str) -> list[str]:
    """The top-level packages of :data:`HEAVY` in ``sys.modules`` after running ``code``."""
    out = _python(f"{code}\nimport sys\nprint(sorted({{m.split('.')[0] for m in sys.modules}}))")
    loaded = eval(out.strip().splitlines()[-1])  # a printed list of str
    return [m for m in HEAVY if m in loaded]


def _imported_by(command: list[str]) -> set[str]:
    """Every module that ``command`` (a Python program) imports, from ``-X importtime``."""
    env = dict(ENV, PYTHONPROFILEIMPORTTIME="1")
    proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "usage: bnn-ppl" in proc.stdout, proc.stdout[-2000:]
    names = set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip())
    assert "bnn_ppl.cli" in names, "no -X importtime output: cannot check the imports"
    return names


@pytest.mark.parametrize(
    "code",
    [
        "import bnn_ppl",
        "import bnn_ppl as bp; bp.config; bp.validation; bp.data; bp.InputError",
        "from bnn_ppl import config, data, validation, InputError",
        "import bnn_ppl.cli; bnn_ppl.cli.main(['--help'])",
        "import bnn_ppl.cli.parser; bnn_ppl.cli.parser.command_type('hmc')",
    ],
)
def test_light_imports_load_nothing_heavy(code):
    assert _loaded_heavy(code) == []


def test_heavy_modules_load_on_first_use():
    """The lazy names still work in a fresh process (and ArviZ comes after NumPyro)."""
    loaded = _loaded_heavy(
        "import numpy as np, bnn_ppl as bp\n"
        "bp.diagnostics.weight_space({'w': np.random.default_rng(0).normal(size=(2, 8, 1))})\n"
        "import numpyro\n"
        "from numpyro import handlers\n"
        "handlers.seed(lambda: numpyro.factor('f', 0.0), 0)()\n"
    )
    assert {"jax", "numpyro", "arviz"} <= set(loaded)


def test_arviz_imported_between_bnn_ppl_and_first_use_does_not_break_numpyro():
    """ArviZ 1.x leaves ``numpyro`` as a lazy proxy; the first ``bp.X`` makes it real (the
    order ``import arviz`` before ``import bnn_ppl`` is tests/test_packaging.py's)."""
    out = _python(
        "import bnn_ppl as bp\n"
        "import arviz\n"
        "bp.likelihoods.Gaussian(scale=1.0)\n"
        "import numpyro\n"
        "from numpyro import handlers\n"
        "handlers.seed(lambda: numpyro.factor('f', 0.0), 0)()\n"
        "print('ok')\n"
    )
    assert out.strip().endswith("ok")


@pytest.mark.parametrize(
    ("how", "args"),
    [
        ("script", ["--help"]),
        ("module", ["--help"]),
        ("script", ["run", "--help"]),
        ("script", ["run", "hmc", "--help"]),
        ("module", ["evaluate", "--help"]),
    ],
)
def test_help_loads_nothing_heavy(how, args):
    if how == "script":
        script = shutil.which("bnn-ppl") or str(Path(sys.executable).with_name("bnn-ppl"))
        if not Path(script).exists():
            pytest.skip("the bnn-ppl script is not installed (pip install -e .)")
        command = [script, *args]
    else:
        command = [sys.executable, "-m", "bnn_ppl", *args]
    names = _imported_by(command)
    heavy = sorted({n.split(".")[0] for n in names} & set(HEAVY))
    assert heavy == [], f"{' '.join(command)} imported {heavy}"
    # the option parser (tyro) only once a subcommand's options are parsed
    assert ("tyro" in names) == (len(args) > 2 or args[0] == "evaluate"), sorted(names)


def test_every_public_name_resolves():
    for name in bnn_ppl.__all__:
        assert getattr(bnn_ppl, name) is not None, name
    assert set(bnn_ppl.__all__) <= set(dir(bnn_ppl))
    assert {"inference", "models", "plots"} <= set(dir(bnn_ppl))


def test_lazy_names_are_the_directly_imported_objects():
    import bnn_ppl.config
    import bnn_ppl.data
    import bnn_ppl.diagnostics
    import bnn_ppl.inference
    import bnn_ppl.io
    import bnn_ppl.likelihoods
    import bnn_ppl.metrics
    import bnn_ppl.models
    import bnn_ppl.plots
    import bnn_ppl.priors
    import bnn_ppl.validation
    from bnn_ppl.inference.fitting import fit
    from bnn_ppl.model import BNN
    from bnn_ppl.posterior import Posterior
    from bnn_ppl.predictive import bma, predict, prior_predictive
    from bnn_ppl.validation import InputError

    expected = {
        "BNN": BNN,
        "InputError": InputError,
        "Posterior": Posterior,
        "bma": bma,
        "predict": predict,
        "prior_predictive": prior_predictive,
        "fit": fit,
        "config": sys.modules["bnn_ppl.config"],
        "data": sys.modules["bnn_ppl.data"],
        "diagnostics": sys.modules["bnn_ppl.diagnostics"],
        "likelihoods": sys.modules["bnn_ppl.likelihoods"],
        "metrics": sys.modules["bnn_ppl.metrics"],
        "priors": sys.modules["bnn_ppl.priors"],
        "validation": sys.modules["bnn_ppl.validation"],
        "inference": sys.modules["bnn_ppl.inference"],
        "models": sys.modules["bnn_ppl.models"],
        "plots": sys.modules["bnn_ppl.plots"],
        "io": sys.modules["bnn_ppl.io"],  # any submodule, not only the listed names
    }
    assert set(bnn_ppl.__all__) <= set(expected)
    for name, obj in expected.items():
        assert getattr(bnn_ppl, name) is obj, name


def test_lazy_names_match_in_a_fresh_process():
    """Without the test process's earlier imports: first access through ``bp.X``."""
    out = _python(
        "import bnn_ppl as bp\n"
        "first = {n: getattr(bp, n) for n in bp.__all__}\n"
        "from bnn_ppl.model import BNN\n"
        "from bnn_ppl.inference.fitting import fit\n"
        "from bnn_ppl import config, diagnostics\n"
        "assert first['BNN'] is BNN and first['fit'] is fit\n"
        "assert first['config'] is config and first['diagnostics'] is diagnostics\n"
        "assert all(getattr(bp, n) is v for n, v in first.items())\n"
        "print('ok')\n"
    )
    assert out.strip().endswith("ok")


@pytest.mark.parametrize("name", ["no_such_name", "_private", "BNNN", "numpyro"])
def test_unknown_attribute_raises_attribute_error(name):
    with pytest.raises(AttributeError, match=f"has no attribute '{name}'"):
        getattr(bnn_ppl, name)
    assert not hasattr(bnn_ppl, name)


def test_from_import_of_an_unknown_name_is_an_import_error():
    with pytest.raises(ImportError):
        from bnn_ppl import no_such_name  # noqa: F401


def _submodules() -> list[str]:
    """Every module of bnn_ppl, its installed ``inference`` and ``models`` subpackages included
    (``__main__`` modules run the CLI when imported, so they are left out)."""
    import pkgutil

    import bnn_ppl.inference
    import bnn_ppl.models

    names = []
    for pkg in (bnn_ppl, bnn_ppl.inference, bnn_ppl.models):
        for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
            if not info.name.endswith(".__main__"):
                names.append(info.name)
    return sorted(set(names))


def test_no_function_shadows_a_module():
    """``import bnn_ppl.inference.mcmc.run as m`` must give the module: a package that
    re-exported a function under its module's name (``inference.hmc`` was the function
    ``hmc``) hides the module from attribute access."""
    import importlib

    names = _submodules()
    assert {"bnn_ppl.inference.mcmc.run", "bnn_ppl.models.mlp", "bnn_ppl.metrics.suite"} <= set(
        names
    )
    shadowed = []
    for name in names:
        module = importlib.import_module(name)
        parent, _, leaf = name.rpartition(".")
        attr = getattr(importlib.import_module(parent), leaf, None)
        if attr is not module:
            shadowed.append(f"{name} (the package attribute is a {type(attr).__name__})")
    assert shadowed == []


def _defined_and_imported(module_name: str) -> tuple[set[str], set[str]]:
    """The names a module defines at its top level (def, class, assignment) and those it
    imports, read from its source."""
    import ast
    import importlib

    tree = ast.parse(Path(importlib.import_module(module_name).__file__).read_text())
    defined, imported = set(), set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            defined.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                defined |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.Import | ast.ImportFrom):
            imported |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return defined - {"__all__"}, imported


@pytest.mark.parametrize("package", ["bnn_ppl.diagnostics", "bnn_ppl.runs"])
def test_a_package_is_the_one_public_surface_of_its_modules(package):
    """Each module's ``__all__`` lists only what it defines (no module repeats another's
    names); the package's ``__all__`` gives each name once, the defining module's object."""
    import importlib
    import pkgutil

    pkg = importlib.import_module(package)
    owner = {}
    for info in pkgutil.iter_modules(pkg.__path__, package + "."):
        module = importlib.import_module(info.name)
        defined, imported = _defined_and_imported(info.name)
        names = list(getattr(module, "__all__", []))
        foreign = [n for n in names if n not in defined or n in imported]
        assert not foreign, f"{info.name}.__all__ lists names it does not define: {foreign}"
        for n in names:
            owner[n] = module
    assert len(pkg.__all__) == len(set(pkg.__all__)), package
    for name in pkg.__all__:
        value = getattr(pkg, name)
        if name in owner:
            assert value is getattr(owner[name], name), f"{package}.{name}"
    if package == "bnn_ppl.runs":  # every name of its three modules
        for part in ("config", "load", "write"):
            assert set(importlib.import_module(f"{package}.{part}").__all__) <= set(pkg.__all__)

"""The layering of the package holds: import-linter's contracts in pyproject.toml.

``bnn_ppl.inference`` and ``bnn_ppl.models`` are installed from the top-level ``inference/``
and ``models/`` folders, so the checkout is copied into the installed layout first.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from conftest import ROOT


def test_import_linter_contracts_hold(tmp_path):
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "bnn_ppl", tmp_path / "bnn_ppl", ignore=ignore)
    shutil.copytree(ROOT / "inference", tmp_path / "bnn_ppl" / "inference", ignore=ignore)
    shutil.copytree(ROOT / "models", tmp_path / "bnn_ppl" / "models", ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    lint = "from importlinter.cli import lint_imports_command; lint_imports_command()"
    out = subprocess.run(
        [sys.executable, "-c", lint, "--no-cache"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "Contracts: 4 kept, 0 broken." in out.stdout, out.stdout[-2000:]

"""The code's shape: layers that run one way, and modules and functions a newcomer can read.

The layers are import-linter contracts in pyproject.toml (imports inside functions count):

    workbench.cli | workbench.ui                  L3  parse, call, show
    workbench.calibrate, validate, compare, ...   L2  tools over sim and traces
    sim | real                                    L1  each imports only the contracts
    workbench.contracts                           L0
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("workbench", "sim", "real")
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80


def _lint(cwd: Path) -> subprocess.CompletedProcess:
    """import-linter on the packages under `cwd`, with the project's contracts."""
    code = ("import sys; from importlinter.cli import lint_imports; "
            "sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True))")
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True,
                          env={"PYTHONPATH": str(cwd), "PATH": "/usr/bin:/bin"})


def test_the_layers_contracts_are_kept():
    res = _lint(ROOT)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert "0 broken" in res.stdout


def test_a_simulator_import_from_the_real_backend_breaks_the_layers(tmp_path):
    """The check can fail: the same code with one forbidden import (inside a function) is refused."""
    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__", "presets"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "real" / "sneaky.py").write_text("def timeline():\n    from sim.results import PolicyRun\n    return "
                                                 "PolicyRun\n")
    res = _lint(tmp_path)
    assert res.returncode != 0
    assert "real.sneaky -> sim.results" in res.stdout


def _sources() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def test_no_module_is_over_500_lines():
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in _sources()}
    long = {name: n for name, n in sizes.items() if n > MAX_MODULE_LINES}
    assert not long, f"split these modules by job (over {MAX_MODULE_LINES} lines): {long}"


def test_no_function_is_over_80_lines():
    long = {}
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"] = n
    assert not long, f"split these functions (over {MAX_FUNCTION_LINES} lines): {long}"


@pytest.mark.parametrize("pkg", PACKAGES)
def test_no_private_name_is_imported_across_modules(pkg):
    """`from x import _helper` reaches into another module's internals: make it public or move it."""
    bad = []
    for path in (ROOT / pkg).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PACKAGES:
                bad += [f"{path.relative_to(ROOT)}: {node.module}.{a.name}"
                        for a in node.names if a.name.startswith("_")]
    assert not bad, bad

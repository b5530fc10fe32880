"""The code's shape: layers that run one way, and modules and functions a newcomer can read.

The layers are import-linter contracts in pyproject.toml (imports inside functions count):

    workbench.cli | workbench.ui                  L3  parse, call, show
    workbench.calibrate, validate, compare, ...   L2  tools over sim and traces
    sim | real                                    L1  each imports only the contracts
    workbench.contracts                           L0

and no module imports itself through others (no import cycle), nor does a tool package.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("workbench", "sim", "real")
MAX_MODULE_LINES = 400
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
    """The check can fail: the same code with one forbidden import (inside a function) is
    refused."""
    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, tmp_path / pkg,
                        ignore=shutil.ignore_patterns("__pycache__", "presets"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "real" / "sneaky.py").write_text("def timeline():\n"
                                                 "    from sim.results import PolicyRun\n"
                                                 "    return PolicyRun\n")
    # A tool that would show its own widgets: only the CLI and the UI may.
    tool = tmp_path / "workbench" / "compare" / "sneaky.py"
    tool.write_text("def show():\n    import streamlit\n")
    res = _lint(tmp_path)
    assert res.returncode != 0
    assert "real.sneaky -> sim.results" in res.stdout
    assert "workbench.compare.sneaky -> streamlit" in res.stdout


def _sources() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def test_no_module_is_over_400_lines():
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
    """`from x import _helper` reaches into another module's internals: make it public or move
    it."""
    bad = []
    for path in (ROOT / pkg).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.ImportFrom) and node.module
                    and node.module.split(".")[0] in PACKAGES):
                bad += [f"{path.relative_to(ROOT)}: {node.module}.{a.name}"
                        for a in node.names if a.name.startswith("_")]
    assert not bad, bad


def import_cycles(imports: dict[str, set[str]]) -> list[list[str]]:
    """Every import cycle: the strongly connected components of more than one module (Tarjan,
    iterative: a long chain of imports cannot overflow Python's stack), each sorted, in order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []
    for start in sorted(imports):
        if start in index:
            continue
        work = [(start, iter(sorted(imports.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    work.append((child, iter(sorted(imports.get(child, ())))))
                elif child in stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while not component or component[-1] != node:
                    component.append(stack.pop())
                if len(component) > 1:
                    cycles.append(sorted(component))
    return sorted(cycles)


def module_imports(graph: grimp.ImportGraph, names: set[str] | None = None) -> dict[str, set[str]]:
    """Who imports whom among the graph's modules; with `names` (packages), each module counted as
    the one of them it belongs to, and imports within one of them left out."""
    def owner(module: str) -> str | None:
        if names is None:
            return module
        return next((n for n in names if module == n or module.startswith(n + ".")), None)
    imports: dict[str, set[str]] = {}
    for module in graph.modules:
        src = owner(module)
        targets = {owner(m) for m in graph.find_modules_directly_imported_by(module)}
        if src is not None:
            imports.setdefault(src, set()).update(t for t in targets if t is not None and t != src)
    return imports


def _graph(*packages: str, types: bool = False) -> grimp.ImportGraph:
    """The import graph; `types`: imports under `if TYPE_CHECKING:` (which never run) count too."""
    return grimp.build_graph(*packages, cache_dir=None, exclude_type_checking_imports=not types)


def test_no_import_cycle_between_modules():
    cycles = import_cycles(module_imports(_graph(*PACKAGES)))
    assert not cycles, f"these modules import each other (through the others listed): {cycles}"


def test_no_contract_names_another_that_names_it():
    """The contracts at the bottom form no circle even through the types they name: a contract
    that needs another's type imports it, never the other way round as well."""
    graph = _graph("workbench", types=True)
    contracts = {m: t for m, t in module_imports(graph).items()
                 if m.startswith("workbench.contracts")}
    cycles = import_cycles(contracts)
    assert not cycles, f"these contracts name each other's types: {cycles}"


def test_no_import_cycle_between_tool_packages():
    """The tools (and the CLI, UI, contracts beside them) depend one way, package by package."""
    graph = _graph(*PACKAGES)
    parts = {m for m in graph.find_children("workbench")}
    cycles = import_cycles(module_imports(graph, parts))
    assert not cycles, f"these packages import each other (move what joins them): {cycles}"


def test_a_planted_import_cycle_is_found(tmp_path, monkeypatch):
    """The check can fail: a package whose modules import each other (one inside a function, as
    import-linter counts it), and a second, longer cycle between subpackages."""
    pkg = tmp_path / "planted"
    for sub in ("", "inner", "outer"):
        (pkg / sub).mkdir(exist_ok=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from planted import b\n")
    (pkg / "b.py").write_text("def late():\n    from planted import a\n    return a\n")
    (pkg / "inner" / "x.py").write_text("import planted.outer.y\n")
    (pkg / "outer" / "y.py").write_text("import planted.c\n")
    (pkg / "c.py").write_text("import planted.inner.z\n")
    (pkg / "inner" / "z.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    graph = _graph("planted")
    assert import_cycles(module_imports(graph)) == [["planted.a", "planted.b"]]
    packages = module_imports(graph, {"planted.inner", "planted.outer", "planted.c"})
    assert import_cycles(packages) == [["planted.c", "planted.inner", "planted.outer"]]

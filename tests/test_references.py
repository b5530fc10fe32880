"""Names of files and modules in prose resolve against the tree, so a rename that forgets one fails.

Checked: every Markdown file (README.md, docs/, traces/) and the docstrings and comments of every
Python file (workbench/, sim/, real/, tests/, app.py). Three forms of reference:

- a path to a module or document (`workbench/validate/capture.py`, `docs/formats.md`) whose first
  folder is a folder name of this tree (paths into vLLM or veRL are theirs): the file exists,
  counted from the repository root or from any folder above the text that names it (real/'s
  package docstring may name its modules from real/);
- in Python, a bare module file in backticks: a file of that name exists in the folder of the text
  or in one above it. Markdown's bare names are not checked: they name other projects' files and
  the user's own (a reward module);
- a dotted name, `workbench.validate.capture.validate`: its longest prefix that is a module exists,
  and the next part, if any, is a name that module defines or imports at its top level;
- a package's list of its modules (a package docstring's items "- `name`: what it does", also
  after "; " on the same line): each names a module or subpackage somewhere in that package.
"""

from __future__ import annotations

import ast
import io
import os
import re
import tokenize
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("workbench", "sim", "real")
SKIP_DIRS = {".git", ".venv", ".parsers", "__pycache__", "node_modules", ".pytest_cache",
             ".ruff_cache"}
FILE_KINDS = "py|md"
# A path: folders then a file, not inside a longer path, a URL or a wildcard.
PATH = re.compile(rf"(?<![\w/.:*~<-])((?:[\w.-]+/)+[\w-]+\.(?:{FILE_KINDS}))(?![\w/*])")
BARE = re.compile(r"`([\w-]+\.py)`")
# A dotted name rooted at one of the packages; a file name such as sim.py is no dotted name.
DOTTED = re.compile(rf"(?<![\w/.-])((?:{'|'.join(PACKAGES)})(?:\.\w+)+)(?![\w/-])")
LISTED_MODULE = re.compile(r"(?:^\s*- |; )`(\w+)`:")
NOT_A_NAME = {"py", "md", "yaml", "yml", "json", "csv", "parquet", "toml", "txt", "log", "jsonl"}


@dataclass(frozen=True)
class Stale:
    """One reference that resolves to nothing: where, and the name as written."""

    where: str
    line: int
    name: str

    def __str__(self) -> str:
        return f"{self.where}:{self.line}: {self.name}"


@lru_cache(maxsize=None)
def top_level_names(module: Path) -> frozenset[str]:
    """What a module defines or imports at its top level (inside `if` and `try` blocks too)."""
    names: set[str] = set()
    body = list(ast.parse(module.read_text(encoding="utf-8")).body)
    while body:
        node = body.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.If, ast.Try)):
            body += node.body + node.orelse + getattr(node, "finalbody", [])
            body += [n for h in getattr(node, "handlers", []) for n in h.body]
    return frozenset(names)


def _module_file(parts: list[str], root: Path) -> Path | None:
    """The file (or package folder) of a dotted module name, or None."""
    base = root.joinpath(*parts)
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    if base.is_dir():
        return base / "__init__.py" if (base / "__init__.py").is_file() else base
    return None


def dotted_resolves(name: str, root: Path = ROOT) -> bool:
    parts = name.split(".")
    if parts[-1] in NOT_A_NAME:
        return True
    for k in range(len(parts), 0, -1):
        found = _module_file(parts[:k], root)
        if found is None:
            continue
        if k == len(parts) or found.is_dir():
            return True
        return parts[k] in top_level_names(found)
    return False


def path_resolves(name: str, where: Path, root: Path = ROOT) -> bool:
    """`name` exists from the root or from a folder above `where`."""
    folders = [root, *(p for p in where.parents if root in [p, *p.parents])]
    return any((folder / name).exists() for folder in folders)


@lru_cache(maxsize=None)
def folder_names(root: Path) -> frozenset[str]:
    """Every folder's name in the tree: a path starting elsewhere names another project's file."""
    names = set()
    for _, dirs, _ in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
        names |= set(dirs)
    return frozenset(names)


def ours(path: str, root: Path) -> bool:
    return path.split("/", 1)[0] in folder_names(root)


def stale_in_text(text: str, where: Path, first_line: int = 1, root: Path = ROOT) -> list[Stale]:
    """Every reference in `text` (file `where`, from `first_line` on) that resolves to nothing."""
    label = str(where.relative_to(root)) if root in where.parents else str(where)
    bare = BARE if where.suffix == ".py" else None
    stale = []
    for offset, line in enumerate(text.splitlines()):
        names = [n for n in PATH.findall(line) if ours(n, root)]
        names += bare.findall(line) if bare else []
        names = [n for n in names if not path_resolves(n, where, root)]
        names += [n for n in DOTTED.findall(line) if not dotted_resolves(n, root)]
        stale += [Stale(label, first_line + offset, n) for n in names]
    return stale


def prose_of_python(source: str) -> list[tuple[int, str]]:
    """(first line, text) of each docstring and comment in a Python source."""
    prose = [(t.start[0], t.string) for t in tokenize.generate_tokens(io.StringIO(source).readline)
             if t.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                prose.append((body[0].lineno, body[0].value.value))
    return prose


def stale_in_module_list(docstring: str, package: Path, first_line: int = 1) -> list[Stale]:
    """Modules a package docstring lists (`LISTED_MODULE`) that are nowhere in the package."""
    modules = {p.stem for p in package.rglob("*.py")}
    modules |= {p.name for p in package.rglob("*") if p.is_dir()}
    label = str(package / "__init__.py")
    label = label[len(str(ROOT)) + 1:] if label.startswith(str(ROOT)) else label
    return [Stale(label, first_line + offset, name)
            for offset, line in enumerate(docstring.splitlines())
            for name in LISTED_MODULE.findall(line) if name not in modules]


def stale_in_file(path: Path, root: Path = ROOT) -> list[Stale]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".md":
        return stale_in_text(text, path, 1, root)
    prose = prose_of_python(text)
    stale = [s for line, words in prose for s in stale_in_text(words, path, line, root)]
    docstring = ast.get_docstring(ast.parse(text), clean=False)
    if path.name == "__init__.py" and docstring:
        stale += stale_in_module_list(docstring, path.parent, 1)
    return stale


def checked_files() -> list[Path]:
    markdown = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
                *sorted((ROOT / "traces").rglob("*.md"))]
    python = sorted(p for d in (*PACKAGES, "tests") for p in (ROOT / d).rglob("*.py")
                    if not SKIP_DIRS & set(p.parts))
    python.insert(0, ROOT / "app.py")
    return markdown + python


def test_every_named_module_and_document_exists():
    stale = [str(s) for path in checked_files() for s in stale_in_file(path)]
    listing = "\n".join(stale)
    assert not stale, f"these names resolve to nothing; name them as the tree is:\n{listing}"


def test_a_planted_stale_name_fails():
    """The check can fail: a text naming a moved module, file or function is caught, each form."""
    here = ROOT / "workbench" / "validate" / "capture.py"
    text = "\n".join([
        "Runs in workbench/validate.py and `regret.py`, as `workbench.compare.policies.nothing`.",
        "Fine: workbench/validate/capture.py, `waste.py`, `workbench.compare.policies.compare`,",
        "`sim.sweep`, sim.py, real/run/config.py, docs/formats.md, https://x.org/a/b.py,",
        "real/*.py, vllm/v1/spec_decode/eagle.py (theirs).",
        "Gone: docs/nothing.md and workbench.no_such_module.",
    ])
    found = [(s.line, s.name) for s in stale_in_text(text, here)]
    assert found == [(1, "workbench/validate.py"), (1, "regret.py"),
                     (1, "workbench.compare.policies.nothing"),
                     (5, "docs/nothing.md"), (5, "workbench.no_such_module")]


def test_a_package_listing_a_deleted_module_fails():
    docstring = "Modules:\n\n- `capture`: a capture; `gone`: deleted.\n- `waste`: worker-time.\n"
    found = stale_in_module_list(docstring, ROOT / "workbench" / "validate")
    assert [(s.line, s.name) for s in found] == [(3, "gone")]


def test_docstrings_and_comments_are_read_with_their_lines():
    source = ('"""Module: see sim/gone.py."""\n\n'
              'x = "sim/gone.py in code is not prose"  # and sim/gone2.py\n')
    prose = prose_of_python(source)
    assert sorted(prose) == [(1, "Module: see sim/gone.py."), (3, "# and sim/gone2.py")]

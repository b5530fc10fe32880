"""Source a newcomer reads: no line over 100 characters in any source file (ruff's line-length,
with or without a `# noqa`), and no drafter kind compared with a bare string (the contract's
`DrafterKind` names them, so a renamed kind cannot leave a comparison behind that never matches).
"""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

from workbench.contracts.policy import DrafterKind

ROOT = Path(__file__).resolve().parents[1]
MAX_LINE = 100
SOURCE_SUFFIXES = (".py", ".toml", ".cfg", ".sh", ".ini")
SOURCE_NAMES = ("Makefile", ".ci/run")
# The same words in other vocabularies: vLLM's speculative methods, the CLI's `--profile none`.
OTHER_VOCABULARY = {
    ("workbench/calibrate/captures/trace_view.py", "method"),  # vLLM's method names
    ("real/gpu_check/sweep.py", "method"),  # vLLM's method names
    ("real/experiments/plain_estimate.py", "name"),  # its own engine labels
    ("workbench/cli/train.py", "profile"),  # `--profile none`
}


def _tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_no_source_line_is_over_100_characters():
    long = []
    for name in _tracked():
        if not (name.endswith(SOURCE_SUFFIXES) or name in SOURCE_NAMES):
            continue
        path = ROOT / name
        if not path.is_file():
            continue
        for i, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if len(line) > MAX_LINE:
                long.append(f"{name}:{i} ({len(line)})")
    assert not long, f"lines over {MAX_LINE} characters: {long}"


def _compared_names(node: ast.Compare) -> set[str]:
    """The names and attributes on the non-constant sides of a comparison."""
    out = set()
    for side in (node.left, *node.comparators):
        for sub in ast.walk(side):
            if isinstance(sub, ast.Name):
                out.add(sub.id)
            elif isinstance(sub, ast.Attribute):
                out.add(sub.attr)
    return out


def bare_kind_compares(source: str, name: str) -> list[str]:
    """Comparisons of something with a drafter kind's string, outside OTHER_VOCABULARY."""
    kinds = {k.value for k in DrafterKind}
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        values = [s for s in (node.left, *node.comparators)
                  if isinstance(s, ast.Constant) and s.value in kinds]
        if values and not any((name, n) in OTHER_VOCABULARY for n in _compared_names(node)):
            found.append(f"{name}:{node.lineno} ({values[0].value!r})")
    return found


def test_drafter_kinds_are_compared_with_the_contracts_enum():
    found = []
    for name in _tracked():
        if name.endswith(".py") and name.split("/")[0] in ("workbench", "sim", "real"):
            found += bare_kind_compares((ROOT / name).read_text(), name)
    assert not found, f"compare with DrafterKind, not a bare string: {found}"


def test_a_bare_kind_compare_is_found():
    """The check can fail."""
    assert bare_kind_compares('if after == "none":\n    pass\n', "x.py") == ["x.py:1 ('none')"]
    assert bare_kind_compares("if after == DrafterKind.NONE:\n    pass\n", "x.py") == []

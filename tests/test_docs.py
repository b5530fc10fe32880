"""The README stays a newcomer's guide, and the documentation's links lead somewhere."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = [README, *sorted((ROOT / "docs").glob("*.md"))]
# [text](target) and [text](target "title"); images too. Reference-style links are not used here.
LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
# Code is not Markdown: `E[L](K)` in a formula is no link.
CODE = re.compile(r"^```.*?^```|`[^`]+`", re.M | re.S)


def relative_links(path: Path) -> list[str]:
    """Link targets in a Markdown file that point into the repository (no scheme, not a bare
    anchor)."""
    targets = LINK.findall(CODE.sub("", path.read_text(encoding="utf-8")))
    return [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", t, re.I)
            and not t.startswith("#")]


def test_readme_is_short_and_names_the_two_commands():
    text = README.read_text(encoding="utf-8")
    lines = text.count("\n") + (0 if text.endswith("\n") else 1)
    assert lines < 200, f"README.md has {lines} lines; current figures belong in docs/results.md"
    assert "make app" in text and "make test" in text


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_to_files(doc: Path):
    broken = [t for t in relative_links(doc) if not (doc.parent / t.split("#", 1)[0]).exists()]
    assert not broken, f"{doc.relative_to(ROOT)}: links to missing files: {broken}"


def test_link_pattern_finds_links():
    # The checks above pass vacuously if the pattern stops matching; the README links its docs.
    assert {"docs/design.md", "docs/formats.md", "docs/results.md"} <= set(relative_links(README))

"""The README stays a five-minute read, and every relative link in it, in docs/ and in the packages' and examples'
READMEs opens a file of the repository (and a heading, where it names one).

Why: GitHub shows a broken relative link as a 404, and the docs point into examples/ and packages that move.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# the pages that link into docs/: each package's README and each example's
OTHER_PAGES = sorted(p for p in [*ROOT.glob("*/README.md"), *ROOT.glob("examples/*/README.md")]
                     if not p.relative_to(ROOT).parts[0].startswith(".") and p.parent.name != "docs")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} (.+)$", re.MULTILINE)


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _links(page: Path) -> list[str]:
    text = re.sub(r"^(    |\t).*$", "", page.read_text(), flags=re.MULTILINE)  # code blocks are not links
    return [target for target in LINK.findall(text) if not re.match(r"[a-z]+:", target)]


def test_the_readme_is_at_most_150_lines():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 150


def test_docs_exist_and_the_readme_links_every_page():
    readme = (ROOT / "README.md").read_text()
    assert len(PAGES) > 5
    assert not [p.name for p in PAGES[1:] if f"docs/{p.name}" not in readme]


@pytest.mark.parametrize("page", PAGES + OTHER_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves_to_a_file_of_the_repository(page):
    broken = []
    for target in _links(page):
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists() or not resolved.is_relative_to(ROOT):
            broken.append(target)
        elif anchor and resolved.suffix == ".md":
            if anchor not in {_anchor(h) for h in HEADING.findall(resolved.read_text())}:
                broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)}: {broken}"


def test_a_broken_link_is_caught(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("[a](nosuch.md) [b](page.md#nowhere) [c](https://example.com)\n    [code](x.md)\n# Here\n")
    assert _links(page) == ["nosuch.md", "page.md#nowhere"]
    assert _anchor("The task tier inside the loop") == "the-task-tier-inside-the-loop"
    assert _anchor("Drafting (2026-12-01, [x](y))") == "drafting-2026-12-01-x"

"""README.md and docs/: every relative link resolves (file and heading), and no page narrates how
the work was organised."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
LINK = re.compile(r"\[([^\]]*)\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} +(.+?) *#*$", re.M)


def _prose(page: Path) -> str:
    return FENCE.sub("", page.read_text())


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: link text kept, lower case, punctuation dropped, spaces to
    hyphens, repeats numbered."""
    seen: dict[str, int] = {}
    for heading in HEADING.findall(_prose(page)):
        text = LINK.sub(r"\1", heading).lower()
        slug = re.sub(r"[^\w\- ]", "", text).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        if count:
            seen[f"{slug}-{count}"] = 1
    return set(seen)


def links(page: Path) -> list[str]:
    prose = re.sub(r"`[^`\n]*`", "", _prose(page))  # code such as `table[op](...)` is no link
    return [target for _, target in LINK.findall(prose)
            if not re.match(r"[a-z]+:", target)]  # http:, https:, mailto: are not checked


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{target}: no {resolved.relative_to(ROOT) if resolved.is_relative_to(ROOT) else resolved}")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no heading #{anchor}")
    assert broken == []


def test_pages_have_links_to_check():
    assert sum(len(links(p)) for p in PAGES) > 30
    assert "3-cpu-the-gather-not-the-index-math-is-the-cost" in anchors(ROOT / "docs" / "findings.md")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_narration_of_how_the_work_was_organised(page):
    """Pages say what the code does and what was measured, not which tracker entry or piece of
    work asked for it."""
    words = re.findall(r".{0,30}(?:issue [0-9]|task).{0,30}", page.read_text(), re.I)
    assert words == []

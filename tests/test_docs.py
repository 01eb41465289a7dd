"""The documentation stays navigable (STYLE.md: the README is a newcomer's page, the reference lives
in docs/, one page per tool): every relative link in README.md and docs/*.md reaches a file that
exists (and, for a Markdown page, a heading the anchor names), every repository path the pages
quote exists, and the README stays short."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 260

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")            # [text](target): inline links
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
# A path the pages quote in backticks, e.g. `runtime/loop.py`, `store/lua/`, `tests/data/bad_inputs/cases.json`.
QUOTED_PATH = re.compile(r"`((?:runtime|store|telemetry|dashboard|wavepp|tests|scripts|deploy|docs)/[\w./-]*)`")


def prose(page: Path) -> str:
    """The page without its code blocks (a shell line there is not a link)."""
    return FENCE.sub("", page.read_text())


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens; repeats get -1, -2 …"""
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", prose(page), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def relative_links(page: Path) -> list[str]:
    return [t for t in LINK.findall(prose(page)) if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]


def test_there_is_a_page_per_tool_and_the_readme_links_each() -> None:
    names = {p.name for p in PAGES}
    expected = {"structure.md", "bench-and-grid.md", "engines.md", "serve.md", "store.md", "telemetry.md",
                "dashboard.md", "figures.md"}
    assert expected <= names, f"missing docs pages: {sorted(expected - names)}"
    readme = relative_links(ROOT / "README.md")
    for page in PAGES[1:]:
        assert f"docs/{page.name}" in readme, f"README.md does not link docs/{page.name}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_reaches_a_file_and_its_heading(page: Path) -> None:
    broken = []
    for target in relative_links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target} (no heading #{anchor} in {dest.relative_to(ROOT)})")
    assert not broken, f"{page.relative_to(ROOT)}: broken links: {broken}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_repository_path_a_page_quotes_exists(page: Path) -> None:
    """A module renamed or moved leaves no stale name behind in the docs."""
    missing = sorted({p for p in QUOTED_PATH.findall(page.read_text()) if not (ROOT / p).exists()})
    assert not missing, f"{page.relative_to(ROOT)} names paths that do not exist: {missing}"


def test_the_readme_stays_a_newcomers_page() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) < README_MAX_LINES, (
        f"README.md has {len(lines)} lines: keep it under {README_MAX_LINES} and move reference to docs/")


def test_every_page_starts_with_a_title_and_says_what_it_is_for() -> None:
    for page in PAGES[1:]:
        lines = page.read_text().splitlines()
        assert lines[0].startswith("# "), f"{page.name} does not start with a title"
        intro = " ".join(lines[2:5]).strip()
        assert intro and not intro.startswith(("#", "|", "```", "-")), (
            f"{page.name}: the title is not followed by a few lines saying what the tool is for")


def test_the_anchor_rule_matches_githubs() -> None:
    """A few headings of these pages, with the anchors GitHub gives them."""
    page = ROOT / "docs" / "bench-and-grid.md"
    assert {"wavepp-bench", "against-a-server-wavepp-bench---url"} <= anchors(page)
    assert "the-sims-stage-cost-measured-kernel-tables-or-a-roofline" in anchors(ROOT / "docs" / "engines.md")

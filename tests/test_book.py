"""The book is built from the committed files alone, so it shows no number the repository does not hold: every table
it renders equals its paper_tables/ .md cell by cell, every chapter is its committed notebook with only the provenance
note added, and the README's relative links resolve. `make test-book` runs these (marker "book"), outside make test;
tests/browser/check_book.py then opens every page in Chromium."""
from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from mrl.core.config import NOTEBOOKS
from mrl.paths import repo_root
from mrl.reports.book import LINK, build

pytestmark = pytest.mark.book
ROOT = repo_root()


class Tables(HTMLParser):
    """Every <table> of a page as rows of cell texts."""

    def __init__(self):
        super().__init__()
        self.tables, self.row, self.cell = [], None, None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.row = []
        elif tag in ("td", "th"):
            self.cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self.cell is not None:
            self.row.append(" ".join("".join(self.cell).split()))
            self.cell = None
        elif tag == "tr" and self.row is not None:
            self.tables[-1].append(self.row)
            self.row = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell.append(data)


def markdown_rows(text: str) -> list[list[str]]:
    """The pipe table of a paper_tables .md as rows of cell texts, its markup (code, bold, escapes) taken off as HTML
    shows it."""
    rows = []
    for line in text.splitlines():
        if line.startswith("|") and not re.fullmatch(r"\|[\s:|-]+\|", line):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip()[1:-1])]
            rows.append([" ".join(re.sub(r"\*\*|`|\\(?=[|*_\\])", "", c).split()) for c in cells])
    return rows


@pytest.fixture(scope="module")
def book(tmp_path_factory):
    return build(out=tmp_path_factory.mktemp("book"))


def test_every_rendered_table_is_its_committed_md(book):
    html = Tables()
    html.feed((book / "paper_tables" / "index.html").read_text())
    names = sorted(p.stem for p in (ROOT / "paper_tables").glob("*.md"))
    assert len(html.tables) == len(names)
    for name, rendered in zip(names, html.tables):
        assert rendered == markdown_rows((ROOT / "paper_tables" / f"{name}.md").read_text()), name


def test_every_chapter_is_its_committed_notebook(book):
    source = book.parent / "source" / "notebooks"
    for stem in NOTEBOOKS:
        staged = json.loads((source / f"{stem}.ipynb").read_text())
        committed = json.loads((ROOT / "notebooks" / f"{stem}.ipynb").read_text())
        assert staged["cells"][1]["id"] == "provenance"
        assert [staged["cells"][0], *staged["cells"][2:]] == committed["cells"], stem
        assert (book / "notebooks" / f"{stem}.html").exists()


def test_the_readmes_relative_links_resolve_in_the_book(book):
    text = (ROOT / "README.md").read_text()
    for match in LINK.finditer(text):
        target = match.group(2)
        if "://" in target:
            continue
        page = Path(target)
        if page.suffix in (".md", ".ipynb"):
            assert (book / page.with_suffix(".html")).exists(), target
        else:
            assert (book.parent / "source" / page).exists(), target

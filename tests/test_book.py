"""The book is built from the committed files alone, so it shows no number the repository does not hold: every table
of its tables pages equals its paper_tables/ .md cell by cell, every DataFrame a chapter shows with the columns of a
table its notebook writes holds that table's values, every chapter is its committed notebook with only the provenance
note added, and the README's relative links resolve. `make test-book` runs these (marker "book"), outside make test;
tests/browser/check_book.py then opens every page in Chromium."""
from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest

from mrl.core.config import NOTEBOOKS
from mrl.paths import repo_root
from mrl.reports.book import LINK, build

pytestmark = pytest.mark.book
ROOT = repo_root()


class Tables(HTMLParser):
    """Every <table> of a page as rows of cell texts (`dataframes`: the indices of those a notebook output shows as a
    pandas DataFrame)."""

    def __init__(self):
        super().__init__()
        self.tables, self.dataframes, self.row, self.cell = [], [], None, None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            if "dataframe" in (dict(attrs).get("class") or ""):
                self.dataframes.append(len(self.tables))
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


def same_cell(shown: str, written: str) -> bool:
    """A displayed cell equals the CSV's: the same text, or the same number at the precision shown."""
    if shown == written or (shown in ("<NA>", "NaN", "nan", "None", "") and written in ("", "nan")):
        return True
    if shown.endswith("...") and written.startswith(shown[:-3]):   # pandas cut a long text at its column width
        return True
    try:
        value, exact = float(shown), float(written)
    except ValueError:
        return False
    decimals = len(shown.split(".")[1]) if "." in shown and "e" not in shown.lower() else 0
    return abs(value - exact) <= 0.5 * 10 ** -decimals + 1e-12 if "." in shown else value == exact


def test_every_table_a_chapter_shows_is_the_one_its_notebook_committed(book):
    """A DataFrame a chapter shows whose columns are those of a table its notebook writes to paper_tables/ holds that
    table's values (at the precision shown): the book cannot show a number the repository does not hold."""
    from mrl.reports.readme import NOTEBOOKS as WRITTEN

    checked = 0
    for stem, (_, names, _) in WRITTEN.items():
        written = {name: pd.read_csv(ROOT / "paper_tables" / f"{name}.csv", dtype=str, keep_default_na=False)
                   for name in filter(None, names.split(", ")) if (ROOT / "paper_tables" / f"{name}.csv").exists()}
        page = Tables()
        page.feed((book / "notebooks" / f"{stem}.html").read_text())
        for index in page.dataframes:
            rows = page.tables[index]
            header, body = rows[0][1:], [row[1:] for row in rows[1:]]
            if any(all(cell in ("...", "…") for cell in row) for row in body):
                continue   # pandas showed only the ends of a long frame
            alike = {name: table for name, table in written.items()
                     if header == list(table.columns) and len(body) == len(table)}
            if not alike:
                continue   # a frame no table of the notebook has the shape of (a view, a subset)
            same = [name for name, table in alike.items()
                    if all(same_cell(a, str(b)) for shown, values in zip(body, table.itertuples(index=False))
                           for a, b in zip(shown, values))]
            assert same, f"{stem}: a table its chapter shows has the columns of {sorted(alike)} but not its values"
            checked += 1
    print(f"{checked} displayed tables checked against paper_tables/")
    assert checked >= 10, f"only {checked} displayed tables matched a committed table's columns"


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

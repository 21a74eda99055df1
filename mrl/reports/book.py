"""`make book`: the paper as a reader meets it, one static HTML book built from the committed files alone (Sphinx with
MyST-NB and the Sphinx Book Theme, installed from pip; docs/book.md says why these).

The book's source is staged under results/book/source/ (git-ignored) from the checkout, nothing else: the README as
its landing page, one chapter per notebook in the paper's order (the committed executed notebook, not executed again,
with a provenance note above it from mrl.reports.provenance and a link to its jupytext source), the pages of docs/,
one page of every table of paper_tables/ rendered from its .md, and the confirmatory and exploratory ledgers on a
page of their own. Files the pages link to that are not pages (sources, CSVs, figures) are copied beside them, so the
README's relative links work in the book. The HTML goes to results/book/html/.

    python -m mrl.reports.book                   # from the committed notebooks (seconds)
    python -m mrl.reports.book --execute         # the notebooks executed on the smoke profile first (minutes)
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import time
from pathlib import Path

from mrl.core.config import NOTEBOOKS
from mrl.paths import repo_root
from mrl.reports.provenance import Provenance, provenance
from mrl.reports.readme import RECORD

DOCS = ("architecture", "claims", "papers", "registration", "registration_claims", "reproducibility", "provenance",
        "book", "usage", "performance", "marginal", "trl", "paper_profile")
"""the pages of docs/ in the book, in its order"""
LEDGERS = ("confirmatory_claims", "confirmatory", "confirmatory_leave_one_out", "claims", "claims_secondary",
           "claims_evidence", "claims_power")
"""the tables of the ledgers' page, confirmatory first"""
LINK = re.compile(r"(!?\[[^\]]*\]\()([^)\s#]+)(#[^)\s]*)?(\))")
"""a markdown link or image whose target is a path: (prefix, path, anchor, ")")"""
CONF = '''project = "mrl: Mutual Reinforcement Learning for heterogeneous language models"
author = "the mrl maintainers"
extensions = ["myst_nb"]
nb_execution_mode = "off"
myst_enable_extensions = ["dollarmath"]
myst_heading_anchors = 3
suppress_warnings = ["myst.header", "misc.highlighting_failure", "toc.not_included"]
html_theme = "sphinx_book_theme"
html_title = "mrl"
html_theme_options = {"show_toc_level": 2, "use_download_button": False, "use_fullscreen_button": False}
html_show_sourcelink = False
smartquotes = False   # the text as the repository holds it (a table cell says grpo's, not grpo’s)
exclude_patterns = ["_build"]
'''


def chapter_note(row: Provenance | None, stem: str, profile: str) -> str:
    """The provenance note above a notebook's chapter: the run that made it, its note where it ran apart from the
    others, and its jupytext source."""
    source = f"[`notebooks/{stem}.py`]({stem}.py)"
    if row is None:
        return f"*This notebook has no run in the reproduce record yet; its source: {source}.*"
    how = "the whole run of `make reproduce`" if row.how == "the whole run" else \
        "a re-run of this notebook apart from the others (`mrl reproduce --only`)"
    note = f" {row.note}" if row.note else ""
    return (f"*Made by {how}, {profile} profile, on {row.date} at commit `{row.commit}` ({row.machine}, "
            f"{row.minutes:.1f} minutes).{note} Its source: {source}. Every notebook's run: [which run made each "
            f"notebook](../docs/provenance.md).*")


def with_note(notebook: dict, note: str) -> dict:
    """The notebook with a Markdown cell holding `note` after its title cell (its first cell)."""
    cell = {"cell_type": "markdown", "metadata": {}, "source": note, "id": "provenance"}
    return {**notebook, "cells": [notebook["cells"][0], cell, *notebook["cells"][1:]]}


def copy_linked(text: str, page: Path, source_root: Path, staged_root: Path) -> None:
    """Copy into the staged tree every checkout file `text` (the page at `page`, relative to the checkout) links to
    by a relative path, at the same place, so its link resolves in the book (pages are staged on their own)."""
    for match in LINK.finditer(text):
        target = match.group(2)
        if "://" in target or target.startswith("mailto:"):
            continue
        resolved = (source_root / page.parent / target).resolve()
        try:
            relative = resolved.relative_to(source_root.resolve())
        except ValueError:
            continue
        staged = staged_root / relative
        if resolved.is_file() and not staged.exists():
            staged.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(resolved, staged)


def table_section(name: str, tables: Path) -> str:
    """A table's section: its name as a heading and its .md (caption, then the table) as written."""
    return f"## `{name}`\n\n{(tables / f'{name}.md').read_text().strip()}\n\nIts data: [`{name}.csv`]({name}.csv)\n"


def stage(root: Path, out: Path) -> None:
    """Stage the book's source from the checkout at `root` into `out` (emptied first)."""
    if out.exists():
        shutil.rmtree(out)
    (out / "notebooks").mkdir(parents=True)
    (out / "docs").mkdir()
    (out / "paper_tables").mkdir()
    tables = root / "paper_tables"
    record = json.loads((tables / RECORD).read_text()) if (tables / RECORD).exists() else {}
    rows = {row.notebook: row for row in provenance(record)} if record else {}
    readme = (root / "README.md").read_text()
    (out / "index.md").write_text(readme + TOC.format(
        notebooks="\n".join(f"notebooks/{stem}" for stem in NOTEBOOKS),
        docs="\n".join(f"docs/{name}" for name in DOCS if (root / "docs" / f"{name}.md").exists())))
    copy_linked(readme, Path("README.md"), root, out)
    for stem in NOTEBOOKS:
        notebook = json.loads((root / "notebooks" / f"{stem}.ipynb").read_text())
        note = chapter_note(rows.get(stem), stem, record.get("profile", "default"))
        (out / "notebooks" / f"{stem}.ipynb").write_text(json.dumps(with_note(notebook, note)))
        shutil.copyfile(root / "notebooks" / f"{stem}.py", out / "notebooks" / f"{stem}.py")
        for cell in notebook["cells"]:
            if cell["cell_type"] == "markdown":
                copy_linked("".join(cell["source"]), Path("notebooks") / f"{stem}.ipynb", root, out)
    for name in DOCS:
        page = root / "docs" / f"{name}.md"
        if page.exists():
            text = page.read_text()
            (out / "docs" / f"{name}.md").write_text(text)
            copy_linked(text, Path("docs") / page.name, root, out)
    names = sorted(p.stem for p in tables.glob("*.md"))
    for name in names:
        shutil.copyfile(tables / f"{name}.csv", out / "paper_tables" / f"{name}.csv")
    (out / "paper_tables" / "index.md").write_text(
        "# Every table\n\nEach table of `paper_tables/` as its `.md` holds it, caption first, in the order of their "
        "names; the same tables are written as `.csv` (full precision) and `.tex`.\n\n"
        + "\n".join(table_section(name, tables) for name in names))
    (out / "paper_tables" / "ledgers.md").write_text(
        "# The ledgers\n\nThe confirmatory tests first (registered before their runs: `docs/registration.md`, "
        "`docs/registration_claims.md`), then the exploratory claims ledger (`docs/claims.md`).\n\n"
        + "\n".join(table_section(name, tables) for name in LEDGERS if (tables / f"{name}.md").exists()))
    (out / "conf.py").write_text(CONF)


TOC = """

```{{toctree}}
:hidden:
:caption: The paper, notebook by notebook
:maxdepth: 1

{notebooks}
```

```{{toctree}}
:hidden:
:caption: Results
:maxdepth: 1

paper_tables/ledgers
paper_tables/index
```

```{{toctree}}
:hidden:
:caption: The package
:maxdepth: 1

{docs}
```
"""


def execute_smoke(source: Path) -> None:
    """Execute every staged notebook with papermill on the smoke profile, in place and with its figures (the
    committed smoke copies drop their images), each behind a note that says so."""
    import papermill

    for stem in NOTEBOOKS:
        path = source / "notebooks" / f"{stem}.ipynb"
        original = json.loads((repo_root() / "notebooks" / f"{stem}.ipynb").read_text())
        path.write_text(json.dumps(original))
        papermill.execute_notebook(str(path), str(path), parameters={"profile": "smoke"}, cwd=str(repo_root()),
                                   kernel_name="python3", progress_bar=False)
        executed = json.loads(path.read_text())
        note = "*Executed by `make book EXECUTE=1` on the smoke profile (CI budgets), not the default profile's run.*"
        path.write_text(json.dumps(with_note(executed, note)))


def build(root: Path | None = None, out: Path | None = None, execute: bool = False) -> Path:
    """Stage and build the book; returns the folder of its HTML (index.html first). execute: the notebooks are
    executed on the smoke profile first (execute_smoke) and the book shows those runs."""
    from sphinx.cmd.build import build_main

    root = root or repo_root()
    out = out or root / "results" / "book"
    stage(root, out / "source")
    if execute:
        execute_smoke(out / "source")
    html = out / "html"
    status = build_main(["-b", "html", "-q", "-j", "1", str(out / "source"), str(html)])
    if status:
        raise RuntimeError(f"sphinx-build failed with status {status} (its messages above)")
    return html


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--execute", action="store_true", help="execute the smoke profile's notebooks first")
    parser.add_argument("--out", default=None, help="the book's folder (default: results/book)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    html = build(out=Path(args.out) if args.out else None, execute=args.execute)
    print(f"[mrl.reports.book] built in {time.perf_counter() - start:.0f} s: {html / 'index.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

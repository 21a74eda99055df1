"""Every module of mrl/ says what it is for in a few lines (STYLE.md: a module docstring says what the module is for;
derivations go to docs/): a docstring of at most 15 lines, and every docs/ page and section it names exists."""
import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODULES = sorted((ROOT / "mrl").rglob("*.py"))
MAX_LINES = 15
CITATION = re.compile(r"docs/(\w+\.md),\s+([^;().:]+?)\s*(?:\(([^()]+)\))?(?=[;().:]|$)")


def docstring(path: Path) -> str | None:
    return ast.get_docstring(ast.parse(path.read_text()))


def headings(page: Path) -> list[str]:
    return [re.sub(r"^#+\s*", "", line) for line in page.read_text().splitlines() if line.startswith("#")]


def cited_sections(text: str) -> list[tuple[str, str]]:
    """(page, section) for every "docs/<page>.md, <section> (<subsection>)" a docstring names."""
    found = []
    for page, section, subsection in CITATION.findall(" ".join(text.split())):
        found += [(page, section)] + ([(page, subsection)] if subsection else [])
    return found


@pytest.mark.parametrize("path", MODULES, ids=lambda path: str(path.relative_to(ROOT)))
def test_module_docstring_is_short(path):
    text = docstring(path)
    assert text, f"{path.relative_to(ROOT)} has no module docstring: say in a few lines what the module is for"
    lines = len(text.splitlines())
    assert lines <= MAX_LINES, (f"{path.relative_to(ROOT)}'s module docstring has {lines} lines, more than "
                                f"{MAX_LINES}: keep what the module is for, move the derivation to docs/ and name "
                                "the section")


@pytest.mark.parametrize("path", MODULES, ids=lambda path: str(path.relative_to(ROOT)))
def test_the_docs_a_module_docstring_names_exist(path):
    text = docstring(path) or ""
    for page in re.findall(r"docs/([\w/]+\.md)", text):
        assert (ROOT / "docs" / page).is_file(), f"{path.relative_to(ROOT)} names docs/{page}, which does not exist"
    for page, section in cited_sections(text):
        assert any(heading.startswith(section) for heading in headings(ROOT / "docs" / page)), (
            f"{path.relative_to(ROOT)} names the section {section!r} of docs/{page}, which has no heading starting so")


def test_cited_sections_reads_a_section_and_its_subsection():
    text = "(docs/architecture.md, The bandit\n analysis (The environment); a reconstruction)"
    assert cited_sections(text) == [("architecture.md", "The bandit analysis"), ("architecture.md", "The environment")]
    assert cited_sections("docs/marginal.md, What it costs, and what it changes; more") == [
        ("marginal.md", "What it costs, and what it changes")]

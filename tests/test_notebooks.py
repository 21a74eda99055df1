"""The notebooks are their own source: each .ipynb and its percent-format twin hold the same cells, every notebook
has the metadata papermill needs, one parameters cell, the shared setup call, no class of its own, and shows each
figure it saves."""
import ast

import jupytext
import nbformat
import pytest

from mrl.core.config import NOTEBOOKS
from mrl.runtime.results import repo_root

FOLDER = repo_root() / "notebooks"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_the_jupytext_pair_is_in_sync(name):
    """`make sync` (jupytext --sync) after editing either side; a stale twin fails here."""
    notebook = jupytext.read(FOLDER / f"{name}.ipynb")
    twin = (FOLDER / f"{name}.py").read_text()
    assert jupytext.writes(notebook, fmt="py:percent") == twin, f"run `make sync`: {name}.ipynb and {name}.py differ"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_every_notebook_runs_under_papermill_and_shows_its_figures(name):
    notebook = nbformat.read(FOLDER / f"{name}.ipynb", as_version=4)
    assert notebook.metadata.kernelspec.name == "python3" and notebook.metadata.language_info.name == "python"
    tagged = [c for c in notebook.cells if "parameters" in c.metadata.get("tags", [])]
    # the tour opens on the held-out zoo when it is cached, else the smoke zoo: under two minutes in JupyterLab
    interactive = name == "01_tour"
    assert len(tagged) == 1 and f'profile = "{"auto" if interactive else "default"}"' in tagged[0].source
    code = "\n".join(c.source for c in notebook.cells if c.cell_type == "code")
    assert "setup_notebook(" in code and "matplotlib.use" not in code
    assert not any(line.startswith("class ") for line in code.splitlines())
    for cell in notebook.cells:  # a figure is the cell's last expression, so JupyterLab shows it
        if cell.cell_type == "code" and ("save_figure(" in cell.source or "draw_and_save(" in cell.source):
            last = ast.parse(cell.source).body[-1]
            calls = [getattr(n.func, "id", "") for n in ast.walk(last) if isinstance(n, ast.Call)]
            assert isinstance(last, ast.Expr) and {"save_figure", "draw_and_save"} & set(calls), cell.source


def test_no_stray_notebooks():
    sources = {p.stem for p in FOLDER.glob("*.ipynb")} | {p.stem for p in FOLDER.glob("*.py")}
    assert sources == set(NOTEBOOKS)

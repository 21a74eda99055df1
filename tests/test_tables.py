"""Tables: every committed paper_tables/*.tex, and a table holding every character our tables use, compile
with pdflatex into a document (skipped, with the reason, where no LaTeX engine is installed: `make test`
installs Debian's texlive-latex-base and texlive-latex-recommended first)."""
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from mrl.runtime.results import latex_text, write_table

ROOT = Path(__file__).resolve().parents[1]
TABLES = sorted((ROOT / "paper_tables").glob("*.tex"))
DOCUMENT = r"""\documentclass{article}
\usepackage[T1]{fontenc}
\usepackage{array,booktabs,graphicx,rotating}
\usepackage[a4paper,margin=2.5cm]{geometry}
\begin{document}
\input{%s}
\end{document}
"""
needs_latex = pytest.mark.skipif(shutil.which("pdflatex") is None,
                                 reason="pdflatex is not installed (make test installs texlive-latex-base)")


def compile_tex(table: Path, workdir: Path) -> subprocess.CompletedProcess:
    (workdir / "doc.tex").write_text(DOCUMENT % table.resolve().as_posix())
    return subprocess.run(["pdflatex", "-halt-on-error", "-interaction=nonstopmode", "doc.tex"], cwd=workdir,
                          capture_output=True, text=True, timeout=120)


def test_latex_text_escapes_what_breaks_latex_and_refuses_what_it_cannot_set():
    assert latex_text("prp_naive 95% a&b #1 $x") == r"prp\_naive 95\% a\&b \#1 \$x"
    assert latex_text("**+0.05** [-0.01, +0.11]") == r"\textbf{+0.05} [-0.01, +0.11]"
    assert latex_text("Δ weak ± κ") == r"$\Delta$ weak $\pm$ $\kappa$"
    with pytest.raises(ValueError, match="no LaTeX form for"):
        latex_text("ok ✓")


@needs_latex
def test_a_table_with_every_special_character_compiles(tmp_path):
    df = pd.DataFrame({"probe": ["prp_naive", "gspo_x2"], "Δ weak vs grpo [95% CI]": ["**-0.09** [-0.1, -0.05]", "x"],
                       "value": [0.1234, float("nan")], "count": [3, 4]})
    paths = write_table(df, "nasty", tmp_path, caption="on A+B, seeds 0, 1, 2; 95% t interval; `pairs` & #")
    result = compile_tex(paths["tex"], tmp_path)
    assert result.returncode == 0, result.stdout[-2000:]


@needs_latex
def test_a_wide_table_fits_an_a4_page(tmp_path):
    """Long text wraps, long headers break, a table much wider than the line turns sideways, and what is still too
    wide is scaled to its line: no overfull box."""
    claim = "SGT, outcome-level sharing, beats independent GRPO on held-out prompts"
    df = pd.DataFrame({"paper": ["MRL", "[HACPO]"], "claim": [claim, claim], "comparison": ["sgt - grpo"] * 2,
                       **{f"95% t interval over warm-ups {i}": ["**+0.051 [+0.004, +0.098]**", "-0.010 [-0.02, +0.01]"]
                          for i in range(8)}, "rollouts": [24934.0, 12.0], "verdict": ["supported", "inconclusive"],
                       "Δ weak vs honest peer [95% CI]": ["+0.1", "x"],   # a line that starts with [ is not \\[length]
                       "**bold header with spaces** [95%]": ["1", "2"], "[first] header": ["a", "b"]})
    paths = write_table(df, "wide", tmp_path, caption="a wide table")
    tex = paths["tex"].read_text()
    assert r"\resizebox{\linewidth}" in tex and r"\raggedright\arraybackslash}p{" in tex and "24934 " in tex
    assert tex.startswith(r"\begin{sidewaystable}") and tex.rstrip().endswith(r"\end{sidewaystable}")
    result = compile_tex(paths["tex"], tmp_path)
    assert result.returncode == 0 and "Overfull" not in (tmp_path / "doc.log").read_text(), result.stdout[-2000:]


@needs_latex
def test_a_narrow_table_keeps_its_size(tmp_path):
    paths = write_table(pd.DataFrame({"probe": ["sgt"], "accuracy": [0.5]}), "narrow", tmp_path)
    assert "resizebox" not in paths["tex"].read_text() and "0.500" in paths["tex"].read_text()


@needs_latex
@pytest.mark.parametrize("table", TABLES, ids=[t.stem for t in TABLES])
def test_every_committed_table_compiles_and_fits_the_page(table, tmp_path):
    result = compile_tex(table, tmp_path)
    assert result.returncode == 0, result.stdout[-2000:]
    assert "Overfull" not in (tmp_path / "doc.log").read_text(), f"{table.name} runs off an A4 page"

"""docs/performance.md quotes no timing by hand: its generated blocks equal what the committed records give
(mrl.reports.performance), and no time or throughput appears outside them."""
from pathlib import Path

from mrl.reports.performance import quoted_timings, render_performance

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "performance.md"


def test_the_generated_blocks_equal_the_committed_records():
    text = PAGE.read_text()
    assert render_performance(text, ROOT / "paper_tables") == text, (
        "docs/performance.md's generated blocks differ from paper_tables/: run `.venv/bin/python -c \"from "
        "mrl.reports.performance import update_performance; from pathlib import Path; "
        "update_performance(Path('docs/performance.md'), Path('paper_tables'))\"`")


def test_no_timing_is_typed_by_hand():
    assert quoted_timings(PAGE.read_text()) == []


def test_the_mwra_block_reads_the_table():
    block = render_performance(PAGE.read_text(), ROOT / "paper_tables").split("<!-- generated:mwra -->")[1]
    assert "| inline | 5.00 s | 1.00 |" in block and "| process | 3.27 s | 0.65 |" in block

"""docs/performance.md quotes no timing by hand: its generated blocks equal what the committed records give
(mrl.reports.performance), and no time or throughput appears outside them."""
import json
from pathlib import Path

import pandas as pd

from mrl.reports.performance import mwra_block, quoted_timings, render_performance
from mrl.reports.readme import RECORD

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


def test_the_mwra_block_reads_the_table(tmp_path):
    """On a table written here (the committed one changes at every regeneration): wall time, ratio to inline."""
    rows = [("inline", "A", 4.0, 0.1), ("inline", "B", 4.0, 0.1), ("process", "A", 2.6, 3.2),
            ("process", "B", 2.6, 3.2)]
    pd.DataFrame([{"backend": b, "worker": w, "steps": 20, "utilisation": 0.5, "wall seconds": wall,
                   "startup seconds": start} for b, w, wall, start in rows]).to_csv(tmp_path / "mwra_compute.csv")
    (tmp_path / RECORD).write_text(json.dumps({"started": "2026-01-01T00:00:00", "machine": {"cpu": "a CPU"}}))
    block = mwra_block(tmp_path)
    assert "| inline | 4.00 s | 1.00 | 0.1 s | A 0.50, B 0.50 |" in block and "| process | 2.60 s | 0.65 |" in block


def test_the_reproduce_block_says_when_its_total_is_a_sum(tmp_path):
    from mrl.reports.performance import reproduce_block

    record = {"started": "2026-01-01T00:00:00", "machine": {"cpu": "a CPU"}, "total_seconds": 600.0,
              "notebooks": {"00_zoo.ipynb": 120.0, "70_heldout.ipynb": 480.0}}
    (tmp_path / RECORD).write_text(json.dumps(record))
    assert "took 10 minutes in all, installation not included" in reproduce_block(tmp_path)
    rerun = {"git_sha": "b" * 40, "started": "2026-01-02T00:00:00", "machine": {}, "notebooks": ["70_heldout.ipynb"]}
    (tmp_path / RECORD).write_text(json.dumps({**record, "reruns": [rerun]}))
    assert ("took 10 minutes in all (a sum: 70_heldout re-run apart from the others later on the same kind of "
            "machine), installation" in reproduce_block(tmp_path))

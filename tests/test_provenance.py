"""docs/provenance.md: which run made each notebook, generated from the reproduce record; the README keeps the minutes
and points there."""
from __future__ import annotations

import json

from mrl.paths import repo_root
from mrl.reports.provenance import provenance, provenance_block
from mrl.reports.readme import MARKER, RECORD

ROOT = repo_root()


def test_the_generated_block_is_current():
    text = (ROOT / "docs" / "provenance.md").read_text()
    blocks = {m.group("name"): m.group("body") for m in MARKER.finditer(text)}
    assert blocks == {"provenance": provenance_block(ROOT / "paper_tables")}, (
        "docs/provenance.md is stale: `make reproduce` rewrites it (mrl.reports.provenance.update_provenance)")


def test_each_notebook_has_the_run_whose_time_the_record_holds():
    record = json.loads((ROOT / "paper_tables" / RECORD).read_text())
    rows = {row.notebook: row for row in provenance(record)}
    assert {f"{name}.ipynb" for name in rows} == set(record["notebooks"])
    for name, seconds in record["notebooks"].items():
        assert rows[name.removesuffix(".ipynb")].minutes == seconds / 60
    last = record["reruns"][-1]
    for name in last["notebooks"]:   # the latest re-run of a notebook is the run that made it
        row = rows[name.removesuffix(".ipynb")]
        assert (row.commit, row.date, row.how) == (last["git_sha"][:7] + "-dirty" * last["git_sha"].endswith(
            "-dirty"), last["started"][:10], "re-run apart from the others")


def test_a_record_with_block_parts_lists_them(tmp_path):
    record = json.loads((ROOT / "paper_tables" / RECORD).read_text())
    record["block_parts"] = [{"started": "2026-12-06T13:53:45+0000", "git_sha": "a" * 40, "machine": record["machine"],
                              "runs_added": 8, "seconds": 600.0}]
    (tmp_path / RECORD).write_text(json.dumps(record))
    text = provenance_block(tmp_path)
    assert "| 1 | 2026-12-06 | aaaaaaa | AMD EPYC, 2 cores, numerics portable | 10.0 | 8 |" in text

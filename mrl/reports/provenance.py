"""Which run made each notebook: one row per notebook from the reproduce record (paper_tables/reproduce_default.json),
its date, commit, machine, minutes and how it ran (the whole run, a re-run apart from the others, a block in parts),
with each re-run's note beside the table. docs/provenance.md shows it as a generated block; the book's chapters
(mrl.reports.book) show each notebook's row above it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from mrl.core.config import NOTEBOOKS
from mrl.reports.readme import RECORD, short_sha, standing_reruns


@dataclass(frozen=True)
class Provenance:
    """One notebook's run: the date it started, its commit, machine, minutes and how it ran; note: the re-run's note
    (why it ran apart, what its time covers), "" for none."""

    notebook: str
    date: str
    commit: str
    machine: str
    minutes: float
    how: str
    note: str = ""


def machine_text(machine: dict) -> str:
    """'AMD EPYC, 2 cores, numerics portable' of a record's machine."""
    cores = f", {machine['cpus']} cores" if machine.get("cpus") else ""
    return f"{machine.get('cpu') or 'an unnamed CPU'}{cores}, numerics {machine.get('numerics', {}).get('mode', 'native')}"


def provenance(record: dict) -> list[Provenance]:
    """Each notebook of the record, in its order, with the run whose time the record holds for it: the last re-run
    that named it (standing_reruns), else the whole run."""
    rows = {}
    for name, seconds in record.get("notebooks", {}).items():
        rows[name] = Provenance(name.removesuffix(".ipynb"), record["started"][:10], short_sha(record["git_sha"]),
                                machine_text(record.get("machine", {})), seconds / 60, "the whole run")
    for rerun, own in standing_reruns(record):
        for name in own:
            rows[name] = Provenance(name.removesuffix(".ipynb"), rerun["started"][:10], short_sha(rerun["git_sha"]),
                                    machine_text(rerun.get("machine", {})),
                                    record["notebooks"].get(name, 0.0) / 60, "re-run apart from the others",
                                    rerun.get("note", ""))
    order = {f"{stem}.ipynb": i for i, stem in enumerate(NOTEBOOKS)}
    return [rows[name] for name in sorted(rows, key=lambda name: order.get(name, len(order)))]


def block_parts(record: dict) -> list[dict]:
    """The registered block's parts (mrl.reproduce --block-part), each {date, commit, machine, minutes, runs}."""
    return [{"date": part["started"][:10], "commit": short_sha(part["git_sha"]),
             "machine": machine_text(part.get("machine", {})), "minutes": part["seconds"] / 60,
             "runs": part["runs_added"]} for part in record.get("block_parts", [])]


def provenance_block(tables: Path) -> str:
    """docs/provenance.md's generated block: the table of every notebook's run, the notes of the re-runs under it
    (numbered as the table names them), and the registered block's parts."""
    path = tables / RECORD
    if not path.exists():
        return f"No default-profile run is recorded yet (`paper_tables/{RECORD}`).\n"
    record = json.loads(path.read_text())
    rows = provenance(record)
    notes = [row.note for row in rows if row.note]
    lines = ["| notebook | date | commit | machine | minutes | how it ran |", "|---|---|---|---|---:|---|"]
    for row in rows:
        how = row.how + (f" (note {notes.index(row.note) + 1})" if row.note else "")
        lines.append(f"| [`{row.notebook}`](../notebooks/{row.notebook}.ipynb) | {row.date} | {row.commit} | "
                     f"{row.machine} | {row.minutes:.1f} | {how} |")
    text = (f"From the reproduce record `paper_tables/{RECORD}`: the whole run of {record['started'][:10]} "
            f"({record['total_seconds'] / 60:.0f} minutes in all, installation not included), and the notebooks "
            f"re-run apart from it since.\n\n" + "\n".join(lines) + "\n")
    if notes:
        text += "\n" + "\n".join(f"{i}. {note}" for i, note in enumerate(notes, 1)) + "\n"
    parts = block_parts(record)
    if parts:
        text += ("\nThe second registration's block (docs/registration_claims.md) ran in parts "
                 "(`python -m mrl.reproduce --block-part`), each adding its finished runs to the committed record:\n\n"
                 "| part | date | commit | machine | minutes | runs added |\n|---:|---|---|---|---:|---:|\n"
                 + "\n".join(f"| {i} | {p['date']} | {p['commit']} | {p['machine']} | {p['minutes']:.1f} | "
                             f"{p['runs']} |" for i, p in enumerate(parts, 1)) + "\n")
    return text


def update_provenance(page: Path, tables: Path) -> bool:
    """Rewrite docs/provenance.md's generated block in place from `tables`; returns whether anything changed."""
    from mrl.reports.readme import render_blocks, rewrite_page

    return rewrite_page(page, lambda text: render_blocks(text, {"provenance": provenance_block}, tables,
                                                         page.name))

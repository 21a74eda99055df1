"""docs/performance.md's generated blocks: the measurements it quotes, from the committed records that hold them.

A block sits between `<!-- generated:NAME -->` and `<!-- /generated:NAME -->`, as in the README
(mrl.reports.readme). `mwra` renders the backends' step timing from `paper_tables/mwra_compute.csv`, `reproduce` the
default profile's end-to-end time from the reproduce record `paper_tables/reproduce_default.json`, each with the
record's date, CPU and numerics; `plan` the default profile's expected wall time on 2 to 512 cores
(mrl.reports.wall_time) beside the record's. `tests/test_performance_doc.py` fails when a block differs from what the
records give, and when the page quotes a time outside a block, so no timing in it is typed by hand.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

from mrl.reports.readme import MARKER, RECORD, render_blocks, rewrite_page, short_sha


def run_source(entry: dict) -> str:
    """'2026-11-25, AMD EPYC, numerics portable' of the reproduce record, or of one of its re-runs."""
    machine = entry.get("machine", {})
    return (f"{entry['started'][:10]}, {machine.get('cpu', 'CPU not recorded')}, numerics "
            f"{machine.get('numerics', {}).get('mode', 'not recorded')}")


def record_source(tables: Path) -> str:
    """run_source of the reproduce record."""
    return run_source(json.loads((tables / RECORD).read_text()))


def mwra_block(tables: Path) -> str:
    """The MWRA backends' training loop (wall seconds, ratio to inline, start-up, each policy's utilisation) from
    paper_tables/mwra_compute.csv."""
    frame = pd.read_csv(tables / "mwra_compute.csv")
    inline = frame.loc[frame.backend == "inline", "wall seconds"].iloc[0]
    lines = ["| backend | training loop | ratio to inline | start-up | utilisation per policy |",
             "|---|---:|---:|---:|---|"]
    for backend, rows in frame.groupby("backend", sort=False):
        wall, startup = rows["wall seconds"].iloc[0], rows["startup seconds"].iloc[0]
        used = ", ".join(f"{w} {u:.2f}" for w, u in zip(rows.worker, rows.utilisation))
        lines.append(f"| {backend} | {wall:.2f} s | {wall / inline:.2f} | {startup:.1f} s | {used} |")
    steps = int(frame.steps.iloc[0])
    return (f"From `paper_tables/mwra_compute.csv` ({frame.worker.nunique()} policies x {steps} steps, written by "
            f"`notebooks/30_mwra.ipynb` {notebook_run(tables, '30_mwra.ipynb')}):\n\n" + "\n".join(lines) + "\n")


def notebook_run(tables: Path, notebook: str) -> str:
    """Which run of the reproduce record last executed `notebook`: the whole run ('in the default profile's
    reproduce run of ...: date, CPU, numerics, beside the other notebooks' jobs') or the latest re-run that names it
    ('re-run apart from the others (commit ..., the record): date, CPU, numerics')."""
    record = json.loads((tables / RECORD).read_text())
    reruns = [rerun for rerun in record.get("reruns", []) if notebook in rerun["notebooks"]]
    if not reruns:
        return (f"in the default profile's reproduce run of `paper_tables/{RECORD}`: {run_source(record)}, beside "
                f"the other notebooks' jobs")
    return (f"re-run apart from the others (commit {short_sha(reruns[-1]['git_sha'])}, `paper_tables/{RECORD}`): "
            f"{run_source(reruns[-1])}")


def reproduce_block(tables: Path) -> str:
    """The default profile's end-to-end time and its three longest notebooks, from the reproduce record."""
    record = json.loads((tables / RECORD).read_text())
    times = sorted(record["notebooks"].items(), key=lambda item: -item[1])
    longest = ", ".join(f"`{name.removesuffix('.ipynb')}` {seconds / 60:.0f}" for name, seconds in times[:3])
    reruns = [n.removesuffix(".ipynb") for r in record.get("reruns", []) for n in r["notebooks"]]
    summed = (f" (a sum: {', '.join(dict.fromkeys(reruns))} re-run apart from the others later on the same kind of "
              f"machine)" if reruns else "")
    return (f"From `paper_tables/{RECORD}` ({record_source(tables)}): the default profile's {len(times)} notebooks "
            f"took {record['total_seconds'] / 60:.0f} minutes in all{summed}, installation not included; the longest "
            f"(minutes): {longest}. Each notebook's time: the README's table, generated from the same record.\n")


def plan_block(tables: Path) -> str:
    """The default profile's expected wall time from a fresh clone on 2 to 512 cores (mrl.reports.wall_time), per
    notebook, with its critical path, the cores beyond which it gets no faster and the reproduce record's measured
    time at 2 cores beside the plan; then what bounds each notebook and the whole at each core count
    (bounds_markdown)."""
    from mrl.reports.wall_time import CLAIMS_NOTEBOOK, COSTS, CORES, profile_plan

    table, costs = profile_plan("default", CORES)
    record = json.loads((tables / RECORD).read_text())
    columns = [f"{n} cores" for n in CORES]
    lines = ["| notebook | jobs | work (core-min) | critical path | " + " | ".join(columns)
             + " | no faster beyond | measured at 2 cores |", "|---|" + "---:|" * (len(CORES) + 5)]
    for row in table.to_dict("records"):
        measured = row["measured at 2 cores (min)"]
        shown = "not measured (plan only)" if pd.isna(measured) else f"{measured:.1f}" + (
            " (the measured rows)" if row["notebook"] == "total" and table["measured at 2 cores (min)"].isna().any()
            else "")
        lines.append(f"| {'**total**' if row['notebook'] == 'total' else '`' + row['notebook'] + '`'} | "
                     f"{row['jobs']:.0f} | {row['work (core-min)']:.0f} | {row['critical path (min)']:.1f} | "
                     + " | ".join(f"{row[f'{n} cores (min)']:.1f}" for n in CORES)
                     + f" | {row['no faster beyond (cores)']:.0f} | {shown} |")
    return (f"From the default profile's grids and the per-job costs of `{COSTS}` ({costs.machine}, each job on one "
            f"core), from a fresh clone, in minutes (`mrl plan --cores N` prints one column; `--ray ADDRESS` the "
            f"cluster's). The measured column is `paper_tables/{RECORD}`'s time of each notebook at 2 cores "
            f"({record_source(tables)}), with its runs and warm-ups as that run found them in its caches; "
            f"`{CLAIMS_NOTEBOOK}`'s plans and measures only the runs the block's committed record lacks (a clone reads "
            f"the others from it), measured as the record's block parts' time per run, their warm-ups included, "
            f"times those runs.\n\n" + "\n".join(lines) + "\n\n" + bounds_markdown(table, CORES))


SMOKE_RUNS = {"on 2 cores here": Path("docs") / "measurements" / "reproduce_smoke_local.json",
              "on a simulated Ray cluster (2 nodes of 1 CPU)": Path("docs") / "measurements" / "reproduce_smoke_ray.json"}
"""the smoke profile's reproduce records from a fresh clone (mrl.reproduce's results/reproduce-smoke.json), kept as
the plan's measured check: locally and on benchmarks/simulated_cluster.py's cluster (docs/performance.md)"""


def smoke_plan_block(tables: Path) -> str:
    """The smoke profile's plan at 2 cores (mrl.reports.wall_time.profile_plan) beside its measured time from a fresh
    clone in each record of SMOKE_RUNS, per notebook: a notebook without warm-ups or runs is planned at its local
    measured time, so only the others test the plan."""
    from mrl.reports.wall_time import profile_plan

    root = tables.parent
    records = {where: json.loads((root / path).read_text()) for where, path in SMOKE_RUNS.items()
               if (root / path).exists()}
    local = next(iter(records.values()), None)
    table, costs = profile_plan("smoke", (2,), local)
    lines = ["| notebook | jobs | plan at 2 cores | " + " | ".join(f"measured {where}" for where in records) + " |",
             "|---|---:|---:|" + "---:|" * len(records)]
    for row in table.to_dict("records"):
        name = row["notebook"]
        cells = [record["notebooks"].get(f"{name}.ipynb") if name != "total" else record["total_seconds"]
                 for record in records.values()]
        planned = f"{row['2 cores (min)']:.1f}" + (" (its local time)" if row["jobs"] == 0 and name != "total" else "")
        lines.append(f"| {'**total**' if name == 'total' else '`' + name + '`'} | {row['jobs']:.0f} | {planned} | "
                     + " | ".join("not run" if c is None else f"{c / 60:.1f}" for c in cells) + " |")
    sources = "; ".join(f"{where}: `{SMOKE_RUNS[where]}` ({run_source(record)}, commit "
                        f"{short_sha(record['git_sha'])})" for where, record in records.items())
    return (f"The smoke profile from a fresh clone, in minutes: its plan at 2 cores (`mrl plan --profile smoke "
            f"--cores 2`, from the per-job costs measured on the default profile's jobs on {costs.machine}, scaled to "
            f"the smoke zoo's size for the warm-ups, not for the runs) beside `make reproduce PROFILE=smoke` as it "
            f"ran, its caches empty, {'; and '.join(records) or 'nowhere yet'}. Sources: {sources or 'none'}.\n\n"
            + "\n".join(lines) + "\n")


def bounds_markdown(table: pd.DataFrame, cores: tuple[int, ...]) -> str:
    """What bounds each notebook of plan_rows' `table` on each number of `cores` (mrl.reports.wall_time.Bound), the
    caps that fix a notebook's parallelism, and for the whole the notebook that binds it, with its share."""
    from mrl.reports.wall_time import binding

    lines = ["What bounds each notebook, by cores: its longest job (phase after phase; more cores do not help), its "
             "work over the cores (more help), a fixed cap (phases that hold a fixed number of jobs whatever the "
             "cores), or, without warm-ups or runs, its measured time. For the whole: the notebook that takes the "
             "longest, its share of the total and its bound.", "",
             "| notebook | " + " | ".join(f"{n} cores" for n in cores) + " |", "|---|" + "---|" * len(cores)]
    for row in table[table.notebook != "total"].to_dict("records"):
        lines.append(f"| `{row['notebook']}` | " + " | ".join(row[f"bound at {n} cores"].value for n in cores) + " |")
    whole = [binding(table, n) for n in cores]
    lines.append("| **total** | " + " | ".join(f"`{notebook}` ({share:.0%}, {kind.value})"
                                               for notebook, share, kind in whole) + " |")
    caps = [f"`{row['notebook']}`: {row['caps']}" for row in table[table.notebook != "total"].to_dict("records")
            if row["caps"]]
    return "\n".join(lines) + ("\n\nThe fixed caps: " + "; ".join(caps) + ".\n" if caps else "\n")


BLOCKS = {"mwra": mwra_block, "reproduce": reproduce_block, "plan": plan_block, "smoke": smoke_plan_block}

TIMING = re.compile(r"\b\d[\d,.]*\s?(ms|s|seconds|minutes|hours|tokens/s|sequences/s)\b")
"""a time or a throughput as the page would quote one"""


def render_performance(text: str, tables: Path) -> str:
    """`text` (docs/performance.md) with every generated block rewritten from the records in `tables`."""
    return render_blocks(text, BLOCKS, tables, "docs/performance.md")


def quoted_timings(text: str) -> list[str]:
    """Every time or throughput the page quotes outside its generated blocks and its code blocks (the lines that
    would be typed by hand)."""
    prose = re.sub(r"```.*?```", "", MARKER.sub("", text), flags=re.S)
    prose = re.sub(r"^    .*$", "", prose, flags=re.M)   # indented commands
    return [m.group(0) for m in TIMING.finditer(prose)]


def update_performance(page: Path, tables: Path) -> bool:
    """Rewrite the page's generated blocks; True when it changed."""
    return rewrite_page(page, lambda text: render_performance(text, tables))

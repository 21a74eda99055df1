"""The plan before the run: how long each notebook of a CPU profile takes on N cores from a fresh clone
(`mrl plan --cores N`), from measured per-job costs (docs/performance.md, The plan before the run).

A notebook is a sequence of phases, each one call that runs independent jobs at once (a zoo's warm-ups, a grid of
runs) and waits for them all; they are listed by calling the experiments' own functions under
mrl.runtime.zoo_grid.planned_zoos (nothing built, nothing run), each job counted in the first notebook that runs it (the
later ones read the cache). A warm-up costs the measured CPU seconds per unit of mrl.runtime.zoo.warmup_cost, a run
its arm's measured seconds per step times its steps and its policies over two (docs/measurements/arm_costs.json);
a notebook without jobs takes its measured time (paper_tables/reproduce_default.json). 76_confirmatory_claims runs
only what the second registration's committed record lacks (claims_block_todo), in run_claims_block's chunks. On N
cores a phase takes the makespan of its jobs started longest first, each on the first core free, as the pools and Ray
run them: at least its longest job (the critical path) and its work over the cores. Not counted: a notebook's own work
beside its jobs.
"""
from __future__ import annotations

import dataclasses
import heapq
import inspect
import json
import statistics
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import pandas as pd

from mrl.core.probes import probe_config, probe_label
from mrl.core.run_config import RunConfig
from mrl.paths import BLOCK_RECORD, repo_root

COSTS = Path("docs") / "measurements" / "arm_costs.json"
"""the measured cost of each family's warm-up and each arm's run (benchmarks/arm_costs.py), under the checkout"""
NOTEBOOK_TIMES = Path("paper_tables") / "reproduce_default.json"
"""the measured time of each notebook of the default profile on its machine (mrl.reproduce)"""
CORES = (2, 8, 32, 128, 512)
"""the core counts docs/performance.md's table plans for"""
CLAIMS_NOTEBOOK = "76_confirmatory_claims"
"""the notebook that runs what the second registration's committed record lacks"""


@dataclass(frozen=True)
class Job:
    """One job of one core: a family's warm-up or a run."""

    label: str
    seconds: float


@dataclass(frozen=True)
class Phase:
    """Jobs that one call runs at once, after the notebook's previous phase has ended."""

    what: str
    jobs: tuple[Job, ...]
    alone: bool = False
    """one at a time (runs whose wall time is what they measure)"""
    cap: str = ""
    """what fixes how many jobs it holds whatever the cores, in words ("" where nothing does): a chunk of the block,
    or one at a time (alone)"""

    @property
    def capped(self) -> bool:
        return self.alone or bool(self.cap)

    def seconds(self, cores: int) -> float:
        return sum(job.seconds for job in self.jobs) if self.alone else makespan([j.seconds for j in self.jobs], cores)

    def critical(self) -> float:
        """Its least wall time on any number of cores."""
        return self.seconds(1) if self.alone else max((job.seconds for job in self.jobs), default=0.0)


def makespan(seconds: list[float], cores: int) -> float:
    """The wall time of jobs of `seconds` started longest first, each on the first of `cores` cores to be free (list
    scheduling, within 4/3 of the best order)."""
    free = [0.0] * min(cores, len(seconds))
    for job in sorted(seconds, reverse=True):
        heapq.heappush(free, heapq.heappop(free) + job)
    return max(free, default=0.0)


@dataclass(frozen=True)
class JobCosts:
    """Measured costs (COSTS): seconds of one core."""

    step: dict
    """{arm label: seconds per RL step of a run of two policies}"""
    warmup_rate: float
    """seconds per unit of mrl.runtime.zoo.warmup_cost"""
    machine: str
    profile: str
    """the profile whose jobs were measured (another's models and batches may differ in size)"""

    def run(self, run) -> float:
        """A run's seconds: its arm's per step (the bare probe's where the record lacks its knobs, else the median
        arm's) x its steps x its policies / 2."""
        label = probe_label(run.probe)
        per_step = self.step.get(label) or self.step.get(run.probe.name) or statistics.median(self.step.values())
        return per_step * run.steps * len(run.paths) / 2


def measured_costs(record: dict) -> JobCosts:
    """JobCosts from an arm_costs record: its families' warm-up CPU seconds against their warmup_cost under the
    held-out zoo of the profile it was measured on (so a smaller profile's warm-ups cost less in proportion), its
    arms' wall seconds per step."""
    from mrl.experiments.heldout import heldout_config
    from mrl.profiles import load_profile
    from mrl.runtime.zoo import warmup_cost

    zoo = heldout_config(load_profile(record["profile"]), 0).zoo
    families = {f.name: f for f in zoo.families}
    rate = sum(f["cpu_seconds"] for f in record["families"]) / sum(
        warmup_cost(families[f["family"]], zoo) for f in record["families"])
    return JobCosts(step={row["arm"]: row["wall_seconds"] / row["steps"] for row in record["runs"]},
                    warmup_rate=rate, machine=record["machine"]["cpu"], profile=record["profile"])


class Ledger:
    """What the notebooks before have already run: a job is counted once, where it first runs."""

    def __init__(self, costs: JobCosts):
        self.costs, self.seen = costs, set()

    def warmups(self, what: str, planned: list) -> Phase:
        from mrl.runtime.zoo import warmup_cost

        jobs = []
        for folder, family, zoo in planned:
            if str(folder) not in self.seen:
                self.seen.add(str(folder))
                jobs.append(Job(f"warm-up {family.name} ({Path(folder).name})",
                                self.costs.warmup_rate * warmup_cost(family, zoo)))
        return Phase(what, tuple(jobs))

    def runs(self, what: str, labelled, alone: bool = False, cap: str = "") -> Phase:
        jobs = []
        for _, run in labelled:
            if run.key() not in self.seen:
                self.seen.add(run.key())
                jobs.append(Job(run.label(), self.costs.run(run)))
        return Phase(what, tuple(jobs), alone, "one run at a time (its wall time is what it measures)" if alone
                     else cap)


def notebook_phases(config: RunConfig, costs: JobCosts) -> dict[str, list[Phase]]:
    """{notebook: its phases} of the profile's notebooks that run warm-ups or runs, in papermill's order, each job
    in the first notebook that runs it; nothing is built or run."""
    from mrl.experiments.beyond import beyond_runs, offline_runs, offline_sources, poison_runs, scaling_runs
    from mrl.experiments.hacpo import ablation_runs, hacpo_runs
    from mrl.experiments.heldout import heldout_runs, heldout_zoos, knob_runs, marginal_arm_runs
    from mrl.experiments.probe import probe_runs
    from mrl.experiments.runs import Run, policy_paths
    from mrl.runtime.zoo_grid import planned_zoos

    ledger, phases = Ledger(costs), {}

    def zoo_phase(what: str, build) -> tuple[Phase, object]:
        with planned_zoos() as planned:
            built = build()
        return ledger.warmups(what, planned), built

    for notebook in config.notebooks:
        steps = []
        if notebook in ("00_zoo", "10_grpo_baseline", "40_probe", "50_hacpo"):
            warmups, paths = zoo_phase("the zoo", lambda: policy_paths(config, progress=False))
            steps.append(warmups)
        if notebook == "10_grpo_baseline":
            steps.append(ledger.runs("grpo", [({}, Run(config, paths, probe_config("grpo"), config.grpo.seed,
                                                        config.grpo.steps))]))
        elif notebook == "40_probe" and "probe" in config.experiments:
            steps.append(ledger.runs("the probe grid", probe_runs(config, paths)))
        elif notebook == "50_hacpo" and "hacpo" in config.experiments:
            steps.append(ledger.runs("the HACPO grid", hacpo_runs(config, paths)))
            steps += [ledger.runs(f"ablation {axis}", labelled)
                      for axis, labelled in ablation_runs(config, paths).items()]
        elif notebook == "70_heldout" and "heldout" in config.experiments:
            warmups, _ = zoo_phase("the held-out zoos", lambda: heldout_zoos(config, progress=False))
            with planned_zoos():
                steps += [warmups, ledger.runs("the held-out grid", heldout_runs(config, progress=False)),
                          ledger.runs("the knobs", knob_runs(config, progress=False))]
        elif notebook == CLAIMS_NOTEBOOK and "heldout" in config.experiments:
            steps += claims_block_phases(config, ledger)
        elif notebook == "80_beyond" and "beyond" in config.experiments:
            with planned_zoos() as planned:
                parts = [("the online probes", beyond_runs(config), False),
                         ("the offline sources", offline_sources(config), False),
                         ("the offline probes", offline_runs(config), False),
                         ("the poisoned peer", poison_runs(config), False),
                         ("the n-policy runs", scaling_runs(config, progress=False), True),
                         ("the marginal arms", marginal_arm_runs(config, progress=False), False)]
            steps.append(ledger.warmups("its zoos", planned))
            steps += [ledger.runs(what, labelled, alone) for what, labelled, alone in parts]
        phases[notebook] = [phase for phase in steps if phase.jobs]
    return phases


def claims_block_todo(config: RunConfig) -> list:
    """The second registration's runs a fresh clone runs: those its committed record (mrl.paths.BLOCK_RECORD)
    lacks under the checksum docs/registration_claims.md records, as 76_confirmatory_claims reads them
    (mrl.experiments.record.missing_runs); [] where the profile has no such block."""
    from mrl.experiments.heldout import claims_block_runs
    from mrl.experiments.record import missing_runs
    from mrl.reports.claims_registration import recorded_checksum

    block = claims_block_runs(config)
    if not block:
        return []
    return missing_runs(block, repo_root() / BLOCK_RECORD,
                        recorded_checksum(repo_root() / "docs" / "registration_claims.md"))


def block_chunks() -> tuple[int, int]:
    """(warm-ups built at once, runs recorded at once) as run_claims_block runs the block: its `zoos_at_once` and
    run_into_record's `chunk`, read from their signatures (their registered code is not touched)."""
    from mrl.experiments.heldout import run_claims_block
    from mrl.experiments.record import run_into_record

    return (inspect.signature(run_claims_block).parameters["zoos_at_once"].default,
            inspect.signature(run_into_record).parameters["chunk"].default)


def claims_block_phases(config: RunConfig, ledger: Ledger) -> list[Phase]:
    """76_confirmatory_claims's phases as run_claims_block runs what the committed record lacks (claims_block_todo):
    block_chunks' warm-ups' zoos at a time, then their runs a chunk at a time, each chunk into the record; a clone
    reads the rest from the record."""
    from mrl.experiments.heldout import heldout_zoos
    from mrl.runtime.zoo_grid import planned_zoos

    todo = claims_block_todo(config)
    zoos_at_once, chunk = block_chunks()
    seeds, phases = list(dict.fromkeys(label["zoo_seed"] for label, _ in todo)), []
    for start in range(0, len(seeds), zoos_at_once):
        part = seeds[start:start + zoos_at_once]
        with planned_zoos() as planned:
            heldout_zoos(config, False, part)
        warmups = ledger.warmups(f"warm-ups {part}", planned)
        phases.append(dataclasses.replace(warmups, cap=f"{zoos_at_once} warm-up seeds' zoos at a time "
                                                       f"(run_claims_block's zoos_at_once)"))
        runs = [(label, run) for label, run in todo if label["zoo_seed"] in part]
        phases += [ledger.runs(f"runs of {part}", runs[i:i + chunk],
                               cap=f"{chunk} runs at a time (run_into_record's chunk)")
                   for i in range(0, len(runs), chunk)]
    return phases


def measured_block(record: dict, runs: int) -> float | None:
    """76_confirmatory_claims's measured seconds for `runs` of the block: the reproduce record's block parts'
    seconds per run added (their warm-ups included, on the record's machine), times `runs`; None without parts."""
    parts = record.get("block_parts", [])
    added = sum(part["runs_added"] for part in parts)
    return sum(part["seconds"] for part in parts) / added * runs if added else None


def plan_rows(config: RunConfig, cores: list[int], costs: JobCosts, measured: dict) -> pd.DataFrame:
    """One row per notebook in papermill's order (and a total): its jobs, its work (core-minutes), its critical path
    (minutes), its expected wall minutes and what bounds them (Bound) on each number of `cores`, the caps of its
    phases (Phase.cap), the cores beyond which it gets no faster, and its measured minutes (`measured`: {notebook:
    seconds}); a notebook without jobs takes its measured time. The total sums the minutes (binding names the
    notebook that bounds it)."""
    phases = notebook_phases(config, costs)
    rows = []
    for notebook in config.notebooks:
        steps = phases.get(notebook, [])
        fixed = 0.0 if steps else measured.get(f"{notebook}.ipynb", float("nan"))
        row = {"notebook": notebook, "jobs": sum(len(p.jobs) for p in steps),
               "work (core-min)": sum(j.seconds for p in steps for j in p.jobs) / 60,
               "critical path (min)": (fixed + sum(p.critical() for p in steps)) / 60}
        for n in cores:
            row[f"{n} cores (min)"] = (fixed + sum(p.seconds(n) for p in steps)) / 60
            row[f"bound at {n} cores"] = bound(steps, n)
        row["caps"] = "; ".join(dict.fromkeys(p.cap for p in steps if p.capped))
        row["no faster beyond (cores)"] = saturation(steps)
        row["measured at 2 cores (min)"] = measured.get(f"{notebook}.ipynb", float("nan")) / 60
        rows.append(row)
    table = pd.DataFrame(rows)
    summed = [c for c in table.columns if c.endswith("(min)") or c in ("jobs", "work (core-min)")]
    total = {"notebook": "total", **{c: table[c].sum(min_count=1) for c in summed}}
    total["no faster beyond (cores)"] = table["no faster beyond (cores)"].max()
    return pd.concat([table, pd.DataFrame([total])], ignore_index=True)


class Bound(Enum):
    """What sets a notebook's wall time on some number of cores."""

    MEASURED = "its measured time"
    """no warm-up or run: the time of its own work, as measured"""
    LONGEST_JOB = "its longest job"
    """the longest job of each phase, phase after phase: more cores do not help"""
    WORK = "its work over the cores"
    """its jobs' core-time shared over the cores: more cores help"""
    CAP = "a fixed cap"
    """phases that hold a fixed number of jobs whatever the cores (Phase.cap) take most of its time"""


def bound(phases: list[Phase], cores: int) -> Bound:
    """What bounds `phases` on `cores` cores: WORK while they take more than their critical path (1% over),
    else CAP where the capped phases take at least half of it, else LONGEST_JOB; MEASURED without phases."""
    if not phases:
        return Bound.MEASURED
    critical = sum(p.critical() for p in phases)
    if sum(p.seconds(cores) for p in phases) > 1.01 * critical:
        return Bound.WORK
    return Bound.CAP if 2 * sum(p.critical() for p in phases if p.capped) >= critical else Bound.LONGEST_JOB


def binding(table: pd.DataFrame, cores: int) -> tuple[str, float, Bound]:
    """(the notebook that takes the longest on `cores` cores, its share of plan_rows' total, its bound)."""
    rows = table[table.notebook != "total"]
    top = rows.loc[rows[f"{cores} cores (min)"].idxmax()]
    return top["notebook"], top[f"{cores} cores (min)"] / rows[f"{cores} cores (min)"].sum(), top[
        f"bound at {cores} cores"]


def saturation(phases: list[Phase]) -> int:
    """The fewest cores on which every phase takes its critical path (1 for a notebook without parallel jobs)."""
    return max([1] + [least_cores(p) for p in phases if p.jobs and not p.alone])


def least_cores(phase: Phase) -> int:
    """The fewest cores on which `phase` takes its longest job (bisection: its makespan never rises with cores)."""
    low, high = 1, len(phase.jobs)
    while low < high:
        mid = (low + high) // 2
        if phase.seconds(mid) <= phase.critical():
            high = mid
        else:
            low = mid + 1
    return low


def profile_plan(profile: str = "default", cores: tuple[int, ...] = CORES,
                 record: dict | None = None) -> tuple[pd.DataFrame, JobCosts]:
    """plan_rows of a profile from the committed per-job costs (COSTS), its measured column from a reproduce record
    of that profile (`record`; the default profile's committed NOTEBOOK_TIMES when not given; none for another)."""
    from mrl.profiles import load_profile

    config = load_profile(profile)
    costs = measured_costs(json.loads((repo_root() / COSTS).read_text()))
    if record is None and profile == "default":
        record = json.loads((repo_root() / NOTEBOOK_TIMES).read_text())
    measured = dict(record["notebooks"]) if record is not None else {}
    if record is not None and profile == "default":
        todo = len(claims_block_todo(config))
        block = measured_block(record, todo)
        if block is not None and todo:   # a complete record: the notebook's own time, as measured
            measured[f"{CLAIMS_NOTEBOOK}.ipynb"] = block
    return plan_rows(config, list(cores), costs, measured), costs

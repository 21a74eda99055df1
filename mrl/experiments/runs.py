"""The one function that runs many: packed, cached and labelled; and the run cache around the runner.

A `Run` (mrl.runtime.spec, re-exported here) is everything one concurrent run's numbers depend on; its steps and evals
are cached under results/runs/<key>/ and read back when the same run is asked for again (a notebook re-run, or
HACPO's notebook reusing the MRL probes' runs). An entry is published whole by one rename and read only where its
checksums match (mrl.runtime.results.read_run); one that does not is recomputed. Any edit of mrl/'s code (not its
docstrings, comments or mrl/reports/) makes new keys, so a cached run never outlives the code that produced it. The
backend is not part of the key: inline, process and ray give the same metrics.

An experiment (a module of mrl.experiments) expands its config into [(label, Run)], the label being the columns
its tables group by (pairing, probe, seed, ...); `run_many` runs what the cache lacks (`packed_runs` at a time,
each inline in its own process) and returns every run's steps and evals with its label's columns.
"""
from __future__ import annotations

import dataclasses
import importlib
import multiprocessing
import os
import shutil
import tempfile
import time
import warnings
from concurrent.futures import FIRST_COMPLETED, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from tqdm.auto import tqdm

from mrl import numerics
from mrl.core.probes import as_probe_config, get_probe, probe_label
from mrl.core.run_config import RunConfig
from mrl.core.validation import ConfigError, to_dict
from mrl.paths import repo_root
from mrl.runtime.capacity import Processes, job_memory, processes_for
from mrl.runtime.cluster import NodeRefused, Task, connect, folder_files, grid_address, map_on_ray, write_files
from mrl.runtime.pools import GUARD_HINT, worker_executor
from mrl.runtime.checkpoint import latest
from mrl.runtime.results import (clear_work_folders, git_sha, process_alive, publish_run, work_folder,
                                 write_run_record)
from mrl.runtime.runner import RunRecord, run_concurrent
from mrl.runtime.saving import publish_folder
from mrl.runtime.spec import HONEST, Run, Variant, run_identity  # noqa: F401  (HONEST, Variant: re-exported)
from mrl.runtime.zoo_grid import build_zoo


def panel_labels(panels: dict) -> dict[str, list[str]]:
    """{title: [probe labels]} of a config's panels (mappings turned into their labels, as the tables show them)."""
    return {title: [entry if isinstance(entry, str) else probe_label(as_probe_config(entry)) for entry in entries]
            for title, entries in panels.items()}


def policy_paths(config: RunConfig, progress: bool = True) -> dict[str, str]:
    """{name: checkpoint folder}: the profile's pretrained checkpoints (paper), else the zoo, built when missing."""
    if config.policies:
        missing = [f"{name}: {path}" for name, path in config.policies.items() if not Path(path).is_dir()]
        if missing:
            raise FileNotFoundError(f"pretrained checkpoint folder(s) not found: {missing} (see configs/paper.yaml "
                                    "for how to download them)")
        return dict(config.policies)
    if config.zoo is None:
        raise ConfigError("RunConfig has neither policies nor a zoo: a profile names one of them")
    return {name: str(policy.path) for name, policy in build_zoo(config.task, config.zoo, progress=progress).items()}


def grid_checkpoints(folder: Path) -> Path:
    """results/runs/.partial/<key>-<pid>.checkpoints/: where this process checkpoints the run cached in `folder`
    (each process its own, so two computing one key never write into one folder)."""
    return folder.parent / ".partial" / f"{folder.name}-{os.getpid()}.checkpoints"


def dead_checkpoints(folder: Path) -> list[Path]:
    """The checkpoint folders that processes now gone left for the run cached in `folder`, the one with the newest
    intact checkpoint first (mrl.runtime.checkpoint.latest)."""
    left = []
    for other in folder.parent.glob(f".partial/{folder.name}-*.checkpoints"):
        pid = other.name.rpartition("-")[2].removesuffix(".checkpoints")
        if pid.isdigit() and int(pid) != os.getpid() and not process_alive(int(pid)):
            left.append(other)
    newest = {other: (latest(other) or Path("")).name for other in left}
    return sorted(left, key=lambda other: newest[other], reverse=True)


def adopt_checkpoints(folder: Path) -> Path:
    """This process's checkpoint folder for the run cached in `folder`, holding the newest checkpoints a killed
    process left for the same run (its folder renamed to this process's; the other dead ones removed). Returns
    grid_checkpoints(folder), which may not exist."""
    own = grid_checkpoints(folder)
    for other in dead_checkpoints(folder):
        if not own.is_dir():
            try:
                os.rename(other, own)
                continue
            except OSError:   # another process adopted it first
                pass
        shutil.rmtree(other, ignore_errors=True)
    return own


def checkpoints_in_grid(run: Run) -> int:
    """Steps between a grid run's checkpoints in the run cache (runner.grid_checkpoint_every), or 0 where it writes
    none: an async run (its checkpoints are barriers that change the schedule), a run whose wall time is what it
    measures (backend_pinned), one that logs its experience (the log would restart at the resume)."""
    runner = run.runner()
    if runner.mode != "sync" or run.variant.backend_pinned or run.variant.log_experience:
        return 0
    return runner.grid_checkpoint_every


def run_one(run: Run, *, backend: str | None = None, cache: bool = True, progress: bool = False,
            report_to: str = "none", output_dir: str | Path | None = None,
            resume: bool = False) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(steps, evals) of one run; from the cache when it holds the run. backend: the variant's, else this one,
    else the profile's (config.runner.backend). report_to: live metrics (mrl.runtime.tracking).

    output_dir: where the run leaves its trained policies (<output_dir>/<policy>/, transformers folders,
    mrl.runtime.saving), its checkpoints (<output_dir>/checkpoints/, every runner.checkpoint_every steps, with the
    experience log beside them) and a copy of its tables; the run is then computed (the cache holds no weights).
    Without an output folder, a sync run checkpoints into the run cache's work area every
    runner.grid_checkpoint_every steps (checkpoints_in_grid; the newest kept) and resumes from what a killed process
    left there (adopt_checkpoints); its checkpoints go when it is published, and cache=False starts it afresh; a
    profile with runner.save_policies saves its policies into trained_folder(run). resume: continue from the newest
    intact checkpoint in <output_dir>/checkpoints (a different experiment's is refused).

    A run of a probe written in notebook cells (not `Run.cacheable`) is computed every time, with a warning that
    says why (run_uncached): it neither reads nor writes the cache, writes no checkpoints and cannot resume, and its
    tables and trained policies go only to output_dir."""
    folder = run.folder()
    if cache and output_dir is None and (cached := run.cached()) is not None:
        return cached.steps, cached.evals
    run = run.with_runner(backend=backend or run.config.runner.backend, report_to=report_to)
    if not run.cacheable:
        return run_uncached(run, progress, output_dir, resume)
    out = Path(output_dir) if output_dir is not None else trained_folder(run) if run.config.runner.save_policies \
        else None
    clear_work_folders(folder)   # what a killed computation of this run left (its checkpoints apart)
    experience = work_folder(folder) / "experience" if run.variant.log_experience else None
    in_grid = checkpoints_in_grid(run) if output_dir is None else 0
    if in_grid:   # a grid run: checkpoints in the run cache's work area, the newest kept, resumed after a kill
        if not cache:
            for left in [grid_checkpoints(folder), *dead_checkpoints(folder)]:
                shutil.rmtree(left, ignore_errors=True)
        checkpoints = adopt_checkpoints(folder)
        resume = resume or checkpoints.is_dir()
        run = run.with_runner(checkpoint_every=in_grid, keep_checkpoints=1)
    else:
        checkpoints = Path(output_dir) / "checkpoints" if output_dir is not None and run.runner().checkpoint_every \
            else None
        if checkpoints is not None and experience is None:   # `mrl run`: the log beside its checkpoints
            experience = checkpoints / "experience"
    start = time.perf_counter()
    record = run_concurrent(run, checkpoint_dir=checkpoints, resume=resume, experience_dir=experience, output_dir=out,
                            progress=progress)
    tables = save_run(folder, record, run, time.perf_counter() - start, run.variant.log_experience)
    if in_grid:   # published: its checkpoints go, and the work area when nothing else is in it
        shutil.rmtree(checkpoints, ignore_errors=True)
        try:
            checkpoints.parent.rmdir()
        except OSError:
            pass
    if output_dir is not None:
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        for name in ("steps.csv", "evals.csv", "run.json"):
            shutil.copyfile(folder / name, Path(output_dir) / name)
    return tables


UNCACHED = ("probe {name!r} is written in a notebook cell: no file holds its code, so no cache key can tell an edited "
            "cell from the one that ran, and its runs are computed every time, never cached, without checkpoints (its "
            "tables and trained policies are saved only into an output_dir you name). Move it into a .py module next "
            "to the notebook and import it to cache its runs (keyed by the module's code).")
"""the warning every run of a probe written in notebook cells gives (Python's default filter shows it once per probe
and calling line)"""


def run_uncached(run: Run, progress: bool, output_dir: str | Path | None,
                 resume: bool) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(steps, evals) of a run that the cache cannot hold (run_one's arguments): computed from its first step (no
    checkpoints: a resume could not tell an edited cell from the one that ran), its tables and trained policies written
    into output_dir when one is named. What such a run cannot do (log its experience, resume) is refused first."""
    name = run.probe.name
    if run.variant.log_experience or resume:
        field_name = "Variant.log_experience" if run.variant.log_experience else "resume"
        raise ConfigError(f"{field_name} = True is not allowed with probe {name!r}, written in a notebook cell: an "
                          f"experience log is kept in the run cache, and a checkpoint's identity cannot tell an "
                          f"edited cell from the one that ran; move the probe into a .py module")
    warnings.warn(UNCACHED.format(name=name), stacklevel=3)
    run = run.with_runner(checkpoint_every=0)
    start = time.perf_counter()
    record = run_concurrent(run, output_dir=output_dir, progress=progress)
    if output_dir is None:
        return pd.DataFrame(record.steps), pd.DataFrame(record.evals)
    Path(output_dir).mkdir(parents=True, exist_ok=True)
    return write_tables(Path(output_dir), record, run, time.perf_counter() - start, experience=False)


def trained_folder(run: Run) -> Path:
    """results/trained/<key>/: where a run's trained policies go when no output folder is named (`mrl run`, a
    profile with runner.save_policies), beside the run cache's results/runs/<key>/."""
    return repo_root() / "results" / "trained" / run.key()


def trained_paths(run: Run, backend: str | None = None, progress: bool = False) -> dict[str, str]:
    """{policy: folder} of the run's trained policies, trained_folder(run)/<policy>/ (transformers folders,
    mrl.runtime.zoo.load_policy reads them). When the folder does not hold them all, the run is computed into it
    (run_one with that output folder: the cache holds a run's numbers, not its weights), its cache entry written as
    well."""
    if not run.cacheable:
        raise ConfigError(f"trained_paths is not allowed with probe {run.probe.name!r}, written in a notebook cell: "
                          f"its folder is named by the run's key, which cannot tell an edited cell from the one that "
                          f"ran; call run_one(run, output_dir=...) and load the policies from that folder")
    folder = trained_folder(run)
    paths = {name: str(folder / name) for name in run.paths}
    if not all((Path(path) / "config.json").is_file() for path in paths.values()):
        run_one(run, backend=backend, output_dir=folder, progress=progress)
    return paths


def save_run(folder: Path, record, run: Run, wall_seconds: float,
             experience: bool = False) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A finished run into its cache folder: steps.csv, evals.csv, then run.json (write_tables), which marks it
    finished, all in this process's work folder (beside the experience log run_one had the runner write there),
    renamed into place as one (mrl.runtime.results.publish_run). Returns (steps, evals): this run's, or those of the
    same run that another process published first."""
    work = work_folder(folder)
    work.mkdir(parents=True, exist_ok=True)
    steps_df, evals_df = write_tables(work, record, run, wall_seconds, experience)
    other = publish_run(work, folder, experience=experience)
    return (steps_df, evals_df) if other is None else (other.steps, other.evals)


def write_tables(folder: Path, record, run: Run, wall_seconds: float,
                 experience: bool) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A finished run's steps.csv, evals.csv and run.json (its settings, its identity's clock and peers, counters,
    events, backend, git SHA, wall time and the files' checksums) into `folder`: save_run's work folder, or an
    uncached run's output folder. Returns (steps, evals)."""
    steps_df, evals_df = pd.DataFrame(record.steps), pd.DataFrame(record.evals)
    steps_df.to_csv(folder / "steps.csv", index=False)
    evals_df.to_csv(folder / "evals.csv", index=False)
    identity = run_identity(run)
    write_run_record(folder, {
        "profile": run.config.profile, "task": to_dict(run.config.task), "grpo": to_dict(run.grpo()),
        "probe": to_dict(run.probe),
        "policies": dict(run.paths), "clock": identity["clock"], "peers": identity["peers"],
        "offline": identity["offline"], "experience": experience, "counters": record.counters,
        "events": record.events, "backend": run.runner().backend, "git_sha": git_sha(), "numerics": numerics.state(),
        "wall_seconds": round(wall_seconds, 1)})
    return steps_df, evals_df


def _run_inline(job: tuple[Run, bool]) -> None:
    run, recompute = job
    run_one(run, backend="inline", cache=not recompute)


def run_packed(runs: list[Run], processes: int, progress: bool = True, recompute: bool = False,
               job=_run_inline) -> None:
    """Run independent runs `processes` at a time, longest first, each inline in its own worker process (its
    policies one after another on one core, so no core waits at a barrier for a slower policy), into the run cache.

    Inline gives the metrics of every other backend, so the cached results are those of a run on the profile's
    backend. recompute: run even what the cache holds. Nothing hangs: a run process that dies raises at once,
    naming the runs in flight, and one that finishes nothing within `packed_deadline` is killed with the others;
    finished runs stay in the cache either way. job: what runs one (run, recompute) in a packed process (tests
    inject faults here)."""
    if not runs:
        return
    runs = longest_first(runs)
    processes = min(processes, len(runs))
    before = set(multiprocessing.active_children())
    executor = worker_executor(processes, sorted({get_probe(run.probe.name).module for run in runs}))
    try:
        pending = {executor.submit(job, (run, recompute)): run for run in runs}
        with tqdm(total=len(runs), desc=f"runs, {processes} at a time", disable=not progress) as bar:
            while pending:
                deadline = packed_deadline(list(pending.values()))
                done, _ = wait(pending, timeout=deadline, return_when=FIRST_COMPLETED)
                if not done:
                    raise TimeoutError(f"no packed run finished within {deadline:.0f} s (step_timeout x the steps "
                                       f"of the longest run in flight); in flight: {_describe(pending.values())}")
                for future in done:
                    run = pending.pop(future)
                    try:
                        future.result()
                    except BrokenProcessPool:
                        raise RuntimeError(f"a packed run's process died or could not start while running "
                                           f"{_describe([run, *pending.values()])}; finished runs are cached, "
                                           f"run again to continue. {GUARD_HINT}") from None
                    bar.update(1)
    except BaseException:
        executor.shutdown(wait=False, cancel_futures=True)
        for child in set(multiprocessing.active_children()) - before:  # a stuck run is killed, not waited for
            child.kill()
        raise
    executor.shutdown()


@dataclass(frozen=True)
class RunOutput:
    """What a run computed on a node returns to the driver (run_on_node): what run_one leaves in the caches."""

    record: RunRecord
    """its steps, evaluations, events and counters (mrl.runtime.runner)"""
    wall_seconds: float
    experience: dict[str, bytes]
    """its experience log's files (Variant.log_experience), else {}"""
    trained: dict[str, bytes]
    """its trained policies' folders' files (runner.save_policies), else {}"""


@dataclass(frozen=True)
class RunJob:
    """One run for a node (run_on_node)."""

    run: Run
    key: str
    """its key on the driver, which its copy on the node must have too"""
    modules: tuple[str, ...]
    """the modules that register its probe, imported on the node first"""


def run_on_node(job: RunJob, folders: dict[str, str]) -> RunOutput:
    """A run as a Ray task (mrl.runtime.cluster.map_on_ray), `folders` the node's copies of the driver's folders it
    reads (its policies' checkpoints, an offline peer's log). Computed inline in a temporary folder, from its first
    step (a node keeps no checkpoints), with the node's copies in place of the driver's folders: the same folder
    names, so the same key (refused where not)."""
    run, key = job.run, job.key
    for module in job.modules:
        importlib.import_module(module)
    variant = run.variant
    if variant.offline:
        variant = dataclasses.replace(variant, offline=tuple((peer, folders[path]) for peer, path in variant.offline),
                                      offline_log=folders[variant.offline_log])
    here = dataclasses.replace(run, paths={name: folders[path] for name, path in run.paths.items()}, variant=variant)
    if here.key() != key:
        raise NodeRefused(f"{run.label()} has key {here.key()} on this node and {key} on the driver: its code or "
                          f"settings differ here")
    with tempfile.TemporaryDirectory(prefix="mrl-run-") as scratch:
        experience = Path(scratch) / "experience" if variant.log_experience else None
        trained = Path(scratch) / "trained" if run.config.runner.save_policies else None
        start = time.perf_counter()
        record = run_concurrent(here.with_runner(backend="inline"), experience_dir=experience, output_dir=trained,
                                progress=False)
        return RunOutput(record, time.perf_counter() - start, folder_files(experience) if experience else {},
                         folder_files(trained) if trained else {})


def reads_of(run: Run) -> tuple[str, ...]:
    """The driver's folders a run reads: its policies' checkpoints, and an offline variant's peers and log."""
    offline = [path for _, path in run.variant.offline] + ([run.variant.offline_log] if run.variant.offline else [])
    return tuple(dict.fromkeys([*run.paths.values(), *offline]))


def store_output(run: Run, output: RunOutput) -> None:
    """A run computed elsewhere into this checkout, as run_one leaves it: its trained policies into
    trained_folder(run) (each folder put in place whole), its experience log and tables into its cache folder
    (save_run: published by one rename)."""
    folder = run.folder()
    clear_work_folders(folder)
    if output.trained:
        staging = write_files(output.trained, trained_folder(run).with_name(f"{run.key()}.tmp-{os.getpid()}"))
        trained_folder(run).mkdir(parents=True, exist_ok=True)
        for policy in sorted(staging.iterdir()):
            publish_folder(policy, trained_folder(run) / policy.name)
        shutil.rmtree(staging, ignore_errors=True)
    if output.experience:
        write_files(output.experience, work_folder(folder) / "experience")
    save_run(folder, output.record, run.with_runner(backend="inline"), output.wall_seconds,
             run.variant.log_experience)


def longest_first(runs: list[Run]) -> list[Run]:
    """`runs` by their work, longest first (steps x policies, stable): a grid's last job to start is a short one, so
    its wall time is near its longest run's or its total over the cores (mrl.experiments.wall_time)."""
    return sorted(runs, key=lambda run: -run.steps * len(run.paths))


def run_on_ray(runs: list[Run], address: str, progress: bool = True) -> None:
    """Every run of `runs` computed (the cache is not read) as a Ray task of one CPU on the cluster at `address`
    (run_on_node), longest first, each stored here as it returns (store_output); a run still running packed_deadline
    seconds after it started is cancelled (mrl.runtime.cluster.GridTaskTimedOut). A probe of the user's own is
    shipped to the nodes with its module (mrl.runtime.cluster.task_environment)."""
    if not runs:
        return
    connect(address)
    ordered = longest_first(runs)
    jobs = [RunJob(run, run.key(), (get_probe(run.probe.name).module,)) for run in ordered]
    tasks = [Task(run_on_node, job, job.run.label(), reads_of(job.run), job.modules,
                  deadline=packed_deadline([job.run])) for job in jobs]
    map_on_ray(tasks, "grid runs", progress, memory=job_memory().run,
               on_result=lambda i, output: store_output(ordered[i], output))


def packed_deadline(runs: list[Run]) -> float:
    """Seconds within which one of `runs` must finish: the step deadline for each phase of the longest
    (rollout and update per step, an evaluation every eval_every steps and at 0)."""
    def phases(run: Run) -> int:
        return 2 * run.steps + run.steps // max(1, min(run.config.grpo.eval_every, run.steps)) + 2
    return max(run.config.runner.step_timeout * phases(run) for run in runs)


def _describe(runs) -> str:
    return ", ".join(run.label() for run in runs)


Labelled = list[tuple[dict, Run]]
"""[(label, run)]: each run with the columns its rows carry in the tables (pairing, probe, seed, ...)"""


def run_many(labelled: Labelled, packed_runs: Processes = 1, backend: str | None = None, cache: bool = True,
             progress: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(steps, evals) of every run, each row with its label's columns, in the order given.

    The runs missing from the cache run first, each once (a run asked for twice runs once), but for runs of a probe
    that another process cannot import (written in a notebook cell or a script, or in a module outside
    sys.modules): on a Ray cluster (MRL_RAY_ADDRESS) each is a Ray task of one CPU (run_on_ray), but a run whose
    wall time is what it measures (its variant pins a backend), which runs here; with packed_runs > 1 ("auto": one
    per usable core that the memory holds, mrl.runtime.capacity) that many at a time, each inline in its own process
    (run_packed). Then every run is read (or, one at a time, run on `backend`: None takes the profile's).
    cache=False runs every run again."""
    in_main = {run.folder() for _, run in labelled if not get_probe(run.probe.name).importable}
    done, address = set(), grid_address()
    if packed_runs != 1 or address is not None:
        runs = {run.folder(): run for _, run in labelled if run.folder() not in in_main}
        missing = [run for run in runs.values() if not cache or not run.is_cached()]
        if address is not None:
            remote = [run for run in missing if not run.variant.backend_pinned]
            run_on_ray(remote, address, progress)
            done |= {run.folder() for run in remote}
            missing = [run for run in missing if run.folder() not in done]
        processes = processes_for(packed_runs, len(missing), job_memory().run, "grid runs",
                                  "RunConfig.packed_runs") if missing else 1
        if processes > 1:
            run_packed(missing, processes, progress, recompute=not cache)
            done |= set(runs)  # these are in the cache now
    all_steps, all_evals = [], []
    for label, run in tqdm(labelled, desc="probe runs", disable=not progress or (bool(done) and not in_main)):
        steps_df, evals_df = run_one(run, backend="inline" if run.folder() in in_main else backend,
                                     cache=cache or run.folder() in done)
        all_steps.append(steps_df.assign(**label))
        all_evals.append(evals_df.assign(**label))
    return pd.concat(all_steps, ignore_index=True), pd.concat(all_evals, ignore_index=True)


def grid_runs(config: RunConfig, zoo_paths: dict[str, str], pairings: list[str], probes: list, seeds: list[int],
              steps: int | dict[str, int]) -> Labelled:
    """Every (pairing, probe, seed) run, labelled with those three. probes: ProbeConfig objects or grid entries
    (names, mappings {name: ..., knob: value}); steps: RL steps of every run, or {pairing: steps}."""
    probes = [as_probe_config(entry) for entry in probes]
    labelled = []
    for pairing in pairings:
        paths = {name: zoo_paths[name] for name in config.pairing(pairing)}
        for probe in probes:
            for seed in seeds:
                run = Run(config, paths, probe, seed, steps[pairing] if isinstance(steps, dict) else steps)
                labelled.append(({"pairing": pairing, "probe": probe_label(probe), "seed": seed}, run))
    return labelled

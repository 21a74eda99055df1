"""Where the zoo's warm-ups run, and the plan of them: this machine's cores, a Ray cluster, or nowhere (planned).

mrl.runtime.zoo holds the warm-up itself, whose code a zoo's folder names (mrl.fingerprint.ZOO_MODULES): a change
there rebuilds every zoo. The glue that places the warm-ups lives here, outside that fingerprint, so a change to it
rebuilds nothing. build_zoos and build_zoo are mrl.runtime.zoo's, with:

- `zoo.workers: auto` sized from the usable cores and memory (mrl.runtime.capacity);
- on a Ray cluster (MRL_RAY_ADDRESS) each missing family a Ray task of one CPU (build_on_ray), its files written
  into the driver's cache folder as a local build leaves them;
- inside planned_zoos nothing built or loaded, every family asked for listed (mrl.reports.wall_time).
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from mrl.core.config import FamilyConfig, TaskConfig, ZooConfig
from mrl.runtime import zoo
from mrl.runtime.capacity import AUTO, job_memory, processes_for
from mrl.runtime.cluster import Task, connect, folder_files, grid_address, map_on_ray, write_files
from mrl.runtime.results import repo_root
from mrl.runtime.zoo import Policy, family_dir, warmup_cost

PLANNED: ContextVar[list | None] = ContextVar("mrl_planned_warmups", default=None)
"""the warm-ups build_zoos would run, inside planned_zoos"""

WARMUP_STEP_TIMEOUT = 60.0
"""seconds one warm-up step may take on a Ray node before its task is cancelled (a default-profile step takes about
half a second on one core: docs/measurements/arm_costs.json)"""


@dataclasses.dataclass(frozen=True)
class WarmupJob:
    """One family's warm-up for a node: what mrl.runtime.zoo builds, and the driver's folder it goes to."""

    task: TaskConfig
    family: FamilyConfig
    zoo: ZooConfig
    out: str
    """the family's cache folder on the driver (family_dir): the node builds into a folder of the same name"""


@contextmanager
def planned_zoos():
    """A block in which build_zoos builds and loads nothing: it returns each family's cache folder (a Policy without
    model, tokenizer or record) and appends (folder, family, zoo config) of every family asked for to the list this
    yields, built or not (mrl.reports.wall_time: the plan of a run from a fresh clone)."""
    planned = []
    token = PLANNED.set(planned)
    try:
        yield planned
    finally:
        PLANNED.reset(token)


def missing_families(task_cfg: TaskConfig, zoo_cfgs: list[ZooConfig], root: Path) -> list[WarmupJob]:
    """The families of `zoo_cfgs` whose cache folder does not exist yet, each once, longest first (warmup_cost;
    stable: ties keep the configs' order), as mrl.runtime.zoo.build_zoos orders them."""
    missing = {}
    for zoo_cfg in zoo_cfgs:
        for family in zoo_cfg.families:
            out = family_dir(root, task_cfg, family, zoo_cfg)
            if not out.exists():
                missing.setdefault(out, WarmupJob(task_cfg, family, zoo_cfg, str(out)))
    return sorted(missing.values(), key=lambda job: -warmup_cost(job.family, job.zoo))


def build_zoos(task_cfg: TaskConfig, zoo_cfgs: list[ZooConfig], root: str | Path | None = None,
               progress: bool = True) -> list[dict[str, Policy]]:
    """mrl.runtime.zoo.build_zoos, its missing families built on a Ray cluster when one is named (MRL_RAY_ADDRESS:
    build_on_ray), else in max(workers) processes ("auto": one per usable core that the memory holds,
    mrl.runtime.capacity); inside planned_zoos nothing is built or loaded."""
    root = Path(root) if root is not None else repo_root() / "data" / "models"
    planned = PLANNED.get()
    if planned is not None:   # planned_zoos: what would be built, nothing built or loaded
        folders = [{f.name: family_dir(root, task_cfg, f, zoo_cfg) for f in zoo_cfg.families} for zoo_cfg in zoo_cfgs]
        planned += [(zoo_dirs[f.name], f, zoo_cfg) for zoo_cfg, zoo_dirs in zip(zoo_cfgs, folders)
                    for f in zoo_cfg.families]
        return [{f.name: Policy(f, None, None, zoo_dirs[f.name], {}) for f in zoo_cfg.families}
                for zoo_cfg, zoo_dirs in zip(zoo_cfgs, folders)]
    missing, address, workers = missing_families(task_cfg, zoo_cfgs, root), grid_address(), 1
    if missing and address is not None:
        build_on_ray(missing, address, progress)   # all built: mrl.runtime.zoo.build_zoos loads them
    elif missing:
        wanted = [zoo_cfg.workers for zoo_cfg in zoo_cfgs]
        workers = processes_for(AUTO if AUTO in wanted else max(wanted), len(missing), job_memory().warmup,
                                "the zoo's warm-up", "ZooConfig.workers")
    return zoo.build_zoos(task_cfg, [dataclasses.replace(zoo_cfg, workers=workers) for zoo_cfg in zoo_cfgs], root,
                          progress)


def build_zoo(task_cfg: TaskConfig, zoo_cfg: ZooConfig, root: str | Path | None = None,
              progress: bool = True) -> dict[str, Policy]:
    """build_zoos of this one zoo: {name: Policy} (mrl.runtime.zoo.build_zoo, placed as build_zoos places it)."""
    return build_zoos(task_cfg, [zoo_cfg], root, progress)[0]


def warmup_deadline(zoo_cfg: ZooConfig) -> float:
    """Seconds within which a warm-up must finish, as mrl.experiments.runs.packed_deadline bounds a run:
    WARMUP_STEP_TIMEOUT for each of its steps and for each of the two phases before them (the corpus and the
    tokenizer)."""
    return WARMUP_STEP_TIMEOUT * (zoo_cfg.warmup.steps + 2)


def family_on_node(job: WarmupJob, folders: dict) -> dict[str, bytes]:
    """A warm-up as a Ray task (mrl.runtime.cluster.map_on_ray): the family built by mrl.runtime.zoo with one torch
    thread into a temporary folder of the node, of the driver's folder's name, and returned as its files."""
    with tempfile.TemporaryDirectory(prefix="mrl-family-") as scratch:
        built = zoo._build_family((job.task, job.family, job.zoo, Path(scratch) / Path(job.out).name, 1, False, 0))
        return folder_files(Path(built))


def publish_family(tmp: Path, out: Path) -> None:
    """Rename a family's folder `tmp` to its cache folder `out`, atomically, as mrl.runtime.zoo does: a half-built
    family is never mistaken for a built one; where another process built the same family first, the same bits,
    `tmp` is removed."""
    try:
        tmp.rename(out)
    except OSError:
        if not (out / "zoo.json").exists():
            raise
        shutil.rmtree(tmp)


def build_on_ray(jobs: list[WarmupJob], address: str, progress: bool) -> None:
    """Every warm-up of `jobs` as a Ray task of one CPU on the cluster at `address`, each family written into its
    cache folder here from the files its task returns, as it returns, as a local build leaves it; a warm-up still
    running warmup_deadline seconds after it started is cancelled (mrl.runtime.cluster.GridTaskTimedOut)."""
    connect(address)
    tasks = [Task(family_on_node, job, f"warm-up {job.family.name} ({Path(job.out).name})",
                  deadline=warmup_deadline(job.zoo)) for job in jobs]

    def publish(i: int, files: dict[str, bytes]) -> None:
        out = Path(jobs[i].out)
        publish_family(write_files(files, Path(f"{out}.tmp-{os.getpid()}")), out)

    map_on_ray(tasks, "the zoo's warm-up", progress, memory=job_memory().warmup, on_result=publish)

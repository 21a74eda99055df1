"""How many jobs (warm-ups, grid runs) this machine may run at once: its cores and its memory.

The cores are those this process may use: its CPU affinity (`os.sched_getaffinity`, what `taskset` and a container's
cpuset allow) and its cgroup's CPU quota (cgroup v2 `cpu.max`, v1 `cpu.cfs_quota_us / cpu.cfs_period_us`, what
`docker --cpus` sets), never `os.cpu_count()`, which counts the host's. The cgroup is the process's own, from
/proc/self/cgroup, and every limit is the least over it and its ancestors (a parent's quota binds its children).
`MRL_CORES` (set by `mrl reproduce --cores N`) overrides them, and every process the driver starts (a notebook's
kernel, a pool's worker) inherits it.

Memory is planned too: a job's peak resident set (measured, JOB_MEMORY) times the processes must fit the memory
available (`MemAvailable`, and what each cgroup limit above the process leaves, its reclaimable page cache counted
as free), else the plan is refused with a clear error rather than left to swap. Each job is one process of one torch
thread, so a grid on `n` processes uses `n` cores.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from mrl.core.validation import ConfigError
from mrl.paths import PACKAGE

CORES_ENV = "MRL_CORES"
"""the variable that overrides the cores found (`mrl reproduce --cores N`, `make reproduce CORES=N`)"""

AUTO = "auto"
"""a profile's `packed_runs` or `zoo.workers` that takes every usable core (processes_for)"""

Processes = int | Literal["auto"]
"""a number of processes, or AUTO"""

CGROUP = Path("/sys/fs/cgroup")
"""where the cgroup hierarchies are mounted (v2: the one unified hierarchy; v1: a folder per controller)"""
PROC_CGROUP = Path("/proc/self/cgroup")
"""this process's cgroup in each hierarchy: v2 `0::/path`, v1 `N:controller,...:/path`"""
MEMINFO = Path("/proc/meminfo")
JOB_MEMORY = PACKAGE / "data" / "job_memory.json"
"""the measured peak resident set of one warm-up and one grid run (benchmarks/job_memory.py)"""

UNLIMITED = 2 ** 60
"""a cgroup v1 limit at or above this is no limit (the kernel writes 9223372036854771712)"""


class CapacityError(ConfigError):
    """A number of processes that this machine's cores or memory cannot hold; names what is short and the fix."""


def affinity_cores() -> int:
    """The CPUs this process may run on (its affinity mask); os.cpu_count() where the platform has no mask."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:   # not Linux
        return os.cpu_count() or 1


def cgroup_folders(controller: str, root: Path = CGROUP, proc: Path = PROC_CGROUP) -> list[Path]:
    """The folders of this process's cgroup that hold `controller`'s files ("cpu", "memory") and of its ancestors up to
    the hierarchy's root, innermost first, those that exist under `root`: from the v2 line of `proc` (`0::/path`,
    under `root`) and the v1 line naming the controller (`N:cpu,cpuacct:/path`, under root/cpu,cpuacct or
    root/cpu). A path the mount does not hold (a container that sees its own cgroup as the root) leaves the root."""
    try:
        lines = proc.read_text().splitlines()
    except OSError:
        lines = []
    mounts = []   # (the hierarchy's mount folder, the process's path in it)
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if not controllers:
            mounts.append((root, path))
        elif controller in controllers.split(","):
            mounts += [(root / controllers, path), (root / controller, path)]
    if not mounts:
        mounts = [(root, "/"), (root / controller, "/")]
    folders = []
    for mount, path in mounts:
        folder = mount / path.strip("/")
        while folder != mount and mount in folder.parents:
            folders.append(folder)
            folder = folder.parent
        folders.append(mount)
    return [folder for folder in dict.fromkeys(folders) if folder.is_dir()]


def folder_quota(folder: Path) -> float | None:
    """The CPU quota one cgroup folder sets, in cores (v2 cpu.max, v1 cpu.cfs_quota_us / cpu.cfs_period_us); None
    where it sets none ("max", -1) or holds no such file."""
    try:
        quota, period = (folder / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota = int((folder / "cpu.cfs_quota_us").read_text())
        period = int((folder / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None if quota <= 0 or period <= 0 else quota / period


def quota_cores(root: Path = CGROUP, proc: Path = PROC_CGROUP) -> float | None:
    """The CPU quota of this process's cgroup in cores: the least over it and its ancestors (cgroup_folders); None
    where none of them sets one."""
    quotas = [q for q in map(folder_quota, cgroup_folders("cpu", root, proc)) if q is not None]
    return min(quotas, default=None)


def found_cores(root: Path = CGROUP, proc: Path = PROC_CGROUP) -> int:
    """The cores this process may keep busy: its affinity, lowered to the cgroup's quota (rounded down, at least 1:
    a quota of 1.5 cores keeps one process busy and lets a second wait)."""
    quota = quota_cores(root, proc)
    return max(1, min(affinity_cores(), math.floor(quota) if quota is not None else affinity_cores()))


def requested_cores() -> int | None:
    """MRL_CORES as an integer >= 1 (None when unset); anything else is a CapacityError naming it."""
    value = os.environ.get(CORES_ENV, "").strip()
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        raise CapacityError(f"{CORES_ENV}={value!r} is not allowed; expected an integer >= 1 (mrl reproduce "
                            f"--cores N)")
    return int(value)


def usable_cores(root: Path = CGROUP, proc: Path = PROC_CGROUP) -> int:
    """MRL_CORES when set, else found_cores()."""
    return requested_cores() or found_cores(root, proc)


def available_memory(meminfo: Path = MEMINFO, root: Path = CGROUP, proc: Path = PROC_CGROUP) -> int:
    """Bytes this process's jobs may still take: MemAvailable, lowered to what each memory limit of its cgroup and
    its ancestors leaves (cgroup_folders): the limit less the usage, its inactive page cache not counted as used
    (the kernel reclaims it before it fails an allocation). v2: memory.max, memory.current and memory.stat's
    inactive_file; v1: memory.limit_in_bytes, memory.usage_in_bytes and memory.stat's total_inactive_file."""
    available = UNLIMITED
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    for folder in cgroup_folders("memory", root, proc):
        left = memory_left(folder)
        if left is not None:
            available = min(available, left)
    return available


MEMORY_FILES = (("memory.max", "memory.current", "inactive_file"),
                ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"))
"""(limit, usage, memory.stat's reclaimable page cache) of cgroup v2, then v1"""


def memory_left(folder: Path) -> int | None:
    """What one cgroup folder's memory limit leaves: limit - (usage - inactive page cache), at least 0; None where it
    sets no limit ("max", or v1's near 2**63) or holds no such file."""
    for limit, usage, inactive in MEMORY_FILES:
        try:
            cap, used = (folder / limit).read_text().strip(), int((folder / usage).read_text())
        except (OSError, ValueError):
            continue
        if cap == "max" or int(cap) >= UNLIMITED:
            return None
        return max(0, int(cap) - max(0, used - stat_value(folder / "memory.stat", inactive)))
    return None


def stat_value(stat: Path, name: str) -> int:
    """The value of `name` in a memory.stat file (0 where it or the file is missing)."""
    try:
        for line in stat.read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == name:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


@dataclass(frozen=True)
class JobMemory:
    """The measured peak resident set of one job, in bytes (JOB_MEMORY)."""

    warmup: int
    """one family's warm-up in a pool process"""
    run: int
    """one grid run, inline in a pool process"""


def job_memory(path: Path = JOB_MEMORY) -> JobMemory:
    """The record of JOB_MEMORY: each kind's largest measured peak."""
    record = json.loads(path.read_text())
    return JobMemory(warmup=max(job["peak_rss_bytes"] for job in record["warmups"]),
                     run=max(job["peak_rss_bytes"] for job in record["runs"]))


def processes_for(wanted: Processes, jobs: int, peak_bytes: int, what: str, field_name: str,
                  memory: int | None = None) -> int:
    """How many processes run `jobs` jobs of `what` at once, each at most `peak_bytes` resident.

    wanted: AUTO takes the usable cores (usable_cores()), lowered to what the memory holds when the cores were found,
    not asked for; an integer (a profile's own) is kept, but never above the cores asked for (MRL_CORES, `mrl
    reproduce --cores N`). Never more than the jobs. A number that the memory (available_memory(), or `memory`)
    cannot hold is refused with a CapacityError naming where it came from (`field_name` or MRL_CORES), the memory
    each process needs and the number that fits, rather than left to swap."""
    requested = requested_cores()
    if wanted != AUTO and (not isinstance(wanted, int) or isinstance(wanted, bool) or wanted < 1):
        raise CapacityError(f"{field_name} = {wanted!r} is not allowed; expected an integer >= 1 or {AUTO!r}")
    memory = available_memory() if memory is None else memory
    fits = memory // max(1, peak_bytes)
    if wanted == AUTO:
        count = usable_cores()
        if requested is None:   # found, not asked for: as many as the memory holds
            count = min(count, max(1, fits))
    else:
        count = wanted if requested is None else min(wanted, requested)
    count = max(1, min(count, jobs))
    if count * peak_bytes > memory:
        source = f"{CORES_ENV}={requested}" if requested is not None and (wanted == AUTO or requested < wanted) \
            else f"{field_name} = {wanted}"
        raise CapacityError(
            f"{count} processes of {what} ({source}) need {count * peak_bytes / 2**30:.1f} GiB at their peak "
            f"({peak_bytes / 2**30:.2f} GiB each, measured: {JOB_MEMORY.name}) and {memory / 2**30:.1f} GiB is "
            f"available: {fits} fit; give fewer cores (mrl reproduce --cores {max(1, fits)}) or free memory"
            + ("" if fits else "; not even one fits"))
    return count

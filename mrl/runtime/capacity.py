"""How many jobs (warm-ups, grid runs) this machine may run at once: its cores and its memory.

The cores are those this process may use: its CPU affinity (`os.sched_getaffinity`, what `taskset` and a container's
cpuset allow) and the cgroup's CPU quota (cgroup v2 `cpu.max`, v1 `cpu.cfs_quota_us / cpu.cfs_period_us`, what
`docker --cpus` sets), never `os.cpu_count()`, which counts the host's. `MRL_CORES` (set by `mrl reproduce --cores N`)
overrides them, and every process the driver starts (a notebook's kernel, a pool's worker) inherits it.

Memory is planned too: a job's peak resident set (measured, JOB_MEMORY) times the processes must fit the memory
available (`MemAvailable`, and what the cgroup's limit leaves), else the plan is refused with a clear error rather
than left to swap. Each job is one process of one torch thread, so a grid on `n` processes uses `n` cores.
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


def quota_cores(root: Path = CGROUP) -> float | None:
    """The cgroup's CPU quota in cores (quota / period), from v2's cpu.max or v1's cpu.cfs_quota_us and
    cpu.cfs_period_us under `root`; None where there is no quota ("max", -1) or no cgroup file."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period = int((root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None if quota <= 0 or period <= 0 else quota / period


def found_cores(root: Path = CGROUP) -> int:
    """The cores this process may keep busy: its affinity, lowered to the cgroup's quota (rounded down, at least 1:
    a quota of 1.5 cores keeps one process busy and lets a second wait)."""
    quota = quota_cores(root)
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


def usable_cores(root: Path = CGROUP) -> int:
    """MRL_CORES when set, else found_cores()."""
    return requested_cores() or found_cores(root)


def available_memory(meminfo: Path = MEMINFO, root: Path = CGROUP) -> int:
    """Bytes this process's jobs may still take: MemAvailable, lowered to what the cgroup's memory limit leaves
    (v2 memory.max - memory.current, v1 memory.limit_in_bytes - memory.usage_in_bytes)."""
    available = UNLIMITED
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    for limit, usage in (("memory.max", "memory.current"),
                         ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes")):
        try:
            cap, used = (root / limit).read_text().strip(), int((root / usage).read_text())
        except (OSError, ValueError):
            continue
        if cap != "max" and int(cap) < UNLIMITED:
            available = min(available, max(0, int(cap) - used))
        break
    return available


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
                  cores: int | None = None, memory: int | None = None) -> int:
    """How many processes run `jobs` jobs of `what` at once, each at most `peak_bytes` resident.

    wanted: AUTO takes the usable cores (usable_cores(), or `cores`), lowered to what the memory holds when the cores
    were found, not asked for; an integer (a profile's own) is kept. Never more than the jobs. A number that the
    memory (available_memory(), or `memory`) cannot hold is refused with a CapacityError naming `field_name`, the
    memory each process needs and the number that fits, rather than left to swap."""
    requested = requested_cores()
    if wanted != AUTO and (not isinstance(wanted, int) or isinstance(wanted, bool) or wanted < 1):
        raise CapacityError(f"{field_name} = {wanted!r} is not allowed; expected an integer >= 1 or {AUTO!r}")
    memory = available_memory() if memory is None else memory
    fits = memory // max(1, peak_bytes)
    if wanted == AUTO:
        count = cores if cores is not None else usable_cores()
        if cores is None and requested is None:   # found, not asked for: as many as the memory holds
            count = min(count, max(1, fits))
    else:
        count = wanted
    count = max(1, min(count, jobs))
    if count * peak_bytes > memory:
        source = f"{CORES_ENV}={requested}" if wanted == AUTO and requested else f"{field_name} = {wanted}"
        raise CapacityError(
            f"{count} processes of {what} ({source}) need {count * peak_bytes / 2**30:.1f} GiB at their peak "
            f"({peak_bytes / 2**30:.2f} GiB each, measured: {JOB_MEMORY.name}) and {memory / 2**30:.1f} GiB is "
            f"available: {fits} fit; give fewer cores (mrl reproduce --cores {max(1, fits)}) or free memory"
            + ("" if fits else "; not even one fits"))
    return count

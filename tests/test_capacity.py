"""The cores and memory a grid may use (mrl.runtime.capacity): the affinity mask and the cgroup's quota rather than the
host's count, MRL_CORES over both, a memory plan that refuses rather than swaps, and the profile settings that take
"auto"."""
import os
import subprocess
import sys

import pytest

from mrl.runtime.capacity import (CORES_ENV, CapacityError, available_memory, found_cores, job_memory,
                                  processes_for, quota_cores, usable_cores)

GIB = 2 ** 30


def cgroup(tmp_path, **files) -> "os.PathLike":
    """A fake /sys/fs/cgroup holding `files` ({relative path with '__' for '/': text})."""
    for name, text in files.items():
        path = tmp_path / name.replace("__", "/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


@pytest.mark.parametrize("files, cores", [
    ({"cpu.max": "250000 100000\n"}, 2.5),                                      # cgroup v2, docker --cpus 2.5
    ({"cpu.max": "max 100000\n"}, None),                                        # v2, no quota
    ({"cpu__cpu.cfs_quota_us": "50000\n", "cpu__cpu.cfs_period_us": "100000\n"}, 0.5),   # v1
    ({"cpu__cpu.cfs_quota_us": "-1\n", "cpu__cpu.cfs_period_us": "100000\n"}, None),     # v1, no quota
    ({}, None),                                                                 # no cgroup files at all
])
def test_the_quota_is_read_from_either_cgroup_version(tmp_path, files, cores):
    assert quota_cores(cgroup(tmp_path, **files)) == cores


def test_the_quota_lowers_the_affinity_and_one_core_is_the_least(tmp_path, monkeypatch):
    monkeypatch.setattr("mrl.runtime.capacity.affinity_cores", lambda: 8)
    assert found_cores(cgroup(tmp_path / "a", **{"cpu.max": "250000 100000"})) == 2   # 2.5 cores keep 2 busy
    assert found_cores(cgroup(tmp_path / "b", **{"cpu.max": "50000 100000"})) == 1
    assert found_cores(cgroup(tmp_path / "c", **{"cpu.max": "max 100000"})) == 8


def test_the_cores_come_from_the_affinity_mask_not_the_hosts_count(tmp_path):
    """A process pinned to one CPU (as taskset or a container's cpuset pins it) finds one core, whatever the host has."""
    code = "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); " \
           "from mrl.runtime.capacity import found_cores; print(found_cores())"
    env = {k: v for k, v in os.environ.items() if k != CORES_ENV}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1"]


def test_mrl_cores_overrides_what_is_found_and_a_bad_value_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv(CORES_ENV, "7")
    assert usable_cores(cgroup(tmp_path, **{"cpu.max": "100000 100000"})) == 7
    for bad in ("0", "two", "-3", "1.5"):
        monkeypatch.setenv(CORES_ENV, bad)
        with pytest.raises(CapacityError, match=f"MRL_CORES={bad!r} is not allowed; expected an integer >= 1"):
            usable_cores()


def test_the_available_memory_is_the_lesser_of_the_machine_and_the_cgroup(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       16000000 kB\nMemAvailable:    8000000 kB\n")
    assert available_memory(meminfo, cgroup(tmp_path / "none")) == 8_000_000 * 1024
    limited = cgroup(tmp_path / "v2", **{"memory.max": str(3 * GIB), "memory.current": str(GIB)})
    assert available_memory(meminfo, limited) == 2 * GIB
    unlimited_v1 = cgroup(tmp_path / "v1", **{"memory__memory.limit_in_bytes": "9223372036854771712",
                                                "memory__memory.usage_in_bytes": str(GIB)})
    assert available_memory(meminfo, unlimited_v1) == 8_000_000 * 1024


def test_auto_takes_every_core_the_memory_holds_and_never_more_than_the_jobs(monkeypatch):
    monkeypatch.delenv(CORES_ENV, raising=False)
    monkeypatch.setattr("mrl.runtime.capacity.usable_cores", lambda: 32)
    assert processes_for("auto", 100, GIB, "runs", "RunConfig.packed_runs", memory=64 * GIB) == 32
    assert processes_for("auto", 5, GIB, "runs", "RunConfig.packed_runs", memory=64 * GIB) == 5
    assert processes_for("auto", 100, GIB, "runs", "RunConfig.packed_runs", memory=10.5 * GIB) == 10   # found cores


def test_a_number_of_processes_the_memory_cannot_hold_is_refused_not_swapped(monkeypatch):
    monkeypatch.delenv(CORES_ENV, raising=False)
    with pytest.raises(CapacityError, match=r"8 processes of grid runs \(RunConfig.packed_runs = 8\) need 8.0 GiB .* "
                                            r"4.0 GiB is available: 4 fit; give fewer cores \(mrl reproduce --cores 4\)"):
        processes_for(8, 100, GIB, "grid runs", "RunConfig.packed_runs", memory=4 * GIB)
    monkeypatch.setenv(CORES_ENV, "8")   # asked for, not found: refused rather than lowered
    with pytest.raises(CapacityError, match=r"\(MRL_CORES=8\) need 8.0 GiB"):
        processes_for("auto", 100, GIB, "grid runs", "RunConfig.packed_runs", memory=4 * GIB)
    monkeypatch.delenv(CORES_ENV)
    with pytest.raises(CapacityError, match="not even one fits"):
        processes_for("auto", 100, 2 * GIB, "grid runs", "RunConfig.packed_runs", memory=GIB)
    with pytest.raises(CapacityError, match=r"RunConfig.packed_runs = 'many' is not allowed; expected an integer >= 1 "
                                            r"or 'auto'"):
        processes_for("many", 100, GIB, "grid runs", "RunConfig.packed_runs", memory=GIB)


def test_the_measured_job_memory_is_read_from_its_record():
    measured = job_memory()
    assert 100 * 2 ** 20 < measured.run < 8 * GIB and 100 * 2 ** 20 < measured.warmup < 8 * GIB


def test_the_profiles_take_auto_and_refuse_other_words():
    from mrl.core.config import ConfigError, ZooConfig
    from mrl.profiles import load_profile

    default = load_profile("default")
    assert default.packed_runs == "auto" and default.zoo.workers == "auto"
    assert default.experiment("heldout").zoo.workers == "auto"
    with pytest.raises(ConfigError, match="workers"):
        ZooConfig(families=default.zoo.families, workers="all")


def test_reproduce_hands_its_cores_and_cluster_to_the_kernels_it_starts(monkeypatch):
    """--cores and --ray become MRL_CORES and MRL_RAY_ADDRESS, which every notebook kernel inherits."""
    from mrl.reproduce import scale_out
    from mrl.runtime.cluster import ADDRESS_ENV

    monkeypatch.setenv(CORES_ENV, "")     # restored (unset) after the test, as scale_out sets them in os.environ
    monkeypatch.setenv(ADDRESS_ENV, "")
    scale_out(3, "10.0.0.5:6379")
    assert os.environ[CORES_ENV] == "3" and os.environ[ADDRESS_ENV] == "10.0.0.5:6379"


def test_run_many_packs_auto_to_the_usable_cores(monkeypatch, tmp_path):
    """packed_runs: auto sizes the packed pool from the cores (here MRL_CORES=3), never more than the missing runs."""
    from mrl.core.config import GrpoConfig, TaskConfig
    from mrl.core.probes import probe_config
    from mrl.core.run_config import RunConfig
    from mrl.experiments import runs
    from testsupport import TINY_TASK

    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "mrl").mkdir()
    monkeypatch.setenv(CORES_ENV, "3")
    config = RunConfig(task=TaskConfig(**TINY_TASK), grpo=GrpoConfig(steps=2, prompts_per_step=4, group_size=4))
    grid = [({"seed": seed}, runs.Run(config, {"A": str(tmp_path / "A-0")}, probe_config("grpo"), seed, 2))
            for seed in range(5)]
    packed = []
    monkeypatch.setattr(runs, "run_packed", lambda missing, processes, *a, **k: packed.append((len(missing),
                                                                                                processes)))
    monkeypatch.setattr(runs, "run_one", lambda run, **k: (runs.pd.DataFrame({"step": [0]}),
                                                           runs.pd.DataFrame({"step": [0]})))
    runs.run_many(grid, "auto", progress=False)
    runs.run_many(grid[:2], "auto", progress=False)
    assert packed == [(5, 3), (2, 2)]

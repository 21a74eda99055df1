"""The cores and memory a grid may use (mrl.runtime.capacity): the affinity mask and the cgroup's quota rather than the
host's count, MRL_CORES over both, a memory plan that refuses rather than swaps, and the profile settings that take
"auto"."""
import os
import subprocess
import sys

import pytest

from mrl.runtime.capacity import (CORES_ENV, CapacityError, available_memory, cgroup_folders, found_cores,
                                  job_memory, processes_for, quota_cores, usable_cores)

GIB = 2 ** 30


def cgroup(tmp_path, **files) -> "os.PathLike":
    """A fake /sys/fs/cgroup holding `files` ({relative path with '__' for '/': text})."""
    for name, text in files.items():
        path = tmp_path / name.replace("__", "/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def proc_cgroup(tmp_path, text: str):
    """A fake /proc/self/cgroup holding `text`."""
    path = tmp_path / "proc-self-cgroup"
    path.write_text(text)
    return path


def at_the_root(tmp_path):
    """A fake /proc/self/cgroup of a process at the root of every hierarchy, v2 and v1."""
    return proc_cgroup(tmp_path, "0::/\n4:memory:/\n3:cpu,cpuacct:/\n")


@pytest.mark.parametrize("files, cores", [
    ({"cpu.max": "250000 100000\n"}, 2.5),                                      # cgroup v2, docker --cpus 2.5
    ({"cpu.max": "max 100000\n"}, None),                                        # v2, no quota
    ({"cpu__cpu.cfs_quota_us": "50000\n", "cpu__cpu.cfs_period_us": "100000\n"}, 0.5),   # v1
    ({"cpu__cpu.cfs_quota_us": "-1\n", "cpu__cpu.cfs_period_us": "100000\n"}, None),     # v1, no quota
    ({}, None),                                                                 # no cgroup files at all
])
def test_the_quota_is_read_from_either_cgroup_version(tmp_path, files, cores):
    assert quota_cores(cgroup(tmp_path / "sys", **files), at_the_root(tmp_path)) == cores


def test_the_process_own_cgroup_v2_and_the_least_quota_of_its_ancestors(tmp_path):
    """A process in /user.slice/job.scope: its scope sets no quota, its slice 1.5 cores, the root none."""
    root = cgroup(tmp_path / "sys", **{"user.slice__cpu.max": "150000 100000\n",
                                      "user.slice__job.scope__cpu.max": "max 100000\n",
                                      "other.slice__cpu.max": "50000 100000\n"})   # not this process's
    proc = proc_cgroup(tmp_path, "0::/user.slice/job.scope\n")
    assert cgroup_folders("cpu", root, proc) == [root / "user.slice" / "job.scope", root / "user.slice", root]
    assert quota_cores(root, proc) == 1.5
    deeper = cgroup(tmp_path / "sys", **{"user.slice__job.scope__cpu.max": "400000 100000\n"})
    assert quota_cores(deeper, proc) == 1.5   # a child's larger quota does not lift its parent's


def test_the_process_own_cgroup_v1_under_its_controllers_mount(tmp_path):
    root = cgroup(tmp_path / "sys", **{"cpu,cpuacct__docker__cpu.cfs_quota_us": "-1\n",
                                      "cpu,cpuacct__docker__cpu.cfs_period_us": "100000\n",
                                      "cpu,cpuacct__docker__c1__cpu.cfs_quota_us": "250000\n",
                                      "cpu,cpuacct__docker__c1__cpu.cfs_period_us": "100000\n",
                                      "memory__docker__c1__memory.limit_in_bytes": str(4 * GIB),
                                      "memory__docker__c1__memory.usage_in_bytes": str(3 * GIB),
                                      "memory__docker__c1__memory.stat": f"cache 5\ntotal_inactive_file {GIB}\n",
                                      "memory__docker__memory.limit_in_bytes": "9223372036854771712",
                                      "memory__docker__memory.usage_in_bytes": str(9 * GIB)})
    proc = proc_cgroup(tmp_path, "12:memory:/docker/c1\n4:cpu,cpuacct:/docker/c1\n1:name=systemd:/docker/c1\n")
    assert quota_cores(root, proc) == 2.5
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemAvailable:    8000000 kB\n")
    # 4 GiB limit, 3 GiB used of which 1 GiB inactive page cache: 2 GiB left; the parent sets no limit
    assert available_memory(meminfo, root, proc) == 2 * GIB


def test_a_parents_memory_limit_binds_and_page_cache_counts_as_free_v2(tmp_path):
    root = cgroup(tmp_path / "sys", **{"a__memory.max": str(6 * GIB), "a__memory.current": str(5 * GIB),
                                      "a__memory.stat": f"anon 1\ninactive_file {2 * GIB}\nactive_file 3\n",
                                      "a__b__memory.max": "max", "a__b__memory.current": str(GIB)})
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemAvailable:    16000000 kB\n")
    assert available_memory(meminfo, root, proc_cgroup(tmp_path, "0::/a/b\n")) == 3 * GIB   # 6 - (5 - 2)


def test_a_cgroup_path_the_mount_does_not_hold_leaves_its_root(tmp_path):
    """In a container without its own cgroup namespace, /proc/self/cgroup names a host path and the mount is the
    container's own cgroup."""
    root = cgroup(tmp_path / "sys", **{"cpu.max": "200000 100000\n"})
    assert quota_cores(root, proc_cgroup(tmp_path, "0::/system.slice/docker-abc.scope\n")) == 2.0
    assert quota_cores(root, tmp_path / "no-such-proc-file") == 2.0


def test_the_quota_lowers_the_affinity_and_one_core_is_the_least(tmp_path, monkeypatch):
    monkeypatch.setattr("mrl.runtime.capacity.affinity_cores", lambda: 8)
    proc = at_the_root(tmp_path)
    assert found_cores(cgroup(tmp_path / "a", **{"cpu.max": "250000 100000"}), proc) == 2   # 2.5 cores keep 2 busy
    assert found_cores(cgroup(tmp_path / "b", **{"cpu.max": "50000 100000"}), proc) == 1
    assert found_cores(cgroup(tmp_path / "c", **{"cpu.max": "max 100000"}), proc) == 8


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
    proc = at_the_root(tmp_path)
    assert available_memory(meminfo, cgroup(tmp_path / "none"), proc) == 8_000_000 * 1024
    limited = cgroup(tmp_path / "v2", **{"memory.max": str(3 * GIB), "memory.current": str(GIB)})
    assert available_memory(meminfo, limited, proc) == 2 * GIB
    unlimited_v1 = cgroup(tmp_path / "v1", **{"memory__memory.limit_in_bytes": "9223372036854771712",
                                                "memory__memory.usage_in_bytes": str(GIB)})
    assert available_memory(meminfo, unlimited_v1, proc) == 8_000_000 * 1024


def test_auto_takes_every_core_the_memory_holds_and_never_more_than_the_jobs(monkeypatch):
    monkeypatch.delenv(CORES_ENV, raising=False)
    monkeypatch.setattr("mrl.runtime.capacity.usable_cores", lambda: 32)
    assert processes_for("auto", 100, GIB, "runs", "RunConfig.packed_runs", memory=64 * GIB) == 32
    assert processes_for("auto", 5, GIB, "runs", "RunConfig.packed_runs", memory=64 * GIB) == 5
    assert processes_for("auto", 100, GIB, "runs", "RunConfig.packed_runs", memory=10.5 * GIB) == 10   # found cores


def test_the_cores_asked_for_cap_a_profiles_number(monkeypatch):
    """--cores N (MRL_CORES) lowers a profile's own packed_runs or zoo.workers, and never raises it."""
    monkeypatch.setenv(CORES_ENV, "2")
    assert processes_for(8, 100, GIB, "grid runs", "RunConfig.packed_runs", memory=64 * GIB) == 2
    monkeypatch.setenv(CORES_ENV, "16")
    assert processes_for(3, 100, GIB, "the zoo's warm-up", "ZooConfig.workers", memory=64 * GIB) == 3
    with pytest.raises(CapacityError, match=r"\(MRL_CORES=4\) need 4.0 GiB"):
        monkeypatch.setenv(CORES_ENV, "4")
        processes_for(8, 100, GIB, "grid runs", "RunConfig.packed_runs", memory=2 * GIB)


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


def test_build_zoos_sizes_auto_workers_to_the_usable_cores(monkeypatch, tmp_path):
    """zoo.workers: auto becomes the usable cores (here MRL_CORES=3), never more than the missing families, before
    mrl.runtime.zoo builds them (mrl.runtime.zoo_grid: the placement outside the zoo's fingerprint)."""
    from mrl.core.config import FamilyConfig, TaskConfig, ZooConfig
    from mrl.runtime import zoo, zoo_grid
    from testsupport import SMALL, TINY_TASK

    monkeypatch.setenv(CORES_ENV, "3")
    families = [FamilyConfig(name=name, arch="gpt2", tokenizer="bpe", **SMALL) for name in "ABCD"]
    seen = []
    monkeypatch.setattr(zoo, "build_zoos", lambda task, zoo_cfgs, root, progress: seen.append(
        [z.workers for z in zoo_cfgs]))
    zoo_grid.build_zoos(TaskConfig(**TINY_TASK), [ZooConfig(families=families, workers="auto")], tmp_path, False)
    zoo_grid.build_zoos(TaskConfig(**TINY_TASK), [ZooConfig(families=families[:2], workers="auto")], tmp_path, False)
    assert seen == [[3], [2]]

"""The grid on a Ray cluster (mrl.runtime.cluster), simulated by `ray.cluster_utils.Cluster` on this machine: a head
with no CPU (the driver's) and two nodes of one CPU each. Each test's driver keeps its caches in a folder of its own
and the tasks write only in temporary folders of their nodes, as on machines that share no filesystem.

- a grid with its warm-up gives the zoo's bits and the tables of the same grid run here, and a re-run sends nothing;
- a node removed while it runs a task (the test waits for that task to report its start, not for a time) still
  gives equal tables: Ray reruns the task on the other node;
- a driver killed mid-grid leaves no task running; a task that hangs past its deadline or dies stops the grid with
  its name, and one that no node can hold is refused; a node that computes otherwise runs nothing and says why;
- a Ray this package starts itself listens on the loopback interface only, without a dashboard.

Outside `make test` (minutes on two cores): `make test-cluster`, which CI runs after it."""
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.cluster

TESTS = Path(__file__).resolve().parent
DEADLINE = 300
"""seconds any wait here may take before the test fails (a fault, not a slow machine, would exceed it)"""


@pytest.fixture(scope="module")
def cluster():
    """A head of no CPU and two nodes of one CPU each, joined by this process as the grid's driver."""
    import ray
    from ray.cluster_utils import Cluster

    from mrl.runtime.cluster import connect

    simulated = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    for _ in range(2):
        simulated.add_node(num_cpus=1)
    simulated.wait_for_nodes()
    connect(simulated.address)
    yield simulated
    ray.shutdown()
    simulated.shutdown()


def tiny_grid():
    """(task config, zoo config, a labelled grid builder {paths} -> [(label, Run)]): two small families warmed up a
    few steps, and grpo and sgt on them (GrpoConfig's steps apart: grid's)."""
    from testsupport import SMALL, TINY_TASK

    from mrl.core.config import FamilyConfig, GrpoConfig, TaskConfig, WarmupConfig, ZooConfig
    from mrl.core.probes import probe_config
    from mrl.core.run_config import RunConfig
    from mrl.runtime.spec import Run

    task = TaskConfig(**TINY_TASK)
    zoo = ZooConfig(families=[FamilyConfig(name="A", arch="gpt2", tokenizer="bpe", **SMALL),
                              FamilyConfig(name="B", arch="llama", tokenizer="unigram", vocab_size=40, **SMALL)],
                    warmup=WarmupConfig(steps=8, batch_size=16, lr_warmup_steps=2), workers=1)
    config = RunConfig(task=task, grpo=GrpoConfig(steps=6, prompts_per_step=4, group_size=4, eval_every=3, seed=0))

    def grid(paths: dict, seeds=(0,)) -> list:
        """Seed 0's runs take 6 steps; seed 1's 60, long enough that the test sees them run and removes a node."""
        return [({"probe": probe, "seed": seed}, Run(config, dict(paths), probe_config(probe), seed, 6 if seed == 0
                                                     else 60)) for probe in ("grpo", "sgt") for seed in seeds]
    return task, zoo, grid


def checkout(folder: Path) -> Path:
    """A folder that mrl takes for a checkout (its run cache under results/, its zoo under data/models)."""
    (folder / "mrl").mkdir(parents=True, exist_ok=True)
    (folder / "pyproject.toml").write_text("")
    return folder


def computed_here(root: Path, seeds=(0,)) -> tuple[dict, object, object]:
    """The tiny zoo and grid computed in this process's pools, in the checkout `root`: (zoo paths, steps, evals)."""
    from mrl.experiments.runs import run_many
    from mrl.runtime.zoo_grid import build_zoo

    task, zoo, grid = tiny_grid()
    paths = {name: str(p.path) for name, p in build_zoo(task, zoo, root / "data" / "models", False).items()}
    steps, evals = run_many(grid(paths, seeds), 1, progress=False)
    return paths, steps, evals


def untimed(steps):
    return steps.drop(columns=[c for c in steps if c.endswith("seconds")])


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    """The grid computed here, without Ray, in a checkout of its own (seeds 0 and 1)."""
    root = checkout(tmp_path_factory.mktemp("local"))
    old = os.getcwd()
    os.chdir(root)
    try:
        return computed_here(root, seeds=(0, 1))
    finally:
        os.chdir(old)


def test_a_grid_and_its_warm_up_on_the_cluster_equal_the_same_grid_here(cluster, local, tmp_path, monkeypatch):
    from mrl.experiments import runs
    from mrl.runtime.cluster import ADDRESS_ENV

    monkeypatch.chdir(checkout(tmp_path))
    monkeypatch.setenv(ADDRESS_ENV, cluster.address)
    paths, steps, evals = computed_here(tmp_path)
    local_paths, local_steps, local_evals = local
    for name, path in paths.items():   # each family's checkpoint and tokenizer, bit for bit, in the same folder name
        assert Path(path).name == Path(local_paths[name]).name
        for file in ("model.safetensors", "tokenizer.json", "config.json"):
            assert (Path(path) / file).read_bytes() == (Path(local_paths[name]) / file).read_bytes(), (name, file)
    chosen = local_evals.seed == 0
    assert evals.equals(local_evals[chosen].reset_index(drop=True))
    assert untimed(steps).equals(untimed(local_steps[local_steps.seed == 0]).reset_index(drop=True))
    cached = sorted(p.name for p in (tmp_path / "results" / "runs").iterdir())
    assert cached == sorted(run.key() for _, run in tiny_grid()[2](paths)) and len(cached) == 2   # keys as here

    def nothing_to_send(tasks, *args, **kwargs):
        assert not tasks, f"a re-run sent {[t.label for t in tasks]} although the cache holds them"
        return []
    monkeypatch.setattr(runs, "map_on_ray", nothing_to_send)
    _, _, again_evals = computed_here(tmp_path)
    assert again_evals.equals(evals)


def test_a_node_removed_while_it_runs_a_task_still_gives_equal_tables(cluster, local, tmp_path, monkeypatch):
    """The test removes the node of the first task that reports its start (the grid's progress callback), so the
    removal happens while that task runs; Ray reruns it on the other node, and the tables equal those computed here."""
    from mrl.experiments import runs
    from mrl.runtime.cluster import ADDRESS_ENV, map_on_ray

    monkeypatch.chdir(checkout(tmp_path))
    monkeypatch.setenv(ADDRESS_ENV, cluster.address)
    local_paths, local_steps, local_evals = local
    paths = {}
    for name, path in local_paths.items():   # the zoo as the local checkout built it, copied (the grid is the test)
        target = tmp_path / "data" / "models" / Path(path).parent.name / Path(path).name
        target.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cp", "-r", path, str(target)], check=True)
        paths[name] = str(target)
    removed, started = [], []

    def remove_a_busy_node(running: dict) -> None:
        started.append(dict(running))
        if removed:
            return
        nodes = {node.node_id: node for node in cluster.worker_nodes}
        busy = [node for node in running.values() if node in nodes]
        if busy:
            removed.append(busy[0])
            cluster.remove_node(nodes[busy[0]])

    monkeypatch.setattr(runs, "map_on_ray", lambda *args, **kwargs: map_on_ray(
        *args, **kwargs, on_progress=remove_a_busy_node))
    try:
        steps, evals = runs.run_many(tiny_grid()[2](paths, seeds=(1,)), 1, progress=False)
    finally:
        if len(cluster.worker_nodes) < 2:   # the next tests get two nodes again
            cluster.add_node(num_cpus=1)
            cluster.wait_for_nodes()
    assert removed, f"no task reported its start on a worker node: {started}"
    # Not asserted: that the board saw the lost task start again on the other node. A tiny grid's task can end, its
    # result already on its way to the driver, in the moment its node is removed; the board then sees no rerun
    # (the check was flaky in the full module for that reason). What the grid must give either way is equal tables.
    chosen = local_evals.seed == 1
    assert evals.equals(local_evals[chosen].reset_index(drop=True))
    assert untimed(steps).equals(untimed(local_steps[local_steps.seed == 1]).reset_index(drop=True))


KILLED_DRIVER = """
import sys
from mrl.runtime.cluster import Task, connect, map_on_ray
from testsupport import pid_then_wait

if __name__ == "__main__":
    connect(sys.argv[1])
    map_on_ray([Task(pid_then_wait, sys.argv[2], "waits forever")], "a grid", progress=False)
"""


def alive(pid: int) -> bool:
    from mrl.runtime.results import process_alive

    return process_alive(pid)


def wait_until(condition, what: str) -> None:
    """Poll `condition` until it holds (the event); DEADLINE seconds at most."""
    deadline = time.monotonic() + DEADLINE
    while not condition():
        assert time.monotonic() < deadline, f"waited {DEADLINE} s for {what}"
        time.sleep(0.1)


def test_a_driver_killed_mid_grid_leaves_no_task_running(cluster, tmp_path):
    script, pid_file = tmp_path / "driver.py", tmp_path / "task.pid"
    script.write_text(textwrap.dedent(KILLED_DRIVER))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    driver = subprocess.Popen([sys.executable, str(script), cluster.address, str(pid_file)], env=env)
    try:
        wait_until(lambda: pid_file.is_file() and pid_file.read_text().strip() or driver.poll() is not None,
                   "the task to start")
        assert driver.poll() is None, "the driver ended before its task started"
        task = int(pid_file.read_text())
        assert alive(task)
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
        wait_until(lambda: not alive(task), "Ray to end the dead driver's task")
    finally:
        if driver.poll() is None:
            driver.kill()


def test_a_node_that_computes_otherwise_runs_nothing_and_says_why(cluster, tmp_path, monkeypatch):
    """A node whose mrl code differs from the driver's (here: the driver claims another fingerprint) refuses the task
    before it runs; the driver's error names the job, the node and what differs."""
    import dataclasses

    from testsupport import touch

    from mrl.runtime import cluster as grid
    from mrl.runtime.cluster import GridTaskFailed, Task, map_on_ray

    made = tmp_path / "made"
    assert map_on_ray([Task(touch, str(made), "touch")], "a grid", progress=False) == ["made"]
    made.unlink()
    other = dataclasses.replace(grid.driver_contract(), code="0123456789abcdef")
    monkeypatch.setattr(grid, "driver_contract", lambda: other)
    with pytest.raises(GridTaskFailed, match=r"touch failed on node .*NodeRefused: node .* runs nothing: its mrl code "
                                             r"differs \(fingerprint \w+, the driver's 0123456789abcdef\)"):
        map_on_ray([Task(touch, str(made), "touch")], "a grid", progress=False)
    assert not made.exists()


@pytest.mark.parametrize("job, error", [
    ("pid_then_wait", r"a grid: hangs ran past its deadline of 2 s on node \w+ and was cancelled"),
    ("pid_then_die", r"a grid: dies was lost after 0 retries: WorkerCrashedError")])
def test_a_task_that_dies_or_hangs_never_hangs_the_grid(cluster, tmp_path, job, error):
    """The Ray twin of test_runner's packed test: a task that hangs is cancelled once its deadline has passed since it
    reported its start, one whose process dies is named, and neither leaves its process behind. The test waits on
    the grid's error and on the process's end, never for a time."""
    import testsupport

    from mrl.runtime.cluster import GridTaskFailed, Task, map_on_ray

    pid_file = tmp_path / "task.pid"
    label = "hangs" if job == "pid_then_wait" else "dies"
    with pytest.raises(GridTaskFailed, match=error):
        map_on_ray([Task(getattr(testsupport, job), str(pid_file), label, deadline=2.0)], "a grid", progress=False,
                   max_retries=0)
    task = int(pid_file.read_text())
    wait_until(lambda: not alive(task), "the task's process to end")


def test_a_task_that_no_node_can_hold_is_refused_not_left_waiting(cluster, tmp_path, monkeypatch):
    from testsupport import touch

    from mrl.runtime import cluster as grid
    from mrl.runtime.cluster import NoNodeFits, Task, map_on_ray

    monkeypatch.setattr(grid, "PLACEMENT_SECONDS", 1.0)
    made = tmp_path / "made"
    with pytest.raises(NoNodeFits, match=r"a grid: no live node of the cluster can hold touch, a task of 1 CPU and "
                                         r"16384.00 GiB of memory .* the live nodes: .*1 CPU"):
        map_on_ray([Task(touch, str(made), "touch")], "a grid", progress=False, memory=2 ** 44)
    assert not made.exists()


KERNEL = """
import sys
from mrl.runtime.cluster import Task, connect, grid_address, map_on_ray
from testsupport import touch

if __name__ == "__main__":
    connect(grid_address())
    print(map_on_ray([Task(touch, sys.argv[1], "touch")], "a grid", progress=False))
"""
"""a notebook's kernel as mrl reproduce starts it: it joins the cluster its environment names"""

REPRODUCE = """
import os, subprocess, sys
from mrl.reproduce import scale_out

scale_out(None, "local")
print("address", os.environ["MRL_RAY_ADDRESS"], flush=True)
sys.exit(subprocess.run([sys.executable, sys.argv[1], sys.argv[2]]).returncode)
"""
"""mrl reproduce --ray local: this process starts Ray, its kernels join it"""


def test_reproduce_ray_local_starts_ray_here_and_its_kernels_join_it(tmp_path):
    (tmp_path / "kernel.py").write_text(KERNEL)
    (tmp_path / "reproduce.py").write_text(REPRODUCE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    env.pop("MRL_RAY_ADDRESS", None)
    done = subprocess.run([sys.executable, str(tmp_path / "reproduce.py"), str(tmp_path / "kernel.py"),
                           str(tmp_path / "made")], capture_output=True, text=True, timeout=DEADLINE, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    address = done.stdout.split("address ")[1].split()[0]
    assert address.startswith("127.0.0.1:") and "['made']" in done.stdout and (tmp_path / "made").is_file()


LOCAL_RAY = """
import json, psutil, ray
from mrl.runtime.cluster import start_local_ray

start_local_ray(1)
ray.get(ray.remote(lambda: 1).remote())   # a worker process started too
mine = {p.pid for p in psutil.Process().children(recursive=True)} | {psutil.Process().pid}
listening = sorted({c.laddr.ip for c in psutil.net_connections("inet") if c.status == "LISTEN" and c.pid in mine})
commands = [" ".join(p.cmdline()) for p in psutil.Process().children(recursive=True)]
print(json.dumps({"listening": listening, "dashboard": [c for c in commands if "dashboard/dashboard.py" in c],
                  "webui": ray._private.worker.global_worker.node.webui_url}))
ray.shutdown()
"""


def test_a_ray_this_package_starts_listens_on_loopback_only_without_a_dashboard(tmp_path):
    import json

    (tmp_path / "local_ray.py").write_text(LOCAL_RAY)
    done = subprocess.run([sys.executable, str(tmp_path / "local_ray.py")], capture_output=True, text=True,
                          timeout=DEADLINE)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["listening"] and set(seen["listening"]) <= {"127.0.0.1", "::1", "::ffff:127.0.0.1"}, seen
    # no dashboard: Ray keeps only its minimal head process for usage statistics, with no job API and no web page
    assert not seen["webui"], seen
    for command in seen["dashboard"]:
        modules = command.split("--modules-to-load=")[1].split()[0].split(",")
        assert "--minimal" in command and "--disable-frontend" in command and modules == ["UsageStatsHead"], command


def test_the_simulated_cluster_listens_on_loopback_and_a_driver_on_127_runs_a_task_there(tmp_path):
    """benchmarks/simulated_cluster.py, as docs/performance.md uses it: its nodes bind 127.0.0.1 only, a kernel that
    joins it by that address runs a grid task on it (Ray would rewrite 127.0.0.1 to the machine's network address
    without mrl.runtime.cluster.loopback_only), and it shuts down on SIGTERM."""
    import psutil

    address_file = tmp_path / "address"
    cluster = subprocess.Popen([sys.executable, str(TESTS.parent / "benchmarks" / "simulated_cluster.py"), "--nodes",
                                "1", "--address-file", str(address_file)], stdout=subprocess.PIPE, text=True)
    try:
        wait_until(address_file.is_file, "the simulated cluster's address")
        address = address_file.read_text().strip()
        assert address.startswith("127.0.0.1:"), address
        mine = {p.pid for p in psutil.Process(cluster.pid).children(recursive=True)} | {cluster.pid}
        listening = {c.laddr.ip for c in psutil.net_connections("inet") if c.status == "LISTEN" and c.pid in mine}
        assert listening and listening <= {"127.0.0.1", "::1", "::ffff:127.0.0.1"}, listening
        (tmp_path / "kernel.py").write_text(KERNEL)
        env = {**os.environ, "MRL_RAY_ADDRESS": address,
               "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
        done = subprocess.run([sys.executable, str(tmp_path / "kernel.py"), str(tmp_path / "made")],
                              capture_output=True, text=True, timeout=DEADLINE, env=env)
        assert done.returncode == 0 and "['made']" in done.stdout, done.stderr[-3000:]
    finally:
        cluster.terminate()
        assert cluster.wait(timeout=DEADLINE) == 0

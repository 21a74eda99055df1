"""Every process pool dies with its parent: the zoo's warm-up, a packed grid and the process backend leave no worker
behind when the script that started them is killed (SIGKILL and SIGTERM run none of its cleanup), and SIGINT stops
a grid's and a warm-up's workers."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPT = '''
import os, signal, sys, threading, time
from pathlib import Path

# SIGINT raises KeyboardInterrupt, as in a Jupyter kernel, however the tests were started (a shell's background job,
# `make test &` or `nohup`, starts with SIGINT ignored, and Python then keeps it ignored)
signal.signal(signal.SIGINT, signal.default_int_handler)

FOLDER = Path(sys.argv[2])


def sleeper(job):
    """A pool job that announces its process and never ends."""
    (FOLDER / f"worker-{os.getpid()}").write_text("")
    time.sleep(3600)


class SleepingActor:
    def __init__(self, config):
        (FOLDER / f"worker-{os.getpid()}").write_text("")

    def ping(self):
        time.sleep(3600)


class SleepingSpec:
    """A worker's spec as the backends read it: its name, resources and build()."""

    name, num_cpus, num_gpus = "A", 1, 0

    def build(self):
        return SleepingActor(self)


def warmup():
    from mrl.runtime.pools import map_in_processes
    map_in_processes(sleeper, range(2), 2, "the zoo's warm-up")


def grid():
    from mrl.core.config import RunnerConfig
    from mrl.core.run_config import RunConfig
    from mrl.experiments.runs import Run, run_packed
    from mrl.core.probes import probe_config
    config = RunConfig(runner=RunnerConfig(step_timeout=3600))
    runs = [Run(config, {"A": "a"}, probe_config("grpo"), seed, 1) for seed in (0, 1)]
    run_packed(runs, 2, progress=False, job=sleeper)


def backend():
    from mrl.runtime.mwra import ProcessBackend
    from mrl.runtime.worker import WorkerHandle
    workers = ProcessBackend([SleepingSpec()])
    workers.gather({"A": WorkerHandle(workers, "A").ping()})


if __name__ == "__main__":
    pools = {"warmup": warmup, "grid": grid, "backend": backend}
    if sys.argv[1] == "all":   # every pool at once, each started from its own thread
        # what the three pools import, imported here first: three threads importing mrl at once race on
        # transformers' lazy attributes ("cannot import name 'GenerationConfig'"), which is not what this tests
        import mrl.core.run_config, mrl.experiments.runs, mrl.runtime.mwra, mrl.runtime.pools, mrl.runtime.worker
        for pool in pools.values():
            threading.Thread(target=pool, daemon=True).start()
        time.sleep(3600)
    else:
        try:
            pools[sys.argv[1]]()
        except KeyboardInterrupt:   # the script lives on, as a Jupyter kernel does after an interrupt
            (FOLDER / "interrupted").write_text("")
            time.sleep(3600)
'''


def alive(pid: int) -> bool:
    """The process exists and is not a zombie (an orphan's zombie waits for whoever adopted it to reap it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def start(tmp_path: Path, pools: str, workers: int) -> tuple[subprocess.Popen, list[int]]:
    """The script running `pools`, once its `workers` workers have announced themselves: (its process, their
    pids)."""
    (tmp_path / "pools.py").write_text(SCRIPT)
    parent = subprocess.Popen([sys.executable, str(tmp_path / "pools.py"), pools, str(tmp_path)], cwd=tmp_path)
    deadline = time.monotonic() + 300
    while len(pids := [int(p.name.split("-")[1]) for p in tmp_path.glob("worker-*")]) < workers:
        assert parent.poll() is None, "the script ended before its workers started"
        assert time.monotonic() < deadline, f"only {len(pids)} of {workers} workers started within 300 s"
        time.sleep(0.2)
    return parent, pids


def gone_within(pids: list[int], seconds: float) -> list[int]:
    """The pids still alive after `seconds` (polled; [] as soon as every one is gone)."""
    deadline = time.monotonic() + seconds
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [pid for pid in pids if alive(pid)]


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc (Linux)")
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_every_pools_workers_die_with_their_killed_parent(tmp_path, sig):
    """The zoo's warm-up (2 workers), a packed grid (2) and the process backend (1), all started by one script:
    killed by `sig`, it leaves no worker alive 10 s later."""
    parent, pids = start(tmp_path, "all", 5)
    try:
        parent.send_signal(sig)
        parent.wait(timeout=60)
        assert gone_within(pids, 10) == [], f"workers alive 10 s after the parent's {sig.name}"
    finally:
        parent.kill()
        for pid in pids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc (Linux)")
@pytest.mark.parametrize("pool", ["grid", "warmup"])
def test_sigint_stops_a_pools_workers(tmp_path, pool):
    """SIGINT to the parent alone (not its process group, as Jupyter interrupts a kernel): the pool raises
    KeyboardInterrupt and its workers go while the parent lives on."""
    parent, pids = start(tmp_path, pool, 2)
    try:
        parent.send_signal(signal.SIGINT)
        deadline = time.monotonic() + 60
        while not (tmp_path / "interrupted").exists():
            assert time.monotonic() < deadline, "the pool never raised KeyboardInterrupt"
            time.sleep(0.1)
        assert gone_within(pids, 10) == [] and parent.poll() is None
    finally:
        parent.kill()
        for pid in pids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


SLOW_IMPORT_SCRIPT = '''
import multiprocessing, os, sys, time

if __name__ == "__mp_main__":   # a worker re-importing this script, as slow as torch and mrl on a loaded CPU
    time.sleep(120)

if __name__ == "__main__":
    from mrl.runtime.pools import worker_executor
    executor = worker_executor(2)
    for _ in range(2):
        executor.submit(os.getpid)
    time.sleep(1)
    print(" ".join(str(child.pid) for child in multiprocessing.active_children()), flush=True)
    time.sleep(3600)
'''


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc (Linux)")
def test_workers_still_importing_die_with_their_killed_parent(tmp_path):
    """SIGKILL the parent while its pool's workers are still re-importing its script (two minutes each here, as a
    loaded machine's import of torch can take): they exit within 10 s, long before any of their own code runs."""
    (tmp_path / "slow.py").write_text(SLOW_IMPORT_SCRIPT)
    parent = subprocess.Popen([sys.executable, str(tmp_path / "slow.py")], cwd=tmp_path, stdout=subprocess.PIPE,
                              text=True)
    pids = [int(pid) for pid in parent.stdout.readline().split()]
    try:
        assert len(pids) == 2 and all(alive(pid) for pid in pids), "the pool's two workers did not start"
        parent.kill()
        parent.wait(timeout=60)
        assert gone_within(pids, 10) == [], "workers still importing outlived their parent's SIGKILL"
    finally:
        parent.kill()
        for pid in pids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)

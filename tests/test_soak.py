"""Soak: a 200-step, 3-policy run on the process backend under random faults ends with the metrics and the
experience log of an uninterrupted run.

Faults, drawn from a seeded schedule: a SIGKILL of one worker process (the run fails by name and is
restarted), a SIGKILL of the whole run, and after either, damage to the newest checkpoint (truncated,
emptied or one flipped byte), which resume must skip. Outside `make test` (several minutes): `make soak`.
"""
import json
import os
import pickle
import random
import signal
import subprocess
import sys
import time

import psutil
import pytest

from testsupport import TINY_TASK, metrics, run_of
from mrl.core.config import GrpoConfig, RunnerConfig, TaskConfig
from mrl.runtime import checkpoint
from mrl.runtime.experience_log import replay
from mrl.runtime.runner import run_concurrent

pytestmark = pytest.mark.soak

TASK = TaskConfig(**TINY_TASK)
GRPO = GrpoConfig(steps=200, prompts_per_step=4, group_size=4, lr=3e-4, eval_every=25, seed=0)
RUNNER = RunnerConfig(backend="process", step_timeout=120, failure_policy="fail", checkpoint_every=5)
FAULTS = 10  # kills (a worker's or the whole run's), each once the run has written a new checkpoint

RUN = """
import pickle, sys
from mrl.core.config import GrpoConfig, RunnerConfig, TaskConfig
from mrl.core.probes import probe_config
from mrl.core.run_config import RunConfig
from mrl.runtime.runner import run_concurrent
from mrl.runtime.spec import Run

if __name__ == "__main__":
    grpo = GrpoConfig(**{grpo})
    config = RunConfig(task=TaskConfig(**{task}), grpo=grpo, runner=RunnerConfig(**{runner}))
    record = run_concurrent(Run(config, {paths}, probe_config("sgt"), grpo.seed, grpo.steps),
                            checkpoint_dir=sys.argv[1], resume=True, experience_dir=sys.argv[1] + "/experience",
                            progress=False)
    with open(sys.argv[2], "wb") as handle:
        pickle.dump(record, handle)
"""


def damage_newest(folder, rng) -> str | None:
    newest = checkpoint.latest(folder)
    if newest is None:
        return None
    state = newest / "state.pt"
    data = state.read_bytes()
    how = rng.choice(["truncated", "emptied", "flipped"])
    if how == "truncated":
        data = data[: rng.randrange(len(data))]
    elif how == "emptied":
        data = b""
    else:
        data = bytearray(data)
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        data = bytes(data)
    state.write_bytes(data)
    return f"{newest.name} {how}"


@pytest.fixture(scope="module")
def paths(tiny_zoo_paths):
    return tiny_zoo_paths


def test_a_run_under_random_kills_and_damage_ends_as_an_uninterrupted_one(paths, tmp_path):
    from mrl.core.probes import probe_config

    reference = run_concurrent(run_of(paths, TASK, GRPO, RunnerConfig(checkpoint_every=0), probe=probe_config("sgt")),
                               experience_dir=tmp_path / "reference-log", progress=False)
    script = tmp_path / "run.py"
    script.write_text(RUN.format(paths=paths, task=TASK.__dict__, grpo=GRPO.__dict__, runner=RUNNER.__dict__))
    ckpt, out = tmp_path / "ckpt", tmp_path / "record.pkl"
    rng = random.Random(0)
    tally = {"worker kills": 0, "run kills": 0, "damaged": [], "restarts": 0}
    while True:
        process = subprocess.Popen([sys.executable, str(script), str(ckpt), str(out)], stderr=subprocess.DEVNULL)
        if tally["worker kills"] + tally["run kills"] == FAULTS:
            assert process.wait(timeout=900) == 0
            break
        before, deadline = checkpoint.latest(ckpt), time.monotonic() + 300
        while checkpoint.latest(ckpt) == before and process.poll() is None:  # strike once the run has progressed
            assert time.monotonic() < deadline, "no checkpoint within 300 s"
            time.sleep(0.05)
        time.sleep(rng.uniform(0, 2))
        if process.poll() is not None:
            assert process.returncode == 0, "the run failed without a fault"
            break
        # the run's policy workers: the children of its fork server (mrl.runtime.pools), a child of the run itself
        workers = [worker for server in psutil.Process(process.pid).children()
                   if "forkserver" in " ".join(server.cmdline()) for worker in server.children()]
        if workers and rng.random() < 0.5:
            os.kill(rng.choice(workers).pid, signal.SIGKILL)  # the run names it and exits within the deadline
            tally["worker kills"] += 1
            process.wait(timeout=120)
        else:
            for child in workers:
                child.kill()  # as a machine crash would take them with it
            process.send_signal(signal.SIGKILL)
            process.wait()
            tally["run kills"] += 1
        if rng.random() < 0.5:
            tally["damaged"].append(damage_newest(ckpt, rng))
        tally["restarts"] += 1
    with open(out, "rb") as handle:
        record = pickle.load(handle)
    skipped = [e["event"] for e in record.events if e["event"].startswith("skipped damaged")]
    logged, expected = list(replay(ckpt / "experience")), list(replay(tmp_path / "reference-log"))
    print(json.dumps({**tally, "skipped in the final run's lineage": skipped, "records replayed": len(logged)},
                     indent=1))
    assert tally["worker kills"] + tally["run kills"] >= FAULTS // 2
    assert metrics(record) == metrics(reference)
    assert logged == expected and len(logged) > 0

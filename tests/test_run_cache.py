"""The run cache returns a run whole or not at all: every file is checked against run.json's checksums (a torn
table, an edited one, an old entry without checksums is never read), a run is published by one rename, and one key
computed by two processes at once is published once: the first rename wins and the other reads its entry."""
import json
import multiprocessing
import os
import subprocess
import sys
import time
import warnings
from concurrent.futures import ProcessPoolExecutor

import pandas as pd
import pytest

from mrl.core.see import PolicySpec
from mrl.runtime.experience_log import write_log_step
from mrl.runtime.results import (RUN_FORMAT, RunCacheWarning, clear_work_folders, process_alive, publish_run, read_run,
                                 work_folder, write_run_record)

STEPS = pd.DataFrame({"policy": ["A", "A"], "step": [1, 2], "reward": [0.25, 0.5]})
EVALS = pd.DataFrame({"policy": ["A"] * 24, "step": [0] * 12 + [2] * 12, "split": ["test"] * 24,
                      "skill": [f"S{i % 3 + 1}" for i in range(24)], "accuracy": [i / 24 for i in range(24)]})


def cache_entry(folder, experience: bool = False):
    """A finished run in `folder`, as the cache writes one (its tables, then run.json with their checksums)."""
    folder.mkdir(parents=True)
    STEPS.to_csv(folder / "steps.csv", index=False)
    EVALS.to_csv(folder / "evals.csv", index=False)
    if experience:   # a step of SEE's log without records: its manifest is what the index checksum covers
        write_log_step(folder / "experience", 1, [], {"A": PolicySpec(vocab_size=100, tokenizer_id="bpe")})
    write_run_record(folder, {"probe": {"name": "grpo"}})
    return folder


def refused(folder, match: str):
    """read_run(folder) is None with a RunCacheWarning naming the folder and `match`."""
    with pytest.warns(RunCacheWarning, match=match) as caught:
        assert read_run(folder) is None
    assert str(folder) in str(caught[0].message)


def test_a_killed_process_not_yet_collected_by_its_parent_is_not_alive():
    """A zombie (exited, its status not yet collected) holds no checkpoints in use: its are adopted."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 60
    while process_alive(child.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not process_alive(child.pid) and child.poll() == 0   # collected only now
    assert process_alive(os.getpid())


def test_a_checked_entry_reads_back_whole(tmp_path):
    folder = cache_entry(tmp_path / "key", experience=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cached = read_run(folder)
    assert cached.steps.equals(STEPS) and cached.evals.equals(EVALS)
    assert cached.record["format"] == RUN_FORMAT and set(cached.record["sha256"]) == {"steps.csv", "evals.csv",
                                                                                      "experience"}


def test_a_folder_without_run_json_is_no_run(tmp_path):
    (tmp_path / "key").mkdir()
    assert read_run(tmp_path / "key") is None


def test_a_torn_table_is_never_returned(tmp_path):
    """evals.csv cut to its header and one row, as a crash in the middle of a write leaves it (24 rows cached)."""
    folder = cache_entry(tmp_path / "key")
    lines = (folder / "evals.csv").read_text().splitlines(keepends=True)
    (folder / "evals.csv").write_text("".join(lines[:2]))
    refused(folder, "evals.csv does not match its checksum")


def test_an_edited_table_and_a_removed_one_are_refused(tmp_path):
    folder = cache_entry(tmp_path / "key")
    (folder / "steps.csv").write_text((folder / "steps.csv").read_text().replace("0.25", "0.75"))
    refused(folder, "steps.csv does not match")
    (folder / "steps.csv").unlink()
    refused(folder, "steps.csv is unreadable")


def test_a_damaged_experience_log_index_is_refused(tmp_path):
    folder = cache_entry(tmp_path / "key", experience=True)
    manifest = next((folder / "experience").glob("step-*.json"))
    manifest.write_text(manifest.read_text().replace('"clock": 1', '"clock": 0'))
    refused(folder, "experience log's manifests do not match")


def test_an_entry_of_the_old_format_is_not_read(tmp_path):
    """Format 1 (no checksums): it cannot be checked, so it is recomputed rather than read."""
    folder = cache_entry(tmp_path / "key")
    record = json.loads((folder / "run.json").read_text())
    del record["format"], record["sha256"]
    (folder / "run.json").write_text(json.dumps(record))
    refused(folder, "format 1.*no checksums")
    (folder / "run.json").write_text('{"format": 2, "sha256": {')
    refused(folder, "run.json is unreadable")


def test_publishing_replaces_a_torn_entry_in_one_rename(tmp_path):
    folder = cache_entry(tmp_path / "runs" / "key")
    (folder / "evals.csv").write_text("policy\n")
    work = cache_entry(work_folder(folder))
    with pytest.warns(RunCacheWarning, match="evals.csv does not match"):
        assert publish_run(work, folder) is None
    assert read_run(folder).evals.equals(EVALS) and not work.exists()
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["key"]


def test_a_run_published_with_its_experience_log_replaces_the_same_run_without_one(tmp_path):
    """80_beyond replays the grpo run's experience log: the same key computed earlier without a log (a run's log is
    not in its key) must give way to the entry that carries one, never win the rename and drop the log."""
    folder = cache_entry(tmp_path / "runs" / "key")
    work = cache_entry(work_folder(folder), experience=True)
    write_run_record(work, {"probe": {"name": "grpo"}, "experience": True})
    assert publish_run(work, folder) is not None and not work.exists()   # without asking: the first entry stays
    work = cache_entry(work_folder(folder), experience=True)
    write_run_record(work, {"probe": {"name": "grpo"}, "experience": True})
    assert publish_run(work, folder, experience=True) is None
    assert (folder / "experience").is_dir() and read_run(folder).record["experience"] is True


def publish_after(folder, reward: float, go) -> bool:
    """A process that computed the run of `folder` (its reward `reward`) publishes it once the file `go` exists: True
    when its own entry went into place, and either way the entry it returns is the one in place."""
    work = work_folder(folder)
    cache_entry(work)
    (work / "steps.csv").write_text(STEPS.assign(reward=reward).to_csv(index=False))
    write_run_record(work, {"probe": {"name": "grpo"}, "reward": reward})
    while not go.exists():
        time.sleep(0.01)
    other = publish_run(work, folder)
    assert (other or read_run(folder)).record == read_run(folder).record and not work.exists()
    return other is None


def test_two_processes_publishing_one_key_leave_one_whole_entry(tmp_path):
    """Two processes that computed the same key publish at once: one rename wins, the other returns the winner's
    entry; nothing mixed, nothing left in .partial."""
    folder = tmp_path / "runs" / "key"
    go = tmp_path / "go"
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(publish_after, folder, reward, go) for reward in (0.1, 0.2)]
        time.sleep(0.5)
        go.write_text("")
        own = [future.result(timeout=300) for future in futures]
    assert sorted(own) == [False, True]
    cached = read_run(folder)
    assert cached.steps.reward.tolist() == [cached.record["reward"]] * 2 and cached.evals.equals(EVALS)
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["key"]


def test_a_killed_processes_work_folder_is_cleared(tmp_path):
    folder = tmp_path / "runs" / "key"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = [folder.parent / ".partial" / f"key-{pid}" for pid in (int(dead.stdout), os.getpid(), os.getppid())]
    for work in stale:
        (work / "experience").mkdir(parents=True)
    clear_work_folders(folder)
    assert [work.exists() for work in stale] == [False, False, True]   # the living parent's is its own business


@pytest.mark.slow
def test_a_torn_cached_run_is_recomputed_not_returned(tiny_zoo_paths, tmp_path, monkeypatch):
    """The fault as a user met it: a cached run's evals.csv cut to its header and one row; asked for again, the run
    is computed afresh (a warning names its folder) and the whole table comes back, and goes back into the cache."""
    from testsupport import TINY_TASK
    from mrl.core.config import GrpoConfig, TaskConfig
    from mrl.core.run_config import RunConfig
    from mrl.experiments import Run, run_one
    from mrl.core.probes import probe_config

    monkeypatch.chdir(tmp_path)            # the run cache goes under this folder's results/
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "mrl").mkdir()
    grpo = GrpoConfig(steps=2, prompts_per_step=4, group_size=4, lr=3e-4, eval_every=1, seed=0)
    run = Run(RunConfig(task=TaskConfig(**TINY_TASK), grpo=grpo), {"A": tiny_zoo_paths["A"]}, probe_config("grpo"),
              0, 2)
    steps, evals = run_one(run)
    assert read_run(run.folder()).evals.equals(evals) and len(evals) > 2
    torn = run.folder() / "evals.csv"
    torn.write_text("".join(torn.read_text().splitlines(keepends=True)[:2]))
    with pytest.warns(RunCacheWarning, match=f"{run.folder()} is not read: evals.csv does not match"):
        again = run_one(run)
    assert again[1].equals(evals) and again[0].drop(columns=[c for c in steps if c.endswith("seconds")]).equals(
        steps.drop(columns=[c for c in steps if c.endswith("seconds")]))
    assert read_run(run.folder()).evals.equals(evals)
    assert [p.name for p in (tmp_path / "results" / "runs").iterdir()] == [run.folder().name]


KILLED_GRID = """
import sys
from pathlib import Path
from testsupport import TINY_TASK
from mrl.core.config import GrpoConfig, RunnerConfig, TaskConfig
from mrl.core.probes import probe_config
from mrl.core.run_config import RunConfig
from mrl.experiments import Run, run_many

STEPS = int(sys.argv[2])
if __name__ == "__main__":
    grpo = GrpoConfig(steps=STEPS, prompts_per_step=4, group_size=4, lr=3e-4, eval_every=10, seed=0)
    config = RunConfig(task=TaskConfig(**TINY_TASK), grpo=grpo, runner=RunnerConfig(grid_checkpoint_every=2))
    runs = [({"seed": seed}, Run(config, {"A": sys.argv[1]}, probe_config("grpo"), seed, STEPS)) for seed in (0, 1)]
    run_many(runs, packed_runs=2, progress=False)
"""
"""a packed grid of two runs that checkpoint every 2 steps, run from the folder it is started in"""


def group_alive(pgid: int) -> bool:
    """A process of group `pgid` still exists (a zombie counts: its checkpoints are not yet adoptable)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow
def test_a_killed_packed_grid_resumes_each_run_from_its_checkpoint(tiny_zoo_paths, tmp_path, monkeypatch):
    """SIGKILL a packed grid script once both runs have checkpointed; asked for again, each run adopts the
    checkpoints its dead process left, resumes from the newest (its run.json says so) and gives the same steps and
    evals as the same run computed uninterrupted."""
    import signal

    from testsupport import TINY_TASK
    from mrl.core.config import GrpoConfig, RunnerConfig, TaskConfig
    from mrl.core.probes import probe_config
    from mrl.core.run_config import RunConfig
    from mrl.experiments import Run, run_one

    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "mrl").mkdir()
    (tmp_path / "grid.py").write_text(KILLED_GRID)
    tests = os.path.dirname(__file__)
    steps = 40   # long enough that the grid is killed mid-run, not after it
    script = subprocess.Popen([sys.executable, "grid.py", tiny_zoo_paths["A"], str(steps)], cwd=tmp_path,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")])},
                              start_new_session=True)
    partial = tmp_path / "results" / "runs" / ".partial"
    deadline = time.monotonic() + 240
    def checkpointed() -> int:   # runs with a finished checkpoint (the newest is kept, so its step moves on)
        return len({step.parent for step in partial.glob("*.checkpoints/step-*") if not step.name.endswith(".tmp")})

    while checkpointed() < 2 and time.monotonic() < deadline:
        assert script.poll() is None, "the grid ended before it was killed"
        time.sleep(0.05)
    os.killpg(script.pid, signal.SIGKILL)   # the script and its packed processes
    script.wait()
    while group_alive(script.pid) and time.monotonic() < deadline + 60:   # the packed ones exit on their own time
        time.sleep(0.05)
    assert len(list(partial.glob("*.checkpoints"))) == 2

    grpo = GrpoConfig(steps=steps, prompts_per_step=4, group_size=4, lr=3e-4, eval_every=10, seed=0)
    config = RunConfig(task=TaskConfig(**TINY_TASK), grpo=grpo, runner=RunnerConfig(grid_checkpoint_every=2))
    runs = [Run(config, {"A": tiny_zoo_paths["A"]}, probe_config("grpo"), seed, steps) for seed in (0, 1)]
    reference = tmp_path / "reference"   # the same runs uninterrupted, in a run cache of their own
    (reference / "mrl").mkdir(parents=True)
    (reference / "pyproject.toml").write_text("")
    monkeypatch.chdir(reference)
    fresh = [run_one(run) for run in runs]
    monkeypatch.chdir(tmp_path)   # the killed grid's run cache
    timing = lambda frame: frame.drop(columns=[c for c in frame if c.endswith("seconds")])  # noqa: E731
    for run, (fresh_steps, fresh_evals) in zip(runs, fresh):
        resumed = run_one(run)
        events = [e["event"] for e in read_run(run.folder()).record["events"]]
        assert any(event.startswith("resumed from step-") for event in events), events
        assert timing(resumed[0]).equals(timing(fresh_steps)) and resumed[1].equals(fresh_evals)
    assert not partial.exists() or not list(partial.iterdir())   # no checkpoints or work folders left behind

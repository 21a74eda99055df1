"""Live metrics (mrl.runtime.tracking): metric names by hand, a run reported to TensorBoard, to Trackio and to W&B
(offline) read back from their own stores equal to the run's record, reporting changes nothing a run computes, a resumed
run reports only its new steps, a notebook table, and a bad report_to refused by name."""
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from testsupport import TINY_TASK, run_of
from mrl.core.config import ConfigError, GrpoConfig, RunnerConfig, TaskConfig
from mrl.core.probes import probe_config
from mrl.runtime import checkpoint
from mrl.runtime.runner import RunRecord, run_concurrent
from mrl.runtime.tracking import NotebookPlot, NotebookTable, Reporting, eval_metrics, step_metrics

TASK = TaskConfig(**TINY_TASK)
GRPO = GrpoConfig(steps=4, prompts_per_step=4, group_size=4, lr=3e-4, eval_every=2, seed=0)


class Collect:
    def __init__(self):
        self.logged, self.closed = [], False

    def log(self, metrics, step):
        self.logged.append((step, dict(metrics)))

    def close(self):
        self.closed = True


def test_step_metrics_by_hand():
    row = {"policy": "A", "step": 3, "reward": 0.5, "loss": -0.1, "grad_norm": 2.0, "active_sequences": 12,
           "rollout_seconds": 0.2, "update_seconds": 0.3, "rescue_size": 4, "rescue_nll": float("nan"),
           "note": "text", "flag": True}
    assert step_metrics(row) == {"A/train/reward": 0.5, "A/train/loss": -0.1, "A/train/grad_norm": 2.0,
                                 "A/train/active_sequences": 12.0, "A/timing/rollout_seconds": 0.2,
                                 "A/timing/update_seconds": 0.3, "A/probe/rescue_size": 4.0}


def test_eval_metrics_by_hand():
    rows = [{"policy": "B", "step": 0, "split": "held-out", "skill": "S1", "accuracy": 0.5},
            {"policy": "B", "step": 0, "split": "held-out", "skill": "S2", "accuracy": 0.25},
            {"policy": "B", "step": 0, "split": "pool", "skill": "S1", "accuracy": 1.0}]
    assert eval_metrics(rows) == {"B/eval/held-out/S1": 0.5, "B/eval/held-out/S2": 0.25, "B/eval/pool/S1": 1.0,
                                  "B/eval/held-out/mean": 0.375, "B/eval/pool/mean": 1.0}


def test_reporting_sends_each_row_once_in_step_order():
    record = RunRecord(steps=[{"policy": "A", "step": 1, "reward": 0.1}], evals=[
        {"policy": "A", "step": 0, "split": "pool", "skill": "S1", "accuracy": 0.2}], counters={"accepted": 8})
    sink = Collect()
    reporting = Reporting([sink])
    reporting.update(record)
    reporting.update(record)
    record.steps.append({"policy": "A", "step": 2, "reward": 0.3})
    reporting.update(record)
    assert [step for step, _ in sink.logged] == [0, 1, 2]
    assert sink.logged[1][1] == {"A/train/reward": 0.1, "exchange/accepted": 8.0}
    assert sink.logged[2][1] == {"A/train/reward": 0.3, "exchange/accepted": 8.0}


@pytest.mark.slow
def test_a_run_reports_its_record_and_computes_the_same(tiny_zoo_paths, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    paths = {name: tiny_zoo_paths[name] for name in ("A", "B")}
    sink = Collect()
    cfg = RunnerConfig(report_to="tensorboard", logging_dir=str(tmp_path / "tb"))
    reported = run_concurrent(run_of(paths, TASK, GRPO, cfg, probe=probe_config("sgt")),
                              progress=False, reporters=[sink])
    plain = run_concurrent(run_of(paths, TASK, GRPO, RunnerConfig(), probe=probe_config("sgt")),
                           progress=False)
    strip = [{k: v for k, v in row.items() if not k.endswith("seconds")} for row in reported.steps]
    assert strip == [{k: v for k, v in row.items() if not k.endswith("seconds")} for row in plain.steps]
    assert reported.evals == plain.evals
    assert sink.closed and [step for step, _ in sink.logged] == list(range(GRPO.steps + 1))

    events = EventAccumulator(str(tmp_path / "tb" / "sgt-seed0"))
    events.Reload()
    for name in paths:
        rewards = [(e.step, e.value) for e in events.Scalars(f"{name}/train/reward")]
        expected = [(row["step"], row["reward"]) for row in reported.steps if row["policy"] == name]
        assert [s for s, _ in rewards] == [s for s, _ in expected]
        assert [v for _, v in rewards] == pytest.approx([v for _, v in expected], rel=1e-6)
        assert [e.step for e in events.Scalars(f"{name}/probe/rescue_size")] == list(range(1, GRPO.steps + 1))
        accuracy = {(e.step, e.value) for e in events.Scalars(f"{name}/eval/held-out/S1")}
        assert {s for s, _ in accuracy} == {0, 2, 4}
    assert "exchange/accepted/rollout" in events.Tags()["scalars"]


@pytest.mark.slow
def test_a_resumed_run_reports_only_its_new_steps(tiny_zoo_paths, tmp_path):
    paths = {"A": tiny_zoo_paths["A"]}
    first, second = Collect(), Collect()
    cfg = RunnerConfig(checkpoint_every=2)
    run_concurrent(run_of(paths, TASK, GRPO, cfg), checkpoint_dir=tmp_path, progress=False, reporters=[first])
    assert [step for step, _ in first.logged] == [0, 1, 2, 3, 4]
    shutil.rmtree(checkpoint.latest(tmp_path))  # as if killed before its step-4 checkpoint
    run_concurrent(run_of(paths, TASK, GRPO, cfg), checkpoint_dir=tmp_path, resume=True, progress=False,
                   reporters=[second])
    assert [step for step, _ in second.logged] == [3, 4]


@pytest.mark.slow
def test_trackio_stores_the_run_locally(tiny_zoo_paths, tmp_path):
    """Trackio in its own process (it keeps a global current run), its store under TRACKIO_DIR, read back with
    Trackio's own storage API."""
    script = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(os.path.dirname(__file__))!r})
        from testsupport import TINY_TASK, run_of
        from mrl.core.config import GrpoConfig, RunnerConfig, TaskConfig
        from mrl.runtime.runner import run_concurrent
        record = run_concurrent(run_of({{"A": {tiny_zoo_paths["A"]!r}}}, TaskConfig(**TINY_TASK),
                                        GrpoConfig(steps=2, prompts_per_step=4, group_size=4, eval_every=2, seed=0),
                                        RunnerConfig(report_to="trackio")), progress=False)
        from trackio.sqlite_storage import SQLiteStorage
        logs = SQLiteStorage.get_logs(project="mrl", run="grpo-seed0")
        print("RESULT", json.dumps({{"rewards": [row["reward"] for row in record.steps],
                          "logged": [[row.get("step"), row.get("A/train/reward")] for row in logs]}}))
    """)
    env = {**os.environ, "TRACKIO_DIR": str(tmp_path / "trackio")}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))[7:])
    logged = [(step, value) for step, value in result["logged"] if value is not None]
    assert [step for step, _ in logged] == [1, 2]
    assert [value for _, value in logged] == pytest.approx(result["rewards"], rel=1e-6)
    assert any((tmp_path / "trackio").rglob("*.db"))


def wandb_records(path):
    """The records of a W&B run file (run-<id>.wandb): a 7-byte header, then LevelDB's log format (32 KiB blocks;
    each chunk a 4-byte checksum, a 2-byte length and a type: 1 whole, 2 first, 3 middle, 4 last) of protobuf
    Records, read with W&B's own message class."""
    from wandb.proto.wandb_internal_pb2 import Record

    data, pos, pending, block = path.read_bytes(), 7, b"", 32768
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        if block - pos % block < 7:   # a block's tail too short for a chunk header is padding
            pos += block - pos % block
            continue
        length, kind = int.from_bytes(data[pos + 4:pos + 6], "little"), data[pos + 6]
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            record = Record()
            record.ParseFromString(pending)
            yield record


@pytest.mark.slow
def test_wandb_stores_the_run_offline(tiny_zoo_paths, tmp_path):
    """W&B in offline mode in its own process (it keeps a global current run), its files under logging_dir, read
    back from W&B's own run file."""
    pytest.importorskip("wandb")
    script = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(os.path.dirname(__file__))!r})
        from testsupport import TINY_TASK, run_of
        from mrl.core.config import GrpoConfig, RunnerConfig, TaskConfig
        from mrl.core.probes import probe_config
        from mrl.runtime.runner import run_concurrent
        record = run_concurrent(run_of({{"A": {tiny_zoo_paths["A"]!r}}}, TaskConfig(**TINY_TASK),
                                        GrpoConfig(steps=2, prompts_per_step=4, group_size=4, eval_every=2, seed=0),
                                        RunnerConfig(report_to="wandb", logging_dir={str(tmp_path / "wandb")!r}),
                                        probe=probe_config("grpo")), progress=False)
        print("RESULT", json.dumps([row["reward"] for row in record.steps]))
    """)
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rewards = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))[7:])
    [run_file] = (tmp_path / "wandb").rglob("offline-run-*/run-*.wandb")
    records = list(wandb_records(run_file))
    [run] = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert run.display_name == "grpo-seed0" and "grpo" in {item.key for item in run.config.update}
    history = [{item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in r.history.item}
               for r in records if r.WhichOneof("record_type") == "history"]
    logged = [(row["_step"], row["A/train/reward"]) for row in history if "A/train/reward" in row]
    assert [step for step, _ in logged] == [1, 2]
    assert [value for _, value in logged] == pytest.approx(rewards, rel=1e-6)
    assert [row["_step"] for row in history if "A/eval/held-out/mean" in row] == [0, 2]


def test_notebook_table_keeps_the_chosen_columns(capsys):
    table = NotebookTable(["A/probe/rescue_size", "B/probe/rescue_size"])
    table.log({"A/probe/rescue_size": 3.0, "A/train/loss": 0.1}, 1)
    table.log({"A/train/loss": 0.2}, 2)  # nothing chosen: no row
    table.log({"A/probe/rescue_size": 1.0, "B/probe/rescue_size": 2.0}, 3)
    frame = table.frame()
    assert list(frame.index) == [1, 3]
    assert frame.loc[3, "B/probe/rescue_size"] == 2.0
    assert "rescue_size" in capsys.readouterr().out  # outside IPython each row is printed


def test_notebook_plot_draws_one_panel_per_metric_and_one_line_per_policy():
    import matplotlib.pyplot as plt

    plot = NotebookPlot(["train/reward", "probe/rescue_size"], policies=["A", "B"])
    plot.log({"A/train/reward": 0.1, "B/train/reward": 0.2, "A/probe/rescue_size": 3.0}, 1)
    plot.log({"A/train/loss": 0.2}, 2)  # nothing chosen: no point
    plot.log({"A/train/reward": 0.3, "B/train/reward": 0.1, "A/probe/rescue_size": 1.0}, 3)
    open_before = plt.get_fignums()
    fig = plot.figure()
    reward, rescue = fig.axes
    assert [line.get_label() for line in reward.lines] == ["A", "B"]
    assert list(reward.lines[0].get_xdata()) == [1, 3] and list(reward.lines[0].get_ydata()) == [0.1, 0.3]
    assert [line.get_label() for line in rescue.lines] == ["A"]   # B never logged it
    assert plt.get_fignums() == open_before   # drawn off pyplot: a cell shows it once, nothing stays open


def test_report_to_is_checked():
    with pytest.raises(ConfigError, match="report_to.*wandb"):
        RunnerConfig(report_to="comet")

"""Concurrent runs of n = 3 policies: backends agree, a SIGKILLed run resumes to the same metrics,
a dead worker is detected within the timeout and handled by the failure policy."""
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch

from mrl.actor import PolicyActor
from mrl.concurrent import latest_checkpoint, run_concurrent
from mrl.config import ConcurrentConfig, FamilyConfig, GrpoConfig, ProbeConfig, TaskConfig, WarmupConfig, ZooConfig
from mrl.mwra import WorkerFailed
from mrl.zoo import build_zoo

TASK = TaskConfig(max_operand=9, test_per_skill=10, pool_per_skill=5, leak_n=10)
GRPO = GrpoConfig(steps=6, prompts_per_step=4, group_size=4, lr=3e-4, eval_every=3, seed=0)
SMALL = dict(d_model=64, n_layers=2, n_heads=2, n_kv_heads=1, d_ff=128)


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    mix = {"S1": 0.34, "S2": 0.33, "S3": 0.33}
    families = [FamilyConfig(name="A", arch="gpt2", tokenizer="bpe", **SMALL, warmup_mix=mix),
                FamilyConfig(name="B", arch="llama", tokenizer="unigram", vocab_size=40, **SMALL, warmup_mix=mix),
                FamilyConfig(name="C", arch="qwen2", tokenizer="wordpiece", vocab_size=60, **SMALL, warmup_mix=mix)]
    zoo = build_zoo(TASK, ZooConfig(families=families, warmup=WarmupConfig(steps=150, batch_size=64, lr_warmup_steps=10),
                                    workers=2), root=tmp_path_factory.mktemp("zoo"), progress=False)
    return {name: str(policy.path) for name, policy in zoo.items()}


def metrics(record):
    return ([{k: v for k, v in row.items() if not k.endswith("seconds")} for row in record.steps], record.evals)


@pytest.mark.slow
def test_inline_run_of_three_policies_publishes_experience(paths):
    record = run_concurrent(paths, TASK, GRPO, ConcurrentConfig(), progress=False)
    assert {row["policy"] for row in record.steps} == {"A", "B", "C"} and len(record.steps) == 3 * GRPO.steps
    assert record.counters["accepted/rollout"] == 3 * GRPO.steps * GRPO.prompts_per_step * GRPO.group_size
    assert record.counters["accepted/group_stats"] == 3 * GRPO.steps * GRPO.prompts_per_step
    assert record.counters.get("rejected", 0) == 0
    assert sum(row["active_sequences"] for row in record.steps) > 0  # real updates happened
    assert record.counters["accepted/success"] > 0
    assert {(row["policy"], row["step"]) for row in record.evals if row["skill"] == "S1"} == \
        {(p, s) for p in "ABC" for s in (0, 3, 6)}
    assert {row["worker"] for row in record.timeline} == {"A", "B", "C"}


@pytest.mark.slow
def test_process_backend_equals_inline(paths):
    inline = run_concurrent(paths, TASK, GRPO, ConcurrentConfig(backend="inline"), progress=False)
    spawned = run_concurrent(paths, TASK, GRPO, ConcurrentConfig(backend="process", step_timeout=120),
                             progress=False)
    assert metrics(inline) == metrics(spawned)


RUN = """
import sys
from mrl.concurrent import run_concurrent
from mrl.config import ConcurrentConfig, GrpoConfig, TaskConfig
paths = {paths!r}
record = run_concurrent(paths, TaskConfig(**{task!r}), GrpoConfig(**{grpo!r}),
                        ConcurrentConfig(checkpoint_every=2), checkpoint_dir=sys.argv[1], resume=True, progress=False)
"""


@pytest.mark.slow
def test_sigkilled_run_resumes_to_the_uninterrupted_metrics(paths, tmp_path):
    grpo = GrpoConfig(**{**GRPO.__dict__, "steps": 40, "eval_every": 10})
    script = tmp_path / "run.py"
    script.write_text(RUN.format(paths=paths, task=TASK.__dict__, grpo=grpo.__dict__))
    ckpt = tmp_path / "ckpt"
    process = subprocess.Popen([sys.executable, str(script), str(ckpt)])
    deadline = time.monotonic() + 300
    while latest_checkpoint(ckpt) is None or latest_checkpoint(ckpt).name < "step-000004":
        assert process.poll() is None and time.monotonic() < deadline, "the run ended before it could be killed"
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    killed_at = latest_checkpoint(ckpt).name
    assert killed_at < "step-000040"
    resumed = run_concurrent(paths, TASK, grpo, ConcurrentConfig(checkpoint_every=2), checkpoint_dir=ckpt,
                             resume=True, progress=False)
    assert any(e["event"].startswith("resumed from") for e in resumed.events)
    uninterrupted = run_concurrent(paths, TASK, grpo, ConcurrentConfig(), progress=False)
    assert metrics(resumed) == metrics(uninterrupted)


class CrashingActor(PolicyActor):
    """Worker B dies (SIGKILL of its own process) in the rollout of step 3."""

    def rollout(self, step, problems):
        if self.name == "B" and step == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        return super().rollout(step, problems)


@pytest.mark.slow
def test_killed_worker_fails_the_run_by_name_and_keeps_the_checkpoint(paths, tmp_path):
    cfg = ConcurrentConfig(backend="process", step_timeout=60, failure_policy="fail", checkpoint_every=2)
    start = time.monotonic()
    with pytest.raises(WorkerFailed, match="worker 'B' failed: its process died"):
        run_concurrent(paths, TASK, GRPO, cfg, checkpoint_dir=tmp_path, progress=False, actor_cls=CrashingActor)
    assert time.monotonic() - start < 60
    assert latest_checkpoint(tmp_path).name == "step-000002"


@pytest.mark.slow
def test_killed_worker_is_dropped_with_continue(paths):
    cfg = ConcurrentConfig(backend="process", step_timeout=60, failure_policy="continue")
    record = run_concurrent(paths, TASK, GRPO, cfg, progress=False, actor_cls=CrashingActor)
    steps_of = {p: [r["step"] for r in record.steps if r["policy"] == p] for p in "ABC"}
    assert steps_of["A"] == steps_of["C"] == list(range(1, GRPO.steps + 1))
    assert steps_of["B"] == [1, 2]
    assert any("dropped B" in e["event"] for e in record.events)


class HangingActor(PolicyActor):
    def update(self, step, peer_records=None):
        if self.name == "C" and step == 2:
            time.sleep(3600)
        return super().update(step, peer_records)


@pytest.mark.slow
def test_hung_worker_misses_the_deadline(paths):
    cfg = ConcurrentConfig(backend="process", step_timeout=5, failure_policy="fail")
    start = time.monotonic()
    with pytest.raises(WorkerFailed, match="worker 'C' failed: no answer to update within 5.0 s"):
        run_concurrent(paths, TASK, GRPO, cfg, progress=False, actor_cls=HangingActor)
    assert time.monotonic() - start < 60


@pytest.mark.slow
def test_ray_backend_equals_inline_and_detects_a_dead_actor(paths):
    pytest.importorskip("ray")
    inline = run_concurrent(paths, TASK, GRPO, ConcurrentConfig(backend="inline"), progress=False)
    on_ray = run_concurrent(paths, TASK, GRPO, ConcurrentConfig(backend="ray", step_timeout=120), progress=False)
    assert metrics(inline) == metrics(on_ray)
    start = time.monotonic()
    with pytest.raises(WorkerFailed, match="worker 'B' failed: its actor died"):
        run_concurrent(paths, TASK, GRPO, ConcurrentConfig(backend="ray", step_timeout=60), progress=False,
                       actor_cls=CrashingActor)
    assert time.monotonic() - start < 120


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["inline", "process"])
def test_async_clock_bounds_the_lead_and_matches_sync(paths, backend, tmp_path):
    """With probe none each policy's trajectory is its own: async must give the sync metrics, and no
    worker ever starts a step more than `staleness` ahead of the slowest."""
    sync = run_concurrent(paths, TASK, GRPO, ConcurrentConfig(), progress=False)
    cfg = ConcurrentConfig(backend=backend, mode="async", staleness=1, checkpoint_every=3, step_timeout=120)
    fast = run_concurrent(paths, TASK, GRPO, cfg, checkpoint_dir=tmp_path, progress=False)
    leads = [e["lead"] for e in fast.events if e["event"].startswith("dispatch")]
    assert len(leads) == 3 * GRPO.steps and max(leads) <= 1
    key = lambda rows: sorted(rows, key=lambda r: (r["step"], r["policy"]))  # noqa: E731
    assert key(metrics(fast)[0]) == key(metrics(sync)[0])
    assert sorted(fast.evals, key=lambda r: (r["step"], r["policy"], r["split"], r["skill"])) == \
        sorted(sync.evals, key=lambda r: (r["step"], r["policy"], r["split"], r["skill"]))
    assert latest_checkpoint(tmp_path).name == "step-000006"


class BadPeerActor(PolicyActor):
    """Worker C also publishes malformed and forged experience every step."""

    def rollout(self, step, problems):
        out = super().rollout(step, problems)
        if self.name == "C":
            from mrl.see import Rollout, Success

            good = next(r for r in out["records"] if isinstance(r, Rollout))
            out["records"] += [
                Rollout(**{**good.__dict__, "reward": float("nan")}),
                Rollout(**{**good.__dict__, "version": step + 5}),
                Rollout(**{**good.__dict__, "token_ids": [10**6] * len(good.token_ids)}),
                Rollout(**{**good.__dict__, "policy_id": "Mallory"}),
                Success("C", step - 1, problems[0].pid, "not a number", "arith-integer"),  # well-formed forgery
            ]
        return out


@pytest.mark.slow
def test_bad_peer_records_are_rejected_and_the_run_goes_on(paths):
    clean = run_concurrent(paths, TASK, GRPO, ConcurrentConfig(), progress=False)
    record = run_concurrent(paths, TASK, GRPO, ConcurrentConfig(), progress=False, actor_cls=BadPeerActor)
    assert record.counters["rejected/non_finite"] == GRPO.steps
    assert record.counters["rejected/future_version"] == GRPO.steps
    assert record.counters["rejected/out_of_vocab"] == GRPO.steps
    assert record.counters["rejected/unknown_policy"] == GRPO.steps
    assert metrics(record) == metrics(clean)  # nothing malformed reached any policy


def test_latest_checkpoint_ignores_half_written_folders(tmp_path):
    (tmp_path / "step-000004").mkdir()
    (tmp_path / "step-000004" / "state.pt").write_bytes(b"complete")
    (tmp_path / "step-000006.tmp").mkdir()  # a save interrupted by SIGKILL
    (tmp_path / "step-000006.tmp" / "state.pt").write_bytes(b"trunc")
    (tmp_path / "step-000008").mkdir()  # no state.pt yet
    assert latest_checkpoint(tmp_path).name == "step-000004"


@pytest.mark.slow
@pytest.mark.parametrize("probe", ["prp", "prp_naive", "xgrpo", "sgt", "hacpo", "naive"])
def test_sharing_probes_use_their_peers_across_tokenizers(paths, probe):
    """n = 3 families with three tokenizers: every probe receives its peers' records through SEE and THL."""
    grpo = GrpoConfig(steps=3, prompts_per_step=4, group_size=4, lr=3e-4, eval_every=3, seed=0)
    record = run_concurrent(paths, TASK, grpo, ConcurrentConfig(), progress=False, probe_cfg=ProbeConfig(name=probe))
    rows = record.steps
    assert len(rows) == 9
    if probe.startswith("prp") or probe in ("hacpo", "naive"):
        # two peers x P x G at least (a prompt drawn twice in a step pools both draws' peer samples), none lost
        assert all(row["peer_samples"] >= 2 * 4 * 4 for row in rows)
        assert sum(row["thl_failed"] for row in rows) == 0
    if probe == "xgrpo":
        assert all(row["prompts_without_peer_stats"] == 0 for row in rows)
        assert any(row["baseline_shift"] > 0 for row in rows)
    if probe == "sgt":
        assert all(row["rescue_size"] <= row["rescue_candidates"] for row in rows)
    again = run_concurrent(paths, TASK, grpo, ConcurrentConfig(), progress=False, probe_cfg=ProbeConfig(name=probe))
    assert metrics(again) == metrics(record)


def test_async_mode_refuses_a_probe_that_shares(paths):
    with pytest.raises(ValueError, match="mode='async'"):
        run_concurrent(paths, TASK, GRPO, ConcurrentConfig(mode="async"), progress=False,
                       probe_cfg=ProbeConfig(name="sgt"))


def test_hacpo_resumes_with_its_capability_tracker(paths, tmp_path):
    """The tracker's rolling rates travel in the checkpoint: a run resumed at step 2 ends like an uninterrupted one."""
    grpo = GrpoConfig(steps=4, prompts_per_step=4, group_size=4, lr=3e-4, eval_every=4, seed=0)
    probe = ProbeConfig(name="hacpo", capability_window=3)
    two = dict(list(paths.items())[:2])
    whole = run_concurrent(two, TASK, grpo, ConcurrentConfig(checkpoint_every=2), checkpoint_dir=tmp_path / "a",
                           progress=False, probe_cfg=probe)
    state = torch.load(latest_checkpoint(tmp_path / "a") / "state.pt", weights_only=False)
    assert state["workers"]["A"]["probe_state"]["capability"].updates == 4
    shutil.rmtree(tmp_path / "a" / "step-000004")
    resumed = run_concurrent(two, TASK, grpo, ConcurrentConfig(checkpoint_every=2), checkpoint_dir=tmp_path / "a",
                             resume=True, progress=False, probe_cfg=probe)
    assert metrics(resumed) == metrics(whole)
    assert any(row.get("omega_from_B", 1.0) != 1.0 for row in whole.steps if row["policy"] == "A")


def test_gspo_x2_samples_twice_the_rollouts(paths):
    grpo = GrpoConfig(steps=1, prompts_per_step=4, group_size=4, lr=3e-4, eval_every=1, seed=0)
    two = dict(list(paths.items())[:2])
    single = run_concurrent(two, TASK, grpo, ConcurrentConfig(), progress=False, probe_cfg=ProbeConfig(name="gspo"))
    double = run_concurrent(two, TASK, grpo, ConcurrentConfig(), progress=False, probe_cfg=ProbeConfig(name="gspo_x2"))
    assert max(r["rollouts"] for r in double.evals) == 2 * max(r["rollouts"] for r in single.evals) == 32

"""The runner on n = 1 and n = 3 policies: the grpo probe on one policy is the independent GRPO loop, beta > 0
runs, a probe added in one file runs, backends agree (inline and process here; Ray in tests/test_user_probe.py, whose
every-backend test holds make test's one local Ray start), a SIGKILLed run resumes to the same metrics, a dead
worker is detected within the timeout and handled by the failure policy."""
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch

from mrl.runtime.actor import PolicyActor, policy_optimizer
from testsupport import TINY_TASK, CrashingActor, metrics, run_of
from mrl.core.batch import Decoding, completion_texts, encode_prompts, score
from mrl.core.config import ConfigError, GrpoConfig, RunnerConfig, TaskConfig
from mrl.core.grpo import Surrogate, group_advantages, policy_loss
from mrl.core.probes import probe_config
from mrl.core.seeding import step_generator, step_prompts
from mrl.core.tasks import make_task
from mrl.runtime import checkpoint
from mrl.runtime.evaluation import skill_accuracy
from mrl.runtime.mwra import WorkerFailed
from mrl.runtime.rollout import completion_logprobs, sample_completions
from mrl.runtime.runner import run_concurrent
from mrl.runtime.zoo import load_policy

TASK = TaskConfig(**TINY_TASK)
GRPO = GrpoConfig(steps=6, prompts_per_step=4, group_size=4, lr=3e-4, eval_every=3, seed=0)


@pytest.fixture(scope="module")
def paths(tiny_zoo_paths):
    return tiny_zoo_paths


@pytest.fixture(scope="module")
def inline_run(paths):
    """The three policies' GRPO run on the inline backend, in step (the reference the other backends and the async
    clock must equal): computed once for the tests that read it."""
    return run_concurrent(run_of(paths, TASK, GRPO, RunnerConfig()), progress=False)


# --- one path for every experiment ----------------------------------------------------------------------

def independent_grpo(name: str, path: str, task_cfg: TaskConfig, cfg: GrpoConfig) -> tuple[list, list]:
    """Independent GRPO written out from the primitives, as the former separate path ran it (sample with the
    (seed, step, policy) generator, score, group advantages, TRL-equal loss on the rows with A != 0, Adam):
    the reference the runner's grpo probe on one policy must reproduce exactly."""
    policy, task = load_policy(path), make_task(task_cfg)
    model, tokenizer, g = policy.model, policy.tokenizer, cfg.group_size
    optimizer = policy_optimizer(model.parameters(), cfg.lr)
    steps, evals = [], []

    def evaluate(step):
        evals.extend({"policy": name, "step": step, **row, "rollouts": step * cfg.prompts_per_step * g}
                     for row in skill_accuracy(model, tokenizer, task, cfg.max_new_tokens))

    evaluate(0)
    for step in range(1, cfg.steps + 1):
        problems = step_prompts(task, cfg.seed, step, cfg.prompts_per_step)
        prompt_ids, prompt_mask = encode_prompts(tokenizer, [p.prompt for p in problems])
        prompt_ids, prompt_mask = prompt_ids.repeat_interleave(g, 0), prompt_mask.repeat_interleave(g, 0)
        model.eval()
        decoding = Decoding(max_new_tokens=cfg.max_new_tokens, eos_id=tokenizer.eos_token_id,
                            pad_id=tokenizer.pad_token_id)
        ids, mask, _ = sample_completions(model, prompt_ids, prompt_mask, decoding,
                                          step_generator(cfg.seed, step, name))
        rewards = score(completion_texts(tokenizer, ids, mask, tokenizer.eos_token_id),
                        [p for p in problems for _ in range(g)], task.verify)
        advantages = group_advantages(rewards, g, cfg.scale)
        active = (advantages != 0).nonzero().squeeze(-1)
        loss_value = grad_norm = 0.0
        if active.numel():
            model.train()
            logp = torch.zeros(ids.shape).index_put((active,), completion_logprobs(
                model, prompt_ids[active], prompt_mask[active], ids[active], mask[active]))
            surrogate = Surrogate(level=cfg.level, loss_type=cfg.loss_type, eps_low=cfg.eps_low, eps_high=cfg.eps_high,
                                  max_completion_length=cfg.max_new_tokens)
            loss, _ = policy_loss(logp, logp.detach(), advantages, mask, surrogate)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            loss_value = loss.item()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip).item()
            optimizer.step()
        steps.append({"policy": name, "step": step, "reward": rewards.mean().item(), "loss": loss_value,
                      "grad_norm": grad_norm, "active_sequences": int(active.numel())})
        if step % cfg.eval_every == 0 or step == cfg.steps:
            evaluate(step)
    return steps, evals


@pytest.mark.slow
def test_grpo_probe_on_one_policy_is_the_independent_grpo_loop(paths):
    cfg = GrpoConfig(steps=5, prompts_per_step=4, group_size=4, lr=3e-4, eval_every=2, seed=3, engine="hf")
    record = run_concurrent(run_of({"B": paths["B"]}, TASK, cfg, RunnerConfig()), progress=False)
    want_steps, want_evals = independent_grpo("B", paths["B"], TASK, cfg)
    got_steps = [{k: row[k] for k in want_steps[0]} for row in record.steps]
    assert got_steps == want_steps and sum(row["active_sequences"] for row in got_steps) > 0
    assert sorted(record.evals, key=str) == sorted(want_evals, key=str)
    assert all(0 < row["completion_tokens"] <= 4 * 4 * cfg.max_new_tokens for row in record.steps)


@pytest.mark.slow
def test_grpo_raises_reward_on_a_small_pool(paths):
    """80 steps of independent GRPO on a 5-prompt pool per skill: the training reward rises."""
    cfg = GrpoConfig(steps=80, prompts_per_step=8, group_size=8, lr=3e-4, eval_every=80, seed=0)
    record = run_concurrent(run_of({"A": paths["A"]}, TASK, cfg, RunnerConfig()), progress=False)
    reward = [row["reward"] for row in record.steps]
    assert sum(reward[-10:]) / 10 > sum(reward[:10]) / 10 + 0.1, reward


def test_beta_runs_on_the_runner_with_the_actors_reference_model(paths):
    """beta > 0: the actor holds a frozen copy of the starting policy; the k3 term enters the loss (grpo, and
    HACPO's own samples), the reported KL starts at 0 (the policy is its reference) and grows."""
    cfg = GrpoConfig(steps=3, prompts_per_step=4, group_size=4, lr=3e-3, eval_every=3, seed=0, beta=0.5)
    one = {"A": paths["A"]}
    record = run_concurrent(run_of(one, TASK, cfg, RunnerConfig()), progress=False)
    kl = [row["kl"] for row in record.steps]
    assert kl[0] == pytest.approx(0.0, abs=1e-6) and kl[-1] > 0
    without = run_concurrent(run_of(one, TASK, dataclasses.replace(cfg, beta=0.0), RunnerConfig()), progress=False)
    assert [row["loss"] for row in record.steps][1:] != [row["loss"] for row in without.steps][1:]
    hacpo = run_concurrent(run_of(one, TASK, cfg, RunnerConfig(), probe=probe_config("hacpo")), progress=False)
    assert all(row["active_sequences"] == 16 for row in hacpo.steps)   # beta > 0: every own sequence is forwarded


def test_a_probe_added_in_one_file_runs(paths):
    """A toy probe registered with its own config (here, in this test file) runs through the runner: it reads the
    peers' GroupStats and its knob, and the actor steps the optimizer on its loss."""
    from mrl.core.probes import PeerView, ProbeConfig, ProbeOutput, register_probe
    from mrl.core.probes.terms import own_grpo_loss
    from mrl.core.batch import Learner, RolloutBatch

    @dataclasses.dataclass(frozen=True)
    class ToyConfig(ProbeConfig):
        scale: float = 2.0
        """multiplies the GRPO advantages"""

    @register_probe("toy_scaled_grpo", config=ToyConfig, kinds=("group_stats",))
    def toy_loss(batch: RolloutBatch, peers: PeerView, learner: Learner, cfg: ToyConfig) -> ProbeOutput:
        advantages = cfg.scale * group_advantages(batch.rewards, batch.group_size)
        loss, active, _ = own_grpo_loss(batch, learner, advantages)
        covered = sum(bool(peers.group_stats.get(p.pid)) for p in batch.problems)
        return ProbeOutput.single(loss, active, {"prompts_with_peer_stats": covered})

    cfg = GrpoConfig(steps=2, prompts_per_step=4, group_size=4, lr=3e-4, eval_every=2, seed=0)
    two = {name: paths[name] for name in ("A", "B")}
    record = run_concurrent(run_of(two, TASK, cfg, RunnerConfig(), probe=probe_config("toy_scaled_grpo", scale=3.0)),
                            progress=False)
    assert len(record.steps) == 4 and all(row["prompts_with_peer_stats"] == 4 for row in record.steps)
    assert any(row["grad_norm"] > 0 for row in record.steps)


def test_a_probe_config_of_the_wrong_class_is_refused_before_the_run(paths):
    from mrl.core.probes import ProbeConfig

    with pytest.raises(ConfigError, match=r"probe 'prp' takes a PrpConfig, got ProbeConfig.*probe_config\('prp'"):
        run_concurrent(run_of(paths, TASK, GRPO, RunnerConfig(), probe=ProbeConfig(name="prp")), progress=False)


def test_a_pooling_probe_with_another_aggregation_is_refused_before_the_run(paths):
    with pytest.raises(ConfigError, match="loss_type = 'dapo' is not allowed with probe 'prp'"):
        run_concurrent(run_of(paths, TASK, dataclasses.replace(GRPO, loss_type="dapo"), RunnerConfig(),
                               probe=probe_config("prp")), progress=False)


@pytest.mark.slow
def test_inline_run_of_three_policies_publishes_experience(inline_run):
    record = inline_run
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
def test_process_backend_equals_inline(paths, inline_run):
    spawned = run_concurrent(run_of(paths, TASK, GRPO, RunnerConfig(backend="process", step_timeout=120)),
                             progress=False)
    assert metrics(inline_run) == metrics(spawned)


RUN = """
import sys
from mrl.core.config import RunnerConfig, GrpoConfig, TaskConfig
from mrl.core.probes import probe_config
from mrl.core.run_config import RunConfig
from mrl.runtime.runner import run_concurrent
from mrl.runtime.spec import Run
grpo = GrpoConfig(**{grpo!r})
config = RunConfig(task=TaskConfig(**{task!r}), grpo=grpo, runner=RunnerConfig(checkpoint_every=2))
run = Run(config, {paths!r}, probe_config("grpo"), grpo.seed, grpo.steps)
record = run_concurrent(run, checkpoint_dir=sys.argv[1], resume=True, progress=False)
"""


@pytest.mark.slow
def test_sigkilled_run_resumes_to_the_uninterrupted_metrics(paths, tmp_path):
    grpo = GrpoConfig(**{**GRPO.__dict__, "steps": 40, "eval_every": 10})
    script = tmp_path / "run.py"
    script.write_text(RUN.format(paths=paths, task=TASK.__dict__, grpo=grpo.__dict__))
    ckpt = tmp_path / "ckpt"
    process = subprocess.Popen([sys.executable, str(script), str(ckpt)])
    deadline = time.monotonic() + 300
    while checkpoint.latest(ckpt) is None or checkpoint.latest(ckpt).name < "step-000004":
        assert process.poll() is None and time.monotonic() < deadline, "the run ended before it could be killed"
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    killed_at = checkpoint.latest(ckpt).name
    assert killed_at < "step-000040"
    resumed = run_concurrent(run_of(paths, TASK, grpo, RunnerConfig(checkpoint_every=2)), checkpoint_dir=ckpt,
                             resume=True, progress=False)
    assert any(e["event"].startswith("resumed from") for e in resumed.events)
    uninterrupted = run_concurrent(run_of(paths, TASK, grpo, RunnerConfig()), progress=False)
    assert metrics(resumed) == metrics(uninterrupted)


@pytest.mark.slow
def test_killed_worker_fails_the_run_by_name_and_keeps_the_checkpoint(paths, tmp_path):
    cfg = RunnerConfig(backend="process", step_timeout=60, failure_policy="fail", checkpoint_every=2)
    start = time.monotonic()
    with pytest.raises(WorkerFailed, match="worker 'B' failed: its process died"):
        run_concurrent(run_of(paths, TASK, GRPO, cfg), actor_cls=CrashingActor, checkpoint_dir=tmp_path,
                       progress=False)
    assert time.monotonic() - start < 60
    assert checkpoint.latest(tmp_path).name == "step-000002"


@pytest.mark.slow
def test_killed_worker_is_dropped_with_continue(paths):
    cfg = RunnerConfig(backend="process", step_timeout=60, failure_policy="continue")
    record = run_concurrent(run_of(paths, TASK, GRPO, cfg), actor_cls=CrashingActor, progress=False)
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
    cfg = RunnerConfig(backend="process", step_timeout=5, failure_policy="fail")
    start = time.monotonic()
    with pytest.raises(WorkerFailed, match="worker 'C' failed: no answer to update within 5.0 s"):
        run_concurrent(run_of(paths, TASK, GRPO, cfg), actor_cls=HangingActor, progress=False)
    assert time.monotonic() - start < 60


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["inline", "process"])
def test_async_clock_bounds_the_lead_and_matches_sync(paths, backend, tmp_path, inline_run):
    """With probe none each policy's trajectory is its own: async must give the sync metrics, and no
    worker ever starts a step more than `staleness` ahead of the slowest."""
    sync = inline_run
    cfg = RunnerConfig(backend=backend, mode="async", staleness=1, checkpoint_every=3, step_timeout=120)
    fast = run_concurrent(run_of(paths, TASK, GRPO, cfg), checkpoint_dir=tmp_path, progress=False)
    leads = [e["lead"] for e in fast.events if e["event"].startswith("dispatch")]
    assert len(leads) == 3 * GRPO.steps and max(leads) <= 1
    key = lambda rows: sorted(rows, key=lambda r: (r["step"], r["policy"]))  # noqa: E731
    assert key(metrics(fast)[0]) == key(metrics(sync)[0])
    assert sorted(fast.evals, key=lambda r: (r["step"], r["policy"], r["split"], r["skill"])) == \
        sorted(sync.evals, key=lambda r: (r["step"], r["policy"], r["split"], r["skill"]))
    assert checkpoint.latest(tmp_path).name == "step-000006"


class BadPeerActor(PolicyActor):
    """Worker C also publishes malformed and forged experience every step."""

    def rollout(self, step, problems):
        out = super().rollout(step, problems)
        if self.name == "C":
            from mrl.core.see import Rollout, Success

            good = next(r for r in out.records if isinstance(r, Rollout))
            out.records += [
                Rollout(**{**good.__dict__, "reward": float("nan")}),
                Rollout(**{**good.__dict__, "version": step + 5}),
                Rollout(**{**good.__dict__, "token_ids": [10**6] * len(good.token_ids)}),
                Rollout(**{**good.__dict__, "policy_id": "Mallory"}),
                Success("C", step - 1, problems[0].pid, "not a number", "arith-integer"),  # well-formed forgery
            ]
        return out


@pytest.mark.slow
def test_bad_peer_records_are_rejected_and_the_run_goes_on(paths):
    clean = run_concurrent(run_of(paths, TASK, GRPO, RunnerConfig()), progress=False)
    record = run_concurrent(run_of(paths, TASK, GRPO, RunnerConfig()), actor_cls=BadPeerActor, progress=False)
    assert record.counters["rejected/non_finite"] == GRPO.steps
    assert record.counters["rejected/future_version"] == GRPO.steps
    assert record.counters["rejected/out_of_vocab"] == GRPO.steps
    assert record.counters["rejected/unknown_policy"] == GRPO.steps
    assert metrics(record) == metrics(clean)  # nothing malformed reached any policy


@pytest.mark.slow
@pytest.mark.parametrize("probe", ["prp", "prp_naive", "xgrpo", "sgt", "hacpo", "naive"])
def test_sharing_probes_use_their_peers_across_tokenizers(paths, probe):
    """n = 3 families with three tokenizers: every probe receives its peers' records through SEE and THL."""
    grpo = GrpoConfig(steps=3, prompts_per_step=4, group_size=4, lr=3e-4, eval_every=3, seed=0)
    record = run_concurrent(run_of(paths, TASK, grpo, RunnerConfig(), probe=probe_config(probe)), progress=False)
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
    again = run_concurrent(run_of(paths, TASK, grpo, RunnerConfig(), probe=probe_config(probe)), progress=False)
    assert metrics(again) == metrics(record)


@pytest.mark.slow
@pytest.mark.parametrize("probe", ["sgt", "prp"])
def test_async_sharing_bounds_and_records_the_staleness_of_every_record_and_is_deterministic(paths, probe):
    """Three policies share under the async clock (each may run one step ahead): every record a learner receives is
    within max_staleness of its step (records of a peer running ahead included), its staleness is in the step row,
    records do flow, and the inline backend's fixed schedule gives the same run twice."""
    cfg = RunnerConfig(mode="async", staleness=1, max_staleness=3)
    runs = [run_concurrent(run_of(paths, TASK, GRPO, cfg, probe=probe_config(probe)), progress=False)
            for _ in range(2)]
    assert metrics(runs[0]) == metrics(runs[1]) and runs[0].evals == runs[1].evals
    assert runs[0].events == runs[1].events
    counts = [{int(k): v for k, v in json.loads(row["peer_staleness"]).items()} for row in runs[0].steps]
    assert len(counts) == 3 * GRPO.steps
    assert all(k <= cfg.max_staleness for c in counts for k in c)
    assert sum(sum(c.values()) for c in counts) > 0
    assert len({k for c in counts for k in c}) > 1          # records of several ages were handed over
    leads = [e["lead"] for e in runs[0].events if e["event"].startswith("dispatch")]
    assert max(leads) <= cfg.staleness


def test_hacpo_resumes_with_its_capability_tracker(paths, tmp_path):
    """The tracker's rolling rates travel in the checkpoint: a run resumed at step 2 ends like an uninterrupted one."""
    grpo = GrpoConfig(steps=4, prompts_per_step=4, group_size=4, lr=3e-4, eval_every=4, seed=0)
    probe = probe_config("hacpo", capability_window=3)
    two = dict(list(paths.items())[:2])
    whole = run_concurrent(run_of(two, TASK, grpo, RunnerConfig(checkpoint_every=2), probe=probe),
                           checkpoint_dir=tmp_path / "a", progress=False)
    state = torch.load(checkpoint.latest(tmp_path / "a") / "state.pt", weights_only=False)
    assert state["workers"]["A"]["probe_state"]["capability"].updates == 4
    shutil.rmtree(tmp_path / "a" / "step-000004")
    resumed = run_concurrent(run_of(two, TASK, grpo, RunnerConfig(checkpoint_every=2), probe=probe),
                             checkpoint_dir=tmp_path / "a", resume=True, progress=False)
    assert metrics(resumed) == metrics(whole)
    assert any(row.get("omega_from_B", 1.0) != 1.0 for row in whole.steps if row["policy"] == "A")


def test_gspo_x2_samples_twice_the_rollouts(paths):
    grpo = GrpoConfig(steps=1, prompts_per_step=4, group_size=4, lr=3e-4, eval_every=1, seed=0)
    two = dict(list(paths.items())[:2])
    single = run_concurrent(run_of(two, TASK, grpo, RunnerConfig(), probe=probe_config("gspo")), progress=False)
    double = run_concurrent(run_of(two, TASK, grpo, RunnerConfig(), probe=probe_config("gspo_x2")), progress=False)
    assert max(r["rollouts"] for r in double.evals) == 2 * max(r["rollouts"] for r in single.evals) == 32


@pytest.mark.slow
def test_packed_runs_give_the_one_at_a_time_results(paths, tmp_path, monkeypatch):
    """A grid run two at a time, each inline in its own process, caches exactly what one run at a time on the
    process backend gives."""
    from mrl.core.run_config import RunConfig
    from mrl.experiments import grid_runs, run_many

    monkeypatch.chdir(tmp_path)            # the run cache goes under this folder's results/
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "mrl").mkdir()
    grpo = GrpoConfig(steps=3, prompts_per_step=4, group_size=4, lr=3e-4, eval_every=3, seed=0)
    frames = {}
    for packed in (1, 2):
        config = RunConfig(task=TASK, grpo=grpo, pairings={"A+B": ["A", "B"]},
                           runner=RunnerConfig(backend="process"), packed_runs=packed)
        runs = grid_runs(config, paths, ["A+B"], ["grpo", "sgt"], [0], 3)
        frames[packed] = run_many(runs, packed, cache=False, progress=False)
        if packed == 2:   # the packed runs were cached: read back, they hold the same numbers
            frames["cached"] = run_many(runs, packed, progress=False)
    drop = lambda df: df.drop(columns=[c for c in df.columns if c.endswith("seconds")])  # noqa: E731
    for packed in (2, "cached"):
        assert drop(frames[packed][0]).equals(drop(frames[1][0])) and frames[packed][1].equals(frames[1][1])


def dying_job(job):
    """A packed run whose process is killed (seed 1), beside one that finishes (seed 0)."""
    run, _ = job
    if run.seed == 1:
        os.kill(os.getpid(), signal.SIGKILL)


def stuck_job(job):
    time.sleep(3600)


@pytest.mark.parametrize("job, error, timeout", [(dying_job, "process died .* seed 1", 60.0),
                                                 (stuck_job, "no packed run finished", 2.0)])
def test_a_packed_run_that_dies_or_hangs_never_hangs_the_grid(job, error, timeout):
    from mrl.core.run_config import RunConfig
    from mrl.experiments.runs import Run, run_packed

    config = RunConfig(task=TASK, grpo=dataclasses.replace(GRPO, steps=1, eval_every=1),
                       runner=RunnerConfig(step_timeout=timeout))
    runs = [Run(config, {"A": "a", "B": "b"}, probe_config("grpo"), seed, 1) for seed in (0, 1)]
    start = time.monotonic()
    with pytest.raises((RuntimeError, TimeoutError), match=error):
        run_packed(runs, 2, progress=False, job=job)
    assert time.monotonic() - start < 120  # the death is seen at once, long before the 60 s x 5 phases deadline


# --- reliability: deadlines everywhere, resume only into the same experiment, damaged checkpoints, the log ----

class SlowCheckpointActor(PolicyActor):
    """Worker C never answers state_dict, or (die=True) dies in it; optionally hangs at start-up or resume."""

    hang_in = "state_dict"

    def _fault(self):
        if self.name == "C":
            if self.hang_in == "die":
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(3600)

    def state_dict(self):
        if self.hang_in in ("state_dict", "die"):
            self._fault()
        return super().state_dict()

    def policy_spec(self):
        if self.hang_in == "policy_spec":
            self._fault()
        return super().policy_spec()

    def load_state_dict(self, state):
        if self.hang_in == "load_state_dict":
            self._fault()
        return super().load_state_dict(state)


def faulty(where: str) -> type:
    return type(f"Faulty_{where}", (SlowCheckpointActor,), {"hang_in": where})


Faulty_state_dict, Faulty_die, Faulty_policy_spec, Faulty_load_state_dict = (
    faulty(w) for w in ("state_dict", "die", "policy_spec", "load_state_dict"))


@pytest.mark.slow
@pytest.mark.parametrize("actor", [Faulty_state_dict, Faulty_policy_spec], ids=["checkpoint", "start-up"])
def test_a_worker_that_never_answers_fails_the_run_within_the_deadline(paths, tmp_path, actor):
    cfg = RunnerConfig(backend="process", step_timeout=5, failure_policy="fail", checkpoint_every=2)
    start = time.monotonic()
    with pytest.raises(WorkerFailed, match=f"worker 'C' failed: .*no answer to {actor.hang_in} within 5.0 s"):
        run_concurrent(run_of(paths, TASK, GRPO, cfg), actor_cls=actor, checkpoint_dir=tmp_path, progress=False)
    assert time.monotonic() - start < 90
    assert checkpoint.latest(tmp_path) is None


@pytest.mark.slow
def test_a_worker_that_hangs_while_resuming_fails_within_the_deadline(paths, tmp_path):
    grpo = dataclasses.replace(GRPO, steps=2)
    run_concurrent(run_of(paths, TASK, grpo, RunnerConfig(checkpoint_every=2)), checkpoint_dir=tmp_path,
                   progress=False)
    cfg = RunnerConfig(backend="process", step_timeout=5, checkpoint_every=2)
    with pytest.raises(WorkerFailed, match="while resuming from step-000002: no answer to load_state_dict"):
        run_concurrent(run_of(paths, TASK, grpo, cfg), actor_cls=Faulty_load_state_dict, checkpoint_dir=tmp_path,
                       resume=True, progress=False)


@pytest.mark.slow
def test_a_worker_dying_while_checkpointing_is_dropped_with_continue(paths, tmp_path):
    cfg = RunnerConfig(backend="process", step_timeout=60, failure_policy="continue", checkpoint_every=2)
    record = run_concurrent(run_of(paths, TASK, GRPO, cfg), actor_cls=Faulty_die, checkpoint_dir=tmp_path,
                            progress=False)
    assert [r["step"] for r in record.steps if r["policy"] == "C"] == [1, 2]
    assert [r["step"] for r in record.steps if r["policy"] == "A"] == list(range(1, GRPO.steps + 1))
    assert any(e["event"].startswith("dropped C: while checkpointing: its process died") for e in record.events)
    state = torch.load(checkpoint.latest(tmp_path) / "state.pt", weights_only=False)
    assert checkpoint.latest(tmp_path).name == "step-000006" and sorted(state["workers"]) == ["A", "B"]


class RaisingCheckpointActor(PolicyActor):
    """Worker C raises in state_dict, the call of a checkpoint's barrier (on the inline backend)."""

    def state_dict(self):
        if self.name == "C":
            raise OSError("no space left on device")
        return super().state_dict()


@pytest.mark.slow
def test_a_worker_dropped_while_checkpointing_leaves_the_async_clock(paths, tmp_path):
    """Async: C is dropped in step 2's checkpoint. A and B go on and the steps after it end: their checkpoints are
    written up to the last step (C's lane, left in the clock's step table, held the count of finished steps at 2)."""
    cfg = RunnerConfig(mode="async", failure_policy="continue", checkpoint_every=2)
    record = run_concurrent(run_of(paths, TASK, GRPO, cfg), actor_cls=RaisingCheckpointActor,
                            checkpoint_dir=tmp_path, progress=False)
    assert any(e["event"].startswith("dropped C: while checkpointing: state_dict raised OSError")
               for e in record.events)
    assert [r["step"] for r in record.steps if r["policy"] == "C"] == [1, 2]
    assert [r["step"] for r in record.steps if r["policy"] == "A"] == list(range(1, GRPO.steps + 1))
    state = torch.load(checkpoint.latest(tmp_path) / "state.pt", weights_only=False)
    assert checkpoint.latest(tmp_path).name == "step-000006" and sorted(state["workers"]) == ["A", "B"]


@pytest.fixture(scope="module")
def two_step_checkpoint(paths, tmp_path_factory):
    folder = tmp_path_factory.mktemp("ckpt")
    two = {k: paths[k] for k in "AB"}
    run_concurrent(run_of(two, TASK, dataclasses.replace(GRPO, steps=4), RunnerConfig(checkpoint_every=2)),
                   checkpoint_dir=folder, progress=False)
    shutil.rmtree(folder / "step-000004")  # as if killed after step 2's checkpoint
    return folder


@pytest.mark.parametrize("change, named", [
    (dict(grpo=dataclasses.replace(GRPO, steps=4, seed=1)), "seed: the checkpoint has 0, this run has 1"),
    (dict(probe=probe_config("sgt")), "probe: the checkpoint has"),
    (dict(grpo=dataclasses.replace(GRPO, steps=10)), "steps: the checkpoint has 4, this run has 10"),
    (dict(policies="AC"), "policies: the checkpoint has"),
])
def test_resuming_another_experiment_is_refused_naming_both_values(paths, two_step_checkpoint, change, named):
    policies = {k: paths[k] for k in change.pop("policies", "AB")}
    grpo = change.pop("grpo", dataclasses.replace(GRPO, steps=4))
    with pytest.raises(ConfigError, match="another run") as err:
        run_concurrent(run_of(policies, TASK, grpo, RunnerConfig(checkpoint_every=2), **change),
                       checkpoint_dir=two_step_checkpoint, resume=True, progress=False)
    assert named in str(err.value)


@pytest.mark.slow
def test_a_damaged_newest_checkpoint_is_skipped_and_the_run_still_ends_as_uninterrupted(paths, tmp_path):
    two = {k: paths[k] for k in "AB"}
    grpo = dataclasses.replace(GRPO, steps=6)
    whole = run_concurrent(run_of(two, TASK, grpo, RunnerConfig(checkpoint_every=2)), checkpoint_dir=tmp_path / "a",
                           progress=False)
    shutil.rmtree(tmp_path / "a" / "step-000006")
    state = tmp_path / "a" / "step-000004" / "state.pt"
    state.write_bytes(state.read_bytes()[:-1000])  # a torn write of the newest one
    with pytest.warns(UserWarning, match="skipped damaged checkpoint step-000004"):
        resumed = run_concurrent(run_of(two, TASK, grpo, RunnerConfig(checkpoint_every=2)),
                                 checkpoint_dir=tmp_path / "a", resume=True, progress=False)
    events = [e["event"] for e in resumed.events]
    assert any(e.startswith("skipped damaged checkpoint step-000004: state.pt does not match") for e in events)
    assert "resumed from step-000002" in events
    assert metrics(resumed) == metrics(whole)


@pytest.mark.slow
def test_a_checkpointed_run_logs_every_accepted_record_once_per_step_into_its_experience_dir(paths, tmp_path):
    from mrl.runtime.experience_log import replay

    two = {k: paths[k] for k in "AB"}
    record = run_concurrent(run_of(two, TASK, GRPO, RunnerConfig(checkpoint_every=3), probe=probe_config("sgt")),
                            checkpoint_dir=tmp_path, experience_dir=tmp_path / "experience", progress=False)
    logged = list(replay(tmp_path / "experience"))
    assert sorted({step for step, _ in logged}) == list(range(1, GRPO.steps + 1))
    accepted = sum(v for k, v in record.counters.items() if k.startswith("accepted/"))
    assert len(logged) == accepted > 0


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_five_families_share_through_every_tokenizer(five_zoo_paths, mode):
    """n = 5: GPT-2 + BPE, Llama + Unigram, Qwen2 + WordPiece, Mistral + characters, GPT-NeoX + BPE; every learner
    receives its four peers' samples through SEE and THL (none lost), sync and async, and the run repeats exactly."""
    grpo = GrpoConfig(steps=2, prompts_per_step=4, group_size=4, lr=3e-4, eval_every=2, seed=0)
    cfg = RunnerConfig(mode=mode, max_staleness=2)
    runs = [run_concurrent(run_of(five_zoo_paths, TASK, grpo, cfg, probe=probe_config("prp")), progress=False)
            for _ in range(2)]
    assert metrics(runs[0]) == metrics(runs[1])
    rows = runs[0].steps
    assert sorted({row["policy"] for row in rows}) == ["A", "B", "C", "D", "E"] and len(rows) == 10
    assert sum(row["thl_failed"] for row in rows) == 0
    if mode == "sync":   # every peer's P x G samples of the step reach every learner
        assert all(row["peer_samples"] >= 4 * 4 * 4 for row in rows)
    else:
        assert sum(row["peer_samples"] for row in rows) > 0

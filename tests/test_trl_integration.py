"""Every probe inside TRL's GRPOTrainer (mrl.integrations.trl, docs/trl.md).

Equality: on the same sampled completions, a probe's loss and gradients through MRLGRPOTrainer equal those of mrl's
actor within 1e-5, for A (GPT-2 + BPE) learning beside B (Llama + Unigram): two tokenizers, the peer's records
crossing through the FileExchange on one side and the runner's Exchange on the other.
"""
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast
from trl import GRPOConfig

from testsupport import TINY_TASK
from mrl.core.batch import completion_texts, score
from mrl.core.config import GrpoConfig, TaskConfig
from mrl.core.probes import PeerView, probe_config
from mrl.core.see import Exchange, PolicySpec
from mrl.core.seeding import step_prompts
from mrl.core.tasks import make_task
from mrl.core.validation import ConfigError
from mrl.integrations.file_exchange import FileExchange
from mrl.runtime.experience_log import ExperienceLogError
from mrl.integrations.trl import MRLGRPOTrainer, MrlSharing, PromptOrderMismatch, check_trl_args, problem_dataset
from mrl.runtime.actor import WorkerSpec, PolicyActor
from mrl.runtime.mwra import WorkerFailed
from mrl.runtime.runner import collect_for

PROBES = ["grpo", "sgt", "prp", "xgrpo", "hacpo"]
P, G, T = 4, 4, 6
TASK = TaskConfig(**TINY_TASK)


def trl_args(tmp_path, **overrides) -> GRPOConfig:
    settings = dict(output_dir=str(tmp_path / "out"), use_cpu=True, bf16=False, report_to="none", disable_tqdm=True,
                    save_strategy="no", per_device_train_batch_size=P * G, num_generations=G,
                    max_completion_length=T, temperature=1.0, learning_rate=1e-4, beta=0.0, epsilon=0.2,
                    loss_type="grpo", max_steps=1, seed=0, activation_checkpointing=False)
    return GRPOConfig(**{**settings, **overrides})


def trainer_for(paths, probe, tmp_path, exchange, micro_batch=0, **args) -> MRLGRPOTrainer:
    tokenizer = PreTrainedTokenizerFast.from_pretrained(paths["A"], padding_side="left")
    sharing = MrlSharing(task=make_task(TASK), probe=probe_config(probe), exchange=exchange,
                         peer_paths=paths, micro_batch=micro_batch)
    return MRLGRPOTrainer(AutoModelForCausalLM.from_pretrained(paths["A"]), trl_args(tmp_path, **args),
                          problem_dataset(make_task(TASK)), tokenizer, sharing=sharing)


def texts_of(actor):
    batch = actor.pending
    return completion_texts(actor.tokenizer, batch.completion_ids, batch.completion_mask, actor.tokenizer.eos_token_id)


def plant_answers(actor, rows: list[int]) -> None:
    """Replace the pending batch's completions at `rows` by the right answer and EOS, as if sampled: ids, mask,
    sampling log-probs and rewards follow."""
    batch = actor.pending
    for row in rows:
        problem = batch.problems[row // batch.group_size]
        ids = actor.tokenizer.encode(problem.answer, add_special_tokens=False) + [actor.tokenizer.eos_token_id]
        batch.completion_ids[row] = actor.tokenizer.pad_token_id
        batch.completion_ids[row, :len(ids)] = torch.tensor(ids)
        batch.completion_mask[row] = 0
        batch.completion_mask[row, :len(ids)] = 1
    batch.sample_logp = batch.completion_mask * actor.scored_logprobs(
        actor.model, batch.prompt_ids, batch.prompt_mask, batch.completion_ids, batch.completion_mask)
    expanded = [p for p in batch.problems for _ in range(batch.group_size)]
    batch.rewards = score(texts_of(actor), expanded, actor.task.verify)
    assert batch.rewards[rows].tolist() == [1.0] * len(rows)


def gradients(model) -> dict:
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("probe,micro_batch", [*((p, 0) for p in PROBES), ("sgt", 5), ("prp", 5)])
def test_a_probe_through_trl_equals_the_actor(probe, micro_batch, tiny_zoo_paths, tmp_path):
    """micro_batch > 0: TRL's training step backpropagates 5 sequences at a time, with the whole batch's gradient."""
    paths = {name: tiny_zoo_paths[name] for name in ("A", "B")}
    grpo = GrpoConfig(prompts_per_step=P, group_size=G, max_new_tokens=T, engine="hf", seed=0)
    actors = {name: PolicyActor(WorkerSpec(name=name, policy_path=path, task=TASK, grpo=grpo,
                                            probe=probe_config(probe), peer_paths=paths))
              for name, path in paths.items()}
    task = make_task(TASK)
    problems = step_prompts(task, 0, 1, P)
    for actor in actors.values():
        actor.rollout(1, problems)
    # the tiny zoo rarely solves a prompt: plant answers, so that A's groups have successes and failures and B's
    # successes rescue A's failed group 1 (SGT), and every probe's peer term acts
    plant_answers(actors["A"], rows=[0, 1, 8, 9, 10])
    plant_answers(actors["B"], rows=[4, 5, 6, 12])
    published = {name: actor.records(actor.pending, texts_of(actor)) for name, actor in actors.items()}
    actor = actors["A"]

    exchange = Exchange(policies={name: PolicySpec(**a.policy_spec()) for name, a in actors.items()})
    exchange.advance(1)
    for name in sorted(published):
        exchange.publish_many(published[name])
    peers = PeerView(**collect_for(exchange, actor.probe.kinds, "A", problems, task, 1, True, at=1),
                     tokenizers=actor.peer_tokenizers)
    assert any(any(records.values()) for records in (peers.rollout, peers.group_stats, peers.success)
               if records) or not actor.probe.kinds, "the peer's records reach the probe"
    actor_output = actor.probe.loss(actor.pending, peers, actor.learner(1), actor.config.probe)
    actor_loss = actor_output.loss(0)
    actor.optimizer.zero_grad()
    actor_loss.backward()
    actor_grads = gradients(actor.model)

    spec_b = PolicySpec(**actors["B"].policy_spec())
    FileExchange(tmp_path / "exchange", "B", ("A",), spec_b, deadline=5).publish(1, published["B"])
    trainer = trainer_for(paths, probe, tmp_path, FileExchange(tmp_path / "exchange", "A", ("B",), deadline=5),
                          micro_batch)
    pending = actor.pending
    output = {"prompt_ids": pending.prompt_ids, "prompt_mask": pending.prompt_mask,
              "completion_ids": pending.completion_ids, "completion_mask": pending.completion_mask}
    batch = trainer.rollout_batch(problems, output, 1)
    assert torch.equal(batch.rewards, pending.rewards)
    torch.testing.assert_close(batch.sample_logp, pending.sample_logp, atol=1e-5, rtol=0)
    trainer.mrl_pending = (batch, trainer.share(batch, 1))
    trainer.model.zero_grad()
    trainer._prepare_inputs = lambda inputs: inputs   # TRL's training step on this batch as it is: no sampling
    trainer.current_gradient_accumulation_steps = 1   # set by train(), which this test does not call
    trl_loss = trainer.training_step(trainer.model, output)
    trl_grads = gradients(trainer.model)

    torch.testing.assert_close(trl_loss, actor_loss, atol=1e-5, rtol=0)
    assert trl_grads.keys() == actor_grads.keys() and actor_grads
    for name in actor_grads:
        torch.testing.assert_close(trl_grads[name], actor_grads[name], atol=1e-5, rtol=1e-4, msg=name)
    assert trainer._metrics["train"]["exchange/missing_peers"] == [0.0]
    if probe == "sgt":
        assert actor_output.stats["rescue_size"] > 0 and trainer._metrics["train"]["probe/rescue_size"][-1] > 0


def test_what_the_adapter_does_not_carry_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="gradient_accumulation_steps = 2 .*expected 1"):
        check_trl_args(trl_args(tmp_path, gradient_accumulation_steps=2), probe_config("sgt"))
    with pytest.raises(ConfigError, match="minibatches = 4 .*expected 1"):
        check_trl_args(trl_args(tmp_path), probe_config("hacpo", minibatches=4))
    with pytest.raises(ConfigError, match="teacher"):
        check_trl_args(trl_args(tmp_path), probe_config("trrd"))
    with pytest.raises(ConfigError, match="eval_strategy = 'steps' .*expected 'no'"):
        check_trl_args(trl_args(tmp_path, eval_strategy="steps"), probe_config("sgt"))
    with pytest.raises(ConfigError, match="'gspo_x2' samples 2 x num_generations"):
        check_trl_args(trl_args(tmp_path), probe_config("gspo_x2"))


def test_a_silent_peer_is_named_at_the_deadline(tmp_path):
    spec = PolicySpec(vocab_size=40, tokenizer_id="A:bpe")
    waiting = FileExchange(tmp_path, "A", ("B",), spec, deadline=0.2)
    with pytest.raises(WorkerFailed, match="'B'.*no records for step 3 within the deadline of 0.2 s"):
        waiting.gather(3, [])
    going_on = FileExchange(tmp_path, "A", ("B",), spec, deadline=0.2, failure_policy="continue")
    assert going_on.gather(3, [])[1] == ["B"]
    assert going_on.gather(4, [])[1] == [] and going_on.dropped == {"B"}   # dropped: not waited for again


def test_an_exchange_folder_of_an_earlier_run_is_refused(tmp_path):
    spec = PolicySpec(vocab_size=40, tokenizer_id="A:bpe")
    FileExchange(tmp_path, "A", ("B",), spec).publish(1, [])
    with pytest.raises(ConfigError, match="already holds steps of an earlier run"):
        FileExchange(tmp_path, "A", ("B",), spec).publish(1, [])


def test_a_resumed_exchange_moves_later_steps_aside_and_waits_for_its_peers_to_resume(tmp_path):
    """A and B published steps 1-3 and checkpointed after step 2; resumed, A continues after step 2: its step 3 moved
    aside, B's old step 3 not read (B has not resumed) until B resumes and publishes it again; a trainer that did not
    resume refuses a peer that did."""
    spec = PolicySpec(vocab_size=40, tokenizer_id="A:bpe")
    for name, peer in (("A", "B"), ("B", "A")):
        end = FileExchange(tmp_path, name, (peer,), spec, deadline=0.2, run_id="r")
        for step in (1, 2, 3):
            end.publish(step, [])
        end.record_checkpoint(2)
    stale = FileExchange(tmp_path, "A", ("B",), spec, deadline=0.2, run_id="r")
    a = FileExchange(tmp_path, "A", ("B",), spec, deadline=0.2, run_id="r")
    assert a.common_checkpoint([2, 4]) == 2 and a.common_checkpoint([4]) is None
    assert a.resume(2) == tmp_path / "A" / "aside-1" and (tmp_path / "A" / "aside-1" / "step-000003.json").exists()
    assert a.read_peer_step("B", 2) == [] and a.read_peer_step("B", 3) is None   # B's step 3 is from before
    b = FileExchange(tmp_path, "B", ("A",), spec, deadline=0.2, run_id="r")
    b.resume(2)
    assert a.read_peer_step("B", 3) is None   # moved aside: published again once B has run it
    b.publish(3, [])
    assert a.read_peer_step("B", 3) == []
    with pytest.raises(ExperienceLogError, match="resumed into generation 1, this trainer is in 0"):
        stale.read_peer_step("B", 3)
    assert (a.generation, b.generation) == (1, 1)   # restarted together: the second joins the first's generation
    a.gather(3, [])   # A completed a step in round 1: a crash after it needs round 2
    again, late = (FileExchange(tmp_path, name, (peer,), spec, deadline=0.2, run_id="r")
                   for name, peer in (("A", "B"), ("B", "A")))
    again.resume(2)
    late.resume(2)
    assert (again.generation, late.generation) == (2, 2)
    stuck, joined = (FileExchange(tmp_path, name, (peer,), spec, deadline=0.2, run_id="r")
                     for name, peer in (("B", "A"), ("A", "B")))
    stuck.resume(2)   # B restarted first after a round no step of which completed: it re-enters that round
    joined.resume(2)
    assert (stuck.generation, joined.generation) == (2, 2)


def test_a_peer_on_other_prompts_is_refused():
    from mrl.integrations.trl import check_same_prompts
    from mrl.core.see import GroupStats
    from mrl.core.tasks import Problem

    exchange = Exchange(policies={"A": PolicySpec(40, "A:x"), "B": PolicySpec(40, "B:y")})
    exchange.advance(1)
    exchange.publish(GroupStats("B", 0, "p9", 4, 1.0, 1.0, sample=0))
    with pytest.raises(PromptOrderMismatch, match="peer 'B' sampled other prompts"):
        check_same_prompts(exchange, [Problem("1+1=", "2", "S1", "p1")], "A")


def start_trainers(paths, exchange: Path, outputs: Path, *extra: str) -> dict:
    """Trainers of A and B (two tokenizers) sharing SGT through `exchange`, 6 steps with a checkpoint every 2, each
    writing into outputs/<policy>: {policy: its process}."""
    import os
    import subprocess
    import sys

    command = [sys.executable, "-m", "mrl.integrations.trl_train", "--policies",
               *(f"{name}={paths[name]}" for name in ("A", "B")), "--probe", "sgt", "--steps", "6", "--save-steps",
               "2", "--task", str(TINY_TASK), "--exchange", str(exchange), "--deadline", "10", *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return {name: subprocess.Popen([*command, "--policy", name, "--output", str(outputs / name)],
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
            for name in ("A", "B")}


def finish(trainers: dict) -> dict:
    """{policy: (exit status, output)} once every trainer ended (a hang fails at the timeout)."""
    try:
        return {name: (process.communicate(timeout=600)[0], process.returncode)[::-1]
                for name, process in trainers.items()}
    finally:
        for process in trainers.values():
            process.kill()


def logged_steps(output: Path) -> list[dict]:
    """Each step's loss and exchange counters in TRL's trainer_state.json of `output`."""
    import json

    history = json.loads((output / "trainer_state.json").read_text())["log_history"]
    return [{key: value for key, value in row.items() if key == "loss" or key.startswith("exchange/")} | {
        "step": row["step"]} for row in history if "loss" in row]


def test_a_killed_trainer_is_named_and_both_resume_as_if_never_stopped(tiny_zoo_paths, tmp_path):
    """Two trainers share SGT through the exchange folder, checkpointing every 2 steps; B is killed (SIGKILL) once it
    published step 3, A stops naming B within its deadline, and both resumed with --resume continue from step 2 (the
    newest step both checkpointed; the exchange's later steps moved aside): every step's loss equals that of an
    uninterrupted pair within the equality tests' 1e-5, with the same records read per step."""
    import re
    import signal
    import time

    whole = start_trainers(tiny_zoo_paths, tmp_path / "whole-exchange", tmp_path / "whole")
    exchange = tmp_path / "exchange"
    trainers = start_trainers(tiny_zoo_paths, exchange, tmp_path)
    try:
        start = time.monotonic()
        while not (exchange / "B" / "step-000003.json").exists():
            assert time.monotonic() - start < 300 and trainers["B"].poll() is None, "B never reached step 3"
            time.sleep(0.05)
        trainers["B"].send_signal(signal.SIGKILL)
    finally:
        stopped = finish(trainers)
    status, output = stopped["A"]
    assert status != 0
    # B was killed after its step 3 (or, on a loaded machine, a step later): A names it at the step B never wrote
    assert re.search(r"worker 'B' failed: published no records for step [45] within the deadline of 10 s", output), \
        output[-3000:]
    assert "probe/rescue_candidates" in output   # TRL logged A's steps before, the probe's statistics among them

    first = {name: (exchange / name / "step-000001.json").stat().st_mtime_ns for name in ("A", "B")}
    resumed = finish(start_trainers(tiny_zoo_paths, exchange, tmp_path, "--resume"))
    uninterrupted = finish(whole)
    for name in ("A", "B"):
        assert resumed[name][0] == 0 and uninterrupted[name][0] == 0, resumed[name][1][-3000:]
        # resumed, not restarted: step 1 was not written again, and the steps after the resume are moved aside
        assert (exchange / name / "step-000001.json").stat().st_mtime_ns == first[name]
        assert any((exchange / name / "aside-1").glob("step-*.json"))   # (step 3; 5 if B reached checkpoint 4)
        got, want = logged_steps(tmp_path / name), logged_steps(tmp_path / "whole" / name)
        assert [row["step"] for row in got] == list(range(1, 7)) == [row["step"] for row in want]
        for row, reference in zip(got, want):
            assert row.keys() == reference.keys()
            for key in row:
                assert row[key] == pytest.approx(reference[key], abs=1e-5), (name, row["step"], key)


def test_the_dataset_is_the_task_s_prompts_as_text_or_one_user_message():
    from types import SimpleNamespace

    from mrl.core.tasks import Problem

    problem = Problem("What is 2+2?\nPut the answer in \\boxed{}.", "4", "gsm8k", "train/0")
    for chat, prompt in ((False, problem.prompt), (True, [{"role": "user", "content": problem.prompt}])):
        task = SimpleNamespace(pool={}, train={"gsm8k": [problem]}, config=SimpleNamespace(chat_template=chat))
        row = problem_dataset(task)[0]
        assert row["prompt"] == prompt and (row["text"], row["answer"], row["pid"]) == (problem.prompt, "4", "train/0")

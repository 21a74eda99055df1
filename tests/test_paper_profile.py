"""The paper profile's code path with local stand-ins: pretrained-style checkpoints (no zoo.json) with chat
templates, GSM8K-schema training and test files and a MATH-schema test file scored by math-verify, every probe
(docs/architecture.md, Experiments and profiles)."""
import dataclasses
import json
import warnings

import pytest
import torch

from mrl.core.config import ConfigError, FamilyConfig, RunnerConfig, TaskConfig
from mrl.core.probes import PROBES, probe_config
from mrl.core.tasks import Gsm8kTask, make_task
from mrl.experiments import policy_paths
from mrl.profiles import load_profile
import mrl.runtime.actor as actor_module
from mrl.runtime.actor import PolicyActor
from mrl.runtime.rollout import completion_logprobs
from mrl.runtime.runner import run_concurrent
from testsupport import run_of
from mrl.runtime.zoo import build_model, load_policy, train_tokenizer

QUESTIONS = [(f"Sam has {a} apples and buys {b} more. How many apples does he have?", a + b)
             for a, b in [(3, 4), (10, 5), (7, 8), (2, 9), (12, 30), (6, 6), (15, 1), (4, 20)]]
CHATML = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
LLAMA3 = ("<|begin_of_text|>{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n"
          "{{ m.content }}<|eot_id|>{% endfor %}{% if add_generation_prompt %}<|start_header_id|>assistant"
          "<|end_header_id|>\n\n{% endif %}")
TEMPLATES = {"A": (CHATML, ["<|im_start|>", "<|im_end|>"]),
             "B": (LLAMA3, ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"])}


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory):
    """(GSM8K-schema training file, {A, B: a pretrained-style checkpoint with a chat template}) and, next to the
    training file, gsm8k_test.jsonl (two of its questions) and math500.jsonl (MATH's schema)."""
    root = tmp_path_factory.mktemp("paper")
    data = root / "gsm8k.jsonl"
    data.write_text("\n".join(json.dumps({"question": q, "answer": f"{q} ... \n#### {n}"}) for q, n in QUESTIONS))
    (root / "gsm8k_test.jsonl").write_text("\n".join(
        json.dumps({"question": q, "answer": f"... \n#### {n}"}) for q, n in QUESTIONS[:2]))
    (root / "math500.jsonl").write_text("\n".join(
        json.dumps({"problem": f"What is ${a} + {b}$?", "solution": "...", "answer": str(a + b), "subject": "Algebra",
                    "level": 1, "unique_id": f"test/algebra/{a}.json"}) for a, b in [(1, 2), (5, 5), (9, 3)]))
    corpus = [f"Question: {q}\nAnswer: {n}" for q, n in QUESTIONS]
    paths = {}
    for name, arch, kind in (("A", "gpt2", "bpe"), ("B", "llama", "unigram")):
        tokenizer = train_tokenizer(kind, corpus, 120, 256)
        template, specials = TEMPLATES[name]
        tokenizer.add_special_tokens({"additional_special_tokens": specials})
        tokenizer.chat_template = template
        model = build_model(FamilyConfig(arch=arch, d_model=32, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=64),
                            len(tokenizer), 256, 0)
        folder = root / f"pretrained-{name}"
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)   # no zoo.json: a pretrained checkpoint, as the paper profile loads
        paths[name] = str(folder)
    return data, paths


def test_paper_profile_loads_and_names_its_notebooks():
    config = load_profile("paper")
    assert config.task.name == "gsm8k" and set(config.policies) == {"A", "B", "C"}
    assert "00_zoo" not in config.notebooks and config.runner.backend == "ray"
    with pytest.raises(FileNotFoundError, match="configs/paper.yaml"):
        policy_paths(config)   # the checkpoints are not on this machine: a clear error, not a download


@pytest.mark.slow
def test_paper_code_path_runs_sgt_on_worker_processes_with_stand_ins(stand_ins):
    """The paper profile's path (pretrained-style checkpoints, chat templates, GSM8K and MATH test files) in worker
    processes, each loading its checkpoint and task where it runs. On the process backend, not the profile's Ray: a
    local Ray cluster's start-up was four fifths of this test (53 s of make test), and a Ray actor builds its policy
    from the same WorkerSpec a process worker does; Ray itself is covered by tests/test_runner.py (a Ray run equals
    the inline one and a dead actor is named) and tests/test_user_probe.py (a user's probe on every backend)."""
    data, paths = stand_ins
    config = load_profile("paper")
    task_cfg = _chat_task(data)
    with pytest.warns(UserWarning, match="dropped from training"):
        task = make_task(task_cfg)
    assert isinstance(task, Gsm8kTask) and len(task.test["gsm8k"]) == 2
    assert task.verify("He has 7 apples, so the answer is 7", task.test["gsm8k"][0]) == 1.0
    assert load_policy(paths["A"]).family is None
    grpo = dataclasses.replace(config.grpo, steps=2, prompts_per_step=2, group_size=2, max_new_tokens=8,
                               eval_max_new_tokens=None, eval_every=2)   # stand-ins: 64 positions
    record = run_concurrent(run_of(paths, task_cfg, grpo, RunnerConfig(backend="process", step_timeout=300), threads=1,
                                    probe=probe_config("sgt")), progress=False)
    assert {row["policy"] for row in record.steps} == {"A", "B"} and len(record.steps) == 4
    assert {(row["split"], row["skill"]) for row in record.evals} == {("held-out", "gsm8k"), ("held-out", "math500")}
    assert record.counters["accepted/rollout"] == 2 * 2 * 2 * 2   # policies x steps x prompts x samples


def _chat_task(data) -> TaskConfig:
    config = load_profile("paper").task
    return dataclasses.replace(config, data_files=str(data), test_per_skill=500,
                               test_files={"gsm8k": str(data.parent / "gsm8k_test.jsonl"),
                                           "math500": str(data.parent / "math500.jsonl")})


def test_the_benchmarks_test_splits_are_evaluated_and_disjoint_from_training(stand_ins):
    data, _ = stand_ins
    with pytest.warns(UserWarning, match="2 training row"):
        task = make_task(_chat_task(data))
    assert {name: len(rows) for name, rows in task.test.items()} == {"gsm8k": 2, "math500": 3}
    assert task.dropped_overlap == 2 and len(task.train["gsm8k"]) == len(QUESTIONS) - 2
    train = {p.prompt for p in task.train["gsm8k"]}
    assert not train & {p.prompt for rows in task.test.values() for p in rows}
    instruction = load_profile("paper").task.instruction
    assert all(p.prompt.endswith(instruction) for p in task.train["gsm8k"])   # stated once, in the config
    assert task.test["math500"][2].answer == "12"
    assert task.verify("so $9 + 3 = \\boxed{12}$", task.test["math500"][2]) == 1.0


def test_a_policy_reads_each_prompt_through_its_own_chat_template(stand_ins):
    from mrl.core.batch import prompt_renderer

    _, paths = stand_ins
    a, b = (load_policy(paths[name]).tokenizer for name in ("A", "B"))
    assert prompt_renderer(a, True)("Q?") == "<|im_start|>user\nQ?<|im_end|>\n<|im_start|>assistant\n"
    assert prompt_renderer(b, True)("Q?").startswith("<|begin_of_text|><|start_header_id|>user")
    assert prompt_renderer(a, False)("Q?") == "Q?"
    dated = load_policy(paths["B"]).tokenizer
    dated.chat_template = "{{ date_string | default(strftime_now('%d %b %Y')) }}: {{ messages[0].content }}"
    assert prompt_renderer(dated, True)("Q?") == "26 Jul 2024: Q?"   # not the day the run happens
    ids = a(prompt_renderer(a, True)("Q?"), add_special_tokens=False)["input_ids"]
    assert ids[0] == a.convert_tokens_to_ids("<|im_start|>")   # the template's markers are special tokens
    plain = load_policy(paths["A"]).tokenizer
    plain.chat_template = None
    with pytest.raises(ConfigError, match="TaskConfig.chat_template = True .* has no chat template"):
        prompt_renderer(plain, True)("Q?")


class ScoringSpy(PolicyActor):
    """A policy actor whose first sample of every group writes the right answer (the answer's digits, then EOS,
    with the model's own log-probs), so that math-verify has successes to score, SEE verified successes to share
    and THL a peer's answer to align; it keeps the prompt text it sampled from and math-verify's verdicts."""

    prompts: dict = {}
    verdicts: list = []

    def rollout(self, step, problems):
        real_sample, real_verify = actor_module.sample_groups, self.task.verify

        def sample_with_the_answer(model, tokenizer, prompts, generator, grpo, with_logprobs=True):
            prompt_ids, prompt_mask, ids, mask, _ = real_sample(model, tokenizer, prompts, generator, grpo,
                                                                with_logprobs=with_logprobs)
            group_size = grpo.group_size
            rows = []
            for x, problem in enumerate(problems):
                answer = tokenizer(problem.answer, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
                rows.append((x * group_size, answer))
            width = max(ids.size(1), *(len(a) for _, a in rows))
            ids = torch.nn.functional.pad(ids, (0, width - ids.size(1)), value=tokenizer.pad_token_id)
            mask = torch.nn.functional.pad(mask, (0, width - mask.size(1)))
            for row, answer in rows:
                ids[row], mask[row] = tokenizer.pad_token_id, 0
                ids[row, :len(answer)], mask[row, :len(answer)] = torch.tensor(answer), 1
            if not with_logprobs:
                return prompt_ids, prompt_mask, ids, mask, None   # the actor scores them with its training forward
            with torch.no_grad():
                logp = completion_logprobs(model, prompt_ids, prompt_mask, ids, mask) * mask
            return prompt_ids, prompt_mask, ids, mask, logp

        def verify(text, problem):
            ScoringSpy.verdicts.append(real_verify(text, problem))
            return ScoringSpy.verdicts[-1]

        actor_module.sample_groups, self.task.verify = sample_with_the_answer, verify
        try:
            out = super().rollout(step, problems)
        finally:
            actor_module.sample_groups, self.task.verify = real_sample, real_verify
        ScoringSpy.prompts[self.name] = self.tokenizer.decode(self.pending.prompt_ids[0], skip_special_tokens=False)
        return out


@pytest.mark.parametrize("probe", sorted(PROBES))
def test_chat_prompts_and_math_verify_rewards_flow_through_every_probe(stand_ins, probe):
    data, paths = stand_ins
    with pytest.warns(UserWarning, match="dropped from training"):
        task_cfg = _chat_task(data)
        make_task(task_cfg)
    grpo = dataclasses.replace(load_profile("paper").grpo, steps=1, prompts_per_step=2, group_size=2,
                               max_new_tokens=6, eval_max_new_tokens=None, eval_every=1)
    ScoringSpy.prompts, ScoringSpy.verdicts = {}, []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)   # each actor's task drops the same overlapping rows
        record = run_concurrent(run_of(paths, task_cfg, grpo, RunnerConfig(), threads=1, probe=probe_config(probe)),
                                actor_cls=ScoringSpy, progress=False)
    assert ScoringSpy.prompts["A"].startswith("<|im_start|>user\nSam has")
    assert ScoringSpy.prompts["B"].startswith("<|begin_of_text|><|start_header_id|>user")
    assert ScoringSpy.verdicts.count(1.0) >= 2 * 2   # each group's written answer, verified by math-verify
    samples = 2 * 2 * 2 * PROBES[probe].group_multiplier   # policies x prompts x group (gspo_x2 samples twice)
    assert record.counters["accepted/rollout"] == samples and record.counters["accepted/success"] >= 2 * 2
    assert {(row["split"], row["skill"]) for row in record.evals} == {("held-out", "gsm8k"), ("held-out", "math500")}
    assert {row["step"] for row in record.steps} == {1}

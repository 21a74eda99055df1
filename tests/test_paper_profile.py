"""The paper profile's code path with local stand-ins: pretrained-style checkpoints (no zoo.json), a
GSM8K-schema file scored by math-verify, the probes on the ray backend (SPEC section 10)."""
import dataclasses
import json

import pytest

from mrl.config import FamilyConfig, RunnerConfig
from mrl.experiment import policy_paths
from mrl.probes import probe_config
from mrl.profiles import load_profile
from mrl.runner import run_concurrent
from mrl.tasks import Gsm8kTask, make_task
from mrl.zoo import build_model, load_policy, train_tokenizer

QUESTIONS = [(f"Sam has {a} apples and buys {b} more. How many apples does he have?", a + b)
             for a, b in [(3, 4), (10, 5), (7, 8), (2, 9), (12, 30), (6, 6), (15, 1), (4, 20)]]


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory):
    root = tmp_path_factory.mktemp("paper")
    data = root / "gsm8k.jsonl"
    data.write_text("\n".join(json.dumps({"question": q, "answer": f"{q} ... \n#### {n}"}) for q, n in QUESTIONS))
    corpus = [f"Question: {q}\nAnswer: {n}" for q, n in QUESTIONS]
    paths = {}
    for name, arch, kind in (("A", "gpt2", "bpe"), ("B", "llama", "unigram")):
        tokenizer = train_tokenizer(kind, corpus, 120, 128)
        model = build_model(FamilyConfig(arch=arch, d_model=32, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=64),
                            len(tokenizer), 128, 0)
        folder = root / f"pretrained-{name}"
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)   # no zoo.json: a pretrained checkpoint, as the paper profile loads
        paths[name] = str(folder)
    return data, paths


def test_paper_profile_loads_and_names_its_notebooks():
    config = load_profile("paper")
    assert config.task.name == "gsm8k" and set(config.policies) == {"A", "B", "C"}
    assert "00_zoo" not in config.notebooks and config.backend == "ray"
    with pytest.raises(FileNotFoundError, match="configs/paper.yaml"):
        policy_paths(config)   # the checkpoints are not on this machine: a clear error, not a download


@pytest.mark.slow
def test_paper_code_path_runs_sgt_on_ray_with_stand_ins(stand_ins):
    data, paths = stand_ins
    config = load_profile("paper")
    task_cfg = dataclasses.replace(config.task, data_files=str(data), test_per_skill=3)
    task = make_task(task_cfg)
    assert isinstance(task, Gsm8kTask) and len(task.test["gsm8k"]) == 3
    assert task.verify("He has 7 apples, so the answer is 7", task.test["gsm8k"][0]) == 1.0
    assert load_policy(paths["A"]).family is None
    grpo = dataclasses.replace(config.grpo, steps=2, prompts_per_step=2, group_size=2, max_new_tokens=8,
                               eval_every=2)
    record = run_concurrent(paths, task_cfg, grpo, RunnerConfig(backend="ray", step_timeout=300), threads=1,
                            progress=False, probe_cfg=probe_config("sgt"))
    assert {row["policy"] for row in record.steps} == {"A", "B"} and len(record.steps) == 4
    assert {(row["split"], row["skill"]) for row in record.evals} == {("held-out", "gsm8k")}
    assert record.counters["accepted/rollout"] == 2 * 2 * 2 * 2   # policies x steps x prompts x samples

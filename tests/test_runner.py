"""End-to-end on tiny budgets: GRPO raises the reward on a small fixed pool, and is deterministic."""
import pytest
import torch

from mrl.config import FamilyConfig, GrpoConfig, TaskConfig, WarmupConfig, ZooConfig
from mrl.runner import train_grpo, train_grpo_zoo
from mrl.tasks import ArithTask
from mrl.zoo import build_zoo, load_policy

TASK = TaskConfig(max_operand=9, test_per_skill=20, pool_per_skill=5, leak_n=10)
GRPO = GrpoConfig(steps=80, prompts_per_step=8, group_size=8, lr=3e-4, eval_every=40, seed=0)


@pytest.fixture(scope="module")
def warm_paths(tmp_path_factory):
    family = FamilyConfig(name="A", arch="gpt2", tokenizer="bpe", d_model=64, n_layers=2, n_heads=2, d_ff=128,
                          warmup_mix={"S1": 0.34, "S2": 0.33, "S3": 0.33})
    peer = FamilyConfig(name="B", arch="llama", tokenizer="unigram", vocab_size=40, d_model=64, n_layers=2,
                        n_heads=2, n_kv_heads=1, d_ff=128, warmup_mix={"S2": 1.0})
    zoo_cfg = ZooConfig(families=[family, peer],
                        warmup=WarmupConfig(steps=150, batch_size=64, lr_warmup_steps=10), workers=2)
    zoo = build_zoo(TASK, zoo_cfg, root=tmp_path_factory.mktemp("zoo"), progress=False)
    return {name: policy.path for name, policy in zoo.items()}


@pytest.mark.slow
def test_grpo_raises_reward_on_a_small_pool(warm_paths):
    task = ArithTask(TASK)
    policy = load_policy(warm_paths["A"])
    before = [p.detach().clone() for p in policy.model.parameters()]
    steps, evals = train_grpo(policy, task, GRPO, progress=False)
    reward = [s["reward"] for s in steps]
    assert sum(reward[-10:]) / 10 > sum(reward[:10]) / 10 + 0.1, reward
    pool_acc = {row["step"]: row["accuracy"] for row in evals if row["split"] == "pool" and row["skill"] == "S1"}
    assert any(not torch.equal(a, b) for a, b in zip(before, policy.model.parameters()))
    assert pool_acc[GRPO.steps] >= pool_acc[0]


@pytest.mark.slow
def test_inline_grpo_is_deterministic(warm_paths):
    task = ArithTask(TASK)
    runs = []
    for _ in range(2):
        steps, evals = train_grpo(load_policy(warm_paths["A"]), task, GrpoConfig(**{**GRPO.__dict__, "steps": 8}),
                                  progress=False)
        runs.append(([(s["reward"], s["loss"], s["grad_norm"]) for s in steps], evals))
    assert runs[0] == runs[1]


@pytest.mark.slow
def test_process_workers_give_the_inline_results(warm_paths):
    """Independent GRPO of two families in two spawned processes equals the inline run, row for row."""
    zoo = {name: load_policy(path) for name, path in warm_paths.items()}
    cfg = GrpoConfig(**{**GRPO.__dict__, "steps": 6, "eval_every": 3})
    inline = train_grpo_zoo(zoo, TASK, cfg, workers=1)
    spawned = train_grpo_zoo(zoo, TASK, cfg, workers=2)
    strip = lambda rows: [{k: v for k, v in r.items() if k != "seconds"} for r in rows]
    assert strip(inline[0]) == strip(spawned[0]) and inline[1] == spawned[1]
    assert {r["policy"] for r in inline[0]} == {"A", "B"}

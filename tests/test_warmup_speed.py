"""The warm-up's throughput changes keep its bits: batched collation, and many zoos' warm-ups in one pool."""
import dataclasses
import random

import torch

from mrl.core.config import FamilyConfig, TaskConfig, WarmupConfig, ZooConfig
from mrl.profiles import load_profile
from mrl.runtime.zoo import _collate, build_zoo, build_zoos, warmup_cost

SMALL = dict(d_model=32, n_layers=2, n_heads=2, n_kv_heads=1, d_ff=64)


def collate_row_by_row(examples, pad_id):
    """The collation as first written: one row of each tensor at a time."""
    p_len, t_len, n = max(len(q) for q, _ in examples), max(len(a) for _, a in examples), len(examples)
    prompt, prompt_mask = torch.full((n, p_len), pad_id), torch.zeros(n, p_len, dtype=torch.long)
    answer, answer_mask = torch.full((n, t_len), pad_id), torch.zeros(n, t_len, dtype=torch.long)
    for i, (q, a) in enumerate(examples):
        prompt[i, p_len - len(q):], prompt_mask[i, p_len - len(q):] = torch.tensor(q), 1
        answer[i, : len(a)], answer_mask[i, : len(a)] = torch.tensor(a), 1
    return prompt, prompt_mask, answer, answer_mask


def test_collate_equals_row_by_row():
    rng = random.Random(0)
    for _ in range(50):
        examples = [([rng.randrange(3, 60) for _ in range(rng.randrange(1, 9))],
                     [rng.randrange(3, 60) for _ in range(rng.randrange(1, 5))]) for _ in range(rng.randrange(1, 20))]
        for ours, reference in zip(_collate(examples, 0), collate_row_by_row(examples, 0)):
            assert ours.dtype == reference.dtype == torch.long and torch.equal(ours, reference)


def test_longer_warmups_start_first():
    """The held-out zoo's B (llama, Unigram: digit-level numbers, longer sequences) is estimated costlier than A."""
    zoo = load_profile("default").experiment("heldout").zoo
    costs = {f.name: warmup_cost(f, zoo) for f in zoo.families}
    assert costs["B"] > costs["A"] > 0


def test_build_zoos_equals_build_zoo_per_seed(tmp_path):
    """Two warm-up seeds' zoos built in one pool of two processes: the same folders and bits as build_zoo of each."""
    from testsupport import TINY_TASK

    task_cfg = TaskConfig(**TINY_TASK)
    families = [FamilyConfig(name="A", arch="gpt2", tokenizer="bpe", **SMALL),
                FamilyConfig(name="B", arch="llama", tokenizer="unigram", vocab_size=40, **SMALL)]
    base = ZooConfig(families=families, warmup=WarmupConfig(steps=3, batch_size=8, lr_warmup_steps=1), workers=2)
    zoo_cfgs = [dataclasses.replace(base, warmup=dataclasses.replace(base.warmup, seed=seed)) for seed in (0, 1)]
    pooled = build_zoos(task_cfg, zoo_cfgs, tmp_path / "pooled", progress=False)
    for zoo_cfg, zoo in zip(zoo_cfgs, pooled):
        alone = build_zoo(task_cfg, dataclasses.replace(zoo_cfg, workers=1), tmp_path / "alone", progress=False)
        for name in ("A", "B"):
            assert zoo[name].path.name == alone[name].path.name
            assert zoo[name].record["warmup_loss"] == alone[name].record["warmup_loss"]
            for p, q in zip(zoo[name].model.parameters(), alone[name].model.parameters(), strict=True):
                assert torch.equal(p, q)
    assert pooled[0]["A"].path != pooled[1]["A"].path

import os

import mrl  # noqa: F401, I001  (first: the numerics contract, mrl.numerics, before torch and numpy)
import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def arith_task():
    from mrl.core.config import TaskConfig
    from mrl.core.tasks import ArithTask

    return ArithTask(TaskConfig(test_per_skill=50, pool_per_skill=10))


@pytest.fixture(scope="session")
def bpe_tokenizer(arith_task):
    from mrl.runtime.zoo import train_tokenizer

    return train_tokenizer("bpe", arith_task.corpus, 48, 48)


TINY_TASK = dict(max_operand=9, test_per_skill=10, pool_per_skill=5, leak_n=10)
"""the task of the runner and soak tests' tiny zoo (TaskConfig keywords)"""


SMALL = dict(d_model=64, n_layers=2, n_heads=2, n_kv_heads=1, d_ff=128)
MIX = {"S1": 0.34, "S2": 0.33, "S3": 0.33}


def tiny_zoo(families, root) -> dict[str, str]:
    """Small families warmed up 150 steps on TINY_TASK into `root`: {name: checkpoint folder}."""
    from mrl.core.config import TaskConfig, WarmupConfig, ZooConfig
    from mrl.runtime.zoo import build_zoo

    zoo = build_zoo(TaskConfig(**TINY_TASK), ZooConfig(families=families, warmup=WarmupConfig(
        steps=150, batch_size=64, lr_warmup_steps=10), workers=2), root=root, progress=False)
    return {name: str(policy.path) for name, policy in zoo.items()}


def pair_run_twice(tiny_zoo_paths, probe: str) -> tuple[list, list]:
    """A (GPT-2 + BPE) and B (Llama + Unigram) under `probe` through the runner, 3 steps, twice: (each run's step rows
    without timings, each run's evals)."""
    from mrl.core.config import GrpoConfig, RunnerConfig, TaskConfig
    from mrl.core.probes import probe_config
    from mrl.runtime.runner import RunSpec, run_concurrent

    paths = {name: tiny_zoo_paths[name] for name in ("A", "B")}
    grpo = GrpoConfig(steps=3, prompts_per_step=4, group_size=4, lr=3e-4, eval_every=3, seed=0)
    runs = [run_concurrent(RunSpec(paths, TaskConfig(**TINY_TASK), grpo, RunnerConfig(), probe=probe_config(probe)),
                           progress=False) for _ in range(2)]
    return ([[{k: v for k, v in row.items() if not k.endswith("seconds")} for row in r.steps] for r in runs],
            [r.evals for r in runs])


@pytest.fixture(scope="session")
def tiny_zoo_paths(tmp_path_factory):
    """Three small families warmed up 150 steps on TINY_TASK: A (GPT-2 + BPE), B (Llama + Unigram), C (Qwen2 +
    WordPiece); {name: checkpoint folder}."""
    from mrl.core.config import FamilyConfig

    families = [FamilyConfig(name="A", arch="gpt2", tokenizer="bpe", **SMALL, warmup_mix=MIX),
                FamilyConfig(name="B", arch="llama", tokenizer="unigram", vocab_size=40, **SMALL, warmup_mix=MIX),
                FamilyConfig(name="C", arch="qwen2", tokenizer="wordpiece", vocab_size=60, **SMALL, warmup_mix=MIX)]
    return tiny_zoo(families, tmp_path_factory.mktemp("zoo"))


@pytest.fixture(scope="session")
def five_zoo_paths(tiny_zoo_paths, tmp_path_factory):
    """The tiny zoo and two more families: D (Mistral + characters) and E (GPT-NeoX + BPE of another size)."""
    from mrl.core.config import FamilyConfig

    families = [FamilyConfig(name="D", arch="mistral", tokenizer="char", vocab_size=48, **SMALL, warmup_mix=MIX),
                FamilyConfig(name="E", arch="gpt_neox", tokenizer="bpe", vocab_size=36, **SMALL, warmup_mix=MIX)]
    return {**tiny_zoo_paths, **tiny_zoo(families, tmp_path_factory.mktemp("zoo_de"))}

import os
from pathlib import Path

import mrl  # noqa: F401, I001  (first: the numerics contract, mrl.numerics, before torch and numpy)
import pytest
import torch
from testsupport import MIX, SMALL, shared_tiny_zoo

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


@pytest.fixture(scope="session")
def shared_zoo_root(tmp_path_factory, worker_id) -> Path:
    """The folder of the session's tiny zoos: under `make test`'s two xdist workers, one both share (their temporary
    folders' parent), so that a zoo one worker built is loaded from build_zoo's cache by the other."""
    if worker_id == "master":
        return tmp_path_factory.mktemp("zoos")
    return tmp_path_factory.getbasetemp().parent / "shared-zoos"


@pytest.fixture(scope="session")
def tiny_zoo_paths(shared_zoo_root):
    """Three small families warmed up 150 steps on TINY_TASK: A (GPT-2 + BPE), B (Llama + Unigram), C (Qwen2 +
    WordPiece); {name: checkpoint folder}."""
    from mrl.core.config import FamilyConfig

    families = [FamilyConfig(name="A", arch="gpt2", tokenizer="bpe", **SMALL, warmup_mix=MIX),
                FamilyConfig(name="B", arch="llama", tokenizer="unigram", vocab_size=40, **SMALL, warmup_mix=MIX),
                FamilyConfig(name="C", arch="qwen2", tokenizer="wordpiece", vocab_size=60, **SMALL, warmup_mix=MIX)]
    return shared_tiny_zoo(families, shared_zoo_root / "abc")


@pytest.fixture(scope="session")
def five_zoo_paths(tiny_zoo_paths, shared_zoo_root):
    """The tiny zoo and two more families: D (Mistral + characters) and E (GPT-NeoX + BPE of another size)."""
    from mrl.core.config import FamilyConfig

    families = [FamilyConfig(name="D", arch="mistral", tokenizer="char", vocab_size=48, **SMALL, warmup_mix=MIX),
                FamilyConfig(name="E", arch="gpt_neox", tokenizer="bpe", vocab_size=36, **SMALL, warmup_mix=MIX)]
    return {**tiny_zoo_paths, **shared_tiny_zoo(families, shared_zoo_root / "de")}

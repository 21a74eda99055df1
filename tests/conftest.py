import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def arith_task():
    from mrl.config import TaskConfig
    from mrl.tasks import ArithTask

    return ArithTask(TaskConfig(test_per_skill=50, pool_per_skill=10))


@pytest.fixture(scope="session")
def bpe_tokenizer(arith_task):
    from mrl.zoo import train_tokenizer

    return train_tokenizer("bpe", arith_task.corpus, 48, 48)

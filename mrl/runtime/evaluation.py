"""Greedy accuracy per skill on pool and held-out prompts."""
from __future__ import annotations

from typing import Callable

import torch

from mrl.core.batch import Decoding, as_written, completion_texts, encode_prompts, score
from mrl.runtime.placement import set_training
from mrl.runtime.rollout import sample_completions, stop_ids


@torch.no_grad()
def greedy_accuracy(model, tokenizer, problems, verify, max_new_tokens: int = 6, batch_size: int = 512,
                    engine: str = "hf", render: Callable[[str], str] = as_written) -> float:
    """Fraction of problems whose greedy completion is well-formed and verified."""
    if not problems:
        return float("nan")
    set_training(model, False)
    correct = 0.0
    for start in range(0, len(problems), batch_size):
        chunk = problems[start:start + batch_size]
        ids, mask = encode_prompts(tokenizer, [render(p.prompt) for p in chunk], model.device)
        decoding = Decoding(max_new_tokens=max_new_tokens, eos_id=stop_ids(tokenizer), pad_id=tokenizer.pad_token_id,
                            greedy=True)
        completion_ids, completion_mask, _ = sample_completions(model, ids, mask, decoding, engine=engine,
                                                                with_logprobs=False)
        texts = completion_texts(tokenizer, completion_ids, completion_mask, stop_ids(tokenizer))
        correct += score(texts, chunk, verify, model.device).sum().item()
    return correct / len(problems)


def skill_accuracy(model, tokenizer, task, max_new_tokens: int = 6, engine: str = "hf",
                   render: Callable[[str], str] = as_written, batch_size: int = 512) -> list[dict]:
    """Rows {split, skill, accuracy} for the held-out test set and (if any) the RL pool; render: the policy's text
    of a prompt (rollout.prompt_renderer); batch_size: prompts per greedy call."""
    rows = []
    for split, sets in (("held-out", task.test), ("pool", task.pool)):
        for skill, problems in sets.items():
            rows.append({"split": split, "skill": skill,
                         "accuracy": greedy_accuracy(model, tokenizer, problems, task.verify, max_new_tokens,
                                                     batch_size=batch_size, engine=engine, render=render)})
    return rows

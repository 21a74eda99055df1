"""A teacher's log-probs of a learner's own sampled tokens, across tokenizers through THL (for TRRD, RLAD eq. 3).

A teacher of another family tokenizes the same text differently. THL aligns the learner's sampled ids (source)
with the teacher's tokenization of their text (receiver) into groups that cover the same bytes; the teacher
scores its own tokens given the prompt, and each group's teacher log-probability is spread evenly over the
learner's tokens of that group:

    log pi_T(learner token t) = ( sum_{teacher tokens u in g(t)} log pi_T(u) ) / |learner tokens in g(t)|

so every group (and the sequence) keeps the teacher's total; with one tokenizer the groups are single tokens and
this is the teacher's own per-token log-prob exactly. Hand-written: no library projects log-probs across
tokenizers; THL is the package's own.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from mrl.core.batch import encode_prompts, pad_completions
from mrl.core.thl import ThlError, align_batch
from mrl.runtime.rollout import completion_logprobs


def spread_over_learner_tokens(alignment, teacher_logps) -> np.ndarray:
    """Per learner token, its THL group's total teacher log-prob divided by the group's learner tokens.
    teacher_logps (n_teacher,) over alignment.dst_ids -> (n_learner,) over alignment.src_ids."""
    n = alignment.n_groups
    totals = np.bincount(alignment.dst_group, weights=np.asarray(teacher_logps, dtype=np.float64), minlength=n)
    learner_tokens = np.bincount(alignment.src_group, minlength=n)
    return (totals / np.maximum(learner_tokens, 1))[alignment.src_group]


@dataclass(frozen=True)
class LearnerSamples:
    """The learner's sampled completions a teacher scores (teacher_logprobs), N rows."""

    prompts: list[str]
    """(N,) each row's prompt as the teacher reads it (its chat template when the task uses one)"""
    completion_ids: Tensor
    """(N, T) the learner's ids, EOS included"""
    completion_mask: Tensor
    """(N, T) 1 up to and including the first EOS"""
    texts: list[str]
    """(N,) the decoded completion texts"""


@torch.no_grad()
def teacher_logprobs(teacher, teacher_tokenizer, learner_tokenizer, samples: LearnerSamples, fallback: Tensor,
                     engine: str = "hf", chunk: int = 0) -> tuple[Tensor, int]:
    """log pi_T of every learner completion token, projected by THL. -> ((N, T) like samples.completion_ids, failed).

    A row THL cannot align takes `fallback`'s row ((N, T), the learner's own sampling log-probs: a teacher log ratio
    of 0) and is counted in `failed`. 0 where masked. engine, chunk: the teacher's scoring forward
    (completion_logprobs)."""
    completion_mask = samples.completion_mask
    ids = [row[:int(m.sum())].tolist() for row, m in zip(samples.completion_ids, completion_mask)]
    alignments = align_batch(samples.texts, learner_tokenizer, teacher_tokenizer, ids)
    good = [i for i, a in enumerate(alignments) if not isinstance(a, ThlError) and a.dst_ids]
    out = fallback.clone().float() * completion_mask
    if good:
        prompt_ids, prompt_mask = encode_prompts(teacher_tokenizer, [samples.prompts[i] for i in good],
                                                 teacher.device)
        teacher_ids, teacher_mask = pad_completions([alignments[i].dst_ids for i in good],
                                                    teacher_tokenizer.pad_token_id, teacher.device)
        teacher.eval()
        logp = completion_logprobs(teacher, prompt_ids, prompt_mask, teacher_ids, teacher_mask, engine=engine,
                                   chunk=chunk)
        for row, i in enumerate(good):
            a = alignments[i]
            spread = spread_over_learner_tokens(a, logp[row, :len(a.dst_ids)].cpu().numpy())
            out[i, :len(ids[i])] = torch.as_tensor(spread, dtype=out.dtype, device=out.device)
    return out, len(ids) - len(good)

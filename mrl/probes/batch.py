"""The batch structure every probe works on: the learner's own step, the peers' records, the output.

LearnerBatch holds one policy's sampled groups (P prompts x G completions, groups contiguous) and
the handles a probe needs to compute a loss with gradient: the policy worker (model, tokenizer,
optimizer config) and the task's verifier. PeerView holds what SEE collected for this learner.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import Tensor

from mrl.policy import completion_logprobs, encode_prompts
from mrl.thl import ThlError, align_batch


@dataclass
class LearnerBatch:
    """One policy's own groups of one step."""

    policy: str
    problems: list                 # (P,) Problem
    group_size: int
    prompt_ids: Tensor             # (P*G, Lp) left-padded, each prompt repeated G times
    prompt_mask: Tensor
    completion_ids: Tensor         # (P*G, T)
    completion_mask: Tensor
    rewards: Tensor                # (P*G,)
    worker: object                 # mrl.policy.PolicyWorker of this policy
    verify: Callable               # verify(text, problem) -> reward in [0, 1]
    generator: torch.Generator     # the probe's own draws (derived from seed, step, policy)
    state: dict = field(default_factory=dict)  # the probe's state across steps (checkpointed with the actor)
    step: int = 0

    @property
    def tokenizer(self):
        return self.worker.tokenizer

    @property
    def successes_per_prompt(self) -> Tensor:
        """k(x): correct samples per prompt. (P,)."""
        return (self.rewards.view(-1, self.group_size) > 0).sum(dim=1)

    def own_loss(self, advantages: Tensor):
        """The GRPO loss on the own samples with these advantages: (loss or None, active sequences, stats)."""
        return self.worker.own_loss(self.prompt_ids, self.prompt_mask, self.completion_ids, self.completion_mask,
                                    advantages)

    def encode_completion(self, text: str, with_eos: bool = True) -> list[int]:
        """The learner's canonical ids of a completion text, EOS appended (a target or a retokenized sample)."""
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return ids + [self.worker.eos_id] if with_eos else ids

    def logprobs(self, prompts: list[str], completions: list[list[int]]) -> tuple[Tensor, Tensor]:
        """log pi_learner of each completion token given its prompt, with gradient. -> (N, T) each, and mask."""
        self.worker.model.train()
        prompt_ids, prompt_mask = encode_prompts(self.tokenizer, prompts)
        length = max(len(c) for c in completions)
        ids = torch.full((len(completions), length), self.worker.pad_id, dtype=torch.long)
        mask = torch.zeros((len(completions), length), dtype=torch.long)
        for row, completion in enumerate(completions):
            ids[row, :len(completion)] = torch.tensor(completion, dtype=torch.long)
            mask[row, :len(completion)] = 1
        return completion_logprobs(self.worker.model, prompt_ids, prompt_mask, ids, mask), mask


@dataclass
class PeerView:
    """The peers' records SEE collected for this learner's prompts: {prompt_id: [records]} per kind."""

    rollouts: dict = field(default_factory=dict)
    group_stats: dict = field(default_factory=dict)
    successes: dict = field(default_factory=dict)
    tokenizers: dict = field(default_factory=dict)   # {policy_id: tokenizer}, for THL


@dataclass
class ProbeOutput:
    """The loss to minimise (None: nothing to learn from this step) and per-step probe statistics.

    A probe that takes several optimizer steps itself (minibatches) returns loss None with `loss_value`
    and `grad_norm` of what it applied."""

    loss: Tensor | None
    active_sequences: int = 0
    stats: dict = field(default_factory=dict)
    loss_value: float | None = None
    grad_norm: float | None = None


def weighted_sequence_loss(logp: Tensor, mask: Tensor, advantages: Tensor, weights: Tensor) -> Tensor:
    """Per sequence token mean of -A_i w_it exp(logp_it - sg(logp_it)), summed over sequences.

    logp, mask, weights: (N, T); advantages: (N,). The value is -sum_i A_i mean_t w_it; the gradient is
    -sum_i A_i mean_t w_it grad logp_it: an importance-weighted policy-gradient term whose weights
    carry no gradient (truncated IS). Returns the sum, so callers pool it with other sequences.
    """
    per_token = -advantages[:, None] * weights.detach() * torch.exp(logp - logp.detach())
    m = mask.to(per_token.dtype)
    return ((per_token * m).sum(-1) / m.sum(-1).clamp(min=1)).sum()


def pooled_loss(own_loss: Tensor | None, n_own: int, extra_sum: Tensor | None, n_extra: int) -> Tensor | None:
    """Mean over all sequences of per-sequence losses: (n_own * own_loss + extra_sum) / (n_own + n_extra).

    own_loss is the GRPO loss (loss_type grpo: a mean over the own sequences); extra_sum a sum over
    the extra sequences (weighted_sequence_loss)."""
    parts = []
    if own_loss is not None:
        parts.append(own_loss * n_own)
    if extra_sum is not None:
        parts.append(extra_sum)
    return sum(parts) / (n_own + n_extra) if parts else None


def retokenize_rollouts(batch: LearnerBatch, peers: PeerView):
    """Every peer rollout of the step's prompts, aligned to the learner's tokenizer by THL.

    Returns ([(prompt index, record, Alignment)], failed, inexact): a sample THL cannot align is counted
    and left out; an inexact (coarse, one-group) alignment is kept and counted."""
    by_source: dict[str, list] = {}
    for x, problem in enumerate(batch.problems):
        for record in peers.rollouts.get(problem.pid, []):
            by_source.setdefault(record.policy_id, []).append((x, record))
    samples, failed, inexact = [], 0, 0
    for source in sorted(by_source):
        items = by_source[source]
        alignments = align_batch([r.completion for _, r in items], peers.tokenizers[source], batch.tokenizer,
                                 [r.token_ids for _, r in items])
        for (x, record), alignment in zip(items, alignments):
            if isinstance(alignment, ThlError) or not alignment.dst_ids:
                failed += 1
                continue
            inexact += not alignment.exact
            samples.append((x, record, alignment))
    return samples, failed, inexact


def rescored_reward(batch: LearnerBatch, x: int, record) -> float:
    """A peer sample's reward under the learner's verifier, never above what the peer claimed (0 without EOS)."""
    if record.finish_reason != "eos":
        return 0.0
    return min(record.reward, batch.verify(record.completion, batch.problems[x]))

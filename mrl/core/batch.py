"""The rollout's record: the `RolloutBatch` every probe reads (data only), the `Learner` through which a probe reaches
its policy (log-probs, tokenizer, verifier, renderer, its draws and state), and the plain functions around them (a
prompt as a policy reads it, prompts encoded and completions padded, completions decoded and scored). Sampling is
mrl.runtime.rollout.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import Tensor

from mrl.core.config import ConfigError, GrpoConfig


def as_written(prompt: str) -> str:
    """A prompt as the task wrote it (a base model's plain text)."""
    return prompt


CHAT_DATE = "26 Jul 2024"
"""the date a chat template that states one (Llama 3's "Today Date") is given, so a prompt does not change with
the day a run happens (Llama 3.2's own example date)"""


def chat_prompt(tokenizer, prompt: str) -> str:
    """A prompt as one user message through the tokenizer's chat template, the assistant's turn opened (TRL's
    conversational prompts: apply_chat_template(..., add_generation_prompt=True)); special tokens stay text and
    are encoded as such."""
    if not getattr(tokenizer, "chat_template", None):
        raise ConfigError(f"TaskConfig.chat_template = True is not allowed for {tokenizer.name_or_path!r}: its "
                          f"tokenizer has no chat template; expected an instruct checkpoint or chat_template false")
    return tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                         add_generation_prompt=True, date_string=CHAT_DATE)


def prompt_renderer(tokenizer, chat: bool) -> Callable[[str], str]:
    """What a policy reads for a task prompt: its own chat template's text when the task uses chat templates."""
    return functools.partial(chat_prompt, tokenizer) if chat else as_written


def encode_prompts(tokenizer, prompts: list[str], device: torch.device | str = "cpu") -> tuple[Tensor, Tensor]:
    """Left-padded prompt ids and mask, (B, P), without special tokens, on `device`."""
    enc = tokenizer(prompts, add_special_tokens=False, padding=True)
    return (torch.tensor(enc["input_ids"], dtype=torch.long, device=device),
            torch.tensor(enc["attention_mask"], dtype=torch.long, device=device))


StopIds = int | tuple[int, ...]
"""the token ids that end a completion: one EOS id, or a checkpoint's several (stop_ids)"""


def is_stop(ids: Tensor, stops: StopIds) -> Tensor:
    """Whether each id ends a completion (ids of any shape -> bool of that shape)."""
    if isinstance(stops, int) or len(stops) == 1:
        return ids == (stops if isinstance(stops, int) else stops[0])
    return torch.isin(ids, torch.tensor(stops, device=ids.device))


@dataclass(frozen=True)
class Decoding:
    """One decoding request, as every sampling engine reads it (mrl.runtime.rollout.sample_completions): how many
    tokens, which ids end and pad a completion, and the full softmax the tokens are drawn from."""

    max_new_tokens: int
    """T_max, the tokens drawn at most per completion"""
    eos_id: StopIds
    """the id, or ids (stop_ids), that end a completion"""
    pad_id: int
    """the id written after a completion's end"""
    temperature: float = 1.0
    """T of the softmax the tokens are drawn from (no top-k, no top-p)"""
    greedy: bool = False
    """argmax of the logits instead of a draw"""
    min_new_tokens: int = 0
    """the stop ids are suppressed for the first tokens (benchmarks with a fixed length)"""


def completion_texts(tokenizer, completion_ids: Tensor, completion_mask: Tensor,
                     eos_id: StopIds) -> list[tuple[str, bool]]:
    """(decoded text before EOS, well-formed) per completion.

    Well-formed: EOS (any of the stop ids) was emitted and no other special token (pad, unk, ...) occurs before it.
    """
    stops = set(eos_id) if isinstance(eos_id, tuple) else {eos_id}
    special = set(tokenizer.all_special_ids) - stops
    results = []
    for ids, mask in zip(completion_ids.tolist(), completion_mask.tolist()):
        ids = [i for i, m in zip(ids, mask) if m]
        ended = bool(ids) and ids[-1] in stops
        body = ids[:-1] if ended else ids
        ok = ended and not any(i in special for i in body)
        results.append((tokenizer.decode(body, skip_special_tokens=True, clean_up_tokenization_spaces=False), ok))
    return results


def score(texts: list[tuple[str, bool]], problems, verify, device: torch.device | str = "cpu") -> Tensor:
    """Reward 1 when the completion is well-formed and the verifier accepts it, else 0. Returns (B,) on `device`."""
    return torch.tensor([verify(text, p) if ok else 0.0 for (text, ok), p in zip(texts, problems)], device=device)


LogProbs = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]
"""logprobs(prompt_ids (N, P), prompt_mask (N, P), completion_ids (N, T), completion_mask (N, T)) -> (N, T):
log pi_learner of every completion token, with gradient (the model in training mode)."""


@dataclass
class RolloutBatch:
    """One policy's sampled groups of one step: P prompts x G completions, groups contiguous: tensors, problems and
    the step's settings, nothing else. The actor builds it after sampling and hands it to its probe with its
    `Learner`."""

    policy: str
    """the learner's id"""
    step: int
    """the RL step these samples belong to"""
    problems: list
    """(P,) Problem: prompt, answer, skill, pid"""
    group_size: int
    """G, completions per prompt"""
    prompt_ids: Tensor
    """(P*G, Lp) left-padded, each prompt repeated G times"""
    prompt_mask: Tensor
    """(P*G, Lp)"""
    completion_ids: Tensor
    """(P*G, T), pad after EOS"""
    completion_mask: Tensor
    """(P*G, T), 1 up to and including the first EOS"""
    sample_logp: Tensor
    """(P*G, T) log-probs at sampling (0 where masked)"""
    rewards: Tensor
    """(P*G,) the learner's verifier on its own samples"""
    grpo: GrpoConfig
    """the loss settings every own-sample term uses (aggregation, clip range, beta, scale, skipping)"""
    ref_logp: Tensor | None = None
    """(P*G, T) log-probs of the frozen reference policy, when grpo.beta > 0"""
    teacher_logp: Tensor | None = None
    """(P*G, T) a fixed teacher's log-probs of these completion tokens, projected by THL (mrl.runtime.teacher), for
    probes registered with teacher=True"""
    teacher_failed: int = 0
    """rows THL could not align to the teacher's tokenizer (their teacher_logp is sample_logp)"""
    sample_weight: Tensor | None = None
    """(P*G, T) or (P*G, 1) the sampler correction's weight pi_train / pi_sampler on the own samples' surrogate
    (mrl.core.mismatch, GrpoConfig.sampler_correction); None: no weight (an fp32 sampler is the model itself)"""

    @property
    def device(self) -> torch.device:
        """the learner's device: every tensor a probe makes for this batch goes there"""
        return self.prompt_ids.device

    @property
    def successes_per_prompt(self) -> Tensor:
        """k(x): correct samples per prompt. (P,)."""
        return (self.rewards.view(-1, self.group_size) > 0).sum(dim=1)


@dataclass(frozen=True)
class Learner:
    """What a probe may use of its policy besides the batch's data; the actor owns it and passes it to the probe
    with every update (probe(batch, peers, learner, cfg))."""

    logprobs: LogProbs
    """log pi_learner with gradient (see LogProbs): the only way a probe reaches the model"""
    tokenizer: object
    """the learner's tokenizer (targets, THL receiver)"""
    verify: Callable
    """verify(completion_text, problem) -> reward in [0, 1], the learner's own verifier"""
    generator: torch.Generator
    """the probe's own draws, derived from (seed, step, policy)"""
    state: dict = field(default_factory=dict)
    """the probe's state across steps (checkpointed with the actor)"""
    render: Callable[[str], str] = as_written
    """the learner's text of a task prompt (its chat template when the task uses one; prompt_renderer): a peer
    sample's prompt is read through it before the learner scores the peer's completion"""

    @property
    def eos_id(self) -> int:
        """the EOS mrl appends where it writes a completion"""
        return self.tokenizer.eos_token_id

    @property
    def pad_id(self) -> int:
        return self.tokenizer.pad_token_id


def pad_completions(completions: list[list[int]], pad_id: int,
                    device: torch.device | str = "cpu") -> tuple[Tensor, Tensor]:
    """Right-padded ids and mask of token lists, on `device`. -> (N, T) each, T the longest."""
    length = max(len(c) for c in completions)
    rows = [c + [pad_id] * (length - len(c)) for c in completions]
    ids = torch.tensor(rows, dtype=torch.long, device=device)
    mask = torch.tensor([[1] * len(c) + [0] * (length - len(c)) for c in completions], dtype=torch.long,
                        device=device)
    return ids, mask

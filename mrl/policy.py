"""A policy worker: sample G completions per prompt with a KV cache, score them, take a GRPO step.

Left padding everywhere with explicit position_ids (HF forward does not derive them from the
attention mask), full-softmax sampling at temperature T (no top-k), tokens after EOS masked.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from mrl.grpo import group_advantages, policy_loss


def positions(attention_mask: Tensor) -> Tensor:
    """position_ids = cumsum(mask) - 1, clamped at 0 on left padding. (B, L) -> (B, L)."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def encode_prompts(tokenizer, prompts: list[str]) -> tuple[Tensor, Tensor]:
    """Left-padded prompt ids and mask, (B, P), without special tokens."""
    enc = tokenizer(prompts, add_special_tokens=False, padding=True, return_tensors="pt")
    return enc["input_ids"], enc["attention_mask"]


@torch.no_grad()
def sample_completions(model, prompt_ids: Tensor, prompt_mask: Tensor, *, max_new_tokens: int, eos_id: int,
                       pad_id: int, generator: torch.Generator | None = None, temperature: float = 1.0,
                       greedy: bool = False, min_new_tokens: int = 0) -> tuple[Tensor, Tensor, Tensor]:
    """Sample completions token by token with a KV cache.

    prompt_ids, prompt_mask: (B, P) left-padded. Returns completion_ids (B, T), completion_mask
    (B, T) with 1 up to and including the first EOS, and the sampling log-probs (B, T) (0 where masked).
    min_new_tokens suppresses EOS for the first tokens (benchmarks with a fixed length).
    """
    batch, prompt_len = prompt_ids.shape
    attention = torch.cat([prompt_mask, torch.ones(batch, max_new_tokens, dtype=prompt_mask.dtype)], dim=1)
    out = model(input_ids=prompt_ids, attention_mask=prompt_mask, position_ids=positions(prompt_mask),
                use_cache=True, logits_to_keep=1)
    cache, logits = out.past_key_values, out.logits[:, -1]
    next_position = prompt_mask.sum(-1, keepdim=True)
    ids = torch.full((batch, max_new_tokens), pad_id, dtype=torch.long)
    logps = torch.zeros(batch, max_new_tokens)
    alive = torch.ones(batch, dtype=torch.bool)
    length = max_new_tokens
    for t in range(max_new_tokens):
        logits = logits.float()
        if t < min_new_tokens:
            logits[:, eos_id] = float("-inf")
        log_probs = torch.log_softmax(logits / temperature, dim=-1)
        if greedy:
            token = log_probs.argmax(-1)
        else:
            token = torch.multinomial(log_probs.exp(), 1, generator=generator).squeeze(-1)
        ids[:, t] = torch.where(alive, token, pad_id)
        logps[:, t] = torch.where(alive, log_probs.gather(-1, token.unsqueeze(-1)).squeeze(-1), 0.0)
        alive = alive & (token != eos_id)
        if not alive.any() or t == max_new_tokens - 1:
            length = t + 1
            break
        out = model(input_ids=token.unsqueeze(-1), attention_mask=attention[:, : prompt_len + t + 1],
                    position_ids=next_position, past_key_values=cache, use_cache=True)
        cache, logits = out.past_key_values, out.logits[:, -1]
        next_position = next_position + 1
    # the mask covers every token up to and including the first EOS
    ended_before = torch.cumsum((ids[:, :length] == eos_id).long(), dim=1) - (ids[:, :length] == eos_id).long()
    mask = ended_before == 0
    return ids[:, :length], mask.long(), logps[:, :length]


def completion_logprobs(model, prompt_ids: Tensor, prompt_mask: Tensor, completion_ids: Tensor,
                        completion_mask: Tensor) -> Tensor:
    """log pi(y_t | x, y_<t) for every completion token. Inputs (B, P) and (B, T); returns (B, T)."""
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attention = torch.cat([prompt_mask, completion_mask], dim=1)
    t = completion_ids.size(1)
    logits = model(input_ids=input_ids, attention_mask=attention, position_ids=positions(attention),
                   logits_to_keep=t + 1).logits[:, :-1].float()
    return torch.log_softmax(logits, dim=-1).gather(-1, completion_ids.unsqueeze(-1)).squeeze(-1)


def completion_texts(tokenizer, completion_ids: Tensor, completion_mask: Tensor, eos_id: int) -> list[tuple[str, bool]]:
    """(decoded text before EOS, well-formed) per completion.

    Well-formed: EOS was emitted and no other special token (pad, unk, ...) occurs before it.
    """
    special = set(tokenizer.all_special_ids) - {eos_id}
    results = []
    for ids, mask in zip(completion_ids.tolist(), completion_mask.tolist()):
        ids = [i for i, m in zip(ids, mask) if m]
        ended = bool(ids) and ids[-1] == eos_id
        body = ids[:-1] if ended else ids
        ok = ended and not any(i in special for i in body)
        results.append((tokenizer.decode(body, skip_special_tokens=True, clean_up_tokenization_spaces=False), ok))
    return results


def score(texts: list[tuple[str, bool]], problems, verify) -> Tensor:
    """Reward 1 when the completion is well-formed and the verifier accepts it, else 0. Returns (B,)."""
    return torch.tensor([verify(text, p) if ok else 0.0 for (text, ok), p in zip(texts, problems)])


@dataclass
class StepResult:
    """What one GRPO step of one policy produced."""

    rewards: Tensor
    loss: float
    grad_norm: float
    active_sequences: int
    stats: dict = field(default_factory=dict)


class PolicyWorker:
    """One policy: its model, tokenizer and Adam optimizer, sampling and GRPO updates."""

    def __init__(self, name: str, model, tokenizer, config, ref_model=None):
        self.name, self.model, self.tokenizer, self.config = name, model, tokenizer, config
        self.eos_id, self.pad_id = tokenizer.eos_token_id, tokenizer.pad_token_id
        self.optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, betas=(0.9, 0.99))
        self.ref_model = ref_model

    def sample(self, prompts: list[str], generator: torch.Generator, group_size: int | None = None):
        """G completions per prompt, groups contiguous. Returns prompt ids/mask repeated and the completions."""
        g = group_size or self.config.group_size
        prompt_ids, prompt_mask = encode_prompts(self.tokenizer, prompts)
        prompt_ids, prompt_mask = prompt_ids.repeat_interleave(g, 0), prompt_mask.repeat_interleave(g, 0)
        self.model.eval()
        completion_ids, completion_mask, sample_logp = sample_completions(
            self.model, prompt_ids, prompt_mask, max_new_tokens=self.config.max_new_tokens, eos_id=self.eos_id,
            pad_id=self.pad_id, generator=generator, temperature=self.config.temperature)
        return prompt_ids, prompt_mask, completion_ids, completion_mask, sample_logp

    def update(self, prompt_ids: Tensor, prompt_mask: Tensor, completion_ids: Tensor, completion_mask: Tensor,
               advantages: Tensor) -> tuple[float, float, int, dict]:
        """One on-policy optimizer step on the GRPO loss (`own_loss`, then `apply`)."""
        loss, n_active, stats = self.own_loss(prompt_ids, prompt_mask, completion_ids, completion_mask, advantages)
        if loss is None:
            return 0.0, 0.0, 0, {}
        return loss.item(), self.apply(loss), n_active, stats

    def own_loss(self, prompt_ids: Tensor, prompt_mask: Tensor, completion_ids: Tensor, completion_mask: Tensor,
                 advantages: Tensor) -> tuple[Tensor | None, int, dict]:
        """The GRPO loss on the policy's own samples, on-policy (ratio 1, old_logp = logp.detach(), as TRL
        with num_iterations=1). Returns (loss or None when nothing is active, active sequences, stats).

        With beta = 0 and skip_zero_advantage, rows with A = 0 are not forwarded: their loss and
        gradient are exactly 0, and the aggregation still divides by the full batch.
        """
        cfg = self.config
        self.model.train()
        active = torch.arange(len(advantages)) if (cfg.beta or not cfg.skip_zero_advantage) \
            else (advantages != 0).nonzero().squeeze(-1)
        if active.numel() == 0:
            return None, 0, {}
        logp_active = completion_logprobs(self.model, prompt_ids[active], prompt_mask[active],
                                          completion_ids[active], completion_mask[active])
        logp = torch.zeros(completion_ids.shape, dtype=logp_active.dtype).index_put((active,), logp_active)
        ref_logp = None
        if cfg.beta:
            with torch.no_grad():
                ref_logp = completion_logprobs(self.ref_model, prompt_ids, prompt_mask, completion_ids, completion_mask)
        loss, stats = policy_loss(logp, logp.detach(), advantages, completion_mask, level=cfg.level,
                                  loss_type=cfg.loss_type, eps_low=cfg.eps_low, eps_high=cfg.eps_high, beta=cfg.beta,
                                  ref_logp=ref_logp, max_completion_length=cfg.max_new_tokens,
                                  kl_bias_correction=cfg.kl_bias_correction)
        return loss, int(active.numel()), {k: v.item() for k, v in stats.items()}

    def apply(self, loss: Tensor) -> float:
        """Backward, clip the global gradient norm, one Adam step; returns the norm before clipping."""
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.grad_clip)
        self.optimizer.step()
        return grad_norm.item()

    def grpo_step(self, problems, verify, generator: torch.Generator) -> StepResult:
        """Sample G completions per problem, score them, compute group advantages and update."""
        prompt_ids, prompt_mask, completion_ids, completion_mask, _ = self.sample([p.prompt for p in problems],
                                                                                   generator)
        expanded = [p for p in problems for _ in range(self.config.group_size)]
        rewards = score(completion_texts(self.tokenizer, completion_ids, completion_mask, self.eos_id), expanded, verify)
        advantages = group_advantages(rewards, self.config.group_size, self.config.scale)
        loss, grad_norm, n_active, stats = self.update(prompt_ids, prompt_mask, completion_ids, completion_mask,
                                                       advantages)
        return StepResult(rewards, loss, grad_norm, n_active, stats)


def sample_records(model, tokenizer, prompts: list[str], generator: torch.Generator, max_new_tokens: int,
                   temperature: float = 1.0) -> list[dict]:
    """One sampled completion per prompt as an exchange record: ids (EOS included), text, per-token log-probs."""
    ids, mask = encode_prompts(tokenizer, prompts)
    completion_ids, completion_mask, logps = sample_completions(
        model, ids, mask, max_new_tokens=max_new_tokens, eos_id=tokenizer.eos_token_id,
        pad_id=tokenizer.pad_token_id, generator=generator, temperature=temperature)
    records = []
    for row_ids, row_mask, row_logp in zip(completion_ids.tolist(), completion_mask.tolist(), logps.tolist()):
        n = sum(row_mask)
        records.append({"ids": row_ids[:n], "logps": row_logp[:n],
                        "text": tokenizer.decode(row_ids[:n], skip_special_tokens=True,
                                                 clean_up_tokenization_spaces=False)})
    return records

"""Rollouts: sample G completions per prompt with a KV cache and score their tokens' log-probs (the record they
fill, RolloutBatch, and the encoding and decoding around it are mrl.core.batch).

Left padding everywhere with explicit position_ids (HF forward does not derive them from the
attention mask), full-softmax sampling at temperature T (no top-k), tokens after EOS masked.
"""
from __future__ import annotations

import math
import weakref

import torch
from torch import Tensor

from mrl.core.batch import (CHAT_DATE, Decoding, LogProbs, RolloutBatch, StopIds, as_written,  # noqa: F401
                            chat_prompt, completion_texts, encode_prompts, is_stop, pad_completions, prompt_renderer,
                            score)
from mrl.core.config import GrpoConfig
from mrl.core.engines import CAPABILITIES, Engine, engine_named
from mrl.core.stop_tokens import stop_ids
from mrl.core.token_logprobs import token_logprobs
from mrl.runtime.fast import FastForward, fast_forward
from mrl.runtime.graphs_engine import graphs_completions
from mrl.runtime.placement import set_training

_FAST: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def engine_for(model, engine: str) -> FastForward | None:
    """The fast forward of `model` when engine is "fast" and the model is one it implements, else None (the
    `transformers` forward: engine "hf", or a checkpoint the fast path does not know)."""
    if not CAPABILITIES[engine_named(engine)].fast_forward:
        return None
    if model not in _FAST:
        _FAST[model] = fast_forward(model)
    return _FAST[model]


def positions(attention_mask: Tensor) -> Tensor:
    """position_ids = cumsum(mask) - 1, clamped at 0 on left padding. (B, L) -> (B, L)."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


@torch.no_grad()
def sample_completions(model, prompt_ids: Tensor, prompt_mask: Tensor, decoding: Decoding,
                       generator: torch.Generator | None = None, *, engine: str = "hf",
                       with_logprobs: bool = True) -> tuple[Tensor, Tensor, Tensor | None]:
    """Sample completions token by token with a KV cache.

    prompt_ids, prompt_mask: (B, P) left-padded. Returns completion_ids (B, T), completion_mask
    (B, T) with 1 up to and including the first EOS, and the sampling log-probs (B, T) (0 where masked).
    decoding: what every engine reads: T_max, the stop ids (eos_id) and pad id, the temperature, greedy, and
    min_new_tokens, which suppresses EOS for the first tokens (benchmarks with a fixed length).
    engine: "fast" (mrl.runtime.fast's static cache over the model's weights, when it knows the model), "hf" (the
    `transformers` forward with its dynamic cache), "generate" (generate_completions), "batched"
    (batched_completions) or "graphs" (mrl.runtime.graphs_engine: the decode step captured in CUDA graphs on a GPU,
    whose log-probs are the sampler's own, as the loops'). with_logprobs: False lets the generate and batched engines
    skip their log-prob forward and return None (the loops get them for free).
    """
    engine = engine_named(engine)
    if engine is Engine.GRAPHS:
        return graphs_completions(model, prompt_ids, prompt_mask, decoding, generator)
    if not CAPABILITIES[engine].own_logprobs:   # transformers draws; a forward scores what it drew
        draw = generate_completions if engine is Engine.GENERATE else batched_completions
        ids, mask = draw(model, prompt_ids, prompt_mask, decoding, generator)
        logp = None
        if with_logprobs:
            logp = completion_logprobs(model, prompt_ids, prompt_mask, ids, mask, temperature=decoding.temperature)
            logp = logp * mask
        return ids, mask, logp
    max_new_tokens, eos_id, pad_id = decoding.max_new_tokens, decoding.eos_id, decoding.pad_id
    temperature, greedy, min_new_tokens = decoding.temperature, decoding.greedy, decoding.min_new_tokens
    batch, prompt_len = prompt_ids.shape
    device = prompt_ids.device
    attention = torch.cat([prompt_mask, torch.ones(batch, max_new_tokens, dtype=prompt_mask.dtype, device=device)],
                          dim=1)
    fast = engine_for(model, engine)
    if fast is not None:
        cache = fast.new_cache(batch, prompt_len + max_new_tokens)
        logits = fast.prefill(cache, prompt_ids, prompt_mask, positions(prompt_mask))
    else:
        out = model(input_ids=prompt_ids, attention_mask=prompt_mask, position_ids=positions(prompt_mask),
                    use_cache=True, logits_to_keep=1)
        cache, logits = out.past_key_values, out.logits[:, -1]
    fused = None   # the fast decode step's fused weights, taken at its first call (the weights do not change meanwhile)
    next_position = prompt_mask.sum(-1, keepdim=True)
    ids = torch.full((batch, max_new_tokens), pad_id, dtype=torch.long, device=device)
    logps = torch.zeros(batch, max_new_tokens, device=device)
    alive = torch.ones(batch, dtype=torch.bool, device=device)
    length = max_new_tokens
    for t in range(max_new_tokens):
        logits = logits.float()
        if t < min_new_tokens:
            logits[:, list(eos_id) if isinstance(eos_id, tuple) else eos_id] = float("-inf")
        log_probs = torch.log_softmax(logits / temperature if temperature != 1.0 else logits, dim=-1)
        token = log_probs.argmax(-1) if greedy else categorical_draw(log_probs.exp(), generator)
        ids[:, t] = torch.where(alive, token, pad_id)
        logps[:, t] = torch.where(alive, log_probs.gather(-1, token.unsqueeze(-1)).squeeze(-1), 0.0)
        alive = alive & ~is_stop(token, eos_id)
        if not alive.any() or t == max_new_tokens - 1:
            length = t + 1
            break
        if fast is not None:
            if fused is None:
                fused = fast.fused_weights()
            logits = fast.decode(cache, token, prompt_len + t, attention, next_position[:, 0], fused)
        else:
            out = model(input_ids=token.unsqueeze(-1), attention_mask=attention[:, : prompt_len + t + 1],
                        position_ids=next_position, past_key_values=cache, use_cache=True)
            cache, logits = out.past_key_values, out.logits[:, -1]
        next_position = next_position + 1
    return ids[:, :length], first_eos_mask(ids[:, :length], eos_id), logps[:, :length]


def categorical_draw(probs: Tensor, generator: torch.Generator | None) -> Tensor:
    """One token per row drawn from probs (B, V) -> (B,): argmax_v p_v / q_v with q_v = -log u_v, u ~ U[0, 1)
    i.i.d. (the Gumbel-max trick in exponential form, torch.multinomial's own algorithm for one draw). Written out
    because multinomial's input checks and torch's exponential_ took 4x as long as torch.rand and a log on a
    decode step's (128, 48) probabilities. A token of probability 0 is never drawn."""
    exponentials = torch.rand(probs.shape, generator=generator, device=probs.device).log_().neg_()
    return probs.div(exponentials).argmax(-1)


def first_eos_mask(ids: Tensor, eos_id: StopIds) -> Tensor:
    """1 for every token up to and including the first EOS (any of the stop ids) of each row, else 0. (B, T) ->
    (B, T) long."""
    is_eos = is_stop(ids, eos_id).long()
    return ((torch.cumsum(is_eos, dim=1) - is_eos) == 0).long()


GENERATE_PREFILL_CHUNK = 64
"""prompt tokens per prefill forward of the generate engine (transformers' prefill_chunk_size, no compilation):
its temporaries are one layer's over B x 64 tokens, not over every prompt token of the batch at once"""


@torch.no_grad()
def generate_completions(model, prompt_ids: Tensor, prompt_mask: Tensor, decoding: Decoding,
                         generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """Completions drawn by `transformers`' generate with a static (preallocated) KV cache: full-softmax sampling
    at decoding's temperature (the checkpoint's own generation defaults, top-k, top-p and repetition penalty among them,
    are set aside for the call), tokens after the first EOS masked, no compilation (the prompt length changes
    every step). generate takes no generator: it draws from torch's global generator, seeded from `generator`
    inside a fork of the RNG state, which is restored after. The prompts are prefilled GENERATE_PREFILL_CHUNK
    tokens at a time. -> completion_ids, completion_mask, each (B, T); the sampling log-probs are the training
    forward's (sample_completions)."""
    from transformers import GenerationConfig

    max_new_tokens, eos_id, pad_id = decoding.max_new_tokens, decoding.eos_id, decoding.pad_id
    temperature, greedy, min_new_tokens = decoding.temperature, decoding.greedy, decoding.min_new_tokens
    config = GenerationConfig(do_sample=not greedy, temperature=temperature if not greedy else None, top_k=0,
                              top_p=1.0, max_new_tokens=max_new_tokens, min_new_tokens=min_new_tokens,
                              eos_token_id=list(eos_id) if isinstance(eos_id, tuple) else eos_id,
                              pad_token_id=pad_id, cache_implementation="static",
                              prefill_chunk_size=GENERATE_PREFILL_CHUNK,
                              disable_compile=True)
    seed = 0 if generator is None else int(torch.randint(2 ** 62, (1,), generator=generator, device=generator.device))
    devices = [prompt_ids.device] if prompt_ids.device.type == "cuda" else []
    own, model.generation_config = model.generation_config, config  # generate fills unset fields from the model's
    try:
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            out = model.generate(input_ids=prompt_ids, attention_mask=prompt_mask, generation_config=config)
    finally:
        model.generation_config = own
        # generate sizes every later static cache to the longest call so far (for compilation, which mrl does not
        # use): forgotten, so a long evaluation does not grow the training rollouts' caches after it
        model.__dict__.pop("_previous_max_cache_length", None)
    ids = out[:, prompt_ids.size(1):]
    mask = first_eos_mask(ids, eos_id)
    return torch.where(mask.bool(), ids, pad_id), mask


BATCHED_PAGE = 16
"""tokens per page of the batched engine's paged KV cache"""
BATCHED_STEP_TOKENS = 8192
"""tokens one forward of the batched engine takes at most, prompts' prefill chunks included: it bounds the
forward's temporaries (logits, attention), which generate's one-pass prefill of every prompt does not"""
BATCHED_MASK_BYTES = 2 ** 28
"""the sdpa path's attention mask holds step tokens x cache tokens floats: the step shrinks to keep it under this"""


def batched_paging(prompt_lengths: list[int], max_new_tokens: int, mask_bytes: int = 4):
    """transformers' ContinuousBatchingConfig for one call of the batched engine: a paged cache of exactly the
    pages its requests can fill (transformers' default sizes it to most of the free memory: seconds to allocate on a
    CPU, and no bound on a shared GPU), and at most BATCHED_STEP_TOKENS tokens per forward, fewer where the sdpa
    attention mask (step x cache tokens, mask_bytes each: the model's dtype) would pass BATCHED_MASK_BYTES, but never
    fewer than one decode token per request (every sequence advances at every forward) nor than the longest
    prompt."""
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    pages = sum(math.ceil((length + max_new_tokens) / BATCHED_PAGE) for length in prompt_lengths)
    step = min(BATCHED_STEP_TOKENS, sum(prompt_lengths) + len(prompt_lengths),
               BATCHED_MASK_BYTES // (mask_bytes * pages * BATCHED_PAGE))
    return ContinuousBatchingConfig(page_size=BATCHED_PAGE, num_blocks=pages,
                                    max_batch_tokens=max(step, len(prompt_lengths), max(prompt_lengths) + 1))


@torch.no_grad()
def batched_completions(model, prompt_ids: Tensor, prompt_mask: Tensor, decoding: Decoding,
                        generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """Completions drawn by `transformers`' continuous batching (`generate_batch`): one request per row, a paged
    KV cache in which a finished sequence frees its blocks for the next request, so no row waits for the longest.
    It runs in this process on the model's own weights (the bf16 sampler), so nothing is transferred after an
    update. Sampling is generate_completions': the full softmax at decoding's temperature (the checkpoint's top-k,
    top-p and penalties set aside), torch's global generator seeded from `generator` inside a fork of the RNG state.
    prompt_ids, prompt_mask: (B, P) left-padded -> completion_ids, completion_mask, each (B, T), T the longest
    completion, pad after the first EOS."""
    from transformers import GenerationConfig

    max_new_tokens, eos_id, pad_id = decoding.max_new_tokens, decoding.eos_id, decoding.pad_id
    temperature, greedy, min_new_tokens = decoding.temperature, decoding.greedy, decoding.min_new_tokens
    if min_new_tokens and min_new_tokens != max_new_tokens:   # continuous batching applies no min_new_tokens
        raise ValueError(f"engine batched: min_new_tokens = {min_new_tokens} is not allowed; expected 0 or "
                         f"max_new_tokens ({max_new_tokens}), a fixed length")
    fixed = bool(min_new_tokens)   # a fixed length (the benchmarks' equal work): no id stops a completion. EOS is
    # ignored, not suppressed as in the loops: it may occur inside, and the mask keeps every token
    config = GenerationConfig(do_sample=not greedy, temperature=temperature if not greedy else None, top_k=0,
                              top_p=1.0, max_new_tokens=max_new_tokens,
                              eos_token_id=None if fixed else list(eos_id) if isinstance(eos_id, tuple) else eos_id,
                              pad_token_id=pad_id)
    prompts = [row[keep.bool()].tolist() for row, keep in zip(prompt_ids, prompt_mask)]
    paging = batched_paging([len(prompt) for prompt in prompts], max_new_tokens, model.dtype.itemsize)
    seed = 0 if generator is None else int(torch.randint(2 ** 62, (1,), generator=generator, device=generator.device))
    devices = [prompt_ids.device] if prompt_ids.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        out = model.generate_batch(prompts, generation_config=config, continuous_batching_config=paging,
                                   progress_bar=False, warmup=False)
    # request ids are "req_<row>": read back in row order, whatever order the requests finished in
    rows = sorted(out.values(), key=lambda output: int(output.request_id.rsplit("_", 1)[1]))
    if len(rows) != len(prompts) or any(output.error for output in rows):
        failed = [output.request_id for output in rows if output.error]
        raise RuntimeError(f"batched_completions: {len(rows)} of {len(prompts)} requests came back; failed: {failed}")
    completions = [output.generated_tokens[:max_new_tokens] for output in rows]
    ids, _ = pad_completions(completions, pad_id, prompt_ids.device)   # a row shorter than T ended with an EOS
    mask = torch.ones_like(ids) if fixed else first_eos_mask(ids, eos_id)
    return torch.where(mask.bool(), ids, pad_id), mask


def completion_logprobs(model, prompt_ids: Tensor, prompt_mask: Tensor, completion_ids: Tensor,
                        completion_mask: Tensor, engine: str = "hf", temperature: float = 1.0,
                        chunk: int = 0) -> Tensor:
    """log pi(y_t | x, y_<t) for every completion token, of the softmax at `temperature` (the distribution the
    tokens were sampled from). Inputs (B, P) and (B, T); returns (B, T). engine: "fast" or "hf" ("generate"
    scores with hf); both carry gradient to the model's parameters. chunk > 0: `chunk` rows at a time, for the
    passes without a graph (the peak logits are one chunk's)."""
    if chunk and len(prompt_ids) > chunk:
        return torch.cat([completion_logprobs(model, prompt_ids[i:i + chunk], prompt_mask[i:i + chunk],
                                              completion_ids[i:i + chunk], completion_mask[i:i + chunk], engine,
                                              temperature) for i in range(0, len(prompt_ids), chunk)])
    attention = torch.cat([prompt_mask, completion_mask], dim=1)
    fast = engine_for(model, engine)
    if fast is not None:
        logits = fast.completion_logits(prompt_ids, prompt_mask, completion_ids, completion_mask,
                                        positions(attention))
    else:
        logits = model(input_ids=torch.cat([prompt_ids, completion_ids], dim=1), attention_mask=attention,
                       position_ids=positions(attention), logits_to_keep=completion_ids.size(1) + 1).logits
    return token_logprobs(logits, completion_ids, temperature)   # the last position predicts past the completion


def sample_records(model, tokenizer, prompts: list[str], generator: torch.Generator, max_new_tokens: int,
                   temperature: float = 1.0) -> list[dict]:
    """One sampled completion per prompt as an exchange record: ids (EOS included), text, per-token log-probs."""
    ids, mask = encode_prompts(tokenizer, prompts, model.device)
    decoding = Decoding(max_new_tokens=max_new_tokens, eos_id=stop_ids(tokenizer), pad_id=tokenizer.pad_token_id,
                        temperature=temperature)
    completion_ids, completion_mask, logps = sample_completions(model, ids, mask, decoding, generator)
    records = []
    for row_ids, row_mask, row_logp in zip(completion_ids.tolist(), completion_mask.tolist(), logps.tolist()):
        n = sum(row_mask)
        records.append({"ids": row_ids[:n], "logps": row_logp[:n],
                        "text": tokenizer.decode(row_ids[:n], skip_special_tokens=True,
                                                 clean_up_tokenization_spaces=False)})
    return records


def sample_groups(model, tokenizer, prompts: list[str], generator: torch.Generator, grpo: GrpoConfig,
                  with_logprobs: bool = True) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor | None]:
    """G = grpo.group_size completions per prompt, groups contiguous, at grpo.temperature, up to grpo.max_new_tokens,
    on grpo.engine: (prompt_ids, prompt_mask) repeated G times, each (P*G, Lp), and (completion_ids, completion_mask,
    sample_logp), each (P*G, T) (sample_logp None when the generate engine is told to skip it: with_logprobs
    False)."""
    group_size = grpo.group_size
    prompt_ids, prompt_mask = encode_prompts(tokenizer, prompts, model.device)
    prompt_ids, prompt_mask = prompt_ids.repeat_interleave(group_size, 0), prompt_mask.repeat_interleave(group_size, 0)
    set_training(model, False)
    decoding = Decoding(max_new_tokens=grpo.max_new_tokens, eos_id=stop_ids(tokenizer), pad_id=tokenizer.pad_token_id,
                        temperature=grpo.temperature)
    completion_ids, completion_mask, sample_logp = sample_completions(
        model, prompt_ids, prompt_mask, decoding, generator, engine=grpo.engine, with_logprobs=with_logprobs)
    return prompt_ids, prompt_mask, completion_ids, completion_mask, sample_logp



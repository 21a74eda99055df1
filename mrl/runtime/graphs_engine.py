"""The graphs engine: sampling whose decode step is captured in CUDA graphs over a static KV cache.

A call pads its batch to a bucket (batch_bucket), sizes its cache in multiples of BUCKET and prefills the prompts;
each decode step (the forward over the last token, the full-softmax draw, the stop ids, the sampler's log-probs)
then reads and writes only tensors of fixed address, so on a GPU it is captured once per (batch, attended length)
bucket a call reaches and replayed, and on a CPU the same step runs eagerly, which is how CI tests it. The graphs
and the KV cache live for one call. How a call runs, and why CUDA graphs and not torch.compile: docs/performance.md,
The graphs engine on a GPU.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor
from transformers.cache_utils import Cache, CacheLayerMixin

from mrl.core.batch import Decoding

BUCKET = 64
"""prompt lengths, cache lengths and attended lengths are multiples of this many tokens"""
GRAPHS_PREFILL_TOKENS = 8192
"""prompt tokens per prefill forward (whole prompts: at least one a forward), as the batched engine caps its forwards"""
EXIT_EVERY = 32
"""decode steps between the host's checks that some row is still alive (one sync each) on a GPU; every step on a CPU"""
WARMUP_STEPS = 2
"""eager decode steps on a side stream before the first capture (cuBLAS and attention workspaces made outside it)"""


def batch_bucket(rows: int) -> int:
    """The batch a call of `rows` sequences is padded to: the next power of two up to 64, then a multiple of 64."""
    return 1 << max(rows - 1, 0).bit_length() if rows <= 64 else math.ceil(rows / 64) * 64


def length_bucket(tokens: int) -> int:
    """`tokens` rounded up to a multiple of BUCKET (at least BUCKET)."""
    return max(1, math.ceil(tokens / BUCKET)) * BUCKET


def cache_shape(rows: int, prompt_tokens: int, new_tokens: int) -> tuple[int, int]:
    """(batch, cache length) of a call's static cache: the batch bucket, and the prompt and completion tokens rounded
    up to BUCKET."""
    return batch_bucket(rows), length_bucket(prompt_tokens + new_tokens)


@dataclass
class CacheWindow:
    """What the cache's layers read and write in the current forward: prompt rows (prefill: `rows` of the batch, their
    prompts at [0, P)) or every row (decode: one token at `write`, keys [0, view) returned)."""

    rows: slice | None
    """the prefill's rows; None while decoding"""
    write: Tensor
    """(1,) the cache index the decoded token is written at (on the device): P after the prefill"""
    view: int = 0
    """the attended length of the decode step (a multiple of BUCKET)"""


class BucketLayer(CacheLayerMixin):
    """One layer's static keys and values (B, kv_heads, S, head_dim), allocated at the first prefill in the dtype of
    the keys it is given (transformers' StaticLayer writes at a device counter too, but returns the whole cache)."""

    is_sliding = False

    def __init__(self, window: CacheWindow, shape: tuple[int, int, int, int]):
        super().__init__()
        self.window, self.shape = window, shape

    def lazy_initialization(self, key_states: Tensor, value_states: Tensor) -> None:
        self.keys = torch.zeros(self.shape, dtype=key_states.dtype, device=key_states.device)
        self.values = torch.zeros(self.shape, dtype=value_states.dtype, device=value_states.device)
        self.is_initialized = True

    def update(self, key_states: Tensor, value_states: Tensor, *args, **kwargs) -> tuple[Tensor, Tensor]:
        window = self.window
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        if window.rows is not None:   # prefill: the prompts, as the reference's forward sees them
            self.keys[window.rows, :, : key_states.shape[2]] = key_states
            self.values[window.rows, :, : value_states.shape[2]] = value_states
            return key_states, value_states
        self.keys.index_copy_(2, window.write, key_states)
        self.values.index_copy_(2, window.write, value_states)
        return self.keys[:, :, : window.view], self.values[:, :, : window.view]

    def get_seq_length(self) -> int:
        return 0

    def get_max_length(self) -> int:
        return self.shape[2]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.shape[2], 0


def bucket_cache(model, window: CacheWindow, rows: int, length: int):
    """A transformers Cache of BucketLayers for `model` (every layer full attention), rows x length tokens."""
    config = model.config.get_text_config(decoder=True)
    kinds = set(getattr(config, "layer_types", None) or ["full_attention"])
    if kinds != {"full_attention"}:
        raise ValueError(f"engine graphs: layer types {sorted(kinds)} are not allowed; expected full_attention only "
                         f"(the static cache has no sliding window)")
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    return Cache(layers=[BucketLayer(window, (rows, kv_heads, length, head_dim))
                         for _ in range(config.num_hidden_layers)])


@dataclass
class DecodeState:
    """The tensors a decode step reads and writes in place (fixed addresses, so that a captured step replays)."""

    token: Tensor
    """(B,) the last drawn token (pad once a row has ended), the next forward's input"""
    position: Tensor
    """(B, 1) its position id"""
    column: Tensor
    """(1,) the completion column the next draw fills"""
    alive: Tensor
    """(B,) rows that have not drawn a stop id (False for the batch bucket's padding rows)"""
    length: Tensor
    """(B,) tokens kept per row, the stop id included"""
    ids: Tensor
    """(B, T) completion ids, pad after the stop id"""
    logps: Tensor
    """(B, T) the sampler's log-probs of its draws at the temperature, 0 after the stop id"""
    keys_valid: Tensor
    """(B, S) keys a row may attend: its prompt tokens, then every completion slot"""
    key_index: Tensor
    """(S,) 0 .. S - 1"""
    stops: Tensor
    """(n,) the stop ids"""

    def counters(self) -> list[Tensor]:
        return [self.token, self.position, self.column, self.alive, self.length]


def draw(logits: Tensor, state: DecodeState, decoding: Decoding, noise: torch.Generator | None) -> None:
    """One token per row from logits (B, V): z = logits / T in float32, the stop ids' logits -inf while fewer than
    min_new_tokens are drawn; greedy argmax z, else the Gumbel-max draw argmax_v z_v - log E_v with E_v ~ Exp(1)
    i.i.d. from `noise` (categorical_draw's algorithm, in log form); log p = z_token - logsumexp z. Writes the
    column of ids and logps, and advances the row's length, alive and token, all on the device."""
    z = logits.float()
    if decoding.temperature != 1.0:
        z = z / decoding.temperature
    if decoding.min_new_tokens:
        early = state.column < decoding.min_new_tokens
        z.index_copy_(1, state.stops, z.index_select(1, state.stops).masked_fill(early, float("-inf")))
    normalizer = torch.logsumexp(z, -1)   # before the noise: the two (B, V) temporaries never coexist
    if decoding.greedy:
        token = z.argmax(-1)
    else:
        exponentials = torch.empty_like(z).exponential_(generator=noise)
        token = torch.sub(z, exponentials.log_(), out=exponentials).argmax(-1)
        del exponentials
    logp = z.gather(1, token.unsqueeze(1)).squeeze(1) - normalizer
    alive = state.alive
    token = torch.where(alive, token, decoding.pad_id)
    state.ids.index_copy_(1, state.column, token.unsqueeze(1))
    state.logps.index_copy_(1, state.column, torch.where(alive, logp, 0.0).unsqueeze(1))
    state.length.add_(alive.long())
    alive.logical_and_((token.unsqueeze(1) != state.stops).all(1))
    state.token.copy_(token)
    state.column.add_(1)


def decode_step(model, cache, window: CacheWindow, state: DecodeState, decoding: Decoding,
                noise: torch.Generator | None, view: int) -> None:
    """The step a graph captures: the forward over each row's last token at cache index `window.write`, attending
    keys [0, view) of its prompt and completion so far, then draw."""
    window.view = view
    rows = state.token.shape[0]
    visible = state.keys_valid[:, :view] & (state.key_index[:view] <= window.write)
    logits = model(input_ids=state.token.unsqueeze(1), attention_mask=visible.view(rows, 1, 1, view),
                   position_ids=state.position, past_key_values=cache, use_cache=True, logits_to_keep=1).logits
    window.write.add_(1)
    state.position.add_(1)
    draw(logits[:, -1], state, decoding, noise)


def prefill(model, cache, window: CacheWindow, prompt_ids: Tensor, prompt_mask: Tensor) -> Tensor:
    """The prompts' keys and values into the cache, whole prompts GRAPHS_PREFILL_TOKENS tokens a forward, each the
    reference's forward over its P tokens (not over the bucket's padding: the causal mask over each row's own
    tokens, positions from its mask); returns the last position's logits (B, V)."""
    rows, length = prompt_ids.shape
    causal = torch.ones(length, length, dtype=torch.bool, device=prompt_ids.device).tril()
    per_forward = max(1, GRAPHS_PREFILL_TOKENS // length)
    logits = []
    for start in range(0, rows, per_forward):
        window.rows = slice(start, min(start + per_forward, rows))
        ids, mask = prompt_ids[window.rows], prompt_mask[window.rows]
        visible = causal & mask.bool()[:, None, None, :]
        position = (mask.cumsum(-1) - 1).clamp(min=0)
        logits.append(model(input_ids=ids, attention_mask=visible, position_ids=position, past_key_values=cache,
                            use_cache=True, logits_to_keep=1).logits[:, -1])
    window.rows = None
    return torch.cat(logits)


@torch.no_grad()
def graphs_completions(model, prompt_ids: Tensor, prompt_mask: Tensor, decoding: Decoding,
                       generator: torch.Generator | None = None, *,
                       capture: bool | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """Completions drawn with the decode step captured in CUDA graphs (capture None: on a CUDA device; False runs
    the same steps eagerly). prompt_ids, prompt_mask: (B, P) left-padded. The draws come from a generator of the
    model's device seeded from `generator` (torch's global generator is not touched), so a seed gives the same
    draws. -> completion_ids (B, T) with pad after the first stop id, completion_mask (B, T) 1 up to and including
    it, and the sampler's log-probs (B, T) at decoding's temperature, 0 where masked; T the longest completion."""
    max_new_tokens, eos_id, pad_id = decoding.max_new_tokens, decoding.eos_id, decoding.pad_id
    device = prompt_ids.device
    rows, prompt_len = prompt_ids.shape
    batch, length = cache_shape(rows, prompt_len, max_new_tokens)
    capture = device.type == "cuda" if capture is None else capture
    stops = torch.tensor(eos_id if isinstance(eos_id, tuple) else (eos_id,), dtype=torch.long, device=device)

    # the batch bucket's extra rows repeat row 0 (finite attention everywhere) and start finished
    ids = torch.cat([prompt_ids, prompt_ids[:1].expand(batch - rows, -1)])
    mask = torch.cat([prompt_mask, prompt_mask[:1].expand(batch - rows, -1)])
    keys_valid = torch.ones(batch, length, dtype=torch.bool, device=device)
    keys_valid[:, :prompt_len] = mask.bool()
    alive = torch.zeros(batch, dtype=torch.bool, device=device)
    alive[:rows] = True
    state = DecodeState(token=torch.full((batch,), pad_id, dtype=torch.long, device=device),
                        position=mask.sum(-1, keepdim=True), column=torch.zeros(1, dtype=torch.long, device=device),
                        alive=alive, length=torch.zeros(batch, dtype=torch.long, device=device),
                        ids=torch.full((batch, max_new_tokens), pad_id, dtype=torch.long, device=device),
                        logps=torch.zeros(batch, max_new_tokens, device=device), keys_valid=keys_valid,
                        key_index=torch.arange(length, device=device), stops=stops)
    noise = None
    if not decoding.greedy:
        seed = 0 if generator is None else int(torch.randint(2 ** 62, (1,), generator=generator,
                                                             device=generator.device))
        noise = torch.Generator(device).manual_seed(seed)

    window = CacheWindow(rows=None, write=torch.full((1,), prompt_len, dtype=torch.long, device=device))
    cache = bucket_cache(model, window, batch, length)
    draw(prefill(model, cache, window, ids, mask), state, decoding, noise)

    step = CapturedSteps(model, cache, window, state, decoding, noise) if capture else None
    check = EXIT_EVERY if capture else 1
    for t in range(1, max_new_tokens):
        if t % check == 0 and not bool(state.alive.any()):
            break
        view = min(length, length_bucket(prompt_len + t))   # the token fed at step t sits at cache index P + t - 1
        if step is None:
            decode_step(model, cache, window, state, decoding, noise, view)
        else:
            step.replay(view)
    longest = int(state.length[:rows].max()) if rows else 0
    kept = torch.arange(longest, device=device) < state.length[:rows, None]
    return state.ids[:rows, :longest], kept.long(), state.logps[:rows, :longest]


class CapturedSteps:
    """decode_step captured once per attended length and replayed; the graphs share one memory pool (they run one
    after another) and the draws' generator is registered with each. Before the first capture the step runs
    WARMUP_STEPS times eagerly on a side stream, its counters and the generator restored after (the cache slots and
    columns it wrote are written again by the real steps before they are read)."""

    def __init__(self, model, cache, window: CacheWindow, state: DecodeState, decoding: Decoding,
                 noise: torch.Generator | None):
        self.step = lambda view: decode_step(model, cache, window, state, decoding, noise, view)
        self.window, self.state, self.noise = window, state, noise
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.pool = None
        self.stream = torch.cuda.Stream(device=state.token.device)

    def warm_up(self, view: int) -> None:
        saved = [tensor.clone() for tensor in (*self.state.counters(), self.window.write)]
        rng = self.noise.get_state() if self.noise is not None else None
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            for _ in range(WARMUP_STEPS):
                self.step(view)
        torch.cuda.current_stream().wait_stream(self.stream)
        for tensor, value in zip((*self.state.counters(), self.window.write), saved):
            tensor.copy_(value)
        if rng is not None:
            self.noise.set_state(rng)

    def replay(self, view: int) -> None:
        if view not in self.graphs:
            if not self.graphs:
                self.warm_up(view)
            graph = torch.cuda.CUDAGraph()
            if self.noise is not None:
                graph.register_generator_state(self.noise)
            with torch.cuda.graph(graph, pool=self.pool, stream=self.stream):
                self.step(view)
            self.pool = graph.pool()
            self.graphs[view] = graph
        self.graphs[view].replay()

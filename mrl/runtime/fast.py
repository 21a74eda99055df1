"""A fast forward for the zoo's three architectures (GPT-2, Llama, Qwen2) over the model's own weights.

Hand-written because the tiny models spend their time in per-call overhead of the `transformers` modules
(mask construction, cache objects, output dataclasses, dozens of small modules per layer), not in
arithmetic: the same equations as `transformers` written as a few tensor calls per layer, with a static
preallocated KV cache for sampling. The parameters are the `transformers` model's own tensors (no copy),
so gradients reach them and the optimizer, checkpoints and the `hf` path see one model.

`fast_forward(model)` returns a `FastForward` for a model it knows exactly (float32 on the CPU, no dropout,
default rotary embeddings, no sliding window, no MLP biases) and None otherwise: the caller then uses
`transformers`. On the real (unmasked) positions the log-probs equal the `transformers` forward within 1e-5
(tests/test_fast.py, per architecture).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor


@dataclass
class Layer:
    """One transformer block's weights (references to the model's parameters)."""

    norm1: tuple            # (weight, bias or None) of the pre-attention norm
    qkv: tuple              # gpt2: (W (d, 3d), b); llama/qwen2: (Wq, bq, Wk, bk, Wv, bv) in nn.Linear layout
    out: tuple              # (W, b or None) of the attention output projection
    norm2: tuple
    mlp: tuple              # gpt2: (W_fc, b_fc, W_proj, b_proj) Conv1D layout; llama/qwen2: (W_gate, W_up, W_down)


class FastForward:
    """Logits of a causal LM with explicit position ids, written out per architecture.

    arch: gpt2 (LayerNorm, learned positions, Conv1D, gelu_new) or llama / qwen2 (RMSNorm, rotary, GQA,
    SwiGLU; qwen2 with q/k/v biases). All inputs left-padded: mask (B, L) marks real tokens.
    """

    def __init__(self, model):
        config = model.config
        self.arch = config.model_type
        self.n_heads = config.num_attention_heads if self.arch != "gpt2" else config.n_head
        self.n_kv = getattr(config, "num_key_value_heads", None) or self.n_heads
        d = config.hidden_size if self.arch != "gpt2" else config.n_embd
        self.head_dim = getattr(config, "head_dim", None) or d // self.n_heads
        self.scale = 1.0 / math.sqrt(self.head_dim)
        if self.arch == "gpt2":
            self.eps = config.layer_norm_epsilon
            base = model.transformer
            self.embed, self.positions = base.wte.weight, base.wpe.weight
            self.layers = [Layer((h.ln_1.weight, h.ln_1.bias), (h.attn.c_attn.weight, h.attn.c_attn.bias),
                                 (h.attn.c_proj.weight, h.attn.c_proj.bias), (h.ln_2.weight, h.ln_2.bias),
                                 (h.mlp.c_fc.weight, h.mlp.c_fc.bias, h.mlp.c_proj.weight, h.mlp.c_proj.bias))
                           for h in base.h]
            self.final_norm = (base.ln_f.weight, base.ln_f.bias)
        else:
            self.eps = config.rms_norm_eps
            base = model.model
            self.embed, self.positions = base.embed_tokens.weight, None
            self.layers = []
            for layer in base.layers:
                a, m = layer.self_attn, layer.mlp
                self.layers.append(Layer((layer.input_layernorm.weight, None),
                                         (a.q_proj.weight, a.q_proj.bias, a.k_proj.weight, a.k_proj.bias,
                                          a.v_proj.weight, a.v_proj.bias),
                                         (a.o_proj.weight, a.o_proj.bias),
                                         (layer.post_attention_layernorm.weight, None),
                                         (m.gate_proj.weight, m.up_proj.weight, m.down_proj.weight)))
            self.final_norm = (base.norm.weight, None)
            self.rotary_embedding = base.rotary_emb
        self.lm_head = model.lm_head.weight

    # --- pieces ---------------------------------------------------------------------------------------

    def norm(self, x: Tensor, weights: tuple) -> Tensor:
        weight, bias = weights
        if self.arch == "gpt2":
            return F.layer_norm(x, (x.size(-1),), weight, bias, self.eps)
        return F.rms_norm(x, (x.size(-1),), weight, self.eps)

    def rotary(self, position_ids: Tensor) -> tuple[Tensor, Tensor] | None:
        """cos, sin of the rotary embedding, (B, 1, L, head_dim) each; None for gpt2 (learned positions)."""
        if self.arch == "gpt2":
            return None
        freqs = position_ids[..., None].float() * self.rotary_embedding.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos()[:, None], emb.sin()[:, None]

    @staticmethod
    def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        half = x.size(-1) // 2
        return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin

    def project_qkv(self, layer: Layer, h: Tensor, rope) -> tuple[Tensor, Tensor, Tensor]:
        """(q (B, H, L, hd), k (B, Hkv, L, hd), v (B, Hkv, L, hd)) of the normalised hidden states h (B, L, d)."""
        batch, length, _ = h.shape
        if self.arch == "gpt2":
            weight, bias = layer.qkv
            q, k, v = torch.addmm(bias, h.reshape(-1, h.size(-1)), weight).view(batch, length, 3, self.n_heads,
                                                                                self.head_dim).unbind(2)
        else:
            wq, bq, wk, bk, wv, bv = layer.qkv
            q = F.linear(h, wq, bq).view(batch, length, self.n_heads, self.head_dim)
            k = F.linear(h, wk, bk).view(batch, length, self.n_kv, self.head_dim)
            v = F.linear(h, wv, bv).view(batch, length, self.n_kv, self.head_dim)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if rope is not None:
            q, k = self.rotate(q, *rope), self.rotate(k, *rope)
        return q, k, v

    def attend(self, q: Tensor, k: Tensor, v: Tensor, bias: Tensor) -> Tensor:
        """softmax(q k^T / sqrt(hd) + bias) v, the G = H / Hkv query heads of a key head as G * Lq rows of one
        matmul over its keys (a broadcast over G would copy the keys G times, forward and backward).
        q (B, H, Lq, hd), k, v (B, Hkv, Lk, hd), bias (B, 1, Lq, Lk) additive (-inf where masked).
        Returns (B, Lq, H * hd)."""
        batch, _, length, _ = q.shape
        group, keys = self.n_heads // self.n_kv, k.size(2)
        scores = torch.matmul(q.reshape(batch, self.n_kv, group * length, self.head_dim), k.transpose(-1, -2))
        scores = (scores * self.scale).view(batch, self.n_kv, group, length, keys) + bias.unsqueeze(1)
        out = torch.matmul(softmax(scores).view(batch, self.n_kv, group * length, keys), v)  # (B, Hkv, G Lq, hd)
        return out.view(batch, self.n_heads, length, self.head_dim).transpose(1, 2).reshape(batch, length, -1)

    def block(self, layer: Layer, x: Tensor, rope, bias: Tensor, cache=None) -> Tensor:
        """One pre-norm block. With a cache (k, v), each (B, Hkv, L, hd) (a prefill), the keys and values are also
        written there."""
        q, k, v = self.project_qkv(layer, self.norm(x, layer.norm1), rope)
        if cache is not None:
            cache[0].copy_(k)
            cache[1].copy_(v)
        return self.finish_block(layer, x, self.attend(q, k, v, bias))

    def finish_block(self, layer: Layer, x: Tensor, attended: Tensor) -> Tensor:
        """The rest of a block after attention: output projection and residual, then the MLP and residual."""
        weight, out_bias = layer.out
        if self.arch == "gpt2":
            x = x + torch.addmm(out_bias, attended.reshape(-1, attended.size(-1)), weight).view_as(x)
            w_fc, b_fc, w_proj, b_proj = layer.mlp
            h = self.norm(x, layer.norm2).reshape(-1, x.size(-1))
            h = F.gelu(torch.addmm(b_fc, h, w_fc), approximate="tanh")
            return x + torch.addmm(b_proj, h, w_proj).view_as(x)
        x = x + F.linear(attended, weight, out_bias)
        h = self.norm(x, layer.norm2)
        gate, up, down = layer.mlp
        return x + F.linear(F.silu(F.linear(h, gate)) * F.linear(h, up), down)

    def embed_tokens(self, input_ids: Tensor, position_ids: Tensor) -> Tensor:
        x = F.embedding(input_ids, self.embed)
        return x + F.embedding(position_ids, self.positions) if self.arch == "gpt2" else x

    def logits(self, x: Tensor) -> Tensor:
        return F.linear(self.norm(x, self.final_norm), self.lm_head)

    # --- whole sequences ----------------------------------------------------------------------------

    def forward(self, input_ids: Tensor, mask: Tensor, position_ids: Tensor, keep: int | None = None,
                cache=None) -> Tensor:
        """Logits (B, keep or L, V) of every position (the last `keep` ones), causal over the real tokens.
        input_ids, mask, position_ids: (B, L), left-padded. cache: new_cache(B, L) to fill with the keys and
        values (a prefill), or None."""
        bias = causal_bias(mask, input_ids.size(1))
        x = self.embed_tokens(input_ids, position_ids)
        rope = self.rotary(position_ids)
        for layer, layer_cache in zip(self.layers, cache or [None] * len(self.layers)):
            x = self.block(layer, x, rope, bias, layer_cache)
        if keep is not None:
            x = x[:, -keep:]
        return self.logits(x)

    def completion_logits(self, prompt_ids: Tensor, prompt_mask: Tensor, completion_ids: Tensor,
                          completion_mask: Tensor, position_ids: Tensor) -> Tensor:
        """Logits (B, T + 1, V) at the last prompt position and every completion position: forward(prompt +
        completion, keep=T + 1), with each distinct prompt of the batch run once (a GRPO group repeats it G
        times). The completion rows attend to their prompt's keys and values by index, so the gradient of a
        shared prompt sums over its group, exactly as the repeated computation's would.

        prompt_ids, prompt_mask: (B, P) left-padded; completion_ids, completion_mask: (B, T); position_ids:
        (B, P + T) of the whole sequences."""
        mask = torch.cat([prompt_mask, completion_mask], 1)
        first, inverse = distinct_rows(prompt_ids, prompt_mask)
        if len(first) == len(prompt_ids):
            return self.forward(torch.cat([prompt_ids, completion_ids], 1), mask, position_ids,
                                keep=completion_ids.size(1) + 1)
        prompt_len, length = prompt_ids.size(1), completion_ids.size(1)
        prompt_positions, completion_positions = position_ids[first, :prompt_len], position_ids[:, prompt_len:]
        prompt_bias = causal_bias(prompt_mask[first], prompt_len)
        completion_bias = causal_bias(mask, length)   # completion queries see the prompt and the completion so far
        x_p = self.embed_tokens(prompt_ids[first], prompt_positions)
        x_c = self.embed_tokens(completion_ids, completion_positions)
        rope_p, rope_c = self.rotary(prompt_positions), self.rotary(completion_positions)
        for layer in self.layers:
            q_p, k_p, v_p = self.project_qkv(layer, self.norm(x_p, layer.norm1), rope_p)
            q_c, k_c, v_c = self.project_qkv(layer, self.norm(x_c, layer.norm1), rope_c)
            k = torch.cat([k_p[inverse], k_c], dim=2)
            v = torch.cat([v_p[inverse], v_c], dim=2)
            x_p = self.finish_block(layer, x_p, self.attend(q_p, k_p, v_p, prompt_bias))
            x_c = self.finish_block(layer, x_c, self.attend(q_c, k, v, completion_bias))
        return self.logits(torch.cat([x_p[inverse][:, -1:], x_c], dim=1))

    # --- sampling with a static cache ------------------------------------------------------------------

    def new_cache(self, batch: int, length: int) -> list[tuple[Tensor, Tensor]]:
        """A preallocated (k, v) per layer, each (B, Hkv, length, hd), zeros (masked until written)."""
        dtype, device = self.embed.dtype, self.embed.device
        return [(torch.zeros(batch, self.n_kv, length, self.head_dim, dtype=dtype, device=device),
                 torch.zeros(batch, self.n_kv, length, self.head_dim, dtype=dtype, device=device))
                for _ in self.layers]

    def prefill(self, cache, input_ids: Tensor, mask: Tensor, position_ids: Tensor) -> Tensor:
        """Run the prompts (B, P) through the model filling the cache's first P positions; last logits (B, V).

        A prompt repeated in the batch (a GRPO group) is run once and its keys, values and logits are copied
        to each of its rows: the prompt's computation does not depend on what follows it."""
        first, inverse = distinct_rows(input_ids, mask)
        length = input_ids.size(1)
        own = self.new_cache(len(first), length)  # exactly the prompt's length: attention over all of it
        logits = self.forward(input_ids[first], mask[first], position_ids[first], keep=1, cache=own)[:, 0]
        for (k, v), (k_own, v_own) in zip(cache, own):
            k[:, :, :length], v[:, :, :length] = k_own[inverse], v_own[inverse]
        return logits[inverse]

    def decode(self, cache, token: Tensor, at: int, key_mask: Tensor, position: Tensor, fused: list[tuple]) -> Tensor:
        """One new token per row (B,) written at cache position `at`, attending to the cache positions up to `at`
        where key_mask (B, Lc) is 1 (the left padding is 0). position: (B,) its position id. fused: fused_weights()
        of the current weights (taken once per sampling call). Returns logits (B, V).

        Each row has one query, so the G = H / Hkv query heads of a key head are G rows of one batched matmul
        over that head's cached keys (no broadcast copy of the cache)."""
        batch = token.size(0)
        key_bias = torch.zeros(key_mask.shape, device=key_mask.device).masked_fill(key_mask == 0, float("-inf"))
        key_bias[:, at + 1:] = float("-inf")
        key_bias = key_bias.repeat_interleave(self.n_kv, 0)[:, None]                # (B * Hkv, 1, Lc)
        x = self.embed_tokens(token, position)                                      # (B, d)
        rope = self.rotary(position[:, None])
        rope = None if rope is None else (rope[0][:, 0], rope[1][:, 0])           # (B, 1, hd) each
        heads, kv, hd = self.n_heads, self.n_kv, self.head_dim
        for layer, (k_cache, v_cache), (w_qkv, b_qkv, w_up) in zip(self.layers, cache, fused):
            h = self.norm(x, layer.norm1)
            qkv = torch.addmm(b_qkv, h, w_qkv) if b_qkv is not None else torch.mm(h, w_qkv)
            qk = qkv[:, :(heads + kv) * hd].view(batch, heads + kv, hd)
            if rope is not None:
                qk = self.rotate(qk, *rope)
            q, k = qk[:, :heads], qk[:, heads:]
            k_cache[:, :, at], v_cache[:, :, at] = k, qkv[:, (heads + kv) * hd:].view(batch, kv, hd)
            keys = k_cache.view(batch * kv, -1, hd)
            scores = torch.baddbmm(key_bias, q.reshape(batch * kv, heads // kv, hd), keys.transpose(1, 2),
                                   alpha=self.scale)
            attended = torch.bmm(softmax(scores), v_cache.view(batch * kv, -1, hd))
            x = self.finish_decode_block(layer, x, attended.view(batch, heads * hd), w_up)
        return self.logits(x)

    def fused_weights(self) -> list[tuple]:
        """Per layer (W_qkv (d, (H + 2 Hkv) hd), b_qkv or None, W_gate_up (d, 2 d_ff) or None): the decode step's
        q, k, v projections as one matmul and llama's gate and up as another (copies of the current weights,
        without gradient, about 60% of a llama's; gpt2's own c_attn is already one)."""
        fused = []
        with torch.no_grad():
            for layer in self.layers:
                if self.arch == "gpt2":
                    fused.append((layer.qkv[0], layer.qkv[1], None))
                    continue
                wq, bq, wk, bk, wv, bv = layer.qkv
                bias = None if bq is None else torch.cat([bq, bk, bv])
                gate, up, _ = layer.mlp
                fused.append((torch.cat([wq, wk, wv]).t().contiguous(), bias, torch.cat([gate, up]).t().contiguous()))
        return fused

    def finish_decode_block(self, layer: Layer, x: Tensor, attended: Tensor, w_gate_up: Tensor | None) -> Tensor:
        """finish_block for one token per row: x, attended (B, d); llama's gate and up as one matmul."""
        if self.arch == "gpt2":
            return self.finish_block(layer, x, attended)
        weight, out_bias = layer.out
        x = x + F.linear(attended, weight, out_bias)
        gate, up = torch.mm(self.norm(x, layer.norm2), w_gate_up).chunk(2, dim=-1)
        return x + F.linear(F.silu(gate) * up, layer.mlp[2])


SHORT_ROW = 16
"""rows shorter than this many keys take a scalar path in torch's CPU softmax (an AVX-512 vector holds 16 floats)"""


def softmax(scores: Tensor) -> Tensor:
    """softmax over the last dimension; rows shorter than SHORT_ROW written out as exp(s - max) / sum, which took a
    quarter of torch's time forward and backward at 12-13 keys (and three times it at 24). The max is a constant
    shift (softmax and its gradient do not depend on it), so it carries no gradient. scores: (..., Lk), -inf where
    masked, at least one finite entry in every row."""
    if scores.size(-1) >= SHORT_ROW:
        return torch.softmax(scores, dim=-1)
    exp = (scores - scores.detach().amax(-1, keepdim=True)).exp()
    return exp / exp.sum(-1, keepdim=True)


def causal_bias(key_mask: Tensor, queries: int) -> Tensor:
    """Additive attention bias (B, 1, Lq, Lk), 0 where allowed and -inf elsewhere: the queries are the last Lq of
    the Lk positions; query i sees every real key (key_mask 1) up to its own position, and itself always (a
    padded query row stays finite; transformers masks it differently, so its output differs and callers mask
    it). key_mask: (B, Lk)."""
    keys = key_mask.size(1)
    offset = keys - queries
    device = key_mask.device
    causal = torch.ones(queries, keys, dtype=torch.bool, device=device).tril(offset)
    itself = causal & ~torch.ones(queries, keys, dtype=torch.bool, device=device).tril(offset - 1)
    allowed = (causal[None] & key_mask.bool()[:, None, :]) | itself[None]
    return torch.zeros(allowed.shape, device=device).masked_fill(~allowed, float("-inf"))[:, None]


def distinct_rows(ids: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """(first, inverse): the index of the first row of each distinct (ids, mask) row, and each row's distinct
    row, so that ids[first][inverse] == ids. ids, mask: (B, L) -> (U,), (B,)."""
    unique, inverse = torch.unique(torch.cat([ids, mask], 1), dim=0, return_inverse=True)
    first = torch.full((len(unique),), len(ids), dtype=torch.long, device=ids.device).scatter_reduce(
        0, inverse, torch.arange(len(ids), device=ids.device), reduce="amin")
    return first, inverse


SUPPORTED = ("gpt2", "llama", "qwen2", "mistral")
"""mistral without a sliding window is llama's computation (other parameter names are not involved)"""


def fast_forward(model) -> FastForward | None:
    """A FastForward over `model`'s weights when its configuration is one this file implements exactly, else None."""
    config = model.config
    arch = getattr(config, "model_type", None)
    parameter = next(model.parameters())
    if arch not in SUPPORTED or parameter.dtype != torch.float32 or parameter.device.type != "cpu":
        return None
    dropout = [getattr(config, name, 0.0) or 0.0 for name in ("resid_pdrop", "embd_pdrop", "attn_pdrop",
                                                               "attention_dropout")]
    if any(p > 0 for p in dropout):   # the fast path applies no dropout
        return None
    if arch == "gpt2":
        exact = (config.activation_function == "gelu_new" and config.scale_attn_weights
                 and not config.scale_attn_by_inverse_layer_idx and not config.reorder_and_upcast_attn)
    else:
        rope = getattr(config, "rope_parameters", None) or {}
        exact = (rope.get("rope_type", "default") == "default" and config.hidden_act == "silu"
                 and not getattr(config, "mlp_bias", False) and not getattr(config, "use_sliding_window", False)
                 and (arch != "mistral" or config.sliding_window is None)
                 and getattr(config, "head_dim", None) in (None, config.hidden_size // config.num_attention_heads))
    return FastForward(model) if exact else None

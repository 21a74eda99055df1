"""Per-token log-probs from a forward's logits, without a float32 copy of every logit on a GPU.

    log pi(y_t) = z_t[y_t] - logsumexp_v z_t[v],    z_t = logits_t / temperature in float32

On a GPU, bf16 or fp16 logits are read a few positions at a time (`ChunkedTokenLogprobs`, whose backward recomputes
the softmax chunk by chunk), so no float32 tensor larger than one chunk exists. On a CPU, and for float32 logits
anywhere, the log-probs are log_softmax of the whole tensor then gather, bit for bit the expression every committed
result was computed with (the chunked path rounds otherwise). What it saves, and why the CPU keeps the committed
expression: docs/performance.md, The chunked log-probs.
"""
from __future__ import annotations

import torch
from torch import Tensor

CHUNK_ELEMENTS = 2 ** 26
"""logits the chunked path turns into float32 at once (256 MB): whole positions of every row, at least one"""
HALF = (torch.bfloat16, torch.float16)


def chunked(logits: Tensor) -> bool:
    """Whether token_logprobs reads these logits in chunks: bf16 or fp16 logits on a GPU (see the module docstring)."""
    return logits.is_cuda and logits.dtype in HALF


def token_logprobs(logits: Tensor, ids: Tensor, temperature: float = 1.0) -> Tensor:
    """log softmax(logits[:, t] / temperature)[ids[:, t]] for t < T, in float32, with gradient to the logits.

    logits: (B, L, V) with L >= T (a forward's logits at each completion token's predecessor: position t scores
    ids[:, t]; positions from T on are not read and get no gradient); ids: (B, T). Returns (B, T) float32. Chunked
    where `chunked(logits)`, else the whole tensor's log_softmax, as before the chunked path existed."""
    length = ids.size(1)
    if chunked(logits):
        return ChunkedTokenLogprobs.apply(logits, ids, temperature, positions_per_chunk(logits))
    logits = logits[:, :length].float()
    if temperature != 1.0:
        logits = logits / temperature
    return torch.log_softmax(logits, dim=-1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)


def positions_per_chunk(logits: Tensor, elements: int | None = None) -> int:
    """Positions of (B, L, V) logits per chunk: as many as hold at most `elements` (CHUNK_ELEMENTS) logits, one at
    least."""
    batch, _, vocab = logits.shape
    return max(1, (CHUNK_ELEMENTS if elements is None else elements) // max(1, batch * vocab))


class ChunkedTokenLogprobs(torch.autograd.Function):
    """token_logprobs `positions` positions at a time. Forward: z = logits / T in float32 per chunk, its logsumexp
    (kept, (B, T)) and z[y] - logsumexp. Backward: d log pi(y_t) / d z_t = onehot(y_t) - softmax(z_t), recomputed per
    chunk from the kept logits and logsumexp, times the incoming gradient and 1 / T, written in the logits' dtype."""

    @staticmethod
    def forward(ctx, logits: Tensor, ids: Tensor, temperature: float, positions: int) -> Tensor:
        length = ids.size(1)
        out = torch.empty(ids.shape, dtype=torch.float32, device=logits.device)
        normalizer = torch.empty_like(out)
        for start in range(0, length, positions):
            part = slice(start, min(start + positions, length))
            z = logits[:, part].to(torch.float32, copy=True)   # a copy, also of float32 logits: z is changed in place
            if temperature != 1.0:
                z.div_(temperature)
            normalizer[:, part] = torch.logsumexp(z, dim=-1)
            out[:, part] = z.gather(-1, ids[:, part].unsqueeze(-1)).squeeze(-1) - normalizer[:, part]
            del z
        ctx.save_for_backward(logits, ids, normalizer)
        ctx.temperature, ctx.positions = temperature, positions
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        logits, ids, normalizer = ctx.saved_tensors
        temperature, positions, length = ctx.temperature, ctx.positions, ids.size(1)
        grad_logits = torch.empty_like(logits, memory_format=torch.contiguous_format)
        grad_logits[:, length:] = 0
        for start in range(0, length, positions):
            part = slice(start, min(start + positions, length))
            scale = grad[:, part].unsqueeze(-1) / temperature          # (B, c, 1)
            z = logits[:, part].to(torch.float32, copy=True)   # a copy, also of float32 logits: z is changed in place
            if temperature != 1.0:
                z.div_(temperature)
            # -softmax(z) * g / T, then + g / T at the drawn token: (onehot - softmax) * g / T
            d = z.sub_(normalizer[:, part].unsqueeze(-1)).exp_().mul_(scale).neg_()
            d.scatter_add_(-1, ids[:, part].unsqueeze(-1), scale)
            grad_logits[:, part] = d
            del z, d
        return grad_logits, None, None, None

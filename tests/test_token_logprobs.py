"""Per-token log-probs (mrl/core/token_logprobs.py): on a CPU the expression every committed result was computed with,
bit for bit, values and gradients; the chunked path (bf16/fp16 logits on a GPU) equals it up to float32 rounding, does
not depend on its chunk size, and never holds a float32 tensor of the whole (B, T, V) logits."""
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from mrl.core.token_logprobs import ChunkedTokenLogprobs, chunked, positions_per_chunk, token_logprobs

SHAPES = [(1, 2, 5), (2, 5, 7), (3, 9, 96), (4, 17, 1000), (2, 33, 4099)]
"""(B, L, V): rows, positions (the last one predicts past the completion), vocabulary"""


def committed(logits: torch.Tensor, ids: torch.Tensor, temperature: float) -> torch.Tensor:
    """completion_logprobs' expression before mrl.core.token_logprobs (the committed results'), verbatim."""
    logits = logits[:, :-1].float()
    if temperature != 1.0:
        logits = logits / temperature
    return torch.log_softmax(logits, dim=-1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)


def case(shape, dtype, seed=0):
    batch, length, vocab = shape
    generator = torch.Generator().manual_seed(seed)
    logits = (3 * torch.randn(shape, generator=generator)).to(dtype)
    ids = torch.randint(vocab, (batch, length - 1), generator=generator)
    upstream = torch.randn(batch, length - 1, generator=generator)   # dL/dlogp of some loss
    return logits, ids, upstream


def values_and_gradient(function, logits, ids, upstream):
    leaf = logits.clone().requires_grad_(True)
    out = function(leaf, ids)
    out.backward(upstream)
    return out.detach(), leaf.grad


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", SHAPES)
def test_a_cpu_computes_the_committed_expression_bit_for_bit(shape, dtype, temperature):
    """The chunked path is for GPUs only: on a CPU, float32 or bf16, values and gradients are the committed ones."""
    logits, ids, upstream = case(shape, dtype)
    assert not chunked(logits)
    ours = values_and_gradient(lambda x, y: token_logprobs(x, y, temperature), logits, ids, upstream)
    theirs = values_and_gradient(lambda x, y: committed(x, y, temperature), logits, ids, upstream)
    assert torch.equal(ours[0], theirs[0]) and torch.equal(ours[1], theirs[1])


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", SHAPES)
def test_chunks_equal_the_whole_tensor_up_to_float32_rounding(shape, dtype, temperature):
    """The chunked computation (run here on the CPU) against the committed expression: both compute in float32 from
    the same logits and differ only in the order of rounding (z - (max + log sum) against (z - max) - log sum), so
    they are compared at torch's own tolerance for the compared dtype (assert_close's defaults: float32 values,
    gradients in the logits' dtype). Every chunk size gives the same bits."""
    logits, ids, upstream = case(shape, dtype)
    reference = values_and_gradient(lambda x, y: committed(x, y, temperature), logits, ids, upstream)
    length = shape[1] - 1
    results = [values_and_gradient(lambda x, y: ChunkedTokenLogprobs.apply(x, y, temperature, positions),
                                   logits, ids, upstream) for positions in (1, 3, length)]
    for values, gradient in results:
        assert values.dtype == torch.float32 and gradient.dtype == dtype
        torch.testing.assert_close(values, reference[0])
        torch.testing.assert_close(gradient, reference[1])
        assert not gradient[:, length:].any()   # the position past the completion is not read
        assert torch.equal(values, results[0][0]) and torch.equal(gradient, results[0][1])


class LargestFloat32(TorchDispatchMode):
    """The most elements of any float32 tensor an operator returns while the mode is on (forward and backward)."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(tensor, torch.Tensor) and tensor.dtype == torch.float32:
                self.largest = max(self.largest, tensor.numel())
        return out


def test_the_chunked_path_never_holds_the_whole_logits_in_float32():
    """bf16 logits (4, 65, 1000) in chunks of 8 positions: no float32 tensor beyond one chunk (4 x 8 x 1000) in the
    forward or the backward; the committed expression makes several of 4 x 64 x 1000 (the detector's check)."""
    shape, positions = (4, 65, 1000), 8
    logits, ids, upstream = case(shape, torch.bfloat16)
    for function, bound in ((lambda x, y: ChunkedTokenLogprobs.apply(x, y, 1.0, positions), 4 * positions * 1000),
                            (lambda x, y: committed(x, y, 1.0), None)):
        leaf = logits.clone().requires_grad_(True)
        with LargestFloat32() as seen:
            function(leaf, ids).backward(upstream)
        if bound is None:
            assert seen.largest == 4 * 64 * 1000
        else:
            assert seen.largest <= bound


def test_chunk_positions_hold_at_most_the_budget():
    logits = torch.empty(16, 641, 128_256, dtype=torch.bfloat16, device="meta")
    assert positions_per_chunk(logits) == 2 ** 26 // (16 * 128_256)
    assert positions_per_chunk(logits, elements=10) == 1   # one position at least


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU")
def test_cuda_half_logits_are_chunked_with_less_memory():
    """On a GPU: bf16 logits take the chunked path, equal the committed expression at torch's tolerance, and peak
    lower (forward and backward) than it; float32 logits keep the committed expression bit for bit."""
    device = torch.device("cuda")
    shape = (8, 257, 32_000)
    logits, ids, upstream = (t.to(device) for t in case(shape, torch.bfloat16))
    assert chunked(logits) and not chunked(logits.float())
    peaks, results = [], []
    for function in (lambda x, y: token_logprobs(x, y, 0.7), lambda x, y: committed(x, y, 0.7)):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        results.append(values_and_gradient(function, logits, ids, upstream))
        torch.cuda.synchronize()
        peaks.append(torch.cuda.max_memory_allocated(device) - before)
    torch.testing.assert_close(results[0][0], results[1][0])
    torch.testing.assert_close(results[0][1], results[1][1])
    assert peaks[0] < peaks[1]
    full = logits.float()
    assert torch.equal(values_and_gradient(lambda x, y: token_logprobs(x, y, 0.7), full, ids, upstream)[0],
                       values_and_gradient(lambda x, y: committed(x, y, 0.7), full, ids, upstream)[0])

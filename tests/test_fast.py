"""The fast path (mrl.runtime.fast) against the transformers forward of the same checkpoint: log-probs within 1e-5 and
the same gradients for each architecture and other sizes (GQA ratios, widths, depths, q/k/v biases), sampling from the
same distribution (a chi-square test on a fixed context), and a fallback for checkpoints it does not know."""
import math

import pytest
import torch
from scipy.stats import chisquare

from mrl.core.batch import Decoding
from mrl.core.config import FamilyConfig
from mrl.runtime.fast import SHORT_ROW, fast_forward, softmax
from mrl.runtime.rollout import completion_logprobs, sample_completions
from mrl.runtime.zoo import build_model

SHAPES = [dict(arch="gpt2", d_model=128, n_layers=4, n_heads=4, d_ff=512),
          dict(arch="gpt2", d_model=48, n_layers=1, n_heads=3, n_kv_heads=3, d_ff=64),
          dict(arch="llama", d_model=128, n_layers=4, n_heads=4, n_kv_heads=2, d_ff=384),
          dict(arch="llama", d_model=64, n_layers=3, n_heads=8, n_kv_heads=1, d_ff=80),
          dict(arch="llama", d_model=96, n_layers=2, n_heads=4, n_kv_heads=4, d_ff=128),
          dict(arch="qwen2", d_model=128, n_layers=4, n_heads=4, n_kv_heads=2, d_ff=384),
          dict(arch="qwen2", d_model=64, n_layers=2, n_heads=4, n_kv_heads=1, d_ff=96),
          dict(arch="mistral", d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=96)]


def model_of(shape: dict, seed: int = 0, vocab: int = 50):
    model = build_model(FamilyConfig(**shape), vocab, 48, seed)
    with torch.no_grad():  # random biases too (qwen2's q/k/v, gpt2's), so that a mishandled one shows
        for name, parameter in model.named_parameters():
            if name.endswith("bias") or "norm" in name or "ln_" in name:
                parameter.add_(0.1 * torch.randn_like(parameter))
    return model


def batch(vocab: int = 50, prompts: int = 5, group: int = 3, seed: int = 0, prompt_len: int = 7):
    """Left-padded prompts, each repeated `group` times, and right-padded completions (some end early)."""
    gen = torch.Generator().manual_seed(seed)
    prompt_ids = torch.randint(3, vocab, (prompts, prompt_len), generator=gen)
    prompt_mask = torch.ones_like(prompt_ids)
    prompt_mask[0, :3], prompt_mask[2, :1] = 0, 0
    prompt_ids[prompt_mask == 0] = 0
    prompt_ids, prompt_mask = prompt_ids.repeat_interleave(group, 0), prompt_mask.repeat_interleave(group, 0)
    completion_ids = torch.randint(3, vocab, (prompts * group, 6), generator=gen)
    completion_mask = torch.ones_like(completion_ids)
    completion_mask[1, 2:], completion_mask[4, 4:] = 0, 0
    return prompt_ids, prompt_mask, completion_ids, completion_mask


@pytest.mark.parametrize("keys", [1, 7, SHORT_ROW - 1, SHORT_ROW, 40])
def test_the_written_out_softmax_equals_torchs_with_its_gradient(keys):
    gen = torch.Generator().manual_seed(keys)
    scores = (4 * torch.randn(6, 3, keys, generator=gen)).requires_grad_()
    masked = torch.zeros(6, 3, keys)
    masked[:, :, : keys // 2] = float("-inf")  # left padding and future keys, as the attention bias masks them
    weights = torch.randn(6, 3, keys, generator=gen)
    ours = softmax(scores + masked)
    (grad_ours,) = torch.autograd.grad((ours * weights).sum(), scores)
    reference = torch.softmax(scores + masked, dim=-1)
    (grad_reference,) = torch.autograd.grad((reference * weights).sum(), scores)
    assert torch.allclose(ours, reference, atol=1e-7) and torch.allclose(grad_ours, grad_reference, atol=1e-6)


# prompts of 7 and 14 tokens: attention rows of 7-13 keys (the written-out softmax) and of 14-20 (torch's)
PROMPT_LENGTHS = pytest.mark.parametrize("prompt_len", [7, 14], ids=["short-rows", "long-rows"])


@PROMPT_LENGTHS
@pytest.mark.parametrize("group", [1, 3], ids=["distinct-prompts", "groups"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "-".join(str(v) for v in s.values()))
def test_fast_logprobs_and_gradients_equal_transformers(shape, group, prompt_len):
    model = model_of(shape).train()
    assert fast_forward(model) is not None
    tensors = batch(group=group, prompt_len=prompt_len)
    mask = tensors[3]
    results = {}
    for engine in ("hf", "fast"):
        model.zero_grad(set_to_none=True)
        logp = completion_logprobs(model, *tensors, engine=engine)
        (logp * mask).sum().backward()
        results[engine] = (logp.detach(), [p.grad.clone() for p in model.parameters()])
    torch.testing.assert_close(results["fast"][0] * mask, results["hf"][0] * mask, atol=1e-5, rtol=0)
    for got, want in zip(results["fast"][1], results["hf"][1]):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


@PROMPT_LENGTHS
@pytest.mark.parametrize("group", [1, 3], ids=["distinct-prompts", "groups"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "-".join(str(v) for v in s.values()))
def test_fast_sampling_log_probs_equal_transformers(shape, group, prompt_len):
    """Same generator: the fast cache gives the transformers sampler's log-probs within 1e-5 (and so, but for a
    draw that falls within 1e-5 of a boundary, the same tokens), with prompts repeated in groups or all distinct."""
    model = model_of(shape).eval()
    prompt_ids, prompt_mask, _, _ = batch(group=group, prompt_len=prompt_len)
    out = {engine: sample_completions(model, prompt_ids, prompt_mask, Decoding(max_new_tokens=6, eos_id=1, pad_id=0),
                                      torch.Generator().manual_seed(3), engine=engine)
           for engine in ("hf", "fast")}
    assert torch.equal(out["fast"][0], out["hf"][0]) and torch.equal(out["fast"][1], out["hf"][1])
    torch.testing.assert_close(out["fast"][2], out["hf"][2], atol=1e-5, rtol=0)


@pytest.mark.parametrize("arch", ["gpt2", "llama", "qwen2", "mistral"])
def test_fast_sampling_draws_from_the_models_distribution(arch):
    """Chi-square goodness of fit of 6,000 first tokens after one fixed context against the transformers
    softmax of that context (p > 1e-3: a wrong distribution would fail by many orders of magnitude)."""
    shape = next(s for s in SHAPES if s["arch"] == arch)
    model = model_of(shape, vocab=12).eval()
    context = torch.tensor([[0, 0, 5, 7, 3, 9]])
    mask = (context != 0).long()
    with torch.no_grad():
        logits = model(input_ids=context, attention_mask=mask,
                       position_ids=(mask.cumsum(-1) - 1).clamp(min=0)).logits[0, -1] / 0.7
    expected = torch.softmax(logits.double(), -1)
    n = 6000
    ids, _, _ = sample_completions(model, context.repeat(n, 1), mask.repeat(n, 1),
                                   Decoding(max_new_tokens=1, eos_id=1, pad_id=0, temperature=0.7),
                                   torch.Generator().manual_seed(0), engine="fast")
    counts = torch.bincount(ids[:, 0], minlength=len(expected)).double()
    keep = expected * n >= 5                                  # pool the rare tokens into one cell
    observed = torch.cat([counts[keep], counts[~keep].sum(0, keepdim=True)])
    wanted = torch.cat([expected[keep], expected[~keep].sum(0, keepdim=True)]) * n
    if wanted[-1] == 0:
        observed, wanted = observed[:-1], wanted[:-1]
    assert chisquare(observed.numpy(), wanted.numpy()).pvalue > 1e-3


def test_an_unknown_checkpoint_falls_back_to_transformers():
    from transformers import GPT2Config, GPT2LMHeadModel

    odd = GPT2LMHeadModel(GPT2Config(vocab_size=20, n_positions=16, n_embd=32, n_layer=1, n_head=2,
                                     activation_function="relu")).eval()
    assert fast_forward(odd) is None
    ids, mask = torch.tensor([[3, 4, 5]]), torch.ones(1, 3, dtype=torch.long)
    a = completion_logprobs(odd, ids, mask, ids, mask, engine="fast")
    b = completion_logprobs(odd, ids, mask, ids, mask, engine="hf")
    assert torch.equal(a, b) and math.isfinite(a.sum().item())


def test_rows_with_the_same_ids_but_another_mask_are_not_shared():
    """A pad id that is also a real token (pad = EOS, as in GPT-2 checkpoints): two rows with equal ids and different
    masks are different prompts, and the shared-prompt paths must not merge them."""
    model = model_of(SHAPES[0]).eval()
    ids = torch.tensor([[0, 5, 6], [0, 5, 6], [0, 5, 6]])
    mask = torch.tensor([[0, 1, 1], [1, 1, 1], [0, 1, 1]])
    completion, completion_mask = torch.tensor([[7, 8]] * 3), torch.ones(3, 2, dtype=torch.long)
    fast = completion_logprobs(model, ids, mask, completion, completion_mask, engine="fast")
    hf = completion_logprobs(model, ids, mask, completion, completion_mask, engine="hf")
    torch.testing.assert_close(fast, hf, atol=1e-5, rtol=0)
    sampled = {engine: sample_completions(model, ids, mask, Decoding(max_new_tokens=3, eos_id=1, pad_id=0),
                                          torch.Generator().manual_seed(0), engine=engine)
               for engine in ("fast", "hf")}
    torch.testing.assert_close(sampled["fast"][2], sampled["hf"][2], atol=1e-5, rtol=0)


def test_models_the_fast_path_would_compute_differently_fall_back():
    """Dropout (never applied by the fast path) and other dtypes go to transformers."""
    from transformers import GPT2Config, GPT2LMHeadModel

    with_dropout = GPT2LMHeadModel(GPT2Config(vocab_size=20, n_positions=16, n_embd=32, n_layer=1, n_head=2))
    assert with_dropout.config.resid_pdrop > 0 and fast_forward(with_dropout) is None
    assert fast_forward(model_of(SHAPES[2]).to(torch.bfloat16)) is None
    assert fast_forward(model_of(SHAPES[2])) is not None


def test_a_mistral_with_a_sliding_window_falls_back_to_transformers():
    """The fast path attends to every earlier token: a window would change the result, so it refuses one."""
    from transformers import MistralConfig, MistralForCausalLM

    windowed = MistralForCausalLM(MistralConfig(vocab_size=20, hidden_size=32, intermediate_size=64,
                                                num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                                                sliding_window=2)).eval()
    assert fast_forward(windowed) is None

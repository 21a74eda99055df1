"""The generate and batched engines (transformers' generate with a static cache, and its continuous batching with
a paged cache, for real model sizes), and the graphs engine where its draws are theirs (its greedy and bf16 tests:
tests/test_graphs_engine.py): greedy equals the reference loop, sampling draws from the model's full softmax
whatever the checkpoint's generation defaults, the sampling log-probs are the training forward's, and a seed gives
the same draws without touching torch's RNG."""
from dataclasses import replace

import pytest
import torch
from scipy.stats import chisquare

from mrl.core.batch import Decoding
from mrl.runtime.rollout import completion_logprobs, sample_completions
from test_fast import SHAPES, model_of

CONTEXT = torch.tensor([[0, 0, 5, 7, 3, 9], [2, 8, 4, 4, 6, 3]])
MASK = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])


@pytest.mark.parametrize("engine", ["generate", "batched"])
@pytest.mark.parametrize("arch", ["gpt2", "llama", "qwen2"])
def test_greedy_generate_equals_the_reference_loop_and_its_log_probs_are_the_training_forwards(arch, engine):
    model = model_of(next(s for s in SHAPES if s["arch"] == arch)).eval()
    decoding = Decoding(max_new_tokens=8, eos_id=1, pad_id=0, greedy=True)
    ids, mask, logp = sample_completions(model, CONTEXT, MASK, decoding, engine=engine)
    reference = sample_completions(model, CONTEXT, MASK, decoding, engine="hf")
    assert torch.equal(ids, reference[0]) and torch.equal(mask, reference[1])
    torch.testing.assert_close(logp, completion_logprobs(model, CONTEXT, MASK, ids, mask) * mask, atol=0, rtol=0)
    torch.testing.assert_close(logp, reference[2], atol=1e-5, rtol=0)


@pytest.mark.parametrize("engine", ["generate", "batched", "graphs"])
def test_generate_samples_the_full_softmax_despite_the_checkpoints_generation_defaults(engine):
    """Chi-square of 6,000 first tokens against the softmax at temperature 0.7, with the checkpoint asking for
    top-k 5, top-p 0.5 and a repetition penalty (as instruct checkpoints do): generate must not apply them."""
    model = model_of(SHAPES[2], vocab=120).eval()
    model.generation_config.update(top_k=5, top_p=0.5, repetition_penalty=1.3, do_sample=True)
    context, mask = CONTEXT[:1], MASK[:1]
    with torch.no_grad():
        logits = model(input_ids=context, attention_mask=mask,
                       position_ids=(mask.cumsum(-1) - 1).clamp(min=0)).logits[0, -1] / 0.7
    expected = torch.softmax(logits.double(), -1)
    n = 6000 if engine == "generate" else 1200   # continuous batching's scheduler is slow with thousands of requests
    ids, _, _ = sample_completions(model, context.repeat(n, 1), mask.repeat(n, 1),
                                   Decoding(max_new_tokens=1, eos_id=1, pad_id=0, temperature=0.7),
                                   torch.Generator().manual_seed(0), engine=engine)
    counts = torch.bincount(ids[:, 0], minlength=len(expected)).double()
    assert (counts > 0).sum() > 20   # far more than top-k 5 would leave
    assert model.generation_config.top_k == 5   # the checkpoint's own defaults are left as they were
    assert_draws_follow(counts, expected, n)


def assert_draws_follow(counts, expected, n: int) -> None:
    """Pearson's chi-square of n draws' counts against the expected probabilities (cells expecting fewer than 5 draws
    pooled into one): the draws must not be rejected at 1e-3."""
    keep = expected * n >= 5
    observed = torch.cat([counts[keep], counts[~keep].sum(0, keepdim=True)])
    wanted = torch.cat([expected[keep], expected[~keep].sum(0, keepdim=True)]) * n
    if wanted[-1] == 0:
        observed, wanted = observed[:-1], wanted[:-1]
    assert chisquare(observed.numpy(), wanted.numpy()).pvalue > 1e-3


@pytest.mark.parametrize("engine", ["generate", "batched", "graphs"])
def test_a_seed_gives_the_same_draws_and_leaves_torchs_generator_alone(engine):
    model = model_of(SHAPES[5]).eval()
    decoding = Decoding(max_new_tokens=6, eos_id=1, pad_id=0, temperature=1.0)
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    first = sample_completions(model, CONTEXT.repeat(8, 1), MASK.repeat(8, 1), decoding,
                               torch.Generator().manual_seed(7), engine=engine)
    assert torch.equal(torch.random.get_rng_state(), before)
    again = sample_completions(model, CONTEXT.repeat(8, 1), MASK.repeat(8, 1), decoding,
                               torch.Generator().manual_seed(7), engine=engine)
    other = sample_completions(model, CONTEXT.repeat(8, 1), MASK.repeat(8, 1), decoding,
                               torch.Generator().manual_seed(8), engine=engine)
    assert torch.equal(first[0], again[0]) and not torch.equal(first[0], other[0])
    ended = first[0] == 1
    after_eos = (torch.cumsum(ended.long(), 1) - ended.long()) > 0
    assert (first[0][after_eos] == 0).all() and (first[1][after_eos] == 0).all()


@pytest.mark.parametrize("engine", ["hf", "generate", "batched", "graphs"])
def test_the_sampling_log_probs_are_of_the_tempered_softmax_the_training_forward_computes(engine):
    model = model_of(SHAPES[2]).eval()
    ids, mask, logp = sample_completions(model, CONTEXT.repeat(4, 1), MASK.repeat(4, 1),
                                         Decoding(max_new_tokens=6, eos_id=1, pad_id=0, temperature=0.7),
                                         torch.Generator().manual_seed(3), engine=engine)
    training = completion_logprobs(model, CONTEXT.repeat(4, 1), MASK.repeat(4, 1), ids, mask, temperature=0.7)
    torch.testing.assert_close(logp, training * mask, atol=1e-5, rtol=0)
    untempered = completion_logprobs(model, CONTEXT.repeat(4, 1), MASK.repeat(4, 1), ids, mask) * mask
    assert (logp - untempered).abs().max() > 1e-2


def test_chunked_scoring_equals_the_whole_batch():
    model = model_of(SHAPES[5]).eval()
    ids, mask, _ = sample_completions(model, CONTEXT.repeat(5, 1), MASK.repeat(5, 1),
                                      Decoding(max_new_tokens=6, eos_id=1, pad_id=0), torch.Generator().manual_seed(4))
    whole = completion_logprobs(model, CONTEXT.repeat(5, 1), MASK.repeat(5, 1), ids, mask)
    torch.testing.assert_close(completion_logprobs(model, CONTEXT.repeat(5, 1), MASK.repeat(5, 1), ids, mask, chunk=3),
                               whole, atol=1e-6, rtol=0)


@pytest.mark.parametrize("engine", ["fast", "hf", "generate", "batched", "graphs"])
def test_every_stop_id_of_a_checkpoint_ends_a_completion(engine):
    """Llama 3's generation config lists three ids that end a turn: each engine stops at any of them, the mask ends
    there, and completion_texts calls the completion well-formed."""
    from mrl.core.batch import completion_texts

    model = model_of(next(s for s in SHAPES if s["arch"] == "llama")).eval()
    decoding = Decoding(max_new_tokens=8, eos_id=1, pad_id=0, greedy=True)
    ids, mask, _ = sample_completions(model, CONTEXT, MASK, decoding, engine=engine)
    second = int(ids[0, 2])                 # a token greedy decoding emits third in row 0: now it stops the row
    assert second != 1 and mask[0, 2] == 1
    stopped, stopped_mask, _ = sample_completions(model, CONTEXT, MASK, replace(decoding, eos_id=(1, second)),
                                                  engine=engine)
    first = int((ids[0] == second).nonzero()[0])
    assert stopped_mask[0].sum() == first + 1 and int(stopped[0, first]) == second
    assert torch.equal(stopped[0, : first + 1], ids[0, : first + 1])

    class Tokenizer:
        all_special_ids = [0, 1, second]

        def decode(self, ids, **kwargs):
            return " ".join(map(str, ids))

    text, ok = completion_texts(Tokenizer(), stopped[:1], stopped_mask[:1], (1, second))[0]
    assert ok and text == " ".join(map(str, ids[0, :first].tolist()))
    assert not completion_texts(Tokenizer(), stopped[:1], stopped_mask[:1], 1)[0][1]   # EOS alone: not ended


def test_stop_ids_are_the_tokenizers_eos_then_the_generation_configs(tmp_path):
    from transformers import GenerationConfig

    from mrl.core.stop_tokens import stop_ids

    class Tokenizer:
        eos_token_id = 7

        def __init__(self, folder):
            self.name_or_path = str(folder)

    GenerationConfig(eos_token_id=[5, 7, 9]).save_pretrained(tmp_path)
    assert stop_ids(Tokenizer(tmp_path)) == (7, 5, 9)
    assert stop_ids(Tokenizer(tmp_path / "none")) == (7,)      # no generation config: the EOS alone
    assert stop_ids(Tokenizer("")) == (7,)                     # a tokenizer built in memory


def test_a_long_generate_call_does_not_grow_the_next_calls_cache():
    """transformers sizes a static cache to the longest generate call so far: a long evaluation would grow every
    later rollout's cache. generate_completions forgets it after each call."""
    model = model_of(SHAPES[5]).eval()
    kwargs = dict(engine="generate", with_logprobs=False)
    sample_completions(model, CONTEXT, MASK, Decoding(max_new_tokens=24, eos_id=1, pad_id=0, greedy=True), **kwargs)
    assert not hasattr(model, "_previous_max_cache_length")
    short = sample_completions(model, CONTEXT, MASK, Decoding(max_new_tokens=4, eos_id=1, pad_id=0, greedy=True),
                               **kwargs)
    assert short[0].shape[1] <= 4 and not hasattr(model, "_previous_max_cache_length")


def test_generate_prefills_in_chunks_and_draws_what_a_one_pass_prefill_draws(monkeypatch):
    """GENERATE_PREFILL_CHUNK bounds the prefill's temporaries; greedy completions of left-padded prompts longer than
    a chunk are those of the whole-prompt prefill."""
    import mrl.runtime.rollout as rollout

    model = model_of(next(s for s in SHAPES if s["arch"] == "llama")).eval()
    prompts = torch.randint(3, 50, (3, 20), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(prompts)
    mask[0, :7], prompts[0, :7] = 0, 0
    decoding = Decoding(max_new_tokens=6, eos_id=1, pad_id=0, greedy=True)
    whole = sample_completions(model, prompts, mask, decoding, engine="generate", with_logprobs=False)
    monkeypatch.setattr(rollout, "GENERATE_PREFILL_CHUNK", 4)
    chunked = sample_completions(model, prompts, mask, decoding, engine="generate", with_logprobs=False)
    assert torch.equal(whole[0], chunked[0]) and torch.equal(whole[1], chunked[1])


def test_the_batched_engine_draws_a_fixed_length_and_refuses_a_minimum_it_cannot_apply():
    model = model_of(SHAPES[2]).eval()
    decoding = Decoding(max_new_tokens=6, eos_id=1, pad_id=0, greedy=True)
    kwargs = dict(engine="batched", with_logprobs=False)
    ids, mask, _ = sample_completions(model, CONTEXT, MASK, replace(decoding, min_new_tokens=6), **kwargs)
    assert ids.shape == (2, 6) and mask.all()
    with pytest.raises(ValueError, match="min_new_tokens = 3 is not allowed; expected 0 or max_new_tokens"):
        sample_completions(model, CONTEXT, MASK, replace(decoding, min_new_tokens=3), **kwargs)

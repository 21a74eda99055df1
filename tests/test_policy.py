"""Sampling, rewards and the own-sample GRPO loss on a tiny untrained model."""
import torch

from mrl.core.batch import Decoding, Learner, RolloutBatch, completion_texts, encode_prompts
from mrl.core.config import FamilyConfig, GrpoConfig
from mrl.core.probes.terms import own_grpo_loss
from mrl.runtime.rollout import completion_logprobs, sample_completions
from mrl.runtime.zoo import build_model


def tiny(tokenizer, arch="llama", seed=0):
    return build_model(FamilyConfig(arch=arch, d_model=32, n_layers=2, n_heads=2, n_kv_heads=1, d_ff=64),
                       len(tokenizer), 48, seed).eval()


def test_left_padding_gives_the_unpadded_logprobs(bpe_tokenizer):
    """Explicit position_ids make a left-padded batch score each row as if it were alone."""
    for arch in ("gpt2", "llama", "qwen2"):
        model = tiny(bpe_tokenizer, arch)
        prompts = ["7*13=", "37+48=", "1-1="]
        ids, mask = encode_prompts(bpe_tokenizer, prompts)
        completion = torch.tensor([[5, 6, 1], [7, 1, 0], [8, 9, 1]])
        completion_mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 1, 1]])
        batched = completion_logprobs(model, ids, mask, completion, completion_mask)
        for i, prompt in enumerate(prompts):
            one_ids, one_mask = encode_prompts(bpe_tokenizer, [prompt])
            alone = completion_logprobs(model, one_ids, one_mask, completion[i:i + 1], completion_mask[i:i + 1])
            n = int(completion_mask[i].sum())
            torch.testing.assert_close(batched[i, :n], alone[0, :n], atol=2e-5, rtol=0)


def test_sampler_logprobs_match_a_full_forward_and_eos_masks(bpe_tokenizer):
    model = tiny(bpe_tokenizer)
    ids, mask = encode_prompts(bpe_tokenizer, ["12+3=", "99-9="] * 4)
    gen = torch.Generator().manual_seed(0)
    eos = bpe_tokenizer.eos_token_id
    c_ids, c_mask, sample_logp = sample_completions(model, ids, mask, Decoding(max_new_tokens=8, eos_id=eos, pad_id=0),
                                                    gen)
    full = completion_logprobs(model, ids, mask, c_ids, c_mask)
    torch.testing.assert_close(sample_logp, full * c_mask, atol=2e-5, rtol=0)
    for row, m in zip(c_ids.tolist(), c_mask.tolist()):
        n = sum(m)
        assert m == [1] * n + [0] * (len(m) - n)
        assert eos not in row[: n - 1]  # nothing is kept after the first EOS
        assert all(t == 0 for t in row[n:])


def test_sampling_is_reproducible_with_a_generator(bpe_tokenizer):
    model = tiny(bpe_tokenizer)
    ids, mask = encode_prompts(bpe_tokenizer, ["12+3="] * 16)
    draw = lambda s: sample_completions(model, ids, mask, Decoding(max_new_tokens=6, eos_id=1, pad_id=0),
                                        torch.Generator().manual_seed(s))[0]
    assert torch.equal(draw(3), draw(3))
    assert not torch.equal(draw(3), draw(4))


def test_reward_needs_eos_and_rejects_special_tokens(bpe_tokenizer):
    tok = bpe_tokenizer
    eight, five = tok.convert_tokens_to_ids("8"), tok.convert_tokens_to_ids("5")
    ids = torch.tensor([[eight, five, 1, 0], [eight, five, five, five], [eight, 2, five, 1]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 1, 1]])
    texts = completion_texts(tok, ids, mask, eos_id=1)
    assert texts[0] == ("85", True)
    assert texts[1][1] is False  # no EOS: truncated
    assert texts[2][1] is False  # <unk> inside


def test_skipping_zero_advantage_rows_gives_the_same_update(bpe_tokenizer):
    """Rows with A = 0 contribute nothing: forwarding only the others gives identical parameters."""
    ids, mask = encode_prompts(bpe_tokenizer, ["12+3=", "99-9=", "4*5=", "7+7="])
    completion = torch.tensor([[5, 6, 1], [7, 1, 0], [8, 9, 1], [5, 1, 0]])
    completion_mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 1, 0]])
    advantages = torch.tensor([1.0, 0.0, -0.5, 0.0])
    params = []
    for skip in (True, False):
        for loss_type in ("grpo", "dapo"):
            model = tiny(bpe_tokenizer, seed=1)
            batch = RolloutBatch("A", 1, [], 4, ids, mask, completion, completion_mask, torch.zeros(completion.shape),
                                 torch.zeros(4), GrpoConfig(skip_zero_advantage=skip, loss_type=loss_type))
            learner = Learner(lambda *t, m=model: completion_logprobs(m.train(), *t), bpe_tokenizer, None, None)
            loss, n_active, _ = own_grpo_loss(batch, learner, advantages)
            assert n_active == (2 if skip else 4)
            optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.99))
            loss.backward()
            optimizer.step()
            params.append((loss.item(), torch.cat([p.detach().flatten() for p in model.parameters()])))
    for (loss_skip, p_skip), (loss_full, p_full) in zip(params[:2], params[2:]):
        assert abs(loss_skip - loss_full) < 1e-6
        torch.testing.assert_close(p_skip, p_full, atol=1e-7, rtol=0)

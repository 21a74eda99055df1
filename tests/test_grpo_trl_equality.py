"""mrl.core.grpo.policy_loss equals TRL's GRPOTrainer._compute_loss on the same inputs (docs/architecture.md, GRPO
core).

A real `trl.GRPOTrainer` is built on a tiny local model; both sides get the same prompt and
completion ids, advantages, old and reference log-probs. TRL computes the current log-probs with
its own forward; mrl with `completion_logprobs` (unpadded prompts, so positions agree). Losses
and parameter gradients must agree to 1e-6.
"""
import itertools

import pytest
import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM
from trl import GRPOConfig, GRPOTrainer

from mrl.core.config import FamilyConfig
from mrl.core.grpo import Surrogate, group_advantages, policy_loss
from mrl.runtime.rollout import completion_logprobs
from mrl.runtime.zoo import build_model

B, G, P, T = 8, 4, 5, 7


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, bpe_tokenizer):
    path = tmp_path_factory.mktemp("tiny")
    model = build_model(FamilyConfig(arch="qwen2", d_model=32, n_layers=2, n_heads=2, n_kv_heads=1, d_ff=64),
                        len(bpe_tokenizer), 48, seed=0)
    model.save_pretrained(path)
    bpe_tokenizer.save_pretrained(path)
    return path


def make_trainer(model_dir, tokenizer, tmp_path, loss_type, level, beta, bias_correction):
    args = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none",
                      activation_checkpointing=False, per_device_train_batch_size=B, num_generations=G,
                      max_completion_length=T, loss_type=loss_type, importance_sampling_level=level, beta=beta,
                      epsilon=0.2, epsilon_high=0.28, use_bias_correction_kl=bias_correction, disable_tqdm=True,
                      save_strategy="no", seed=0)
    dataset = Dataset.from_list([{"prompt": "1+2="}] * 4)
    trainer = GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(model_dir), processing_class=tokenizer,
                          reward_funcs=[lambda completions, **kw: [0.0] * len(completions)], args=args,
                          train_dataset=dataset)
    trainer.current_gradient_accumulation_steps = 1
    trainer.model.train()
    return trainer


def make_inputs(vocab: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    prompt_ids = torch.randint(3, vocab, (B, P), generator=g)
    completion_ids = torch.randint(3, vocab, (B, T), generator=g)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    completion_mask = (torch.arange(T) < lengths[:, None]).long()
    rewards = torch.randint(0, 2, (B,), generator=g).float()
    return {
        "prompt_ids": prompt_ids, "prompt_mask": torch.ones(B, P, dtype=torch.long),
        "completion_ids": completion_ids, "completion_mask": completion_mask,
        "advantages": group_advantages(rewards, G) + 0.3 * torch.randn(B, generator=g),
        # off-policy old and reference log-probs so that ratios, clipping and KL are exercised
        "old_per_token_logps": -4.0 + 0.4 * torch.randn(B, T, generator=g),
        "ref_per_token_logps": -4.0 + 0.4 * torch.randn(B, T, generator=g),
        "num_items_in_batch": completion_mask.sum().float(),
    }


# (loss type, ratio level, beta, TRL's use_bias_correction_kl); the correction only matters with beta > 0
CASES = [(loss, level, beta, correction)
         for loss, level, (beta, correction) in itertools.product(
             ["grpo", "bnpo", "dr_grpo", "dapo"], ["token", "sequence"], [(0.0, False), (0.04, False), (0.04, True)])]


@pytest.mark.parametrize("loss_type,level,beta,bias_correction", CASES)
def test_policy_loss_equals_trl(model_dir, bpe_tokenizer, tmp_path, loss_type, level, beta, bias_correction):
    trainer = make_trainer(model_dir, bpe_tokenizer, tmp_path, loss_type, level, beta, bias_correction)
    for seed in (0, 1):
        inputs = make_inputs(len(bpe_tokenizer), seed)
        trainer.model.zero_grad()
        trl_loss = trainer._compute_loss(trainer.model, inputs)
        trl_loss.backward()
        trl_grads = [p.grad.clone() for p in trainer.model.parameters()]

        ours = AutoModelForCausalLM.from_pretrained(model_dir).train()
        logp = completion_logprobs(ours, inputs["prompt_ids"], inputs["prompt_mask"], inputs["completion_ids"],
                                   inputs["completion_mask"])
        surrogate = Surrogate(level=level, loss_type=loss_type, eps_low=0.2, eps_high=0.28, beta=beta,
                              max_completion_length=T, kl_bias_correction=bias_correction)
        loss, _ = policy_loss(logp, inputs["old_per_token_logps"], inputs["advantages"], inputs["completion_mask"],
                              surrogate, ref_logp=inputs["ref_per_token_logps"], num_items=inputs["num_items_in_batch"])
        loss.backward()
        assert abs(loss.item() - trl_loss.item()) < 1e-6, (loss.item(), trl_loss.item())
        for ours_p, trl_grad in zip(ours.parameters(), trl_grads):
            torch.testing.assert_close(ours_p.grad, trl_grad, atol=1e-6, rtol=1e-5)


def test_on_policy_ratio_is_one_and_trl_default_matches(model_dir, bpe_tokenizer, tmp_path):
    """Without old log-probs TRL uses logp.detach() (ratio 1): the loss is -mean advantage-weighted."""
    trainer = make_trainer(model_dir, bpe_tokenizer, tmp_path, "grpo", "token", 0.0, False)
    inputs = make_inputs(len(bpe_tokenizer), 3)
    del inputs["old_per_token_logps"]
    trl_loss = trainer._compute_loss(trainer.model, inputs)
    ours = AutoModelForCausalLM.from_pretrained(model_dir)
    logp = completion_logprobs(ours, inputs["prompt_ids"], inputs["prompt_mask"], inputs["completion_ids"],
                               inputs["completion_mask"])
    loss, stats = policy_loss(logp, logp.detach(), inputs["advantages"], inputs["completion_mask"])
    assert abs(loss.item() - trl_loss.item()) < 1e-6
    assert abs(loss.item() + inputs["advantages"].mean().item()) < 1e-6
    assert stats["clip_low"] == 0 and stats["clip_high"] == 0

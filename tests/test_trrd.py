"""TRRD (a reconstruction of RLAD's ratio, mrl/core/probes/trrd.py) by hand: the anchored ratio and its clamp, alpha = 1
is GRPO exactly, the loss equal to its equation written out, and the teacher's log-probs projected across
tokenizers by THL (group totals kept; one tokenizer: the teacher's own per-token log-probs)."""
import math

import numpy as np
import pytest
import torch

from mrl.core.batch import completion_texts
from mrl.core.grpo import group_advantages
from mrl.core.probes import PeerView, get_probe, probe_config
from mrl.core.probes.trrd import trrd_anchor
from mrl.core.thl import align
from mrl.runtime.rollout import completion_logprobs
from mrl.runtime.teacher import LearnerSamples, spread_over_learner_tokens, teacher_logprobs
from mrl.runtime.zoo import train_tokenizer
from test_probes import G, answers, loss_and_grads, make_batch, make_model, the_loss


@pytest.fixture(scope="module")
def problems(arith_task):
    return arith_task.pool["S1"][:3]


def test_the_anchored_ratio_is_old_and_teacher_ratios_mixed_with_the_teacher_term_clamped():
    logp, old, teacher = torch.tensor([-1.0, -1.0, -1.0]), torch.tensor([-1.2, -1.0, -0.9]), \
        torch.tensor([-1.5, -4.0, 0.5])
    ratio = torch.exp(logp - trrd_anchor(logp, old, teacher, alpha=0.3, clamp=1.0))
    expected = [math.exp(0.3 * 0.2 + 0.7 * 0.5),    # (pi/pi_old)^0.3 (pi/pi_T)^0.7 inside the clamp
                math.exp(0.7 * 1.0),                # log pi/pi_T = 3 clamped to 1
                math.exp(0.3 * -0.1 + 0.7 * -1.0)]  # -1.5 clamped to -1
    assert ratio.tolist() == pytest.approx(expected)
    assert torch.equal(trrd_anchor(logp, old, teacher, alpha=1.0, clamp=1.0), old)   # alpha = 1: GRPO's ratio


def own_batch(tokenizer, task, problems, teacher_logp):
    model = make_model(tokenizer)
    batch, learner = make_batch(model, tokenizer, problems, [answers(problems[0], 1), answers(problems[1], 2),
                                                             answers(problems[2], 0)], task.verify)
    batch.teacher_logp = teacher_logp(batch.completion_ids.shape)
    return model, batch, learner


def test_alpha_one_is_grpo_exactly(bpe_tokenizer, arith_task, problems):
    def teacher(shape):
        return -3.0 * torch.rand(shape, generator=torch.Generator().manual_seed(1))

    model, batch, learner = own_batch(bpe_tokenizer, arith_task, problems, teacher)
    trrd = loss_and_grads(model, the_loss(get_probe("trrd").loss(batch, PeerView(), learner,
                                                                 probe_config("trrd", alpha=1.0))))
    model, batch, learner = own_batch(bpe_tokenizer, arith_task, problems, teacher)
    grpo = loss_and_grads(model, the_loss(get_probe("grpo").loss(batch, PeerView(), learner, probe_config("grpo"))))
    assert trrd[0] == grpo[0] and all(torch.equal(a, b) for a, b in zip(trrd[1], grpo[1]))


def test_trrd_loss_is_its_equation(bpe_tokenizer, arith_task, problems):
    """The teacher 0.8 nats above the learner on even tokens (kept) and 2 below on odd ones (clamped to 1): r_t =
    exp(0.5 clamp(log pi - log pi_T, -1, 1)) in value, the clipped surrogate with the own advantages, and the
    gradient of that expression (a clamped token keeps only the old-policy half of it)."""
    model, batch, learner = own_batch(bpe_tokenizer, arith_task, problems, lambda shape: None)
    model.train()
    with torch.no_grad():
        own = completion_logprobs(model, batch.prompt_ids, batch.prompt_mask, batch.completion_ids,
                                  batch.completion_mask)
    offsets = torch.where(torch.arange(own.shape[1]) % 2 == 0, 0.8, -2.0)
    batch.teacher_logp = own + offsets
    loss, grads = loss_and_grads(model, the_loss(get_probe("trrd").loss(batch, PeerView(), learner,
                                                                        probe_config("trrd"))))
    model.zero_grad(set_to_none=True)
    logp = completion_logprobs(model, batch.prompt_ids, batch.prompt_mask, batch.completion_ids, batch.completion_mask)
    mask = batch.completion_mask.float()
    log_teacher_ratio = torch.clamp(logp - batch.teacher_logp, -1.0, 1.0)    # -0.8 kept, 2 clamped to 1
    assert torch.allclose(log_teacher_ratio.detach(), torch.where(torch.arange(own.shape[1]) % 2 == 0, -0.8, 1.0)
                          .expand_as(own), atol=1e-5)
    ratio = torch.exp(0.5 * (logp - logp.detach()) + 0.5 * log_teacher_ratio)
    advantages = group_advantages(batch.rewards, G, batch.grpo.scale)[:, None]
    per_token = -torch.min(ratio * advantages, torch.clamp(ratio, 0.8, 1.2) * advantages)
    by_hand = ((per_token * mask).sum(-1) / mask.sum(-1)).mean()
    by_hand.backward()
    assert loss == pytest.approx(by_hand.item(), abs=1e-6)
    assert all(torch.allclose(a, p.grad if p.grad is not None else torch.zeros_like(p), atol=1e-6)
               for a, p in zip(grads, model.parameters()))


def test_the_teacher_projection_keeps_every_groups_total(arith_task):
    bpe = train_tokenizer("bpe", arith_task.corpus, 48, 48)
    unigram = train_tokenizer("unigram", arith_task.corpus, 40, 48)
    text = "1234+5678=6912"
    learner_ids = bpe(text, add_special_tokens=False)["input_ids"]
    alignment = align(text, bpe, unigram, learner_ids)
    teacher = np.random.default_rng(0).integers(-4096, 0, len(alignment.dst_ids)) / 1024.0
    spread = spread_over_learner_tokens(alignment, teacher)
    assert spread.shape == (len(learner_ids),)
    for g in range(alignment.n_groups):
        assert spread[alignment.src_group == g].sum() == pytest.approx(teacher[alignment.dst_group == g].sum())
    assert spread.sum() == pytest.approx(teacher.sum())
    same = align(text, bpe, bpe, learner_ids)
    assert spread_over_learner_tokens(same, np.arange(len(learner_ids), dtype=float)).tolist() == \
        list(range(len(learner_ids)))


def test_a_teacher_equal_to_the_learner_scores_its_tokens_as_the_learner(bpe_tokenizer, arith_task, problems):
    model, batch, learner = own_batch(bpe_tokenizer, arith_task, problems, lambda shape: None)
    texts = [t for t, _ in completion_texts(bpe_tokenizer, batch.completion_ids, batch.completion_mask,
                                           bpe_tokenizer.eos_token_id)]
    prompts = [p.prompt for p in batch.problems for _ in range(G)]
    samples = LearnerSamples(prompts, batch.completion_ids, batch.completion_mask, texts)
    fallback = torch.zeros(batch.completion_ids.shape)
    got, failed = teacher_logprobs(model, bpe_tokenizer, bpe_tokenizer, samples, fallback)
    model.eval()
    with torch.no_grad():
        own = completion_logprobs(model, batch.prompt_ids, batch.prompt_mask, batch.completion_ids,
                                  batch.completion_mask) * batch.completion_mask
    assert failed == 0 and torch.allclose(got, own, atol=1e-5)


def test_trrd_config_and_a_run_without_a_teacher_are_refused(tiny_zoo_paths):
    from testsupport import TINY_TASK, run_of
    from mrl.core.config import ConfigError, GrpoConfig, RunnerConfig, TaskConfig
    from mrl.runtime.runner import run_concurrent

    with pytest.raises(ConfigError, match="TrrdConfig.alpha"):
        probe_config("trrd", alpha=1.5)
    with pytest.raises(ConfigError, match="takes its teacher from another policy"):
        run_concurrent(run_of({"A": tiny_zoo_paths["A"]}, TaskConfig(**TINY_TASK), GrpoConfig(steps=1),
                               RunnerConfig(), probe=probe_config("trrd")), progress=False)


@pytest.mark.slow
def test_trrd_runs_between_families_and_is_deterministic(tiny_zoo_paths):
    """A (GPT-2 + BPE) with B's starting checkpoint as its teacher and B with A's, through the runner: THL across
    tokenizers, the same metrics twice, the teacher's statistics reported."""
    from testsupport import pair_run_twice

    steps, evals = pair_run_twice(tiny_zoo_paths, "trrd")
    assert steps[0] == steps[1] and evals[0] == evals[1]
    assert all(row["teacher_thl_failed"] == 0 and row["teacher_log_ratio_mean"] != 0 for row in steps[0])

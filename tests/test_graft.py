"""GRAFT (a reconstruction, mrl/core/probes/graft.py) by hand: the compatibility weight floored at delta and capped at
1, the token clip, the all-fail gate, a forged success never entering, no peer success = grpo exactly, and the
loss equal to its equation written out with the model's own log-probs."""
import math

import numpy as np
import pytest
import torch

from mrl.core.grpo import group_advantages
from mrl.core.probes import PeerView, get_probe, probe_config
from mrl.core.probes.advantages import pooled_advantages
from mrl.core.probes.graft import compatibility, token_weights
from mrl.core.probes.terms import rescue_set
from mrl.core.probes.terms import own_grpo_loss, weighted_sequence_loss
from mrl.core.see import Rollout
from mrl.runtime.rollout import completion_logprobs
from test_probes import G, answers, loss_and_grads, make_batch, make_model, peer_rollouts, the_loss


@pytest.fixture(scope="module")
def problems(arith_task):
    return arith_task.pool["S1"][:3]


def test_compatibility_is_floored_at_delta_and_capped_at_one():
    s, c = compatibility([-1.0, -1.0], [-0.5, -0.5, -0.5], delta=0.8)     # mean -1 vs -0.5: s = e^-0.5
    assert s == pytest.approx(math.exp(-0.5)) and c == 0.8
    s, c = compatibility([-0.1, -0.1], [-0.3], delta=0.8)                  # s = e^0.2 > 1
    assert s == pytest.approx(math.exp(0.2)) and c == 1.0
    s, c = compatibility([-0.2], [-0.2 - math.log(0.9)], delta=0.8)        # s = 0.9 lies inside
    assert c == pytest.approx(0.9)
    assert compatibility([-1.0], [-0.5], delta=0.0)[1] == pytest.approx(math.exp(-0.5))


def test_token_weights_clip_each_ratio_then_scale_by_compatibility():
    log_rho = np.log([0.1, 0.9, 1.0, 1.5])
    assert token_weights(log_rho, 0.8, 0.2, 0.2) == pytest.approx(0.8 * np.array([0.8, 0.9, 1.0, 1.2]))


def test_the_gate_takes_only_prompts_whose_own_group_all_failed():
    k_own = torch.tensor([0, 0, 1, 0])
    assert rescue_set(k_own, G, 0.0, [n > 0 for n in [2, 0, 3, 1]]) == [0, 3]   # graft's gate: SGT's, tau = 0
    assert rescue_set(k_own, G, 0.0, [False] * 4) == []


def test_without_peer_successes_graft_is_grpo(bpe_tokenizer, arith_task, problems):
    model = make_model(bpe_tokenizer)
    own = [answers(problems[0], 1), answers(problems[1], 0), answers(problems[2], 2)]
    batch, learner = make_batch(model, bpe_tokenizer, problems, own, arith_task.verify)
    peers = PeerView(rollout=peer_rollouts(bpe_tokenizer, problems, [answers(p, 0) for p in problems],
                                           arith_task.verify), tokenizers={"P": bpe_tokenizer})
    out = get_probe("graft").loss(batch, peers, learner, probe_config("graft"))
    grpo, _, _ = own_grpo_loss(batch, learner, group_advantages(batch.rewards, G, batch.grpo.scale))
    assert out.stats["graft_samples"] == 0 and the_loss(out).item() == pytest.approx(grpo.item(), abs=1e-7)


def test_graft_loss_is_its_equation(bpe_tokenizer, arith_task, problems):
    """Own groups with 1, 0 and 0 successes; the peer (same tokenizer) has 2, 3 and 0: only prompt 1 transfers
    (prompt 0's own group succeeded once, prompt 2's peer has nothing), its 3 successes each weighted by
    c(y) * clip(rho_t) with rho_t = pi_learner / pi_peer per token."""
    model = make_model(bpe_tokenizer)
    verify = arith_task.verify
    batch, learner = make_batch(model, bpe_tokenizer, problems, [answers(problems[0], 1), answers(problems[1], 0),
                                                        answers(problems[2], 0)], verify)
    peer_texts = [answers(problems[0], 2), answers(problems[1], 3), answers(problems[2], 0)]
    rollouts = peer_rollouts(bpe_tokenizer, problems, peer_texts, verify)
    out = get_probe("graft").loss(batch, PeerView(rollout=rollouts, tokenizers={"P": bpe_tokenizer}),
                                  learner, probe_config("graft"))
    assert (out.stats["graft_candidates"], out.stats["graft_prompts"], out.stats["graft_samples"]) == (2, 1, 3)
    got, got_grads = loss_and_grads(model, the_loss(out))

    used = [r for r in rollouts[problems[1].pid] if r.reward > 0]
    peer_batch, _ = make_batch(model, bpe_tokenizer, [problems[1]], [[r.completion for r in used] + ["x"] * (G - 3)],
                               verify)
    logp = completion_logprobs(model, peer_batch.prompt_ids[:3], peer_batch.prompt_mask[:3],
                               peer_batch.completion_ids[:3], peer_batch.completion_mask[:3])
    mask = peer_batch.completion_mask[:3]
    weights = torch.zeros_like(logp)
    for row, record in enumerate(used):
        n = len(record.logps)
        own = logp[row, :n].detach().double()
        s = math.exp(own.mean().item() - float(np.mean(record.logps)))
        c = min(1.0, max(0.8, s))
        rho = torch.exp(own - torch.tensor(record.logps, dtype=torch.float64))
        weights[row, :n] = (c * rho.clamp(0.8, 1.2)).to(weights.dtype)
    advantage = pooled_advantages([torch.tensor([0.0] * G + [1.0] * 3)])[0][G]
    peer_sum = weighted_sequence_loss(logp, mask, advantage.repeat(3), weights)
    grpo, _, _ = own_grpo_loss(batch, learner, group_advantages(batch.rewards, G, batch.grpo.scale))
    want, want_grads = loss_and_grads(model, (grpo * 3 * G + peer_sum) / (3 * G + 3))
    assert got == pytest.approx(want, rel=1e-5, abs=1e-6)
    for a, b in zip(got_grads, want_grads):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_a_forged_success_never_enters_graft(bpe_tokenizer, arith_task, problems):
    """A peer that marks wrong answers as successes: the learner's verifier rejects them, nothing transfers."""
    model = make_model(bpe_tokenizer)
    batch, learner = make_batch(model, bpe_tokenizer, problems[:1], [answers(problems[0], 0)], arith_task.verify)
    rollouts = peer_rollouts(bpe_tokenizer, problems[:1], [answers(problems[0], 0)], arith_task.verify)
    forged = {pid: [Rollout(**{**r.__dict__, "reward": 1.0}) for r in records] for pid, records in rollouts.items()}
    out = get_probe("graft").loss(batch, PeerView(rollout=forged, tokenizers={"P": bpe_tokenizer}),
                                  learner, probe_config("graft"))
    assert out.stats["rejected_successes"] == G and out.stats["graft_samples"] == 0


@pytest.mark.slow
def test_graft_runs_between_families_and_is_deterministic(tiny_zoo_paths):
    """A (GPT-2 + BPE) and B (Llama + Unigram) under graft through the runner: THL across tokenizers, the same
    metrics twice."""
    from testsupport import pair_run_twice

    steps, evals = pair_run_twice(tiny_zoo_paths, "graft")
    assert steps[0] == steps[1] and evals[0] == evals[1]
    assert all("graft_candidates" in row for row in steps[0])
    assert sum(row["graft_samples"] for row in steps[0]) > 0

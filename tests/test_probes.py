"""The probes on hand-built batches: each claim of docs/architecture.md's probe section checked against an
independent computation."""
import math

import pytest
import torch

from mrl.core.batch import Learner, RolloutBatch, encode_prompts
from mrl.core.config import ConfigError, FamilyConfig, GrpoConfig
from mrl.core.grpo import Surrogate, group_advantages, policy_loss
from mrl.core.probes import PeerView, get_probe, probe_config
from mrl.core.probes.advantages import pooled_advantages, xgrpo_advantages
from mrl.core.probes.terms import rescue_set
from mrl.core.probes.terms import own_grpo_loss
from mrl.core.see import Exchange, GroupStats, PolicySpec, Rollout, Success
from mrl.runtime.actor import policy_optimizer
from mrl.runtime.rollout import completion_logprobs
from mrl.runtime.runner import collect_for
from mrl.runtime.zoo import build_model

G = 4


@pytest.fixture(scope="module")
def problems(arith_task):
    return arith_task.pool["S1"][:3]


def make_model(tokenizer, seed=0):
    return build_model(FamilyConfig(arch="llama", d_model=32, n_layers=2, n_heads=2, n_kv_heads=1, d_ff=64),
                       len(tokenizer), 48, seed)


def make_batch(model, tokenizer, problems, texts_per_prompt, verify, grpo=None):
    """(a RolloutBatch of `model` whose completions are the given texts (EOS appended) for each prompt, its
    Learner)."""
    tok = tokenizer
    texts = [t for row in texts_per_prompt for t in row]
    expanded = [p for p in problems for _ in range(G)]
    prompt_ids, prompt_mask = encode_prompts(tok, [p.prompt for p in expanded])
    ids = [tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for t in texts]
    length = max(map(len, ids))
    completion_ids = torch.tensor([row + [tok.pad_token_id] * (length - len(row)) for row in ids])
    completion_mask = torch.tensor([[1] * len(row) + [0] * (length - len(row)) for row in ids])
    rewards = torch.tensor([verify(t, p) for t, p in zip(texts, expanded)])

    def logprobs(*tensors):
        model.train()
        return completion_logprobs(model, *tensors)

    return (RolloutBatch("L", 1, list(problems), G, prompt_ids, prompt_mask, completion_ids, completion_mask,
                         torch.zeros(completion_ids.shape), rewards, grpo or GrpoConfig(group_size=G, lr=1e-3)),
            Learner(logprobs, tok, verify, torch.Generator().manual_seed(0)))


def answers(problem, correct: int):
    return [problem.answer] * correct + [str(int(problem.answer) + 1 + i) for i in range(G - correct)]


def grads(model):
    return [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]


def the_loss(output):
    """The one loss of a single-update probe output (None when it has none)."""
    assert output.updates <= 1
    return output.loss(0) if output.updates else None


def loss_and_grads(model, loss):
    model.zero_grad(set_to_none=True)
    loss.backward()
    return loss.item(), grads(model)


def apply_updates(model, output, lr=1e-3):
    """What the actor does with a probe's output: backward and one (fused) Adam step after each loss, in order."""
    optimizer = policy_optimizer(model.parameters(), lr)
    values = []
    for m in range(output.updates):
        loss = output.loss(m)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        values.append(loss.item())
    return values


# --- SGT --------------------------------------------------------------------------------------------

def test_sgt_gate_fires_exactly_when_own_group_fails_and_a_peer_succeeded():
    k_own = torch.tensor([0, 0, 1, 3, 0])
    peer_has_success = [True, False, True, True, True]
    assert rescue_set(k_own, 4, 0.0, peer_has_success) == [0, 4]          # k_n = 0 and k_m >= 1 only
    assert rescue_set(k_own, 4, 0.25, peer_has_success) == [0, 2, 4]      # threshold variant: k_n / G <= 1/4
    assert rescue_set(k_own, 4, 0.0, [False] * 5) == []


def test_sgt_loss_is_grpo_plus_lambda_nll_of_the_verified_peer_success(bpe_tokenizer, arith_task, problems):
    model = make_model(bpe_tokenizer)
    verify = arith_task.verify
    batch, learner = make_batch(model, bpe_tokenizer, problems,
                       [answers(problems[0], 0), answers(problems[1], 2), answers(problems[2], 0)],
                       verify)
    successes = {problems[0].pid: [Success("P", 0, problems[0].pid, problems[0].answer, "arith-integer")],
                 problems[1].pid: [Success("P", 0, problems[1].pid, problems[1].answer, "arith-integer")]}
    cfg = probe_config("sgt", lam=0.1)
    out = get_probe("sgt").loss(batch, PeerView(success=successes), learner, cfg)
    assert out.stats["rescue_size"] == 1 and out.stats["rescue_candidates"] == 2  # prompt 2 failed but no peer success
    got, got_grads = loss_and_grads(model, the_loss(out))
    # independent: GRPO on the own groups + 0.1 * token-mean NLL of learner_tok(answer) + EOS after prompt 0
    own, _, _ = own_grpo_loss(batch, learner, group_advantages(batch.rewards, G))
    target = bpe_tokenizer(problems[0].answer, add_special_tokens=False)["input_ids"] + [bpe_tokenizer.eos_token_id]
    ids, mask = encode_prompts(bpe_tokenizer, [problems[0].prompt])
    logp = completion_logprobs(model, ids, mask, torch.tensor([target]), torch.ones(1, len(target)))
    expected = own + 0.1 * (-logp.mean())
    want, want_grads = loss_and_grads(model, expected)
    assert got == pytest.approx(want, abs=1e-6)
    for a, b in zip(got_grads, want_grads):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_a_forged_success_never_enters_sgt(bpe_tokenizer, arith_task, problems):
    model = make_model(bpe_tokenizer)
    batch, learner = make_batch(model, bpe_tokenizer, problems[:1], [answers(problems[0], 0)], arith_task.verify)
    wrong = str(int(problems[0].answer) + 7)
    forged = {problems[0].pid: [Success("P", 0, problems[0].pid, wrong, "arith-integer")]}
    out = get_probe("sgt").loss(batch, PeerView(success=forged), learner, probe_config("sgt"))
    assert the_loss(out) is None and out.stats["rescue_size"] == 0 and out.stats["rejected_successes"] == 1
    # and the runner never hands it over: collect re-verifies with the learner's verifier and counts it
    exchange = Exchange({"L": PolicySpec(vocab_size=48, tokenizer_id="L:bpe"), "P": PolicySpec(48, "P:bpe")})
    exchange.advance(1)
    exchange.publish(forged[problems[0].pid][0])
    exchange.publish(Success("P", 0, problems[0].pid, problems[0].answer, "arith-integer"))
    kept = collect_for(exchange, ("success",), "L", problems[:1], arith_task, max_staleness=1)
    assert [s.completion for s in kept["success"][problems[0].pid]] == [problems[0].answer]
    assert exchange.counters["forged"] == 1


# --- XGRPO ------------------------------------------------------------------------------------------

def test_xgrpo_with_gamma_zero_is_grpo(bpe_tokenizer, arith_task, problems):
    rewards = torch.tensor([1.0, 0, 0, 1, 0, 0, 0, 0, 1, 1, 1, 0])
    peer = dict(peer_n=torch.tensor([4.0, 4, 0]), peer_sum=torch.tensor([4.0, 1, 0]),
                peer_sq_sum=torch.tensor([4.0, 1, 0]))
    advantages, _ = xgrpo_advantages(rewards, G, gamma=0.0, std="own", **peer)
    assert torch.equal(advantages, group_advantages(rewards, G))
    model = make_model(bpe_tokenizer)
    batch, learner = make_batch(model, bpe_tokenizer, problems,
                       [answers(problems[0], 1), answers(problems[1], 2), answers(problems[2], 3)],
                       arith_task.verify)
    stats = {p.pid: [GroupStats("P", 0, p.pid, G, 3.0, 3.0)] for p in problems}
    x = get_probe("xgrpo").loss(batch, PeerView(group_stats=stats), learner, probe_config("xgrpo", gamma=0.0, std="own"))
    g = get_probe("grpo").loss(batch, PeerView(), learner, probe_config("grpo"))
    assert the_loss(x).item() == the_loss(g).item()


def test_xgrpo_mixed_baseline_by_hand():
    rewards = torch.tensor([1.0, 0, 0, 0])
    advantages, baseline = xgrpo_advantages(rewards, 4, torch.tensor([4.0]), torch.tensor([4.0]), torch.tensor([4.0]),
                                            gamma=0.5, std="pooled")
    b = 0.5 * 0.25 + 0.5 * 1.0                                    # own mean 1/4, peer mean 1
    pooled_std = math.sqrt((5 - 25 / 8) / 7)                      # rewards 1,0,0,0,1,1,1,1
    assert baseline.item() == pytest.approx(b)
    assert advantages.tolist() == pytest.approx([(1 - b) / (pooled_std + 1e-4)] + [-b / (pooled_std + 1e-4)] * 3)
    # own std is 0 for a uniform group: the pooled std stands in instead of dividing by eps
    uniform, _ = xgrpo_advantages(torch.zeros(4), 4, torch.tensor([4.0]), torch.tensor([2.0]), torch.tensor([2.0]),
                                  gamma=0.5, std="own")
    assert uniform.abs().max() < 2


# --- PRP --------------------------------------------------------------------------------------------

def peer_rollouts(tokenizer, problems, texts_per_prompt, verify, seed=0):
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for problem, texts in zip(problems, texts_per_prompt):
        records = []
        for text in texts:
            ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
            logps = (-0.2 - 2.0 * torch.rand(len(ids), generator=gen)).tolist()
            records.append(Rollout("run", "P", 0, problem.pid, problem.prompt, text, ids, logps,
                                   float(verify(text, problem)), "eos", "P:bpe"))
        out[problem.pid] = records
    return out


def batch_with_same_tokenizer_peer(tokenizer, task, problems):
    """The learner's groups (1, 0 and 2 correct of G) and a peer with the same tokenizer (2 correct each)."""
    batch, learner = make_batch(make_model(tokenizer), tokenizer, problems,
                                [answers(problems[0], 1), answers(problems[1], 0), answers(problems[2], 2)],
                                task.verify)
    rollouts = peer_rollouts(tokenizer, problems, [answers(p, 2) for p in problems], task.verify)
    return batch, learner, PeerView(rollout=rollouts, tokenizers={"P": tokenizer})


@pytest.mark.parametrize("naive", [False, True])
def test_prp_with_one_tokenizer_is_the_importance_weighted_grpo_term(bpe_tokenizer, arith_task, problems, naive):
    """Same tokenizer on both sides, no truncation: the peer half equals policy_loss with old_logp = the peer's
    log-probs and no clipping (value and gradient); prp_naive equals it with old_logp = the learner's own."""
    model = make_model(bpe_tokenizer)
    verify = arith_task.verify
    own_texts = [answers(problems[0], 1), answers(problems[1], 0), answers(problems[2], 2)]
    peer_texts = [answers(problems[0], 2), answers(problems[1], 3), answers(problems[2], 0)]
    batch, learner = make_batch(model, bpe_tokenizer, problems, own_texts, verify)
    rollouts = peer_rollouts(bpe_tokenizer, problems, peer_texts, verify)
    peers = PeerView(rollout=rollouts, tokenizers={"P": bpe_tokenizer})
    name = "prp_naive" if naive else "prp"
    cfg = probe_config(name) if naive else probe_config(name, clip=None, level="token")
    out = get_probe(name).loss(batch, peers, learner, cfg)
    assert out.stats["peer_samples"] == 12 and out.stats["thl_inexact"] == 0
    got, got_grads = loss_and_grads(model, the_loss(out))

    peer_batch, _ = make_batch(model, bpe_tokenizer, problems, peer_texts, verify)
    pooled = pooled_advantages([torch.cat([batch.rewards[i * G:(i + 1) * G], peer_batch.rewards[i * G:(i + 1) * G]])
                                for i in range(3)])
    own_adv, peer_adv = torch.cat([a[:G] for a in pooled]), torch.cat([a[G:] for a in pooled])
    own_loss, _, _ = own_grpo_loss(batch, learner, own_adv)
    logp = completion_logprobs(model, peer_batch.prompt_ids, peer_batch.prompt_mask,
                               peer_batch.completion_ids, peer_batch.completion_mask)
    old = torch.zeros_like(logp)
    for row, record in enumerate(r for p in problems for r in rollouts[p.pid]):
        old[row, :len(record.logps)] = torch.tensor(record.logps)
    old = logp.detach() if naive else old
    is_term, _ = policy_loss(logp, old, peer_adv, peer_batch.completion_mask, Surrogate(eps_low=1e9, eps_high=1e9))
    expected = (own_loss * 12 + is_term * 12) / 24
    want, want_grads = loss_and_grads(model, expected)
    assert got == pytest.approx(want, rel=1e-5, abs=1e-6)
    for a, b in zip(got_grads, want_grads):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_prp_truncation_and_sequence_level(bpe_tokenizer, arith_task, problems):
    """Truncation at c caps every weight; the sequence-level weight is one number per sample."""
    batch, learner, peers = batch_with_same_tokenizer_peer(bpe_tokenizer, arith_task, problems)
    free = get_probe("prp").loss(batch, peers, learner, probe_config("prp", clip=None))
    capped = get_probe("prp").loss(batch, peers, learner, probe_config("prp", clip=1e-3))
    seq = get_probe("prp").loss(batch, peers, learner, probe_config("prp", level="sequence", clip=None))
    assert capped.stats["truncated_tokens"] > 0 and free.stats["truncated_tokens"] == 0
    assert len({round(the_loss(o).item(), 6) for o in (free, capped, seq)}) == 3
    assert 0 < free.stats["ess_fraction"] <= 1


def test_prp_rescores_peer_rewards_with_the_learners_verifier(bpe_tokenizer, arith_task, problems):
    model = make_model(bpe_tokenizer)
    batch, learner = make_batch(model, bpe_tokenizer, problems[:1], [answers(problems[0], 1)], arith_task.verify)
    rollouts = peer_rollouts(bpe_tokenizer, problems[:1], [answers(problems[0], 0)], arith_task.verify)
    lying = {pid: [Rollout(**{**r.__dict__, "reward": 1.0}) for r in records] for pid, records in rollouts.items()}
    out = get_probe("prp").loss(batch, PeerView(rollout=lying, tokenizers={"P": bpe_tokenizer}), learner, probe_config("prp"))
    assert out.stats["reward_disagreements"] == G


def test_unknown_probe_names_and_knobs_name_the_allowed_ones():
    with pytest.raises(ConfigError, match="expected one of .*'sgt'"):
        get_probe("sgt2")
    with pytest.raises(ConfigError, match=r"knobs of SgtConfig: \['lam', 'tau'\]"):
        probe_config("sgt", gamma=0.5)
    with pytest.raises(ConfigError, match="SgtConfig.tau = 1.5"):
        probe_config("sgt", tau=1.5)


@pytest.mark.parametrize("name", ["prp", "prp_naive", "hacpo", "gspo", "gspo_x2", "naive"])
def test_a_pooling_probe_refuses_an_aggregation_it_cannot_honour(name):
    """PRP and HACPO pool own and peer sequences as a mean over sequences (grpo's aggregation); dapo is refused by
    name, while probes whose loss is the own-sample GRPO loss (plus a term) accept every aggregation."""
    with pytest.raises(ConfigError, match=r"GrpoConfig.loss_type = 'dapo' is not allowed with probe"):
        get_probe(name).check(GrpoConfig(loss_type="dapo"))
    get_probe(name).check(GrpoConfig(loss_type="grpo"))
    for open_probe in ("grpo", "xgrpo", "sgt"):
        get_probe(open_probe).check(GrpoConfig(loss_type="dapo"))


def test_grpo_with_minibatches_takes_one_update_per_share_against_the_sampling_policy(bpe_tokenizer, arith_task,
                                                                                       problems):
    """grpo at M updates: M losses; the first is the on-policy GRPO loss of its rows (ratio 1), every later one the
    clipped surrogate of its rows against the policy that sampled them, on the parameters the updates before left."""
    texts = [answers(problems[0], 1), answers(problems[1], 3), answers(problems[2], 0)]
    model = make_model(bpe_tokenizer)
    batch, learner = make_batch(model, bpe_tokenizer, problems, texts, arith_task.verify)
    advantages = group_advantages(batch.rewards, G)
    sampled = completion_logprobs(model, batch.prompt_ids, batch.prompt_mask, batch.completion_ids,
                                  batch.completion_mask).detach()
    out = get_probe("grpo").loss(batch, PeerView(), learner, probe_config("grpo", minibatches=2))
    optimizer = policy_optimizer(model.parameters(), 1e-2)
    rows = len(advantages)
    for m in range(out.updates):
        loss = out.loss(m)
        chunk = slice(m * math.ceil(rows / 2), (m + 1) * math.ceil(rows / 2))
        logp = completion_logprobs(model, batch.prompt_ids[chunk], batch.prompt_mask[chunk],
                                   batch.completion_ids[chunk], batch.completion_mask[chunk])
        want, _ = policy_loss(logp, sampled[chunk], advantages[chunk], batch.completion_mask[chunk])
        assert loss.item() == pytest.approx(want.item(), abs=1e-6)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    assert m == 1
    one = get_probe("grpo").loss(batch, PeerView(), learner, probe_config("grpo"))
    assert one.updates == 1


# --- HACPO ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("minibatches", [1, 2])
def test_hacpo_without_peers_is_gspo(bpe_tokenizer, arith_task, problems, minibatches):
    """One policy, no peers: HACPO's pooled group is its own, the mixed baseline the plain mean: GSPO exactly."""
    texts = [answers(problems[0], 1), answers(problems[1], 3), answers(problems[2], 0)]
    results = {}
    for name in ("hacpo", "gspo"):
        model = make_model(bpe_tokenizer)
        batch, learner = make_batch(model, bpe_tokenizer, problems, texts, arith_task.verify)
        out = get_probe(name).loss(batch, PeerView(), learner, probe_config(name, minibatches=minibatches))
        if minibatches == 1:
            value, gradients = loss_and_grads(model, the_loss(out))
        else:  # the actor's updates, one after each minibatch's loss: equal losses and equal parameters after
            value, gradients = apply_updates(model, out), [p.detach().clone() for p in model.parameters()]
            assert len(value) == minibatches
        results[name] = (value, gradients)
    assert results["hacpo"][0] == results["gspo"][0]
    for a, b in zip(results["hacpo"][1], results["gspo"][1]):
        assert torch.equal(a, b)


def test_gspo_own_loss_is_trl_sequence_level_grpo_with_hacpo_advantages(bpe_tokenizer, arith_task, problems):
    model = make_model(bpe_tokenizer)
    batch, learner = make_batch(model, bpe_tokenizer, problems,
                       [answers(problems[0], 1), answers(problems[1], 2), answers(problems[2], 0)],
                       arith_task.verify)
    out = get_probe("gspo").loss(batch, PeerView(), learner, probe_config("gspo"))
    got, _ = loss_and_grads(model, the_loss(out))
    advantages = group_advantages(batch.rewards, G, eps=1e-6)
    logp = completion_logprobs(model, batch.prompt_ids, batch.prompt_mask, batch.completion_ids,
                               batch.completion_mask)
    want, _ = policy_loss(logp, logp.detach(), advantages, batch.completion_mask,
                          Surrogate(level="sequence", eps_low=3e-4, eps_high=4e-4))
    assert got == pytest.approx(want.item(), abs=1e-6)


def test_hacpo_peer_terms_follow_the_clip_and_the_ratio_option(bpe_tokenizer, arith_task, problems):
    batch, learner, peers = batch_with_same_tokenizer_peer(bpe_tokenizer, arith_task, problems)
    narrow = get_probe("hacpo").loss(batch, peers, learner, probe_config("hacpo", clipping="fixed", delta=0.0))
    wide = get_probe("hacpo").loss(batch, peers, learner, probe_config("hacpo", clipping="symmetric", delta=0.99))
    assert narrow.stats["peer_samples"] == 12
    assert wide.stats["peer_kept"] > narrow.stats["peer_kept"]
    official = get_probe("hacpo").loss(batch, peers, learner, probe_config("hacpo", clipping="symmetric", delta=0.99,
                                                                  ratio="mean"))
    # one tokenizer: THL groups are tokens, the two ratios agree
    assert the_loss(official).item() == the_loss(wide).item()


def test_hacpo_reports_its_ratio_statistics_and_no_clip_keeps_every_peer(bpe_tokenizer, arith_task, problems):
    """Table 6 of the HACPO paper per step: log s of each source (mean, std, quantiles) and the fraction inside the
    clip range; clipping "none" (the paper's "no clip") keeps every peer sample."""
    batch, learner, peers = batch_with_same_tokenizer_peer(bpe_tokenizer, arith_task, problems)
    stepwise = get_probe("hacpo").loss(batch, peers, learner, probe_config("hacpo"))
    stats = stepwise.stats
    assert stats["inside_from_P"] == pytest.approx(stats["peer_kept"] / stats["peer_samples"])
    assert stats["log_s_q10_from_P"] <= stats["log_s_q50_from_P"] <= stats["log_s_q90_from_P"]
    assert stats["log_s_std_from_P"] >= 0 and stats["log_s_mean_self"] == 0.0  # one on-policy update: pi = pi_old
    free = get_probe("hacpo").loss(batch, peers, learner, probe_config("hacpo", clipping="none"))
    assert free.stats["inside_from_P"] == 1.0 and free.stats["peer_kept"] == free.stats["peer_samples"]
    assert the_loss(free).item() != the_loss(stepwise).item()


def test_hacpo_thl_and_mean_ratios_differ_across_tokenizers(bpe_tokenizer, arith_task, problems):
    """A char-level peer (Unigram) spends more tokens on the same text: the official mean-based ratio normalises
    each side by its own length, THL's by the shared groups."""
    from mrl.runtime.zoo import train_tokenizer
    unigram = train_tokenizer("unigram", arith_task.corpus, 40, 48)
    model = make_model(bpe_tokenizer)
    verify = arith_task.verify
    batch, learner = make_batch(model, bpe_tokenizer, problems,
                       [answers(problems[0], 1), answers(problems[1], 0), answers(problems[2], 2)],
                       verify)
    texts = [["137", "42", "9", "1000"] for _ in problems]
    peers = PeerView(rollout=peer_rollouts(unigram, problems, texts, verify), tokenizers={"P": unigram})
    cfg = dict(name="hacpo", clipping="symmetric", delta=0.99)
    thl = get_probe("hacpo").loss(batch, peers, learner, probe_config(**cfg))
    mean = get_probe("hacpo").loss(batch, peers, learner, probe_config(**cfg, ratio="mean"))
    assert thl.stats["thl_inexact"] == 0 and the_loss(thl).item() != the_loss(mean).item()

"""A poisoned peer (mrl/runtime/poison.py): what each attack publishes, that SEE rejects the malformed one, that a
forged success never enters any probe's loss while re-verification is on (by hand for every sharing probe, and through
the runner: the learner's metrics equal those beside an honest peer), and that without re-verification it does."""
import pytest
import torch

from mrl.core.config import ATTACKS, ConfigError, RunnerConfig
from mrl.core.probes import PROBES, PeerView, get_probe, probe_config
from mrl.core.see import Exchange, GroupStats, InvalidExperience, PolicySpec, Rollout, Success
from mrl.runtime.poison import forge
from mrl.runtime.spec import Variant
from test_probes import G, answers, loss_and_grads, make_batch, make_model, peer_rollouts

SHARING = sorted(name for name, probe in PROBES.items() if probe.kinds)
VOCAB = 64


@pytest.fixture(scope="module")
def problems(arith_task):
    return arith_task.pool["S1"][:3]


def honest_records(tokenizer, task, problems, correct=(1, 0, 2)) -> list:
    """What an honest peer "P" publishes for `problems` with `correct` right answers each: a Rollout per sample,
    a Success per right one, GroupStats per prompt (as PolicyActor.records)."""
    rollouts = peer_rollouts(tokenizer, problems, [answers(p, k) for p, k in zip(problems, correct)], task.verify)
    records = []
    for x, problem in enumerate(problems):
        group = [r.reward for r in rollouts[problem.pid]]
        for i, r in enumerate(rollouts[problem.pid]):
            records.append(Rollout(**{**r.__dict__, "sample": x * G + i}))
            if r.reward > 0:
                records.append(Success("P", 0, problem.pid, r.completion, task.verifier_id, sample=x * G + i))
        records.append(GroupStats("P", 0, problem.pid, G, sum(group), sum(v * v for v in group), sample=x))
    return records


def peer_view(records, tokenizer, reverify=True) -> PeerView:
    by_kind = {"rollout": {}, "group_stats": {}, "success": {}}
    for r in records:
        by_kind[r.kind].setdefault(r.prompt_id, []).append(r)
    return PeerView(**by_kind, tokenizers={"P": tokenizer}, reverify=reverify)


def test_forged_success_claims_every_sample_and_lying_stats_a_perfect_group(bpe_tokenizer, arith_task, problems):
    honest = honest_records(bpe_tokenizer, arith_task, problems)
    forged = forge(honest, "forged_success", arith_task.verifier_id, VOCAB)
    rollouts = [r for r in forged if isinstance(r, Rollout)]
    assert len(rollouts) == 3 * G and all(r.reward == 1.0 for r in rollouts)
    assert sum(isinstance(r, Success) for r in forged) == 3 * G      # one per sample, the 9 wrong ones forged
    assert [r for r in forged if isinstance(r, GroupStats)] == [r for r in honest if isinstance(r, GroupStats)]
    lying = forge(honest, "lying_stats", arith_task.verifier_id, VOCAB)
    stats = [r for r in lying if isinstance(r, GroupStats)]
    assert all(s.reward_sum == G and s.reward_sq_sum == G for s in stats)
    assert [r for r in lying if not isinstance(r, GroupStats)] == [r for r in honest if not isinstance(r, GroupStats)]
    exchange = Exchange({"P": PolicySpec(VOCAB, "P:bpe")})
    assert exchange.publish_many(lying) == len(lying)                # the lie is a group rewards in range can form
    with pytest.raises(ValueError, match="attack='bogus' is not allowed"):
        forge(honest, "bogus", arith_task.verifier_id, VOCAB)


def test_see_rejects_and_counts_every_malformed_record(bpe_tokenizer, arith_task, problems):
    honest = honest_records(bpe_tokenizer, arith_task, problems)
    exchange = Exchange({"P": PolicySpec(VOCAB, "P:bpe")})
    for record in forge(honest, "malformed", arith_task.verifier_id, VOCAB):
        with pytest.raises(InvalidExperience):
            exchange.publish(record)
    assert exchange.counters["rejected"] == len(honest)
    assert exchange.counters["rejected/out_of_vocab"] == 3 * G


@pytest.mark.parametrize("name", SHARING)
def test_a_forged_success_never_enters_a_probes_loss_while_reverification_is_on(name, bpe_tokenizer, arith_task,
                                                                                  problems):
    """Every sharing probe, own groups with 0, 0 and 1 successes (rescue and graft gates open), a peer with 1, 0
    and 2: the peer's records forged (every wrong sample claimed correct) give the loss and the gradients of the
    honest records, exactly; without re-verification the forged claims change them (the test can fail)."""
    honest = honest_records(bpe_tokenizer, arith_task, problems)
    forged = forge(honest, "forged_success", arith_task.verifier_id, VOCAB)
    own = [answers(problems[0], 0), answers(problems[1], 0), answers(problems[2], 1)]
    cfg = probe_config(name)

    def loss_grads(records, reverify=True):
        model = make_model(bpe_tokenizer)
        batch, learner = make_batch(model, bpe_tokenizer, problems, own, arith_task.verify)
        out = get_probe(name).loss(batch, peer_view(records, bpe_tokenizer, reverify), learner, cfg)
        return loss_and_grads(model, out.loss(0)) if out.updates else (None, None)

    (loss_h, grads_h), (loss_f, grads_f) = loss_grads(honest), loss_grads(forged)
    assert loss_f == loss_h
    assert all(torch.equal(a, b) for a, b in zip(grads_h, grads_f))
    if name != "xgrpo":                                              # reads group statistics only
        loss_trusting, _ = loss_grads(forged, reverify=False)
        assert loss_trusting != loss_h


def test_lying_group_statistics_move_xgrpo_even_with_reverification(bpe_tokenizer, arith_task, problems):
    """Group statistics carry no text: nothing can re-verify them (the limit the poisoned-peer table shows)."""
    honest = honest_records(bpe_tokenizer, arith_task, problems)
    lying = forge(honest, "lying_stats", arith_task.verifier_id, VOCAB)
    own = [answers(problems[0], 1), answers(problems[1], 2), answers(problems[2], 1)]
    losses = []
    for records in (honest, lying):
        batch, learner = make_batch(make_model(bpe_tokenizer), bpe_tokenizer, problems, own, arith_task.verify)
        out = get_probe("xgrpo").loss(batch, peer_view(records, bpe_tokenizer), learner, probe_config("xgrpo"))
        losses.append(out.loss(0).item())
    assert losses[0] != losses[1]


def test_runner_config_names_the_poisoned_policy_and_the_attack(tiny_zoo_paths):
    from testsupport import TINY_TASK, run_of
    from mrl.core.config import GrpoConfig, TaskConfig
    from mrl.runtime.runner import run_concurrent

    with pytest.raises(ConfigError, match=r"RunnerConfig.attack = 'bogus'.*forged_success"):
        RunnerConfig(poisoned="B", attack="bogus")
    with pytest.raises(ConfigError, match=r"RunnerConfig.poisoned = 'Z' is not a policy of this run"):
        run_concurrent(run_of({"A": tiny_zoo_paths["A"]}, TaskConfig(**TINY_TASK), GrpoConfig(steps=1),
                              variant=Variant(runner={"poisoned": "Z"})), progress=False)
    assert set(ATTACKS) == {"forged_success", "lying_stats", "malformed"}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["sgt", "prp", "graft"])
def test_beside_a_poisoned_peer_with_reverification_a_run_equals_the_honest_run(name, tiny_zoo_paths):
    """A (GPT-2 + BPE) learns from B (Llama + Unigram) through the runner; B forges successes. With re-verification
    every policy's losses, gradient norms, rewards and evaluations equal those beside an honest B, and SEE counts
    the forged successes it dropped; without it A's losses differ."""
    from testsupport import TINY_TASK, run_of
    from mrl.core.config import GrpoConfig, TaskConfig
    from mrl.runtime.runner import run_concurrent

    paths = {n: tiny_zoo_paths[n] for n in ("A", "B")}
    grpo = GrpoConfig(steps=3, prompts_per_step=4, group_size=4, lr=3e-4, eval_every=3, seed=0)

    def run(**runner):
        return run_concurrent(run_of(paths, TaskConfig(**TINY_TASK), grpo, probe=probe_config(name),
                                     variant=Variant(runner=runner)), progress=False)

    def metrics(record):
        return [(r["policy"], r["step"], r["loss"], r["grad_norm"], r["reward"]) for r in record.steps]

    honest, poisoned = run(), run(poisoned="B")
    assert metrics(poisoned) == metrics(honest) and poisoned.evals == honest.evals
    if name == "sgt":
        assert poisoned.counters["forged"] > 0
    trusting = run(poisoned="B", reverify=False)
    assert [m for m in metrics(trusting) if m[0] == "A"] != [m for m in metrics(honest) if m[0] == "A"]


def test_a_peer_sample_that_is_not_well_formed_scores_zero_whatever_its_text(bpe_tokenizer, arith_task, problems):
    """The learner's own rule (EOS last, no other special token before it) applies to a peer's ids: a forged
    rollout with an unknown token inside a correct-looking text is re-scored 0; trusting takes the claim."""
    from mrl.core.probes.terms import rescored_reward

    problem = problems[0]
    ids = bpe_tokenizer(problem.answer, add_special_tokens=False)["input_ids"]
    forged = Rollout("run", "P", 0, problem.pid, problem.prompt, problem.answer,
                     [ids[0], bpe_tokenizer.unk_token_id, *ids[1:], bpe_tokenizer.eos_token_id],
                     [-0.1] * (len(ids) + 2), 1.0, "eos", "P:bpe")
    honest = Rollout(**{**forged.__dict__, "token_ids": [*ids, bpe_tokenizer.eos_token_id],
                        "logps": [-0.1] * (len(ids) + 1)})
    batch, learner = make_batch(make_model(bpe_tokenizer), bpe_tokenizer, problems,
                                [answers(p, 0) for p in problems], arith_task.verify)
    view = peer_view([], bpe_tokenizer)
    assert rescored_reward(batch, learner, view, 0, honest) == 1.0
    assert rescored_reward(batch, learner, view, 0, forged) == 0.0
    assert rescored_reward(batch, learner, peer_view([], bpe_tokenizer, reverify=False), 0, forged) == 1.0

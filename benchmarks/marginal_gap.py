"""What the canonical tokenization costs a peer ratio, at the warm-up of the held-out pair (issue 44, item 3's first
measurement; docs/marginal.md).

Each policy of the held-out pairing (zoo seed 0: A, GPT-2 + BPE; B, Llama + Unigram) samples G completions of the
first `--prompts` test prompts of each skill at its warm-up, as its RL rollouts are drawn (temperature and length of
the profile). For every ordered pair (learner, source) and every source sample that ended with EOS:

- the gap, log marginal - log canonical of the text under the learner (mrl.marginal, exact: EOS included), over the
  source's successes and failures, with the share of texts whose canonical tokenization carries under 90% of the
  learner's probability of the text;
- HACPO's sequence ratio (ratio thl: divided by the THL groups) under three definitions: canonical (today's, the
  learner's canonical tokenization over the source's sampled tokens), marginal (the learner's marginal over them:
  what `tokenization: marginal` computes) and exact (both sides' marginals: the text's ratio), and how often the
  stepwise bounds [0.8, 1] of its first update bind;
- the cost: the median CPU time of the learner's marginal over the batch against its canonical scoring (one padded
  forward of the canonical encodings), in one run.

    .venv/bin/python benchmarks/marginal_gap.py [--profile default] [--prompts 16] [--threads 1]

Prints markdown tables; nothing is written. After training (the issue's second time point) and the ledger's arms
with the marginal ratio are not measured here.
"""
import argparse
import math
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import mrl  # noqa: E402, F401  (first: the numerics contract, mrl.numerics, before torch and numpy)
import numpy as np  # noqa: E402
import torch  # noqa: E402

from mrl.experiments.heldout import heldout_base  # noqa: E402
from mrl.marginal import marginal_logprobs  # noqa: E402
from mrl.profiles import load_profile  # noqa: E402
from mrl.rollout import (completion_logprobs, completion_texts, encode_prompts, pad_completions,  # noqa: E402
                         sample_groups, stop_ids)
from mrl.seeding import torch_threads  # noqa: E402
from mrl.tasks import make_task  # noqa: E402
from mrl.thl import align_batch  # noqa: E402
from mrl.zoo import load_policy  # noqa: E402

BOUNDS = (0.8, 1.0)   # HACPO's stepwise clip range at its first update (delta 0.2)


def samples(policy, problems, group: int, grpo, verify, seed: int) -> list[dict]:
    """G sampled completions per problem: prompt, text, ids, per-token log-probs, reward, whether it ended with EOS."""
    generator = torch.Generator().manual_seed(seed)
    _, _, ids, mask, logp = sample_groups(policy.model, policy.tokenizer, [p.prompt for p in problems], group,
                                          generator, grpo.max_new_tokens, grpo.temperature)
    texts = completion_texts(policy.tokenizer, ids, mask, stop_ids(policy.tokenizer))
    out = []
    for row, ((text, ended), problem) in enumerate(zip(texts, [p for p in problems for _ in range(group)])):
        n = int(mask[row].sum())
        out.append({"prompt": problem.prompt, "text": text, "ids": ids[row, :n].tolist(),
                    "logp": float(logp[row, :n].sum()), "ended": ended,
                    "reward": float(verify(text, problem)) if ended else 0.0})
    return out


def quantiles(values) -> str:
    values = np.asarray(values, dtype=np.float64)
    if not len(values):
        return "| - | - | - | - |"
    return "| " + " | ".join(f"{v:.4f}" for v in (values.mean(), *np.quantile(values, [0.5, 0.9]), values.max())) \
        + " |"


def canonical_logprobs(policy, prompts: list[str], texts: list[str]) -> torch.Tensor:
    """The learner's log-probability of each text's canonical encoding, EOS appended: THL's retokenized sample."""
    tok = policy.tokenizer
    prompt_ids, prompt_mask = encode_prompts(tok, prompts)
    ids, mask = pad_completions([tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for t in texts],
                                tok.pad_token_id, "cpu")
    with torch.no_grad():
        return (completion_logprobs(policy.model, prompt_ids, prompt_mask, ids, mask) * mask).sum(-1)


def median_seconds(fn, repeats: int = 3) -> float:
    """The median CPU time of this process over `repeats` calls (CPU time: a shared machine's load does not enter)."""
    times = []
    for _ in range(repeats):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="default")
    parser.add_argument("--prompts", type=int, default=16, help="test prompts per skill")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.manual_seed(0)
    config = load_profile(args.profile)
    run_config, paths, _ = heldout_base(config)
    task = make_task(run_config.task)
    grpo = run_config.grpo
    problems = [p for skill in sorted(task.test) for p in task.test[skill][:args.prompts]]
    policies = {name: load_policy(path) for name, path in sorted(paths.items())}
    with torch_threads(args.threads):
        drawn = {name: samples(policy, problems, grpo.group_size, grpo, task.verify, seed)
                 for seed, (name, policy) in enumerate(policies.items())}
        print(f"profile {args.profile}, held-out zoo seed 0 at its warm-up, {len(problems)} prompts x G = "
              f"{grpo.group_size}, max_new_tokens {grpo.max_new_tokens}, temperature {grpo.temperature}, "
              f"{args.threads} thread(s)\n")
        gap_rows, ratio_rows, cost_rows = [], [], []
        for learner, policy in policies.items():
            for source, records in drawn.items():
                if source == learner:
                    continue
                kept = [r for r in records if r["ended"]]
                prompts, texts = [r["prompt"] for r in kept], [r["text"] for r in kept]
                mine = marginal_logprobs(policy.model, policy.tokenizer, prompts, texts, eos=True)
                theirs = marginal_logprobs(policies[source].model, policies[source].tokenizer, prompts, texts,
                                           eos=True)
                alignments = align_batch(texts, policies[source].tokenizer, policy.tokenizer,
                                         [r["ids"] for r in kept])
                for outcome, wanted in (("successes", 1.0), ("failures", 0.0)):
                    rows = [(m, r) for m, r in zip(mine, kept) if r["reward"] == wanted]
                    gaps = [m.gap for m, _ in rows if m.logp > -math.inf]
                    under = np.mean([m.canonical_share < 0.9 for m, _ in rows]) if rows else float("nan")
                    more = np.mean([m.tokenizations > 1 for m, _ in rows]) if rows else float("nan")
                    gap_rows.append(f"| {learner} | {source} | {outcome} | {len(rows)} | {more:.3f} | {under:.3f} "
                                    + quantiles(gaps))
                groups = [a.n_groups for a in alignments]
                definitions = {
                    "canonical": [(m.canonical_logp - r["logp"]) / g for m, r, g in zip(mine, kept, groups)],
                    "marginal": [(m.logp - r["logp"]) / g for m, r, g in zip(mine, kept, groups)],
                    "exact": [(m.logp - t.logp) / g for m, t, g in zip(mine, theirs, groups)]}
                for definition, log_s in definitions.items():
                    s = np.exp(np.clip(log_s, -10, 10))
                    binds = np.mean((s < BOUNDS[0]) | (s > BOUNDS[1]))
                    q10, q50, q90 = np.quantile(log_s, [0.1, 0.5, 0.9])
                    ratio_rows.append(f"| {learner} | {source} | {definition} | {np.mean(log_s):.4f} | {q10:.4f} | "
                                      f"{q50:.4f} | {q90:.4f} | {binds:.3f} |")
                marginal_s = median_seconds(lambda: marginal_logprobs(policy.model, policy.tokenizer, prompts, texts,
                                                                      eos=True))
                canonical_s = median_seconds(lambda: canonical_logprobs(policy, prompts, texts))
                cost_rows.append(f"| {learner} | {source} | {len(texts)} | {canonical_s * 1e3:.1f} | "
                                 f"{marginal_s * 1e3:.1f} | {marginal_s / canonical_s:.2f} |")
    print("Gap, log marginal - log canonical of the source's text under the learner (EOS-ended samples)\n")
    print("| learner | source | outcome | n | >1 tokenization | canonical < 90% | mean | median | q90 | max |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(gap_rows))
    print("\nHACPO's log s (ratio thl) by definition, and the share outside the stepwise bounds [0.8, 1]\n")
    print("| learner | source | definition | mean | q10 | median | q90 | bounds bind |")
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(ratio_rows))
    print("\nCost: the learner's scoring of the batch, median CPU time of 3 (no gradient)\n")
    print("| learner | source | texts | canonical ms | marginal ms | ratio |")
    print("|---|---|---|---|---|---|")
    print("\n".join(cost_rows))


if __name__ == "__main__":
    main()

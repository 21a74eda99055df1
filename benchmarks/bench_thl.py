"""THL throughput (align_batch + project) and its share of a PRP-sized update step, measured in one run.

- align + project(sum) on 1,000 completions of about 64 tokens for a pair of zoo tokenizers
  (byte-level BPE -> Unigram, arithmetic text) and a pair of real ones (Mistral SentencePiece ->
  cl100k, mixed-script text); sequences per second.
- one PRP-sized update step of zoo policy A (default profile sizes: 16 prompts, G = 8 own samples
  plus 8 peer samples per prompt, so 256 sequences are forwarded and back-propagated, after
  sampling the own 128): its median time, and THL's share = time to align the 128 peer samples /
  step time. Uses the built default zoo if data/models holds it, else an untrained model of the
  same architecture (same shapes, same cost).

    .venv/bin/python benchmarks/bench_thl.py [--n 1000] [--threads 1] [--steps 10]
    .venv/bin/python benchmarks/bench_thl.py --smoke    # 20 completions, 1 step of 2 prompts x 2 + 2 sequences
"""
import argparse
import dataclasses
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import mrl  # noqa: E402, F401  (first: the numerics contract, mrl.numerics, before torch and numpy)
import numpy as np  # noqa: E402
import torch  # noqa: E402

from mrl.runtime.actor import policy_optimizer  # noqa: E402
from mrl.core.config import GrpoConfig  # noqa: E402
from mrl.core.probes.terms import own_grpo_loss  # noqa: E402
from mrl.core.batch import Learner, RolloutBatch  # noqa: E402
from mrl.runtime.rollout import completion_logprobs, sample_groups  # noqa: E402
from mrl.profiles import load_profile  # noqa: E402
from mrl.runtime.real_tokenizers import load_real_tokenizer, mixed_script_texts  # noqa: E402
from mrl.runtime.results import repo_root  # noqa: E402
from mrl.core.tasks import make_task  # noqa: E402
from mrl.core.thl import align_batch  # noqa: E402
from mrl.runtime.zoo import build_model, family_dir, load_policy, train_tokenizer  # noqa: E402
from smoke import add_smoke_flag, tiny_grpo  # noqa: E402


def texts_of_tokens(pieces: list[str], tokenizer, target: int, n: int, seed: int = 0) -> list[str]:
    """n texts of about `target` tokens (under `tokenizer`), each a random concatenation of pieces."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        text = ""
        while len(tokenizer.encode(text, add_special_tokens=False)) < target:
            text += pieces[rng.integers(len(pieces))]
        out.append(text)
    return out


def throughput(texts, src, dst) -> tuple[float, float]:
    """(completions aligned and projected per second, mean tokens per completion) of `texts` from src to dst."""
    ids = [src.encode(t, add_special_tokens=False) for t in texts]
    start = time.perf_counter()
    for alignment, i in zip(align_batch(texts, src, dst, ids), ids):
        alignment.project(np.full(len(i), -0.5), "sum")
    seconds = time.perf_counter() - start
    return len(texts) / seconds, float(np.mean([len(i) for i in ids]))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=10)
    add_smoke_flag(parser)
    args = parser.parse_args()
    if args.smoke:
        args.n, args.threads, args.steps = 20, 1, 1
    torch.set_num_threads(args.threads)
    config = load_profile("default")
    task = make_task(config.task)
    bpe = train_tokenizer("bpe", task.corpus, 48, 48)
    unigram = train_tokenizer("unigram", task.corpus, 40, 48)
    mistral, cl100k = load_real_tokenizer("mistral-sp"), load_real_tokenizer("cl100k")
    arith = [p.prompt + p.answer for s in task.train for p in task.train[s][:200]]
    zoo_rate, zoo_len = throughput(texts_of_tokens(arith, bpe, 64, args.n), bpe, unigram)
    real_rate, real_len = throughput(texts_of_tokens(mixed_script_texts(), mistral, 64, args.n), mistral, cl100k)

    family = config.zoo.families[0]
    cached = family_dir(repo_root() / "data" / "models", config.task, family, config.zoo)
    if cached.exists():
        policy = load_policy(cached)
        model, tokenizer, source = policy.model, policy.tokenizer, "default zoo A"
    else:
        tokenizer = bpe
        model, source = build_model(family, len(bpe), config.zoo.max_positions, 0), "untrained A (no zoo cached)"
    cfg: GrpoConfig = tiny_grpo(config.grpo) if args.smoke else config.grpo
    optimizer = policy_optimizer(model.parameters(), cfg.lr)
    prompts = [p.prompt for p in task.pool["S1"][: cfg.prompts_per_step]]
    sampling = dataclasses.replace(cfg, temperature=1.0, engine="hf")   # the transformers loop at T = 1
    sample = lambda seed: sample_groups(model, tokenizer, prompts, torch.Generator().manual_seed(seed),  # noqa: E731
                                        sampling)
    step_times = []
    for step in range(args.steps + 1):
        start = time.perf_counter()
        own, peer = sample(step), sample(10_000 + step)  # the second stands in for the peer's samples
        width = max(own[2].size(1), peer[2].size(1))
        pad = lambda x: torch.nn.functional.pad(x, (0, width - x.size(1)))  # noqa: E731
        tensors = [torch.cat([own[0], peer[0]]), torch.cat([own[1], peer[1]]),
                   torch.cat([pad(own[2]), pad(peer[2])]), torch.cat([pad(own[3]), pad(peer[3])])]
        batch = RolloutBatch("A", step, [], 2 * cfg.group_size, *tensors, torch.zeros(tensors[2].shape),
                             torch.zeros(len(tensors[0])), cfg)
        learner = Learner(lambda *t: completion_logprobs(model.train(), *t), tokenizer, None, None)
        loss, _, _ = own_grpo_loss(batch, learner, torch.randn(len(tensors[0])))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step:
            step_times.append(time.perf_counter() - start)
    step = statistics.median(step_times)
    peers = cfg.prompts_per_step * cfg.group_size
    print(f"THL align + project(sum), {args.n} completions each, {args.threads} torch thread(s)")
    print(f"  zoo pair  (byte-level BPE -> Unigram, arithmetic, {zoo_len:.0f} tokens): {zoo_rate:8.0f} seq/s")
    print(f"  real pair (Mistral SP -> cl100k, mixed script, {real_len:.0f} tokens):     {real_rate:8.0f} seq/s")
    print(f"PRP-sized update step ({source}; {cfg.prompts_per_step} prompts x {cfg.group_size} own + "
          f"{cfg.group_size} peer sequences): median {step * 1000:.1f} ms over {args.steps} steps")
    for label, rate in (("zoo pair", zoo_rate), ("real pair", real_rate)):
        share = peers / rate / step
        print(f"  THL share of the step for {peers} peer completions ({label}): {100 * share:.1f}%")


if __name__ == "__main__":
    main()

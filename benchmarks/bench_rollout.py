"""Rollout throughput: mrl's fast path, mrl's transformers path, `model.generate`, and the generate and batched
(continuous batching) engines, on the same model and batch, in one run; and the training forward + backward of the
two mrl paths.

The batch is a GRPO step of the default profile's shape: 16 prompts x 8 completions, the arith-ops prompts,
completions of a fixed length (EOS suppressed) so every path does the same work. Models: the zoo's three
architectures at the default profile's sizes (random init: the same distribution for every path). Prints
tokens per second (prompt tokens, padding included, and completion tokens), the speed-up hf time / fast time,
and the share of the machine's measured matmul peak (2 x parameters FLOPs per token of the naive batch
against the best torch.mm rate on this core count: a path that shares prompt work shows above its true rate).

    .venv/bin/python benchmarks/bench_rollout.py [--threads 1] [--repeats 5] [--new-tokens 6] [--numerics both]
    .venv/bin/python benchmarks/bench_rollout.py --smoke    # 2 prompts x 2 completions of 2 tokens, 1 repeat
"""
import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import mrl  # noqa: E402, F401  (first: the numerics contract, mrl.numerics, before torch and numpy)
import torch  # noqa: E402

from numerics_cost import add_numerics_flag, compare, hand_back  # noqa: E402
from smoke import add_smoke_flag  # noqa: E402
from mrl.numerics import state  # noqa: E402
from mrl.profiles import load_profile  # noqa: E402
from mrl.core.batch import Decoding, encode_prompts  # noqa: E402
from mrl.runtime.rollout import completion_logprobs, sample_completions  # noqa: E402
from mrl.core.tasks import make_task  # noqa: E402
from mrl.runtime.zoo import build_model, train_tokenizer  # noqa: E402


def matmul_peak(seconds: float = 1.0) -> float:
    """FLOP/s of the best of repeated 512 x 512 float32 matmuls (the machine's practical peak here)."""
    a, b = torch.randn(512, 512), torch.randn(512, 512)
    best, end = 0.0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        start = time.perf_counter()
        for _ in range(10):
            torch.mm(a, b)
        best = max(best, 10 * 2 * 512 ** 3 / (time.perf_counter() - start))
    return best


def timed(fn, repeats: int) -> float:
    """Median seconds of fn() over `repeats` runs after one warm-up run."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--new-tokens", type=int, default=6)
    add_numerics_flag(parser)
    add_smoke_flag(parser)
    args = parser.parse_args()
    if args.numerics == "both":
        return compare(__file__, sys.argv[1:])
    if args.smoke:
        args.threads, args.repeats, args.new_tokens = 1, 1, 2
    torch.set_num_threads(args.threads)
    config = load_profile("default")
    task = make_task(config.task)
    peak = matmul_peak(0.1 if args.smoke else 1.0)
    per_skill = 1 if args.smoke else 8
    prompts = [p.prompt for p in task.pool["S1"][:per_skill] + task.pool["S2"][:per_skill]]
    group, new = (2 if args.smoke else config.grpo.group_size), args.new_tokens
    print(f"GRPO-step batch: {len(prompts)} prompts x {group} completions, {new} new tokens each, "
          f"{args.threads} thread(s); matmul peak {peak / 1e9:.1f} GFLOP/s; numerics {state()['mode']}")
    timings = {}
    header = f"{'family':<16}{'path':<18}{'ms':>8}{'tokens/s':>11}{'of peak':>9}"
    print(header)
    for family in config.zoo.families:
        tokenizer = train_tokenizer(family.tokenizer, task.corpus, family.vocab_size, config.zoo.max_positions)
        model = build_model(family, len(tokenizer), config.zoo.max_positions, 0).eval()
        ids, mask = encode_prompts(tokenizer, prompts)
        ids, mask = ids.repeat_interleave(group, 0), mask.repeat_interleave(group, 0)
        tokens = ids.numel() + len(ids) * new
        flops = 2 * sum(p.numel() for p in model.parameters()) * tokens

        def sample(engine):   # the generate and batched engines without their log-prob forward: sampling alone
            decoding = Decoding(max_new_tokens=new, eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id,
                                min_new_tokens=new)
            return sample_completions(model, ids, mask, decoding, torch.Generator().manual_seed(0), engine=engine,
                                      with_logprobs=engine not in ("generate", "batched"))

        def generate():
            with torch.no_grad():
                model.generate(input_ids=ids, attention_mask=mask, do_sample=True, max_new_tokens=new,
                               min_new_tokens=new, pad_token_id=tokenizer.pad_token_id, top_k=0, top_p=1.0)

        completion, completion_mask, _ = sample("hf")

        def train(engine):
            model.zero_grad(set_to_none=True)
            logp = completion_logprobs(model.train(), ids, mask, completion, completion_mask, engine=engine)
            (logp * completion_mask).sum().backward()
            model.eval()

        rows = {"sample, fast": timed(lambda: sample("fast"), args.repeats),
                "sample, hf": timed(lambda: sample("hf"), args.repeats),
                "model.generate": timed(generate, args.repeats),
                "sample, generate": timed(lambda: sample("generate"), args.repeats),
                "sample, batched": timed(lambda: sample("batched"), args.repeats),
                "fwd+bwd, fast": timed(lambda: train("fast"), args.repeats),
                "fwd+bwd, hf": timed(lambda: train("hf"), args.repeats)}
        name = f"{family.name} ({family.arch})"
        timings.update({f"{family.name} {path}": seconds * 1000 for path, seconds in rows.items()})
        for path, seconds in rows.items():
            work = flops * (3 if path.startswith("fwd") else 1)   # backward costs about twice the forward
            print(f"{name:<16}{path:<18}{seconds * 1000:8.1f}{tokens / seconds:11.0f}{work / seconds / peak:9.1%}")
        print(f"{name:<16}ratio hf / fast: sampling {rows['sample, hf'] / rows['sample, fast']:.2f}, "
              f"generate / fast {rows['model.generate'] / rows['sample, fast']:.2f}, "
              f"batched / generate engine {rows['sample, batched'] / rows['sample, generate']:.2f}, "
              f"fwd+bwd {rows['fwd+bwd, hf'] / rows['fwd+bwd, fast']:.2f}")
    hand_back(timings)


if __name__ == "__main__":
    main()

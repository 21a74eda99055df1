"""The zoo warm-up's step: milliseconds per supervised step of each default family (forward, backward, clip, AdamW)
on the `transformers` forward in fp32 (the reference, the warm-up before the fast path), mrl's fast forward in
fp32, and the fast forward under bf16 autocast (`warmup.precision: bf16`), on the same batches, one torch thread,
back to back in one run. Prints ms/step and the ratio to the reference.

    .venv/bin/python benchmarks/bench_warmup.py [--steps 20] [--families A B C]
"""
import argparse
import os
import random
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch  # noqa: E402

from mrl.profiles import load_profile  # noqa: E402
from mrl.rollout import completion_logprobs  # noqa: E402
from mrl.tasks import ArithTask  # noqa: E402
from mrl.zoo import _collate, _encode_sources, build_model, train_tokenizer  # noqa: E402

VARIANTS = (("transformers, fp32", "hf", False), ("fast, fp32", "fast", False), ("fast, bf16 autocast", "fast", True))


def step_ms(family, tokenizer, batches, max_positions: int, engine: str, bf16: bool) -> float:
    """Mean wall milliseconds of one warm-up step over `batches`, from a fresh model."""
    model = build_model(family, len(tokenizer), max_positions, seed=0)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    start = time.perf_counter()
    for prompt, prompt_mask, answer, answer_mask in batches:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logp = completion_logprobs(model, prompt, prompt_mask, answer, answer_mask, engine=engine)
        loss = -(logp * answer_mask).sum() / answer_mask.sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    return (time.perf_counter() - start) / len(batches) * 1000


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--families", nargs="+", default=["A", "B", "C"])
    args = parser.parse_args()
    torch.set_num_threads(1)
    config = load_profile("default")
    task = ArithTask(config.task)
    print(f"warm-up steps of batch {config.zoo.warmup.batch_size}, {args.steps} steps per variant, 1 thread")
    for family in [f for f in config.zoo.families if f.name in args.families]:
        tokenizer = train_tokenizer(family.tokenizer, task.corpus, family.vocab_size, config.zoo.max_positions)
        keys, weights = zip(*sorted(family.warmup_mix.items()))
        sources = _encode_sources(tokenizer, task, keys)
        rng = random.Random(0)
        size = config.zoo.warmup.batch_size
        batches = [_collate([rng.choice(sources[k]) for k in rng.choices(keys, weights, k=size)], tokenizer.pad_token_id)
                   for _ in range(args.steps)]
        times = {label: step_ms(family, tokenizer, batches, config.zoo.max_positions, engine, bf16)
                 for label, engine, bf16 in VARIANTS}
        reference = times[VARIANTS[0][0]]
        print(f"{family.name} ({family.arch}): " + ", ".join(f"{label} {ms:.0f} ms ({reference / ms:.2f}x)"
                                                         for label, ms in times.items()))


if __name__ == "__main__":
    main()

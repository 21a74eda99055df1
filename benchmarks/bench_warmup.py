"""The zoo warm-up's step: milliseconds per supervised step of each default family (forward, backward, clip, AdamW)
on the `transformers` forward in fp32 with a per-tensor AdamW (the reference, the warm-up before the fast path), the
package's step (mrl.runtime.zoo.warmup_step: fast forward, fused AdamW) in fp32 (`warmup.precision: fp32`, the default)
and under bf16 autocast (`warmup.precision: bf16`), on the same batches, one torch thread, back to back in one run.
Prints ms/step and the ratio to the reference, and whether this CPU computes bf16 natively (AVX512-BF16 or AMX): without
it bf16 autocast is emulated and slower than fp32.

    .venv/bin/python benchmarks/bench_warmup.py [--steps 20] [--families A B C] [--zoo heldout] [--numerics both]
    .venv/bin/python benchmarks/bench_warmup.py --smoke    # 2 steps of 8 examples per variant and family

--zoo heldout: the held-out experiment's task (arith-forms) and zoo (its families A and B, batch 128) instead of the
default profile's.
"""
import argparse
import dataclasses
import os
import random
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import mrl  # noqa: E402, F401  (first: the numerics contract, mrl.numerics, before torch and numpy)
import torch  # noqa: E402

from mrl.experiments.heldout import heldout_config  # noqa: E402
from mrl.profiles import load_profile  # noqa: E402
from mrl.runtime.results import machine  # noqa: E402
from mrl.core.tasks import ArithTask  # noqa: E402
from numerics_cost import add_numerics_flag, compare, hand_back  # noqa: E402
from smoke import add_smoke_flag, tiny_zoo  # noqa: E402
from mrl.runtime.zoo import _collate, _encode_sources, build_model, train_tokenizer, warmup_step  # noqa: E402

VARIANTS = (("transformers, fp32, AdamW per tensor", "hf", "fp32", False), ("fast, fp32", "fast", "fp32", True),
            ("fast, bf16 autocast", "fast", "bf16", True))
"""(label, engine, precision, fused AdamW): the first is the warm-up before the fast path, the reference"""


def step_ms(family, tokenizer, batches, max_positions: int, engine: str, precision: str, fused: bool) -> float:
    """Mean wall milliseconds of one warm-up step (mrl.runtime.zoo.warmup_step) over `batches`, from a fresh model."""
    model = build_model(family, len(tokenizer), max_positions, seed=0)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0, fused=fused)
    start = time.perf_counter()
    for batch in batches:
        warmup_step(model, optimizer, batch, precision, 1.0, engine=engine)
    return (time.perf_counter() - start) / len(batches) * 1000


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--families", nargs="+", default=["A", "B", "C"])
    parser.add_argument("--zoo", choices=["default", "heldout"], default="default",
                        help="the default profile's zoo and task, or the held-out experiment's")
    add_numerics_flag(parser)
    add_smoke_flag(parser)
    args = parser.parse_args()
    if args.numerics == "both":
        return compare(__file__, sys.argv[1:])
    torch.set_num_threads(1)
    config = load_profile("default")
    if args.zoo == "heldout":
        config = heldout_config(config, config.experiment("heldout").zoo_seeds[0])
    if args.smoke:
        config, args.steps = dataclasses.replace(config, zoo=tiny_zoo(config.zoo)), 2
    task = ArithTask(config.task)
    cpu = machine()
    print(f"{args.zoo} zoo ({config.task.name}): warm-up steps of batch {config.zoo.warmup.batch_size}, "
          f"{args.steps} steps per variant, 1 thread; "
          f"{cpu['cpu']}, bf16 {'native' if cpu['native_bf16'] else 'emulated (no AVX512-BF16 or AMX)'}, "
          f"numerics {cpu['numerics']['mode']} (torch's kernels {cpu['numerics']['aten']})")
    timings = {}
    for family in [f for f in config.zoo.families if f.name in args.families]:
        tokenizer = train_tokenizer(family.tokenizer, task.corpus, family.vocab_size, config.zoo.max_positions)
        keys, weights = zip(*sorted(family.warmup_mix.items()))
        sources = _encode_sources(tokenizer, task, keys)
        rng = random.Random(0)
        size = config.zoo.warmup.batch_size
        batches = [_collate([rng.choice(sources[k]) for k in rng.choices(keys, weights, k=size)],
                            tokenizer.pad_token_id)
                   for _ in range(args.steps)]
        times = {label: step_ms(family, tokenizer, batches, config.zoo.max_positions, engine, precision, fused)
                 for label, engine, precision, fused in VARIANTS}
        reference = times[VARIANTS[0][0]]
        print(f"{family.name} ({family.arch}): " + ", ".join(f"{label} {ms:.0f} ms ({reference / ms:.2f}x)"
                                                         for label, ms in times.items()))
        timings.update({f"{family.name} {label}": ms for label, ms in times.items()})
    hand_back(timings)


if __name__ == "__main__":
    main()

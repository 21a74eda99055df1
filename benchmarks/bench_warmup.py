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

--per-run (with --zoo heldout): what one zoo build costs in units of one of the ledger's runs, both measured in this
process on one thread. The zoo's cost is each family's fast fp32 ms per step times the warm-up's steps, summed over
the families; a run's cost is its RL steps (the held-out experiment's, sgt) times the seconds per step of --run-steps
steps of an sgt run inline on a zoo warmed up --run-zoo-steps steps (a packed grid runs one such run per core, so the
ratio is also zoo builds to packed runs on the same cores). A barely trained zoo samples longer completions than a
trained one, so the run's cost is on the high side and the ratio on the low side.

    .venv/bin/python benchmarks/bench_warmup.py --zoo heldout --families A B --per-run
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
from smoke import add_smoke_flag, tiny_profile  # noqa: E402
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
    parser.add_argument("--per-run", action="store_true", help="with --zoo heldout: a zoo build in units of one run")
    parser.add_argument("--run-steps", type=int, default=5, help="--per-run: RL steps timed")
    parser.add_argument("--run-zoo-steps", type=int, default=100, help="--per-run: warm-up steps of the timed run's zoo")
    add_numerics_flag(parser)
    add_smoke_flag(parser)
    args = parser.parse_args()
    if args.per_run and args.zoo != "heldout":
        parser.error("--per-run compares the held-out zoo with the ledger's runs: add --zoo heldout")
    if args.numerics == "both":
        return compare(__file__, sys.argv[1:])
    torch.set_num_threads(1)
    config = load_profile("default")
    if args.zoo == "heldout":
        config = heldout_config(config, config.heldout.zoo_seeds[0])
    if args.smoke:
        config, args.steps = tiny_profile(config), 2
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
    if args.per_run:
        fast = [ms for label, ms in timings.items() if label.endswith(VARIANTS[1][0])]
        zoo_seconds = sum(fast) / 1000 * load_profile("default").heldout.zoo.warmup.steps
        run_seconds = run_cost(config, 1 if args.smoke else args.run_steps, 2 if args.smoke else args.run_zoo_steps)
        print(f"one zoo build ({len(fast)} warm-ups of the default's steps at the fast fp32 step) {zoo_seconds:.0f} s; "
              f"one sgt run "
              f"({config.experiment('heldout').steps} RL steps) {run_seconds:.0f} s; "
              f"zoo build / run {zoo_seconds / run_seconds:.1f}")
        timings["zoo build / run"] = zoo_seconds / run_seconds
    hand_back(timings)


def run_cost(config, steps: int, zoo_steps: int) -> float:
    """Seconds of one held-out sgt run on one thread, inline: its RL steps times the mean seconds of `steps` steps on
    the held-out zoo warmed up `zoo_steps` steps (built into a temporary folder)."""
    import tempfile

    from mrl.core.probes import probe_config
    from mrl.experiments.runs import Run
    from mrl.runtime.runner import run_concurrent
    from mrl.runtime.zoo import build_zoo

    heldout = config.heldout
    zoo = dataclasses.replace(config.zoo, workers=1, warmup=dataclasses.replace(
        config.zoo.warmup, steps=zoo_steps, lr_warmup_steps=min(config.zoo.warmup.lr_warmup_steps, zoo_steps)))
    with tempfile.TemporaryDirectory() as root:
        paths = {name: str(policy.path) for name, policy in build_zoo(config.task, zoo, root=root,
                                                                       progress=False).items()}
        run = Run(dataclasses.replace(config, runner=dataclasses.replace(config.runner, backend="inline")),
                  paths, probe_config("sgt"), 0, steps)
        start = time.perf_counter()
        run_concurrent(run, progress=False)
        return (time.perf_counter() - start) / steps * heldout.steps


if __name__ == "__main__":
    main()

"""Step time of each probe against independent GRPO, measured in the same run (docs/architecture.md, The probes).

Two policies (A gpt2 + BPE, B llama + Unigram) of the default zoo, inline backend, 1 torch thread,
the default profile's step (16 prompts x 8 samples). For every probe the same steps run with the same
prompts and seeds; a policy's step time is its rollout plus its update (sampling, scoring, THL,
the probe's loss, backward, Adam); the median over steps (the first 2 dropped) of A + B, the lower of
two rounds run in opposite orders, is reported with its ratio to grpo's. Targets: xgrpo and sgt <= 1.05 x grpo,
prp <= 1.5 x grpo.

grpo skips zero-advantage sequences (exact with beta = 0); XGRPO's pooled baseline gives most sequences
a non-zero advantage, so by default the two do not process the same sequences. `--no-skip` forwards every
own sequence for every probe, the same-work comparison.

    .venv/bin/python benchmarks/bench_probes.py [--steps 12] [--no-skip] [--probes grpo sgt xgrpo prp prp_naive]
    .venv/bin/python benchmarks/bench_probes.py --smoke    # every probe, 3 steps, 1 round, a tiny zoo and step
"""
import argparse
import dataclasses
import os
import statistics

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import mrl  # noqa: E402, F401  (first: the numerics contract, mrl.numerics, before torch and numpy)
from mrl.core.config import RunnerConfig  # noqa: E402
from mrl.core.probes import probe_config  # noqa: E402
from mrl.profiles import load_profile  # noqa: E402
from mrl.runtime.runner import run_concurrent  # noqa: E402
from mrl.runtime.spec import Run  # noqa: E402
from mrl.runtime.zoo_grid import build_zoo  # noqa: E402
from smoke import add_smoke_flag, tiny_profile  # noqa: E402


def step_times(record, skip: int = 2) -> list[float]:
    """Seconds of rollout + update summed over the policies, per step."""
    per_step: dict[int, float] = {}
    for row in record.steps:
        per_step[row["step"]] = per_step.get(row["step"], 0.0) + row["rollout_seconds"] + row["update_seconds"]
    return [seconds for step, seconds in sorted(per_step.items()) if step > skip]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--no-skip", action="store_true", help="forward zero-advantage sequences too (same work)")
    parser.add_argument("--probes", nargs="+", default=["grpo", "sgt", "xgrpo", "prp", "prp_naive"])
    parser.add_argument("--rounds", type=int, default=2, help="rounds over all probes (order reversed each round)")
    add_smoke_flag(parser)
    args = parser.parse_args()
    config = load_profile("default")
    if args.smoke:   # the median needs a step after the 2 dropped
        config, args.steps, args.rounds = tiny_profile(config), 3, 1
    zoo = build_zoo(config.task, config.zoo, progress=False)
    paths = {name: str(zoo[name].path) for name in ("A", "B")}
    grpo = dataclasses.replace(config.grpo, steps=args.steps, eval_every=10**9,
                               skip_zero_advantage=not args.no_skip)
    medians, sequences = {name: [] for name in args.probes}, {}
    for round_index in range(args.rounds):
        order = args.probes if round_index % 2 == 0 else args.probes[::-1]
        for name in order:
            run = Run(dataclasses.replace(config, grpo=grpo, runner=RunnerConfig(backend="inline"), threads=1), paths,
                      probe_config(name), grpo.seed, grpo.steps)
            record = run_concurrent(run, progress=False)
            medians[name].append(statistics.median(step_times(record)))
            sequences[name] = statistics.mean(row["active_sequences"] for row in record.steps)
    medians = {name: min(values) for name, values in medians.items()}  # the least disturbed round
    print(f"probe step time, 2 policies (A gpt2, B llama), {grpo.prompts_per_step} prompts x {grpo.group_size} "
          f"samples, median of {args.steps - 2} steps (best of {args.rounds} rounds), 1 thread, inline, "
          f"{'all own sequences forwarded' if args.no_skip else 'zero-advantage sequences skipped'}")
    base = medians.get("grpo")
    targets = {"xgrpo": 1.05, "sgt": 1.05, "prp": 1.5}
    for name, seconds in medians.items():
        ratio = f"{seconds / base:5.2f}" if base else "  n/a"
        target = f"  (target <= {targets[name]})" if name in targets else ""
        print(f"  {name:10s} {seconds * 1000:7.1f} ms/step  sequences/policy/step {sequences[name]:6.1f}  "
              f"ratio to grpo {ratio}{target}")


if __name__ == "__main__":
    main()

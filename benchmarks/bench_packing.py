"""Run packing: the wall time of a small probe grid run one run at a time on the process backend (one process per
policy, a barrier each step) against the same grid packed two runs at a time (each inline in its own process), back
to back in one run, cache off. Prints both wall times, their ratio, and whether the metrics agree.

    .venv/bin/python benchmarks/bench_packing.py [--steps 20] [--seeds 0 1] [--probes grpo sgt] [--pairing A+B]
    .venv/bin/python benchmarks/bench_packing.py --smoke    # one grpo run, 1 step, a tiny zoo and step
"""
import argparse
import dataclasses
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import mrl  # noqa: E402, F401  (first: the numerics contract, mrl.numerics, before torch and numpy)
from mrl.experiments import grid_runs, policy_paths, run_many  # noqa: E402
from mrl.profiles import load_profile  # noqa: E402
from smoke import add_smoke_flag, tiny_profile  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--probes", nargs="+", default=["grpo", "sgt"])
    parser.add_argument("--pairing", default="A+B")
    add_smoke_flag(parser)
    args = parser.parse_args()
    config = load_profile("default")
    if args.smoke:   # one run each way: the process backend, then packed (one process, inline)
        config, args.steps, args.seeds, args.probes = tiny_profile(config), 1, [0], ["grpo"]
    paths = policy_paths(config, progress=False)
    results, walls = {}, {}
    for label, packed, backend in (("one at a time, process backend", 1, "process"),
                                   ("packed two at a time, inline", 2, None)):
        run = dataclasses.replace(config, runner=dataclasses.replace(config.runner,
                                                                      backend=backend or config.runner.backend))
        start = time.perf_counter()
        labelled = grid_runs(run, paths, [args.pairing], args.probes, args.seeds, args.steps)
        results[label] = run_many(labelled, packed, cache=False, progress=False)
        walls[label] = time.perf_counter() - start
    (first, a), (second, b) = results.items()
    drop = lambda df: df.drop(columns=[c for c in df.columns if c.endswith("seconds")])  # noqa: E731
    same = drop(a[0]).equals(drop(b[0])) and a[1].equals(b[1])
    runs = len(args.probes) * len(args.seeds)
    print(f"{runs} runs of {args.pairing} x {args.steps} steps ({', '.join(args.probes)}; seeds {args.seeds}), "
          f"{os.cpu_count()} cores")
    for label, seconds in walls.items():
        print(f"  {label:<34}{seconds:8.1f} s")
    print(f"  ratio packed / one at a time       {walls[second] / walls[first]:8.2f}   (metrics identical: {same})")


if __name__ == "__main__":
    main()

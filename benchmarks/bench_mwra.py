"""MWRA backends head to head: 2 policies x 20 steps on the default zoo, inline vs process vs ray.

Prints, per backend, the wall time of the training loop (start-up apart: spawning processes,
starting Ray and building actors) and the ratios to inline. Needs the default zoo (built by
`make reproduce` or notebooks/00_zoo); 1 torch thread per worker, as in the default profile.

    .venv/bin/python benchmarks/bench_mwra.py [--steps 20] [--backends inline process ray]
    .venv/bin/python benchmarks/bench_mwra.py --smoke    # 1 step, a tiny zoo and step (backends as given)
"""
import argparse
import dataclasses
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
from mrl.core.probes import probe_config  # noqa: E402
from mrl.runtime.runner import run_concurrent  # noqa: E402
from mrl.runtime.spec import Run  # noqa: E402
from mrl.core.config import RunnerConfig  # noqa: E402
from mrl.profiles import load_profile  # noqa: E402
from mrl.runtime.zoo_grid import build_zoo  # noqa: E402
from smoke import add_smoke_flag, tiny_profile  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--backends", nargs="+", default=["inline", "process", "ray"])
    add_smoke_flag(parser)
    args = parser.parse_args()
    config = load_profile("default")
    if args.smoke:
        config, args.steps = tiny_profile(config), 1
    zoo = build_zoo(config.task, config.zoo, progress=False)
    paths = {name: str(zoo[name].path) for name in ("A", "B")}
    grpo = dataclasses.replace(config.grpo, steps=args.steps, eval_every=10**9)
    results = {}
    for backend in args.backends:
        run = Run(dataclasses.replace(config, grpo=grpo, runner=RunnerConfig(backend=backend)), paths,
                  probe_config("grpo"), grpo.seed, grpo.steps)
        record = run_concurrent(run, progress=False)
        results[backend] = record
    print(f"MWRA, 2 policies (A gpt2, B llama) x {args.steps} steps of {grpo.prompts_per_step} prompts x "
          f"{grpo.group_size} samples, {config.threads} torch thread(s) per worker, {os.cpu_count()} cores")
    base = results[args.backends[0]].wall_seconds
    for backend, record in results.items():
        per_step = record.wall_seconds / args.steps
        print(
            f"  {backend:8s} loop {record.wall_seconds:7.2f} s ({per_step * 1000:6.1f} ms/step)  "
            f"start-up {record.startup_seconds:6.2f} s  ratio to {args.backends[0]}: {record.wall_seconds / base:.3f}")


if __name__ == "__main__":
    main()

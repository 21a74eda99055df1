"""The whole zoo warm-up as `make reproduce` runs it: mrl.runtime.zoo.build_zoo of a profile's zoo (tokenizers, warm-ups
in the profile's worker processes, greedy checks) into an empty temporary folder, wall seconds, with the machine.

It uses only `load_config` and `build_zoo`, which every version of the package has, so the same file times an
older commit: check it out beside this one and run this file with that checkout first on the path, e.g.

    git worktree add /tmp/before e8142eb
    (cd /tmp/before && PYTHONPATH=/tmp/before python /path/to/benchmarks/bench_zoo.py --label before)
    .venv/bin/python benchmarks/bench_zoo.py --label now
    .venv/bin/python benchmarks/bench_zoo.py --smoke    # the config's families, 2 warm-up steps of 8 examples each

A few minutes per run on a 2-core CPU; not in `make bench`.
"""
import argparse
import dataclasses
import tempfile
import time


def machine_name() -> str:
    """mrl.runtime.results.machine()'s CPU and whether it computes bf16 natively; an older checkout without it:
    unknown."""
    try:
        from mrl.runtime.results import machine
    except ImportError:
        return "a machine the checkout cannot describe"
    info = machine()
    return f"{info['cpu']} (native bf16: {info['native_bf16']})"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/default.yaml", help="a profile's config, relative to the cwd")
    parser.add_argument("--label", default="", help="a name for this run in the printed line")
    parser.add_argument("--smoke", action="store_true", help="a tiny warm-up, seconds not minutes: checks that the "
                                                             "script runs and prints its figure (meaningless)")
    args = parser.parse_args()
    try:
        from mrl.core.run_config import load_config
    except ImportError:   # an older checkout, before RunConfig moved out of mrl.core.config
        from mrl.core.config import load_config
    try:
        from mrl.runtime.zoo_grid import build_zoo   # zoo.workers: auto placed on the usable cores
    except ImportError:   # an older checkout, whose mrl.runtime.zoo places its warm-ups itself
        from mrl.runtime.zoo import build_zoo

    config = load_config(args.config)
    if args.smoke:   # smoke.py's tiny zoo, imported here only: an older checkout runs this file without --smoke
        from smoke import tiny_task, tiny_zoo

        config = dataclasses.replace(config, task=tiny_task(config.task), zoo=tiny_zoo(config.zoo))
    with tempfile.TemporaryDirectory() as root:
        start = time.perf_counter()
        build_zoo(config.task, config.zoo, root=root, progress=False)
        seconds = time.perf_counter() - start
    families = ", ".join(f.name for f in config.zoo.families)
    print(f"{args.label or 'zoo'}: {args.config} zoo ({families}), {config.zoo.workers} workers, "
          f"{seconds:.1f} s on {machine_name()}")


if __name__ == "__main__":  # build_zoo spawns worker processes, which import this module
    main()

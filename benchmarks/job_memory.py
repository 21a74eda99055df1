"""The peak resident set of one job of each kind, as a grid runs it: what mrl.runtime.capacity plans memory with.

Each job runs in a worker of the pool that runs it in `make reproduce` (mrl.runtime.pools: forked from a server that
imported torch and transformers), one torch thread, and reports its own peak resident set (getrusage's ru_maxrss):
every family of the default profile's zoo and of its held-out zoo warmed up for --warmup-steps steps (the batch and
the model of the profile; a step's memory does not grow with the steps), then, on the held-out pair, one run of
each of the arms given for --run-steps steps. Shared pages of the fork server count in every worker: a bound from
above. About a minute on one core.

    .venv/bin/python benchmarks/job_memory.py --out mrl/data/job_memory.json
"""
import argparse
import dataclasses
import json
import resource
import tempfile
import time
from pathlib import Path


def warm_up_job(args) -> dict:
    """One family's warm-up into `root`; its peak resident set."""
    task, family, zoo_cfg, root = args
    from mrl.runtime import zoo

    zoo._build_family((task, family, zoo_cfg, zoo.family_dir(Path(root), task, family, zoo_cfg), 1, False, 0))
    return {"job": f"warm-up {family.name} ({family.arch}, {task.name})",
            "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def run_job(run) -> dict:
    """One run, inline; its peak resident set."""
    from mrl.core.probes import probe_label
    from mrl.runtime.runner import run_concurrent

    run_concurrent(run.with_runner(backend="inline"), progress=False)
    return {"job": f"run {probe_label(run.probe)} of {'+'.join(run.paths)}, {run.config.grpo.prompts_per_step} "
                   f"prompts x {run.config.grpo.group_size}",
            "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/default.yaml")
    parser.add_argument("--warmup-steps", type=int, default=10)
    parser.add_argument("--run-steps", type=int, default=2)
    parser.add_argument("--arms", nargs="*", default=["grpo", "{name: gspo_x2, minibatches: 4}",
                                                       "{name: hacpo, minibatches: 4, tokenization: marginal}"])
    parser.add_argument("--out", default="mrl/data/job_memory.json")
    args = parser.parse_args()

    import yaml

    from mrl import numerics  # first: the numerics contract
    from mrl.core.probes import as_probe_config
    from mrl.core.run_config import load_config
    from mrl.experiments.heldout import heldout_config
    from mrl.runtime.pools import worker_executor
    from mrl.runtime.results import git_sha, machine
    from mrl.runtime.spec import Run
    from mrl.runtime.zoo import family_dir

    config = load_config(args.config)
    heldout = heldout_config(config, 0)
    short = {"steps": args.warmup_steps, "lr_warmup_steps": min(args.warmup_steps, 5)}
    zoos = [(cfg.task, dataclasses.replace(cfg.zoo, warmup=dataclasses.replace(cfg.zoo.warmup, **short)))
            for cfg in (config, heldout)]
    def in_fresh_worker(fn, job) -> dict:   # ru_maxrss is a process's peak over its life: one worker per job
        with worker_executor(1) as pool:
            return pool.submit(fn, job).result()

    with tempfile.TemporaryDirectory() as root:
        warmups = [in_fresh_worker(warm_up_job, (task, family, zoo_cfg, root))
                   for task, zoo_cfg in zoos for family in zoo_cfg.families]
        task, zoo_cfg = zoos[1]
        pair = config.experiment("heldout").pairing
        paths = {f.name: str(family_dir(Path(root), task, f, zoo_cfg)) for f in zoo_cfg.families if f.name in pair}
        arms = [as_probe_config(yaml.safe_load(arm)) for arm in args.arms]
        runs = [in_fresh_worker(run_job, Run(heldout, paths, arm, 0, args.run_steps)) for arm in arms]
    for job in warmups + runs:
        print(f"{job['job']}: {job['peak_rss_bytes'] / 2**20:.0f} MiB", flush=True)
    out = {"what": f"peak resident set of one job in a pool worker (ru_maxrss): warm-ups of {args.warmup_steps} "
                   f"steps, runs of {args.run_steps} steps, the {config.profile or Path(args.config).stem} profile",
           "git_sha": git_sha(), "machine": machine(), "numerics": numerics.mode(),
           "measured": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "warmups": warmups, "runs": runs}
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":   # the pool's workers import this module
    main()

"""What one warm-up of the held-out experiment costs, arm by arm: the core-minutes the second registration's power plan
counts (docs/registration_claims.md, The plan).

On one zoo seed (0 by default, the ledger's first warm-up, which the plan does not test), it builds the held-out zoo
with one process per family, each on one core, and times each family's warm-up; then it runs every arm of the
profile's held-out grid (`experiments.heldout.probes`, the marginal-tokenization arms left out) on RL seed 0, two at
a time, each inline in its own process on one core, as `make reproduce` packs them, and reads each run's wall seconds
from its run record. Each job runs on one core, so its wall seconds are its core-seconds (the other core busy with
the other job, as in the block itself).

    .venv/bin/python benchmarks/arm_costs.py --out docs/measurements/arm_costs.json

About 25 minutes on a 2-core CPU; not in `make bench`. The JSON records the machine, the commit and every job's
seconds; the .md beside it is the same as a table.
"""
import argparse
import json
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path


def build_family(args) -> dict:
    """Warm up one family into the zoo cache on one core; its wall and CPU seconds."""
    task, family, zoo_cfg, out = args
    from mrl.runtime import zoo

    wall, cpu = time.perf_counter(), time.process_time()
    if not Path(out).exists():
        zoo._build_family((task, family, zoo_cfg, Path(out), 1, False, 0))
    return {"family": family.name, "wall_seconds": round(time.perf_counter() - wall, 1),
            "cpu_seconds": round(time.process_time() - cpu, 1)}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/default.yaml")
    parser.add_argument("--zoo-seed", type=int, default=0)
    parser.add_argument("--out", default="docs/measurements/arm_costs.json")
    args = parser.parse_args()

    from mrl import numerics  # first: the numerics contract
    from mrl.core.probes import as_probe_config, probe_label
    from mrl.core.run_config import load_config
    from mrl.experiments.heldout import heldout_config
    from mrl.experiments.runs import Run, run_packed
    from mrl.runtime.results import git_sha, machine
    from mrl.runtime.zoo import family_dir
    from mrl.paths import repo_root

    config = load_config(args.config)
    heldout = config.heldout
    run_config = heldout_config(config, args.zoo_seed)
    root = repo_root() / "data" / "models"
    folders = {f.name: family_dir(root, run_config.task, f, run_config.zoo) for f in run_config.zoo.families}
    already = sorted(name for name, folder in folders.items() if folder.exists())
    if already:
        raise SystemExit(f"families {already} of zoo seed {args.zoo_seed} are already built: their warm-up cannot be "
                         f"timed (remove {[str(folders[n]) for n in already]})")
    jobs = [(run_config.task, f, run_config.zoo, str(folders[f.name])) for f in run_config.zoo.families]
    start = time.perf_counter()
    with ProcessPoolExecutor(len(jobs)) as pool:
        families = list(pool.map(build_family, jobs))
    zoo_wall = time.perf_counter() - start
    print(f"zoo seed {args.zoo_seed}: {families} ({zoo_wall:.0f} s wall)", flush=True)

    paths = {name: str(folders[name]) for name in heldout.pairing}
    arms = [as_probe_config(entry) for entry in heldout.probes]
    arms = [probe for probe in arms if getattr(probe, "tokenization", "canonical") == "canonical"]
    runs = [Run(run_config, paths, probe, 0, heldout.steps) for probe in arms]
    start = time.perf_counter()
    run_packed(runs, 2, progress=True, recompute=True)
    runs_wall = time.perf_counter() - start
    rows = []
    for probe, run in zip(arms, runs):
        record = json.loads((run.folder() / "run.json").read_text())
        rows.append({"arm": probe_label(probe), "steps": run.steps, "wall_seconds": record["wall_seconds"]})
        print(rows[-1], flush=True)
    out = {"what": f"held-out experiment, zoo seed {args.zoo_seed}, RL seed 0, {heldout.steps} steps; each job on "
                   f"one core, two at a time", "profile": config.profile, "git_sha": git_sha(),
           "machine": machine(), "numerics": numerics.mode(),
           "measured": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "families": families,
           "zoo_wall_seconds": round(zoo_wall, 1), "runs": rows, "runs_wall_seconds": round(runs_wall, 1)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":   # the pools spawn worker processes, which import this module
    main()

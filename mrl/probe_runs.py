"""The probe experiment: every probe x seed x pairing as a concurrent run, cached by its full config.

A run is keyed by the hash of everything its numbers depend on (task, zoo folders, GRPO settings with
seed and steps, probe, policies, and the source code of the mrl package); its steps and evals are
stored under results/runs/<key>/ and read back when the same run is asked for again (a notebook
re-run, or HACPO's notebook reusing the MRL probes' runs). Any edit of mrl/ makes new keys, so a cached
run never outlives the code that produced it. The backend is not part of the key: inline, process and
ray give the same metrics.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import time
from pathlib import Path

import pandas as pd
from tqdm.auto import tqdm

from mrl.concurrent import run_concurrent
from mrl.config import ConcurrentConfig, ProbeConfig, RunConfig, config_hash, to_dict
from mrl.results import git_sha, repo_root

PAIRINGS = {"A+B": ("A", "B"), "A+B+C": ("A", "B", "C")}
MRL_PROBES = ("grpo", "prp", "prp_naive", "xgrpo", "sgt")
# The grid 40_probe runs per profile: every MRL probe, each pairing, at least 3 seeds on the default profile;
# steps per pairing (the three-family group runs 3 policies on 2 cores: half the steps keeps it within budget).
EXPERIMENT = {
    "smoke": {"pairings": ["A+B"], "probes": list(MRL_PROBES), "seeds": [0], "steps": {"A+B": 4}},
    "default": {"pairings": ["A+B", "A+B+C"], "probes": list(MRL_PROBES), "seeds": [0, 1, 2],
                "steps": {"A+B": 100, "A+B+C": 50}},
    "paper": {"pairings": ["A+B", "A+B+C"], "probes": list(MRL_PROBES), "seeds": [0, 1, 2],
              "steps": {"A+B": 300, "A+B+C": 300}},
}


# 50_hacpo: HACPO and its baselines on the pair over 3 seeds (the MRL probes come from 40_probe's cached runs),
# and its ablations on one seed.
HACPO_EXPERIMENT = {
    "smoke": {"pairings": ["A+B"], "seeds": [0], "steps": 4, "ablation_seeds": [0], "ablation_steps": 2},
    "default": {"pairings": ["A+B"], "seeds": [0, 1, 2], "steps": 100, "ablation_seeds": [0], "ablation_steps": 60},
    "paper": {"pairings": ["A+B", "A+B+C"], "seeds": [0, 1, 2], "steps": 300, "ablation_seeds": [0, 1, 2],
              "ablation_steps": 300},
}
DEFAULT_BACKEND = {"smoke": "inline", "default": "process", "paper": "ray"}


def policy_paths(config: RunConfig, progress: bool = True) -> dict[str, str]:
    """{name: checkpoint folder}: the profile's pretrained checkpoints (paper), else the zoo, built when missing."""
    if config.policies:
        missing = [f"{name}: {path}" for name, path in config.policies.items() if not Path(path).is_dir()]
        if missing:
            raise FileNotFoundError(f"pretrained checkpoint folder(s) not found: {missing} (see configs/paper.yaml "
                                    "for how to download them)")
        return dict(config.policies)
    from mrl.zoo import build_zoo

    return {name: str(policy.path) for name, policy in build_zoo(config.task, config.zoo, progress=progress).items()}
HACPO_BASELINES = ("hacpo", "gspo", "gspo_x2", "naive")
CLIPPING_MINIBATCHES = 4  # the clipping ablation: 4 updates per step, so the stepwise bound rises (0.8 -> 0.875)


def hacpo_ablations() -> dict[str, list[ProbeConfig]]:
    """Each ablation axis of HACPO (the paper's tables 2-4 and its ratio), the default first."""
    default = ProbeConfig(name="hacpo")
    clip = [ProbeConfig(name="hacpo", minibatches=CLIPPING_MINIBATCHES, clipping=c)
            for c in ("stepwise", "fixed", "symmetric")]
    return {"advantage": [default, *(ProbeConfig(name="hacpo", advantage=a) for a in ("pooled", "own"))],
            "omega": [default, ProbeConfig(name="hacpo", omega=False)],
            "alpha": [ProbeConfig(name="hacpo", alpha=0.0), default, ProbeConfig(name="hacpo", alpha=2.0)],
            "clipping": clip,
            "ratio": [default, ProbeConfig(name="hacpo", ratio="mean")]}


def pairing_policies(pairing: str) -> tuple[str, ...]:
    if pairing not in PAIRINGS:
        raise ValueError(f"pairing={pairing!r} is not allowed; expected one of {list(PAIRINGS)}")
    return PAIRINGS[pairing]


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """sha256 of every source file of the mrl package (sorted by path)."""
    package = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for source in sorted(package.rglob("*.py")):
        digest.update(str(source.relative_to(package)).encode() + source.read_bytes())
    return digest.hexdigest()[:16]


def run_key(config: RunConfig, paths: dict[str, str], probe: ProbeConfig, seed: int, steps: int) -> str:
    grpo = dataclasses.replace(config.grpo, seed=seed, steps=steps)
    return config_hash({"task": to_dict(config.task), "grpo": to_dict(grpo), "probe": to_dict(probe),
                        "policies": {name: Path(path).name for name, path in sorted(paths.items())},
                        "code": code_fingerprint()})


def run_probe(config: RunConfig, paths: dict[str, str], probe: ProbeConfig, seed: int, steps: int,
              backend: str = "process", cache: bool = True, progress: bool = False) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(steps, evals) of one concurrent run of `paths` under `probe`; from the cache when it holds the run."""
    folder = repo_root() / "results" / "runs" / run_key(config, paths, probe, seed, steps)
    if cache and (folder / "run.json").exists():
        return pd.read_csv(folder / "steps.csv"), pd.read_csv(folder / "evals.csv")
    grpo = dataclasses.replace(config.grpo, seed=seed, steps=steps, eval_every=min(config.grpo.eval_every, steps))
    start = time.perf_counter()
    record = run_concurrent(paths, config.task, grpo, ConcurrentConfig(backend=backend, step_timeout=900),
                            threads=config.threads, progress=progress, probe_cfg=probe,
                            run_id=f"{probe.name}-seed{seed}")
    steps_df, evals_df = pd.DataFrame(record.steps), pd.DataFrame(record.evals)
    folder.mkdir(parents=True, exist_ok=True)
    steps_df.to_csv(folder / "steps.csv", index=False)
    evals_df.to_csv(folder / "evals.csv", index=False)
    (folder / "run.json").write_text(json.dumps({
        "task": to_dict(config.task), "grpo": to_dict(grpo), "probe": to_dict(probe), "policies": paths,
        "counters": record.counters, "events": record.events, "backend": backend, "git_sha": git_sha(),
        "wall_seconds": round(time.perf_counter() - start, 1)}, indent=2, default=str))
    return steps_df, evals_df


def run_grid(config: RunConfig, zoo_paths: dict[str, str], pairings, probes: list[ProbeConfig], seeds,
             steps: int | dict[str, int], backend: str = "process", cache: bool = True,
             progress: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every (pairing, probe, seed) run; steps and evals concatenated with those three as columns.

    steps: RL steps of every run, or {pairing: steps}."""
    jobs = [(pairing, probe, seed) for pairing in pairings for probe in probes for seed in seeds]
    all_steps, all_evals = [], []
    for pairing, probe, seed in tqdm(jobs, desc="probe runs", disable=not progress):
        paths = {name: zoo_paths[name] for name in pairing_policies(pairing)}
        n_steps = steps[pairing] if isinstance(steps, dict) else steps
        steps_df, evals_df = run_probe(config, paths, probe, seed, n_steps, backend, cache)
        label = {"pairing": pairing, "probe": probe_label(probe), "seed": seed}
        all_steps.append(steps_df.assign(**label))
        all_evals.append(evals_df.assign(**label))
    return pd.concat(all_steps, ignore_index=True), pd.concat(all_evals, ignore_index=True)


def probe_label(probe: ProbeConfig) -> str:
    """The probe's name, with the knobs that differ from their defaults (ablations stay distinguishable)."""
    default = ProbeConfig(name=probe.name)
    changed = [f"{f.name}={getattr(probe, f.name)}" for f in dataclasses.fields(probe)
               if f.name != "name" and getattr(probe, f.name) != getattr(default, f.name)]
    return probe.name + (f" ({', '.join(changed)})" if changed else "")

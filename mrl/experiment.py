"""Experiments over the runner: every (pairing, probe, seed) as one run, cached by its full config.

The grids' budgets (pairings, probes, seeds, steps) live in the profile's YAML file (`experiments:` in
configs/<profile>.yaml); the axes of HACPO's ablation (`hacpo_ablations`) are the paper's design, the same in
every profile, and stay here.

A run is keyed by the hash of everything its numbers depend on (task, zoo folders, GRPO settings with
seed and steps, probe, policies, and the source code of the mrl package); its steps and evals are
stored under results/runs/<key>/ and read back when the same run is asked for again (a notebook
re-run, or HACPO's notebook reusing the MRL probes' runs). Any edit of mrl/'s code (not its docstrings,
comments or mrl/reports/) makes new keys, so a cached run never outlives the code that produced it. The backend is
not part of the key: inline, process and ray give the same metrics.
"""
from __future__ import annotations

import dataclasses
import json
import multiprocessing
import shutil
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from tqdm.auto import tqdm

from mrl.config import (ConfigError, ExperimentsConfig, GrpoConfig, HacpoGridConfig, MwraTimingConfig,
                        ProbeGridConfig, RunConfig, RunnerConfig, TaskConfig, config_hash, to_dict)
from mrl.checkpoint import placement_key
from mrl import numerics
from mrl.fingerprint import code_fingerprint
from mrl.probes import ProbeConfig, as_probe_config, get_probe, probe_config
from mrl.results import git_sha, repo_root
from mrl.runner import OfflinePeers, run_concurrent

CLIPPING_MINIBATCHES = 4  # the clipping ablation: 4 updates per step, so the stepwise bound rises (0.8 -> 0.875)


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


def hacpo_ablations() -> dict[str, list[ProbeConfig]]:
    """Each ablation axis of HACPO (the paper's tables 2-4 and its ratio), the default first. The clipping axis
    runs CLIPPING_MINIBATCHES updates per step (so the stepwise bound acts): stepwise, fixed (the paper's "no
    stepwise"), symmetric, none (the paper's "no clip")."""
    default = probe_config("hacpo")
    clip = [probe_config("hacpo", minibatches=CLIPPING_MINIBATCHES, clipping=c)
            for c in ("stepwise", "fixed", "symmetric", "none")]
    return {"advantage": [default, *(probe_config("hacpo", advantage=a) for a in ("pooled", "own"))],
            "omega": [default, probe_config("hacpo", omega=False)],
            "alpha": [probe_config("hacpo", alpha=0.0), default, probe_config("hacpo", alpha=2.0)],
            "clipping": clip,
            "ratio": [default, probe_config("hacpo", ratio="mean")]}


@dataclass(frozen=True)
class PeerSetup:
    """What a run's peers do besides its probe: one poisoned policy (mrl.poison) with or without re-verification,
    or peers replayed from another run's experience log (runner.OfflinePeers). The default: honest live peers."""

    poisoned: str = ""
    """the policy that publishes lies, '' for none"""
    attack: str = "forged_success"
    """what it publishes (mrl.config.ATTACKS)"""
    reverify: bool = True
    """learners re-score their peers' claims with their own verifier"""
    offline: tuple = ()
    """((peer, checkpoint folder), ...): peers replayed from offline_log instead of co-trained"""
    offline_log: str = ""
    """the experience log of a cached run (its folder/experience)"""
    log_experience: bool = False
    """write this run's experience log into its cache folder (it computes the same metrics: not in the key)"""
    mode: str = "sync"
    """the step clock (RunnerConfig.mode); async lets each worker run one step ahead, sharing within max_staleness"""
    max_staleness: int = 1
    """SEE drops peer records older than this many steps (RunnerConfig.max_staleness)"""
    backend: str = ""
    """the backend this run must use, part of its key ('' : the caller's, for runs whose metrics every backend
    gives alike); an async run on processes depends on the machine's timing, and a run timed for its wall time is a
    measurement of its backend"""

    def key(self) -> dict:
        """What the run's numbers depend on, independent of where the repository lies."""
        key = {"poisoned": self.poisoned, "attack": self.attack if self.poisoned else "", "reverify": self.reverify,
               "offline": {name: Path(path).name for name, path in self.offline},
               "offline_log": Path(self.offline_log).parent.name if self.offline_log else ""}
        if (self.mode, self.max_staleness) != ("sync", 1):
            key.update(mode=self.mode, max_staleness=self.max_staleness)
        if self.backend:
            key["backend"] = self.backend
        return key


HONEST = PeerSetup()


def run_key(config: RunConfig, paths: dict[str, str], probe: ProbeConfig, seed: int, steps: int,
            setup: PeerSetup = HONEST) -> str:
    grpo = dataclasses.replace(config.grpo, seed=seed, steps=steps)
    key = {"task": to_dict(config.task), "grpo": to_dict(grpo), "probe": to_dict(probe),
           "policies": {name: Path(path).name for name, path in sorted(paths.items())}, "code": code_fingerprint(),
           "numerics": numerics.mode()}
    if setup.key() != HONEST.key():
        key["peers"] = setup.key()
    placed = {name: placement_key(config.placement_of(name)) for name in sorted(paths)}
    if any(placed.values()):
        key["placement"] = placed
    return config_hash(key)


def run_folder(config: RunConfig, paths: dict[str, str], probe: ProbeConfig, seed: int, steps: int,
               setup: PeerSetup = HONEST) -> Path:
    """results/runs/<key>/: where a run's steps, evals and run.json are cached."""
    return repo_root() / "results" / "runs" / run_key(config, paths, probe, seed, steps, setup)


def is_cached(folder: Path, setup: PeerSetup = HONEST) -> bool:
    """The run in `folder` finished (run.json), with its experience log when the setup asks for one."""
    if not (folder / "run.json").exists():
        return False
    return not setup.log_experience or json.loads((folder / "run.json").read_text()).get("experience", False)


def _run_inline(job: tuple) -> None:
    run, recompute = job
    run_probe(*run, backend="inline", cache=not recompute)


def run_packed(runs: list[tuple], processes: int, progress: bool = True, recompute: bool = False,
               job=_run_inline) -> None:
    """Run independent runs `processes` at a time, each inline in its own spawned process (its policies one after
    another on one core, so no core waits at a barrier for a slower policy), into the run cache.

    runs: (config, paths, probe, seed, steps) each. Inline gives the metrics of every other backend, so the cached
    results are those of a run on the profile's backend. recompute: run even what the cache holds.
    Nothing hangs: a run process that dies raises at once, naming the runs in flight, and one that finishes
    nothing within `packed_deadline` is killed with the others; finished runs stay in the cache either way.
    job: what runs one (run, recompute) in a packed process (tests inject faults here)."""
    if not runs:
        return
    processes = min(processes, len(runs))
    before = set(multiprocessing.active_children())
    executor = ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn"))
    try:
        pending = {executor.submit(job, (run, recompute)): run for run in runs}
        with tqdm(total=len(runs), desc=f"runs, {processes} at a time", disable=not progress) as bar:
            while pending:
                deadline = packed_deadline([pending[f] for f in pending])
                done, _ = wait(pending, timeout=deadline, return_when=FIRST_COMPLETED)
                if not done:
                    raise TimeoutError(f"no packed run finished within {deadline:.0f} s (step_timeout x the steps "
                                       f"of the longest run in flight); in flight: {_describe(pending.values())}")
                for future in done:
                    run = pending.pop(future)
                    try:
                        future.result()
                    except BrokenProcessPool:
                        raise RuntimeError(f"a packed run's process died (killed, or out of memory) while running "
                                           f"{_describe([run, *pending.values()])}; finished runs are cached, "
                                           f"run again to continue") from None
                    bar.update(1)
    except BaseException:
        executor.shutdown(wait=False, cancel_futures=True)
        for child in set(multiprocessing.active_children()) - before:  # a stuck run is killed, not waited for
            child.kill()
        raise
    executor.shutdown()


def packed_deadline(runs: list[tuple]) -> float:
    """Seconds within which one of `runs` must finish: the step deadline for each phase of the longest
    (rollout and update per step, an evaluation every eval_every steps and at 0)."""
    def phases(run):
        config, steps = run[0], run[4]
        return 2 * steps + steps // max(1, min(config.grpo.eval_every, steps)) + 2
    return max(run[0].step_timeout * phases(run) for run in runs)


def _describe(runs) -> str:
    return ", ".join(f"{probe_label(run[2])} seed {run[3]} of {'+'.join(run[1])}" for run in runs)


def run_probe(config: RunConfig, paths: dict[str, str], probe: ProbeConfig, seed: int, steps: int,
              setup: PeerSetup = HONEST, *, backend: str | None = None, cache: bool = True,
              progress: bool = False, report_to: str = "none") -> tuple[pd.DataFrame, pd.DataFrame]:
    """(steps, evals) of one run of `paths` under `probe` with its peers' `setup`; from the cache when it holds
    the run. backend: None takes the profile's (config.backend). report_to: live metrics (mrl.tracking)."""
    folder = run_folder(config, paths, probe, seed, steps, setup)
    if cache and is_cached(folder, setup):
        return pd.read_csv(folder / "steps.csv"), pd.read_csv(folder / "evals.csv")
    grpo = dataclasses.replace(config.grpo, seed=seed, steps=steps, eval_every=min(config.grpo.eval_every, steps))
    backend = setup.backend or backend or config.backend
    experience = folder / "experience" if setup.log_experience else None
    if experience is not None and experience.exists():
        shutil.rmtree(experience)  # a log torn by an interrupted run: write it again whole
    offline = OfflinePeers(setup.offline_log, dict(setup.offline)) if setup.offline else None
    start = time.perf_counter()
    record = run_concurrent(paths, config.task, grpo,
                            RunnerConfig(backend=backend, step_timeout=config.step_timeout, report_to=report_to,
                                         poisoned=setup.poisoned, attack=setup.attack, reverify=setup.reverify,
                                         mode=setup.mode, max_staleness=setup.max_staleness),
                            threads=config.threads, progress=progress, probe_cfg=probe,
                            run_id=f"{probe.name}-seed{seed}", experience_dir=experience, offline=offline,
                            placement={name: config.placement_of(name) for name in paths})
    return save_run(folder, record, config.task, grpo, probe, paths, backend, time.perf_counter() - start,
                    setup)


def save_run(folder: Path, record, task: TaskConfig, grpo: GrpoConfig, probe: ProbeConfig, paths: dict[str, str],
             backend: str, wall_seconds: float, setup: PeerSetup = HONEST) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A finished run into its cache folder: steps.csv, evals.csv, then run.json (its settings, peers' setup,
    counters, events, backend, git SHA and wall time), which marks it finished; returns (steps, evals)."""
    steps_df, evals_df = pd.DataFrame(record.steps), pd.DataFrame(record.evals)
    folder.mkdir(parents=True, exist_ok=True)
    steps_df.to_csv(folder / "steps.csv", index=False)
    evals_df.to_csv(folder / "evals.csv", index=False)
    (folder / "run.json").write_text(json.dumps({
        "task": to_dict(task), "grpo": to_dict(grpo), "probe": to_dict(probe), "policies": paths,
        "peers": setup.key(), "experience": setup.log_experience, "counters": record.counters,
        "events": record.events, "backend": backend, "git_sha": git_sha(), "numerics": numerics.state(),
        "wall_seconds": round(wall_seconds, 1)}, indent=2, default=str))
    return steps_df, evals_df


def run_grid(config: RunConfig, zoo_paths: dict[str, str], pairings, probes: list, seeds,
             steps: int | dict[str, int], backend: str | None = None, cache: bool = True,
             progress: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every (pairing, probe, seed) run; steps and evals concatenated with those three as columns.

    probes: ProbeConfig objects or grid entries of a profile (names, mappings {name: ..., knob: value}).
    steps: RL steps of every run, or {pairing: steps}. backend: None takes the profile's. With config.packed_runs
    > 1 the runs missing from the cache run that many at a time, inline (run_packed), whatever the backend."""
    probes = [as_probe_config(entry) for entry in probes]
    labelled = []
    for pairing in pairings:
        paths = {name: zoo_paths[name] for name in config.pairing(pairing)}
        for probe in probes:
            for seed in seeds:
                run = (config, paths, probe, seed, steps[pairing] if isinstance(steps, dict) else steps)
                labelled.append(({"pairing": pairing, "probe": probe_label(probe), "seed": seed}, run))
    return run_labelled(labelled, config.packed_runs, backend, cache, progress)


def run_labelled(labelled: list[tuple[dict, tuple]], packed_runs: int, backend: str | None = None,
                 cache: bool = True, progress: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(steps, evals) of runs (config, paths, probe, seed, steps[, setup]), each with its label's columns.

    With packed_runs > 1 the runs missing from the cache first run that many at a time (run_packed)."""
    if packed_runs > 1:
        runs = {run_folder(*run): run for _, run in labelled}   # a repeated run runs once
        missing = [run for folder, run in runs.items() if not cache or not is_cached(folder, *run[5:])]
        run_packed(missing, packed_runs, progress, recompute=not cache)
        cache = True  # every run is in the cache now
    all_steps, all_evals = [], []
    for label, run in tqdm(labelled, desc="probe runs", disable=not progress or packed_runs > 1):
        steps_df, evals_df = run_probe(*run, backend=backend, cache=cache)
        all_steps.append(steps_df.assign(**label))
        all_evals.append(evals_df.assign(**label))
    return pd.concat(all_steps, ignore_index=True), pd.concat(all_evals, ignore_index=True)


def heldout_config(config: RunConfig, zoo_seed: int) -> RunConfig:
    """The profile of the held-out experiment on one zoo seed: its task and zoo (warm-up seed `zoo_seed`), its
    pairing, the profile's GRPO settings with the held-out evaluation cadence, and the profile's execution."""
    heldout = config.experiments.heldout
    name = "+".join(heldout.pairing)
    zoo = dataclasses.replace(heldout.zoo, warmup=dataclasses.replace(heldout.zoo.warmup, seed=zoo_seed))
    grids = ExperimentsConfig(mwra=MwraTimingConfig(pairing=name),
                              probe=ProbeGridConfig(pairings=[name], steps={name: heldout.steps}),
                              hacpo=HacpoGridConfig(pairings=[name]), heldout=heldout)
    return dataclasses.replace(config, task=heldout.task, zoo=zoo, policies={},
                               grpo=dataclasses.replace(config.grpo, eval_every=heldout.eval_every),
                               pairings={name: list(heldout.pairing)}, notebooks=[], experiments=grids)


def heldout_zoos(config: RunConfig, progress: bool = True) -> dict[int, dict[str, str]]:
    """{zoo seed: {name: checkpoint folder}} of the held-out experiment, each zoo built when missing."""
    return {seed: policy_paths(heldout_config(config, seed), progress)
            for seed in config.experiments.heldout.zoo_seeds}


def heldout_grid(config: RunConfig, backend: str | None = None, cache: bool = True,
                 progress: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every run of the held-out experiment: each probe on the first zoo seed, the zoo_seed_probes on every zoo
    seed, every RL seed; steps and evals with columns pairing, probe, seed and zoo_seed."""
    heldout = config.experiments.heldout
    probes = [as_probe_config(entry) for entry in heldout.probes]
    labelled = []
    for zoo_seed, paths in heldout_zoos(config, progress).items():
        run_config = heldout_config(config, zoo_seed)
        for probe in probes:
            if zoo_seed != heldout.zoo_seeds[0] and probe.name not in heldout.zoo_seed_probes:
                continue
            for seed in heldout.seeds:
                label = {"pairing": "+".join(heldout.pairing), "probe": probe_label(probe), "seed": seed,
                         "zoo_seed": zoo_seed}
                labelled.append((label, (run_config, paths, probe, seed, heldout.steps)))
    return run_labelled(labelled, config.packed_runs, backend, cache, progress)


def heldout_knob_grid(config: RunConfig, backend: str | None = None, cache: bool = True,
                      progress: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The probes' knob variants (experiments.heldout.knob_probes) and each one's probe at its defaults, on the first
    zoo seed over knob_seeds: steps and evals labelled like heldout_grid's (a default shared with the main grid
    comes from the run cache)."""
    heldout = config.experiments.heldout
    variants = [as_probe_config(entry) for entry in heldout.knob_probes]
    defaults = [probe_config(name) for name in dict.fromkeys(v.name for v in variants)]
    zoo_seed = heldout.zoo_seeds[0]
    paths = heldout_zoos(config, progress)[zoo_seed]
    run_config = heldout_config(config, zoo_seed)
    labelled = [({"pairing": "+".join(heldout.pairing), "probe": probe_label(probe), "seed": seed,
                  "zoo_seed": zoo_seed}, (run_config, paths, probe, seed, heldout.steps))
                for probe in defaults + variants for seed in heldout.knob_seeds]
    return run_labelled(labelled, config.packed_runs, backend, cache, progress)


def _heldout_base(config: RunConfig) -> tuple[RunConfig, dict[str, str], str]:
    """(the held-out experiment's run config on its first zoo seed, that zoo's paths of the pairing, pairing label)."""
    heldout = config.experiments.heldout
    run_config = heldout_config(config, heldout.zoo_seeds[0])
    zoo = policy_paths(run_config, progress=False)   # the first zoo seed's only: the other seeds' are not needed
    return run_config, {name: zoo[name] for name in heldout.pairing}, "+".join(heldout.pairing)


def beyond_grid(config: RunConfig, backend: str | None = None, cache: bool = True,
                progress: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """80_beyond's online probes (experiments.beyond.probes), the poison probes beside an honest peer (the
    comparison) and grpo on the held-out experiment's first zoo seed over beyond.seeds, labelled like heldout_grid's
    runs (those it shares come from its cache)."""
    beyond, heldout = config.experiments.beyond, config.experiments.heldout
    run_config, paths, pairing = _heldout_base(config)
    probes = [probe_config("grpo"), *(as_probe_config(entry) for entry in [*beyond.probes, *beyond.poison_probes])]
    labelled = [({"pairing": pairing, "probe": probe_label(probe), "seed": seed, "zoo_seed": heldout.zoo_seeds[0]},
                 (run_config, paths, probe, seed, heldout.steps)) for probe in probes for seed in beyond.seeds]
    return run_labelled(labelled, config.packed_runs, backend, cache, progress)


def offline_grid(config: RunConfig, backend: str | None = None, cache: bool = True,
                 progress: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """80_beyond's offline probes: each policy of the pairing learns alone while the others are replayed from the
    experience log of the grpo run of the same seed (no co-training; GRAFT's offline variant). The grpo runs are
    recorded again with their logs when their cache has none (same metrics). Labelled "<probe> (offline)"."""
    beyond, heldout = config.experiments.beyond, config.experiments.heldout
    run_config, paths, pairing = _heldout_base(config)
    grpo = probe_config("grpo")
    logged = PeerSetup(log_experience=True)
    sources = [({"seed": seed}, (run_config, paths, grpo, seed, heldout.steps, logged)) for seed in beyond.seeds]
    run_labelled(sources, config.packed_runs, backend, cache, progress)
    labelled = []
    for entry in beyond.offline_probes:
        probe = as_probe_config(entry)
        for seed in beyond.seeds:
            log = run_folder(run_config, paths, grpo, seed, heldout.steps) / "experience"
            for learner in paths:
                setup = PeerSetup(offline=tuple((peer, path) for peer, path in paths.items() if peer != learner),
                                  offline_log=str(log))
                label = {"pairing": pairing, "probe": f"{probe_label(probe)} (offline)", "seed": seed,
                         "zoo_seed": heldout.zoo_seeds[0]}
                labelled.append((label, (run_config, {learner: paths[learner]}, probe, seed, heldout.steps, setup)))
    return run_labelled(labelled, config.packed_runs, backend, cache, progress)


ATTACKED_KINDS = {"forged_success": {"rollout", "success"}, "lying_stats": {"group_stats"},
                  "malformed": {"rollout", "success", "group_stats"}}
"""the record kinds each attack changes: a probe meets an attack only when it reads one of them"""


def poison_grid(config: RunConfig, backend: str | None = None, cache: bool = True,
                progress: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """80_beyond's poisoned peer: each poison probe beside the poisoned policy under each attack on a record kind it
    reads (forged successes without re-verification over beyond.seeds and with it over beyond.reverified_seeds; the
    other attacks, which re-verification cannot touch, over beyond.seeds), and each probe honest over beyond.seeds
    (from the held-out grid's cache). Columns attack ("none" for honest) and reverify."""
    beyond, heldout = config.experiments.beyond, config.experiments.heldout
    run_config, paths, pairing = _heldout_base(config)
    if beyond.poisoned not in paths:
        raise ConfigError(f"BeyondConfig.poisoned = {beyond.poisoned!r} is not a policy of the held-out pairing; "
                          f"expected one of {sorted(paths)}")
    labelled = []
    for entry in beyond.poison_probes:
        probe = as_probe_config(entry)
        base = {"pairing": pairing, "probe": probe_label(probe), "zoo_seed": heldout.zoo_seeds[0]}
        for seed in beyond.seeds:
            labelled.append(({**base, "seed": seed, "attack": "none", "reverify": True},
                             (run_config, paths, probe, seed, heldout.steps)))
        for attack in beyond.attacks:
            if not ATTACKED_KINDS[attack] & set(get_probe(probe.name).kinds):
                continue
            arms = ((False, beyond.seeds), (True, beyond.reverified_seeds)) if attack == "forged_success" \
                else ((True, beyond.seeds),)   # nothing re-verifies group statistics; SEE rejects malformed ones
            for reverify, seeds in arms:
                setup = PeerSetup(poisoned=beyond.poisoned, attack=attack, reverify=reverify)
                labelled += [({**base, "seed": seed, "attack": attack, "reverify": reverify},
                              (run_config, paths, probe, seed, heldout.steps, setup)) for seed in seeds]
    return run_labelled(labelled, config.packed_runs, backend, cache, progress)


def scaling_grid(config: RunConfig, progress: bool = True) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """80_beyond's n-policy runs: the held-out pairing plus the first n - 2 of beyond.scaling_families (built into
    the held-out zoo of its first zoo seed), sharing with beyond.scaling_probe under each clock of scaling_modes
    (async: one step ahead at most, records up to 2 steps old), one run at a time on beyond.scaling_backend (in the
    run's key: its wall time is a measurement of that backend). Returns (steps, evals, runs: one row per run with n,
    mode, seed, its wall seconds start-up included and backend), steps and evals labelled with pairing, probe, seed,
    zoo_seed, n and mode."""
    beyond, heldout = config.experiments.beyond, config.experiments.heldout
    zoo_seed = heldout.zoo_seeds[0]
    base = heldout_config(config, zoo_seed)
    added = beyond.scaling_families[:max(beyond.scaling_sizes) - 2]   # only the families some run needs
    grown = dataclasses.replace(base, zoo=dataclasses.replace(base.zoo, families=[*base.zoo.families, *added]))
    zoo = policy_paths(grown, progress)
    order = [*heldout.pairing, *(f.name for f in added)]
    probe = as_probe_config(beyond.scaling_probe)
    all_steps, all_evals, runs = [], [], []
    jobs = [(n, mode, seed) for n in beyond.scaling_sizes for mode in beyond.scaling_modes
            for seed in beyond.scaling_seeds]
    for n, mode, seed in tqdm(jobs, desc="n-policy runs", disable=not progress):
        paths = {name: zoo[name] for name in order[:n]}
        setup = PeerSetup(mode=mode, max_staleness=2 if mode == "async" else 1, backend=beyond.scaling_backend)
        steps_df, evals_df = run_probe(base, paths, probe, seed, beyond.scaling_steps, setup)
        label = {"pairing": "+".join(paths), "probe": probe_label(probe), "seed": seed, "zoo_seed": zoo_seed, "n": n,
                 "mode": mode}
        all_steps.append(steps_df.assign(**label))
        all_evals.append(evals_df.assign(**label))
        saved = json.loads((run_folder(base, paths, probe, seed, beyond.scaling_steps, setup) / "run.json").read_text())
        runs.append({**label, "wall seconds": saved["wall_seconds"], "backend": saved["backend"]})
    return pd.concat(all_steps, ignore_index=True), pd.concat(all_evals, ignore_index=True), pd.DataFrame(runs)


def probe_label(probe: ProbeConfig) -> str:
    """The probe's name, with the knobs that differ from their defaults (ablations stay distinguishable)."""
    default = probe_config(probe.name).knobs()
    changed = [f"{knob}={value}" for knob, value in probe.knobs().items() if value != default[knob]]
    return probe.name + (f" ({', '.join(changed)})" if changed else "")

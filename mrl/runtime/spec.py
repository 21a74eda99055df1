"""A run as one typed record: `RunSpec` is the runner's only input, and `run_identity` the one rule for what a run's
numbers depend on (the run cache's key and the checkpoint's identity check both read it).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from mrl.core.config import ConfigError, GrpoConfig, PlacementConfig, RunnerConfig, TaskConfig
from mrl.core.probes import ProbeConfig, probe_config
from mrl.core.see import PolicySpec
from mrl.core.validation import to_dict
from mrl.runtime.checkpoint import placement_key
from mrl.runtime.experience_log import read_log_index, replay
from mrl.runtime.saving import RunCard


@dataclass(frozen=True)
class OfflinePeers:
    """Peers that do not train in this run (GRAFT's offline variant): at each step s, their records of step s in a
    stored SEE log (`mrl.runtime.experience_log.replay`, every record re-validated) enter the exchange as if they
    had just been published, beside the live policies' own."""

    log_dir: str
    """the experience log of an earlier run"""
    paths: dict
    """{policy id in the log: its checkpoint folder} (THL needs its tokenizer); the log's other policies are left out"""

    def load(self) -> tuple[dict[str, PolicySpec], dict[int, list]]:
        """({policy: spec} from the log's manifests, {step: [records]}) of the policies in `paths`."""
        logged = {name: spec for manifest in read_log_index(Path(self.log_dir)).values()
                  for name, spec in manifest["policies"].items()}
        missing = sorted(set(self.paths) - set(logged))
        if missing:
            raise ConfigError(f"OfflinePeers.paths names {missing}, which the log {self.log_dir} does not hold; it "
                              f"holds {sorted(logged)}")
        specs = {name: spec for name, spec in logged.items() if name in self.paths}
        by_step: dict[int, list] = {}
        for step, record in replay(self.log_dir):
            if record.policy_id in self.paths:
                by_step.setdefault(step, []).append(record)
        return specs, by_step


@dataclass(frozen=True)
class RunSpec:
    """One concurrent run: the policies at `policies` trained together for grpo.steps steps of seed grpo.seed."""

    policies: dict[str, str]
    """{name: checkpoint folder}, one or more"""
    task: TaskConfig
    """the task whose prompts and verifier every step uses"""
    grpo: GrpoConfig
    """GRPO settings with the run's seed and steps (the probe's group multiplier is applied by the runner)"""
    runner: RunnerConfig = field(default_factory=RunnerConfig)
    """backend, clock, deadlines, failure policy, checkpoints, tracker, and the peers' behaviour (poisoned, attack,
    reverify): an experiment's variant is folded in here"""
    probe: ProbeConfig | None = None
    """the sharing probe and its knobs (None: grpo, independent policies that still publish experience)"""
    threads: int | None = 1
    """torch threads per worker (1 keeps runs bit-reproducible); None plans them from each policy's parameter count
    over this machine's cores (mwra.plan_threads)"""
    run_id: str = "run"
    """written into every Rollout record and naming the run to trackers"""
    placement: dict[str, PlacementConfig] = field(default_factory=dict)
    """{policy: PlacementConfig} (device, dtype, checkpointing, micro-batch, GPU share); a policy not named takes the
    defaults (this CPU)"""
    offline: OfflinePeers | None = None
    """peers replayed from a stored experience log, step by step (sync mode only)"""
    backend_pinned: bool = False
    """the backend is part of what this run measures (its wall time; an async schedule on processes), so it enters
    the run's identity; otherwise every backend gives the same metrics and it does not"""
    experience_dir: str | Path | None = None
    """where the exchange logs its accepted records (mrl.runtime.experience_log.replay reads them); None:
    checkpoint_dir/experience when checkpointing (and log_beside_checkpoints), else no log"""
    log_beside_checkpoints: bool = True
    """without an experience_dir, log the experience into checkpoint_dir/experience (`mrl run`); a grid run's
    checkpoints in the run cache need no log (the exchange's state is in each checkpoint)"""
    output_dir: str | Path | None = None
    """save every trained policy at the end as a transformers folder output_dir/<policy>/
    (mrl.runtime.saving.save_policy); None: nothing is saved"""
    card: RunCard | None = None
    """what the saved policies' model cards say of the run (default: the probe, seed and steps)"""
    actor_cls: type | None = None
    """the worker class (None: mrl.runtime.actor.PolicyActor; a subclass injects faults in tests)"""

    def probe_config(self) -> ProbeConfig:
        """The run's probe config: grpo's when none (or the bare default) is given."""
        return probe_config("grpo") if self.probe is None or self.probe == ProbeConfig() else self.probe


def run_identity(spec: RunSpec) -> dict:
    """What a run's numbers depend on, as plain JSON values, independent of where the checkout lies: the one rule for
    a run's identity. The run cache's key is it with the code's fingerprint (mrl.experiments.runs.Run.key_content);
    a checkpoint records it and a resume must match it (mrl.runtime.checkpoint.load_latest).

    Left out: threads, timeouts, checkpoint interval, tracker, output folders, and the backend unless the run pins
    it (backend_pinned): they change how a run executes, not what it computes. placement enters only where it is not
    the default (a GPU's or bf16's numbers differ from the CPU's; the GPU share does not change them, the micro-batch
    only the order of the gradient's sums).
    """
    runner, grpo = spec.runner, to_dict(spec.grpo)
    identity = {
        "policies": {name: Path(path).name for name, path in sorted(spec.policies.items())},
        "seed": grpo.pop("seed"),
        "steps": grpo.pop("steps"),
        "task": to_dict(spec.task),
        "grpo": grpo,
        "probe": to_dict(spec.probe_config()),
        "run_id": spec.run_id,
        "clock": {"mode": runner.mode, "max_staleness": runner.max_staleness,
                  **({"staleness": runner.staleness} if runner.mode == "async" else {})},
        "peers": {"poisoned": runner.poisoned, "attack": runner.attack if runner.poisoned else "",
                  "reverify": runner.reverify},
        "offline": None if spec.offline is None else {
            "log": "/".join(Path(spec.offline.log_dir).parts[-2:]),
            "policies": {name: Path(path).name for name, path in sorted(spec.offline.paths.items())}},
    }
    if runner.failure_policy != "fail":
        identity["failure_policy"] = runner.failure_policy   # a dropped worker changes what the others see
    if spec.backend_pinned:
        identity["backend"] = runner.backend
    placed = {name: placement_key(spec.placement.get(name, PlacementConfig())) for name in sorted(spec.policies)}
    if any(placed.values()):
        identity["placement"] = {name: key for name, key in placed.items() if key}
    return json.loads(json.dumps(identity, sort_keys=True, default=str))  # as a manifest will read it back

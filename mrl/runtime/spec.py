"""A run as one typed record: `Run` is what an experiment asks for and the runner's only input, and `run_identity`
the one rule for what a run's numbers depend on (the run cache's key and the checkpoint's identity check both read
it).

A `Run` is everything one concurrent run's numbers depend on: the profile's config (task, GRPO, runner, placement,
threads), the policies' checkpoint folders, the probe, the RL seed and steps, and its `Variant` (what its peers do
besides the probe). `Run.key()` hashes what the numbers depend on (its identity, the source code of the mrl package,
the numerics mode, a user's probe's modules); the run cache (mrl.experiments.runs.run_one) keeps its steps and evals
under results/runs/<key>/. Any edit of mrl/'s code (not its docstrings, comments or mrl/reports/) makes new keys, so
a cached run never outlives the code that produced it. The backend is not part of the key unless the run pins it:
inline, process and ray give the same metrics.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from mrl import numerics
from mrl.core.config import ConfigError, GrpoConfig, RunnerConfig
from mrl.core.probes import ProbeConfig, get_probe, probe_code, probe_label
from mrl.core.run_config import RunConfig
from mrl.core.see import PolicySpec
from mrl.core.seeding import nested_rl_seed
from mrl.core.validation import config_hash, require, to_dict
from mrl.fingerprint import code_fingerprint
from mrl.paths import repo_root
from mrl.runtime.checkpoint import placement_key
from mrl.runtime.experience_log import read_log_index, replay
from mrl.runtime.results import CachedRun, read_run
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
class Variant:
    """What a run does besides its probe and the profile's settings: the RunnerConfig fields it sets over the
    profile's runner (a poisoned peer, mrl.runtime.poison, with or without re-verification; the step clock; a backend
    it must use), peers replayed from another run's experience log (OfflinePeers), and whether it logs its own
    experience. The default: the profile's runner, honest live peers."""

    runner: dict = field(default_factory=dict)
    """RunnerConfig fields set over the profile's runner, e.g. {"poisoned": "B", "attack": "forged_success",
    "reverify": False} or {"mode": "async", "max_staleness": 2, "backend": "process"}; a backend named here is the
    one the run must use (an async run's metrics depend on its backend's timing), else the caller's (run_one's
    backend), else the profile's"""
    offline: tuple = ()
    """((peer, checkpoint folder), ...): peers replayed from offline_log instead of co-trained"""
    offline_log: str = ""
    """the experience log of a cached run (its folder/experience)"""
    log_experience: bool = False
    """write this run's experience log into its cache folder (it computes the same metrics: not in the key)"""

    def __post_init__(self):
        fields = [f.name for f in dataclasses.fields(RunnerConfig)]
        unknown = sorted(set(self.runner) - set(fields))
        require(not unknown, "Variant", "runner", unknown, f"RunnerConfig fields: {fields}")

    @property
    def backend_pinned(self) -> bool:
        """The run must use the variant's backend (it is part of the run's identity)."""
        return "backend" in self.runner


HONEST = Variant()


@dataclass(frozen=True)
class Run:
    """One concurrent run: `paths` ({name: checkpoint folder}) trained together under `probe` for `steps` RL steps
    of seed `seed`, with the profile's `config` (task, GRPO, runner, placement, threads) and its peers' `variant`."""

    config: RunConfig
    paths: dict[str, str]
    probe: ProbeConfig
    seed: int
    steps: int
    variant: Variant = field(default=HONEST)

    def grpo(self) -> GrpoConfig:
        """The GRPO settings the run trains with: the profile's, with its steps (an evaluation at least at the end)
        and its RL seed nested in its warm-up's seed (mrl.core.seeding.nested_rl_seed)."""
        zoo_seed = self.config.zoo.warmup.seed if self.config.zoo is not None else 0
        return dataclasses.replace(self.config.grpo, seed=nested_rl_seed(zoo_seed, self.seed), steps=self.steps,
                                   eval_every=min(self.config.grpo.eval_every, self.steps))

    def runner(self) -> RunnerConfig:
        """The RunnerConfig the run runs with: the profile's, with the variant's fields over it (the one place they
        meet; values checked as RunnerConfig checks them)."""
        return dataclasses.replace(self.config.runner, **self.variant.runner)

    def with_runner(self, **fields) -> Run:
        """This run executed with other runner settings that do not change what it computes (backend, report_to,
        checkpoint_every, ...): the same identity and key (a variant's pinned backend wins over the one given). A
        field that is part of the identity (the clock, the failure policy) is refused: that is another run."""
        runner = dataclasses.replace(self.config.runner, **fields)
        other = dataclasses.replace(self, config=dataclasses.replace(self.config, runner=runner))
        before, after = run_identity(self), run_identity(other)
        changed = sorted(key for key in before.keys() | after.keys() if before.get(key) != after.get(key))
        require(not changed, "Run.with_runner", "fields", sorted(fields),
                f"runner fields outside the run's identity (these change its {changed})")
        if "_key" in self.__dict__:
            object.__setattr__(other, "_key", self.__dict__["_key"])
        return other

    @property
    def run_id(self) -> str:
        """Written into every Rollout record and naming the run to trackers: '<probe>-seed<seed>'."""
        return f"{self.probe.name}-seed{self.seed}"

    def offline_peers(self) -> OfflinePeers | None:
        """The peers replayed from the variant's offline log (None: every peer trains live)."""
        return OfflinePeers(self.variant.offline_log, dict(self.variant.offline)) if self.variant.offline else None

    def key_content(self) -> dict:
        """Everything the run's numbers depend on: its identity (run_identity, which a checkpoint of it records too),
        the mrl package's code and the numerics mode."""
        key = {**run_identity(self), "code": code_fingerprint(), "numerics": numerics.mode()}
        user_code = probe_code(self.probe.name)
        if user_code:
            key["probe_code"] = user_code   # a probe written outside the package: its modules' code
        return key

    def key(self) -> str:
        """The run's cache key: the hash of key_content(), computed once per Run (a Run is made for one call; a
        user's probe edited later makes new Runs, and new keys)."""
        if "_key" not in self.__dict__:
            object.__setattr__(self, "_key", config_hash(self.key_content()))
        return self.__dict__["_key"]

    def folder(self) -> Path:
        """results/runs/<key>/: where the run's steps, evals and run.json are cached."""
        return repo_root() / "results" / "runs" / self.key()

    def label(self) -> str:
        """The run in words, for progress and errors: 'sgt seed 1 of A+B'."""
        return f"{probe_label(self.probe)} seed {self.seed} of {'+'.join(self.paths)}"

    def cached(self) -> CachedRun | None:
        """The run as its folder holds it, every file checked (mrl.runtime.results.read_run: a torn or edited one is
        named in a warning), with its experience log when its variant asks for one; None: it must be computed."""
        if not self.cacheable:
            return None
        cached = read_run(self.folder())
        if cached is None or (self.variant.log_experience and not cached.record.get("experience", False)):
            return None
        return cached

    @property
    def cacheable(self) -> bool:
        """Its key holds all the code it runs: not a probe written in notebook cells (mrl.core.probes.Probe.in_cells),
        whose code no file holds, so no key can tell an edited cell from the one that ran."""
        return not get_probe(self.probe.name).in_cells

    def card(self) -> RunCard:
        """What its saved policies' model cards say of the run: its key (none for a run outside the cache,
        `cacheable`), its config's profile, probe, seed and steps."""
        return RunCard(run_key=self.key() if self.cacheable else "", profile=self.config.profile,
                       probe=probe_label(self.probe), seed=self.seed, steps=self.steps)

    def is_cached(self) -> bool:
        """The run finished in its folder and passes its checks (`cached`)."""
        return self.cached() is not None


def run_identity(run: Run) -> dict:
    """What a run's numbers depend on, as plain JSON values, independent of where the checkout lies: the one rule for
    a run's identity. The run cache's key is it with the code's fingerprint (Run.key_content); a checkpoint records it
    and a resume must match it (mrl.runtime.checkpoint.load_latest).

    Left out: threads, timeouts, checkpoint interval, tracker, output folders, and the backend unless the variant
    pins it (backend_pinned): they change how a run executes, not what it computes. placement enters only where it
    is not the default (a GPU's or bf16's numbers differ from the CPU's; the GPU share does not change them, the
    micro-batch only the order of the gradient's sums).
    """
    runner, grpo, offline = run.runner(), to_dict(run.grpo()), run.offline_peers()
    identity = {
        "policies": {name: Path(path).name for name, path in sorted(run.paths.items())},
        "seed": grpo.pop("seed"),
        "steps": grpo.pop("steps"),
        "task": to_dict(run.config.task),
        "grpo": grpo,
        "probe": to_dict(run.probe),
        "run_id": run.run_id,
        "clock": {"mode": runner.mode, "max_staleness": runner.max_staleness,
                  **({"staleness": runner.staleness} if runner.mode == "async" else {})},
        "peers": {"poisoned": runner.poisoned, "attack": runner.attack if runner.poisoned else "",
                  "reverify": runner.reverify},
        "offline": None if offline is None else {
            "log": "/".join(Path(offline.log_dir).parts[-2:]),
            "policies": {name: Path(path).name for name, path in sorted(offline.paths.items())}},
    }
    if runner.failure_policy != "fail":
        identity["failure_policy"] = runner.failure_policy   # a dropped worker changes what the others see
    if run.variant.backend_pinned:
        identity["backend"] = runner.backend
    placed = {name: placement_key(run.config.placement_of(name)) for name in sorted(run.paths)}
    if any(placed.values()):
        identity["placement"] = {name: key for name, key in placed.items() if key}
    return json.loads(json.dumps(identity, sort_keys=True, default=str))  # as a manifest will read it back

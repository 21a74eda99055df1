"""The runner: n >= 1 policies trained together on one MWRA backend, sharing experience through SEE.

One loop for every experiment (independent GRPO is the `grpo` probe; the probes and HACPO are other probes):
`plan_run` makes every check once, before any worker starts, into a frozen `RunPlan`; a `Session` holds what the run
changes and one method per phase of a step; a clock drives it, `sync_clock` step by step or `async_clock` with
bounded staleness. The step, evaluation, checkpoints, resume and saving the trained policies: docs/architecture.md,
MWRA and the runner.
"""
from __future__ import annotations

import dataclasses
import json
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from tqdm.auto import tqdm

from mrl.runtime import checkpoint

from mrl import numerics
from mrl.core.config import ConfigError, GrpoConfig, RunnerConfig
from mrl.core.probes import Probe, ProbeConfig, get_probe, require_importable
from mrl.core.run_config import RunConfig
from mrl.core.see import Exchange, PolicySpec
from mrl.core.seeding import step_prompts
from mrl.runtime.actor import FinishResult, PolicyActor, RolloutResult, UpdateResult, WorkerSpec, shared_task
from mrl.runtime.experience_log import ExperienceLog
from mrl.runtime.mwra import WorkerFailed, make_backend
from mrl.runtime.poison import PoisonedActor
from mrl.runtime.saving import RunCard, save_policy
from mrl.runtime.spec import OfflinePeers, Run, run_identity
from mrl.runtime.tracking import Reporting, make_reporters
from mrl.runtime.worker import WorkerHandle


@dataclass
class RunRecord:
    """Everything a run produced."""

    steps: list = field(default_factory=list)
    evals: list = field(default_factory=list)
    events: list = field(default_factory=list)
    timeline: list = field(default_factory=list)
    startup_seconds: float = 0.0
    """backend start-up (worker processes started, Ray initialised, actors built) before the first step"""
    wall_seconds: float = 0.0
    """the training loop, from the first step to the last"""
    counters: dict = field(default_factory=dict)
    workers: list = field(default_factory=list)


# --- the plan: every check, once, before any worker starts ----------------------------------------------------

@dataclass(frozen=True)
class RunPlan:
    """What plan_run decided from a Run: what each worker receives (`workers`, one WorkerSpec each) and what the
    driver needs besides; nothing in it changes while the run goes on."""

    runner: RunnerConfig
    """its runner settings, the variant folded in (Run.runner)"""
    task: object
    """the task (mrl.core.tasks.make_task) whose prompts and verifier every step uses"""
    grpo_cfg: GrpoConfig
    """the GRPO config, its group size multiplied by the probe's group_multiplier"""
    probe: Probe
    """the resolved probe (its kinds, teacher, group multiplier)"""
    offline_specs: dict
    """{offline policy: its spec from the stored log}"""
    offline_records: dict
    """{step: [records]} the offline peers publish at that step"""
    identity: dict
    """the settings a resume must match (mrl.runtime.spec.run_identity)"""
    experience_dir: Path | str | None
    """where the exchange logs its accepted records (None: no log)"""
    workers: tuple
    """one WorkerSpec per live policy, the poisoned one's actor PoisonedActor"""
    resumed: Path | None = None
    """the checkpoint folder the run continues from (its identity matched), None for a fresh run"""
    saved: dict | None = None
    """that checkpoint's state (step, workers, exchange, record)"""
    skipped: tuple = ()
    """(folder name, reason) of every damaged checkpoint passed over to find it"""

    @property
    def first_step(self) -> int:
        """The first step this run trains: 1, or the one after the resumed checkpoint's."""
        return self.saved["step"] + 1 if self.saved is not None else 1


def plan_run(run: Run, checkpoint_dir: str | Path | None = None, resume: bool = False,
             experience_dir: str | Path | None = None, actor_cls: type = PolicyActor) -> RunPlan:
    """Every check of a Run (ValueError or ConfigError naming what is wrong), in one order, and the RunPlan they
    leave; the checkpoint to resume is found in checkpoint_dir and matched against the run's identity here, before
    any worker starts. actor_cls: the honest workers' class (a subclass injects faults in tests)."""
    policy_paths, cfg, offline, config = run.paths, run.runner(), run.offline_peers(), run.config
    if len(policy_paths) < 1:
        raise ValueError("a run needs at least one policy; Run.paths is empty")
    if cfg.checkpoint_every and checkpoint_dir is None:
        raise ValueError("checkpoint_every > 0 needs a checkpoint_dir")
    probe, grpo_cfg = _resolve_probe(run.probe, run.grpo())
    require_importable(probe.name, cfg.backend)   # a notebook cell's probe runs inline only
    offline_specs, offline_records = _load_offline(offline, policy_paths, cfg)
    identity = run_identity(run)
    found, saved, skipped = None, None, []
    if resume and checkpoint_dir is not None:
        found, saved, skipped = checkpoint.load_latest(checkpoint_dir, identity)
    task = shared_task(config.task)
    peer_paths = {peer: str(p) for peer, p in {**policy_paths, **(offline.paths if offline else {})}.items()}
    _check_peers(probe, peer_paths, policy_paths, cfg)
    _check_placement(config, policy_paths)
    workers = tuple(
        WorkerSpec(name, str(path), config.task, grpo_cfg, run.probe, config.threads, run.run_id, peer_paths,
                   attack=cfg.attack if name == cfg.poisoned else "", reverify=cfg.reverify,
                   placement=config.placement_of(name), actor=PoisonedActor if name == cfg.poisoned else actor_cls)
        for name, path in policy_paths.items())
    return RunPlan(runner=cfg, task=task, grpo_cfg=grpo_cfg, probe=probe, offline_specs=offline_specs,
                   offline_records=offline_records, identity=identity, experience_dir=experience_dir,
                   workers=workers, resumed=found, saved=saved, skipped=tuple(skipped))


def _resolve_probe(probe_cfg: ProbeConfig, grpo_cfg: GrpoConfig) -> tuple[Probe, GrpoConfig]:
    """(the registered probe of probe_cfg, grpo_cfg with the probe's group multiplier); a config of another class
    than the probe's, or an aggregation its loss does not implement, is refused."""
    probe = get_probe(probe_cfg.name)
    if type(probe_cfg) is not probe.config:
        raise ConfigError(f"probe {probe.name!r} takes a {probe.config.__name__}, got {type(probe_cfg).__name__}; "
                          f"build it with mrl.core.probes.probe_config({probe.name!r}, ...)")
    probe.check(grpo_cfg)
    if probe.group_multiplier != 1:
        grpo_cfg = dataclasses.replace(grpo_cfg, group_size=grpo_cfg.group_size * probe.group_multiplier)
    return probe, grpo_cfg


def _load_offline(offline: OfflinePeers | None, policy_paths: dict, cfg: RunnerConfig) -> tuple[dict, dict]:
    """OfflinePeers.load() of peers that are not live policies, in a sync run; ({}, {}) without offline peers."""
    if offline is None:
        return {}, {}
    clash = sorted(set(offline.paths) & set(policy_paths))
    if clash or cfg.mode != "sync":
        raise ConfigError(f"offline peers {sorted(offline.paths)} must differ from the live policies "
                          f"{sorted(policy_paths)} and need mode='sync'"
                          + (f"; both hold {clash}" if clash else ""))
    return offline.load()


def _check_peers(probe: Probe, peer_paths: dict, policy_paths: dict, cfg: RunnerConfig) -> None:
    """A teacher probe needs a second policy (live or offline); the poisoned policy must be one of the run's."""
    if probe.teacher and len(peer_paths) < 2:
        raise ConfigError(f"probe {probe.name!r} takes its teacher from another policy of the run; got one policy "
                          f"({sorted(peer_paths)}): pass at least two, live or offline")
    if cfg.poisoned and cfg.poisoned not in policy_paths:
        raise ConfigError(f"RunnerConfig.poisoned = {cfg.poisoned!r} is not a policy of this run; expected '' (none) "
                          f"or one of {sorted(policy_paths)}")


def _check_placement(config: RunConfig, policy_paths: dict) -> None:
    """A placement names policies of the run. A profile's placement is checked against its zoo's or its pretrained
    policies' names when it loads (RunConfig); a config built in Python for given folders names neither, so its
    placement is checked here against the run's policies (a misspelt name would leave a policy on the CPU)."""
    if config.zoo is not None or config.policies:
        return
    unknown = sorted(set(config.placement) - set(policy_paths))
    if unknown:
        raise ConfigError(f"RunConfig.placement names {unknown}, which are not policies of this run "
                          f"{sorted(policy_paths)}")


# --- the entry point -----------------------------------------------------------------------------------------

def run_concurrent(run: Run, *, checkpoint_dir: str | Path | None = None, resume: bool = False,
                   experience_dir: str | Path | None = None, output_dir: str | Path | None = None,
                   progress: bool = True, reporters: tuple | list = (), actor_cls: type = PolicyActor) -> RunRecord:
    """Train the policies of `run` (mrl.runtime.spec.Run: the profile's config, the policies' folders, the probe,
    the RL seed and steps, the peers' variant) together for run.steps steps.

    A GRPO aggregation (grpo.loss_type) the probe's loss does not implement is refused before any worker starts.
    checkpoint_dir: where checkpoints go, every runner.checkpoint_every steps.
    resume: continue from the newest intact checkpoint in checkpoint_dir (damaged ones are skipped and named
    in the events); a checkpoint of another experiment (seed, probe, policies, steps, ...:
    mrl.runtime.spec.run_identity) is refused.
    experience_dir: where the exchange logs its accepted records (mrl.runtime.experience_log.replay reads them);
    None: no log.
    output_dir: save every trained policy at the end as a transformers folder output_dir/<policy>/
    (mrl.runtime.saving.save_policy, its model card from Run.card); None: nothing is saved.
    reporters: objects with log(metrics, step) and close() (mrl.runtime.tracking, e.g. NotebookTable) that receive every
    step's metrics, besides the tracker runner.report_to names.
    actor_cls: the honest workers' class (a subclass injects faults in tests).
    """
    numerics.require()  # the driver records run.json's numerics and hosts inline workers
    plan = plan_run(run, checkpoint_dir, resume, experience_dir, actor_cls)
    cfg = plan.runner
    sinks = [*make_reporters(cfg.report_to, run.run_id, cfg.logging_dir, plan.identity), *reporters]
    begin = time.perf_counter()
    backend = make_backend(cfg.backend, list(plan.workers))  # building the workers has its own deadline (start_timeout)
    startup = time.perf_counter() - begin
    resumed = plan.saved is not None
    record = RunRecord(**plan.saved["record"]) if resumed else RunRecord(workers=list(run.paths))
    reporting = Reporting(sinks, reported=record if resumed else None)
    try:
        session = Session.open(plan, backend, record, reporting, checkpoint_dir)
        loop_start = time.perf_counter()
        clock = async_clock if cfg.mode == "async" else sync_clock
        clock(session, plan.first_step, progress)
        if output_dir is not None:
            session.save_policies(output_dir, run.card())
        reporting.update(record)
        record.counters = dict(session.exchange.counters)
        record.wall_seconds = time.perf_counter() - loop_start
        record.startup_seconds = startup
        return record
    finally:
        record.timeline = list(backend.timeline)
        backend.close()
        reporting.close()


# --- the session: what a run changes, and its phases ----------------------------------------------------------

@dataclass
class Session:
    """A run under way: its plan, the backend's workers, the exchange, the record so far and the reporting of it.
    Each phase of a step is one method, shared by both clocks."""

    plan: RunPlan
    backend: object
    exchange: Exchange | None
    """the run's exchange (None only while `open` asks the workers for their policy specs)"""
    record: RunRecord
    reporting: Reporting
    checkpoint_dir: str | Path | None = None

    @classmethod
    def open(cls, plan: RunPlan, backend, record: RunRecord, reporting: Reporting,
             checkpoint_dir: str | Path | None) -> Session:
        """The session of freshly started workers: the exchange built from their policy specs (and the offline
        peers'), a checkpoint restored, skipped and resumed checkpoints named in the events, and the step-0
        evaluation of a fresh run."""
        at = plan.first_step - 1
        session = cls(plan, backend, None, record, reporting, checkpoint_dir)
        policies = session.phase({w: session.worker(w).policy_spec() for w in backend.workers}, at, "at start-up: ")
        session.exchange = Exchange(
            {**plan.offline_specs, **{name: PolicySpec(**spec) for name, spec in policies.items()}},
            log=None if plan.experience_dir is None else ExperienceLog(plan.experience_dir))
        if plan.saved is not None:
            session.restore()
        for name, reason in plan.skipped:
            warnings.warn(f"skipped damaged checkpoint {name}: {reason}", stacklevel=3)  # run_concurrent's caller
            record.events.append({"step": at, "event": f"skipped damaged checkpoint {name}: {reason}"})
        if plan.resumed is not None:
            record.events.append({"step": at, "event": f"resumed from {plan.resumed.name}"})
        if plan.first_step == 1:
            session.evaluate(0)
        return session

    @property
    def cfg(self) -> RunnerConfig:
        """The run's runner settings (RunPlan.runner)."""
        return self.plan.runner

    @property
    def identity(self) -> dict:
        """The run's identity, written with every checkpoint."""
        return self.plan.identity

    def restore(self) -> None:
        """Load the plan's checkpoint into the workers (within the step deadline; a worker it does not hold had been
        dropped before it, and is dropped again) and into the exchange."""
        saved = self.plan.saved
        for worker in list(self.backend.workers):
            if worker not in saved["workers"]:
                self.backend.drop(worker)
        self.phase({w: self.worker(w).load_state_dict(saved["workers"][w]) for w in self.backend.workers},
                   saved["step"], f"while resuming from {self.plan.resumed.name}: ")
        self.exchange.load_state_dict(saved["exchange"])

    def worker(self, name: str) -> WorkerHandle:
        """The handle of worker `name`: its actor's methods, each returning a Future (mrl.runtime.worker)."""
        return WorkerHandle(self.backend, name)

    def phase(self, calls: dict, step: int, context: str = "") -> dict:
        """One barrier over `calls` ({worker: Future}, submitted) within the step deadline: the results of the workers
        that answered; each failure goes to `lose` (the failure policy), and a barrier that leaves no worker raises."""
        results, failures = self.backend.gather(calls, timeout=self.cfg.step_timeout)
        for name, reason in failures.items():
            self.lose(name, reason, step, context)
        if failures and not self.backend.workers:
            raise WorkerFailed(next(iter(failures)), "no worker is left")
        return results

    def lose(self, name: str, reason: str, step: int, context: str = "") -> None:
        """A worker failed: under failure_policy fail, raise WorkerFailed naming it; under continue, drop it and add an
        event with the first line of the reason."""
        if self.cfg.failure_policy == "fail":
            raise WorkerFailed(name, f"{context}{reason}")
        self.backend.drop(name)
        self.record.events.append({"step": step, "event": f"dropped {name}: {context}{reason.splitlines()[0]}"})

    def prompts(self, step: int) -> list:
        """The RL prompts of `step`, the same for every policy."""
        return step_prompts(self.plan.task, self.plan.grpo_cfg.seed, step, self.plan.grpo_cfg.prompts_per_step)

    def rollout(self, step: int, problems: list) -> dict[str, RolloutResult]:
        """The sync rollout barrier: the exchange clock moves to `step`, every worker samples and scores `problems`;
        their records are published in name order (whatever order they answered in), then the offline peers' of
        this step, and the step is logged. {worker: rollout result}."""
        self.exchange.advance(step)
        rollouts = self.phase({w: self.worker(w).rollout(step, problems) for w in self.backend.workers}, step)
        for name in sorted(rollouts):
            self.exchange.publish_many(rollouts[name].records)
        self.exchange.publish_many(self.plan.offline_records.get(step, []))
        self.exchange.flush(step)
        return rollouts

    def collect(self, name: str, step: int, problems: list) -> tuple[dict, dict]:
        """(collect_for's records of the probe's kinds for learner `name` at `step`, what its step row records of
        them): the peer successes SEE dropped because this learner's verifier rejected them (forged_dropped) and the
        staleness of every record handed over (peer_staleness, JSON {staleness: records})."""
        before = self.exchange.counters["forged"]
        records = collect_for(self.exchange, self.plan.probe.kinds, name, problems, self.plan.task,
                              self.cfg.max_staleness, self.cfg.reverify, step)
        return records, {"forged_dropped": self.exchange.counters["forged"] - before,
                         "peer_staleness": json.dumps(staleness_counts(records, step))}

    def update(self, step: int, problems: list, rollouts: dict) -> None:
        """The sync update barrier: every worker that rolled out updates with the records collected for it (in name
        order); each one that answered appends its step row."""
        calls, received = {}, {}
        for name in sorted(rollouts):
            peer_records, received[name] = self.collect(name, step, problems)
            calls[name] = self.worker(name).update(step, peer_records)
        updates = self.phase(calls, step)
        for name in sorted(updates):
            self.record.steps.append(step_row(name, step, rollouts[name], updates[name], received[name]))

    def is_eval_step(self, step: int) -> bool:
        """Whether `step` ends with a greedy evaluation: every eval_every steps and the last."""
        return step % self.plan.grpo_cfg.eval_every == 0 or step == self.plan.grpo_cfg.steps

    def rollouts_at(self, step: int) -> int:
        """Rollouts each policy has sampled by the end of `step` (the x axis of the evaluations)."""
        return step * self.plan.grpo_cfg.prompts_per_step * self.plan.grpo_cfg.group_size

    def evaluate(self, step: int) -> None:
        """The greedy evaluation barrier; every answer's rows are added in name order."""
        results = self.phase({w: self.worker(w).evaluate(step) for w in self.backend.workers}, step)
        for name in sorted(results):
            self.add_evals(step, results[name])

    def add_evals(self, step: int, rows: list) -> None:
        """One policy's evaluation rows of `step`, each with the rollouts sampled by then."""
        rollouts = self.rollouts_at(step)
        self.record.evals += [{**row, "rollouts": rollouts} for row in rows]

    def end_of_step(self, done: int, evaluate: bool = False) -> None:
        """Every live worker has finished step `done` and its rows are in: records that the next step would find
        stale are dropped, the sync clock's evaluation runs, counters and reporting are brought up to date."""
        self.exchange.drop_older_than(done + 1 - self.cfg.max_staleness)
        if evaluate:
            self.evaluate(done)
        self.record.counters = dict(self.exchange.counters)
        self.reporting.update(self.record)

    def checkpoint_due(self, step: int) -> bool:
        """Whether a checkpoint is written after `step` (every checkpoint_every steps; never without)."""
        return bool(self.cfg.checkpoint_every) and step > 0 and step % self.cfg.checkpoint_every == 0

    def next_checkpoint(self, step: int) -> int | None:
        """The first checkpoint step >= step (a barrier for the async clock), or None without checkpoints."""
        every = self.cfg.checkpoint_every
        return None if not every else ((step + every - 1) // every) * every

    def checkpoint(self, step: int) -> Path:
        """Every live worker's state at `step` (a barrier within the step deadline, failures under the failure
        policy), the exchange and the metrics so far, written atomically into the checkpoint folder with the run's
        identity (mrl.runtime.checkpoint.save)."""
        states = self.phase({w: self.worker(w).state_dict() for w in self.backend.workers}, step,
                            "while checkpointing: ")
        state = {"step": step, "workers": states, "exchange": self.exchange.state_dict(),
                 "record": {k: v for k, v in self.record.__dict__.items()
                            if k not in ("timeline", "startup_seconds", "wall_seconds")}}
        return checkpoint.save(self.checkpoint_dir, step, state, self.identity, keep=self.cfg.keep_checkpoints)

    def save_policies(self, folder: str | Path, card: RunCard) -> None:
        """Every live policy's trained weights (its worker's state dict, within the step deadline) saved as a
        transformers folder folder/<policy>/ by mrl.runtime.saving.save_policy; an event names each folder."""
        step, sources = self.plan.grpo_cfg.steps, {spec.name: spec.policy_path for spec in self.plan.workers}
        states = self.phase({w: self.worker(w).state_dict() for w in self.backend.workers}, step, "while saving: ")
        for name in sorted(states):
            saved = save_policy(states[name]["model"], sources[name], Path(folder) / name, name, list(sources), card)
            self.record.events.append({"step": step, "event": f"saved {name} to {saved}"})


# --- the clocks -----------------------------------------------------------------------------------------------

def sync_clock(session: Session, first_step: int, progress: bool) -> None:
    """Two barriers per step (rollout, update), the peers' records collected in between; then the end of step
    and, on its cadence, a checkpoint."""
    plan = session.plan
    desc = f"{session.cfg.backend} x{len(session.backend.workers)} {plan.probe.name}"
    for step in tqdm(range(first_step, plan.grpo_cfg.steps + 1), desc=desc, disable=not progress, mininterval=5):
        problems = session.prompts(step)
        session.update(step, problems, session.rollout(step, problems))
        session.end_of_step(step, evaluate=session.is_eval_step(step))
        if session.checkpoint_due(step):
            session.checkpoint(step)


def async_clock(session: Session, first_step: int, progress: bool) -> None:
    """Bounded-staleness clock: a worker starts step s once s <= (slowest worker's next step) + staleness.

    A step is two calls: the rollout, whose records are published as soon as it returns, then the update with the
    peers' records of step s's prompts published by then (peers at the same step that finished sampling first, or
    running ahead), within max_staleness of s; the staleness of every record handed over is in the step row. The
    schedule is the order in which calls finish: fixed for the inline backend (one call after another, in dispatch
    order: with fresh prompts every step the first worker of a step never sees a later one's samples of it), so its
    runs are deterministic; with processes it follows the machine's timing, and the dispatch events record it.
    Checkpoint steps are barriers (every worker finishes them before anyone goes on), so a
    checkpoint is a consistent cut; the experience log is written at each of them and at the end.
    `record.events` logs each dispatch's lead over the slowest.
    """
    lanes = _Lanes(session, {w: first_step for w in session.backend.workers})
    bar = tqdm(total=(session.plan.grpo_cfg.steps - first_step + 1) * len(lanes.next_step),
               desc=f"{session.cfg.backend} async", disable=not progress, mininterval=5)
    while lanes.dispatch():
        name, result, failure = session.backend.wait_any(timeout=session.cfg.step_timeout)
        call = lanes.running.pop(name)
        if failure is not None:
            lanes.drop(name, failure)
        elif call == "rollout":
            lanes.rolled_out(name, result)
        else:
            lanes.finished(name, result)
            bar.update(1)
    lanes.close()
    bar.close()


@dataclass
class _Lanes:
    """The async clock's state, one lane per worker: its next step, its call in flight, its current step's
    rollout and what it received, and the step rows waiting for the slowest worker to finish their step."""

    session: Session
    next_step: dict
    """worker -> the step it works on next (a dropped worker leaves)"""
    running: dict = field(default_factory=dict)
    """worker -> its call in flight, rollout or finish"""
    rollout_of: dict = field(default_factory=dict)
    """worker -> its current step's rollout result"""
    received: dict = field(default_factory=dict)
    """(step, worker) -> what its step row records of the peers' records (Session.collect)"""
    pending_rows: dict = field(default_factory=dict)
    """(step, worker) -> its step row, appended to the record once every live worker has finished the step"""

    def dispatch(self) -> bool:
        """Start the rollout of every idle worker within the staleness bound (and not past the next checkpoint
        barrier); False when no call is left in flight (every live worker is done)."""
        session = self.session
        live = [w for w in session.backend.workers if w in self.next_step]
        if not live:
            return False
        slowest = min(self.next_step[w] for w in live)
        barrier = session.next_checkpoint(slowest)
        for w in live:
            s = self.next_step[w]
            if w in self.running or s > session.plan.grpo_cfg.steps or s > slowest + session.cfg.staleness \
                    or (barrier and s > barrier):
                continue
            session.exchange.advance(max(session.exchange.clock, s))
            session.worker(w).rollout(s, session.prompts(s))
            self.running[w] = "rollout"
            session.record.events.append({"step": s, "event": f"dispatch {w}", "lead": s - slowest})
        return bool(self.running)

    def drop(self, name: str, failure: str) -> None:
        """A call of `name` failed: the failure policy raises, or the worker and its lane are dropped."""
        self.session.lose(name, failure, self.session.exchange.clock)
        self.next_step.pop(name, None)
        self.rollout_of.pop(name, None)

    def rolled_out(self, name: str, result: RolloutResult) -> None:
        """`name`'s rollout returned: publish its records, collect its peers' and start its update (with the
        evaluation on the evaluation steps)."""
        session, s = self.session, self.next_step[name]
        session.exchange.publish_many(result.records)
        self.rollout_of[name] = result
        peer_records, self.received[(s, name)] = session.collect(name, s, session.prompts(s))
        session.worker(name).finish(s, peer_records, session.is_eval_step(s))
        self.running[name] = "finish"

    def finished(self, name: str, result: FinishResult) -> None:
        """`name`'s update returned: its row waits for the step's slowest worker, its evaluation rows are added;
        the steps every live worker has finished end (rows appended in order), and a checkpoint step that every
        worker has reached, with nothing in flight, is logged and checkpointed."""
        session, s = self.session, self.next_step[name]
        self.pending_rows[(s, name)] = step_row(name, s, self.rollout_of.pop(name), result.update,
                                                self.received.pop((s, name)))
        if result.evals:  # None when the step is no evaluation step
            session.add_evals(s, result.evals)
        self.next_step[name] = s + 1
        done = min(self.next_step[w] for w in self.next_step) - 1  # every live worker has finished this step
        for key in sorted(k for k in self.pending_rows if k[0] <= done):
            session.record.steps.append(self.pending_rows.pop(key))
        session.end_of_step(done)
        at_barrier = not self.running and all(self.next_step[w] == done + 1 for w in self.next_step)
        if session.checkpoint_due(done) and at_barrier:
            session.exchange.flush(done)
            session.checkpoint(done)
            self.leave_dropped()

    def leave_dropped(self) -> None:
        """The lanes of workers the backend dropped outside this clock's calls (in a checkpoint's barrier, under
        failure_policy continue) leave, as `drop` does: a lane left behind would hold the count of finished steps,
        and so every later checkpoint, at its step."""
        for name in [w for w in self.next_step if w not in self.session.backend.workers]:
            self.next_step.pop(name)
            self.rollout_of.pop(name, None)

    def close(self) -> None:
        """The run is over: the last records are logged, the rows still waiting appended, evaluations sorted."""
        self.session.exchange.flush(self.session.exchange.clock)
        for key in sorted(self.pending_rows):
            self.session.record.steps.append(self.pending_rows.pop(key))
        self.session.record.evals.sort(key=lambda row: (row["step"], row["policy"]))


# --- collection and rows --------------------------------------------------------------------------------------

def collect_for(exchange: Exchange, kinds, receiver: str, problems, task, max_staleness: int | None,
                reverify: bool = True, at: int | None = None) -> dict:
    """{kind: {prompt_id: [peer records]}} for one learner at step `at` (default: the exchange clock); successes must
    pass the learner's verifier (every claimed one passes when reverify is off: the poisoned-peer ablation)."""
    by_pid = {p.pid: p for p in problems}

    def verify(success) -> bool:
        return success.prompt_id in by_pid and (not reverify
                                                or task.verify(success.completion, by_pid[success.prompt_id]) > 0)

    pids = list(by_pid)
    return {kind: exchange.collect(receiver, kind, pids, max_staleness, verify if kind == "success" else None, at)
            for kind in kinds}


def staleness_counts(peer_records: dict, step: int) -> dict[int, int]:
    """{staleness: records} over every record handed to a learner at `step`; staleness = step - the record's policy
    version (1: a peer's sample of this same step; 2 or more: older; 0 or less: from a peer running ahead)."""
    counts: dict[int, int] = {}
    for by_prompt in peer_records.values():
        for records in by_prompt.values():
            for r in records:
                counts[step - r.version] = counts.get(step - r.version, 0) + 1
    return dict(sorted(counts.items()))


def step_row(name: str, step: int, rollout: RolloutResult, update: UpdateResult, received: dict) -> dict:
    """One policy's row of RunRecord.steps: its rollout's reward, completion tokens (those sampled this step, stop
    ids included), time and, under a bf16 sampler, the sampler/trainer mismatch (mrl.core.mismatch), its update's loss,
    gradient norm, active sequences, time and probe statistics, and what it received from its peers
    (Session.collect)."""
    return {"policy": name, "step": step, "reward": rollout.reward, "loss": update.loss,
            "grad_norm": update.grad_norm, "active_sequences": update.active_sequences,
            "completion_tokens": rollout.tokens,
            "rollout_seconds": rollout.seconds, "update_seconds": update.seconds, **received,
            **rollout.sampler, **update.probe}

"""The runner: n >= 1 policies trained together on one MWRA backend, sharing experience through SEE.

One path for every experiment: independent GRPO is this runner with the `grpo` probe (n = 1, or n > 1
policies that publish but read nothing), the probes and HACPO are the same loop with another probe.

Each step: the exchange clock advances; every worker samples and scores the step's prompts
(`rollout`, a barrier); their records are published (malformed ones are rejected and counted);
for each learner the runner collects the peers' records of the kinds its probe declares (successes
re-verified with the learner's verifier, stale records dropped); every worker updates with its
probe's loss (`update`, a barrier).
Greedy evaluation every `eval_every` steps. Checkpoints every `checkpoint_every` steps hold every
policy's weights and optimizer state, the exchange (clock, counters, records) and all metrics so
far, written atomically (a temporary folder renamed into place); `resume=True` continues from
the latest complete one and ends with the metrics of an uninterrupted run.
"""
from __future__ import annotations

import dataclasses
import json
import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from tqdm.auto import tqdm

from mrl import checkpoint, numerics
from mrl.actor import ActorConfig, PolicyActor
from mrl.config import ConfigError, GrpoConfig, PlacementConfig, RunnerConfig, TaskConfig
from mrl.mwra import WorkerFailed, WorkerSpec, make_backend, plan_threads, raise_first_failure
from mrl.poison import PoisonedActor
from mrl.probes import ProbeConfig, get_probe
from mrl.see import Exchange, PolicySpec, read_log_index, replay
from mrl.seeding import step_prompts
from mrl.tasks import make_task
from mrl.tracking import Reporting, make_reporters


@dataclass
class RunRecord:
    """Everything a run produced."""

    steps: list = field(default_factory=list)
    evals: list = field(default_factory=list)
    events: list = field(default_factory=list)
    timeline: list = field(default_factory=list)
    startup_seconds: float = 0.0
    """backend start-up (processes spawned, Ray initialised, actors built) before the first step"""
    wall_seconds: float = 0.0
    """the training loop, from the first step to the last"""
    counters: dict = field(default_factory=dict)
    workers: list = field(default_factory=list)


@dataclass(frozen=True)
class OfflinePeers:
    """Peers that do not train in this run (GRAFT's offline variant): at each step s, their records of step s in a
    stored SEE log (`mrl.see.replay`, every record re-validated) enter the exchange as if they had just been
    published, beside the live policies' own."""

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


latest_checkpoint = checkpoint.latest
"""the newest finished checkpoint folder of a run (mrl.checkpoint.latest)"""


def save_checkpoint(folder: str | Path, step: int, backend, exchange: Exchange, record: RunRecord, identity: dict,
                    cfg: RunnerConfig) -> Path:
    """Every live worker's state (within the step deadline, failures handled by the failure policy), the
    exchange and the metrics so far, written atomically with the run's identity."""
    states = _phase(backend, {w: ("state_dict", ()) for w in backend.workers}, step, record, cfg,
                    "while checkpointing: ")
    state = {"step": step, "workers": states, "exchange": exchange.state_dict(),
             "record": {k: v for k, v in record.__dict__.items()
                        if k not in ("timeline", "startup_seconds", "wall_seconds")}}
    return checkpoint.save(folder, step, state, identity)


def run_concurrent(policy_paths: dict[str, str], task_cfg: TaskConfig, grpo_cfg: GrpoConfig,
                   cfg: RunnerConfig, checkpoint_dir: str | Path | None = None, resume: bool = False,
                   threads: int | None = 1, progress: bool = True, run_id: str = "run",
                   actor_cls: type = PolicyActor, probe_cfg: ProbeConfig | None = None,
                   experience_dir: str | Path | None = None, reporters: list | None = None,
                   offline: OfflinePeers | None = None,
                   placement: dict[str, PlacementConfig] | None = None) -> RunRecord:
    """Train the policies at `policy_paths` ({name: checkpoint folder}, one or more) together for grpo_cfg.steps steps.

    probe_cfg: the sharing probe and its knobs (default grpo: independent policies that still publish experience);
    a GRPO aggregation (grpo_cfg.loss_type) the probe's loss does not implement is refused here.
    threads: torch threads per worker (1 keeps runs bit-reproducible); None plans them with
    `mwra.plan_threads` from each policy's declared cost (its parameter count) over this machine's cores.
    actor_cls: the worker class (a PolicyActor subclass, e.g. one that injects faults in tests).
    experience_dir: where the exchange's accepted records are logged, one atomic write per step (sync) or per
    checkpoint (async), readable with `mrl.see.replay`; None: `checkpoint_dir/experience` when checkpointing,
    else no log.
    resume: continue from the newest intact checkpoint in checkpoint_dir (damaged ones are skipped and named
    in the events); a checkpoint of another experiment (seed, probe, policies, steps, ...) is refused.
    reporters: objects with log(metrics, step) and close() (mrl.tracking, e.g. NotebookTable) that receive every
    step's metrics, besides the tracker cfg.report_to names.
    offline: peers replayed from a stored experience log, step by step (sync mode only; the log of a sync run with
    the same task, seed and prompts per step, or its records name prompts this run never draws).
    placement: {policy: PlacementConfig} (device, dtype, checkpointing, micro-batch, GPU share); a policy not
    named takes the defaults (this CPU).
    """
    numerics.require()  # the driver records run.json's numerics and hosts inline workers
    if len(policy_paths) < 1:
        raise ValueError("a run needs at least one policy; policy_paths is empty")
    if cfg.checkpoint_every and checkpoint_dir is None:
        raise ValueError("checkpoint_every > 0 needs a checkpoint_dir")
    probe_cfg = probe_cfg or ProbeConfig()
    probe = get_probe(probe_cfg.name)
    if type(probe_cfg) is not probe.config:
        raise ConfigError(f"probe {probe.name!r} takes a {probe.config.__name__}, got {type(probe_cfg).__name__}; "
                          f"build it with mrl.probes.probe_config({probe.name!r}, ...)")
    probe.check(grpo_cfg)
    if probe.group_multiplier != 1:
        grpo_cfg = dataclasses.replace(grpo_cfg, group_size=grpo_cfg.group_size * probe.group_multiplier)
    offline_specs, offline_records = {}, {}
    if offline is not None:
        clash = sorted(set(offline.paths) & set(policy_paths))
        if clash or cfg.mode != "sync":
            raise ConfigError(f"offline peers {sorted(offline.paths)} must differ from the live policies "
                              f"{sorted(policy_paths)} and need mode='sync'"
                              + (f"; both hold {clash}" if clash else ""))
        offline_specs, offline_records = offline.load()
    unknown = sorted(set(placement or {}) - set(policy_paths))
    if unknown:
        raise ConfigError(f"placement names {unknown}, which are not policies of this run {sorted(policy_paths)}")
    placement = {name: (placement or {}).get(name, PlacementConfig()) for name in policy_paths}
    identity = checkpoint.run_identity(policy_paths, task_cfg, grpo_cfg, probe_cfg, cfg, run_id, offline, placement)
    found, state, skipped = None, None, []
    if resume and checkpoint_dir is not None:
        found, state, skipped = checkpoint.load_latest(checkpoint_dir, identity)  # before any worker starts
    if experience_dir is None and checkpoint_dir is not None:
        experience_dir = Path(checkpoint_dir) / "experience"
    task = make_task(task_cfg)
    if threads is None:
        costs = {name: json.loads((Path(path) / "zoo.json").read_text())["n_params"]
                 for name, path in policy_paths.items()}
        plan = plan_threads(costs, os.cpu_count() or 1)
    else:
        plan = {name: threads for name in policy_paths}
    peer_paths = {peer: str(p) for peer, p in {**policy_paths, **(offline.paths if offline else {})}.items()}
    if probe.teacher and len(peer_paths) < 2:
        raise ConfigError(f"probe {probe.name!r} takes its teacher from another policy of the run; got one policy "
                          f"({sorted(peer_paths)}): pass at least two, live or offline")
    if cfg.poisoned and cfg.poisoned not in policy_paths:
        raise ConfigError(f"RunnerConfig.poisoned = {cfg.poisoned!r} is not a policy of this run; expected '' (none) "
                          f"or one of {sorted(policy_paths)}")
    specs = [WorkerSpec(name, PoisonedActor if name == cfg.poisoned else actor_cls,
                        ActorConfig(name, str(path), task_cfg, grpo_cfg, probe_cfg, plan[name], run_id, peer_paths,
                                    attack=cfg.attack if name == cfg.poisoned else "", reverify=cfg.reverify,
                                    placement=placement[name]),
                        num_cpus=plan[name], num_gpus=placement[name].gpus)
             for name, path in policy_paths.items()]
    sinks = [*make_reporters(cfg.report_to, run_id, cfg.logging_dir, identity), *(reporters or [])]
    begin = time.perf_counter()
    backend = make_backend(cfg.backend, specs)  # building the workers has its own deadline (start_timeout)
    startup = time.perf_counter() - begin
    record = RunRecord(**state["record"]) if state is not None else RunRecord(workers=list(policy_paths))
    first_step = state["step"] + 1 if state is not None else 1
    reporting = Reporting(sinks, reported=record if state is not None else None)
    try:
        policies = _phase(backend, {w: ("policy_spec", ()) for w in backend.workers}, first_step - 1, record, cfg,
                          "at start-up: ")
        exchange = Exchange({**offline_specs, **{name: PolicySpec(**spec) for name, spec in policies.items()}},
                            log_dir=experience_dir)
        if state is not None:
            _restore(backend, exchange, state, found.name, record, cfg)
        for name, reason in skipped:
            warnings.warn(f"skipped damaged checkpoint {name}: {reason}", stacklevel=2)
            record.events.append({"step": first_step - 1, "event": f"skipped damaged checkpoint {name}: {reason}"})
        if found is not None:
            record.events.append({"step": first_step - 1, "event": f"resumed from {found.name}"})
        if first_step == 1:
            _evaluate(backend, 0, record, grpo_cfg, cfg)
        loop_start = time.perf_counter()
        if cfg.mode == "async":
            _run_async(backend, task, grpo_cfg, cfg, exchange, record, first_step, checkpoint_dir, progress, probe,
                       identity, reporting)
        else:
            _run_sync(backend, task, grpo_cfg, cfg, exchange, record, first_step, checkpoint_dir, progress, probe,
                      identity, reporting, offline_records)
        reporting.update(record)
        record.counters = dict(exchange.counters)
        record.wall_seconds = time.perf_counter() - loop_start
        record.startup_seconds = startup
        return record
    finally:
        record.timeline = list(backend.timeline)
        backend.close()
        reporting.close()


def _restore(backend, exchange: Exchange, state: dict, name: str, record: RunRecord, cfg: RunnerConfig) -> None:
    """Load a checkpoint's state into the workers (within the step deadline) and into the exchange."""
    for worker in list(backend.workers):
        if worker not in state["workers"]:
            backend.drop(worker)  # it had been dropped before the checkpoint
    _phase(backend, {w: ("load_state_dict", (state["workers"][w],)) for w in backend.workers}, state["step"], record,
           cfg, f"while resuming from {name}: ")
    exchange.load_state_dict(state["exchange"])


def _run_sync(backend, task, grpo_cfg: GrpoConfig, cfg: RunnerConfig, exchange: Exchange, record: RunRecord,
              first_step: int, checkpoint_dir, progress: bool, probe, identity: dict, reporting: Reporting,
              offline_records: dict | None = None) -> None:
    """Two barriers per step (rollout, update); the peers' records are collected in between and logged.
    offline_records: {step: [records]} of offline peers, published with the step's own."""
    steps = range(first_step, grpo_cfg.steps + 1)
    for step in tqdm(steps, desc=f"{cfg.backend} x{len(backend.workers)} {probe.name}", disable=not progress,
                     mininterval=5):
        exchange.advance(step)
        problems = step_prompts(task, grpo_cfg.seed, step, grpo_cfg.prompts_per_step)
        rollouts = _phase(backend, {w: ("rollout", (step, problems)) for w in backend.workers}, step, record, cfg)
        for name in sorted(rollouts):  # a fixed order, whatever order the workers answered in
            exchange.publish_many(rollouts[name]["records"])
        exchange.publish_many((offline_records or {}).get(step, []))
        exchange.flush(step)
        calls, received = {}, {}
        for w in sorted(rollouts):
            peer_records, received[w] = collect_counted(exchange, probe.kinds, w, problems, task, cfg, step)
            calls[w] = ("update", (step, peer_records))
        updates = _phase(backend, calls, step, record, cfg)
        for name in sorted(updates):
            result = updates[name]
            record.steps.append(step_row(name, step, rollouts[name], result, received[name]))
        exchange.drop_older_than(step + 1 - cfg.max_staleness)  # what the next step would find stale
        if step % grpo_cfg.eval_every == 0 or step == grpo_cfg.steps:
            _evaluate(backend, step, record, grpo_cfg, cfg)
        record.counters = dict(exchange.counters)
        reporting.update(record)
        if cfg.checkpoint_every and step % cfg.checkpoint_every == 0:
            save_checkpoint(checkpoint_dir, step, backend, exchange, record, identity, cfg)


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


def step_row(name: str, step: int, rollout: dict, update: dict, received: dict) -> dict:
    """One policy's row of RunRecord.steps: its rollout's reward and time, its update's loss, gradient norm,
    active sequences, time and probe statistics, and what it received from its peers (collect_counted)."""
    return {"policy": name, "step": step, "reward": rollout["reward"], "loss": update["loss"],
            "grad_norm": update["grad_norm"], "active_sequences": update["active_sequences"],
            "rollout_seconds": rollout["seconds"], "update_seconds": update["seconds"], **received,
            **update.get("probe", {})}


def collect_counted(exchange: Exchange, kinds, receiver: str, problems, task, cfg: RunnerConfig,
                    step: int) -> tuple[dict, dict]:
    """(collect_for's records for `receiver` at `step`, what its step row records of them): the peer successes SEE
    dropped because this learner's verifier rejected them (forged_dropped) and the staleness of every record handed
    over (peer_staleness, JSON {staleness: records})."""
    before = exchange.counters["forged"]
    records = collect_for(exchange, kinds, receiver, problems, task, cfg.max_staleness, cfg.reverify, step)
    return records, {"forged_dropped": exchange.counters["forged"] - before,
                     "peer_staleness": json.dumps(staleness_counts(records, step))}


def _run_async(backend, task, grpo_cfg: GrpoConfig, cfg: RunnerConfig, exchange: Exchange, record: RunRecord,
               first_step: int, checkpoint_dir, progress: bool, probe, identity: dict, reporting: Reporting) -> None:
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
    next_step = {w: first_step for w in backend.workers}
    running: dict[str, str] = {}  # worker -> the call in flight: "rollout" or "finish"
    rollout_of: dict[str, dict] = {}  # worker -> its current step's rollout result
    bar = tqdm(total=(grpo_cfg.steps - first_step + 1) * len(next_step), desc=f"{cfg.backend} async",
               disable=not progress, mininterval=5)
    pending_rows: dict[tuple[int, str], dict] = {}
    received: dict[tuple[int, str], dict] = {}
    while True:
        live = [w for w in backend.workers if w in next_step]
        if not live:
            break
        slowest = min(next_step[w] for w in live)
        barrier = _next_checkpoint(slowest, cfg.checkpoint_every)
        for w in live:
            s = next_step[w]
            if w in running or s > grpo_cfg.steps or s > slowest + cfg.staleness or (barrier and s > barrier):
                continue
            exchange.advance(max(exchange.clock, s))
            backend.submit(w, "rollout", (s, step_prompts(task, grpo_cfg.seed, s, grpo_cfg.prompts_per_step)))
            running[w] = "rollout"
            record.events.append({"step": s, "event": f"dispatch {w}", "lead": s - slowest})
        if not running:
            break
        name, result, failure = backend.wait_any(timeout=cfg.step_timeout)
        phase = running.pop(name)
        if failure is not None:
            if cfg.failure_policy == "fail":
                raise WorkerFailed(name, failure)
            backend.drop(name)
            next_step.pop(name, None)
            rollout_of.pop(name, None)
            record.events.append({"step": exchange.clock, "event": f"dropped {name}: {failure.splitlines()[0]}"})
            continue
        s = next_step[name]
        if phase == "rollout":
            exchange.publish_many(result["records"])
            rollout_of[name] = result
            problems = step_prompts(task, grpo_cfg.seed, s, grpo_cfg.prompts_per_step)
            peer_records, received[(s, name)] = collect_counted(exchange, probe.kinds, name, problems, task, cfg, s)
            evaluate = s % grpo_cfg.eval_every == 0 or s == grpo_cfg.steps
            backend.submit(name, "finish", (s, peer_records, evaluate))
            running[name] = "finish"
            continue
        rollout = rollout_of.pop(name)
        pending_rows[(s, name)] = step_row(name, s, rollout, result["update"], received.pop((s, name)))
        if result["evals"]:
            rollouts = s * grpo_cfg.prompts_per_step * grpo_cfg.group_size
            record.evals += [{**row, "rollouts": rollouts} for row in result["evals"]]
        next_step[name] = s + 1
        bar.update(1)
        done = min(next_step[w] for w in next_step) - 1  # every live worker has finished this step
        exchange.drop_older_than(done + 1 - cfg.max_staleness)  # what the slowest worker's next step finds stale
        for key in sorted(k for k in pending_rows if k[0] <= done):
            record.steps.append(pending_rows.pop(key))
        record.counters = dict(exchange.counters)
        reporting.update(record)
        if cfg.checkpoint_every and done and done % cfg.checkpoint_every == 0 and not running \
                and all(next_step[w] == done + 1 for w in next_step):
            exchange.flush(done)
            save_checkpoint(checkpoint_dir, done, backend, exchange, record, identity, cfg)
    exchange.flush(exchange.clock)
    for key in sorted(pending_rows):
        record.steps.append(pending_rows.pop(key))
    record.evals.sort(key=lambda row: (row["step"], row["policy"]))
    bar.close()


def _next_checkpoint(step: int, every: int) -> int | None:
    """The first checkpoint step >= step (a barrier for the async clock), or None without checkpoints."""
    return None if not every else ((step + every - 1) // every) * every


def _phase(backend, calls: dict, step: int, record: RunRecord, cfg: RunnerConfig, context: str = "") -> dict:
    """One barrier with the step deadline: results of the workers that answered; failures handled by the
    failure policy (fail: raise WorkerFailed; continue: drop the worker, an event names it)."""
    results, failures = backend.call(calls, timeout=cfg.step_timeout)
    if failures:
        if cfg.failure_policy == "fail":
            raise_first_failure(failures, context)
        for name, reason in failures.items():
            backend.drop(name)
            record.events.append({"step": step, "event": f"dropped {name}: {context}{reason.splitlines()[0]}"})
        if not backend.workers:
            raise WorkerFailed(next(iter(failures)), "no worker is left")
    return results


def _evaluate(backend, step: int, record: RunRecord, grpo_cfg: GrpoConfig, cfg: RunnerConfig) -> None:
    results = _phase(backend, {w: ("evaluate", (step,)) for w in backend.workers}, step, record, cfg)
    rollouts = step * grpo_cfg.prompts_per_step * grpo_cfg.group_size
    for name in sorted(results):
        record.evals += [{**row, "rollouts": rollouts} for row in results[name]]

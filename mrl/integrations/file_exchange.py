"""The exchange between trainers that run as separate processes (docs/trl.md, The exchange between trainers).

Each policy writes the records of a step into its own folder, `root/<policy>/`, as one step of SEE's experience log
(atomic Parquet files and a checksummed manifest written last), and reads its peers' folders for the same step,
waiting for each up to a deadline; every record read is validated again by a fresh SEE Exchange, as in the runner.
A peer that is silent, killed mid-step, torn, altered or another run's is named, and the failure policy raises
WorkerFailed or drops it. Why a folder and not a Ray actor, and each fault: docs/trl.md.

Resuming: each policy's RUN_FILE lists the steps its trainer checkpointed. A resumed run continues from the newest
step every trainer checkpointed (`common_checkpoint`); each trainer moves its own steps after it aside (`resume`, into
`<policy>/aside-<generation>/`, nothing deleted) and enters the run's next generation (or the one a peer already
entered), and a trainer reads a peer's step after the resume only once the peer has resumed into its generation.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from mrl.core.config import FAILURE_POLICIES
from mrl.core.see import Exchange, Limits, PolicySpec
from mrl.core.validation import ConfigError
from mrl.runtime.experience_log import (LOG_FILE, LOG_MANIFEST, ExperienceLogError, last_logged_step, manifest_name,
                                        read_log_step, read_manifest, write_log_step)
from mrl.runtime.mwra import WorkerFailed


@dataclass
class FileExchange:
    """One policy's end of the shared folder.

    root: the folder every trainer of the run shares; policy: this trainer's policy id; peers: the other policies'
    ids; spec: this policy's PolicySpec (what its records are validated against; MRLGRPOTrainer sets its own);
    deadline: seconds to wait for a peer's step; failure_policy: "fail" raises WorkerFailed naming a peer that
    published nothing in time or a step that is refused, "continue" goes on without it; run_id: this run's name,
    written beside the policy's steps (its folder's RUN_FILE), so a peer folder another run wrote is refused ('' for
    none: no peer folder's name is checked). A resumed end (`resume`) has its generation (how many times the run
    resumed) and the step it resumed after."""

    root: Path
    policy: str
    peers: tuple[str, ...]
    spec: PolicySpec | None = None
    deadline: float = 60.0
    failure_policy: str = "fail"
    limits: Limits = field(default_factory=Limits)
    poll_seconds: float = 0.05
    run_id: str = ""

    def __post_init__(self):
        self.root = Path(self.root)
        self.dropped: set[str] = set()   # peers missed at a deadline under "continue": never waited for again
        self.published = False
        self.generation, self.resumed_after, self.round_completed = 0, None, False
        if self.failure_policy not in FAILURE_POLICIES:
            raise ValueError(f"FileExchange.failure_policy = {self.failure_policy!r}; expected one of "
                             f"{list(FAILURE_POLICIES)}")
        if self.policy in self.peers:
            raise ValueError(f"FileExchange: policy {self.policy!r} is listed among its own peers {list(self.peers)}")

    def folder(self, policy: str) -> Path:
        return self.root / policy

    def publish(self, step: int, records: list) -> None:
        """Write this policy's records of `step` (its folder's next log step; steps only increase)."""
        folder = self.folder(self.policy)
        if not self.published and self.resumed_after is None and last_logged_step(folder, step + 1) is not None:
            raise ConfigError(f"exchange folder {folder} already holds steps of an earlier run; its peers would read "
                              f"them as this run's: give every run a fresh exchange folder, or resume this one "
                              f"(trl_train --resume)")
        if not self.published:   # a fresh run's file is written whole; a resumed one keeps its checkpoints
            update_run_file(folder, keep=self.resumed_after is not None, run_id=self.run_id,
                            generation=self.generation)
        self.published = True
        write_log_step(folder, step, records, {self.policy: self.spec}, previous=last_logged_step(folder, step),
                       clock=step, limits=self.limits)

    def gather(self, step: int, own: list) -> tuple[Exchange, list[str]]:
        """(an Exchange at clock `step` holding this policy's records `own` and every peer's records of `step`,
        the peers whose step is not read). Each peer's step is read whole once its manifest is on disk; a peer
        missing at the deadline (named with the files of a step it was killed writing), or whose step is refused
        (`read_peer_step`), raises WorkerFailed under failure_policy "fail", and under "continue" is dropped: later
        steps do not wait for it (as the runner drops a dead worker)."""
        exchange = Exchange(policies={self.policy: self.spec}, limits=self.limits)
        exchange.advance(step)
        exchange.publish_many(own)
        missing, waiting, start = [], [p for p in self.peers if p not in self.dropped], time.monotonic()
        while waiting:
            for peer in list(waiting):
                try:
                    records = self.read_peer_step(peer, step)
                except ExperienceLogError as err:
                    waiting.remove(peer)
                    missing.append(peer)
                    self.refuse(peer, f"its step {step} is refused: {err}")
                    continue
                if records is not None:
                    exchange.policies.update(peer_specs(self.folder(peer), step))
                    exchange.publish_many(records)
                    waiting.remove(peer)
            if waiting and time.monotonic() - start > self.deadline:
                for peer in sorted(waiting):
                    torn = torn_files(self.folder(peer), step)
                    self.refuse(peer, f"published no records for step {step} within the deadline of "
                                      f"{self.deadline:g} s (folder {self.root})" +
                                (f"; it left {torn} without their manifest (killed while writing the step)"
                                 if torn else ""))
                missing += sorted(waiting)
                break
            if waiting:
                time.sleep(self.poll_seconds)
        if self.resumed_after is not None and not missing and not self.round_completed:
            update_run_file(self.folder(self.policy), round_completed_a_step=True)   # a new crash needs a new round
            self.round_completed = True
        return exchange, sorted(missing)

    def read_peer_step(self, peer: str, step: int) -> list | None:
        """A peer's records of `step` (None while its manifest is not on disk, or, after a resume, while the peer
        has not resumed too), from a folder this run wrote: ExperienceLogError when the step fails its checks, the
        folder's RUN_FILE names another run, or the peer resumed more often than this trainer."""
        folder = self.folder(peer)
        if not (folder / manifest_name(step)).exists():
            return None
        written = read_run_file(folder)
        if self.run_id and written.get("run_id") != self.run_id:
            raise ExperienceLogError(f"{folder} was written by run {written.get('run_id')!r}, not by this run "
                                     f"{self.run_id!r} (a folder left by another run: give every run a fresh "
                                     f"exchange folder)")
        peer_generation = written.get("generation", 0)
        if self.resumed_after is not None and step > self.resumed_after and peer_generation < self.generation:
            return None   # the peer's step from before the resume: it is moved aside when the peer resumes
        if peer_generation > self.generation:
            raise ExperienceLogError(f"{folder} was resumed into generation {peer_generation}, this trainer is in "
                                     f"{self.generation}: a peer was restarted alone; resume every trainer of the run "
                                     f"together (trl_train --resume)")
        return read_log_step(folder, step, self.limits)

    def record_checkpoint(self, step: int) -> None:
        """Note in this policy's RUN_FILE that its trainer checkpointed after `step` (a resume starts from a step
        every trainer checkpointed)."""
        folder = self.folder(self.policy)
        steps = read_run_file(folder).get("checkpoints", [])
        update_run_file(folder, run_id=self.run_id, generation=self.generation,
                        checkpoints=sorted({*steps, int(step)}))

    def checkpointed(self, step: int) -> bool:
        """Whether this trainer and every peer noted a checkpoint after `step` in their RUN_FILEs."""
        return all(step in read_run_file(self.folder(policy)).get("checkpoints", [])
                   for policy in (self.policy, *self.peers))

    def common_checkpoint(self, own: list[int]) -> int | None:
        """The newest of this trainer's intact checkpoints' steps `own` that this trainer and every peer noted in
        their RUN_FILEs (None: none). A checkpoint saved but not yet noted (its trainer killed in between) is not
        one: its peers may not have reached it."""
        common = [step for step in own if self.checkpointed(step)]
        return max(common) if common else None

    def resume(self, step: int) -> Path | None:
        """Continue this policy's end of the exchange after `step`: its log steps after it are moved aside (not
        deleted) into `<policy>/aside-<generation>/`, and peers' steps after `step` are read only from peers in this
        trainer's generation. The generation is the one a peer already resumed into when it is ahead of this
        trainer's, else this trainer's own when its round never completed a step (its peers may be joining it),
        else its next: trainers restarted together meet in one generation whichever resumes first, and restarting
        every trainer again after a round that failed before its first step meets in that round. Returns the aside
        folder (None: nothing moved)."""
        folder = self.folder(self.policy)
        written = read_run_file(folder)
        own, ahead = written.get("generation", 0), max(
            (read_run_file(self.folder(peer)).get("generation", 0) for peer in self.peers), default=0)
        stalled = own > 0 and not written.get("round_completed_a_step", False)   # its peers may be joining it
        self.generation = ahead if ahead > own else own if stalled else own + 1
        self.resumed_after = step
        later = [p for p in folder.glob("*step-*") if (n := logged_step(p.name)) is not None and n > step]
        aside = folder / f"aside-{self.generation}"
        if later:
            aside.mkdir(exist_ok=True)
            for path in sorted(later, key=lambda p: p.suffix != ".json"):   # manifests first: no step looks whole
                os.replace(path, aside / path.name)
        update_run_file(folder, run_id=self.run_id, generation=self.generation, resumed_after=step,
                        round_completed_a_step=False,
                        checkpoints=[s for s in written.get("checkpoints", []) if s <= step])
        return aside if later else None

    def refuse(self, peer: str, reason: str) -> None:
        """A peer whose step is not read: WorkerFailed naming it under "fail"; dropped (never waited for again)
        under "continue"."""
        if self.failure_policy == "fail":
            raise WorkerFailed(peer, reason)
        self.dropped.add(peer)


RUN_FILE = "run.json"
"""beside a policy's steps: {"run_id": the run that writes them, "pid": its process, "generation": the run's resume
round it is in, "resumed_after": the step it last resumed after, "round_completed_a_step": whether a step after it
was read from every peer, "checkpoints": the steps its trainer checkpointed after}"""


def update_run_file(folder: Path, keep: bool = True, **fields) -> None:
    """Set `fields` (and this process's pid) in `folder`'s RUN_FILE, keeping its other fields (keep=False: none of
    them); written whole, a temporary file renamed into place."""
    folder.mkdir(parents=True, exist_ok=True)
    temporary = folder / f".{RUN_FILE}.{os.getpid()}.tmp"
    temporary.write_text(json.dumps({**(read_run_file(folder) if keep else {}), **fields, "pid": os.getpid()}))
    os.replace(temporary, folder / RUN_FILE)


def read_run_file(folder: Path) -> dict:
    """What `folder`'s RUN_FILE says ({}: none readable, a folder of something else)."""
    try:
        written = json.loads((folder / RUN_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return written if isinstance(written, dict) else {}


def logged_step(name: str) -> int | None:
    """The step of an experience-log file's name (a manifest, a data file or their temporaries), else None."""
    name = name.removeprefix(".").removesuffix(".tmp")
    match = LOG_FILE.fullmatch(name) or LOG_MANIFEST.fullmatch(name)
    return int(match.group(1)) if match else None


def torn_files(folder: Path, step: int) -> list[str]:
    """The files of `step` in a peer's folder without its manifest: what a writer killed in the middle of the step
    left (its data files, or their temporaries)."""
    if not folder.is_dir() or (folder / manifest_name(step)).exists():
        return []
    return sorted(p.name for p in folder.iterdir() if logged_step(p.name) == step)


def peer_specs(folder: Path, step: int) -> dict[str, PolicySpec]:
    """The PolicySpecs a peer's manifest of `step` declares (its own), which its records are validated against."""
    return read_manifest(folder / manifest_name(step), step)["policies"]

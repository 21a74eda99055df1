"""The exchange between trainers that run as separate processes (docs/trl.md, The exchange between trainers).

Each policy writes the records of a step into its own folder, `root/<policy>/`, as one step of SEE's experience log
(mrl.see.write_log_step: atomic Parquet files and a checksummed manifest written last), and reads its peers' folders
for the same step, waiting for each up to a deadline. Every record read is validated again as it is published into a
fresh SEE Exchange at the step's clock, so malformed experience is rejected and counted exactly as in the runner.

Why the filesystem and not a Ray actor: every trainer already runs under its own launcher (`accelerate launch`, a
Ray task, a Slurm job), and a folder is the one thing they all share without another service to start, keep alive
and reconnect to; the log is SEE's own format, written atomically and checksummed, so a torn or altered step is
refused, and it is also the experience log that `mrl.see.replay` and offline GRAFT read back. A Ray actor would hold
records in memory only, and would need every trainer to join one Ray cluster.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from mrl.config import FAILURE_POLICIES
from mrl.validation import ConfigError
from mrl.mwra import WorkerFailed
from mrl.see import (Exchange, Limits, PolicySpec, last_logged_step, manifest_name, read_log_step, read_manifest,
                     write_log_step)


@dataclass
class FileExchange:
    """One policy's end of the shared folder.

    root: the folder every trainer of the run shares; policy: this trainer's policy id; peers: the other policies'
    ids; spec: this policy's PolicySpec (what its records are validated against; MRLGRPOTrainer sets its own);
    deadline: seconds to wait for a peer's step; failure_policy: "fail" raises WorkerFailed naming a peer that
    published nothing in time, "continue" goes on without it."""

    root: Path
    policy: str
    peers: tuple[str, ...]
    spec: PolicySpec | None = None
    deadline: float = 60.0
    failure_policy: str = "fail"
    limits: Limits = field(default_factory=Limits)
    poll_seconds: float = 0.05

    def __post_init__(self):
        self.root = Path(self.root)
        self.dropped: set[str] = set()   # peers missed at a deadline under "continue": never waited for again
        self.published = False
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
        if not self.published and last_logged_step(folder, step + 1) is not None:
            raise ConfigError(f"exchange folder {folder} already holds steps of an earlier run; its peers would read "
                              f"them as this run's: give every run a fresh exchange folder")
        self.published = True
        write_log_step(folder, step, records, {self.policy: self.spec}, previous=last_logged_step(folder, step),
                       clock=step, limits=self.limits)

    def gather(self, step: int, own: list) -> tuple[Exchange, list[str]]:
        """(an Exchange at clock `step` holding this policy's records `own` and every peer's records of `step`,
        the peers that published nothing before the deadline). Each peer's step is read whole once its manifest
        is on disk; a peer missing at the deadline raises WorkerFailed under failure_policy "fail", and under
        "continue" is dropped: later steps do not wait for it (as the runner drops a dead worker)."""
        exchange = Exchange(policies={self.policy: self.spec}, limits=self.limits)
        exchange.advance(step)
        exchange.publish_many(own)
        missing, waiting, start = [], [p for p in self.peers if p not in self.dropped], time.monotonic()
        while waiting:
            for peer in list(waiting):
                records = read_log_step(self.folder(peer), step, self.limits)
                if records is not None:
                    exchange.policies.update(peer_specs(self.folder(peer), step))
                    exchange.publish_many(records)
                    waiting.remove(peer)
            if waiting and time.monotonic() - start > self.deadline:
                missing = sorted(waiting)
                if self.failure_policy == "fail":
                    raise WorkerFailed(", ".join(missing), f"published no records for step {step} within the "
                                                           f"deadline of {self.deadline:g} s (folder {self.root})")
                self.dropped.update(missing)
                break
            if waiting:
                time.sleep(self.poll_seconds)
        return exchange, missing


def peer_specs(folder: Path, step: int) -> dict[str, PolicySpec]:
    """The PolicySpecs a peer's manifest of `step` declares (its own), which its records are validated against."""
    return read_manifest(folder / manifest_name(step), step)["policies"]

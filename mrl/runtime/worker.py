"""The one typed protocol between the runner and its workers: what a worker does (`Worker`), the calls the runner
sends it (one record per method, run by every MWRA backend as `call(worker)`), and the records a step's calls
return (`RolloutResult`, `UpdateResult`, `FinishResult`).

A reader follows a call from the runner into the actor by name: `RolloutCall(step, problems)` runs
`worker.rollout(step, problems)`, which `mrl.runtime.actor.PolicyActor.rollout` implements. The calls are plain
picklable records, so the process and Ray backends send them as they are.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable


@dataclass
class RolloutResult:
    """What a worker's rollout of one step returns to the runner."""

    records: list
    """the step's experience as SEE records (Rollout, Success, GroupStats), to publish"""
    reward: float
    """the mean reward of the step's samples"""
    tokens: int
    """completion tokens sampled this step, stop ids included"""
    seconds: float
    """the rollout's wall time"""
    sampler: dict = field(default_factory=dict)
    """under a bf16 sampler, the sampler/trainer mismatch statistics (mrl.core.mismatch); on a GPU, rollout_peak_gb"""


@dataclass
class UpdateResult:
    """What a worker's update of one step returns: the means over the probe's optimizer steps (0 without any)."""

    loss: float
    """the mean loss"""
    grad_norm: float
    """the mean gradient norm before clipping"""
    active_sequences: int
    """sequences with a non-zero advantage or weight (ProbeOutput.active_sequences)"""
    probe: dict
    """the probe's statistics (ProbeOutput.stats); on a GPU, update_peak_gb"""
    seconds: float
    """the update's wall time"""


@dataclass
class FinishResult:
    """The async clock's second call of a step: the update, then the evaluation rows (None off evaluation steps)."""

    update: UpdateResult
    evals: list | None


@runtime_checkable
class Worker(Protocol):
    """What the runner asks of one policy's worker (mrl.runtime.actor.PolicyActor implements it)."""

    def ping(self) -> str: ...

    def policy_spec(self) -> dict: ...

    def rollout(self, step: int, problems: list) -> RolloutResult: ...

    def update(self, step: int, peer_records: dict | None = None) -> UpdateResult: ...

    def finish(self, step: int, peer_records: dict | None = None, evaluate: bool = False) -> FinishResult: ...

    def evaluate(self, step: int) -> list[dict]: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


class WorkerCall:
    """A call of one Worker method with its arguments; `phase` names it in the timeline and in failures."""

    phase: ClassVar[str]

    def __call__(self, worker: Worker) -> Any:
        raise NotImplementedError


@dataclass(frozen=True)
class PingCall(WorkerCall):
    phase: ClassVar[str] = "ping"

    def __call__(self, worker: Worker) -> str:
        return worker.ping()


@dataclass(frozen=True)
class PolicySpecCall(WorkerCall):
    phase: ClassVar[str] = "policy_spec"

    def __call__(self, worker: Worker) -> dict:
        return worker.policy_spec()


@dataclass(frozen=True)
class RolloutCall(WorkerCall):
    step: int
    problems: list
    phase: ClassVar[str] = "rollout"

    def __call__(self, worker: Worker) -> RolloutResult:
        return worker.rollout(self.step, self.problems)


@dataclass(frozen=True)
class UpdateCall(WorkerCall):
    step: int
    peer_records: dict | None = None
    phase: ClassVar[str] = "update"

    def __call__(self, worker: Worker) -> UpdateResult:
        return worker.update(self.step, self.peer_records)


@dataclass(frozen=True)
class FinishCall(WorkerCall):
    step: int
    peer_records: dict | None = None
    evaluate: bool = False
    phase: ClassVar[str] = "finish"

    def __call__(self, worker: Worker) -> FinishResult:
        return worker.finish(self.step, self.peer_records, self.evaluate)


@dataclass(frozen=True)
class EvaluateCall(WorkerCall):
    step: int
    phase: ClassVar[str] = "evaluate"

    def __call__(self, worker: Worker) -> list[dict]:
        return worker.evaluate(self.step)


@dataclass(frozen=True)
class StateDictCall(WorkerCall):
    phase: ClassVar[str] = "state_dict"

    def __call__(self, worker: Worker) -> dict:
        return worker.state_dict()


@dataclass(frozen=True)
class LoadStateCall(WorkerCall):
    state: dict
    phase: ClassVar[str] = "load_state_dict"

    def __call__(self, worker: Worker) -> None:
        return worker.load_state_dict(self.state)

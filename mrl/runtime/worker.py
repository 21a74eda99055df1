"""A worker as the runner sees it: `WorkerHandle`, one method per method of the policy actor it hosts, each
returning a `Future` at once, so a barrier waits on several workers with one deadline (mrl.runtime.mwra's
`Backend.gather`, or `wait_any` for the async clock).

A reader follows a call from the runner into the actor by name: `handle.rollout(step, problems)` submits
`PolicyActor.rollout`, which the worker runs on its actor as `actor.rollout(step, problems)` (its class's method: a
PoisonedActor's or a test's subclass's where it overrides one). Every MWRA backend (inline, process, Ray) implements
`submit`; what travels is the method's name and its arguments, picklable as they are.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Generic, TypeVar

from mrl.runtime.actor import FinishResult, PolicyActor, RolloutResult, UpdateResult

T = TypeVar("T")


@dataclass(eq=False)
class Future(Generic[T]):
    """One submitted call of a worker: its result, or its failure, comes back through the backend that holds it
    (Backend.gather, Backend.wait_any); `method` names it in the timeline and in failures."""

    worker: str
    method: str
    ref: Any = None
    """the backend's own handle of the call (a Ray object ref; the inline result; None on the process backend)"""


@dataclass(frozen=True)
class WorkerHandle:
    """One policy's worker on a backend; each method submits the actor's method of the same name."""

    backend: Any
    """the mrl.runtime.mwra.Backend that hosts the worker"""
    name: str
    """the worker's policy id"""

    def submit(self, method: Callable[..., T], *args) -> Future[T]:
        """Run `method` (a PolicyActor method) with `args` on this worker's actor, without waiting."""
        return self.backend.submit(self.name, method.__name__, *args)

    def ping(self) -> Future[str]:
        return self.submit(PolicyActor.ping)

    def policy_spec(self) -> Future[dict]:
        return self.submit(PolicyActor.policy_spec)

    def rollout(self, step: int, problems: list) -> Future[RolloutResult]:
        return self.submit(PolicyActor.rollout, step, problems)

    def update(self, step: int, peer_records: dict | None = None) -> Future[UpdateResult]:
        return self.submit(PolicyActor.update, step, peer_records)

    def finish(self, step: int, peer_records: dict | None = None, evaluate: bool = False) -> Future[FinishResult]:
        return self.submit(PolicyActor.finish, step, peer_records, evaluate)

    def evaluate(self, step: int) -> Future[list]:
        return self.submit(PolicyActor.evaluate, step)

    def state_dict(self) -> Future[dict]:
        return self.submit(PolicyActor.state_dict)

    def load_state_dict(self, state: dict) -> Future[None]:
        return self.submit(PolicyActor.load_state_dict, state)

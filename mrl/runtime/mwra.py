"""MWRA, Multi-Worker Resource Allocation (docs/architecture.md, MWRA and the runner): one worker per policy, one
API, three backends.

- `inline`: actors in this process, called one after another (deterministic: tests, nbval).
- `process`: one OS process per actor (forked from a fork server that imported torch once: mrl.runtime.pools),
  commands over a pipe (the fast CPU default).
- `ray`: one Ray actor per policy with num_cpus / num_gpus (local `ray.init` or a cluster address).

`Backend.submit(worker, method, *args)` starts one call of a worker's actor method (mrl.runtime.worker.WorkerHandle
submits each by its PolicyActor method) and returns its `Future`; `Backend.gather({worker: future}, timeout)` is one
phase's barrier and returns ({worker: result}, {worker: failure reason}), `wait_any` the first call to end. A barrier
has a deadline: a worker that dies (its process sentinel fires, or Ray reports the actor lost), raises, or misses the
deadline is reported by name, so no call can hang. The runner's failure policy decides what follows (`fail`: raise
`WorkerFailed`, the last complete checkpoint stays on disk; `continue`: `drop` the worker). Every call records
(worker, phase, start, end) in `timeline` for the utilisation report.
"""
from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field
from multiprocessing.connection import wait

from mrl import numerics
from mrl.core.config import BACKENDS
from mrl.runtime.capacity import usable_cores
from mrl.runtime.cluster import start_local_ray
from mrl.runtime.placement import cap_gpu_memory, resolve_device
from mrl.runtime.pools import GUARD_HINT, WatchedContext, import_path
from mrl.runtime.worker import Future


class WorkerFailed(RuntimeError):
    """A worker died, raised, or missed a barrier deadline."""

    def __init__(self, worker: str, reason: str):
        super().__init__(f"worker {worker!r} failed: {reason}")
        self.worker, self.reason = worker, reason


def raise_first_failure(failures: dict, context: str = "") -> None:
    """Raise WorkerFailed for the first entry of a {worker: reason} map (nothing if it is empty)."""
    if failures:
        name, reason = next(iter(failures.items()))
        raise WorkerFailed(name, f"{context}{reason}")


@dataclass
class Backend:
    """Common bookkeeping of the backends: the live workers and the timeline of calls.

    `specs`: one per worker, each with its `name`, `num_cpus`, `num_gpus` and `build()` (mrl.runtime.actor.WorkerSpec;
    a test's stand-in), picklable: a process or Ray worker builds its actor from it where it runs."""

    specs: list
    timeline: list = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)

    @property
    def workers(self) -> list[str]:
        return [s.name for s in self.specs]

    def _record(self, worker: str, phase: str, start: float, end: float) -> None:
        self.timeline.append({"worker": worker, "phase": phase, "start": start - self.started,
                              "end": end - self.started})

    def drop(self, worker: str) -> None:
        self.specs = [s for s in self.specs if s.name != worker]

    def close(self) -> None:
        pass


class InlineBackend(Backend):
    """Actors in this process; calls run one after another (a timeout cannot pre-empt them)."""

    def __init__(self, specs: list):
        super().__init__(specs)
        self.actors = {s.name: s.build() for s in specs}
        self._done: list[Future] = []

    def submit(self, worker: str, method: str, *args) -> Future:
        """Run one call now (inline: in submission order); its Future holds (result, failure reason or None)."""
        start = time.perf_counter()
        try:
            outcome = getattr(self.actors[worker], method)(*args), None
            self._record(worker, method, start, time.perf_counter())
        except Exception as err:  # noqa: BLE001 - a worker's error becomes a named failure
            outcome = None, f"{method} raised {type(err).__name__}: {err}"
        future = Future(worker, method, outcome)
        self._done.append(future)
        return future

    def gather(self, futures: dict[str, Future], timeout: float | None = None) -> tuple[dict, dict]:
        """({worker: result}, {worker: failure reason}) of calls that already ran (a timeout cannot pre-empt them)."""
        self._done = [f for f in self._done if all(f is not g for g in futures.values())]
        results = {name: f.ref[0] for name, f in futures.items() if f.ref[1] is None}
        return results, {name: f.ref[1] for name, f in futures.items() if f.ref[1] is not None}

    def wait_any(self, timeout: float | None = None) -> tuple[str, object, str | None]:
        """(worker, result, failure reason or None) of the oldest finished call."""
        future = self._done.pop(0)
        return future.worker, *future.ref

    def drop(self, worker: str) -> None:
        super().drop(worker)
        self.actors.pop(worker, None)


def _own_process_actor(spec):
    """The actor of a process that holds one policy (a process or Ray worker), capped first to its placement's
    share of the GPU (PlacementConfig.gpus, mrl.runtime.placement.cap_gpu_memory): policies sharing a GPU each fail on
    their own share, not on a neighbour's."""
    placement = getattr(spec, "placement", None)
    if placement is not None:
        cap_gpu_memory(resolve_device(placement.device), placement.gpus)
    return spec.build()


def _serve(conn, spec) -> None:
    """Worker process main loop: build the actor, then answer each (method, args) until None (close). Started by a
    WatchedContext, it dies with the process that started it from its first instruction, even in the middle of
    a call (mrl.runtime.pools.WATCH_PARENT)."""
    try:
        actor = _own_process_actor(spec)
        conn.send(("ok", None))
    except Exception:  # noqa: BLE001
        conn.send(("error", traceback.format_exc()))
        return
    while True:
        try:
            call = conn.recv()
        except EOFError:
            return
        if call is None:
            return
        method, args = call
        start = time.perf_counter()
        try:
            conn.send(("ok", (getattr(actor, method)(*args), start, time.perf_counter())))
        except Exception:  # noqa: BLE001
            conn.send(("error", traceback.format_exc()))


class ProcessBackend(Backend):
    """One worker process per actor (mrl.runtime.pools.WatchedContext); a dead process is seen at once through its
    sentinel."""

    def __init__(self, specs: list, start_timeout: float = 300.0):
        super().__init__(specs)
        context = WatchedContext()
        self.conns, self.processes = {}, {}
        self._inflight, self._failed_sends = {}, []
        self._stuck = set()   # workers that missed a deadline: busy in a call, they would not read close's stop
        for spec in specs:
            parent, child = context.Pipe()
            process = context.Process(target=_serve, args=(child, spec),
                                      name=f"mrl-{spec.name}", daemon=True)
            process.start()
            child.close()
            self.conns[spec.name], self.processes[spec.name] = parent, process
        _, failures = self._gather({s.name: None for s in specs}, start_timeout, "start")
        if failures:
            self.close()
            dead = {name: f"{reason}. {GUARD_HINT}" if reason.startswith("its process died") else reason
                    for name, reason in failures.items()}
            raise_first_failure(dead, "at start-up: ")

    def pid(self, worker: str) -> int:
        return self.processes[worker].pid

    def submit(self, worker: str, method: str, *args) -> Future:
        """Send one call without waiting; a call that cannot be sent is a Future holding the reason."""
        try:
            self.conns[worker].send((method, args))
        except (BrokenPipeError, OSError) as err:
            failed = Future(worker, method, f"cannot send {method}: {err}")
            self._failed_sends.append(failed)
            return failed
        self._inflight[worker] = method
        return Future(worker, method)

    def gather(self, futures: dict[str, Future], timeout: float | None = None) -> tuple[dict, dict]:
        """Wait for the answers of `futures` ({worker: future}) within one deadline: (results, failures)."""
        failures = {name: f.ref for name, f in futures.items() if f.ref is not None}
        self._failed_sends = [f for f in self._failed_sends if all(f is not g for g in futures.values())]
        pending = {name: self._inflight.pop(name) for name, f in futures.items() if f.ref is None}
        results, late = self._gather(pending, timeout, None)
        return results, failures | late

    def wait_any(self, timeout: float | None = None) -> tuple[str, object, str | None]:
        """(worker, result, failure reason or None) of the first in-flight call to end (or miss the deadline)."""
        if self._failed_sends:
            failed = self._failed_sends.pop(0)
            return failed.worker, None, failed.ref
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            waitables = {self.conns[n]: n for n in self._inflight} | \
                {self.processes[n].sentinel: n for n in self._inflight}
            ready = wait(list(waitables), timeout=remaining)
            if not ready:
                name = sorted(self._inflight)[0]
                self._stuck.add(name)
                return name, None, f"no answer to {self._inflight.pop(name)} within {timeout:.1f} s"
            name = waitables[ready[0]]
            one = {name: self._inflight.pop(name)}
            results, failures = self._answers(one)
            return name, results.get(name), failures.get(name)

    def _answers(self, ready: dict) -> tuple[dict, dict]:
        """Read the answer (or notice the death) of workers whose pipe or sentinel is ready."""
        results, failures = {}, {}
        for name, method in ready.items():
            conn = self.conns[name]
            try:
                status, payload = conn.recv() if conn.poll() else ("dead", None)
            except (EOFError, OSError):
                status, payload = "dead", None
            if status == "dead":
                failures[name] = f"its process died (exit code {self.processes[name].exitcode})"
            elif status == "error":
                failures[name] = f"{method} raised:\n{payload}"
            elif payload is not None:
                value, start, end = payload
                self.timeline.append({"worker": name, "phase": method, "start": start - self.started,
                                      "end": end - self.started})
                results[name] = value
        return results, failures

    def _gather(self, pending: dict, timeout: float | None, phase: str | None) -> tuple[dict, dict]:
        """Wait for every pending worker's answer, its death, or the deadline: (results, failures)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        results, failures = {}, {}
        while pending:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            waitables = {self.conns[n]: n for n in pending} | {self.processes[n].sentinel: n for n in pending}
            ready = wait(list(waitables), timeout=remaining)
            if not ready:
                failures |= {n: f"no answer to {m or phase} within {timeout:.1f} s" for n, m in pending.items()}
                self._stuck |= set(pending)
                break
            names = {waitables[handle] for handle in ready}
            answered, failed = self._answers({n: pending.pop(n) or phase for n in names if n in pending})
            results |= answered
            failures |= failed
        return results, failures

    def drop(self, worker: str) -> None:
        super().drop(worker)
        process = self.processes.pop(worker, None)
        if process is not None and process.is_alive():
            process.kill()
        self.conns.pop(worker, None)

    def close(self) -> None:
        """Stop every worker: one that missed a deadline is killed at once, the others are asked to stop and get 5 s
        before they are killed."""
        for name, conn in self.conns.items():
            try:
                conn.send(None)
            except (BrokenPipeError, OSError):
                pass
        for name, process in self.processes.items():
            if name not in self._stuck:
                process.join(timeout=5)
            if process.is_alive():
                process.kill()


class _RayHost:
    """Holds one actor inside a Ray worker process and times its calls."""

    def __init__(self, spec):
        self.actor = _own_process_actor(spec)

    def run(self, method: str, *args):
        start = time.perf_counter()
        value = getattr(self.actor, method)(*args)
        return value, start, time.perf_counter()


class RayBackend(Backend):
    """One Ray actor per policy, with num_cpus / num_gpus from its spec, gang-scheduled in a placement group.

    address: None starts a local Ray on this machine's usable cores, listening on the loopback interface only and
    without a dashboard (mrl.runtime.cluster.start_local_ray); "auto" or "ray://host:10001" joins a cluster.
    `startup_seconds` (ray.init plus actor creation) is kept apart from step costs.
    """

    def __init__(self, specs: list, address: str | None = None, start_timeout: float = 300.0):
        import ray
        from ray.util.placement_group import placement_group, remove_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        super().__init__(specs)
        begin = time.perf_counter()
        self._ray, self._owns = ray, not ray.is_initialized()
        if self._owns and address:
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
        elif self._owns:   # this machine only, no dashboard (mrl.runtime.cluster.start_local_ray)
            start_local_ray(max(usable_cores(), int(sum(s.num_cpus for s in specs))),
                            # workers import what this process can (as the process backend's do), e.g. test actors
                            runtime_env={"env_vars": {"PYTHONPATH": import_path()}})
        bundles = [{"CPU": s.num_cpus, **({"GPU": s.num_gpus} if s.num_gpus else {})} for s in specs]
        self._group = placement_group(bundles, strategy="PACK")
        self._remove_group = remove_placement_group
        ready, _ = ray.wait([self._group.ready()], timeout=start_timeout)
        if not ready:
            self.close()
            raise WorkerFailed(specs[0].name, f"Ray could not place {bundles} within {start_timeout:.0f} s")
        host = ray.remote(_RayHost)
        self.actors, self._inflight = {}, {}
        for index, spec in enumerate(specs):
            self.actors[spec.name] = host.options(
                num_cpus=spec.num_cpus, num_gpus=spec.num_gpus, max_restarts=0, name=None,
                # a cluster's workers did not inherit this process's environment: the numerics go with the actor, and
                # so does this process's import path as it is now (a user's probe module imported after ray.init)
                runtime_env={"env_vars": {**numerics.environment(), "PYTHONPATH": import_path()}},
                scheduling_strategy=PlacementGroupSchedulingStrategy(self._group, placement_group_bundle_index=index),
            ).remote(spec)
        _, failures = self.gather({s.name: self.submit(s.name, "ping") for s in specs}, start_timeout)
        if failures:
            self.close()
            raise_first_failure(failures)
        self.timeline.clear()
        self.startup_seconds = time.perf_counter() - begin
        self.started = time.perf_counter()

    def submit(self, worker: str, method: str, *args) -> Future:
        """Start one call on the worker's Ray actor without waiting."""
        ref = self.actors[worker].run.remote(method, *args)
        self._inflight[ref] = (worker, method)
        return Future(worker, method, ref)

    def gather(self, futures: dict[str, Future], timeout: float | None = None) -> tuple[dict, dict]:
        """Wait for the answers of `futures` ({worker: future}) within one deadline: (results, failures)."""
        ray = self._ray
        refs = {f.ref: (name, f.method) for name, f in futures.items()}
        for ref in refs:
            self._inflight.pop(ref, None)
        ready, late = ray.wait(list(refs), num_returns=len(refs), timeout=timeout)
        results, failures = {}, {}
        for ref in ready:
            name, method = refs[ref]
            try:
                value, start, end = ray.get(ref)
            except ray.exceptions.RayActorError:
                failures[name] = "its actor died"
                continue
            except ray.exceptions.RayTaskError as err:
                failures[name] = f"{method} raised:\n{err}"
                continue
            self._record(name, method, start, end)
            results[name] = value
        for ref in late:
            name, method = refs[ref]
            failures[name] = f"no answer to {method} within {timeout:.1f} s"
        return results, failures

    def wait_any(self, timeout: float | None = None) -> tuple[str, object, str | None]:
        """(worker, result, failure reason or None) of the first in-flight call to end (or miss the deadline)."""
        ray = self._ray
        ready, _ = ray.wait(list(self._inflight), num_returns=1, timeout=timeout)
        if not ready:
            ref = next(iter(self._inflight))
            name, method = self._inflight.pop(ref)
            return name, None, f"no answer to {method} within {timeout:.1f} s"
        name, method = self._inflight.pop(ready[0])
        try:
            value, start, end = ray.get(ready[0])
        except ray.exceptions.RayActorError:
            return name, None, "its actor died"
        except ray.exceptions.RayTaskError as err:
            return name, None, f"{method} raised:\n{err}"
        self._record(name, method, start, end)
        return name, value, None

    def drop(self, worker: str) -> None:
        super().drop(worker)
        actor = self.actors.pop(worker, None)
        if actor is not None:
            self._ray.kill(actor, no_restart=True)

    def close(self) -> None:
        for actor in self.actors.values() if hasattr(self, "actors") else ():
            self._ray.kill(actor, no_restart=True)
        if getattr(self, "_group", None) is not None:
            self._remove_group(self._group)
        if self._owns:
            self._ray.shutdown()


def make_backend(kind: str, specs: list, **kwargs) -> Backend:
    """A backend by name: inline, process or ray (kwargs go to the backend, e.g. address= for ray)."""
    if kind == "inline":
        return InlineBackend(specs)
    if kind == "process":
        return ProcessBackend(specs, **kwargs)
    if kind == "ray":
        return RayBackend(specs, **kwargs)
    raise ValueError(f"backend={kind!r} is not allowed; expected one of {list(BACKENDS)}")

"""Process pools that fail with a clear error instead of hanging.

`multiprocessing.Pool` restarts a worker that dies while it starts, forever: a script that runs mrl at its top level
without an `if __name__ == "__main__":` guard has every spawned worker re-import the script, fail while
bootstrapping, and be started again, while the script waits at 0% CPU. `concurrent.futures.ProcessPoolExecutor`
instead marks itself broken when a worker dies; `map_in_processes` turns that into a `PoolBroken` error that
names the guard.

Every worker dies with its parent (`WATCH_PARENT`): a script killed by SIGKILL or SIGTERM, which runs no cleanup of
its own, leaves no worker training on into the run cache. The watch starts before a spawned worker imports anything
of its parent's (`WatchedSpawnContext`), so a worker still importing torch and the parent's script when the parent
dies exits too.
"""
from __future__ import annotations

import importlib
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from multiprocessing.context import SpawnContext, SpawnProcess
from concurrent.futures.process import BrokenProcessPool
from typing import Callable, Iterable

GUARD_HINT = ("If this was started from a script, put the script's top-level code under "
              "`if __name__ == \"__main__\":` (spawned workers re-import the script; Python's multiprocessing guide, "
              "'Safe importing of main module'). Otherwise a worker was killed or ran out of memory.")


class PoolBroken(RuntimeError):
    """A worker process of a pool died, or could not start."""


def spawn_executor(processes: int, modules: Iterable[str] = ()) -> ProcessPoolExecutor:
    """A pool of `processes` spawned processes (no fork: torch and Ray threads do not survive one), each of which
    imports `modules` first (a user's probe module, whose probe a job names but whose config may not import it)."""
    return ProcessPoolExecutor(processes, mp_context=WatchedSpawnContext(), initializer=start_worker,
                               initargs=(tuple(modules),))


def start_worker(modules: tuple[str, ...]) -> None:
    """A pool worker's initializer: import each module (its parent is watched from the worker's start)."""
    for module in modules:
        importlib.import_module(module)


PARENT_POLL_SECONDS = 0.5
"""how often a worker looks whether its parent still lives"""

WATCH_PARENT = f"""
import os, threading, time
if os.getpid() != parent:   # unpickled in a child (a copy of the name in the parent itself watches nothing)
    if os.getppid() != parent:
        os._exit(1)   # the parent died before this worker started watching it
    def watch():
        while os.getppid() == parent:
            time.sleep({PARENT_POLL_SECONDS})
        os._exit(1)
    threading.Thread(target=watch, name="mrl-watch-parent", daemon=True).start()
"""
"""The parent watch, run in a spawned child with `parent` bound: it ends the child (exit status 1, no cleanup) within
PARENT_POLL_SECONDS once the process `parent` is gone, whatever killed it, SIGKILL included.

A daemon thread compares os.getppid() with `parent` (an orphan is adopted by another process). Not Linux's
parent-death signal (prctl PR_SET_PDEATHSIG): that fires when the *thread* that started the worker ends, and a pool
started from a thread that then ends would lose its workers while its parent still uses them. The thread runs
whenever the worker's main thread releases the GIL, which torch's kernels and every wait do. Only the standard
library: it runs before the child has its parent's sys.path, so it must not import mrl."""


class ParentWatchingName(str):
    """A spawned process's name that starts the parent watch (WATCH_PARENT) in the child as it is unpickled.

    A spawned child unpickles its name first, in the preparation data, before it takes its parent's sys.path and
    imports its parent's `__main__` (a script re-imported with torch and mrl: seconds, and tens of seconds on a
    loaded machine) and long before a pool's initializer runs; a parent that died meanwhile would otherwise leave the
    child importing, then working. The name unpickles as a plain str, by `eval` of a standard-library expression
    (multiprocessing trusts what a parent pickles for its child in any case)."""

    parent: int

    def __new__(cls, name: str, parent: int):
        named = super().__new__(cls, name)
        named.parent = parent
        return named

    def __reduce__(self):
        return eval, (f"exec({WATCH_PARENT!r}, {{'parent': {self.parent}}}) or {str(self)!r}",)


class WatchedSpawnProcess(SpawnProcess):
    """A spawned process that watches the process that started it from its first unpickled object."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._name = ParentWatchingName(self._name, os.getpid())


class WatchedSpawnContext(SpawnContext):
    """multiprocessing's spawn context whose processes die with their parent, from their start (WatchedSpawnProcess);
    for pools (`ProcessPoolExecutor(mp_context=...)`) and single processes (`.Process(...)`) alike."""

    Process = WatchedSpawnProcess


def map_in_processes(fn: Callable, jobs: Iterable, processes: int, what: str) -> list:
    """[fn(job) for job in jobs], `processes` at a time in spawned processes, in job order. A worker that dies or
    cannot start raises PoolBroken naming `what` and the script guard; the other workers are stopped, as they are
    when this call is interrupted."""
    before = set(multiprocessing.active_children())
    executor = spawn_executor(processes)
    try:
        results = list(executor.map(fn, jobs))
    except BrokenProcessPool:
        executor.shutdown(wait=False, cancel_futures=True)
        raise PoolBroken(f"a worker process of {what} died or could not start. {GUARD_HINT}") from None
    except BaseException:   # KeyboardInterrupt (a kernel interrupted in Jupyter) too: the workers stop with it
        executor.shutdown(wait=False, cancel_futures=True)
        for child in set(multiprocessing.active_children()) - before:
            child.kill()
        raise
    executor.shutdown()
    return results

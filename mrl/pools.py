"""Process pools that fail with a clear error instead of hanging.

`multiprocessing.Pool` restarts a worker that dies while it starts, forever: a script that runs mrl at its top level
without an `if __name__ == "__main__":` guard has every spawned worker re-import the script, fail while
bootstrapping, and be started again, while the script waits at 0% CPU. `concurrent.futures.ProcessPoolExecutor`
instead marks itself broken when a worker dies; `map_in_processes` turns that into a `PoolBroken` error that
names the guard.
"""
from __future__ import annotations

import importlib
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
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
    return ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn"), initializer=import_modules,
                               initargs=(tuple(modules),))


def import_modules(modules: tuple[str, ...]) -> None:
    """Import each module (a pool worker's initializer)."""
    for module in modules:
        importlib.import_module(module)


def map_in_processes(fn: Callable, jobs: Iterable, processes: int, what: str) -> list:
    """[fn(job) for job in jobs], `processes` at a time in spawned processes, in job order. A worker that dies or
    cannot start raises PoolBroken naming `what` and the script guard; the other workers are stopped."""
    executor = spawn_executor(processes)
    try:
        results = list(executor.map(fn, jobs))
    except BrokenProcessPool:
        executor.shutdown(wait=False, cancel_futures=True)
        raise PoolBroken(f"a worker process of {what} died or could not start. {GUARD_HINT}") from None
    except BaseException:
        executor.shutdown(wait=False, cancel_futures=True)
        raise
    executor.shutdown()
    return results

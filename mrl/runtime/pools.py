"""Process pools that fail with a clear error instead of hanging.

`multiprocessing.Pool` restarts a worker that dies while it starts, forever: a script that runs mrl at its top level
without an `if __name__ == "__main__":` guard has every spawned worker re-import the script, fail while
bootstrapping, and be started again, while the script waits at 0% CPU. `concurrent.futures.ProcessPoolExecutor`
instead marks itself broken when a worker dies; `map_in_processes` turns that into a `PoolBroken` error that
names the guard.

Every worker dies with its parent (`watch_parent`): a script killed by SIGKILL or SIGTERM, which runs no cleanup of
its own, leaves no worker training on into the run cache.
"""
from __future__ import annotations

import importlib
import multiprocessing
import os
import threading
import time
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
    return ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn"), initializer=start_worker,
                               initargs=(os.getpid(), tuple(modules)))


def start_worker(parent: int, modules: tuple[str, ...]) -> None:
    """A pool worker's initializer: die with the process `parent`, then import each module."""
    watch_parent(parent)
    for module in modules:
        importlib.import_module(module)


PARENT_POLL_SECONDS = 0.5
"""how often a worker looks whether its parent still lives"""


def watch_parent(parent: int) -> None:
    """End this process (exit status 1, no cleanup) within PARENT_POLL_SECONDS once the process `parent` is gone,
    whatever killed it, SIGKILL included.

    A daemon thread compares os.getppid() with `parent` (an orphan is adopted by another process). Not Linux's
    parent-death signal (prctl PR_SET_PDEATHSIG): that fires when the *thread* that started the worker ends, and a
    pool started from a thread that then ends would lose its workers while its parent still uses them. The thread
    runs whenever the worker's main thread releases the GIL, which torch's kernels and every wait do."""
    if os.getppid() != parent:
        os._exit(1)   # the parent died before this worker started watching it

    def watch():
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_SECONDS)
        os._exit(1)

    threading.Thread(target=watch, name="mrl-watch-parent", daemon=True).start()


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

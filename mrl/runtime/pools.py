"""Process pools whose workers start in milliseconds, die with their parent, and fail with a clear error, not a hang.

Workers are forked from a fork server (multiprocessing's forkserver) that imported torch, transformers and the model
code once (PRELOAD), not started as fresh interpreters that import them again (about 6 s of CPU each here). The server
is a fresh interpreter that has only imported, so the parent's torch, Ray and Jupyter threads never reach a worker; a
worker still re-imports its parent's script, as a spawned one does, and takes the environment the server started with.

`multiprocessing.Pool` restarts a worker that dies while it starts, forever (a script without an `if __name__ ==
"__main__":` guard waits at 0% CPU); `concurrent.futures.ProcessPoolExecutor` marks itself broken instead, and
`map_in_processes` turns that into a `PoolBroken` error that names the guard.

Every worker dies with the process that started it (WATCH_PARENT), from before it imports anything of its parent's:
a script killed by SIGKILL or SIGTERM, which runs no cleanup, leaves no worker training on into the run cache.
"""
from __future__ import annotations

import importlib
import multiprocessing
import os
import sys
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import forkserver
from multiprocessing.context import ForkServerContext, ForkServerProcess
from typing import Callable, Iterable

GUARD_HINT = ("If this was started from a script, put the script's top-level code under "
              "`if __name__ == \"__main__\":` (workers re-import the script; Python's multiprocessing guide, "
              "'Safe importing of main module'). Otherwise a worker was killed or ran out of memory.")


class PoolBroken(RuntimeError):
    """A worker process of a pool died, or could not start."""


def worker_executor(processes: int, modules: Iterable[str] = ()) -> ProcessPoolExecutor:
    """A pool of `processes` worker processes (WatchedContext), each of which imports `modules` first (a user's probe
    module, whose probe a job names but whose config may not import it)."""
    return ProcessPoolExecutor(processes, mp_context=WatchedContext(), initializer=start_worker,
                               initargs=(tuple(modules),))


def start_worker(modules: tuple[str, ...]) -> None:
    """A pool worker's initializer: import each module (its parent is watched from the worker's start)."""
    for module in modules:
        importlib.import_module(module)


WATCH_PARENT = """
import os, select, threading, time
def gone_pidfd(handle):
    select.select([handle], [], [])   # a process's pidfd becomes readable when it ends
def gone_polled(pid):
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.5)
if os.getpid() != parent:   # unpickled in a child (a copy of the name in the parent itself watches nothing)
    try:
        os.kill(parent, 0)
        wait, arg = gone_pidfd, os.pidfd_open(parent)
    except ProcessLookupError:
        os._exit(1)   # the parent died before this worker started watching it
    except (AttributeError, OSError):   # no pidfd here (not Linux, a kernel before 5.3, a seccomp filter)
        wait, arg = gone_polled, parent
    threading.Thread(target=lambda: (wait(arg), os._exit(1)), name="mrl-watch-parent", daemon=True).start()
"""
"""The parent watch, run in a child with `parent` (the pid of the process that started it) bound: it ends the child
(exit status 1, no cleanup) as soon as `parent` is gone, whatever killed it, SIGKILL included.

A daemon thread waits on a pidfd of the parent (Linux 5.3; elsewhere it polls the pid every 0.5 s): the child of a
fork server is not its starter's child, so os.getppid() cannot tell. Not Linux's parent-death signal (prctl
PR_SET_PDEATHSIG) either: that fires when the *thread* that started the worker ends, and a pool started from a thread
that then ends would lose its workers while its parent still uses them. Only the standard library: it runs before the
child has its parent's sys.path."""


class ParentWatchingName(str):
    """A worker process's name that starts the parent watch (WATCH_PARENT) in the child as it is unpickled.

    A child unpickles its name first, in the preparation data, before it takes its parent's sys.path and
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


PRELOAD = ["mrl.runtime.actor"]
"""what the fork server imports before it forks a worker: the worker's own module with torch, transformers, the
model families and the zoo (mrl.runtime.actor imports them all; the runs' pool imports little beyond it). A name, as
multiprocessing takes it: pools sits below the actor, which imports it."""


class WatchedProcess(ForkServerProcess):
    """A worker forked from the fork server that watches the process that started it from its first unpickled
    object."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._name = ParentWatchingName(self._name, os.getpid())


class WatchedContext(ForkServerContext):
    """multiprocessing's forkserver context whose server preloads PRELOAD and whose processes die with the process that
    started them, from their start (WatchedProcess); for pools (`ProcessPoolExecutor(mp_context=...)`) and single
    processes (`.Process(...)`) alike."""

    Process = WatchedProcess

    def __init__(self):
        super().__init__()
        start_server()


SERVER_LOCK = threading.Lock()


def import_path() -> str:
    """This process's sys.path as a PYTHONPATH, so a fork server or a Ray worker imports what this process can (a
    user's probe module, a test's actor class)."""
    return os.pathsep.join(p or os.getcwd() for p in sys.path)   # '' (python -c, a REPL): the current folder


def start_server() -> None:
    """Start this process's fork server (once) with PRELOAD and this process's sys.path: Python 3.11's server
    runs `python -c` with the working directory first on its path and ignores the path it is given, so an `mrl/`
    folder in the working directory (another checkout, a test's scratch folder) would otherwise be the package its
    workers run. PYTHONSAFEPATH drops the working directory; PYTHONPATH is this process's sys.path (the server's
    environment, and so its workers', keeps both; this process's is restored)."""
    with SERVER_LOCK:
        forkserver.set_forkserver_preload(PRELOAD)
        saved = {name: os.environ.get(name) for name in ("PYTHONPATH", "PYTHONSAFEPATH")}
        os.environ["PYTHONPATH"] = import_path()
        os.environ["PYTHONSAFEPATH"] = "1"
        try:
            forkserver.ensure_running()
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


def map_in_processes(fn: Callable, jobs: Iterable, processes: int, what: str) -> list:
    """[fn(job) for job in jobs], `processes` at a time in worker processes, in job order. A worker that dies or
    cannot start raises PoolBroken naming `what` and the script guard; the other workers are stopped, as they are
    when this call is interrupted."""
    before = set(multiprocessing.active_children())
    executor = worker_executor(processes)
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

"""A Ray cluster for the grid: every warm-up family and every run a Ray task of one CPU, placed by Ray
(`mrl reproduce --ray ADDRESS`, docs/performance.md, On a Ray cluster).

No filesystem is shared: a task gets the driver's folders it reads (a zoo's checkpoints) as their files' bytes,
written into a temporary folder on its node, and returns what it made (a run's rows, its trained policies, a
family's checkpoint and tokenizer) to the driver, which writes it where a local job would have (zoo_grid.build_zoos,
runs.run_many). A task first checks that its node computes as the driver does (NodeContract: the numerics mode, its
contract in effect or, in native mode, the driver's CPU, the same mrl code); one that cannot runs nothing and says why.

Faults are Ray's to handle, not a scheduler's of ours: a task whose node dies is retried elsewhere (`max_retries`);
every task belongs to the driver that submitted it, and Ray ends them when that driver dies; what finished is in the
driver's caches, so a re-run computes only the rest. Nothing hangs: a task that runs past its deadline is cancelled
(GridTaskTimedOut), and a task that no live node can hold is refused after PLACEMENT_SECONDS (NoNodeFits). A Ray
instance this package starts itself (`--ray local`) listens on the loopback interface only and has no dashboard, so no
job API (docs/performance.md, Joining a cluster safely).
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from tqdm.auto import tqdm

from mrl import numerics
from mrl.core.validation import ConfigError
from mrl.fingerprint import code_fingerprint, in_library, reached_modules, user_file
from mrl.runtime.pools import import_path

ADDRESS_ENV = "MRL_RAY_ADDRESS"
"""the cluster the grid runs on (set by `mrl reproduce --ray ADDRESS`; every notebook's kernel inherits it)"""

LOCAL = "local"
"""the address that starts a Ray instance on this machine (start_local_ray) instead of joining one"""

LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
"""Ray's switch that, set to 0, makes a node it starts advertise and bind 127.0.0.1 (as on a laptop) instead of this
machine's network address"""

MAX_RETRIES = 3
"""times Ray reruns a task whose node or worker process died (a task's own error is not retried)"""

POLL_SECONDS = 1.0
"""how often the progress bar names the running tasks, and the deadlines are checked, while none finishes"""

PLACEMENT_SECONDS = 300.0
"""how long a task may wait while no live node of the cluster can hold its resources (one CPU and its memory) before
the grid is refused (NoNodeFits): long enough for a node to join, short of waiting forever"""


class NodeRefused(RuntimeError):
    """A node that cannot compute as the driver does; names the node and what differs."""


class GridTaskFailed(RuntimeError):
    """A grid task raised; names the job and the node, with the task's own error."""


class GridTaskTimedOut(GridTaskFailed):
    """A grid task ran past its deadline and was cancelled; names the job, its node and the deadline."""


class NoNodeFits(GridTaskFailed):
    """No live node of the cluster can hold a task's resources; names them and the nodes there are."""


def grid_address() -> str | None:
    """The Ray address the grid runs on (MRL_RAY_ADDRESS, checked_address), None for this machine's process pools."""
    address = os.environ.get(ADDRESS_ENV, "").strip()
    return checked_address(address, ADDRESS_ENV) if address else None


def checked_address(address: str, source: str) -> str:
    """`address` when the grid can join it: a Ray address (host:port, "auto", ray://host:port) or LOCAL. An http(s)://
    address is the dashboard's (its job API), which runs no task of a driver: a ConfigError naming `source`."""
    if address.lower().startswith(("http://", "https://")):
        raise ConfigError(f"{source}={address!r} is not allowed: an http(s):// address is the Ray dashboard's job API, "
                          f"not a cluster a driver joins; expected the head's GCS address (host:6379), 'auto', "
                          f"ray://host:10001 or {LOCAL!r}")
    return address


def task_environment(modules: tuple[str, ...] = ()) -> dict:
    """The runtime_env of a grid's tasks: the driver's numerics (a cluster's workers do not inherit its environment),
    the driver's own folders of its import path (user_path: on a node that lacks them nothing is found there), and
    the files of the user's `modules` (a probe's, by name) with the user's modules they reach, shipped to every node
    (Ray's `py_modules`, shipped_sources); the package's own modules ship nothing, every node has them."""
    environment = {"env_vars": {**numerics.environment(), "PYTHONPATH": user_path()}}
    sources = shipped_sources(modules)
    return {**environment, "py_modules": sources} if sources else environment


def user_path() -> str:
    """The entries of this process's sys.path outside the interpreter's (standard library, site-packages), as a
    PYTHONPATH: a node's own interpreter and packages come first, the driver's would be other machines' folders."""
    return os.pathsep.join(entry for entry in import_path().split(os.pathsep) if not in_library(Path(entry)))


def shipped_sources(modules: tuple[str, ...]) -> list[str]:
    """What Ray's py_modules ships for the user's `modules` (names in sys.modules) and the user's modules they reach
    (mrl.fingerprint.reached_modules): each one's top-level package folder, or its file where it is a module of its
    own, so that it imports on a node under the same name; nothing for the package's or the interpreter's."""
    shipped, seen, todo = {}, set(), [sys.modules[name] for name in modules if name in sys.modules]
    while todo:
        module = todo.pop()
        if module.__name__ in seen or user_file(module) is None:
            continue
        seen.add(module.__name__)
        top = sys.modules.get(module.__name__.split(".")[0], module)
        folders = list(getattr(top, "__path__", []))
        shipped[folders[0] if folders else top.__file__] = None
        todo += reached_modules(vars(module))
    return sorted(shipped)


def loopback_only() -> None:
    """Make the Ray of this process advertise and bind 127.0.0.1 (LOOPBACK_ENV): for a node it starts, and for a
    driver joining a cluster on 127.0.0.1, whose address Ray would otherwise rewrite to this machine's network one."""
    os.environ[LOOPBACK_ENV] = "0"   # read when ray is imported ...
    from ray._private import ray_constants

    ray_constants.ENABLE_RAY_CLUSTER = False   # ... and, where this process imported it before, set here


def start_local_ray(num_cpus: int, **init) -> None:
    """Start Ray on this machine only: its servers advertise and bind the loopback interface (loopback_only) and the
    dashboard, with its unauthenticated job API, is not started (CVE-2023-48022)."""
    import ray

    loopback_only()
    # address "local": a new instance, even where another Ray on this machine would be joined by default
    ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False, **init)


def connect(address: str) -> None:
    """Join the cluster at `address` (a Ray address, "auto", ray://host:port), or start one on this machine's usable
    cores for LOCAL; nothing when this process is already connected."""
    import ray

    if ray.is_initialized():
        return
    checked_address(address, "the Ray address")
    if address == LOCAL:
        from mrl.runtime.capacity import usable_cores

        start_local_ray(usable_cores(), runtime_env=task_environment())
    else:
        if address.split("://")[-1].rsplit(":", 1)[0] in ("127.0.0.1", "localhost"):
            loopback_only()   # a cluster on this machine's loopback (benchmarks/simulated_cluster.py)
        ray.init(address=address, log_to_driver=False, runtime_env=task_environment())


@dataclass(frozen=True)
class NodeContract:
    """What every node must share with the driver to compute its bits.

    In portable mode the contract (mrl.numerics) makes every x86-64 CPU with AVX2 compute the same bits, so a node
    need only hold it. In native mode the bits are the CPU's own (its kernels, its bf16), and a run's key does not
    name the CPU, so a node of another CPU would fill the driver's caches with other bits under the same keys: native
    is allowed on a cluster whose nodes all match the driver's CPU model, kernels and numerics state (`cpu`), and a
    node that differs in any of them runs nothing. Refusing native on Ray altogether would also refuse the
    homogeneous clusters on which it is sound."""

    numerics: str
    """the driver's numerics mode (mrl.numerics.mode)"""
    code: str
    """the driver's mrl code (mrl.fingerprint.code_fingerprint): a run's key and a family's folder depend on it"""
    cpu: dict | None = None
    """in native mode, the driver's CPU as native_cpu gives it, which every node must equal; None in portable mode"""


def native_cpu() -> dict:
    """This process's CPU model, torch's kernels, native bf16 and numerics state (mrl.runtime.results.machine, less
    the cores this process may use, which change no bits)."""
    from mrl.runtime.results import machine

    return {key: value for key, value in machine().items() if key != "cpus"}


def driver_contract() -> NodeContract:
    mode = numerics.mode()
    return NodeContract(numerics=mode, code=code_fingerprint(), cpu=native_cpu() if mode == "native" else None)


def node_differences(contract: NodeContract) -> list[str]:
    """What in this process differs from `contract`, one phrase each (empty: it computes as the driver does)."""
    differences = []
    if numerics.mode() != contract.numerics:
        differences.append(f"its numerics mode is {numerics.mode()} (the driver's: {contract.numerics})")
    elif contract.numerics == "portable":
        differences += numerics.deviations(numerics.state())
    elif contract.cpu is not None:
        here = native_cpu()
        differences += [f"in native numerics its {key} is {here.get(key)!r} (the driver's: {value!r}): native bits "
                        f"are the CPU's own; run every node on the driver's CPU, or use portable numerics"
                        for key, value in contract.cpu.items() if here.get(key) != value]
    if code_fingerprint() != contract.code:
        differences.append(f"its mrl code differs (fingerprint {code_fingerprint()}, the driver's {contract.code}): "
                           f"install the driver's commit on every node")
    return differences


def folder_files(folder: Path) -> dict[str, bytes]:
    """{path relative to `folder`: bytes} of every file below it."""
    folder = Path(folder)
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def write_files(files: dict[str, bytes], folder: Path) -> Path:
    """Write folder_files' mapping under `folder`; returns it."""
    folder = Path(folder)
    for name, data in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return folder


@dataclass(frozen=True)
class Task:
    """One job for a node: fn(job, folders), where `folders` maps each driver folder in `reads` to its copy on the
    node. fn is a module-level function of an installed module (Ray ships it by name)."""

    fn: Callable
    job: object
    label: str
    """the job in words, for the progress bar and errors"""
    reads: tuple[str, ...] = ()
    """the driver's folders the job reads (shipped as their files, each once per grid)"""
    modules: tuple[str, ...] = ()
    """the modules fn imports on the node by name (a run's probe): a user's are shipped with the grid
    (task_environment)"""
    deadline: float | None = None
    """seconds the job may run, from when it reports its start on the progress board (Board), before it is cancelled
    (a run: mrl.experiments.runs.packed_deadline; a warm-up: mrl.runtime.zoo_grid.warmup_deadline); None: no bound"""


@dataclass(frozen=True)
class Start:
    """A task's start as the board holds it: its node, and how many times it has started (Ray reruns a task whose
    node or worker died; each start restarts its deadline)."""

    node: str
    attempt: int


@dataclass
class Board:
    """Which task runs on which node, as the tasks report it when they start (a Ray actor of no CPU)."""

    running: dict = field(default_factory=dict)

    def started(self, index: int, node: str) -> None:
        self.running[index] = Start(node, self.running[index].attempt + 1 if index in self.running else 1)

    def snapshot(self) -> dict:
        return dict(self.running)


def on_node(fn: Callable, job, index: int, board, contract: NodeContract, reads: tuple[str, ...], *trees):
    """A task's body on its node: report its start, check the node (NodeRefused), write the folders it reads
    into a temporary folder and run fn(job, {driver folder: node folder}) there."""
    import ray

    node = ray.get_runtime_context().get_node_id()
    board.started.remote(index, node)
    differences = node_differences(contract)
    if differences:
        raise NodeRefused(f"node {node} ({ray.util.get_node_ip_address()}) runs nothing: {'; '.join(differences)}")
    with tempfile.TemporaryDirectory(prefix="mrl-task-") as scratch:
        folders = {read: str(write_files(tree, Path(scratch) / str(i) / Path(read).parent.name / Path(read).name))
                   for i, (read, tree) in enumerate(zip(reads, trees))}   # the last two names kept: a run's key
        # holds its checkpoints' folder names and an offline log's <key>/experience
        return fn(job, folders)


def map_on_ray(tasks: list[Task], what: str, progress: bool = True,
               on_progress: Callable[[dict], None] | None = None, max_retries: int = MAX_RETRIES,
               memory: int = 0, on_result: Callable[[int, object], None] | None = None) -> list:
    """[task.fn(task.job, ...) for task in tasks], each a Ray task of one CPU on the connected cluster, in order;
    with on_result, on_result(index, result) as each task ends instead (its result then not kept: a driver that
    dies mid-grid has stored every result that came back).

    Tasks are submitted in the order given (the caller's: longest first), no more at once than the cluster has
    CPUs, so Ray holds a short queue and a node that joins takes the next; each reserves `memory` bytes of its
    node's (Ray's memory resource: a job's measured peak, mrl.runtime.capacity), so no node takes more than it holds.
    A task whose node dies is retried (max_retries); one that raises, or is lost beyond its retries, stops the grid:
    the others are cancelled and GridTaskFailed names the job, its node and its error (a node that cannot compute as
    the driver does says why: NodeRefused). Nothing waits forever: a task still running `task.deadline` seconds after
    it reported its start is cancelled (GridTaskTimedOut), and when no live node can hold a task's resources for
    PLACEMENT_SECONDS the grid is refused (NoNodeFits). A progress bar counts finished tasks and names the running
    ones; on_progress({label: node id}) is called with the running ones whenever that changes (tests remove a node
    there)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    if not tasks:
        return []
    contract = driver_contract()
    here = ray.get_runtime_context().get_node_id()
    # beside the driver where Ray can; restarted, empty, where its node dies (a task reports its start again when
    # Ray reruns it)
    board = ray.remote(Board).options(num_cpus=0, max_restarts=-1, max_task_retries=-1,
                                      scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=True)).remote()
    modules = tuple(sorted({module for task in tasks for module in task.modules}))
    remote = ray.remote(on_node).options(num_cpus=1, memory=memory or None, max_retries=max_retries,
                                         runtime_env=task_environment(modules))
    shipped = {read: ray.put(folder_files(Path(read))) for read in dict.fromkeys(r for t in tasks for r in t.reads)}
    results, queue, in_flight, seen = [None] * len(tasks), list(range(len(tasks))), {}, None
    clock = Clock()
    bar = tqdm(total=len(tasks), desc=f"{what} on Ray", disable=not progress)
    try:
        while queue or in_flight:
            while queue and len(in_flight) < max(1, int(ray.cluster_resources().get("CPU", 1))):
                i = queue.pop(0)
                task = tasks[i]
                ref = remote.remote(task.fn, task.job, i, board, contract, task.reads,
                                    *(shipped[read] for read in task.reads))
                in_flight[ref] = i
            done, _ = ray.wait(list(in_flight), num_returns=1, timeout=POLL_SECONDS)
            clock.read(running_nodes(board), set(in_flight.values()))
            # the tasks in flight as the board saw them, those that just ended included: a rerun that ends between
            # two polls is still named once
            running = {tasks[i].label: start.node for i, start in clock.starts.items() if i in in_flight.values()}
            if running != seen:
                seen = running
                bar.set_postfix_str(running_postfix(list(running)), refresh=True)
                if on_progress is not None:
                    on_progress(running)
            for ref in done:
                i = in_flight.pop(ref)
                try:
                    result = ray.get(ref)
                except ray.exceptions.RayTaskError as err:
                    node = clock.node(i)
                    raise GridTaskFailed(f"{what}: {tasks[i].label} failed on node {node}: "
                                         f"{type(err.cause).__name__}: {err.cause}") from None
                except ray.exceptions.RayError as err:   # its worker or node lost beyond max_retries
                    raise GridTaskFailed(f"{what}: {tasks[i].label} was lost after {max_retries} retries: "
                                         f"{type(err).__name__}: {err}") from None
                if on_result is None:
                    results[i] = result
                else:
                    on_result(i, result)
                bar.update(1)
            for ref, i in list(in_flight.items()):
                if clock.overdue(i, tasks[i].deadline):
                    del in_flight[ref]
                    ray.cancel(ref, force=True)
                    raise GridTaskTimedOut(f"{what}: {tasks[i].label} ran past its deadline of "
                                           f"{tasks[i].deadline:.0f} s on node {clock.node(i)} and was cancelled")
            waiting = set(in_flight.values()) - set(clock.starts)
            clock.placeable(bool(waiting) and not nodes_that_fit(memory))
            if clock.unplaceable_for() > PLACEMENT_SECONDS:
                raise NoNodeFits(f"{what}: no live node of the cluster can hold {tasks[min(waiting)].label}, a task "
                                 f"of 1 CPU and {memory / 2**30:.2f} GiB of memory (waited {PLACEMENT_SECONDS:.0f} s;"
                                 f" the live nodes: {live_nodes_in_words() or 'none'}); add such a node")
    except BaseException:
        for ref in in_flight:
            ray.cancel(ref, force=True)
        raise
    finally:
        bar.close()
        ray.kill(board)
    return results


class Clock:
    """The driver's view of each task's start (the board's, timed by the driver's clock when it first sees a start,
    so a node's clock never matters) and of how long a task has found no node to hold it."""

    def __init__(self):
        self.starts: dict[int, Start] = {}
        self.since: dict[int, float] = {}
        self.unplaceable_since: float | None = None

    def read(self, board: dict, in_flight: set) -> None:
        """Take the board's starts of the tasks in flight; a new start (another node, or a rerun) restarts a task's
        deadline. A start the board lost (it was restarted with its node) is kept."""
        now = time.monotonic()
        for i, start in board.items():
            if i in in_flight and self.starts.get(i) != start:
                self.starts[i], self.since[i] = start, now

    def overdue(self, i: int, deadline: float | None) -> bool:
        return deadline is not None and i in self.since and time.monotonic() - self.since[i] > deadline

    def node(self, i: int) -> str:
        return self.starts[i].node if i in self.starts else "? (it had not reported its start)"

    def placeable(self, unplaceable: bool) -> None:
        if not unplaceable:
            self.unplaceable_since = None
        elif self.unplaceable_since is None:
            self.unplaceable_since = time.monotonic()

    def unplaceable_for(self) -> float:
        return 0.0 if self.unplaceable_since is None else time.monotonic() - self.unplaceable_since


RUNNING_SHOWN = 4
"""how many running tasks the progress bar names (the others are counted)"""


def running_postfix(labels: list[str], shown: int = RUNNING_SHOWN) -> str:
    """The progress bar's postfix: the first `shown` running tasks by name, the others counted (a grid on hundreds of
    CPUs would otherwise print hundreds of labels)."""
    more = f" and {len(labels) - shown} more" if len(labels) > shown else ""
    return "running: " + ", ".join(labels[:shown]) + more


def nodes_that_fit(memory: int) -> list[dict]:
    """The live nodes whose resources hold a task of one CPU and `memory` bytes (when idle)."""
    import ray

    return [node for node in ray.nodes() if node.get("Alive") and node["Resources"].get("CPU", 0) >= 1
            and node["Resources"].get("memory", 0) >= memory]


def live_nodes_in_words() -> str:
    import ray

    return "; ".join(f"{node['NodeManagerAddress']}: {node['Resources'].get('CPU', 0):g} CPU, "
                     f"{node['Resources'].get('memory', 0) / 2**30:.2f} GiB"
                     for node in ray.nodes() if node.get("Alive"))


def running_nodes(board) -> dict[int, Start]:
    """{task index: its Start} of the tasks that reported their start ({} when the board is gone with its node)."""
    import ray

    try:
        return ray.get(board.snapshot.remote(), timeout=60)
    except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
        return {}

"""What the tests share besides fixtures: the tiny zoo's task and families, and runs several test files repeat.
Test files import these from here, not from conftest.py: a Ray or process worker that unpickles a test-defined class
re-imports its test module, and `conftest` there may name the repository root's conftest.py (make test's xdist
hooks), which would kill the worker as it starts."""
import os
import signal
from pathlib import Path

from filelock import FileLock

from mrl.runtime.actor import PolicyActor

TINY_TASK = dict(max_operand=9, test_per_skill=10, pool_per_skill=5, leak_n=10)
"""the task of the runner and soak tests' tiny zoo (TaskConfig keywords)"""


SMALL = dict(d_model=64, n_layers=2, n_heads=2, n_kv_heads=1, d_ff=128)
MIX = {"S1": 0.34, "S2": 0.33, "S3": 0.33}


def tiny_zoo(families, root) -> dict[str, str]:
    """Small families warmed up 150 steps on TINY_TASK into `root`: {name: checkpoint folder}."""
    from mrl.core.config import TaskConfig, WarmupConfig, ZooConfig
    from mrl.runtime.zoo import build_zoo

    zoo = build_zoo(TaskConfig(**TINY_TASK), ZooConfig(families=families, warmup=WarmupConfig(
        steps=150, batch_size=64, lr_warmup_steps=10), workers=2), root=root, progress=False)
    return {name: str(policy.path) for name, policy in zoo.items()}


def metrics(record) -> tuple[list, list]:
    """A run's step rows without their timings, and its evaluations: what two runs of one experiment must give alike
    (on another backend, after a resume, from the cache)."""
    return [{k: v for k, v in row.items() if not k.endswith("seconds")} for row in record.steps], record.evals


def run_of(paths: dict, task, grpo, runner=None, probe="grpo", variant=None, **config):
    """A Run (mrl.runtime.spec) of given checkpoint folders, as a test builds one: a RunConfig of `task`, `grpo`,
    `runner` and any other RunConfig field (threads, placement), the probe (a name or a config), the RL seed and steps
    of `grpo` (no zoo: the seed is not nested), and the peers' variant (default: honest)."""
    from mrl.core.config import RunnerConfig
    from mrl.core.probes import probe_config
    from mrl.core.run_config import RunConfig
    from mrl.runtime.spec import HONEST, Run

    run_config = RunConfig(task=task, grpo=grpo, runner=runner or RunnerConfig(), **config)
    probe = probe_config(probe) if isinstance(probe, str) else probe
    return Run(run_config, dict(paths), probe, grpo.seed, grpo.steps, variant or HONEST)


def pair_run_twice(tiny_zoo_paths, probe: str) -> tuple[list, list]:
    """A (GPT-2 + BPE) and B (Llama + Unigram) under `probe` through the runner, 3 steps, twice: (each run's step rows
    without timings, each run's evals)."""
    from mrl.core.config import GrpoConfig, TaskConfig
    from mrl.runtime.runner import run_concurrent

    paths = {name: tiny_zoo_paths[name] for name in ("A", "B")}
    grpo = GrpoConfig(steps=3, prompts_per_step=4, group_size=4, lr=3e-4, eval_every=3, seed=0)
    runs = [run_concurrent(run_of(paths, TaskConfig(**TINY_TASK), grpo, probe=probe), progress=False)
            for _ in range(2)]
    return [metrics(r)[0] for r in runs], [r.evals for r in runs]


def shared_tiny_zoo(families, root: Path) -> dict[str, str]:
    """tiny_zoo into `root`, one worker at a time (the second waits, then loads what the first built)."""
    root.mkdir(parents=True, exist_ok=True)
    with FileLock(root / ".lock"):
        return tiny_zoo(families, root)


class CrashingActor(PolicyActor):
    """Worker B dies (SIGKILL of its own process) in the rollout of step 3."""

    def rollout(self, step, problems):
        if self.name == "B" and step == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        return super().rollout(step, problems)


def pid_then_wait(job, folders) -> None:
    """A grid task (mrl.runtime.cluster.Task) that writes its process id into the file `job` names, then waits
    forever: what a driver killed mid-grid leaves behind, unless Ray ends it."""
    import threading

    Path(job).write_text(str(os.getpid()))
    threading.Event().wait()


def touch(job, folders) -> str:
    """A grid task that creates the file `job` names; returns its name."""
    Path(job).touch()
    return Path(job).name


def pid_then_die(job, folders) -> None:
    """A grid task that writes its process id into the file `job` names, then kills its own process."""
    Path(job).write_text(str(os.getpid()))
    os.kill(os.getpid(), signal.SIGKILL)

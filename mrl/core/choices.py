"""The allowed values of the settings that name things, in a module that imports nothing of mrl's or torch (so that
`mrl --help` can offer them without importing torch): the MWRA backends, the trackers, the built-in probes, the
benchmarks. mrl.core.config and mrl.core.probes hold the same values (tests/test_cli.py checks the probes against
the registry)."""
import ast
from pathlib import Path

BACKENDS = ("inline", "process", "ray")
"""MWRA's backends (mrl.runtime.mwra.make_backend): actors in this process, one worker process each, one Ray actor
each"""
REPORT_TO = ("none", "tensorboard", "trackio", "wandb")
"""the trackers that can receive a run's live metrics (mrl.runtime.tracking.make_reporters)"""


def registered_names(source: str) -> list[str]:
    """The names a module's source registers: the first argument of every `@register_probe("name", ...)`."""
    return [decorator.args[0].value for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.FunctionDef) for decorator in node.decorator_list
            if isinstance(decorator, ast.Call) and getattr(decorator.func, "id", "") == "register_probe"
            and decorator.args and isinstance(decorator.args[0], ast.Constant)]


BUILTIN_PROBES = tuple(sorted(name for path in (Path(__file__).parent / "probes").glob("*.py")
                              for name in registered_names(path.read_text())))
"""the probes the package registers, read from the syntax of mrl/core/probes/*.py (a new probe there is one file:
mrl.core.probes imports every module of the folder); a user's join them through register_probe or the mrl.probes
entry-point group"""
BENCHMARKS = ("grpo_step", "rollout", "thl", "probes", "packing", "warmup", "mwra")
"""benchmarks/bench_<name>.py, in the order `make bench` and `mrl bench` run them"""

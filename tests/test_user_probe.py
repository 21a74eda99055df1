"""A user's own probe, written as a newcomer would: in a module outside mrl/, or in a notebook cell.

It runs on every backend (its workers import its module), and editing it gives a new run key, so the run cache never
hands back what the old code computed. Its every-backend test is also the Ray backend's test (one local Ray start in
make test's unit tests): Ray equals inline, and a dead actor is named."""
import dataclasses
import importlib
import os
import sys
import textwrap

import pytest

from testsupport import TINY_TASK, CrashingActor, metrics
from mrl.core.config import ConfigError, GrpoConfig, RunnerConfig, TaskConfig
from mrl.core.probes import PROBES, get_probe, probe_code, probe_config, require_importable
from mrl.runtime.mwra import WorkerFailed
from mrl.runtime.runner import RunSpec, run_concurrent

USER_PROBE = '''
"""A user's probe: GRPO's own term, scaled."""
from mrl.core.probes import PeerView, ProbeConfig, ProbeOutput, register_probe
from mrl.core.probes.terms import own_term
from mrl.core.validation import Float, config_dataclass

SCALE = {scale}


@config_dataclass(frozen=True)
class ScaledConfig(ProbeConfig):
    offset: Float = 0.0


@register_probe("{name}", config=ScaledConfig, kinds=("success",))
def scaled_loss(batch, peers: PeerView, cfg: ScaledConfig) -> ProbeOutput:
    own = own_term(batch)
    return ProbeOutput.single(None if own.loss is None else own.loss * SCALE + cfg.offset, own.active)


@register_probe("{name}_plain")
def plain_loss(batch, peers: PeerView, cfg: ProbeConfig) -> ProbeOutput:
    own = own_term(batch)
    return ProbeOutput.single(None if own.loss is None else own.loss * SCALE, own.active)
'''

GRPO = GrpoConfig(steps=2, prompts_per_step=4, group_size=4, lr=3e-4, eval_every=2, seed=0)


def write_probe(folder, module: str, name: str, scale: float) -> None:
    (folder / f"{module}.py").write_text(USER_PROBE.format(scale=scale, name=name))
    importlib.invalidate_caches()


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """A module user_probe_<test> in a folder on sys.path, registering probe `scaled`; removed afterwards."""
    module = "user_probe_module"
    monkeypatch.syspath_prepend(str(tmp_path))
    write_probe(tmp_path, module, "scaled", 1.0)
    importlib.import_module(module)
    yield tmp_path, module
    sys.modules.pop(module, None)
    PROBES.pop("scaled", None)
    PROBES.pop("scaled_plain", None)


@pytest.mark.slow
@pytest.mark.ray
def test_a_probe_in_a_users_module_runs_on_every_backend_and_a_dead_ray_actor_is_named(user_module, tiny_zoo_paths):
    """One local Ray for the whole test (its start-up is the test's costliest part): the user's probe gives the same
    losses inline, on worker processes and on Ray actors, and a Ray actor that dies is reported as dead, not as a
    missed deadline (no duration is asserted: Ray's start-up alone can take minutes on a loaded 2-core machine)."""
    ray = pytest.importorskip("ray")
    _, module = user_module
    assert get_probe("scaled").module == module
    paths = {name: tiny_zoo_paths[name] for name in ("A", "B")}
    ray.init(num_cpus=max(os.cpu_count() or 1, len(paths)), include_dashboard=False, log_to_driver=False)
    try:
        runs = {backend: run_concurrent(RunSpec(paths, TaskConfig(**TINY_TASK), GRPO,
                                                RunnerConfig(backend=backend, step_timeout=300),
                                                probe=probe_config("scaled", offset=0.5)), progress=False)
                for backend in ("inline", "process", "ray")}
        assert metrics(runs["inline"]) == metrics(runs["process"]) == metrics(runs["ray"])
        assert any(row["loss"] != 0 for row in runs["inline"].steps)
        with pytest.raises(WorkerFailed, match="worker 'B' failed: its actor died"):
            run_concurrent(RunSpec(paths, TaskConfig(**TINY_TASK), dataclasses.replace(GRPO, steps=3),
                                   RunnerConfig(backend="ray", step_timeout=60), actor_cls=CrashingActor),
                           progress=False)
    finally:
        ray.shutdown()


def test_packed_runs_import_a_users_probe_module_in_their_processes(user_module, tiny_zoo_paths, tmp_path,
                                                                     monkeypatch):
    """A probe whose config is the base ProbeConfig: unpickling the run imports nothing of the user's, so each
    packed process imports the probe's module first."""
    from mrl.experiments import run_many
    from mrl.experiments.runs import Run

    monkeypatch.chdir(tmp_path)   # the run cache goes under this folder's results/
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "mrl").mkdir()
    from mrl.core.run_config import RunConfig

    config = RunConfig(task=TaskConfig(**TINY_TASK), grpo=GRPO, runner=RunnerConfig(step_timeout=300), packed_runs=2)
    paths = {name: tiny_zoo_paths[name] for name in ("A", "B")}
    runs = [({"seed": seed}, Run(config, paths, probe_config("scaled_plain"), seed, 2)) for seed in (0, 1)]
    packed, _ = run_many(runs, packed_runs=2, progress=False)
    assert all(run.is_cached() for _, run in runs)
    inline = run_concurrent(RunSpec(paths, TaskConfig(**TINY_TASK), GRPO, RunnerConfig(),
                                    probe=probe_config("scaled_plain")), progress=False)
    assert packed[packed.seed == 0].loss.tolist() == [row["loss"] for row in inline.steps]


def test_a_users_probe_edited_on_disk_but_not_reloaded_is_refused(user_module):
    """The process still runs the imported code: keying it by the new file would cache old numbers as new."""
    folder, module = user_module
    write_probe(folder, module, "scaled", 3.0)
    with pytest.raises(Exception, match="changed on disk since it was imported.*reload"):
        probe_code("scaled")
    importlib.reload(sys.modules[module])
    assert probe_code("scaled")


def test_a_notebook_probe_reading_a_global_the_key_cannot_hold_is_refused(monkeypatch):
    import torch

    namespace = {"__name__": "__main__", "WEIGHTS": torch.ones(2)}
    monkeypatch.setattr(sys.modules["__main__"], "__file__", None, raising=False)
    exec(textwrap.dedent(USER_PROBE.format(scale="WEIGHTS", name="cell_tensor")), namespace)
    try:
        with pytest.raises(ValueError, match="reads the global 'SCALE' \\(a Tensor\\).*config"):
            probe_code("cell_tensor")
    finally:
        PROBES.pop("cell_tensor", None)
        PROBES.pop("cell_tensor_plain", None)


def test_editing_a_users_probe_changes_its_code_fingerprint(user_module):
    folder, module = user_module
    before = probe_code("scaled")
    assert before and probe_code("grpo") == ""   # the package's own probes are in the package's fingerprint
    (folder / f"{module}.py").write_text((folder / f"{module}.py").read_text().replace('"""A user', '"""Still a user'))
    importlib.reload(sys.modules[module])   # a docstring edit: the same code
    assert probe_code("scaled") == before
    write_probe(folder, module, "scaled", 50.0)
    importlib.reload(sys.modules[module])   # registering the same definition again replaces it
    assert probe_code("scaled") != before


def test_another_modules_probe_of_the_same_name_is_refused(user_module):
    folder, _ = user_module
    write_probe(folder, "user_probe_clash", "scaled", 2.0)
    with pytest.raises(ValueError, match="already registered by user_probe_module.scaled_loss"):
        importlib.import_module("user_probe_clash")
    sys.modules.pop("user_probe_clash", None)


def test_a_worker_imports_the_probes_module_when_it_does_not_know_the_probe(user_module):
    _, module = user_module
    PROBES.pop("scaled")
    sys.modules.pop(module)
    assert get_probe("scaled", module).module == module


def test_a_notebook_cell_probe_is_refused_on_worker_backends_with_the_fix(monkeypatch):
    namespace = {"__name__": "__main__"}
    monkeypatch.setattr(sys.modules["__main__"], "__file__", None, raising=False)
    exec(textwrap.dedent(USER_PROBE.format(scale=1.0, name="cell_probe")), namespace)
    try:
        require_importable("cell_probe", "inline")
        with pytest.raises(Exception, match="notebook cell .* backend='inline', or move scaled_loss and ScaledConfig"):
            require_importable("cell_probe", "process")
    finally:
        PROBES.pop("cell_probe", None)
        PROBES.pop("cell_probe_plain", None)


CELLS = [
    '''import json
import mrl
from mrl.core.config import GrpoConfig, RunnerConfig, TaskConfig
from mrl.core.probes import PeerView, ProbeConfig, ProbeOutput, probe_config, register_probe
from mrl.core.probes.terms import own_term
from mrl.core.run_config import RunConfig
from mrl.experiments.runs import Run, run_one
paths = json.loads({paths!r})
config = RunConfig(task=TaskConfig(**json.loads({task!r})), grpo=GrpoConfig(steps=2, prompts_per_step=4, group_size=4,
                   lr=3e-4, eval_every=2), runner=RunnerConfig(backend="inline"))
seen = {{}}''',
    '''SCALE = 1.0''',
    '''def scaled(loss):
    return None if loss is None else loss * SCALE''',
    '''from mrl.core.validation import Float, config_dataclass

@config_dataclass(frozen=True)
class CellConfig(ProbeConfig):
    offset: Float = 0.0

@register_probe("cell_probe", config=CellConfig)
def cell_loss(batch, peers: PeerView, cfg: CellConfig) -> ProbeOutput:
    own = own_term(batch)
    loss = scaled(own.loss)
    return ProbeOutput.single(None if loss is None else loss + cfg.offset, own.active)''',
    '''def run(tag):
    run = Run(config, paths, probe_config("cell_probe"), 0, 2)
    cached = run.is_cached()
    steps, _ = run_one(run)
    seen[tag] = {{"key": run.key(), "cached": cached, "loss": steps[steps.step == 1].loss.tolist()}}
run("first")''',
    '''run("again")''',
    '''SCALE = 50.0''',
    '''run("scale edited")''',
    '''def scaled(loss):
    return None if loss is None else 2 * loss * SCALE''',
    '''run("helper edited")''',
    '''print(json.dumps(seen))''',
]


def test_a_probe_written_in_notebook_cells_is_rerun_after_an_edit(tiny_zoo_paths, tmp_path):
    """Cells define a probe, its helper and a constant; running it twice reads the cache; after an edit of the
    constant or the helper (as a user re-runs an edited cell) the run has a new key and runs again."""
    import json

    import nbformat
    from nbclient import NotebookClient

    from testsupport import TINY_TASK

    (tmp_path / "pyproject.toml").write_text("")   # the run cache goes under this folder's results/
    (tmp_path / "mrl").mkdir()
    paths = {name: tiny_zoo_paths[name] for name in ("A", "B")}
    cells = [cell.format(paths=json.dumps(paths), task=json.dumps(TINY_TASK)) for cell in CELLS]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cell) for cell in cells])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    NotebookClient(notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
                   ).execute()
    seen = json.loads(notebook.cells[-1].outputs[0]["text"])
    first, again, scale, helper = (seen[tag] for tag in ("first", "again", "scale edited", "helper edited"))
    assert not first["cached"] and again["cached"] and again["key"] == first["key"]
    assert len({first["key"], scale["key"], helper["key"]}) == 3 and not scale["cached"] and not helper["cached"]
    for edited, factor in ((scale, 50.0), (helper, 100.0)):   # step 1: the same samples, the loss times the edit
        assert edited["loss"] == pytest.approx([factor * loss for loss in first["loss"]], rel=1e-5)


def test_a_module_executed_without_sys_modules_is_fingerprinted_from_its_file(tmp_path):
    """importlib.util.spec_from_file_location + exec_module registers nothing in sys.modules: the probe's code is
    read from the spec's origin (its key equals the imported module's), and a backend whose workers would have to
    import the module is refused, naming how to import it."""
    import importlib.util

    write_probe(tmp_path, "user_probe_loose", "loose", 2.0)
    spec = importlib.util.spec_from_file_location("user_probe_loose", tmp_path / "user_probe_loose.py")
    try:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
        assert "user_probe_loose" not in sys.modules and not get_probe("loose").importable
        loose = probe_code("loose")
        with pytest.raises(ConfigError, match="not in sys.modules .* importlib.import_module"):
            require_importable("loose", "process")
        require_importable("loose", "inline")
    finally:
        PROBES.pop("loose", None)
        PROBES.pop("loose_plain", None)
    sys.path.insert(0, str(tmp_path))
    try:
        importlib.import_module("user_probe_loose")
        assert probe_code("loose") == loose != "" and get_probe("loose").importable
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("user_probe_loose", None)
        PROBES.pop("loose", None)
        PROBES.pop("loose_plain", None)


def test_a_class_whose_module_cannot_be_found_is_refused_with_the_fix():
    from mrl.fingerprint import user_code_fingerprint

    Orphan = type("Orphan", (), {"__module__": "nowhere_module"})
    with pytest.raises(ValueError, match="'nowhere_module' is not in sys.modules.*sys.modules\\[spec.name\\] = module"):
        user_code_fingerprint([Orphan])

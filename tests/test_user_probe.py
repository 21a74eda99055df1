"""A user's own probe, written as a newcomer would: in a module outside mrl/, or in a notebook cell.

In a module it runs on every backend (its workers import its module), and editing it gives a new run key, so the run
cache never hands back what the old code computed. In a notebook cell it runs inline and uncached. Its every-backend
test is also the Ray backend's test (one local Ray start in make test's unit tests): Ray equals inline, and a dead
actor is named."""
import dataclasses
import importlib
import os
import sys
import textwrap

import pytest

from testsupport import TINY_TASK, CrashingActor, metrics, run_of
from mrl.core.config import ConfigError, GrpoConfig, RunnerConfig, TaskConfig
from mrl.core.probes import PROBES, get_probe, probe_code, probe_config, require_importable
from mrl.runtime.mwra import WorkerFailed
from mrl.runtime.runner import run_concurrent

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
def scaled_loss(batch, peers: PeerView, learner, cfg: ScaledConfig) -> ProbeOutput:
    own = own_term(batch, learner)
    return ProbeOutput.single(None if own.loss is None else own.loss * SCALE + cfg.offset, own.active)


@register_probe("{name}_plain")
def plain_loss(batch, peers: PeerView, learner, cfg: ProbeConfig) -> ProbeOutput:
    own = own_term(batch, learner)
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
        runs = {backend: run_concurrent(run_of(paths, TaskConfig(**TINY_TASK), GRPO,
                                                RunnerConfig(backend=backend, step_timeout=300),
                                                probe=probe_config("scaled", offset=0.5)), progress=False)
                for backend in ("inline", "process", "ray")}
        assert metrics(runs["inline"]) == metrics(runs["process"]) == metrics(runs["ray"])
        assert any(row["loss"] != 0 for row in runs["inline"].steps)
        with pytest.raises(WorkerFailed, match="worker 'B' failed: its actor died"):   # B alone: one actor to start
            run_concurrent(run_of({"B": paths["B"]}, TaskConfig(**TINY_TASK), dataclasses.replace(GRPO, steps=3),
                                   RunnerConfig(backend="ray", step_timeout=60)),
                           actor_cls=CrashingActor, progress=False)
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
    inline = run_concurrent(run_of(paths, TaskConfig(**TINY_TASK), GRPO, RunnerConfig(),
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


def test_a_probe_written_in_notebook_cells_runs_uncached_with_a_warning_and_an_edit_takes_effect(
        tiny_zoo_paths, tmp_path, monkeypatch):
    """No file holds a cell's code, so no cache key can: each run computes (without checkpoints, though the profile
    asks for them), warns why and names the fix, and writes nothing under results/; a constant edited in a cell (as a
    user re-runs it) changes the next run at once; what it cannot do (resume, trained_paths' keyed folder) is refused,
    and its tables go to an output folder when one is named."""
    from mrl.core.run_config import RunConfig
    from mrl.experiments.runs import Run, run_one, trained_paths

    monkeypatch.chdir(tmp_path)   # the run cache would go under this folder's results/
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "mrl").mkdir()
    namespace = {"__name__": "__main__"}
    monkeypatch.setattr(sys.modules["__main__"], "__file__", None, raising=False)
    exec(textwrap.dedent(USER_PROBE.format(scale=1.0, name="cell_probe")), namespace)
    config = RunConfig(task=TaskConfig(**TINY_TASK), grpo=GRPO, runner=RunnerConfig(backend="inline",
                                                                                     checkpoint_every=1))
    run = Run(config, {name: tiny_zoo_paths[name] for name in ("A", "B")}, probe_config("cell_probe"), 0, 2)
    try:
        assert probe_code("cell_probe") == "" and not run.cacheable
        with pytest.warns(UserWarning, match="'cell_probe' is written in a notebook cell.*never cached.*py module"):
            first, _ = run_one(run)
        assert not run.is_cached() and not (tmp_path / "results").exists()
        namespace["SCALE"] = 50.0
        with pytest.warns(UserWarning, match="never cached"):
            edited, _ = run_one(run, output_dir=tmp_path / "out")
        assert {"steps.csv", "evals.csv", "run.json", "A", "B"} <= {p.name for p in (tmp_path / "out").iterdir()}
        with pytest.raises(ConfigError, match="resume = True is not allowed with probe 'cell_probe'"):
            run_one(run, output_dir=tmp_path / "out", resume=True)
        with pytest.raises(ConfigError, match="trained_paths is not allowed with probe 'cell_probe'"):
            trained_paths(run)
        assert not (tmp_path / "results").exists()
    finally:
        PROBES.pop("cell_probe", None)
        PROBES.pop("cell_probe_plain", None)
    assert edited[edited.step == 1].loss.tolist() == pytest.approx(
        [50.0 * loss for loss in first[first.step == 1].loss], rel=1e-5)   # step 1: the same samples, 50 x the loss


def test_a_probe_whose_config_class_is_written_in_a_cell_is_a_cell_probe(user_module, monkeypatch):
    """The loss in a module, its config class in a cell: no file holds all its code, so it is not keyed either."""
    from mrl.core.probes import register_probe

    _, module = user_module
    namespace = {"__name__": "__main__"}
    monkeypatch.setattr(sys.modules["__main__"], "__file__", None, raising=False)
    exec("from mrl.core.probes import ProbeConfig\nfrom mrl.core.validation import config_dataclass\n"
         "@config_dataclass(frozen=True)\nclass CellConfig(ProbeConfig):\n    pass\n", namespace)
    register_probe("mixed", config=namespace["CellConfig"])(sys.modules[module].plain_loss)
    try:
        assert get_probe("mixed").in_cells and probe_code("mixed") == ""
    finally:
        PROBES.pop("mixed", None)


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


def test_a_cell_probe_as_the_scaling_probe_is_refused_before_any_run(monkeypatch):
    """The scaling table reads each run's wall seconds from its run cache entry, which a cell probe never has."""
    from mrl.experiments.beyond import run_scaling
    from mrl.profiles import load_profile

    namespace = {"__name__": "__main__"}
    monkeypatch.setattr(sys.modules["__main__"], "__file__", None, raising=False)
    exec(textwrap.dedent(USER_PROBE.format(scale=1.0, name="cell_scaling")), namespace)
    try:
        smoke = load_profile("smoke")
        beyond = dataclasses.replace(smoke.experiment("beyond"), scaling_probe="cell_scaling")
        config = dataclasses.replace(smoke, experiments={**smoke.experiments, "beyond": beyond})
        with pytest.raises(ConfigError, match="BeyondConfig.scaling_probe = 'cell_scaling' is not allowed"):
            run_scaling(config, progress=False)
    finally:
        PROBES.pop("cell_scaling", None)
        PROBES.pop("cell_scaling_plain", None)


PACKAGE_PROBE = '''
"""scaled_in_package: GRPO's own term, doubled (a probe of the package, written as one file)."""
from mrl.core.batch import Learner, RolloutBatch
from mrl.core.probes.contract import PeerView, ProbeConfig, ProbeOutput, register_probe
from mrl.core.probes.terms import own_term


@register_probe("scaled_in_package")
def scaled_in_package_loss(batch: RolloutBatch, peers: PeerView, learner: Learner, cfg: ProbeConfig) -> ProbeOutput:
    own = own_term(batch, learner)
    return ProbeOutput.single(None if own.loss is None else 2 * own.loss, own.active)
'''


def test_a_probe_of_the_package_is_one_file(tmp_path):
    """A copy of the package with one new file in mrl/core/probes/ and no other edit: the registry holds it (a run
    finds it by name), the command line lists it without importing torch, the figures give it a colour of its own."""
    import shutil
    import subprocess

    from mrl.paths import PACKAGE

    shutil.copytree(PACKAGE, tmp_path / "mrl", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "mrl" / "core" / "probes" / "scaled_in_package.py").write_text(PACKAGE_PROBE)
    code = textwrap.dedent("""
        import sys
        from mrl.core.choices import BUILTIN_PROBES
        assert "scaled_in_package" in BUILTIN_PROBES and "torch" not in sys.modules
        from mrl.core.probes import PROBES, probe_config
        from mrl.reports.palette import SPARE_COLOURS, probe_colour
        assert PROBES["scaled_in_package"].module == "mrl.core.probes.scaled_in_package"
        assert probe_colour("scaled_in_package") in SPARE_COLOURS
        print(probe_config("scaled_in_package").name)
    """)
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert done.returncode == 0 and done.stdout.strip() == "scaled_in_package", done.stdout + done.stderr

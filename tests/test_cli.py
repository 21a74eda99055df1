"""The `mrl` command line and results as data: --help lists the allowed values, bad requests are refused by field,
`mrl run` from a YAML file with a flag overriding it writes a run that `load_runs` reads back equal to what the
run returned, as a DataFrame and as a datasets.Dataset."""
import json
import shutil
import subprocess
import sys

import pandas as pd
import pytest

from mrl import cli, command
from mrl.core.config import ConfigError
import mrl.experiments.runs
import mrl.runtime.spec
from mrl.profiles import load_profile
from mrl.runtime.results import RunCacheWarning, load_runs, write_run_record


def help_text(*args) -> str:
    done = subprocess.run([sys.executable, "-m", "mrl.command", *args, "--help"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_help_lists_the_commands_and_allowed_values():
    assert all(command in help_text() for command in ("reproduce", "run", "bench"))
    run = help_text("run")
    for value in ("smoke", "default", "paper", "inline", "process", "ray", "tensorboard", "trackio", "sgt", "hacpo",
                  "xgrpo", "prp_naive"):
        assert value in run
    assert "--only" in help_text("reproduce") and "grpo_step" in help_text("bench")


@pytest.mark.parametrize("values, field", [({"profile": "huge"}, "profile"), ({"backend": "slurm"}, "backend"),
                                            ({"report_to": "comet"}, "report_to"), ({"steps": 0}, "steps"),
                                            ({"seed": "1"}, "seed"), ({"colour": "red"}, "colour")])
def test_bad_requests_are_refused_by_field(values, field):
    with pytest.raises(ConfigError, match=field):
        cli.RunRequest(**values)


def test_unknown_benchmark_and_policy_are_refused(capsys):
    with pytest.raises(SystemExit):
        command.main(["bench", "nothing"])
    assert "grpo_step" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        command.main(["run", "--policies", "A+Z", "--steps", "1"])
    assert "policies" in capsys.readouterr().err


@pytest.mark.parametrize("setting, message", [
    ("grpo.lr=abc", "RunConfig.grpo.lr = 'abc' is not allowed; expected a number"),
    ("grpo.nonexistent=1", "RunConfig.grpo: unknown key(s) ['nonexistent']; allowed keys are ['beta'"),
    ("grpo.loss_type=ppo", "RunConfig.grpo.loss_type = 'ppo' is not allowed; expected one of ['grpo', 'bnpo'"),
    ("grpo.group_size=1", "RunConfig.grpo.group_size = 1 is not allowed; expected an integer >= 2"),
    ("optimizer.lr=1e-6", "RunConfig.optimizer is not a group of settings; allowed keys at RunConfig are"),
    ("lr", "expected a dotted path into the profile's config and a value")])
def test_a_bad_setting_is_refused_naming_the_field_and_what_is_allowed(setting, message, capsys):
    with pytest.raises(SystemExit):
        command.main(["run", "--set", setting])
    assert message in capsys.readouterr().err


def test_settings_by_dotted_path_are_typed_and_validated_as_the_profile_is():
    profile = load_profile("smoke")
    config = cli.set_settings(profile, ["grpo.lr=1e-6", "grpo.group_size=4", "placement.A.dtype=bfloat16",
                                        "runner.checkpoint_every=2", "experiments.probe.seeds=[0, 1]"])
    assert config.grpo.lr == 1e-6 and isinstance(config.grpo.lr, float) and config.grpo.group_size == 4
    assert config.placement_of("A").dtype == "bfloat16" and config.placement_of("B") == profile.placement_of("B")
    assert config.runner.checkpoint_every == 2 and config.experiment("probe").seeds == [0, 1]
    assert (config.task, config.zoo, config.grpo.steps) == (profile.task, profile.zoo, profile.grpo.steps)


@pytest.fixture
def tiny_profile(monkeypatch, tmp_path, tiny_zoo_paths):
    """`mrl run` on the smoke profile's settings with the tests' tiny zoo, its run cache under tmp_path."""
    monkeypatch.setattr(mrl.experiments.runs, "repo_root", lambda: tmp_path)
    monkeypatch.setattr(mrl.runtime.spec, "repo_root", lambda: tmp_path)
    monkeypatch.setattr(cli, "policy_paths", lambda config, progress=True: dict(tiny_zoo_paths))
    return tmp_path / "results" / "runs"


@pytest.mark.slow
def test_mrl_run_writes_a_run_that_load_runs_reads_back(tiny_profile, tmp_path, capsys):
    request = tmp_path / "run.yaml"
    request.write_text("policies: A+B\nprobe: {name: sgt, lam: 0.3}\nsteps: 3\nseed: 5\n")
    assert command.main(["run", "--config", str(request), "--seed", "1", "--backend", "inline"]) == 0
    assert "load_runs" in capsys.readouterr().out
    folder, steps, evals = cli.run_request(cli.RunRequest(policies="A+B", probe={"name": "sgt", "lam": 0.3},
                                                          steps=3, seed=1), progress=False)  # from the cache
    assert folder.parent == tmp_path / "results" / "trained" and (folder / "A" / "config.json").is_file()
    assert [run.parent.name for run in tiny_profile.glob("*/run.json")] == [folder.name]   # one run, of that key

    loaded = load_runs(tiny_profile, "evals")
    assert set(loaded.probe) == {"sgt (lam=0.3)"} and set(loaded.seed) == {1} and set(loaded.policies) == {"A+B"}
    pd.testing.assert_frame_equal(loaded[evals.columns].reset_index(drop=True), evals)
    loaded_steps = load_runs(tiny_profile, "steps")
    assert list(loaded_steps.step) == list(steps.step) and list(loaded_steps.reward) == list(steps.reward)
    assert loaded_steps.run.iloc[0] == folder.name and loaded_steps.steps.iloc[0] == 3
    events = load_runs(tiny_profile, "events")
    assert list(events.columns[:2]) == ["run", "probe"]
    dataset = load_runs(tiny_profile, "evals", as_dataset=True)
    assert dataset.num_rows == len(evals) and dataset[0]["probe"] == "sgt (lam=0.3)"


def test_load_runs_skips_unfinished_runs_and_checks_the_table(tmp_path):
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "steps.csv").write_text("policy,step\nA,1\n")  # no run.json: still running or killed
    assert load_runs(tmp_path).empty and "probe" in load_runs(tmp_path).columns
    run = tmp_path / "done"
    run.mkdir()
    (run / "evals.csv").write_text("policy,step,split,skill,accuracy,rollouts\nA,0,pool,S1,0.5,0\n")
    (run / "steps.csv").write_text("policy,step\nA,1\n")
    record = {"task": {"name": "arith-ops"}, "grpo": {"seed": 2, "steps": 10}, "probe": {"name": "prp", "clip": None},
              "policies": {"A": "/models/A-1234", "B": "/models/B-5678"},
              "events": [{"step": 3, "event": "dropped B"}], "backend": "inline", "git_sha": "abc"}
    write_run_record(run, record)
    unchecked = tmp_path / "unchecked"   # a run.json without checksums (format 1): skipped, named in a warning
    shutil.copytree(run, unchecked)
    (unchecked / "run.json").write_text(json.dumps(record))
    with pytest.warns(RunCacheWarning, match="unchecked"):
        evals = load_runs(tmp_path)
    shutil.rmtree(unchecked)
    assert evals.to_dict("records") == [{"run": "done", "probe": "prp (clip=None)", "seed": 2, "steps": 10,
                                         "policies": "A+B", "models": "A-1234 B-5678", "task": "arith-ops",
                                         "backend": "inline", "git_sha": "abc", "policy": "A", "step": 0,
                                         "split": "pool", "skill": "S1", "accuracy": 0.5, "rollouts": 0}]
    assert load_runs(tmp_path, "events").event.tolist() == ["dropped B"]
    with pytest.raises(ValueError, match="allowed values"):
        load_runs(tmp_path, "rewards")


def test_help_imports_nothing_heavy():
    """`mrl --help` and `mrl run --help` are answered by mrl.command, whose imports stop short of torch,
    transformers and the runtime (no time is asserted: what is imported is)."""
    code = ("import sys\nfrom mrl.command import parser\n"
            "for argv in (['--help'], ['run', '--help']):\n"
            "    try:\n        parser().parse_args(argv)\n    except SystemExit:\n        pass\n"
            "print(sorted(m for m in ('torch', 'transformers', 'mrl.cli', 'mrl.core.config', 'pandas') "
            "if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip().splitlines()[-1] == "[]", done.stdout + done.stderr


def test_the_built_in_probes_the_help_lists_are_the_registrys():
    from mrl.core.choices import BUILTIN_PROBES
    from mrl.core.probes import PROBES

    assert set(BUILTIN_PROBES) == {name for name, probe in PROBES.items() if probe.module.startswith("mrl.core.")}

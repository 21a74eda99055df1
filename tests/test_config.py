import dataclasses

import pytest

from mrl.core.config import FamilyConfig, GrpoConfig
from mrl.core.run_config import RunConfig, load_config
from mrl.core.validation import ConfigError, config_hash, override
from mrl.profiles import load_profile


def test_profiles_load_and_validate():
    for profile in ("smoke", "default"):
        config = load_profile(profile)
        assert isinstance(config, RunConfig)
        assert [f.name for f in config.zoo.families] == ["A", "B", "C"]
        assert {f.tokenizer for f in config.zoo.families} == {"bpe", "unigram", "wordpiece"}


def test_unknown_key_names_the_key_and_the_allowed_ones():
    with pytest.raises(ConfigError, match=r"RunConfig.grpo: unknown key\(s\) \['lr_rate'\].*'lr'"):
        load_config({"grpo": {"lr_rate": 1e-4}})


def test_bad_value_names_field_and_allowed_values():
    with pytest.raises(ConfigError,
                       match=r"RunConfig.grpo.loss_type = 'ppo'.*one of \['grpo', 'bnpo', 'dr_grpo', 'dapo'\]"):
        load_config({"grpo": {"loss_type": "ppo"}})
    with pytest.raises(ConfigError, match=r"group_size = 1 .*>= 2"):
        GrpoConfig(group_size=1)
    with pytest.raises(ConfigError, match=r"FamilyConfig.arch = 'bert'.*one of \['gpt2', 'llama'"):
        FamilyConfig(name="X", arch="bert")
    with pytest.raises(ConfigError, match=r"RunConfig.zoo.families.1.arch = 'bert'"):   # nested: its list index
        load_config({"zoo": {"families": [{"name": "A"}, {"name": "X", "arch": "bert"}]}})
    with pytest.raises(ConfigError, match=r"FamilyConfig\[X\].n_heads = 3 .*a divisor of d_model=128"):
        FamilyConfig(name="X", n_heads=3)   # a check spanning fields names the family
    with pytest.raises(ConfigError, match=r"warmup_mix.*summing to 1"):
        FamilyConfig(warmup_mix={"S1": 0.5})
    with pytest.raises(ConfigError, match=r"warmup_mix.S4.\[key\] = 'S4' .*a key like S1"):
        FamilyConfig(warmup_mix={"S4": 1.0})


def test_wrong_type_is_rejected_at_load():
    with pytest.raises(ConfigError, match=r"RunConfig.grpo.steps = 'ten' is not allowed; expected an integer"):
        load_config("grpo: {steps: ten}")


@pytest.mark.parametrize("text, message", [
    ("grpo:\n", r"RunConfig.grpo = None is not allowed; expected a mapping of its settings"),
    ("grpo: {lr: .inf}", r"RunConfig.grpo.lr = inf is not allowed; expected a finite number"),
    ("grpo: {temperature: .nan}", r"RunConfig.grpo.temperature = nan is not allowed; expected a finite number"),
    ("runner: {step_timeout: .inf}", r"RunConfig.runner.step_timeout = inf is not allowed; expected a finite number"),
    ("runner: {step_timeout: 0}", r"RunConfig.runner.step_timeout = 0 is not allowed; expected a number > 0"),
    ("grpo: {eps_low: 1.5}", r"RunConfig.grpo.eps_low = 1.5 is not allowed; expected a number in \(0, 1\)"),
    ("task: {max_operand: 5}", r"RunConfig.task.max_operand = 5 is not allowed; expected an integer in \[9, 999\]"),
    ("zoo: {families: []}", r"RunConfig.zoo.families = \[\] is not allowed; expected a non-empty list"),
    ("zoo: {warmup: {}}", r"RunConfig.zoo.families is missing; expected a value \(the field is required"),
    ("placement: {}\nrunner: {mode: later}", r"RunConfig.runner.mode = 'later' .*one of \['sync', 'async'\]"),
    ("notebooks: [99_x]", r"RunConfig.notebooks.0 = '99_x' .*one of \['00_zoo'"),
    ("pairings: {A-B: [A]}", r"RunConfig.pairings.A-B.\[key\] = 'A-B' .*a pairing name like 'A\+B'"),
    ("experiments: {probe: {pairings: [A+B]}}", r"ProbeGridConfig.probes is missing; expected a value"),
    ("experiments: {nothing: {}}", r"RunConfig.experiments = \['nothing'\] .*experiment names drawn from \['bandit'"),
    ("threads: 2\nthreads: 3", r"duplicate key 'threads' at line 2 \(first at line 1\)"),
    ("grpo: {steps: 3, steps: 4}", r"duplicate key 'steps'"),
    ("grpo: {steps: 2.5}", r"RunConfig.grpo.steps = 2.5 is not allowed; expected an integer"),
    ("grpo: {skip_zero_advantage: 'no'}", r"skip_zero_advantage = 'no' is not allowed; expected true or false"),
])
def test_every_field_is_checked_at_load_naming_it(text, message):
    with pytest.raises(ConfigError, match=message):
        load_config(text)


@pytest.mark.parametrize("experiment, changes, message", [
    ("probe", {"probes": [{"name": "sgt", "lam": float("inf")}]},
     r"SgtConfig.lam = inf .*finite"),
    ("hacpo", {"probes": [{"name": "hacpo", "alpha": float("inf")}]},
     r"HacpoConfig.alpha = inf .*finite"),
    ("hacpo", {"probes": [{"name": "hacpo", "delta_step": float("inf")}]},
     r"HacpoConfig.delta_step = inf"),
    ("hacpo", {"ablations": {"omega": [{"name": "hacpo", "omega": "no"}]}},
     r"HacpoGridConfig.ablations\['omega'\]: entry .* is not a valid probe: HacpoConfig.omega = 'no'"),
    ("probe", {"probes": ["grpo", "sgtt"]},
     r"ProbeGridConfig.probes: entry 'sgtt' is not a valid probe: .*expected one of \[.*'sgt'"),
    ("heldout", {"probes": ["grpo", {"name": "prp", "clipp": 2}]},
     r"HeldoutConfig.probes: entry .*clipp"),
    ("heldout", {"seeds": [0, 0]},
     r"HeldoutConfig.seeds = \[0, 0\] is not allowed; expected a list without repeated values"),
    ("beyond", {"scaling_sizes": [2, 9]},
     r"BeyondConfig.scaling_sizes = \[2, 9\] .*integers from 2 to 3"),
    ("bandit", {"kappas": [0.5, 1.5]},
     r"BanditConfig.kappas.1 = 1.5 is not allowed; expected a number in \(0, 1\]"),
    ("mwra", {"backends": ["slurm"]},
     r"MwraTimingConfig.backends.0 = 'slurm' .*one of \['inline', 'process', 'ray'\]"),
])
def test_every_grid_field_is_checked_at_load_naming_it(experiment, changes, message):
    """Each experiment's config (registered by its module of mrl.experiments) checks its fields and probe entries
    when the profile loads; here the smoke profile's grid with one change."""
    grids = {name: dataclasses.asdict(grid) for name, grid in load_profile("smoke").experiments.items()}
    with pytest.raises(ConfigError, match=message):
        load_config({"experiments": {experiment: {**grids[experiment], **changes}}})


def test_an_experiment_has_no_code_defaults_and_a_profile_only_the_experiments_it_runs():
    from mrl.core.grids import ProbeGridConfig

    with pytest.raises(ConfigError, match=r"ProbeGridConfig.pairings is missing"):
        ProbeGridConfig()
    paper = load_profile("paper")
    assert sorted(paper.experiments) == ["bandit", "hacpo", "probe"]
    with pytest.raises(ConfigError, match=r"no 'heldout' experiment in this profile"):
        paper.experiment("heldout")


def test_yaml_merge_keys_still_load():
    text = "grpo:\n  <<: {steps: 7, lr: 0.001}\n  steps: 9\n"
    assert load_config(text) == load_config({"grpo": {"steps": 9, "lr": 0.001}})  # a later key overrides a merge


def test_an_empty_file_is_an_error_not_every_default(tmp_path):
    (tmp_path / "empty.yaml").write_text("# nothing here\n")
    with pytest.raises(ConfigError, match=r"empty.yaml is empty"):
        load_config(tmp_path / "empty.yaml")
    assert load_config("{}") == RunConfig()  # all defaults, asked for explicitly


def test_configs_built_in_python_are_checked_like_yaml():
    from mrl.core.probes import probe_config

    with pytest.raises(ConfigError, match=r"GrpoConfig.steps = 2.5 is not allowed; expected an integer"):
        GrpoConfig(steps=2.5)
    with pytest.raises(ConfigError, match=r"GrpoConfig.lr = inf"):
        GrpoConfig(lr=float("inf"))
    with pytest.raises(ConfigError, match=r"HacpoConfig.omega = 'no' is not allowed; expected true or false"):
        probe_config("hacpo", omega="no")
    with pytest.raises(ConfigError, match=r"GrpoConfig.steps = True"):
        dataclasses.replace(GrpoConfig(), steps=True)
    assert GrpoConfig(lr=1).lr == 1.0  # an int is a number


def test_a_notebook_parameter_given_as_text_is_parsed_then_checked():
    """papermill -p probes '["sgtt"]' hands the notebook a string; override parses it, then validates it."""
    grid = load_profile("smoke").experiment("probe")
    assert override(grid, probes='["sgt", {name: prp, clip: 4.0}]', seeds="[0, 1]", steps=None).probes == \
        ["sgt", {"name": "prp", "clip": 4.0}]
    with pytest.raises(ConfigError, match=r"entry 'sgtt' is not a valid probe"):
        override(grid, probes='["sgtt"]')
    with pytest.raises(ConfigError, match=r"ProbeGridConfig.seeds = 'zero' is not allowed; expected a list"):
        override(grid, seeds="zero")
    with pytest.raises(ConfigError, match=r"ProbeGridConfig has no setting 'seed'"):
        override(grid, seed=[0])


def test_yaml_string_and_hash_stability():
    a = load_config("grpo: {steps: 10}\nthreads: 2")
    b = load_config({"grpo": {"steps": 10}, "threads": 2})
    assert a == b and config_hash(a) == config_hash(b)
    assert config_hash(a) != config_hash(load_config({"grpo": {"steps": 11}, "threads": 2}))


def test_a_profile_is_whole_in_its_yaml_and_its_grids_are_checked(tmp_path, monkeypatch):
    config = load_profile("default")
    assert config.runner.backend == "process" and config.experiment("probe").steps == {"A+B": 100}
    assert config.pairing("A+B+C") == ["A", "B", "C"] and config.experiment("bandit").reps == 600
    assert config.experiment("hacpo").ablations["alpha"][1] == "hacpo"   # HACPO's ablation axes are the profile's
    probe = {"pairings": ["A+D"], "probes": ["grpo"], "seeds": [0], "steps": {"A+D": 3}}
    with pytest.raises(ConfigError, match=r"RunConfig.experiments = 'A\+D'.*a pairing defined in pairings"):
        load_config({"experiments": {"probe": probe}})
    with pytest.raises(ConfigError, match=r"ProbeGridConfig.steps.A\+B = 0 is not allowed; expected an integer >= 1"):
        load_config({"experiments": {"probe": {**probe, "pairings": ["A+B"], "steps": {"A+B": 0}}}})
    with pytest.raises(ConfigError, match=r"ProbeGridConfig.steps = \{'A\+B': 3\}.*every pairing in \['A\+B', 'B'\]"):
        load_config({"experiments": {"probe": {**probe, "pairings": ["A+B", "B"], "steps": {"A+B": 3}}}})
    with pytest.raises(ConfigError, match=r"RunConfig.runner.backend = 'slurm'.*\['inline', 'process', 'ray'\]"):
        load_config({"runner": {"backend": "slurm"}})
    # a probe entry of a grid is checked against the registry when the profile loads
    (tmp_path / "configs").mkdir()
    (tmp_path / "mrl").mkdir()
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "configs" / "smoke.yaml").write_text(
        "experiments:\n  probe: {pairings: [A+B], seeds: [0], steps: {A+B: 1}, probes: [grpo, {name: sgt, lam: 0.2}, "
        "{name: prp, gamma: 0.5}]}\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"probe 'prp'.knobs = \['gamma'\].*knobs of PrpConfig: "
                                          r"\['clip', 'level', 'tokenization'\]"):
        load_profile("smoke")


def test_the_run_cache_key_ignores_docstrings_and_comments_not_code():
    from mrl.fingerprint import code_without_docs

    base = code_without_docs('def f(x):\n    """doc"""\n    return x  # note\n')
    assert base == code_without_docs('def f(x):\n    """another doc"""\n    # a comment\n    return x\n')
    assert base != code_without_docs("def f(x):\n    return x + 1\n")
    attribute = code_without_docs('class C:\n    x: int = 1\n    """the x"""\n')
    assert attribute == code_without_docs('class C:\n    x: int = 1\n    """the x,\n    wrapped"""\n')
    assert attribute != code_without_docs("class C:\n    x: int = 2\n")

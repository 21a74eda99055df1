import pytest

from mrl.config import ConfigError, FamilyConfig, GrpoConfig, RunConfig, config_hash, load_config
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
    with pytest.raises(ConfigError, match=r"GrpoConfig.loss_type = 'ppo'.*one of \['grpo', 'bnpo', 'dr_grpo', 'dapo'\]"):
        load_config({"grpo": {"loss_type": "ppo"}})
    with pytest.raises(ConfigError, match=r"group_size = 1 .*>= 2"):
        GrpoConfig(group_size=1)
    with pytest.raises(ConfigError, match=r"FamilyConfig\[X\].arch = 'bert'"):
        FamilyConfig(name="X", arch="bert")
    with pytest.raises(ConfigError, match=r"warmup_mix.*summing to 1"):
        FamilyConfig(warmup_mix={"S1": 0.5})
    with pytest.raises(ConfigError, match=r"warmup_mix\['S4'\]"):
        FamilyConfig(warmup_mix={"S4": 1.0})


def test_wrong_type_is_rejected_at_load():
    with pytest.raises(ConfigError, match=r"RunConfig.grpo.steps = 'ten' has type str; expected int"):
        load_config("grpo: {steps: ten}")


def test_yaml_string_and_hash_stability():
    a = load_config("grpo: {steps: 10}\nthreads: 2")
    b = load_config({"grpo": {"steps": 10}, "threads": 2})
    assert a == b and config_hash(a) == config_hash(b)
    assert config_hash(a) != config_hash(load_config({"grpo": {"steps": 11}, "threads": 2}))


def test_a_profile_is_whole_in_its_yaml_and_its_grids_are_checked(tmp_path, monkeypatch):
    config = load_profile("default")
    assert config.backend == "process" and config.experiments.probe.steps == {"A+B": 100, "A+B+C": 50}
    assert config.pairing("A+B+C") == ["A", "B", "C"] and config.experiments.bandit.reps == 600
    with pytest.raises(ConfigError, match=r"RunConfig.experiments = 'A\+D'.*a pairing defined in pairings"):
        load_config({"experiments": {"probe": {"pairings": ["A+D"], "steps": {"A+D": 3}}}})
    with pytest.raises(ConfigError, match=r"ProbeGridConfig.steps = \{'A\+B': 0\}"):
        load_config({"experiments": {"probe": {"steps": {"A+B": 0}}}})
    with pytest.raises(ConfigError, match=r"RunConfig.backend = 'slurm'.*\['inline', 'process', 'ray'\]"):
        load_config({"backend": "slurm"})
    # a probe entry of a grid is checked against the registry when the profile loads
    (tmp_path / "configs").mkdir()
    (tmp_path / "mrl").mkdir()
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "configs" / "smoke.yaml").write_text(
        "experiments:\n  probe: {probes: [grpo, {name: sgt, lam: 0.2}, {name: prp, gamma: 0.5}]}\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"probe 'prp'.knobs = \['gamma'\].*knobs of PrpConfig: \['clip', 'level'\]"):
        load_profile("smoke")


def test_the_run_cache_key_ignores_docstrings_and_comments_not_code():
    from mrl.experiment import code_without_docs

    base = code_without_docs('def f(x):\n    """doc"""\n    return x  # note\n')
    assert base == code_without_docs('def f(x):\n    """another doc"""\n    # a comment\n    return x\n')
    assert base != code_without_docs("def f(x):\n    return x + 1\n")

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

"""The resource plan: exact parameter counts of the paper profile's models, each memory term reacting to its
setting, the plan placed on GPUs, and a plan too large refused with the policy named."""
import dataclasses

import pytest

from mrl.command import main
from mrl.core.config import ConfigError, PlacementConfig
from mrl.profiles import load_profile
from mrl.runtime.resources import (Architecture, ResourceError, Workload, architecture, group_multiplier, parse_gpus,
                                   plan_resources, policy_memory)

PUBLISHED_PARAMS = {"Qwen2.5-0.5B-Instruct": 494_032_768, "Llama-3.2-1B-Instruct": 1_235_814_400,
                    "SmolLM2-360M-Instruct": 361_821_120}
"""the parameter counts on the models' Hugging Face pages (safetensors metadata)"""


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMS))
def test_the_paper_models_have_their_published_parameter_counts(name):
    arch = architecture(f"data/pretrained/{name}")  # not downloaded here: the published config.json
    assert arch.params == PUBLISHED_PARAMS[name]
    assert arch.source.endswith(f"published_configs/{name}.json")


def test_a_local_checkpoint_is_read_from_its_own_config(tiny_zoo_paths):
    from mrl.runtime.zoo import load_policy

    arch = architecture(tiny_zoo_paths["B"])
    assert arch.source == f"{tiny_zoo_paths['B']}/config.json"
    assert arch.params == load_policy(tiny_zoo_paths["B"]).n_params
    with pytest.raises(ResourceError, match="no config.json at .*nowhere"):
        architecture("/nowhere")


ARCH = Architecture(params=10**9, layers=16, hidden=2048, mlp=8192, kv=512, vocab=128_256, source="test")


def _memory(dtype="float32", gradient_checkpointing=False, micro_batch=0, teacher=None, **changes):
    workload = Workload(**{**dict(sequences=512, prompt_tokens=256, new_tokens=512, reference=False), **changes})
    placement = PlacementConfig(dtype=dtype, gradient_checkpointing=gradient_checkpointing, micro_batch=micro_batch)
    return policy_memory(ARCH, workload, placement, teacher)


def test_the_peak_is_the_largest_phase_and_adam_is_held_only_after_the_first_step():
    from mrl.runtime.resources import phase_peaks

    memory = _memory(dtype="bfloat16", micro_batch=16, gradient_checkpointing=True, eval_sequences=64,
                     eval_new_tokens=1024)
    phases = phase_peaks(memory)
    assert memory["peak"] == pytest.approx(max(phases.values()))
    assert phases["update"] == pytest.approx(memory["weights"] + memory["bf16 sampler"] + memory["Adam"]
                                             + memory["gradients"] + memory["activations"])
    before = phase_peaks(memory, adam=False)
    assert all(phases[k] - before[k] == pytest.approx(memory["Adam"]) for k in phases)


def test_each_memory_term_follows_its_setting():
    base = _memory()
    assert base["weights"] == 4 and base["gradients"] == 4 and base["Adam"] == 8 and base["bf16 sampler"] == 0
    assert _memory(micro_batch=16)["activations"] == pytest.approx(base["activations"] * 16 / 512)
    assert _memory(micro_batch=16, gradient_checkpointing=True)["activations"] \
        < _memory(micro_batch=16)["activations"] / 3
    bf16 = _memory(dtype="bfloat16")
    assert bf16["KV cache"] == base["KV cache"] / 2 and bf16["bf16 sampler"] == 2 and bf16["weights"] == 4
    assert _memory(micro_batch=16)["scoring"] == pytest.approx(base["scoring"] * 16 / 512)
    assert _memory(reference=True)["frozen"] == 4 and _memory(reference=True, dtype="bfloat16")["frozen"] == 2
    assert _memory(teacher=ARCH)["frozen"] == 4
    kv = 2 * 16 * 512 * 768 * 512 * 4 / 1e9
    assert base["KV cache"] == pytest.approx(kv)
    small = _memory(micro_batch=1, gradient_checkpointing=True)
    per_token = (3 * 8192 + 2 * 2048 + 2 * 512) * 4 + 2 * 2048 * 4
    prefill = 512 * 64 * per_token / 1e9   # generate prefills 64 tokens of every prompt a forward
    assert small["prefill"] == pytest.approx(prefill)
    assert _memory(engine="hf")["prefill"] == pytest.approx(4 * prefill)    # the loops: every prompt token at once
    assert small["peak"] == pytest.approx(4 + 8 + kv + prefill)  # weights, Adam, the rollout's cache and prefill,
    # once the update is small (the gradients live only through the update)
    assert _memory(engine="batched")["prefill"] == pytest.approx(8192 * per_token / 1e9)   # capped per forward
    assert base["evaluation"] == 0
    evaluation = _memory(eval_sequences=256, eval_new_tokens=1024)["evaluation"]
    assert evaluation == pytest.approx(2 * 16 * 256 * 1280 * 512 * 4 / 1e9 + prefill / 2)   # 256 of 512 prompts
    large = _memory(micro_batch=1, gradient_checkpointing=True, eval_sequences=2048, eval_new_tokens=1024)
    assert large["peak"] == pytest.approx(4 + 8 + large["evaluation"])   # the evaluation sets the peak


def test_the_paper_profile_fits_two_80gb_gpus_with_at_most_its_configured_share_each():
    config = load_profile("paper")
    plan = plan_resources(config, parse_gpus("2x80"))
    assert list(plan.policy) == ["A", "B", "C"] and set(plan.gpu) == {0, 1}
    assert group_multiplier(config) == 2   # gspo_x2 in the HACPO grid samples twice the group
    for row in plan.to_dict("records"):
        assert row["peak"] > row["weights"] + row["Adam"]
        assert row["ray gpus"] <= config.placement_of(row["policy"]).gpus  # the share paper.yaml reserves
    per_gpu = plan.groupby("gpu").peak.sum()
    assert (per_gpu <= 72).all()


def test_a_plan_too_large_is_refused_naming_the_policy_and_the_shortfall():
    config = load_profile("paper")
    with pytest.raises(ResourceError,
                       match=r"policy C \(SmolLM2-360M-Instruct\) needs 39\.\d GB .* short by 15\.\d GB"):
        plan_resources(config, [80])
    whole_batch = dataclasses.replace(config, placement={name: PlacementConfig() for name in config.policies})
    with pytest.raises(ResourceError, match="policy B .*lower its micro_batch \\(now the whole batch\\), turn on "
                                            "gradient_checkpointing, use bfloat16"):
        plan_resources(whole_batch, [80] * 3)


def test_mrl_plan_prints_the_plan_and_refuses_one_that_does_not_fit(capsys):
    assert main(["plan", "--profile", "paper", "--gpus", "2x80"]) == 0
    out = capsys.readouterr().out
    assert "Llama-3.2-1B-Instruct" in out and "KV cache" in out
    with pytest.raises(SystemExit) as stop:
        main(["plan", "--profile", "paper", "--gpus", "1x80"])
    assert stop.value.code == 2 and "short by" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["plan", "--gpus", "eighty"])
    assert "NxGB" in capsys.readouterr().err


def test_the_trl_path_plans_one_gpu_per_trainer_and_counts_vllm_s_share():
    from mrl.runtime.resources import plan_trl

    config = load_profile("paper")
    generate = plan_trl(config, parse_gpus("2x80"), policies=["A", "B"])
    vllm = plan_trl(config, parse_gpus("2x80"), use_vllm=True, policies=["A", "B"])
    assert sorted(generate.gpu) == [0, 1] and (generate.vLLM == 0).all()
    assert (vllm["KV cache"] == 0).all() and (vllm["bf16 sampler"] == 0).all() and (vllm.vLLM == 24).all()
    assert (vllm.total == vllm.peak + 24).all() and (vllm.peak <= generate.peak).all()
    with pytest.raises(ResourceError, match="one trainer per policy.*2 policies \\(A, B\\) need 2 GPUs, 1 given"):
        plan_trl(config, [80], policies=["A", "B"])
    with pytest.raises(ResourceError, match="policy B .*beside vLLM's 12.0 GB \\(30% of the GPU\\).*short by"):
        plan_trl(config, [40, 40], use_vllm=True, policies=["A", "B"])
    with pytest.raises(ConfigError, match="policies \\['Z'\\] are not allowed"):
        plan_trl(config, [80], policies=["Z"])


def test_mrl_plan_plans_the_trl_path_of_a_pairing(capsys):
    assert main(["plan", "--profile", "paper", "--trainer", "trl", "--vllm", "--pairing", "A+B", "--gpus", "2x80"]) == 0
    out = capsys.readouterr().out
    assert "vLLM" in out and "SmolLM2" not in out

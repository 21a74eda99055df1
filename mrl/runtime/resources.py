"""A resource plan: the GPU memory each policy of a profile needs, and which GPU holds it (or why none can).

Per policy, in bytes, from its architecture (the checkpoint's config.json, or the published one in
mrl/data/published_configs), the profile's batch and its placement: the persistent part (fp32 weights, the bf16
sampler, Adam, frozen models) plus the largest of the rollout, the evaluation and the update. These are estimates to
plan with; a run on a GPU logs each phase's measured peak beside them. Every term's formula: docs/paper_profile.md,
The resource plan (The formulas); the plan against measured peaks: What ran where.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd
import torch

from mrl.core.config import ConfigError, PlacementConfig
from mrl.core.engines import CAPABILITIES, Engine, engine_named
from mrl.core.probes import as_probe_config, get_probe
from mrl.core.run_config import RunConfig
from mrl.paths import PACKAGE
from mrl.runtime.graphs_engine import GRAPHS_PREFILL_TOKENS, cache_shape
from mrl.runtime.rollout import BATCHED_STEP_TOKENS, GENERATE_PREFILL_CHUNK

GB = 1e9
PUBLISHED = PACKAGE / "data" / "published_configs"


class ResourceError(ConfigError):
    """A plan that does not fit the given GPUs; names the policy and the shortfall."""


@dataclass
class Architecture:
    """What the memory of one model depends on."""

    params: int
    layers: int
    hidden: int
    mlp: int
    kv: int
    """kv_heads x head_dim"""
    vocab: int
    source: str
    """the config.json it was read from"""


def architecture(path: str | Path) -> Architecture:
    """The architecture of the checkpoint at `path`: its config.json, else the published config of a checkpoint of
    that folder name; the parameter count is exact (the model built on the meta device, no weights read)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    path = Path(path)
    source = path / "config.json" if (path / "config.json").exists() else PUBLISHED / f"{path.name}.json"
    if not source.exists():
        raise ResourceError(f"no config.json at {path} and no published config for {path.name!r} in {PUBLISHED}")
    values = json.loads(source.read_text())
    values.pop("architectures", None)
    config = AutoConfig.for_model(values.pop("model_type"), **values)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    text = config.get_text_config()
    heads = text.num_attention_heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    return Architecture(params=sum(p.numel() for p in model.parameters()), layers=text.num_hidden_layers,
                        hidden=text.hidden_size, mlp=text.intermediate_size, kv=kv_heads * head_dim,
                        vocab=text.vocab_size, source=str(source))


@dataclass(frozen=True)
class Workload:
    """What one policy's step puts through its memory (policy_memory), beside its architecture and placement."""

    sequences: int
    """the step's batch: prompts_per_step x group_size x the probes' group multiplier (group_multiplier)"""
    prompt_tokens: int
    """tokens of a prompt"""
    new_tokens: int
    """tokens of a completion (GrpoConfig.max_new_tokens)"""
    reference: bool = False
    """whether a frozen reference model is held (GrpoConfig.beta > 0)"""
    engine: str = Engine.GENERATE
    """the sampling engine's name, whose capabilities (mrl.core.engines) set the prefill and the KV cache's shape
    (GrpoConfig.engine)"""
    eval_sequences: int = 0
    """prompts per greedy evaluation (GrpoConfig.eval_batch); 0: no evaluation"""
    eval_new_tokens: int = 0
    """the evaluation's completion limit (GrpoConfig.eval_max_new_tokens, else max_new_tokens)"""


def policy_memory(arch: Architecture, workload: Workload, placement: PlacementConfig,
                  teacher: Architecture | None = None) -> dict[str, float]:
    """The terms of docs/paper_profile.md (The resource plan, The formulas), in GB, with `peak`: `arch`'s memory
    under `workload` and `placement` (its dtype, gradient_checkpointing and micro_batch), holding `teacher`'s
    frozen copy when given."""
    dtype, micro_batch = placement.dtype, placement.micro_batch
    sequences, prompt_tokens, new_tokens = workload.sequences, workload.prompt_tokens, workload.new_tokens
    reference, engine = workload.reference, workload.engine
    eval_sequences, eval_new_tokens = workload.eval_sequences, workload.eval_new_tokens
    e, residual = (2 if dtype == "bfloat16" else 4), 4
    p, tokens = arch.params, prompt_tokens + new_tokens
    b = min(micro_batch or sequences, sequences)
    kept = 2 * arch.hidden * residual + (5 * arch.hidden + 3 * arch.kv + 4 * arch.mlp) * e  # bytes per token, layer
    passing = (3 * arch.mlp + 2 * arch.hidden + 2 * arch.kv) * e + 2 * arch.hidden * residual

    capability = CAPABILITIES[engine_named(engine)]

    def prefill(count: int) -> float:
        if capability.prefill == "bounded":
            return passing * min(count * prompt_tokens, BATCHED_STEP_TOKENS)
        if capability.prefill == "graphs":
            rows = min(count, max(1, GRAPHS_PREFILL_TOKENS // prompt_tokens))
            return max(passing * rows * prompt_tokens, cache_shape(count, prompt_tokens, 0)[0] * arch.vocab * (e + 8))
        chunk = min(prompt_tokens, GENERATE_PREFILL_CHUNK) if capability.prefill == "chunked" else prompt_tokens
        return passing * count * chunk

    def kv_cache(count: int, length: int) -> float:
        if capability.padded_cache:
            count, length = cache_shape(count, length, 0)
        return 2 * arch.layers * count * length * arch.kv * e

    if placement.gradient_checkpointing:
        activations = arch.layers * b * tokens * arch.hidden * residual + b * tokens * kept
    else:
        activations = arch.layers * b * tokens * kept
    terms = {
        "weights": 4 * p,
        "bf16 sampler": 2 * p if dtype == "bfloat16" else 0,
        "gradients": 4 * p,
        "Adam": 8 * p,
        "frozen": e * p * reference + (e * teacher.params if teacher else 0),
        "KV cache": kv_cache(sequences, tokens),
        "prefill": prefill(sequences),
        "scoring": max(b * new_tokens * arch.vocab * (e + 8), b * tokens * passing),
        "evaluation": (kv_cache(eval_sequences, prompt_tokens + eval_new_tokens) + prefill(eval_sequences)
                       if eval_sequences else 0),
        "activations": activations + b * new_tokens * arch.vocab * 12 + (2 * p if dtype == "bfloat16" else 0),
    }
    terms["peak"] = max(phase_peaks(terms).values())
    return {k: v / GB for k, v in terms.items()}


def phase_peaks(terms: dict[str, float], adam: bool = True) -> dict[str, float]:
    """The planned peak of each phase from policy_memory's terms (in their unit): the persistent part (weights,
    sampler, frozen models and, once the first optimizer step has made them, Adam's states) plus the rollout's KV
    cache with its prefill, or its scoring; the evaluation; the update's gradients and activations."""
    held = terms["weights"] + terms["bf16 sampler"] + terms["frozen"] + (terms["Adam"] if adam else 0)
    return {"rollout": held + max(terms["KV cache"] + terms["prefill"], terms["scoring"]),
            "evaluation": held + terms["evaluation"],
            "update": held + terms["gradients"] + terms["activations"]}


def profile_workload(config: RunConfig, prompt_tokens: int) -> Workload:
    """The Workload of a profile's step: its batch times the probes' group multiplier, its reference (beta > 0), its
    engine and its evaluation (GrpoConfig.eval_batch, eval_max_new_tokens)."""
    grpo = config.grpo
    return Workload(sequences=grpo.prompts_per_step * grpo.group_size * group_multiplier(config),
                    prompt_tokens=prompt_tokens, new_tokens=grpo.max_new_tokens, reference=grpo.beta > 0,
                    engine=grpo.engine, eval_sequences=grpo.eval_batch,
                    eval_new_tokens=grpo.eval_max_new_tokens or grpo.max_new_tokens)


def group_multiplier(config: RunConfig) -> int:
    """The largest number of samples per prompt, in group sizes, that a probe of the profile's grids draws."""
    entries = [entry for name in ("probe", "hacpo") if name in config.experiments
               for entry in config.experiments[name].probes]
    return max([get_probe(as_probe_config(entry).name).group_multiplier for entry in entries] + [1])


def parse_gpus(spec: str) -> list[float]:
    """'4x80' -> [80.0] * 4; '80,40' -> [80.0, 40.0] (GB of memory per GPU)."""
    try:
        if "x" in spec:
            count, size = spec.split("x")
            return [float(size)] * int(count)
        return [float(part) for part in spec.split(",")]
    except ValueError:
        raise ConfigError(f"gpus = {spec!r} is not allowed; expected NxGB (4x80) or GB,GB,... (80,40)") from None


def plan_resources(config: RunConfig, gpus: list[float], prompt_tokens: int = 256, reserve: float = 0.1,
                   teachers: bool = False, policies: list[str] | None = None) -> pd.DataFrame:
    """One row per policy of the profile: its memory terms (GB), its peak, the GPU that holds it and the Ray GPU
    share (`PlacementConfig.gpus`) that reserves it; biggest policies placed first, each on the GPU with the
    most memory left (no policy is split across GPUs). gpus: GB per GPU. teachers: plan for a probe with a
    teacher (trrd), each policy holding the next one's frozen copy. policies: plan only these (default: all).

    Raises ResourceError naming the first policy that fits on no GPU, what it needs and the shortfall."""
    if not config.policies:
        raise ConfigError("plan_resources plans a profile with pretrained policies (config.policies); this profile "
                          "trains its own zoo on the CPU")
    if not gpus:
        raise ResourceError("no GPUs given: a plan needs the memory of at least one GPU")
    names = planned(config, policies)
    workload = profile_workload(config, prompt_tokens)
    archs = {name: architecture(config.policies[name]) for name in names}
    rows = []
    for i, name in enumerate(names):
        placement = config.placement_of(name)
        teacher = archs[names[(i + 1) % len(names)]] if teachers and len(names) > 1 else None
        memory = policy_memory(archs[name], workload, placement, teacher)
        rows.append({"policy": name, "model": Path(config.policies[name]).name,
                     "params (M)": archs[name].params / 1e6, **memory,
                     "advice": _advice(placement, memory, config.grpo.engine)})
    usable = [size * (1 - reserve) for size in gpus]
    free = list(usable)
    for row in sorted(rows, key=lambda r: -r["peak"]):
        gpu = max(range(len(free)), key=lambda g: free[g])
        if row["peak"] > free[gpu]:
            raise ResourceError(
                f"policy {row['policy']} ({row['model']}) needs {row['peak']:.1f} GB at its peak and the GPU with the "
                f"most room has {free[gpu]:.1f} GB left of {gpus[gpu]:.0f} GB ({reserve:.0%} reserved): short by "
                f"{row['peak'] - free[gpu]:.1f} GB; {row['advice']}")
        free[gpu] -= row["peak"]
        row["gpu"] = gpu
    for row in rows:
        row["ray gpus"] = math.ceil(1000 * row["peak"] / usable[row["gpu"]]) / 1000   # two that fit sum to <= 1
    return pd.DataFrame(rows).drop(columns="advice")


def planned(config: RunConfig, policies: list[str] | None) -> list[str]:
    """The policies a plan covers: `policies` (each one of the profile's, else a ConfigError naming it) or all."""
    unknown = sorted(set(policies or ()) - set(config.policies))
    if unknown:
        raise ConfigError(f"policies {unknown} are not allowed; expected policies of the profile "
                          f"({sorted(config.policies)})")
    return sorted(policies or config.policies)


VLLM_SHARE = 0.3
"""TRL's vllm_gpu_memory_utilization default: the share of a GPU a colocated vLLM engine takes"""


def plan_trl(config: RunConfig, gpus: list[float], use_vllm: bool = False, vllm_share: float = VLLM_SHARE,
             prompt_tokens: int = 256, reserve: float = 0.1, policies: list[str] | None = None) -> pd.DataFrame:
    """The plan of the TRL path (mrl.integrations.trl, docs/trl.md): one trainer per policy, each on a GPU of its
    own. A trainer holds what the runner's actor holds (policy_memory under the policy's placement: dtype, gradient
    checkpointing and micro-batches, with TRL's reference model as `frozen` when beta > 0) and samples either with
    the training model (transformers' generate: the KV cache as the runner's) or, use_vllm, with a colocated vLLM
    engine that takes `vllm_share` of its GPU for its weights and KV cache (the runner's bf16 sampler and KV cache
    are then vLLM's). Policies are placed biggest first on the largest free GPU.
    Raises ResourceError naming the first policy that has no GPU or does not fit beside vLLM's share."""
    if not config.policies:
        raise ConfigError("plan_trl plans a profile with pretrained policies (config.policies)")
    names = planned(config, policies)
    if len(gpus) < len(names):
        raise ResourceError(f"the TRL path runs one trainer per policy, each on a GPU of its own: {len(names)} "
                            f"policies ({', '.join(names)}) need {len(names)} GPUs, {len(gpus)} given")
    # TRL: generate's one-pass prefill, and no evaluation (check_trl_args refuses eval_strategy)
    workload = replace(profile_workload(config, prompt_tokens), engine=Engine.HF, eval_sequences=0,
                       eval_new_tokens=0)
    rows = []
    for name in names:
        placement = config.placement_of(name)
        memory = policy_memory(architecture(config.policies[name]), workload, placement)
        if use_vllm:   # vLLM holds the sampling copy, the KV cache and generation's prefill, in its own share
            memory["bf16 sampler"] = memory["KV cache"] = memory["prefill"] = memory["evaluation"] = 0.0
            memory["peak"] = (memory["weights"] + memory["Adam"] + memory["frozen"]
                              + max(memory["scoring"], memory["gradients"] + memory["activations"]))
        rows.append({"policy": name, "model": Path(config.policies[name]).name, **memory})
    free = sorted(range(len(gpus)), key=lambda g: -gpus[g])
    for row in sorted(rows, key=lambda r: -r["peak"]):
        gpu = free.pop(0)
        row["gpu"], row["vLLM"] = gpu, vllm_share * gpus[gpu] if use_vllm else 0.0
        room = gpus[gpu] * (1 - reserve) - row["vLLM"]
        if row["peak"] > room:
            raise ResourceError(
                f"policy {row['policy']} ({row['model']}) needs {row['peak']:.1f} GB at its peak beside "
                + (f"vLLM's {row['vLLM']:.1f} GB ({vllm_share:.0%} of the GPU) " if use_vllm else "")
                + f"on GPU {gpu} of {gpus[gpu]:.0f} GB ({reserve:.0%} reserved): short by {row['peak'] - room:.1f} "
                f"GB; lower its micro_batch, use bfloat16 or gradient checkpointing"
                + (", lower vllm_gpu_memory_utilization" if use_vllm else "") + ", or give a larger GPU")
        row["total"] = row["peak"] + row["vLLM"]
    return pd.DataFrame(rows)


def _advice(placement, memory: dict, engine: str = Engine.GENERATE) -> str:
    """What would shrink a policy's peak: the batch when the rollout's KV cache and prefill set it, the evaluation's
    batch when the evaluation does, else the update's settings it does not use yet."""
    rollout = memory["KV cache"] + memory["prefill"]
    update = memory["gradients"] + memory["activations"]
    if memory["evaluation"] >= max(rollout, memory["scoring"], update):
        return (f"the evaluation ({memory['evaluation']:.1f} GB) sets it: lower grpo.eval_batch or "
                f"eval_max_new_tokens, or give more or larger GPUs")
    if rollout >= max(memory["scoring"], update):
        batched = ("" if engine == Engine.BATCHED else
                   f", use engine batched (its prefill takes at most {BATCHED_STEP_TOKENS:,} tokens a forward)")
        return (f"the rollout's KV cache and prefill ({rollout:.1f} GB) set it: lower grpo.prompts_per_step or "
                f"group_size{batched}, or give more or larger GPUs")
    steps = [f"lower its micro_batch (now {placement.micro_batch or 'the whole batch'})"]
    if not placement.gradient_checkpointing:
        steps.append("turn on gradient_checkpointing")
    if placement.dtype == "float32":
        steps.append("use bfloat16")
    return ", ".join(steps) + ", or give more or larger GPUs"

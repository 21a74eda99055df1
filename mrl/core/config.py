"""Typed, YAML-loadable training configs: the task, the model zoo and its warm-up, GRPO, placement and the runner,
the parts of a profile (mrl.core.run_config.RunConfig).

The validation machinery (strict types, ConfigError, load_config, override, to_dict, config_hash) is
mrl.core.validation's; the notebooks' experiment configs are mrl.core.grids'.
"""
from __future__ import annotations

import re
from dataclasses import field
from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from mrl.core import validation
from mrl.core.choices import BACKENDS, REPORT_TO
from mrl.core.engines import ENGINES
from mrl.core.grpo import LEVELS, LOSS_TYPES, Surrogate
from mrl.core.mismatch import SAMPLER_CORRECTIONS
from mrl.core.validation import (Bool, ConfigError, Count, Float, Fraction, Int, NonEmpty, Positive, PositiveInt, Str,
                            config_dataclass, require)

PRECISIONS = ("fp32", "bf16")
TASKS = ("arith-ops", "arith-forms", "gsm8k")
SKILLS = ("S1", "S2", "S3")
MIX_KEY = re.compile(r"^(leak:)?(S[123])(\.half[01])?$")


def matching(pattern: re.Pattern, allowed: str) -> AfterValidator:
    """A string check by a regular expression; `allowed` says what matches (the error's 'expected ...')."""
    def check(value: str) -> str:
        if not pattern.match(value):
            raise ValueError(allowed)
        return value
    return AfterValidator(check)


def _sums_to_one(mix: dict) -> dict:
    total = sum(mix.values())
    if abs(total - 1) >= 1e-6:
        raise ValueError(f"weights summing to 1 (got {total:.4f})")
    return mix


@config_dataclass
class TaskConfig:
    name: Literal[TASKS] = "arith-ops"
    """task family: arith-ops (algorithm gap), arith-forms (format gap), gsm8k (paper profile)"""
    max_operand: Annotated[Int, Field(ge=9, le=999)] = 99
    """operands are drawn from 0..max_operand (multiplication: second operand 0..9)"""
    test_per_skill: PositiveInt = 200
    """held-out test prompts per skill, disjoint from every training and RL prompt"""
    pool_per_skill: Count = 50
    """RL prompt pool per skill (pool regime); 0 means fresh training prompts every step"""
    leak_n: PositiveInt = 150
    """size of the fixed subset of a peer's skill from which the warm-up leak is drawn"""
    seed: Int = 0
    """seed of the train/test/pool/leak splits"""
    data_files: Str | None = None
    """gsm8k only: the training rows, a local JSON/JSONL file in the GSM8K schema (question, answer '... #### 42')"""
    test_files: dict[Str, Str] = field(default_factory=dict)
    """gsm8k only: {benchmark: local JSON/JSONL file} evaluated as held-out skills, in the GSM8K schema or
    MATH's (problem, answer), e.g. {gsm8k: data/gsm8k/test.jsonl, math500: data/math500/test.jsonl}; every row
    (up to test_per_skill) is evaluated and training uses all of data_files but rows whose question a test
    file holds; empty: the first test_per_skill rows of data_files are held out"""
    instruction: Str = ""
    """gsm8k only: the answer-format instruction, stated once, added after every question"""
    chat_template: Bool = False
    """gsm8k only: each policy reads a prompt through its own tokenizer's chat template (one user message, the
    generation prompt added: TRL's conversational prompts); THL aligns the completion text only"""

    def __post_init__(self):
        c = "TaskConfig"
        if self.name == "gsm8k":
            require(self.data_files is not None, c, "data_files", self.data_files,
                    "a path to a GSM8K-schema JSON file when name is 'gsm8k'")
        else:
            for name, empty in (("test_files", {}), ("instruction", ""), ("chat_template", False)):
                require(getattr(self, name) == empty, c, name, getattr(self, name),
                        f"{empty!r} when name is {self.name!r} (a gsm8k setting)")


ARCHS = ("gpt2", "llama", "qwen2", "mistral", "gpt_neox")
TOKENIZERS = ("bpe", "unigram", "wordpiece", "char")
MixKey = Annotated[Str, matching(MIX_KEY, "a key like S1, S3.half0 or leak:S2")]


@config_dataclass
class FamilyConfig:
    name: Str = "A"
    """policy id, e.g. A, B, C"""
    arch: Literal[ARCHS] = "gpt2"
    """transformers architecture: gpt2, llama, qwen2, mistral (the fast path knows these four) or gpt_neox"""
    tokenizer: Literal[TOKENIZERS] = "bpe"
    """tokenizer kind trained on the task corpus: bpe (byte-level), unigram (Metaspace-free, char-level here),
    wordpiece (##) or char (one token per character)"""
    vocab_size: PositiveInt = 48
    """target vocabulary size of the trained tokenizer (Unigram on digits degenerates to characters; char: unused,
    the corpus's alphabet decides)"""
    d_model: PositiveInt = 128
    """hidden size"""
    n_layers: PositiveInt = 4
    """transformer blocks"""
    n_heads: PositiveInt = 4
    """attention heads"""
    n_kv_heads: PositiveInt = 2
    """key/value heads (llama, qwen2: grouped-query attention); ignored by gpt2"""
    d_ff: PositiveInt = 384
    """MLP width"""
    warmup_mix: Annotated[dict[MixKey, Fraction], NonEmpty, AfterValidator(_sums_to_one)] = field(
        default_factory=lambda: {"S1": 0.75, "S3.half0": 0.22, "leak:S2": 0.03})
    """supervised warm-up mixture: keys S1|S2|S3, optional .half0|.half1, prefix leak: for the fixed leak subset;
    weights sum to 1"""

    def __post_init__(self):
        c = f"FamilyConfig[{self.name}]"
        require(self.d_model % self.n_heads == 0, c, "n_heads", self.n_heads, f"a divisor of d_model={self.d_model}")
        require(self.n_heads % self.n_kv_heads == 0, c, "n_kv_heads", self.n_kv_heads,
                f"a divisor of n_heads={self.n_heads}")


@config_dataclass
class WarmupConfig:
    steps: PositiveInt = 1000
    """supervised warm-up steps (completion-only cross-entropy)"""
    batch_size: PositiveInt = 256
    """examples per warm-up step"""
    lr: Positive = 3e-3
    """AdamW peak learning rate, cosine decay after a linear warm-up"""
    lr_warmup_steps: Count = 50
    """linear learning-rate warm-up steps (at most steps)"""
    grad_clip: Positive = 1.0
    """global gradient-norm clip"""
    seed: Int = 0
    """seed of initialisation and the warm-up data stream"""
    precision: Literal[PRECISIONS] = "fp32"
    """matmul precision of the warm-up forward and backward: fp32, or bf16 (autocast; weights, gradients and
    AdamW state stay fp32). bf16 was about 2x faster than fp32 on a CPU with AVX512-BF16 and about 3x slower on one
    without (emulated), and its roundings differ between the two, so a bf16 zoo is rebuilt bit for bit only on a
    CPU of the same kind (mrl.runtime.results.machine() is recorded in zoo.json)"""

    def __post_init__(self):
        require(self.lr_warmup_steps <= self.steps, "WarmupConfig", "lr_warmup_steps", self.lr_warmup_steps,
                f"an integer in [0, steps={self.steps}]")


@config_dataclass
class ZooConfig:
    families: Annotated[list[FamilyConfig], NonEmpty]
    """the policies' families (FamilyConfig each, distinct names); at least one. No default: a profile's zoo is in
    its YAML"""
    warmup: WarmupConfig = field(default_factory=WarmupConfig)
    """supervised warm-up settings shared by every family"""
    max_positions: PositiveInt = 48
    """maximum sequence length of the models"""
    workers: PositiveInt | Literal["auto"] = 2
    """warm-up processes run at once (1 torch thread each; more than the cores keeps them all busy); "auto": one per
    usable core, as many as the memory holds (mrl.runtime.capacity); 1 = in this process"""

    def __post_init__(self):
        names = [f.name for f in self.families]
        require(len(set(names)) == len(names), "ZooConfig", "families", names, "distinct family names")


SCALES = ("group", "batch", "none")
OpenFraction = Annotated[Float, Field(gt=0, lt=1)]


@config_dataclass
class GrpoConfig:
    steps: PositiveInt = 150
    """RL steps (one sampling round and one optimizer step each)"""
    prompts_per_step: PositiveInt = 16
    """prompts per step (P)"""
    group_size: Annotated[Int, Field(ge=2)] = 8
    """completions per prompt (G)"""
    max_new_tokens: PositiveInt = 6
    """maximum completion length, EOS included"""
    temperature: Positive = 1.0
    """sampling temperature (full softmax, no top-k)"""
    lr: Positive = 1e-4
    """Adam learning rate (1e-4 was stable; 3e-4 degraded, 1e-3 collapsed in the prototypes)"""
    grad_clip: Positive = 1.0
    """global gradient-norm clip"""
    loss_type: Literal[tuple(LOSS_TYPES)] = "grpo"
    """aggregation: grpo, bnpo, dr_grpo, dapo (TRL's definitions)"""
    level: Literal[LEVELS] = "token"
    """importance ratio level: token or sequence (GSPO)"""
    scale: Literal[SCALES] = "group"
    """advantage normaliser: group, batch, none"""
    eps_low: OpenFraction = 0.2
    """lower clip range"""
    eps_high: OpenFraction = 0.2
    """upper clip range"""
    beta: Annotated[Float, Field(ge=0)] = 0.0
    """k3 KL coefficient against the frozen warm-up policy"""
    kl_bias_correction: Bool = False
    """multiply k3 by the importance ratio (TRL's use_bias_correction_kl)"""
    sampler_correction: Literal[SAMPLER_CORRECTIONS] = "off"
    """under a bf16 sampler (PlacementConfig.dtype bfloat16), weight each own token's surrogate by pi_train /
    pi_sampler by TRL's rule of this name (vllm_importance_sampling_mode; mrl.core.mismatch): token_truncate,
    token_mask, sequence_truncate or sequence_mask; off (the CPU profiles, whose sampler is the model) adds no
    weight. The mismatch itself is logged every step either way (sampler_logp_diff_mean, sampler_logp_diff_max)"""
    sampler_clip_min: Float | None = None
    """the weight's lower bound (TRL's vllm_importance_sampling_clip_min; None: open)"""
    sampler_clip_max: Float | None = 3.0
    """the weight's upper bound (TRL's vllm_importance_sampling_clip_max, 3.0 there too; None: open)"""
    engine: Literal[ENGINES] = "fast"
    """sampling and log-prob engine: fast (mrl.runtime.fast, for the gpt2 / llama / qwen2 checkpoints it implements
    exactly; any other falls back to transformers), hf (the transformers forward, the reference) or generate
    (sampling by transformers' generate with a static cache, for real model sizes on a GPU; the sampling
    log-probs and the training forward are hf's) or batched (transformers' continuous batching, generate_batch:
    a paged cache where a finished sequence frees its place for the next, in-process on the sampler's weights;
    log-probs and the training forward are hf's) or graphs (mrl.runtime.graphs_engine: decode steps captured in CUDA
    graphs)"""
    skip_zero_advantage: Bool = True
    """do not forward sequences with A = 0 (exact when beta = 0; the loss normaliser keeps the full batch)"""
    eval_every: PositiveInt = 25
    """greedy evaluation on pool and held-out prompts every this many steps"""
    eval_max_new_tokens: PositiveInt | None = None
    """the greedy evaluation's completion limit, EOS included (None: max_new_tokens): a test set whose solutions run
    longer than the training rollouts (MATH-500) is not cut off, since a completion without EOS scores 0"""
    eval_batch: PositiveInt = 512
    """prompts per greedy evaluation call: its own KV cache, which the resource plan keeps within the rollout's"""
    seed: Int = 0
    """RL seed: prompt order and sampling draw from generators derived from (seed, step, policy)"""

    def __post_init__(self):
        low, high = self.sampler_clip_min, self.sampler_clip_max
        require(low is None or high is None or low <= high, "GrpoConfig", "sampler_clip_min", low,
                f"at most sampler_clip_max ({high})")

    @property
    def surrogate(self) -> Surrogate:
        """the clipped surrogate's settings for mrl.core.grpo.policy_loss (dr_grpo's length: max_new_tokens)"""
        return Surrogate(level=self.level, loss_type=self.loss_type, eps_low=self.eps_low, eps_high=self.eps_high,
                         beta=self.beta, max_completion_length=self.max_new_tokens,
                         kl_bias_correction=self.kl_bias_correction)


DTYPES = ("float32", "bfloat16")
DEVICE_SPEC = re.compile(r"^(auto|cpu|cuda(:[0-9]+)?)$")


@config_dataclass
class PlacementConfig:
    """Where one policy lives and how it computes (mrl.runtime.placement); the defaults are this CPU's setting."""

    device: Annotated[Str, matching(DEVICE_SPEC, "auto, cpu, cuda or cuda:N")] = "auto"
    """auto (the GPU Ray assigned to the actor, else cuda when present, else cpu), cpu, cuda or cuda:N; the
    model, its optimizer state, the reference and teacher models and every tensor a step creates live there"""
    dtype: Literal[DTYPES] = "float32"
    """float32, or bfloat16: forwards under bf16 autocast over fp32 master weights (Adam and the loss in fp32),
    the frozen reference and teacher models stored in bf16"""
    gradient_checkpointing: Bool = False
    """recompute each layer's activations in the backward of the update (transformers' activation checkpointing,
    so the hf and generate engines; the CPU fast path computes outside transformers' layers and ignores it)"""
    micro_batch: Count = 0
    """sequences per forward and backward of the update (0: the whole step's batch at once); the gradient is the
    whole batch's (mrl.runtime.placement.MicroBatchedLogprobs)"""
    gpus: Annotated[Float, Field(ge=0)] = 0.0
    """GPUs the ray backend reserves for this policy's actor (0.5: two policies share one GPU); below 1, on the
    ray and process backends, also the most of its GPU the policy's process may allocate
    (mrl.runtime.placement.cap_gpu_memory)"""


FAILURE_POLICIES = ("fail", "continue")
MODES = ("sync", "async")
ATTACKS = ("forged_success", "lying_stats", "malformed")
"""what a poisoned peer publishes (mrl.runtime.poison)"""


@config_dataclass
class RunnerConfig:
    backend: Literal[BACKENDS] = "inline"
    """MWRA backend: inline (deterministic), process (one process per policy), ray"""
    mode: Literal[MODES] = "sync"
    """step clock: sync (a barrier after each phase) or async (a worker runs up to `staleness` steps ahead)"""
    staleness: Count = 1
    """async only: how many steps a worker may run ahead of the slowest one"""
    step_timeout: Positive = 600.0
    """seconds a worker may take for one phase before it is declared failed (the one default; a profile sets its
    own in runner.step_timeout)"""
    failure_policy: Literal[FAILURE_POLICIES] = "fail"
    """on a failed worker: fail (raise, keeping the last complete checkpoint) or continue without it"""
    checkpoint_every: Count = 0
    """write a checkpoint every this many steps (0: never); `mrl run` writes them into its output folder's
    checkpoints/, where `mrl run --resume` continues from the newest intact one"""
    keep_checkpoints: Count = 0
    """keep only this many newest checkpoints, removing older ones after each save (0: keep all)"""
    grid_checkpoint_every: Count = 20
    """a grid run's checkpoint cadence in the run cache's work area (mrl.experiments.runs.run_one without an output
    folder; the newest one kept), from which a killed grid resumes each run it had in flight; 0: never. Only sync runs
    that log no experience and whose wall time is not what they measure checkpoint there"""
    save_policies: Bool = False
    """save every trained policy as a transformers folder at the end of each run of a grid (mrl.runtime.saving), into
    results/trained/<key>/<policy>/; off for the CPU profiles, to spare the disk (`mrl run` always saves)"""
    max_staleness: PositiveInt = 1
    """peer experience whose policy version is more than this many steps behind the clock is dropped by SEE;
    a step-s sample comes from version s - 1, so 1 shares exactly the current step's samples"""
    report_to: Literal[REPORT_TO] = "none"
    """live metrics of every step (mrl.runtime.tracking): none, tensorboard, trackio or wandb (the [wandb] extra)"""
    logging_dir: Str | None = None
    """report_to=tensorboard: the folder of the event files (default results/tensorboard/<run_id>); wandb: the
    folder of W&B's files (default W&B's, ./wandb)"""
    poisoned: Str = ""
    """a policy of the run that publishes lies (mrl.runtime.poison), '' for none"""
    attack: Literal[ATTACKS] = "forged_success"
    """what the poisoned policy publishes: forged_success, lying_stats or malformed (mrl.runtime.poison)"""
    reverify: Bool = True
    """every learner re-scores its peers' claimed successes and rewards with its own verifier; False takes
    them as claimed (the poisoned-peer ablation)"""


NOTEBOOKS = ("00_zoo", "01_tour", "10_grpo_baseline", "20_thl", "30_mwra", "40_probe", "50_hacpo", "60_bandit",
             "70_heldout", "75_confirmatory", "76_confirmatory_claims", "80_beyond")
PAIRING_NAME = re.compile(r"^[A-Za-z0-9]+(\+[A-Za-z0-9]+)*$")
PairingName = Annotated[Str, matching(PAIRING_NAME, "a pairing name like 'A+B'")]

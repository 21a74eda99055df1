"""Typed, YAML-loadable configs for tasks, the model zoo, GRPO training and runs.

Every config is a pydantic v2 dataclass (`config_dataclass`) with one documented line per field (CleanRL's
`Args` style): strict scalar types (an int field refuses 2.5, "3" and True; a float field takes ints and
refuses strings and bools; a bool field refuses "no"), finite floats only, no unknown keys, nested configs
built from mappings; `__post_init__` adds the checks that span fields. The same validation runs whether a
config comes from YAML (`load_config`, which also refuses an empty file and duplicate keys), from Python
(`GrpoConfig(steps=2.5)`, `dataclasses.replace`) or from a notebook's papermill parameters (`override`).
Every error is a ConfigError naming the field, the value and what is allowed, so a typo fails at load,
not mid-run.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import re
import typing
from dataclasses import field
from pathlib import Path
from typing import Annotated, Any, TypeVar, Union

import pydantic
import pydantic.dataclasses
import yaml
from pydantic import Strict, StrictBool, StrictInt, StrictStr

from mrl.grpo import LEVELS, LOSS_TYPES
from mrl.mwra import BACKENDS
from mrl.tracking import REPORT_TO

ENGINES = ("fast", "hf", "generate")
PRECISIONS = ("fp32", "bf16")


class ConfigError(ValueError):
    """A config field has an unknown name or a value outside what is allowed."""


Int = StrictInt
"""an integer (not a float, a numeric string or a bool)"""
Float = Annotated[float, Strict()]
"""a finite real number (ints are taken as floats; strings and bools are not)"""
Str = StrictStr
Bool = StrictBool
PYDANTIC = pydantic.ConfigDict(extra="forbid", allow_inf_nan=False)
EXPECTED = {"int_type": "an integer", "float_type": "a number", "finite_number": "a finite number",
            "string_type": "a string", "bool_type": "true or false", "list_type": "a list", "dict_type": "a mapping",
            "dataclass_type": "a mapping of its settings", "unexpected_keyword_argument": "no such key",
            "missing_argument": "a value (required)"}


def _class_at(cls: type, path: tuple) -> type | None:
    """The config class at a pydantic error location below `cls` (through fields, list items, mapping values)."""
    for part in path:
        if typing.get_origin(cls) in (list, dict):
            cls = typing.get_args(cls)[-1]
        elif dataclasses.is_dataclass(cls):
            cls = typing.get_type_hints(cls).get(part)
        else:
            return None
    return cls if dataclasses.is_dataclass(cls) else None


def config_error(err: pydantic.ValidationError, cls: type) -> ConfigError:
    """One ConfigError for pydantic's errors: `Cls.dotted.field = value is not allowed; expected ...` per error;
    an error raised by a __post_init__ check keeps its own message."""
    lines = []
    for item in err.errors(include_url=False):
        cause = (item.get("ctx") or {}).get("error")
        if isinstance(cause, ConfigError):
            lines.append(str(cause))
            continue
        where = ".".join([cls.__name__, *(str(part) for part in item["loc"])])
        if item["type"] == "unexpected_keyword_argument":
            owner = _class_at(cls, item["loc"][:-1])
            allowed = sorted(f.name for f in dataclasses.fields(owner)) if owner else "?"
            lines.append(f"{where.rsplit('.', 1)[0]}: unknown key(s) {[item['loc'][-1]]}; allowed keys are {allowed}")
            continue
        expected = EXPECTED.get(item["type"], item["msg"])
        lines.append(f"{where} = {item.get('input')!r:.80} is not allowed; expected {expected}")
    return ConfigError("\n".join(dict.fromkeys(lines)))


def config_dataclass(cls=None, *, frozen: bool = False):
    """A validated config class: a pydantic dataclass whose constructor raises ConfigError."""
    def wrap(cls):
        cls = pydantic.dataclasses.dataclass(cls, config=PYDANTIC, frozen=frozen)
        build = cls.__init__

        @functools.wraps(build)
        def __init__(self, *args, **kwargs):
            try:
                build(self, *args, **kwargs)
            except pydantic.ValidationError as err:
                raise config_error(err, type(self)) from None

        cls.__init__ = __init__
        return cls
    return wrap if cls is None else wrap(cls)


def require(ok: bool, cls: str, name: str, value: Any, allowed: str) -> None:
    if not ok:
        raise ConfigError(f"{cls}.{name} = {value!r} is not allowed; expected {allowed}")


def choice(cls: str, name: str, value: Any, choices: tuple) -> None:
    require(value in choices, cls, name, value, f"one of {list(choices)}")


def positive(cls: str, name: str, value: Any) -> None:
    require(isinstance(value, (int, float)) and value > 0, cls, name, value, "a number > 0")


def _fraction(cls: str, name: str, value: Any) -> None:
    require(isinstance(value, (int, float)) and 0 <= value <= 1, cls, name, value, "a number in [0, 1]")


TASKS = ("arith-ops", "arith-forms", "gsm8k")
SKILLS = ("S1", "S2", "S3")
MIX_KEY = re.compile(r"^(leak:)?(S[123])(\.half[01])?$")


@config_dataclass
class TaskConfig:
    name: Str = "arith-ops"
    """task family: arith-ops (algorithm gap), arith-forms (format gap), gsm8k (paper profile)"""
    max_operand: Int = 99
    """operands are drawn from 0..max_operand (multiplication: second operand 0..9)"""
    test_per_skill: Int = 200
    """held-out test prompts per skill, disjoint from every training and RL prompt"""
    pool_per_skill: Int = 50
    """RL prompt pool per skill (pool regime); 0 means fresh training prompts every step"""
    leak_n: Int = 150
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
        choice(c, "name", self.name, TASKS)
        require(isinstance(self.max_operand, int) and 9 <= self.max_operand <= 999, c, "max_operand",
                self.max_operand, "an integer in [9, 999]")
        for f in ("test_per_skill", "leak_n"):
            positive(c, f, getattr(self, f))
        require(isinstance(self.pool_per_skill, int) and self.pool_per_skill >= 0, c, "pool_per_skill",
                self.pool_per_skill, "an integer >= 0")
        if self.name == "gsm8k":
            require(self.data_files is not None, c, "data_files", self.data_files,
                    "a path to a GSM8K-schema JSON file when name is 'gsm8k'")
        else:
            for name, empty in (("test_files", {}), ("instruction", ""), ("chat_template", False)):
                require(getattr(self, name) == empty, c, name, getattr(self, name),
                        f"{empty!r} when name is {self.name!r} (a gsm8k setting)")


ARCHS = ("gpt2", "llama", "qwen2", "mistral", "gpt_neox")
TOKENIZERS = ("bpe", "unigram", "wordpiece", "char")


@config_dataclass
class FamilyConfig:
    name: Str = "A"
    """policy id, e.g. A, B, C"""
    arch: Str = "gpt2"
    """transformers architecture: gpt2, llama, qwen2, mistral (the fast path knows these four) or gpt_neox"""
    tokenizer: Str = "bpe"
    """tokenizer kind trained on the task corpus: bpe (byte-level), unigram (Metaspace-free, char-level here),
    wordpiece (##) or char (one token per character)"""
    vocab_size: Int = 48
    """target vocabulary size of the trained tokenizer (Unigram on digits degenerates to characters; char: unused,
    the corpus's alphabet decides)"""
    d_model: Int = 128
    """hidden size"""
    n_layers: Int = 4
    """transformer blocks"""
    n_heads: Int = 4
    """attention heads"""
    n_kv_heads: Int = 2
    """key/value heads (llama, qwen2: grouped-query attention); ignored by gpt2"""
    d_ff: Int = 384
    """MLP width"""
    warmup_mix: dict[Str, Float] = field(default_factory=lambda: {"S1": 0.75, "S3.half0": 0.22, "leak:S2": 0.03})
    """supervised warm-up mixture: keys S1|S2|S3, optional .half0|.half1, prefix leak: for the fixed leak subset; weights sum to 1"""

    def __post_init__(self):
        c = f"FamilyConfig[{self.name}]"
        choice(c, "arch", self.arch, ARCHS)
        choice(c, "tokenizer", self.tokenizer, TOKENIZERS)
        for f in ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff"):
            require(isinstance(getattr(self, f), int) and getattr(self, f) > 0, c, f, getattr(self, f),
                    "a positive integer")
        require(self.d_model % self.n_heads == 0, c, "n_heads", self.n_heads, f"a divisor of d_model={self.d_model}")
        require(self.n_heads % self.n_kv_heads == 0, c, "n_kv_heads", self.n_kv_heads,
                f"a divisor of n_heads={self.n_heads}")
        require(isinstance(self.warmup_mix, dict) and len(self.warmup_mix) > 0, c, "warmup_mix",
                self.warmup_mix, "a non-empty mapping of skill keys to weights")
        for k, w in self.warmup_mix.items():
            require(bool(MIX_KEY.match(str(k))), c, f"warmup_mix[{k!r}]", k,
                    "a key like S1, S3.half0 or leak:S2")
            _fraction(c, f"warmup_mix[{k!r}]", w)
        total = sum(self.warmup_mix.values())
        require(abs(total - 1) < 1e-6, c, "warmup_mix", self.warmup_mix, f"weights summing to 1 (got {total:.4f})")


@config_dataclass
class WarmupConfig:
    steps: Int = 1000
    """supervised warm-up steps (completion-only cross-entropy)"""
    batch_size: Int = 256
    """examples per warm-up step"""
    lr: Float = 3e-3
    """AdamW peak learning rate, cosine decay after a linear warm-up"""
    lr_warmup_steps: Int = 50
    """linear learning-rate warm-up steps"""
    grad_clip: Float = 1.0
    """global gradient-norm clip"""
    seed: Int = 0
    """seed of initialisation and the warm-up data stream"""
    precision: Str = "fp32"
    """matmul precision of the warm-up forward and backward: fp32, or bf16 (autocast; weights, gradients and
    AdamW state stay fp32). bf16 was about 2x faster than fp32 on a CPU with AVX512-BF16 and about 3x slower on one
    without (emulated), and its roundings differ between the two, so a bf16 zoo is rebuilt bit for bit only on a
    CPU of the same kind (mrl.results.machine() is recorded in zoo.json)"""

    def __post_init__(self):
        c = "WarmupConfig"
        for f in ("steps", "batch_size", "lr", "grad_clip"):
            positive(c, f, getattr(self, f))
        choice(c, "precision", self.precision, PRECISIONS)
        require(isinstance(self.lr_warmup_steps, int) and 0 <= self.lr_warmup_steps <= self.steps, c,
                "lr_warmup_steps", self.lr_warmup_steps, f"an integer in [0, steps={self.steps}]")


def default_families() -> list[FamilyConfig]:
    """The default pair: A (GPT-2 + byte-level BPE, strong on S1) and B (Llama + Unigram, strong on S2)."""
    return [FamilyConfig(name="A", arch="gpt2", tokenizer="bpe", vocab_size=48, d_ff=512,
                         warmup_mix={"S1": 0.75, "S3.half0": 0.22, "leak:S2": 0.03}),
            FamilyConfig(name="B", arch="llama", tokenizer="unigram", vocab_size=40,
                         warmup_mix={"S2": 0.75, "S3.half1": 0.22, "leak:S1": 0.03})]


@config_dataclass
class ZooConfig:
    families: list[FamilyConfig] = field(default_factory=default_families)
    """the policies' families (FamilyConfig each); at least one"""
    warmup: WarmupConfig = field(default_factory=WarmupConfig)
    """supervised warm-up settings shared by every family"""
    max_positions: Int = 48
    """maximum sequence length of the models"""
    workers: Int = 2
    """warm-up processes run at once (1 torch thread each; more than the cores keeps them all busy); 1 = in this process"""

    def __post_init__(self):
        c = "ZooConfig"
        require(len(self.families) >= 1, c, "families", self.families, "at least one family")
        names = [f.name for f in self.families]
        require(len(set(names)) == len(names), c, "families", names, "distinct family names")
        require(isinstance(self.workers, int) and self.workers >= 1, c, "workers", self.workers, "an integer >= 1")
        positive(c, "max_positions", self.max_positions)


SCALES = ("group", "batch", "none")


@config_dataclass
class GrpoConfig:
    steps: Int = 150
    """RL steps (one sampling round and one optimizer step each)"""
    prompts_per_step: Int = 16
    """prompts per step (P)"""
    group_size: Int = 8
    """completions per prompt (G)"""
    max_new_tokens: Int = 6
    """maximum completion length, EOS included"""
    temperature: Float = 1.0
    """sampling temperature (full softmax, no top-k)"""
    lr: Float = 1e-4
    """Adam learning rate (1e-4 was stable; 3e-4 degraded, 1e-3 collapsed in the prototypes)"""
    grad_clip: Float = 1.0
    """global gradient-norm clip"""
    loss_type: Str = "grpo"
    """aggregation: grpo, bnpo, dr_grpo, dapo (TRL's definitions)"""
    level: Str = "token"
    """importance ratio level: token or sequence (GSPO)"""
    scale: Str = "group"
    """advantage normaliser: group, batch, none"""
    eps_low: Float = 0.2
    """lower clip range"""
    eps_high: Float = 0.2
    """upper clip range"""
    beta: Float = 0.0
    """k3 KL coefficient against the frozen warm-up policy"""
    kl_bias_correction: Bool = False
    """multiply k3 by the importance ratio (TRL's use_bias_correction_kl)"""
    engine: Str = "fast"
    """sampling and log-prob engine: fast (mrl.fast, for the gpt2 / llama / qwen2 checkpoints it implements
    exactly; any other falls back to transformers), hf (the transformers forward, the reference) or generate
    (sampling by transformers' generate with a static cache, for real model sizes on a GPU; the sampling
    log-probs and the training forward are hf's)"""
    skip_zero_advantage: Bool = True
    """do not forward sequences with A = 0 (exact when beta = 0; the loss normaliser keeps the full batch)"""
    eval_every: Int = 25
    """greedy evaluation on pool and held-out prompts every this many steps"""
    seed: Int = 0
    """RL seed: prompt order and sampling draw from generators derived from (seed, step, policy)"""

    def __post_init__(self):
        c = "GrpoConfig"
        choice(c, "loss_type", self.loss_type, LOSS_TYPES)
        choice(c, "level", self.level, LEVELS)
        choice(c, "scale", self.scale, SCALES)
        choice(c, "engine", self.engine, ENGINES)
        for f in ("steps", "prompts_per_step", "max_new_tokens", "temperature", "lr", "grad_clip", "eval_every"):
            positive(c, f, getattr(self, f))
        require(isinstance(self.group_size, int) and self.group_size >= 2, c, "group_size", self.group_size,
                "an integer >= 2")
        for f in ("eps_low", "eps_high"):
            require(0 < getattr(self, f) < 1, c, f, getattr(self, f), "a number in (0, 1)")
        require(self.beta >= 0, c, "beta", self.beta, "a number >= 0")


DTYPES = ("float32", "bfloat16")
DEVICE_SPEC = re.compile(r"^(auto|cpu|cuda(:[0-9]+)?)$")


@config_dataclass
class PlacementConfig:
    """Where one policy lives and how it computes (mrl.placement); the defaults are this CPU's setting."""

    device: Str = "auto"
    """auto (the GPU Ray assigned to the actor, else cuda when present, else cpu), cpu, cuda or cuda:N; the
    model, its optimizer state, the reference and teacher models and every tensor a step creates live there"""
    dtype: Str = "float32"
    """float32, or bfloat16: forwards under bf16 autocast over fp32 master weights (Adam and the loss in fp32),
    the frozen reference and teacher models stored in bf16"""
    gradient_checkpointing: Bool = False
    """recompute each layer's activations in the backward of the update (transformers' activation checkpointing,
    so the hf and generate engines; the CPU fast path computes outside transformers' layers and ignores it)"""
    micro_batch: Int = 0
    """sequences per forward and backward of the update (0: the whole step's batch at once); the gradient is the
    whole batch's (mrl.placement.MicroBatchedLogprobs)"""
    gpus: Float = 0.0
    """GPUs the ray backend reserves for this policy's actor (0.5: two policies share one GPU)"""

    def __post_init__(self):
        c = "PlacementConfig"
        require(isinstance(self.device, str) and DEVICE_SPEC.match(self.device) is not None, c, "device",
                self.device, "auto, cpu, cuda or cuda:N")
        choice(c, "dtype", self.dtype, DTYPES)
        require(isinstance(self.micro_batch, int) and self.micro_batch >= 0, c, "micro_batch", self.micro_batch,
                "an integer >= 0 (0: the whole batch)")
        require(self.gpus >= 0, c, "gpus", self.gpus, "a number >= 0")


FAILURE_POLICIES = ("fail", "continue")
ATTACKS = ("forged_success", "lying_stats", "malformed")
"""what a poisoned peer publishes (mrl.poison)"""


@config_dataclass
class RunnerConfig:
    backend: Str = "inline"
    """MWRA backend: inline (deterministic), process (one process per policy), ray"""
    mode: Str = "sync"
    """step clock: sync (a barrier after each phase) or async (a worker runs up to `staleness` steps ahead)"""
    staleness: Int = 1
    """async only: how many steps a worker may run ahead of the slowest one"""
    step_timeout: Float = 600.0
    """seconds a worker may take for one phase before it is declared failed"""
    failure_policy: Str = "fail"
    """on a failed worker: fail (raise, keeping the last complete checkpoint) or continue without it"""
    checkpoint_every: Int = 0
    """write a checkpoint every this many steps (0: never)"""
    max_staleness: Int = 1
    """peer experience whose policy version is more than this many steps behind the clock is dropped by SEE;
    a step-s sample comes from version s - 1, so 1 shares exactly the current step's samples"""
    report_to: Str = "none"
    """live metrics of every step (mrl.tracking): none, tensorboard or trackio"""
    logging_dir: Str | None = None
    """report_to=tensorboard: the folder of the event files (default results/tensorboard/<run_id>)"""
    poisoned: Str = ""
    """a policy of the run that publishes lies (mrl.poison), '' for none"""
    attack: Str = "forged_success"
    """what the poisoned policy publishes: forged_success, lying_stats or malformed (mrl.poison)"""
    reverify: Bool = True
    """every learner re-scores its peers' claimed successes and rewards with its own verifier; False takes
    them as claimed (the poisoned-peer ablation)"""

    def __post_init__(self):
        c = "RunnerConfig"
        choice(c, "report_to", self.report_to, REPORT_TO)
        choice(c, "backend", self.backend, BACKENDS)
        choice(c, "failure_policy", self.failure_policy, FAILURE_POLICIES)
        choice(c, "mode", self.mode, ("sync", "async"))
        choice(c, "attack", self.attack, ATTACKS)
        require(isinstance(self.staleness, int) and self.staleness >= 0, c, "staleness", self.staleness,
                "an integer >= 0")
        positive(c, "step_timeout", self.step_timeout)
        require(isinstance(self.checkpoint_every, int) and self.checkpoint_every >= 0, c, "checkpoint_every",
                self.checkpoint_every, "an integer >= 0")
        require(isinstance(self.max_staleness, int) and self.max_staleness >= 1, c, "max_staleness",
                self.max_staleness, "an integer >= 1 (a step's own samples are 1 step behind the clock)")


ProbeEntry = Union[Str, dict[Str, Any]]
"""a probe of a grid: a registered name, or a mapping {name: ..., knob: value} (mrl.probes.as_probe_config)"""
PAIRING_NAME = re.compile(r"^[A-Za-z0-9]+(\+[A-Za-z0-9]+)*$")


def _int_list(cls: str, name: str, values: Any, minimum: int = 0) -> None:
    require(isinstance(values, list) and len(values) > 0 and len(set(values)) == len(values)
            and all(isinstance(v, int) and not isinstance(v, bool) and v >= minimum for v in values),
            cls, name, values, f"a non-empty list of distinct integers >= {minimum}")


def _probe_entries(cls: str, name: str, values: Any) -> None:
    """Every entry a registered probe with valid knobs (checked against mrl.probes' registry)."""
    from mrl.probes import as_probe_config  # mrl.probes imports this module

    require(isinstance(values, list) and len(values) > 0, cls, name, values,
            "a non-empty list of probe names or mappings {name: ..., knob: value}")
    for entry in values:
        require(isinstance(entry, str) or isinstance(entry.get("name"), str), cls, name, entry,
                "a probe name or a mapping with a name: {name: ..., knob: value}")
        try:
            as_probe_config(entry)
        except (ConfigError, ValueError, TypeError) as err:
            raise ConfigError(f"{cls}.{name}: entry {entry!r} is not a valid probe: {err}") from None


@config_dataclass
class ProbeGridConfig:
    """40_probe: every probe on every pairing and seed, each one run of the runner."""

    pairings: list[Str] = field(default_factory=lambda: ["A+B"])
    """the policy groups trained together, by their names in RunConfig.pairings"""
    probes: list[ProbeEntry] = field(default_factory=lambda: ["grpo", "prp", "prp_naive", "xgrpo", "sgt"])
    """the probes, each a registered name or a mapping {name: ..., knob: value} (mrl.probes)"""
    seeds: list[Int] = field(default_factory=lambda: [0])
    """RL seeds of every (pairing, probe)"""
    steps: dict[Str, Int] = field(default_factory=lambda: {"A+B": 4})
    """RL steps per pairing"""

    def __post_init__(self):
        c = "ProbeGridConfig"
        require(isinstance(self.pairings, list) and len(self.pairings) > 0, c, "pairings", self.pairings,
                "a non-empty list of pairing names")
        _probe_entries(c, "probes", self.probes)
        _int_list(c, "seeds", self.seeds)
        require(isinstance(self.steps, dict) and set(self.pairings) <= set(self.steps)
                and all(isinstance(v, int) and v >= 1 for v in self.steps.values()), c, "steps", self.steps,
                f"a mapping with a positive integer for every pairing in {self.pairings}")


@config_dataclass
class HacpoGridConfig:
    """50_hacpo: HACPO and its baselines over seeds (the MRL probes' runs are shared with 40_probe), and its
    ablations on fewer seeds."""

    pairings: list[Str] = field(default_factory=lambda: ["A+B"])
    """the policy groups trained together, by their names in RunConfig.pairings"""
    probes: list[ProbeEntry] = field(default_factory=lambda: ["hacpo", "gspo", "gspo_x2", "naive", "grpo", "prp",
                                                              "prp_naive", "xgrpo", "sgt"])
    """the arms of the comparison table (names or mappings, as in ProbeGridConfig.probes)"""
    seeds: list[Int] = field(default_factory=lambda: [0])
    """RL seeds of the comparison"""
    steps: Int = 4
    """RL steps of every comparison run"""
    ablation_seeds: list[Int] = field(default_factory=lambda: [0])
    """RL seeds of the ablations"""
    ablation_steps: Int = 2
    """RL steps of every ablation run"""

    def __post_init__(self):
        c = "HacpoGridConfig"
        require(isinstance(self.pairings, list) and len(self.pairings) > 0, c, "pairings", self.pairings,
                "a non-empty list of pairing names")
        _probe_entries(c, "probes", self.probes)
        _int_list(c, "seeds", self.seeds)
        _int_list(c, "ablation_seeds", self.ablation_seeds)
        for f in ("steps", "ablation_steps"):
            require(isinstance(getattr(self, f), int) and getattr(self, f) >= 1, c, f, getattr(self, f),
                    "an integer >= 1")


@config_dataclass
class MwraTimingConfig:
    """30_mwra: the same short run on each backend, timed."""

    pairing: Str = "A+B"
    """the policy group, by its name in RunConfig.pairings"""
    steps: Int = 4
    """RL steps per backend"""
    backends: list[Str] = field(default_factory=lambda: list(BACKENDS))
    """the backends to time (the first is the reference the others must match)"""

    def __post_init__(self):
        c = "MwraTimingConfig"
        require(isinstance(self.steps, int) and self.steps >= 1, c, "steps", self.steps, "an integer >= 1")
        require(isinstance(self.backends, list) and len(self.backends) > 0 and set(self.backends) <= set(BACKENDS),
                c, "backends", self.backends, f"a non-empty list drawn from {list(BACKENDS)}")


@config_dataclass
class BanditConfig:
    """60_bandit: the contextual-bandit analysis (a reconstruction), its budgets."""

    kappas: list[Float] = field(default_factory=lambda: [0.25, 1.0])
    """support overlaps kappa of the stability-support plane"""
    reps: Int = 200
    """Monte Carlo repetitions per point"""
    dynamics_kappas: list[Float] = field(default_factory=lambda: [0.5])
    """support overlaps of the dynamic simulation"""
    seeds: list[Int] = field(default_factory=lambda: [0])
    """seeds of the dynamic simulation"""
    steps: Int = 30
    """steps T of the dynamic simulation"""

    def __post_init__(self):
        c = "BanditConfig"
        for f in ("kappas", "dynamics_kappas"):
            values = getattr(self, f)
            require(isinstance(values, list) and len(values) > 0
                    and all(isinstance(v, (int, float)) and 0 < v <= 1 for v in values), c, f, values,
                    "a non-empty list of numbers in (0, 1]")
        _int_list(c, "seeds", self.seeds)
        for f in ("reps", "steps"):
            require(isinstance(getattr(self, f), int) and getattr(self, f) >= 1, c, f, getattr(self, f),
                    "an integer >= 1")


def heldout_families() -> list[FamilyConfig]:
    """The held-out experiment's pair (notes/prototype2.md): A (GPT-2 + byte-level BPE) owns form S3, B (Llama +
    char-level Unigram) owns S2, both warmed up on S1 with a 1% leak of the peer's form."""
    return [FamilyConfig(name="A", arch="gpt2", tokenizer="bpe", vocab_size=64, d_ff=512,
                         warmup_mix={"S1": 0.495, "S3": 0.495, "leak:S2": 0.01}),
            FamilyConfig(name="B", arch="llama", tokenizer="unigram", vocab_size=24, n_kv_heads=2, d_ff=384,
                         warmup_mix={"S1": 0.495, "S2": 0.495, "leak:S3": 0.01})]


@config_dataclass
class HeldoutConfig:
    """70_heldout: the held-out experiment (arith-forms, fresh RL prompts every step, a form gap over one shared
    algorithm): its own task and zoo, and a grid paired on GRPO (the same RL seeds and zoo seeds for every probe)."""

    task: TaskConfig = field(default_factory=lambda: TaskConfig(name="arith-forms", test_per_skill=400,
                                                                pool_per_skill=0, leak_n=20))
    """the task and its splits: pool_per_skill 0 draws fresh training prompts every RL step"""
    zoo: ZooConfig = field(default_factory=lambda: ZooConfig(families=heldout_families(), max_positions=40))
    """the families and their warm-up (its warmup.seed is replaced by each of zoo_seeds)"""
    pairing: list[Str] = field(default_factory=lambda: ["A", "B"])
    """the two policies trained together (each one's weak form is the other's own form)"""
    probes: list[ProbeEntry] = field(default_factory=lambda: ["grpo", "sgt"])
    """the probes (names or mappings, as in ProbeGridConfig.probes); grpo is the paired baseline and must be one"""
    seeds: list[Int] = field(default_factory=lambda: [0])
    """RL seeds of every probe (on every zoo seed that probe runs on)"""
    zoo_seeds: list[Int] = field(default_factory=lambda: [0])
    """warm-up seeds (initialisation and data stream) of the zoos; the first runs every probe"""
    zoo_seed_probes: list[Str] = field(default_factory=lambda: ["grpo", "sgt"])
    """the probes that also run on the zoo seeds after the first, so their interval covers the warm-up"""
    steps: Int = 4
    """RL steps of every run"""
    eval_every: Int = 2
    """greedy held-out evaluation every this many steps"""
    knob_probes: list[ProbeEntry] = field(default_factory=list)
    """knob variants of the probes (mappings {name: ..., knob: value}), each paired with its probe's default on the
    first zoo seed"""
    knob_seeds: list[Int] = field(default_factory=lambda: [0])
    """RL seeds of the knob variants and of their defaults (one seed: the differences are shown, never called real)"""

    def __post_init__(self):
        c = "HeldoutConfig"
        require(self.task.name == "arith-forms" and self.task.pool_per_skill == 0, c, "task",
                f"name={self.task.name}, pool_per_skill={self.task.pool_per_skill}",
                "arith-forms with pool_per_skill 0 (fresh prompts)")
        families = [f.name for f in self.zoo.families]
        require(isinstance(self.pairing, list) and len(set(self.pairing)) == len(self.pairing) >= 2
                and set(self.pairing) <= set(families), c, "pairing", self.pairing,
                f"two or more distinct policies drawn from {families}")
        _probe_entries(c, "probes", self.probes)
        names = [p if isinstance(p, str) else p.get("name") for p in self.probes]
        require("grpo" in names, c, "probes", names, "a list that includes grpo (the paired baseline)")
        require(isinstance(self.zoo_seed_probes, list) and set(self.zoo_seed_probes) <= set(names)
                and ("grpo" in self.zoo_seed_probes or len(self.zoo_seeds) == 1), c, "zoo_seed_probes",
                self.zoo_seed_probes,
                f"probe names drawn from {names}, grpo among them (each zoo seed needs its baseline)")
        _int_list(c, "seeds", self.seeds)
        _int_list(c, "zoo_seeds", self.zoo_seeds)
        _int_list(c, "knob_seeds", self.knob_seeds)
        if self.knob_probes:
            _probe_entries(c, "knob_probes", self.knob_probes)
        for f in ("steps", "eval_every"):
            require(isinstance(getattr(self, f), int) and getattr(self, f) >= 1, c, f, getattr(self, f),
                    "an integer >= 1")


@config_dataclass
class BeyondConfig:
    """80_beyond: methods beyond the papers on the held-out experiment (its zoo seed 0, pairing, steps and GRPO
    settings), every arm paired with GRPO on the same RL seeds."""

    probes: list[ProbeEntry] = field(default_factory=lambda: ["trrd"])
    """probes run online between the pairing's policies (the MRL probes and HACPO come from the held-out grid)"""
    offline_probes: list[ProbeEntry] = field(default_factory=lambda: ["graft"])
    """probes run by one learner at a time against its peer replayed from the grpo run's experience log"""
    poison_probes: list[ProbeEntry] = field(default_factory=lambda: ["sgt", "prp", "graft", "hacpo", "xgrpo"])
    """probes run beside a poisoned peer; each meets the attacks on the record kinds it reads"""
    attacks: list[Str] = field(default_factory=lambda: ["forged_success", "lying_stats"])
    """what the poisoned peer publishes (mrl.poison)"""
    poisoned: Str = "B"
    """the policy that lies; the other learns beside it"""
    seeds: list[Int] = field(default_factory=lambda: [0])
    """RL seeds of every arm (and of its GRPO pair)"""
    reverified_seeds: list[Int] = field(default_factory=lambda: [0])
    """RL seeds of the poisoned runs with re-verification on (each must equal the honest run: a check, not an
    estimate)"""
    scaling_families: list[FamilyConfig] = field(default_factory=list)
    """families added to the held-out pairing, in order, for the n-policy runs (built into the held-out zoo on its
    first zoo seed)"""
    scaling_sizes: list[Int] = field(default_factory=lambda: [2])
    """numbers of policies n: the pairing plus the first n - 2 scaling families"""
    scaling_probe: ProbeEntry = "sgt"
    """the probe every n-policy run shares with"""
    scaling_modes: list[Str] = field(default_factory=lambda: ["sync"])
    """step clocks compared (RunnerConfig.mode): sync, async (each worker up to one step ahead)"""
    scaling_seeds: list[Int] = field(default_factory=lambda: [0])
    """RL seeds of the n-policy runs"""
    scaling_steps: Int = 4
    """RL steps of the n-policy runs"""
    scaling_backend: Str = "process"
    """the backend the n-policy runs use, one run at a time, so their wall times compare the clocks (not packed)"""

    def __post_init__(self):
        c = "BeyondConfig"
        names = [f.name for f in self.scaling_families]
        require(len(set(names)) == len(names) and not set(names) & {"A", "B"}, c, "scaling_families", names,
                "families with distinct names other than the pairing's A and B")
        require(isinstance(self.scaling_sizes, list) and self.scaling_sizes
                and all(isinstance(n, int) and 2 <= n <= 2 + len(names) for n in self.scaling_sizes), c,
                "scaling_sizes", self.scaling_sizes, f"integers from 2 to {2 + len(names)} (2 + the scaling families)")
        _probe_entries(c, "scaling_probe", [self.scaling_probe])
        require(isinstance(self.scaling_modes, list) and self.scaling_modes
                and set(self.scaling_modes) <= {"sync", "async"}, c, "scaling_modes", self.scaling_modes,
                "a non-empty list drawn from ['sync', 'async']")
        _int_list(c, "scaling_seeds", self.scaling_seeds)
        require(isinstance(self.scaling_steps, int) and self.scaling_steps >= 1, c, "scaling_steps",
                self.scaling_steps, "an integer >= 1")
        choice(c, "scaling_backend", self.scaling_backend, BACKENDS)
        for name in ("probes", "offline_probes", "poison_probes"):
            _probe_entries(c, name, getattr(self, name))
        require(isinstance(self.attacks, list) and len(self.attacks) > 0 and set(self.attacks) <= set(ATTACKS), c,
                "attacks", self.attacks, f"a non-empty list drawn from {list(ATTACKS)}")
        _int_list(c, "seeds", self.seeds)
        _int_list(c, "reverified_seeds", self.reverified_seeds)


@config_dataclass
class ExperimentsConfig:
    """The grids and budgets of the notebooks' experiments."""

    mwra: MwraTimingConfig = field(default_factory=MwraTimingConfig)
    """30_mwra"""
    probe: ProbeGridConfig = field(default_factory=ProbeGridConfig)
    """40_probe"""
    hacpo: HacpoGridConfig = field(default_factory=HacpoGridConfig)
    """50_hacpo"""
    bandit: BanditConfig = field(default_factory=BanditConfig)
    """60_bandit"""
    heldout: HeldoutConfig = field(default_factory=HeldoutConfig)
    """70_heldout"""
    beyond: BeyondConfig = field(default_factory=BeyondConfig)
    """80_beyond"""


NOTEBOOKS = ("00_zoo", "01_tour", "10_grpo_baseline", "20_thl", "30_mwra", "40_probe", "50_hacpo", "60_bandit",
             "70_heldout", "80_beyond")


@config_dataclass
class RunConfig:
    """A profile: everything `make reproduce` runs on one kind of machine, in one YAML file (configs/<profile>.yaml)."""

    task: TaskConfig = field(default_factory=TaskConfig)
    """the task and its splits"""
    zoo: ZooConfig = field(default_factory=ZooConfig)
    """the families and their warm-up"""
    grpo: GrpoConfig = field(default_factory=GrpoConfig)
    """GRPO training of each policy (every probe's own-sample term)"""
    policies: dict[Str, Str] = field(default_factory=dict)
    """paper profile: {name: local folder of a pretrained checkpoint}; empty: the zoo built from `zoo`"""
    pairings: dict[Str, list[Str]] = field(default_factory=lambda: {"A+B": ["A", "B"]})
    """the policy groups trained together: {name: [policy names]}"""
    backend: Str = "inline"
    """MWRA backend of the experiments' runs: inline, process, ray (same metrics, different wall time)"""
    step_timeout: Float = 900.0
    """seconds a worker may take for one phase of a step before it is declared failed"""
    threads: Int = 1
    """torch threads per policy worker (1 keeps CPU runs bit-reproducible)"""
    packed_runs: Int = 1
    """independent runs of a grid executed at once, each inline in its own process (no core waits at a barrier);
    1: one run at a time on `backend`"""
    placement: dict[Str, PlacementConfig] = field(default_factory=dict)
    """{policy name: its device, dtype, checkpointing, micro-batch and GPU share}; a policy not named takes the
    defaults (this CPU)"""
    notebooks: list[Str] = field(default_factory=lambda: list(NOTEBOOKS))
    """the notebooks `python -m mrl.reproduce` runs for this profile, in order"""
    experiments: ExperimentsConfig = field(default_factory=ExperimentsConfig)
    """the grids and budgets of each notebook's experiment"""

    def __post_init__(self):
        c = "RunConfig"
        for name in ("threads", "packed_runs"):
            require(isinstance(getattr(self, name), int) and getattr(self, name) >= 1, c, name, getattr(self, name),
                    "an integer >= 1")
        choice(c, "backend", self.backend, BACKENDS)
        positive(c, "step_timeout", self.step_timeout)
        require(isinstance(self.notebooks, list) and set(self.notebooks) <= set(NOTEBOOKS), c, "notebooks",
                self.notebooks, f"a list drawn from {list(NOTEBOOKS)}")
        require(isinstance(self.pairings, dict) and all(
           PAIRING_NAME.match(str(k)) and isinstance(v, list) and len(v) >= 1 for k, v in self.pairings.items()),
           c, "pairings", self.pairings, "a mapping like {'A+B': ['A', 'B']}")
        known = set(self.policies) if self.policies else {f.name for f in self.zoo.families}
        for name, members in self.pairings.items():
            require(set(members) <= known, c, f"pairings[{name!r}]", members, f"policies drawn from {sorted(known)}")
        require(set(self.placement) <= known, c, "placement", sorted(self.placement),
                f"policy names drawn from {sorted(known)}")
        used = [*self.experiments.probe.pairings, *self.experiments.hacpo.pairings, self.experiments.mwra.pairing]
        for name in used:
            require(name in self.pairings, c, "experiments", name,
                    f"a pairing defined in pairings {list(self.pairings)}")

    def placement_of(self, name: str) -> PlacementConfig:
        """The placement of one policy (the defaults when the profile does not name it)."""
        return self.placement.get(name, PlacementConfig())

    def pairing(self, name: str) -> list[str]:
        """The policy names of a pairing."""
        if name not in self.pairings:
            raise ConfigError(f"pairing={name!r} is not allowed; expected one of {list(self.pairings)}")
        return list(self.pairings[name])


C = TypeVar("C")


class StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key that appears twice in one mapping (PyYAML keeps the last)."""

    def construct_mapping(self, node, deep=False):
        seen = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # keys a merge (<<: *anchor) brings in may be overridden, as in PyYAML
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise ConfigError(f"duplicate key {key!r} at line {key_node.start_mark.line + 1} (first at line "
                                  f"{seen[key] + 1}){_where(node)}")
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


def _where(node) -> str:
    name = node.start_mark.name
    return "" if name.startswith("<") else f" of {name}"


def load_config(source: str | Path | dict, cls: type[C] = RunConfig) -> C:
    """Load a config from a YAML file, a YAML string or a dict; an empty file, duplicate or unknown keys and bad
    values raise ConfigError."""
    if isinstance(source, dict):
        values = source
    else:
        is_file = Path(str(source)).suffix in (".yaml", ".yml")
        text = Path(source).read_text() if is_file else str(source)
        try:
            values = yaml.load(text, Loader=StrictLoader)
        except yaml.YAMLError as err:
            raise ConfigError(f"{source if is_file else 'the YAML text'} is not valid YAML: {err}") from None
        if values is None:
            raise ConfigError(f"{source if is_file else 'the YAML text'} is empty; a config needs at least one "
                              f"setting (an empty mapping {{}} takes every default)")
    if not isinstance(values, dict):
        raise ConfigError(f"{cls.__name__} must be a mapping of settings, got {type(values).__name__}")
    return cls(**values)


def override(config: C, **values) -> C:
    """`dataclasses.replace(config, **values)` for a notebook's parameters: a value given as text for a list or
    mapping field (papermill's `-p probes '["sgt"]'`) is parsed as YAML first; None values are left out."""
    fields = {f.name: f for f in dataclasses.fields(config)}
    changes = {}
    for name, value in values.items():
        if value is None:
            continue
        if name not in fields:
            raise ConfigError(f"{type(config).__name__} has no setting {name!r}; allowed: {sorted(fields)}")
        kind = getattr(fields[name].type, "__origin__", fields[name].type)
        if isinstance(value, str) and (kind in (list, dict) or str(kind).startswith(("list", "dict"))):
            try:
                value = yaml.load(value, Loader=StrictLoader)
            except yaml.YAMLError as err:
                raise ConfigError(f"{type(config).__name__}.{name} = {value!r} is not valid YAML: {err}") from None
        changes[name] = value
    return dataclasses.replace(config, **changes)


def to_dict(config: Any) -> dict:
    """A plain, JSON-serialisable dict of a config (nested dataclasses included); dicts pass through."""
    return config if isinstance(config, dict) else dataclasses.asdict(config)


def config_hash(config: Any) -> str:
    """Short stable hash of a config; the zoo cache key."""
    blob = json.dumps(to_dict(config), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:12]

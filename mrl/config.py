"""Typed, YAML-loadable configs for tasks, the model zoo, GRPO training and runs.

Every config is a dataclass with one documented line per field (CleanRL's `Args` style) and a
`__post_init__` that validates values; `load_config` rejects unknown keys. Errors name the
field, the value and what is allowed, so a typo in a YAML file fails at load, not mid-run.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, get_type_hints

import yaml


class ConfigError(ValueError):
    """A config field has an unknown name or a value outside what is allowed."""


def _require(ok: bool, cls: str, name: str, value: Any, allowed: str) -> None:
    if not ok:
        raise ConfigError(f"{cls}.{name} = {value!r} is not allowed; expected {allowed}")


def _choice(cls: str, name: str, value: Any, choices: tuple) -> None:
    _require(value in choices, cls, name, value, f"one of {list(choices)}")


def _positive(cls: str, name: str, value: Any) -> None:
    _require(isinstance(value, (int, float)) and value > 0, cls, name, value, "a number > 0")


def _fraction(cls: str, name: str, value: Any) -> None:
    _require(isinstance(value, (int, float)) and 0 <= value <= 1, cls, name, value, "a number in [0, 1]")


TASKS = ("arith-ops", "arith-forms", "gsm8k")
SKILLS = ("S1", "S2", "S3")
MIX_KEY = re.compile(r"^(leak:)?(S[123])(\.half[01])?$")


@dataclass
class TaskConfig:
    name: str = "arith-ops"
    """task family: arith-ops (algorithm gap), arith-forms (format gap), gsm8k (paper profile)"""
    max_operand: int = 99
    """operands are drawn from 0..max_operand (multiplication: second operand 0..9)"""
    test_per_skill: int = 200
    """held-out test prompts per skill, disjoint from every training and RL prompt"""
    pool_per_skill: int = 50
    """RL prompt pool per skill (pool regime); 0 means fresh training prompts every step"""
    leak_n: int = 150
    """size of the fixed subset of a peer's skill from which the warm-up leak is drawn"""
    seed: int = 0
    """seed of the train/test/pool/leak splits"""
    data_files: str | None = None
    """gsm8k only: a local JSON/JSONL file in the GSM8K schema (question, answer '... #### 42')"""

    def __post_init__(self):
        c = "TaskConfig"
        _choice(c, "name", self.name, TASKS)
        _require(isinstance(self.max_operand, int) and 9 <= self.max_operand <= 999, c, "max_operand",
                 self.max_operand, "an integer in [9, 999]")
        for f in ("test_per_skill", "leak_n"):
            _positive(c, f, getattr(self, f))
        _require(isinstance(self.pool_per_skill, int) and self.pool_per_skill >= 0, c, "pool_per_skill",
                 self.pool_per_skill, "an integer >= 0")
        if self.name == "gsm8k":
            _require(self.data_files is not None, c, "data_files", self.data_files,
                     "a path to a GSM8K-schema JSON file when name is 'gsm8k'")


ARCHS = ("gpt2", "llama", "qwen2")
TOKENIZERS = ("bpe", "unigram", "wordpiece")


@dataclass
class FamilyConfig:
    name: str = "A"
    """policy id, e.g. A, B, C"""
    arch: str = "gpt2"
    """transformers architecture: gpt2, llama, qwen2"""
    tokenizer: str = "bpe"
    """tokenizer kind trained on the task corpus: bpe (byte-level), unigram (Metaspace-free, char-level here), wordpiece (##)"""
    vocab_size: int = 48
    """target vocabulary size of the trained tokenizer (Unigram on digits degenerates to characters)"""
    d_model: int = 128
    """hidden size"""
    n_layers: int = 4
    """transformer blocks"""
    n_heads: int = 4
    """attention heads"""
    n_kv_heads: int = 2
    """key/value heads (llama, qwen2: grouped-query attention); ignored by gpt2"""
    d_ff: int = 384
    """MLP width"""
    warmup_mix: dict = field(default_factory=lambda: {"S1": 0.75, "S3.half0": 0.22, "leak:S2": 0.03})
    """supervised warm-up mixture: keys S1|S2|S3, optional .half0|.half1, prefix leak: for the fixed leak subset; weights sum to 1"""

    def __post_init__(self):
        c = f"FamilyConfig[{self.name}]"
        _choice(c, "arch", self.arch, ARCHS)
        _choice(c, "tokenizer", self.tokenizer, TOKENIZERS)
        for f in ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff"):
            _require(isinstance(getattr(self, f), int) and getattr(self, f) > 0, c, f, getattr(self, f),
                     "a positive integer")
        _require(self.d_model % self.n_heads == 0, c, "n_heads", self.n_heads, f"a divisor of d_model={self.d_model}")
        _require(self.n_heads % self.n_kv_heads == 0, c, "n_kv_heads", self.n_kv_heads,
                 f"a divisor of n_heads={self.n_heads}")
        _require(isinstance(self.warmup_mix, dict) and len(self.warmup_mix) > 0, c, "warmup_mix",
                 self.warmup_mix, "a non-empty mapping of skill keys to weights")
        for k, w in self.warmup_mix.items():
            _require(bool(MIX_KEY.match(str(k))), c, f"warmup_mix[{k!r}]", k,
                     "a key like S1, S3.half0 or leak:S2")
            _fraction(c, f"warmup_mix[{k!r}]", w)
        total = sum(self.warmup_mix.values())
        _require(abs(total - 1) < 1e-6, c, "warmup_mix", self.warmup_mix, f"weights summing to 1 (got {total:.4f})")


@dataclass
class WarmupConfig:
    steps: int = 1000
    """supervised warm-up steps (completion-only cross-entropy)"""
    batch_size: int = 256
    """examples per warm-up step"""
    lr: float = 3e-3
    """AdamW peak learning rate, cosine decay after a linear warm-up"""
    lr_warmup_steps: int = 50
    """linear learning-rate warm-up steps"""
    grad_clip: float = 1.0
    """global gradient-norm clip"""
    seed: int = 0
    """seed of initialisation and the warm-up data stream"""

    def __post_init__(self):
        c = "WarmupConfig"
        for f in ("steps", "batch_size", "lr", "grad_clip"):
            _positive(c, f, getattr(self, f))
        _require(isinstance(self.lr_warmup_steps, int) and 0 <= self.lr_warmup_steps <= self.steps, c,
                 "lr_warmup_steps", self.lr_warmup_steps, f"an integer in [0, steps={self.steps}]")


def default_families() -> list[FamilyConfig]:
    """The default pair: A (GPT-2 + byte-level BPE, strong on S1) and B (Llama + Unigram, strong on S2)."""
    return [FamilyConfig(name="A", arch="gpt2", tokenizer="bpe", vocab_size=48, d_ff=512,
                         warmup_mix={"S1": 0.75, "S3.half0": 0.22, "leak:S2": 0.03}),
            FamilyConfig(name="B", arch="llama", tokenizer="unigram", vocab_size=40,
                         warmup_mix={"S2": 0.75, "S3.half1": 0.22, "leak:S1": 0.03})]


@dataclass
class ZooConfig:
    families: list = field(default_factory=default_families)
    """the policies' families (FamilyConfig each); at least one"""
    warmup: WarmupConfig = field(default_factory=WarmupConfig)
    """supervised warm-up settings shared by every family"""
    max_positions: int = 48
    """maximum sequence length of the models"""
    workers: int = 2
    """warm-up processes run at once (1 torch thread each; more than the cores keeps them all busy); 1 = in this process"""

    def __post_init__(self):
        c = "ZooConfig"
        self.families = [f if isinstance(f, FamilyConfig) else _build(FamilyConfig, f, "ZooConfig.families")
                         for f in self.families]
        if isinstance(self.warmup, dict):
            self.warmup = _build(WarmupConfig, self.warmup, "ZooConfig.warmup")
        _require(len(self.families) >= 1, c, "families", self.families, "at least one family")
        names = [f.name for f in self.families]
        _require(len(set(names)) == len(names), c, "families", names, "distinct family names")
        _require(isinstance(self.workers, int) and self.workers >= 1, c, "workers", self.workers, "an integer >= 1")
        _positive(c, "max_positions", self.max_positions)


LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")
LEVELS = ("token", "sequence")
SCALES = ("group", "batch", "none")


@dataclass
class GrpoConfig:
    steps: int = 150
    """RL steps (one sampling round and one optimizer step each)"""
    prompts_per_step: int = 16
    """prompts per step (P)"""
    group_size: int = 8
    """completions per prompt (G)"""
    max_new_tokens: int = 6
    """maximum completion length, EOS included"""
    temperature: float = 1.0
    """sampling temperature (full softmax, no top-k)"""
    lr: float = 1e-4
    """Adam learning rate (1e-4 was stable; 3e-4 degraded, 1e-3 collapsed in the prototypes)"""
    grad_clip: float = 1.0
    """global gradient-norm clip"""
    loss_type: str = "grpo"
    """aggregation: grpo, bnpo, dr_grpo, dapo (TRL's definitions)"""
    level: str = "token"
    """importance ratio level: token or sequence (GSPO)"""
    scale: str = "group"
    """advantage normaliser: group, batch, none"""
    eps_low: float = 0.2
    """lower clip range"""
    eps_high: float = 0.2
    """upper clip range"""
    beta: float = 0.0
    """k3 KL coefficient against the frozen warm-up policy"""
    kl_bias_correction: bool = False
    """multiply k3 by the importance ratio (TRL's use_bias_correction_kl)"""
    skip_zero_advantage: bool = True
    """do not forward sequences with A = 0 (exact when beta = 0; the loss normaliser keeps the full batch)"""
    eval_every: int = 25
    """greedy evaluation on pool and held-out prompts every this many steps"""
    seed: int = 0
    """RL seed: prompt order and sampling draw from generators derived from (seed, step, policy)"""

    def __post_init__(self):
        c = "GrpoConfig"
        _choice(c, "loss_type", self.loss_type, LOSS_TYPES)
        _choice(c, "level", self.level, LEVELS)
        _choice(c, "scale", self.scale, SCALES)
        for f in ("steps", "prompts_per_step", "max_new_tokens", "temperature", "lr", "grad_clip", "eval_every"):
            _positive(c, f, getattr(self, f))
        _require(isinstance(self.group_size, int) and self.group_size >= 2, c, "group_size", self.group_size,
                 "an integer >= 2")
        for f in ("eps_low", "eps_high"):
            _require(0 < getattr(self, f) < 1, c, f, getattr(self, f), "a number in (0, 1)")
        _require(self.beta >= 0, c, "beta", self.beta, "a number >= 0")


BACKENDS = ("inline", "process", "ray")
FAILURE_POLICIES = ("fail", "continue")


@dataclass
class ConcurrentConfig:
    backend: str = "inline"
    """MWRA backend: inline (deterministic), process (one process per policy), ray"""
    mode: str = "sync"
    """step clock: sync (a barrier after each phase) or async (a worker runs up to `staleness` steps ahead)"""
    staleness: int = 1
    """async only: how many steps a worker may run ahead of the slowest one"""
    step_timeout: float = 600.0
    """seconds a worker may take for one phase before it is declared failed"""
    failure_policy: str = "fail"
    """on a failed worker: fail (raise, keeping the last complete checkpoint) or continue without it"""
    checkpoint_every: int = 0
    """write a checkpoint every this many steps (0: never)"""
    max_staleness: int = 1
    """peer experience whose policy version is more than this many steps behind the clock is dropped by SEE;
    a step-s sample comes from version s - 1, so 1 shares exactly the current step's samples"""

    def __post_init__(self):
        c = "ConcurrentConfig"
        _choice(c, "backend", self.backend, BACKENDS)
        _choice(c, "failure_policy", self.failure_policy, FAILURE_POLICIES)
        _choice(c, "mode", self.mode, ("sync", "async"))
        _require(isinstance(self.staleness, int) and self.staleness >= 0, c, "staleness", self.staleness,
                 "an integer >= 0")
        _positive(c, "step_timeout", self.step_timeout)
        _require(isinstance(self.checkpoint_every, int) and self.checkpoint_every >= 0, c, "checkpoint_every",
                 self.checkpoint_every, "an integer >= 0")
        _require(isinstance(self.max_staleness, int) and self.max_staleness >= 1, c, "max_staleness",
                 self.max_staleness, "an integer >= 1 (a step's own samples are 1 step behind the clock)")


@dataclass
class ProbeConfig:
    """The sharing probe of a concurrent run and its knobs (SPEC section 8); a knob another probe uses is ignored.

    The name is checked against the registry of `mrl.probes` when a run starts (the registry, not this
    file, is where a probe is added)."""
    name: str = "grpo"
    """probe by name: grpo (independent), prp, prp_naive, xgrpo, sgt; hacpo, gspo, naive"""
    level: str = "token"
    """prp: importance ratio per THL group (token) or per sequence"""
    clip: float = 2.0
    """prp: truncation c of the importance weight (inf: none)"""
    gamma: float = 0.5
    """xgrpo: peer weight in the baseline b = (1 - gamma) mean(own r) + gamma mean(peer r)"""
    std: str = "pooled"
    """xgrpo: advantage normaliser, the pooled std of own and peer rewards, or the own group's (own)"""
    lam: float = 0.1
    """sgt: weight of the rescue NLL"""
    tau: float = 0.0
    """sgt: a prompt is in the rescue set when k_own / G <= tau (0: every own sample failed) and a peer succeeded"""
    advantage: str = "capability"
    """hacpo: baseline of the pooled group: capability (omega-weighted), pooled (plain mean) or own"""
    omega: bool = True
    """hacpo: scale each peer sample's term by omega(source, learner) (the capability discrepancy coefficient)"""
    alpha: float = 1.0
    """hacpo: exponent of the stop-gradient reweighting s * sg(s)^alpha of a peer sample's ratio s"""
    clipping: str = "stepwise"
    """hacpo: peer ratio clip: stepwise [min(1, 1 - delta + m delta_step), 1], fixed [1 - delta, 1], symmetric
    [1 - delta, 1 + delta]"""
    delta: float = 0.2
    """hacpo: lower clip offset of the peer ratio"""
    delta_step: float = 0.025
    """hacpo: rise of the lower bound per minibatch update m"""
    ratio: str = "thl"
    """hacpo: peer sequence ratio normalised over THL groups (thl) or each side by its own token count (mean,
    the official code)"""
    minibatches: int = 1
    """hacpo, gspo, naive: optimizer updates per step over the pooled batch (own samples first)"""
    capability_window: int = 5
    """hacpo: K, steps in the rolling positive-reward rate"""

    def __post_init__(self):
        c = "ProbeConfig"
        _choice(c, "advantage", self.advantage, ("capability", "pooled", "own"))
        _choice(c, "clipping", self.clipping, ("stepwise", "fixed", "symmetric"))
        _choice(c, "ratio", self.ratio, ("thl", "mean"))
        _require(self.alpha >= 0, c, "alpha", self.alpha, "a number >= 0")
        _require(0 <= self.delta < 1 and self.delta_step >= 0, c, "delta", (self.delta, self.delta_step),
                 "delta in [0, 1) and delta_step >= 0")
        _require(isinstance(self.minibatches, int) and self.minibatches >= 1, c, "minibatches", self.minibatches,
                 "an integer >= 1")
        _require(isinstance(self.capability_window, int) and self.capability_window >= 1, c, "capability_window",
                 self.capability_window, "an integer >= 1")
        _require(isinstance(self.name, str) and bool(self.name), c, "name", self.name, "a registered probe name")
        _choice(c, "level", self.level, LEVELS)
        _choice(c, "std", self.std, ("own", "pooled"))
        _require(self.clip > 0, c, "clip", self.clip, "a number > 0 (inf: no truncation)")
        _require(0 <= self.gamma <= 1, c, "gamma", self.gamma, "a number in [0, 1]")
        _require(self.lam >= 0, c, "lam", self.lam, "a number >= 0")
        _require(0 <= self.tau < 1, c, "tau", self.tau, "a number in [0, 1)")


@dataclass
class RunConfig:
    task: TaskConfig = field(default_factory=TaskConfig)
    """the task and its splits"""
    zoo: ZooConfig = field(default_factory=ZooConfig)
    """the families and their warm-up"""
    grpo: GrpoConfig = field(default_factory=GrpoConfig)
    """GRPO training of each policy"""
    probe: ProbeConfig = field(default_factory=ProbeConfig)
    """the sharing probe of concurrent runs"""
    policies: dict = field(default_factory=dict)
    """paper profile: {name: local folder of a pretrained checkpoint}; empty: the zoo built from `zoo`"""
    threads: int = 1
    """torch threads per policy worker (1 keeps CPU runs bit-reproducible)"""
    workers: int = 2
    """policy workers run in parallel processes (1 = inline)"""

    def __post_init__(self):
        for name, cls in (("task", TaskConfig), ("zoo", ZooConfig), ("grpo", GrpoConfig), ("probe", ProbeConfig)):
            if isinstance(getattr(self, name), dict):
                setattr(self, name, _build(cls, getattr(self, name), f"RunConfig.{name}"))
        for name in ("threads", "workers"):
            _require(isinstance(getattr(self, name), int) and getattr(self, name) >= 1, "RunConfig", name,
                     getattr(self, name), "an integer >= 1")


C = TypeVar("C")


def _build(cls: type[C], values: dict, where: str) -> C:
    """Instantiate a config dataclass from a mapping, rejecting unknown keys by name."""
    if not isinstance(values, dict):
        raise ConfigError(f"{where} must be a mapping, got {type(values).__name__}")
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; allowed keys are {sorted(known)}")
    hints = get_type_hints(cls)
    for k, v in values.items():
        expected = hints[k]
        if expected in (int, float, str, bool):
            ok = isinstance(v, expected) and not (expected is int and isinstance(v, bool))
            if expected is float and isinstance(v, int) and not isinstance(v, bool):
                ok = True
            if not ok:
                raise ConfigError(f"{where}.{k} = {v!r} has type {type(v).__name__}; expected {expected.__name__}")
    return cls(**values)


def load_config(source: str | Path | dict, cls: type[C] = RunConfig) -> C:
    """Load a config from a YAML file, a YAML string or a dict; unknown keys and bad values raise ConfigError."""
    if isinstance(source, dict):
        values = source
    else:
        text = Path(source).read_text() if Path(str(source)).suffix in (".yaml", ".yml") else str(source)
        values = yaml.safe_load(text) or {}
    return _build(cls, values, cls.__name__)


def to_dict(config: Any) -> dict:
    """A plain, JSON-serialisable dict of a config (nested dataclasses included); dicts pass through."""
    return config if isinstance(config, dict) else dataclasses.asdict(config)


def config_hash(config: Any) -> str:
    """Short stable hash of a config; the zoo cache key."""
    blob = json.dumps(to_dict(config), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:12]

"""The probe contract (verl's `core_algos.py` shape): a typed loss-function alias, a registry, configs.

A probe is a function of the learner's `RolloutBatch`, the peers' records (`PeerView`) and its own
config dataclass, registered with it:

    @register_probe("sgt", config=SgtConfig, kinds=("success",))
    def sgt_loss(batch: RolloutBatch, peers: PeerView, cfg: SgtConfig) -> ProbeOutput: ...

It returns the losses of its optimizer updates (usually one); the actor steps the optimizer after each,
so a probe never steps the optimizer or reads the model: it computes log-probs through `batch.logprobs`,
draws from `batch.generator` and keeps what must outlive the step in `batch.state` (checkpointed).
`kinds` names the SEE records the runner collects for it; `aggregations` the GRPO loss types
(`mrl.grpo.LOSS_TYPES`) its loss honours: a run with any other is refused before it starts.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable, Iterable

from torch import Tensor

from mrl.config import ConfigError, GrpoConfig, Str, config_dataclass, require
from mrl.grpo import LOSS_TYPES
from mrl.rollout import RolloutBatch
from mrl.see import KINDS


@config_dataclass(frozen=True)
class ProbeConfig:
    """The base of every probe's config: the probe's name. A probe without knobs uses it as it is.

    Subclasses are `config_dataclass(frozen=True)` too: their knobs are type-checked (strict, finite) however
    they are built."""

    name: Str = "grpo"
    """the registered probe this config belongs to"""

    def knobs(self) -> dict:
        """{knob: value} of every field but the name."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "name"}


@dataclass
class PeerView:
    """What SEE collected for this learner's prompts, one field per SEE kind: {prompt_id: [records]}."""

    rollout: dict = field(default_factory=dict)
    group_stats: dict = field(default_factory=dict)
    success: dict = field(default_factory=dict)
    tokenizers: dict = field(default_factory=dict)
    """{policy_id: tokenizer} of the peers whose rollouts THL retokenizes"""
    reverify: bool = True
    """re-score every claimed success and reward with the learner's verifier (terms.rescored_reward and
    terms.accepted_success); False takes them as claimed (the poisoned-peer ablation, RunnerConfig.reverify)"""


assert {f.name for f in dataclasses.fields(PeerView)} == {*KINDS, "tokenizers", "reverify"}, \
    "PeerView fields follow see.KINDS"


@dataclass
class ProbeOutput:
    """What a probe hands back to the actor.

    losses: one scalar per optimizer update, in order. The actor backpropagates and steps after each one
    before it asks for the next, so a lazy iterable (a generator) computes update m on the parameters that
    update m - 1 left (HACPO's minibatches). Empty: nothing to learn from this step.
    stats: per-step probe statistics (a generator may add to them while it runs).
    """

    losses: Iterable[Tensor] = ()
    active_sequences: int = 0
    stats: dict = field(default_factory=dict)

    @classmethod
    def single(cls, loss: Tensor | None, active_sequences: int = 0, stats: dict | None = None) -> "ProbeOutput":
        """One optimizer update on `loss` (none when it is None)."""
        return cls(() if loss is None else (loss,), active_sequences, stats or {})


ProbeLoss = Callable[[RolloutBatch, PeerView, ProbeConfig], ProbeOutput]
"""probe(batch, peers, cfg) -> ProbeOutput"""


@dataclass(frozen=True)
class Probe:
    """A registered probe."""

    name: str
    loss: ProbeLoss
    config: type
    """its config dataclass (a ProbeConfig subclass)"""
    kinds: tuple[str, ...] = ()
    """the SEE record kinds the runner collects for it"""
    aggregations: tuple[str, ...] = tuple(LOSS_TYPES)
    """the GrpoConfig.loss_type values its loss honours"""
    group_multiplier: int = 1
    """each policy samples group_multiplier x G completions per prompt (gspo_x2: resource-equivalent)"""
    teacher: bool = False
    """the actor scores its own samples with a fixed teacher (the next policy of the run's checkpoint, mrl.teacher)
    into RolloutBatch.teacher_logp (trrd)"""

    def check(self, grpo: GrpoConfig) -> None:
        """Refuse a GRPO config whose aggregation this probe's loss does not implement."""
        if grpo.loss_type not in self.aggregations:
            raise ConfigError(f"GrpoConfig.loss_type = {grpo.loss_type!r} is not allowed with probe {self.name!r}; "
                              f"expected one of {list(self.aggregations)} (its loss pools sequences that way)")


PROBES: dict[str, Probe] = {}


def register_probe(name: str, config: type = ProbeConfig, kinds: tuple[str, ...] = (),
                   aggregations: tuple[str, ...] = tuple(LOSS_TYPES), group_multiplier: int = 1,
                   teacher: bool = False):
    """Register `fn(batch, peers, cfg) -> ProbeOutput` under `name` with its config class."""
    def wrap(fn: ProbeLoss) -> ProbeLoss:
        if name in PROBES:
            raise ValueError(f"probe {name!r} is already registered")
        if not (isinstance(config, type) and issubclass(config, ProbeConfig)):
            raise TypeError(f"probe {name!r}: config must be a ProbeConfig subclass, got {config!r}")
        unknown = set(kinds) - set(KINDS) or set(aggregations) - set(LOSS_TYPES)
        if unknown:
            raise ValueError(f"probe {name!r}: unknown kinds or aggregations {sorted(unknown)}; expected kinds from "
                             f"{list(KINDS)} and aggregations from {list(LOSS_TYPES)}")
        PROBES[name] = Probe(name, fn, config, tuple(kinds), tuple(aggregations), group_multiplier, teacher)
        return fn
    return wrap


def get_probe(name: str) -> Probe:
    """The registered probe; an unknown name lists the allowed ones."""
    if name not in PROBES:
        raise ConfigError(f"probe name={name!r} is not allowed; expected one of {sorted(PROBES)}")
    return PROBES[name]


def probe_config(name: str, **knobs) -> ProbeConfig:
    """The validated config of probe `name` with `knobs` set; an unknown knob names the probe's allowed ones."""
    cls = get_probe(name).config
    allowed = sorted(set(f.name for f in dataclasses.fields(cls)) - {"name"})
    unknown = sorted(set(knobs) - set(allowed))
    require(not unknown, f"probe {name!r}", "knobs", unknown, f"knobs of {cls.__name__}: {allowed}")
    return cls(name=name, **knobs)


def as_probe_config(entry) -> ProbeConfig:
    """A probe config from a grid entry of a profile: a name, a mapping {name: ..., knob: value}, or a config."""
    if isinstance(entry, ProbeConfig):
        return entry
    if isinstance(entry, str):
        return probe_config(entry)
    knobs = dict(entry)
    return probe_config(knobs.pop("name"), **knobs)

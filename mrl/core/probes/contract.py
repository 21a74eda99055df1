"""The probe contract (verl's `core_algos.py` shape): a typed loss-function alias, a registry, configs.

A probe is a function of the learner's `RolloutBatch` (data), the peers' records (`PeerView`), the `Learner` (its
log-probs, tokenizer, verifier, renderer, draws and state) and its own config dataclass, registered with it:

    @register_probe("sgt", config=SgtConfig, kinds=("success",))
    def sgt_loss(batch: RolloutBatch, peers: PeerView, learner: Learner, cfg: SgtConfig) -> ProbeOutput: ...

It returns how many optimizer updates it takes and the loss of each; the actor's update steps the optimizer after
each (mrl.runtime.actor.PolicyActor.update). What a probe may read,
`kinds` and `aggregations`: docs/architecture.md, The probes; where a probe may live (a package, a user's module,
a notebook cell): its Adding a probe.
"""
from __future__ import annotations

import dataclasses
import importlib
import sys
from dataclasses import dataclass, field
from typing import Callable

from torch import Tensor

from mrl.core.batch import Learner, RolloutBatch
from mrl.core.config import GrpoConfig
from mrl.core.grpo import LOSS_TYPES
from mrl.core.see import KINDS
from mrl.core.validation import ConfigError, Str, config_dataclass, require
from mrl.fingerprint import user_code_fingerprint


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
    """What a probe hands back to the actor: `updates` optimizer steps, the scalar loss of step m computed by
    `loss(m)` when the actor asks for it, after step m - 1 (so a minibatch's loss is taken on the parameters the
    previous minibatch left: HACPO's and grpo's minibatches). 0 updates: nothing to learn from this step."""

    updates: int = 0
    loss: Callable[[int], Tensor] | None = None
    """loss(m) -> the scalar loss of update m, 0 <= m < updates, called in order"""
    active_sequences: int = 0
    """sequences with a non-zero advantage or weight"""
    stats: dict = field(default_factory=dict)
    """per-step statistics (loss(m) may add to them; complete once the last update's loss is computed)"""

    @classmethod
    def single(cls, loss: Tensor | None, active_sequences: int = 0, stats: dict | None = None) -> "ProbeOutput":
        """One optimizer update on `loss` (none when it is None)."""
        return cls(0 if loss is None else 1, lambda m: loss, active_sequences, stats or {})


ProbeLoss = Callable[[RolloutBatch, PeerView, Learner, ProbeConfig], ProbeOutput]
"""probe(batch, peers, learner, cfg) -> ProbeOutput"""


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
    """the actor scores its own samples with a fixed teacher (the next policy of the run's checkpoint,
    mrl.runtime.teacher) into RolloutBatch.teacher_logp (trrd)"""
    module: str = ""
    """the module that defines the loss function (imported by a worker that does not know the probe yet)"""
    code: str = ""
    """user_code_fingerprint of a probe defined in a file, when it was registered: the code this process runs"""

    @property
    def in_main(self) -> bool:
        """Its loss or its config class is defined in `__main__` (a notebook cell, an interactive session, a script):
        no other process can import it."""
        return "__main__" in (self.module, self.config.__module__)

    @property
    def importable(self) -> bool:
        """Another process can import it by its module's name: not `__main__`, and a module registered in sys.modules
        (not one executed by importlib.util's exec_module alone)."""
        return not self.in_main and self.module in sys.modules

    @property
    def in_cells(self) -> bool:
        """Its loss or its config class is defined in `__main__` without a file: a notebook cell or an interactive
        session. No file holds its code, so no cache key can: its runs are computed every time
        (mrl.experiments.runs.run_one)."""
        return self.in_main and not getattr(sys.modules.get("__main__"), "__file__", None)

    def check(self, grpo: GrpoConfig) -> None:
        """Refuse a GRPO config whose aggregation this probe's loss does not implement."""
        if grpo.loss_type not in self.aggregations:
            raise ConfigError(f"GrpoConfig.loss_type = {grpo.loss_type!r} is not allowed with probe {self.name!r}; "
                              f"expected one of {list(self.aggregations)} (its loss pools sequences that way)")


PROBES: dict[str, Probe] = {}


def register_probe(name: str, config: type = ProbeConfig, kinds: tuple[str, ...] = (),
                   aggregations: tuple[str, ...] = tuple(LOSS_TYPES), group_multiplier: int = 1,
                   teacher: bool = False):
    """Register `fn(batch, peers, learner, cfg) -> ProbeOutput` under `name` with its config class. The same definition
    registered again (a re-run notebook cell, a reloaded module) replaces the first; a different one is refused."""
    def wrap(fn: ProbeLoss) -> ProbeLoss:
        known = PROBES.get(name)
        if known is not None and (known.module, known.loss.__qualname__) != (fn.__module__, fn.__qualname__):
            raise ValueError(f"probe {name!r} is already registered by {known.module}.{known.loss.__qualname__}; "
                             f"choose another name for {fn.__module__}.{fn.__qualname__}")
        if not (isinstance(config, type) and issubclass(config, ProbeConfig)):
            raise TypeError(f"probe {name!r}: config must be a ProbeConfig subclass, got {config!r}")
        unknown = set(kinds) - set(KINDS) or set(aggregations) - set(LOSS_TYPES)
        if unknown:
            raise ValueError(f"probe {name!r}: unknown kinds or aggregations {sorted(unknown)}; expected kinds from "
                             f"{list(KINDS)} and aggregations from {list(LOSS_TYPES)}")
        probe = Probe(name, fn, config, tuple(kinds), tuple(aggregations), group_multiplier, teacher, fn.__module__)
        PROBES[name] = dataclasses.replace(probe, code="" if probe.in_cells else user_code_fingerprint([fn, config]))
        return fn
    return wrap


def get_probe(name: str, module: str = "") -> Probe:
    """The registered probe; `module` (Probe.module) is imported first when the name is not registered yet (a worker
    process meeting a user's probe). An unknown name lists the allowed ones."""
    if name not in PROBES and module and module != "__main__":
        importlib.import_module(module)
    if name not in PROBES:
        raise ConfigError(f"probe name={name!r} is not allowed; expected one of {sorted(PROBES)}")
    return PROBES[name]


def probe_code(name: str) -> str:
    """The fingerprint of a probe's code outside the mrl package ('' for the package's own probes, which the
    package's fingerprint covers, and for a probe written in notebook cells, which is never cached): the module that
    defines its loss function and config class, with the user's modules it reaches. A run's cache key holds it, so an
    edit of a user's probe re-runs it."""
    probe = get_probe(name)
    if probe.in_cells:
        return ""
    code = user_code_fingerprint([probe.loss, probe.config])
    if code != probe.code:
        raise ConfigError(f"the code of probe {name!r} ({probe.module}, or a module of yours it uses) changed on disk "
                          f"since it was imported; this process still runs the old code: importlib.reload the module "
                          f"(or restart the kernel) before running it")
    return code


def require_importable(name: str, backend: str) -> None:
    """Refuse to send a probe defined in `__main__` (a notebook cell, a script), or in a module executed without an
    entry in sys.modules, to a worker process or a Ray actor, which cannot import it, naming the fix."""
    probe = get_probe(name)
    if backend != "inline" and probe.in_main:
        raise ConfigError(f"probe {name!r} is defined in __main__ (a notebook cell or a script), which backend "
                          f"{backend!r} cannot import in its workers; run it with backend='inline', or move "
                          f"{probe.loss.__qualname__} and {probe.config.__qualname__} into a .py module next to the "
                          f"notebook or script and import it")
    if backend != "inline" and not probe.importable:
        raise ConfigError(f"probe {name!r} comes from module {probe.module!r}, which is not in sys.modules (executed "
                          f"with importlib.util's spec_from_file_location and exec_module), so backend {backend!r}'s "
                          f"workers cannot import it; run it with backend='inline', or import the module with "
                          f"importlib.import_module (its folder on sys.path)")


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


def probe_label(probe: ProbeConfig) -> str:
    """The probe's name, with the knobs that differ from their defaults (ablations stay distinguishable): 'sgt',
    'prp (clip=4.0)'."""
    default = probe_config(probe.name).knobs()
    changed = [f"{knob}={value}" for knob, value in probe.knobs().items() if value != default[knob]]
    return probe.name + (f" ({', '.join(changed)})" if changed else "")

"""Sharing probes: one registered function per probe over the same batch structure (SPEC section 8).

    @register_probe("sgt", kinds=("success",))
    def sgt_loss(batch: LearnerBatch, peers: PeerView, cfg: ProbeConfig) -> ProbeOutput: ...

`kinds` names the SEE records the runner collects for the probe (rollout, group_stats, success);
a probe that shares nothing (grpo) collects none. Adding a probe is one new file imported below.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from mrl.probes.batch import LearnerBatch, PeerView, ProbeOutput


@dataclass(frozen=True)
class Probe:
    name: str
    loss: Callable[..., ProbeOutput]
    kinds: tuple[str, ...]
    group_multiplier: int = 1
    """each policy samples group_multiplier x G completions per prompt (gspo_x2: resource-equivalent)"""
    knobs: tuple[str, ...] = ()
    """the ProbeConfig fields this probe reads (the hyperparameter table lists them)"""


PROBES: dict[str, Probe] = {}


def register_probe(name: str, kinds: tuple[str, ...] = (), group_multiplier: int = 1, knobs: tuple[str, ...] = ()):
    """Register `fn(batch, peers, cfg) -> ProbeOutput` under `name`, collecting SEE records of `kinds`."""
    def wrap(fn):
        if name in PROBES:
            raise ValueError(f"probe {name!r} is already registered")
        PROBES[name] = Probe(name, fn, tuple(kinds), group_multiplier, tuple(knobs))
        return fn
    return wrap


def get_probe(name: str) -> Probe:
    """The registered probe; an unknown name lists the allowed ones."""
    if name not in PROBES:
        raise ValueError(f"probe name={name!r} is not allowed; expected one of {sorted(PROBES)}")
    return PROBES[name]


from mrl.probes import grpo, hacpo, prp, sgt, xgrpo  # noqa: E402,F401  (registration)

__all__ = ["LearnerBatch", "PROBES", "PeerView", "Probe", "ProbeOutput", "get_probe", "register_probe"]

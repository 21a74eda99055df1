"""The sampling engines and what each can do, in one table that every place choosing an engine reads.

GrpoConfig.engine holds an engine's name (a string in the profiles' YAML); `Engine(name)` is the member, and
`CAPABILITIES[engine]` says where its sampling log-probs come from, whether it runs the fast path's forward, how it
prefills a batch of prompts and how its KV cache is shaped. mrl.runtime.rollout dispatches on it, the actor reads
where its old log-probs come from, and mrl.runtime.resources sizes the prefill and the KV cache from it.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Engine(StrEnum):
    """A sampling and log-prob engine (GrpoConfig.engine's values)."""

    FAST = "fast"
    """mrl.runtime.fast: a static KV cache over the model's own weights, for the checkpoints it implements exactly"""
    HF = "hf"
    """the `transformers` forward with its dynamic cache, token by token in mrl's loop (the reference)"""
    GENERATE = "generate"
    """transformers' generate with a static cache (real model sizes on a GPU)"""
    BATCHED = "batched"
    """transformers' continuous batching (generate_batch), its prefill bounded per forward"""
    GRAPHS = "graphs"
    """mrl.runtime.graphs_engine: the decode step captured in CUDA graphs on a GPU (run eagerly on a CPU)"""


@dataclass(frozen=True)
class Capabilities:
    """What an engine does."""

    own_logprobs: bool
    """it samples token by token in mrl's loop, so the sampling log-probs come with the samples; otherwise a
    separate forward scores them"""
    fast_forward: bool
    """it runs mrl.runtime.fast's forward where the model is one the fast path implements"""
    prefill: str
    """how a batch of prompts is prefilled: "whole" (one forward of every prompt), "chunked" (GENERATE_PREFILL_CHUNK
    tokens a forward), "bounded" (at most BATCHED_STEP_TOKENS tokens a forward) or "graphs" (rows of
    GRAPHS_PREFILL_TOKENS, into a cache padded to the captured shapes)"""
    padded_cache: bool
    """its KV cache is padded to the captured buckets (mrl.runtime.graphs_engine.cache_shape), not sized to the
    batch"""


CAPABILITIES = {
    Engine.FAST: Capabilities(own_logprobs=True, fast_forward=True, prefill="whole", padded_cache=False),
    Engine.HF: Capabilities(own_logprobs=True, fast_forward=False, prefill="whole", padded_cache=False),
    Engine.GENERATE: Capabilities(own_logprobs=False, fast_forward=False, prefill="chunked", padded_cache=False),
    Engine.BATCHED: Capabilities(own_logprobs=False, fast_forward=False, prefill="bounded", padded_cache=False),
    Engine.GRAPHS: Capabilities(own_logprobs=True, fast_forward=False, prefill="graphs", padded_cache=True),
}
"""every engine's capabilities"""
assert set(CAPABILITIES) == set(Engine), "every engine has its capabilities"
ENGINES = tuple(engine.value for engine in Engine)
"""the engines' names, as GrpoConfig.engine and the command line take them"""


def engine_named(name: str) -> Engine:
    """The engine called `name`; a ValueError naming the allowed values otherwise."""
    try:
        return Engine(name)
    except ValueError:
        raise ValueError(f"engine={name!r} is not allowed; expected one of {list(ENGINES)}") from None

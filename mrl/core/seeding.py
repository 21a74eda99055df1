"""Seeds derived from (seed, step, policy), so that a resumed run draws exactly what it would have,
and the torch thread count that keeps CPU runs bit-reproducible.

The prompts of step s come from Random(derived_seed("prompts", seed, s)), shared by all policies;
the sampling generator of policy n at step s is seeded from (seed, step, n), so one policy's draws
never depend on another's (nanochat style).
"""
from __future__ import annotations

import hashlib
import random
from contextlib import contextmanager

import torch


def derived_seed(*parts) -> int:
    """A 63-bit seed from any parts, stable across runs and platforms."""
    return int.from_bytes(hashlib.sha256("/".join(map(str, parts)).encode()).digest()[:8], "little") >> 1


def step_prompts(task, seed: int, step: int, n: int):
    """The RL prompts of one step (the same for every policy)."""
    return task.rl_prompts(random.Random(derived_seed("prompts", seed, step)), n)


def step_generator(seed: int, step: int, policy: str, device: torch.device | str = "cpu") -> torch.Generator:
    """The sampling generator of one policy at one step, on the policy's device (a CUDA generator draws other
    numbers than a CPU one from the same seed: runs are reproducible per device type)."""
    return torch.Generator(device=device).manual_seed(derived_seed("sample", seed, step, policy))


@contextmanager
def torch_threads(n: int):
    """Run a block with `n` torch threads, then restore the caller's count (inline workers share a process)."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)

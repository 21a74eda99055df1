"""Seeds derived from (seed, step, policy), so that a resumed run draws exactly what it would have,
and the torch thread count that keeps CPU runs bit-reproducible.

The prompts of step s come from Random(derived_seed("prompts", seed, s)), shared by all policies;
the sampling generator of policy n at step s is seeded from (seed, step, n), so one policy's draws
never depend on another's (nanochat style). An RL seed is nested in its warm-up (`nested_rl_seed`):
two warm-ups never share a prompt stream or a sampling seed.
"""
from __future__ import annotations

import hashlib
import random
from contextlib import contextmanager

import torch


def derived_seed(*parts) -> int:
    """A 63-bit seed from any parts, stable across runs and platforms."""
    return int.from_bytes(hashlib.sha256("/".join(map(str, parts)).encode()).digest()[:8], "little") >> 1


def nested_rl_seed(zoo_seed: int, rl_seed: int) -> int:
    """The seed of RL seed `rl_seed`'s prompt stream and sampling draws on the warm-up of seed `zoo_seed`: derived
    from both, so RL seeds are nested in warm-ups (RL seed s of warm-up 1 and RL seed s of warm-up 2 draw unrelated
    streams, and the warm-ups' means share no seed effect). Warm-up 0 keeps the RL seed itself, the streams every
    run drew before the nesting: the zoo every other experiment trains on keeps its runs' bits and cache keys.
    Distinct (zoo_seed, rl_seed) pairs give distinct seeds (a 63-bit hash never equals a small RL seed in practice;
    tests/test_seeding.py checks the profiles' pairs, the confirmatory block's included)."""
    return rl_seed if zoo_seed == 0 else derived_seed("rl-seed", zoo_seed, rl_seed)


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

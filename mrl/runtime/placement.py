"""Where a policy lives and how it computes: its device, bf16 autocast, and the guard that checks placement.

A policy actor resolves its `PlacementConfig.device` once (`resolve_device`), moves its model, reference and
teacher there, and runs every phase of a step inside `precision(device, dtype)` (bf16 autocast when the dtype is
bfloat16, else nothing). Every tensor a step creates names its device, taken from the tensors it derives from
(sampling buffers and masks from the prompt ids, which `encode_prompts` puts on the model's device; advantages,
rewards and THL's projections from the learner's log-probs), so nothing is created on the CPU by default.
PyTorch's ambient device context would do the same with fewer words but cost 20% of a CPU rollout (a Python
call per op). `DeviceGuard` is the check the tests run a step under.
"""
from __future__ import annotations

import contextlib
import os
import traceback
from pathlib import Path
from typing import Iterator

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves

from mrl.core.config import ConfigError


class PlacementError(RuntimeError):
    """A tensor of a policy's step was made on another device than the policy's."""


def resolve_device(spec: str) -> torch.device:
    """The torch device of a PlacementConfig.device: auto is cuda when this process sees a GPU (in a Ray actor,
    the one Ray assigned to it through CUDA_VISIBLE_DEVICES), else cpu; cuda and cuda:N must exist here."""
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(spec)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"PlacementConfig.device = {spec!r} is not allowed on this machine: torch sees no CUDA "
                              f"device; expected auto or cpu")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(f"PlacementConfig.device = {spec!r} is not allowed on this machine: it has "
                              f"{torch.cuda.device_count()} CUDA device(s)")
    return device


def frozen_dtype(dtype: str) -> torch.dtype:
    """The storage dtype of a policy's frozen models (reference, teacher): bf16 under bfloat16, else fp32."""
    return torch.bfloat16 if dtype == "bfloat16" else torch.float32


def cast_parameters(model, dtype: torch.dtype):
    """Cast a model's floating-point parameters to `dtype` in place and return it; its buffers keep their dtype.

    `model.to(dtype)` casts buffers too: RoPE's `inv_freq` in bf16 has a relative error of about 0.4%, an angle error
    that grows with the position (about 0.9 rad at 768 tokens for Qwen2.5's rope base of 1e6), so a bf16 sampler,
    reference or teacher made that way drifts from the model it copies beyond a few hundred tokens. transformers
    computes the rotary angles in fp32 from `inv_freq` and casts cos and sin to the activations' dtype."""
    for param in model.parameters():
        if param.is_floating_point():
            param.data = param.data.to(dtype)
    return model


@contextlib.contextmanager
def precision(device: torch.device, dtype: str = "float32") -> Iterator[None]:
    """Run a block's forwards in bf16 autocast on `device` when dtype is bfloat16 (matmuls in bf16; weights,
    softmax and the loss stay fp32); float32 runs it as it is."""
    with torch.autocast(device.type, dtype=torch.bfloat16) if dtype == "bfloat16" else contextlib.nullcontext():
        yield


def cap_gpu_memory(device: torch.device, share: float) -> None:
    """A policy sharing a GPU (PlacementConfig.gpus below 1, the share Ray reserves for its actor, one process per
    actor) may allocate at most that share of it: a neighbour's peak then fails its own allocation with an
    out-of-memory error naming it, not the other policy's. The caching allocator uses expandable segments, so a
    cache that grows step by step does not fragment the share. Call before the policy's first CUDA allocation (the
    allocator reads PYTORCH_CUDA_ALLOC_CONF once); a CPU or a whole GPU (share 0 or >= 1) is left alone."""
    if device.type != "cuda" or not 0 < share < 1:
        return
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    # torch wants an index: "cuda" (auto's device) is the process's current GPU, the one Ray assigned it
    torch.cuda.set_per_process_memory_fraction(share, device.index if device.index is not None else
                                               torch.cuda.current_device())


@contextlib.contextmanager
def measured_peak(device: torch.device, name: str, into: dict) -> Iterator[None]:
    """On a GPU, the block's peak of allocated memory in GB, written to into[name] (torch.cuda's peak statistics,
    reset at the block's start): what mrl.runtime.resources plans, measured per phase. Nothing on a CPU."""
    if device.type != "cuda":
        yield
        return
    torch.cuda.reset_peak_memory_stats(device)
    yield
    into[name] = torch.cuda.max_memory_allocated(device) / 1e9


def set_training(model, training: bool) -> None:
    """model.train(training), skipped when the model is already in that mode: train() walks every module and cost
    1.3 ms of a 35 ms zoo update. Only the root's flag is read, so a submodule switched by hand is not noticed."""
    if model.training != training:
        model.train(training)


def active_dropout(model) -> list[str]:
    """The dropout a model applies in training mode: dropout modules with p > 0, and attention dropout above 0
    in its config (transformers applies it inside the attention function, not as a module), e.g.
    ['config.attention_dropout=0.1']; [] for none."""
    found = [f"{name}.p={m.p}" for name, m in model.named_modules() if isinstance(m, torch.nn.Dropout) and m.p > 0]
    config = getattr(model, "config", None)
    for key in ("attention_dropout", "attn_pdrop"):
        value = getattr(config, key, 0) or 0
        if isinstance(value, (int, float)) and value > 0:
            found.append(f"config.{key}={value}")
    return found


def _caller() -> str:
    """file:line of the innermost frame outside torch and this module (where the offending call was written)."""
    torch_root = str(Path(torch.__file__).parent)
    for frame in reversed(traceback.extract_stack()):
        if not frame.filename.startswith(torch_root) and frame.filename != __file__:
            return f"{frame.filename}:{frame.lineno}"
    return "?"


def _on(tensor: torch.Tensor, device: torch.device) -> bool:
    return tensor.device.type == device.type and (device.index is None or tensor.device.index == device.index)


EXPLICIT_MOVES = {torch.Tensor.cpu, torch.Tensor.to, torch.Tensor.numpy, torch.Tensor.tolist, torch.Tensor.item}
"""calls that take data off the device on purpose (THL's alignment and the SEE records are host-side)"""


class DeviceGuard(TorchFunctionMode):
    """Fails on a tensor a step makes off `device` and on one made without naming its device.

    A factory (torch.zeros, torch.tensor, torch.arange, ...: a call with no tensor inputs) must name its device:
    without one it lands on the CPU whatever the policy's device, which this CPU-only test machine would not
    notice otherwise. A tensor shared with a numpy array (always on the CPU) does not pass through a TorchFunctionMode:
    the step's modules use torch.as_tensor(array, device=...) instead (tests/test_placement.py reads them for it).
    Allowed off the device: explicit moves (Tensor.cpu, .to, .numpy, .tolist, .item), factories that name the CPU
    and work on tensors that were all moved off already (host-side bookkeeping). Counts the calls it checked in
    `checked`.
    """

    def __init__(self, device: str | torch.device):
        super().__init__()
        self.device = torch.device(device)
        self.checked = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__qualname__", None) or getattr(func, "__name__", repr(func))
        out = func(*args, **kwargs)
        if func in EXPLICIT_MOVES:
            return out
        inputs = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        outputs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        if inputs and not any(_on(t, self.device) for t in inputs):
            return out  # host-side work on data moved off on purpose
        self.checked += 1
        if outputs and not inputs:
            if kwargs.get("device") is None:
                raise PlacementError(f"{name} at {_caller()} made a tensor without naming its device (it lands on "
                                     f"the CPU); pass device= (the policy's is {self.device})")
            if torch.device(kwargs["device"]).type == "cpu":
                return out  # host-side on purpose: named so

        for tensor in outputs:
            if not _on(tensor, self.device):
                raise PlacementError(f"{name} at {_caller()} made a tensor on {tensor.device}; the policy's device is "
                                     f"{self.device}")
        return out

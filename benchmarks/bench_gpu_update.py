"""The update phase on one GPU against its FLOP bound: the paper profile's GRPO update, timed, with its memory peak.

A forward multiplies every token by every weight once (2 FLOPs a weight), the backward twice (the gradients of the
inputs and of the weights), so B sequences of n tokens cannot be updated faster than

    bound = matmul rate / (6 x N)   tokens per second

with N the weights that take part in a matmul (every Linear's, the output head included, counted once when tied;
the embedding lookup and the norms do none) and the rate a large bf16 matmul's, timed in this process. Attention's
own T^2 FLOPs are left out (about 2% of 6N a token at these lengths). The paper profile's update does more than 6N
a token by design: activation checkpointing runs each micro-batch's forward again in the backward (2N) and the
micro-batched update (mrl.core.microbatch) first runs every micro-batch without a graph to get dL/dlogp (2N), 10N in
all, so 60% of the bound is the most it can reach.

The update is the actor's (mrl.runtime.actor.PolicyActor.update and apply) on a batch built here: fp32 master weights
under bf16 autocast (mrl.runtime.placement.precision), activation checkpointing, micro-batches of 16
(configs/paper.yaml's placement of the policy), the grpo probe's loss (group advantages, token-level GRPO loss, its
registered function), the global gradient norm clipped, one fused Adam step, and the bf16 sampler synced from the
masters. The model is a stand-in at a paper model's real size (bench_gpu_rollout.stand_in: its published architecture,
random weights). Each group has two successes in eight, so every sequence is forwarded (no group is skipped for a zero
advantage).

Two ways to turn the logits into log-probs are timed on the same batch and weights: `chunked` (mrl.core.token_logprobs,
what a GPU runs) and `full` (one float32 copy of the (B, T, V) logits and its log_softmax, as before the chunked
path existed). Each draws one untimed update of one micro-batch first (kernels, allocator, Adam's states), then the
weights are reset and one update is timed. Per row: tokens (prompt and completion tokens that are not padding),
padded tokens (what the forwards process), seconds, tokens per second, the bound, the fraction of the bound, the
update's peak of allocated memory, and the gradient norm before clipping (both paths' should agree to bf16
rounding: the same weights and batch).

Settings:
    64x8   the paper's batch: 64 prompts of 64-256 tokens x 8 completions of 512 tokens (random weights rarely stop)
    16x8   a quarter of it

    python benchmarks/bench_gpu_update.py [--model B] [--settings 64x8] [--paths chunked,full]
    python benchmarks/bench_gpu_update.py --cpu-check    # the script itself on a CPU: a tiny stand-in, short lengths

Writes bench_gpu_update.json (every row) and bench_gpu_update.md (the table) to --out (docs/measurements on a GPU).
A failing row is recorded with its error and the others still run.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MRL_NUMERICS", "native")   # the CPU contract pins CPU kernels; nothing here is compared bitwise
import mrl  # noqa: E402, F401  (first: the numerics contract, before torch and numpy)
import torch  # noqa: E402

import mrl.core.token_logprobs  # noqa: E402
from bench_gpu_rollout import (NAMES, Setting, batch, chosen, gpu_bench_parser, gpu_bench_start,  # noqa: E402
                               stand_in, synchronize)
from mrl.runtime.actor import policy_optimizer  # noqa: E402
from mrl.core.microbatch import MicroBatchedLogprobs  # noqa: E402
from mrl.runtime.placement import cast_parameters, measured_peak, precision, set_training  # noqa: E402
from mrl.core.probes import PeerView, get_probe, probe_config  # noqa: E402
from mrl.profiles import load_profile  # noqa: E402
from mrl.core.batch import Learner, RolloutBatch
from mrl.runtime.rollout import completion_logprobs  # noqa: E402

SETTINGS = {"64x8": Setting(64, 8, 64, 256, 512, True), "16x8": Setting(16, 8, 64, 256, 512, True)}
CPU_SETTINGS = {"64x8": Setting(4, 4, 5, 20, 12, True), "16x8": Setting(2, 4, 5, 20, 12, True)}
CPU_MICRO_BATCH = 4
"""--cpu-check's micro-batch: its 16 sequences in four, as the paper's 512 are in 32"""
PATHS = {"chunked": lambda logits: True, "full": lambda logits: False}
"""mrl.core.token_logprobs.chunked during a row: chunked on a GPU is the library's own choice for bf16 logits (forced on
the CPU of --cpu-check, which would not chunk); full is the float32 copy of every logit"""


def matmul_rate(device: torch.device, size: int, repeats: int = 10) -> float:
    """FLOPs per second of the best of `repeats` (size x size) @ (size x size) bf16 matmuls (2 size^3 FLOPs each)."""
    generator = torch.Generator(device).manual_seed(0)
    a = torch.randn(size, size, dtype=torch.bfloat16, device=device, generator=generator)
    b = torch.randn(size, size, dtype=torch.bfloat16, device=device, generator=generator)
    out = torch.empty_like(a)
    best = float("inf")
    for _ in range(repeats + 1):
        synchronize(device)
        start = time.perf_counter()
        torch.matmul(a, b, out=out)
        synchronize(device)
        best = min(best, time.perf_counter() - start)
    return 2 * size ** 3 / best


def matmul_weights(model) -> int:
    """N of the bound: the weights of every Linear (the output head included, once when tied to the embedding)."""
    seen, count = set(), 0
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and id(module.weight) not in seen:
            seen.add(id(module.weight))
            count += module.weight.numel()
    return count


@dataclasses.dataclass
class Placed:
    """What the actor's update reads: fp32 masters, their bf16 sampler, the optimizer, the micro-batched log-probs."""

    model: torch.nn.Module
    sampler: torch.nn.Module
    optimizer: torch.optim.Optimizer
    logprobs: MicroBatchedLogprobs
    device: torch.device
    grpo: object
    """the paper profile's GrpoConfig"""
    dtype: str
    """the placement's dtype (bfloat16)"""


def placed(model, device: torch.device, grpo, placement, micro_batch: int) -> Placed:
    """The policy as PolicyActor.__init__ places it under the paper profile: fp32 masters, a bf16 sampler copy,
    activation checkpointing, micro-batched log-probs, fused Adam."""
    master = model.to(torch.float32)
    sampler = cast_parameters(copy.deepcopy(master), torch.bfloat16).eval().requires_grad_(False)
    if placement.gradient_checkpointing:
        master.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})

    def forward(prompt_ids, prompt_mask, completion_ids, completion_mask):   # PolicyActor._logprobs
        set_training(master, True)
        with precision(device, placement.dtype):
            return completion_logprobs(master, prompt_ids, prompt_mask, completion_ids, completion_mask,
                                       engine=grpo.engine, temperature=grpo.temperature)

    return Placed(master, sampler, policy_optimizer(master.parameters(), grpo.lr),
                   MicroBatchedLogprobs(forward, micro_batch), device, grpo, placement.dtype)


def update(policy: Placed, rollout: RolloutBatch) -> dict:
    """PolicyActor.update with apply: the grpo probe's losses, for each a micro-batched backward, the clipped global
    norm, one Adam step, the sampler synced. -> loss, grad_norm (before clipping), update_peak_gb on a GPU."""
    peak: dict = {}
    losses, norms = [], []
    with measured_peak(policy.device, "update_peak_gb", peak):
        learner = Learner(policy.logprobs, None, None, torch.Generator(policy.device).manual_seed(2))
        output = get_probe("grpo").loss(rollout, PeerView(), learner, probe_config("grpo"))
        for m in range(output.updates):
            loss = output.loss(m)
            losses.append(loss.item())
            set_training(policy.model, True)
            policy.optimizer.zero_grad(set_to_none=True)
            policy.logprobs.backward(loss)
            norms.append(float(torch.nn.utils.clip_grad_norm_(policy.model.parameters(), policy.grpo.grad_clip)))
            policy.optimizer.step()
            policy.optimizer.zero_grad(set_to_none=True)
            with torch.no_grad():
                for copy_, master in zip(policy.sampler.parameters(), policy.model.parameters()):
                    copy_.copy_(master)
    return {"loss": sum(losses) / len(losses), "grad_norm": sum(norms) / len(norms), **peak}


def rollout_batch(policy: Placed, setting: Setting, vocab: int, rows: slice | None = None) -> RolloutBatch:
    """A step's samples as the actor keeps them: the setting's prompts (bench_gpu_rollout.batch) with completions of
    setting.new_tokens random ids, two successes in every group of eight (a quarter), groups contiguous."""
    prompt_ids, prompt_mask = batch(setting, vocab, policy.device)
    generator = torch.Generator().manual_seed(1)
    completion_ids = torch.randint(4, vocab, (len(prompt_ids), setting.new_tokens), generator=generator)
    completion_mask = torch.ones_like(completion_ids)
    rewards = (torch.arange(len(prompt_ids)) % setting.group < max(1, setting.group // 4)).float()
    rows = rows or slice(None)
    completion_ids, completion_mask = completion_ids.to(policy.device)[rows], completion_mask.to(policy.device)[rows]
    prompt_ids, prompt_mask, rewards = prompt_ids[rows], prompt_mask[rows], rewards.to(policy.device)[rows]
    sample_logp = torch.zeros(completion_ids.shape, device=policy.device)   # on-policy: the loss reads logp itself
    return RolloutBatch(
        policy="B", step=1, problems=[None] * (len(prompt_ids) // setting.group), group_size=setting.group,
        prompt_ids=prompt_ids, prompt_mask=prompt_mask, completion_ids=completion_ids,
        completion_mask=completion_mask, sample_logp=sample_logp, rewards=rewards,
        grpo=dataclasses.replace(policy.grpo, max_new_tokens=setting.new_tokens))


def measure(policy: Placed, initial: dict, path: str, setting_name: str, setting: Setting, vocab: int,
            weights: int, rate: float, micro_batch: int) -> dict:
    """One row: a warm-up update of one micro-batch's groups, the weights reset, the whole batch's update timed."""
    full = rollout_batch(policy, setting, vocab)
    tokens = int(full.prompt_mask.sum() + full.completion_mask.sum())
    padded = full.prompt_ids.numel() + full.completion_ids.numel()
    bound = rate / (6 * weights)
    row = {"setting": setting_name, "path": path, "sequences": len(full.prompt_ids), "micro_batch": micro_batch,
           "tokens": tokens, "padded_tokens": padded, "bound_tokens_per_s": bound}
    own, mrl.core.token_logprobs.chunked = mrl.core.token_logprobs.chunked, PATHS[path]
    try:
        warm = -(-micro_batch // setting.group) * setting.group   # whole groups, one micro-batch at least
        update(policy, rollout_batch(policy, setting, vocab, slice(0, warm)))
        policy.model.load_state_dict(initial)
        synchronize(policy.device)
        start = time.perf_counter()
        result = update(policy, full)
        synchronize(policy.device)
        seconds = time.perf_counter() - start
    except Exception as err:  # noqa: BLE001  (recorded; the other rows still run)
        return {**row, "error": f"{type(err).__name__}: {err}"[:500]}
    finally:
        mrl.core.token_logprobs.chunked = own
        policy.model.load_state_dict(initial)
        if policy.device.type == "cuda":
            torch.cuda.empty_cache()
    return {**row, "seconds": seconds, "tokens_per_s": tokens / seconds, "of_bound": tokens / seconds / bound,
            "peak_gb": result.get("update_peak_gb"), "grad_norm": result["grad_norm"]}


def markdown(report: dict) -> str:
    import pandas as pd

    rows = pd.DataFrame(report["rows"])
    head = (f"# The update phase against its FLOP bound ({report['device']}, torch {report['torch']}, "
            f"transformers {report['transformers']})\n\n"
            f"Stand-in: {report['model']} ({report['weights'] / 1e9:.3g} B weights in matmuls, random weights, fp32 "
            f"masters under bf16 autocast, activation checkpointing, micro-batches of {report['micro_batch']}); bf16 "
            f"matmul rate measured in the run: {report['matmul_tflops']:.3g} TFLOP/s. `bound_tokens_per_s`: rate / "
            f"(6 x weights); `tokens`: prompt and completion tokens that are not padding.\n\n")
    return head + rows.to_markdown(index=False, floatfmt=".3g") + "\n"


def main() -> None:
    parser = gpu_bench_parser("bench_gpu_update", "64x8")
    parser.add_argument("--paths", default="chunked,full")
    args = parser.parse_args()
    device, out = gpu_bench_start(args, "bench_gpu_update")
    paths = chosen(args.paths, PATHS, "--paths")
    settings = CPU_SETTINGS if args.cpu_check else SETTINGS

    import transformers

    profile = load_profile("paper")
    placement = profile.placement[args.model]
    micro_batch = CPU_MICRO_BATCH if args.cpu_check else placement.micro_batch
    model, _ = stand_in(args.model, device, tiny=args.cpu_check)
    vocab = model.config.vocab_size
    policy = placed(model, device, profile.grpo, placement, micro_batch)
    initial = {name: tensor.detach().to("cpu", copy=True) for name, tensor in policy.model.state_dict().items()}
    weights = matmul_weights(policy.model)
    rate = matmul_rate(device, 512 if args.cpu_check else 8192)
    report = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu (--cpu-check)",
              "torch": torch.__version__, "transformers": transformers.__version__, "model": NAMES[args.model],
              "weights": weights, "matmul_tflops": rate / 1e12, "micro_batch": micro_batch, "args": vars(args),
              "rows": []}
    print(f"{report['device']}: bf16 matmul {rate / 1e12:.1f} TFLOP/s; {NAMES[args.model]} stand-in, "
          f"{weights / 1e9:.3g} B weights in matmuls", flush=True)
    for name in args.settings.split(","):
        for path in paths:
            row = measure(policy, initial, path, name, settings[name], vocab, weights, rate, micro_batch)
            report["rows"].append(row)
            (out / "bench_gpu_update.json").write_text(json.dumps(report, indent=1))
            print(json.dumps(row), flush=True)
    text = markdown(report)
    (out / "bench_gpu_update.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()

"""The resource plan's phase terms (mrl/runtime/resources.py) against the memory each phase allocates, measured on this
CPU.

For two Llama-style model sizes in float32, each phase of a step runs once under torch's memory profiler
(`torch.profiler` with profile_memory, its memory timeline on the CPU), and the phase's peak of memory allocated
during it is printed beside the plan's term for it:

    rollout     sample_completions, engine generate, every completion at full length   KV cache + prefill
    scoring     the no-grad log-prob pass over the whole batch                           scoring
    evaluation  greedy generate of the evaluation batch at its own length               evaluation
    update      the training forward with gradients and its backward                    gradients + activations

The plan is for GPUs, where a kernel's temporaries and the caching allocator differ; on the CPU the comparison
checks the terms' sizes and what they leave out (measured / plan near 1: the term holds; far above: it misses
something). Random weights: memory does not depend on them.

    .venv/bin/python benchmarks/plan_vs_measured.py [--sequences 32] [--prompt 64] [--new 32]
    .venv/bin/python benchmarks/plan_vs_measured.py --smoke    # the small model, 2 sequences of 8 + 4 tokens
"""
import argparse
import json
import os
import tempfile
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import mrl  # noqa: E402, F401  (first: the numerics contract, mrl.numerics, before torch and numpy)
import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

from mrl.core.batch import Decoding  # noqa: E402
from mrl.core.config import PlacementConfig  # noqa: E402
from mrl.runtime.resources import GB, Architecture, Workload, policy_memory  # noqa: E402
from mrl.runtime.rollout import completion_logprobs, sample_completions  # noqa: E402
from smoke import add_smoke_flag  # noqa: E402

SIZES = {"small": dict(hidden_size=256, num_hidden_layers=4, intermediate_size=1024, num_attention_heads=4,
                       num_key_value_heads=2, vocab_size=4096),
         "larger": dict(hidden_size=512, num_hidden_layers=8, intermediate_size=2048, num_attention_heads=8,
                        num_key_value_heads=4, vocab_size=8192)}


def peak_allocated(phase) -> float:
    """Bytes: the peak, over the phase, of the CPU memory allocated since it began (torch's memory timeline)."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True) as prof:
        phase()
    with tempfile.TemporaryDirectory() as folder, warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)   # deprecated for CUDA, the only timeline the CPU has
        path = os.path.join(folder, "timeline.json")
        prof.export_memory_timeline(path, device="cpu")
        _, sizes = json.load(open(path))
    totals = [sum(categories) for categories in sizes]
    return max(totals) - totals[0] if totals else 0.0


def measure(name: str, shape: dict, sequences: int, prompt: int, new: int, eval_sequences: int, eval_new: int):
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**shape, max_position_embeddings=prompt + max(new, eval_new) + 8,
                                         pad_token_id=0, eos_token_id=1, bos_token_id=1)).eval()
    arch = Architecture(params=sum(p.numel() for p in model.parameters()), layers=shape["num_hidden_layers"],
                        hidden=shape["hidden_size"], mlp=shape["intermediate_size"],
                        kv=shape["num_key_value_heads"] * shape["hidden_size"] // shape["num_attention_heads"],
                        vocab=shape["vocab_size"], source=name)
    workload = Workload(sequences, prompt, new, reference=False, engine="generate", eval_sequences=eval_sequences,
                        eval_new_tokens=eval_new)
    plan = policy_memory(arch, workload, PlacementConfig(dtype="float32", gradient_checkpointing=False, micro_batch=0))
    ids = torch.randint(3, shape["vocab_size"], (sequences, prompt))
    mask = torch.ones_like(ids)
    draw = dict(engine="generate", with_logprobs=False)
    rollout = Decoding(max_new_tokens=new, eos_id=1, pad_id=0, min_new_tokens=new)
    out = {}
    out["rollout"] = peak_allocated(lambda: sample_completions(model, ids, mask, rollout,
                                                               torch.Generator().manual_seed(0), **draw))
    completion, completion_mask, _ = sample_completions(model, ids, mask, rollout, torch.Generator().manual_seed(0),
                                                        **draw)

    def score():
        with torch.no_grad():
            completion_logprobs(model, ids, mask, completion, completion_mask)

    def update():
        logp = completion_logprobs(model.train(), ids, mask, completion, completion_mask)
        (logp * completion_mask).sum().backward()
        model.eval()

    out["scoring"] = peak_allocated(score)
    eval_ids, eval_mask = ids[:eval_sequences], mask[:eval_sequences]
    evaluation = Decoding(max_new_tokens=eval_new, eos_id=1, pad_id=0, greedy=True, min_new_tokens=eval_new)
    out["evaluation"] = peak_allocated(lambda: sample_completions(model, eval_ids, eval_mask, evaluation, **draw))
    out["update"] = peak_allocated(update)
    planned = {"rollout": plan["KV cache"] + plan["prefill"], "scoring": plan["scoring"],
               "evaluation": plan["evaluation"], "update": plan["gradients"] + plan["activations"]}
    print(f"{name}: {arch.params / 1e6:.1f} M parameters, {sequences} sequences of {prompt} + {new} tokens, "
          f"evaluation {eval_sequences} of {prompt} + {eval_new}, float32")
    print(f"  {'phase':<12}{'plan (MB)':>11}{'measured (MB)':>15}{'measured / plan':>17}")
    for phase, bytes_planned in planned.items():
        megabytes = bytes_planned * GB / 1e6
        print(f"  {phase:<12}{megabytes:11.1f}{out[phase] / 1e6:15.1f}{out[phase] / 1e6 / megabytes:17.2f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sequences", type=int, default=32)
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--new", type=int, default=32)
    parser.add_argument("--eval-sequences", type=int, default=16)
    parser.add_argument("--eval-new", type=int, default=64)
    add_smoke_flag(parser)
    args = parser.parse_args()
    torch.set_num_threads(1)
    sizes = SIZES
    if args.smoke:
        sizes = {"small": SIZES["small"]}
        args.sequences, args.prompt, args.new, args.eval_sequences, args.eval_new = 2, 8, 4, 2, 4
    for name, shape in sizes.items():
        measure(name, shape, args.sequences, args.prompt, args.new, args.eval_sequences, args.eval_new)


if __name__ == "__main__":
    main()

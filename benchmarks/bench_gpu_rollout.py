"""Rollout throughput on one GPU against its bandwidth bound: each sampling engine on the same batches, in one run.

A decode step reads every weight once and the KV cache up to each row's context, so B sequences cannot draw more
than

    bound = B x bandwidth / (weight bytes + B x (mean prompt + new tokens / 2) x KV bytes per token)

tokens per second, with the bandwidth a device-to-device copy measured in this process (read and write counted).
Per setting and engine it gives the completion tokens drawn, seconds, tokens per second, the bound, the fraction of
the bound and the peak of memory allocated. The model is a stand-in at a paper model's real size: its published
architecture (mrl/data/published_configs) with random bf16 weights, so almost no completion stops early.

Settings (temperature 1, the full softmax, each engine on the same prompts):
    64x8     the paper's batch: 64 prompts of 64-256 tokens x 8 samples, 512 new tokens, the stop ids active
    512x512  the equal work of the first GPU run: 512 prompts of 128 tokens, exactly 512 new tokens each
Engines: generate (transformers' generate, static cache), graphs (mrl.runtime.graphs_engine, the decode step captured in
CUDA graphs), graphs-eager (the same steps without capture: what the graphs alone give), hf (mrl's loop over the
transformers forward, dynamic cache), batched (transformers' continuous batching). Each engine draws once untimed on the
same batch at 8 new tokens (kernels and allocator warmed), then once timed.

    python benchmarks/bench_gpu_rollout.py [--model B] [--settings 512x512,64x8] [--engines generate,graphs,...]
    python benchmarks/bench_gpu_rollout.py --cpu-check    # the script itself on a CPU: a tiny stand-in, short lengths

Writes bench_gpu_rollout.json (every row) and bench_gpu_rollout.md (the table) to --out (docs/measurements on a
GPU). A failing engine is recorded with its error and the others still run; the JSON is rewritten after each row.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MRL_NUMERICS", "native")   # the CPU contract pins CPU kernels; nothing here is compared bitwise
import mrl  # noqa: E402, F401  (first: the numerics contract, before torch and numpy)
import torch  # noqa: E402

from mrl.core.batch import Decoding  # noqa: E402
from mrl.runtime.graphs_engine import graphs_completions  # noqa: E402
from mrl.runtime.resources import PUBLISHED, architecture  # noqa: E402
from mrl.runtime.rollout import sample_completions  # noqa: E402

NAMES = {"A": "Qwen2.5-0.5B-Instruct", "B": "Llama-3.2-1B-Instruct", "C": "SmolLM2-360M-Instruct"}
ENGINES = ("generate", "graphs", "graphs-eager", "hf", "batched")
STOPS = (1, 2, 3)
"""the stand-in's stop ids (three, as Llama 3's generation config has); 0 is the pad"""


@dataclass(frozen=True)
class Setting:
    prompts: int
    group: int
    shortest: int
    """prompt tokens, drawn uniformly from shortest..longest per prompt"""
    longest: int
    new_tokens: int
    fixed: bool
    """every completion exactly new_tokens long (stop ids suppressed), else the stop ids end completions"""


SETTINGS = {"64x8": Setting(64, 8, 64, 256, 512, False), "512x512": Setting(512, 1, 128, 128, 512, True)}
CPU_SETTINGS = {"64x8": Setting(4, 2, 5, 20, 8, False), "512x512": Setting(6, 1, 12, 12, 10, True)}


def copy_bandwidth(device: torch.device, megabytes: int, repeats: int = 10) -> float:
    """Bytes per second of the best device copy of a `megabytes` buffer (each copy reads and writes it once)."""
    source = torch.empty(megabytes * 2 ** 20, dtype=torch.uint8, device=device)
    target = torch.empty_like(source)
    best = float("inf")
    for _ in range(repeats + 1):
        synchronize(device)
        start = time.perf_counter()
        target.copy_(source)
        synchronize(device)
        best = min(best, time.perf_counter() - start)
    return 2 * source.numel() / best


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def stand_in(name: str, device: torch.device, tiny: bool):
    """NAMES[name]'s published architecture with random bf16 weights on `device` (tiny: 2 layers of width 64 and a
    vocabulary of 256, the checkpoint's attention grouping kept), and its architecture (mrl.runtime.resources)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    values = json.loads((PUBLISHED / f"{NAMES[name]}.json").read_text())
    values.pop("architectures", None)
    if tiny:
        group = values["num_attention_heads"] // values["num_key_value_heads"]
        values.update(num_hidden_layers=2, num_attention_heads=2 * group, num_key_value_heads=2, head_dim=16,
                      hidden_size=32 * group, intermediate_size=64 * group, vocab_size=256)
    values.update(eos_token_id=STOPS[0], pad_token_id=0, bos_token_id=None, attn_implementation="sdpa")
    config = AutoConfig.for_model(values.pop("model_type"), **values)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).eval()
    return model, architecture_of(model)


def architecture_of(model):
    """mrl.runtime.resources' Architecture of an in-memory model (its config written where architecture() reads it)."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        model.config.save_pretrained(folder)
        return architecture(folder)


def batch(setting: Setting, vocab: int, device: torch.device, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """setting.prompts prompts of random ids (none a stop id or the pad) of random lengths, left-padded, each repeated
    setting.group times: (ids, mask), each (prompts x group, longest)."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(setting.shortest, setting.longest + 1, (setting.prompts,), generator=generator)
    width = int(lengths.max())
    ids = torch.randint(max(STOPS) + 1, vocab, (setting.prompts, width), generator=generator)
    mask = (torch.arange(width) >= width - lengths[:, None]).long()
    ids = ids * mask
    return (ids.repeat_interleave(setting.group, 0).to(device), mask.repeat_interleave(setting.group, 0).to(device))


def draw(model, engine: str, ids: torch.Tensor, mask: torch.Tensor, new_tokens: int, fixed: bool, seed: int):
    """One engine's completions of the batch -> (completion_ids, completion_mask)."""
    decoding = Decoding(max_new_tokens=new_tokens, eos_id=STOPS, pad_id=0, temperature=1.0,
                        min_new_tokens=new_tokens if fixed else 0)
    generator = torch.Generator(ids.device).manual_seed(seed)
    if engine == "graphs-eager":
        completion, completion_mask, _ = graphs_completions(model, ids, mask, decoding, generator, capture=False)
    else:
        completion, completion_mask, _ = sample_completions(model, ids, mask, decoding, generator, engine=engine,
                                                            with_logprobs=engine not in ("generate", "batched"))
    return completion, completion_mask


def bound(arch, rows: int, mean_prompt: float, new_tokens: int, bandwidth: float, dtype_bytes: int = 2) -> float:
    """Tokens per second at the bandwidth bound (the module docstring's formula)."""
    kv_per_token = 2 * arch.layers * arch.kv * dtype_bytes
    step_bytes = arch.params * dtype_bytes + rows * (mean_prompt + new_tokens / 2) * kv_per_token
    return rows * bandwidth / step_bytes


def measure(model, arch, engine: str, setting_name: str, setting: Setting, device: torch.device,
            bandwidth: float) -> dict:
    ids, mask = batch(setting, model.config.vocab_size, device)
    row = {"setting": setting_name, "engine": engine, "sequences": len(ids),
           "mean_prompt_tokens": float(mask.sum(1).float().mean()), "new_tokens": setting.new_tokens,
           "fixed_length": setting.fixed}
    row["bound_tokens_per_s"] = bound(arch, len(ids), row["mean_prompt_tokens"], setting.new_tokens, bandwidth)
    try:
        draw(model, engine, ids, mask, min(8, setting.new_tokens), setting.fixed, seed=1)   # warm-up
        synchronize(device)
        if device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
        start = time.perf_counter()
        _, completion_mask = draw(model, engine, ids, mask, setting.new_tokens, setting.fixed, seed=2)
        synchronize(device)
        seconds = time.perf_counter() - start
    except Exception as err:  # noqa: BLE001  (recorded; the other engines still run)
        return {**row, "error": f"{type(err).__name__}: {err}"[:500]}
    tokens = int(completion_mask.sum())
    return {**row, "tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds,
            "of_bound": tokens / seconds / row["bound_tokens_per_s"],
            "peak_gb": torch.cuda.max_memory_allocated(device) / 1e9 if device.type == "cuda" else None}


def markdown(report: dict) -> str:
    import pandas as pd

    rows = pd.DataFrame(report["rows"])
    for setting, group in rows.groupby("setting", sort=False):   # each engine's speed over generate's, same setting
        base = group.loc[group.engine == "generate", "tokens_per_s"] if "tokens_per_s" in group else []
        if len(base) and "tokens_per_s" in group:
            rows.loc[group.index, "over_generate"] = group.tokens_per_s / float(base.iloc[0])
    head = (f"# Rollout engines against the bandwidth bound ({report['device']}, torch {report['torch']}, "
            f"transformers {report['transformers']})\n\n"
            f"Stand-in: {report['model']} ({report['params'] / 1e9:.2f} B parameters, random bf16 weights); copy "
            f"bandwidth measured in the run: {report['bandwidth_gb_s']:.0f} GB/s. `bound_tokens_per_s`: B x bandwidth "
            f"/ (weight bytes + B x (mean prompt + new / 2) x KV bytes per token).\n\n")
    return head + rows.to_markdown(index=False, floatfmt=".3g") + "\n"


def gpu_bench_parser(name: str, settings: str) -> argparse.ArgumentParser:
    """The arguments every GPU benchmark takes: the stand-in (--model), its settings, the report's folder and
    --cpu-check (the script checked on the CPU at a tiny size)."""
    parser = argparse.ArgumentParser(description=sys.modules["__main__"].__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="B", choices=sorted(NAMES))
    parser.add_argument("--settings", default=settings)
    parser.add_argument("--out", default=None, help="folder of the report (default: docs/measurements on a GPU, "
                                                    f"results/{name}_cpu_check with --cpu-check)")
    parser.add_argument("--cpu-check", action="store_true",
                        help="run on the CPU with a tiny stand-in at short lengths: checks the script, measures "
                             "nothing that means anything")
    return parser


def gpu_bench_start(args: argparse.Namespace, name: str) -> tuple[torch.device, Path]:
    """(the device, the report's folder, made): exits with the reason when there is no GPU and no --cpu-check."""
    if not torch.cuda.is_available() and not args.cpu_check:
        sys.exit(f"{name} needs a CUDA GPU (torch.cuda.is_available() is False); --cpu-check checks the script on "
                 "the CPU")
    out = Path(args.out or (f"results/{name}_cpu_check" if args.cpu_check else "docs/measurements"))
    out.mkdir(parents=True, exist_ok=True)
    return torch.device("cpu" if args.cpu_check else "cuda"), out


def chosen(value: str, allowed, flag: str) -> list[str]:
    """A comma-separated choice, every item one of `allowed`, or exit naming the others."""
    items = value.split(",")
    unknown = [item for item in items if item not in allowed]
    if unknown:
        sys.exit(f"{flag} {unknown} are not allowed; expected some of {list(allowed)}")
    return items


def main() -> None:
    parser = gpu_bench_parser("bench_gpu_rollout", "512x512,64x8")
    parser.add_argument("--engines", default="generate,graphs,graphs-eager,hf")
    args = parser.parse_args()
    device, out = gpu_bench_start(args, "bench_gpu_rollout")
    engines = chosen(args.engines, ENGINES, "--engines")
    settings = CPU_SETTINGS if args.cpu_check else SETTINGS

    import transformers

    model, arch = stand_in(args.model, device, tiny=args.cpu_check)
    bandwidth = copy_bandwidth(device, 64 if args.cpu_check else 2048)
    report = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu (--cpu-check)",
              "torch": torch.__version__, "transformers": transformers.__version__, "model": NAMES[args.model],
              "params": arch.params, "bandwidth_gb_s": bandwidth / 1e9, "args": vars(args), "rows": []}
    print(f"{report['device']}: copy bandwidth {bandwidth / 1e9:.0f} GB/s; {NAMES[args.model]} stand-in, "
          f"{arch.params / 1e9:.2f} B parameters", flush=True)
    for name in args.settings.split(","):
        for engine in engines:
            row = measure(model, arch, engine, name, settings[name], device, bandwidth)
            report["rows"].append(row)
            (out / "bench_gpu_rollout.json").write_text(json.dumps(report, indent=1))
            print(json.dumps(row), flush=True)
    text = markdown(report)
    (out / "bench_gpu_rollout.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()

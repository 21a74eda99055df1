"""The sampler/trainer mismatch of a bf16 run on this CPU (mrl/core/mismatch.py, docs/paper_profile.md).

Two policies of a profile's zoo (A gpt2 + BPE, B llama + Unigram) train under `PlacementConfig(dtype="bfloat16")`:
fp32 master weights, a bf16 sampler synced after every update, the training forward under bf16 autocast. Every
step logs TRL's sampling_logp_difference, the mean and max over completion tokens of |log pi_train - log
pi_sampler|, as sampler_logp_diff_mean / _max; with `--correction` (a TRL vllm_importance_sampling_mode) the
importance weight's min, mean and max too. The table prints per step and policy, then the mean over steps.

    .venv/bin/python benchmarks/sampler_mismatch.py [--profile smoke] [--steps 8] [--correction token_truncate]
    .venv/bin/python benchmarks/sampler_mismatch.py --smoke    # 1 step, a tiny zoo and step
"""
import argparse
import dataclasses
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import mrl  # noqa: E402, F401  (first: the numerics contract, mrl.numerics, before torch and numpy)
import pandas as pd  # noqa: E402

from mrl.core.config import PlacementConfig, RunnerConfig  # noqa: E402
from mrl.core.mismatch import SAMPLER_CORRECTIONS  # noqa: E402
from mrl.core.probes import probe_config  # noqa: E402
from mrl.profiles import load_profile  # noqa: E402
from mrl.runtime.runner import run_concurrent  # noqa: E402
from mrl.runtime.spec import Run  # noqa: E402
from mrl.runtime.zoo_grid import build_zoo  # noqa: E402
from smoke import add_smoke_flag, tiny_profile  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="smoke", help="whose zoo and GRPO settings (default: smoke)")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--probe", default="sgt")
    parser.add_argument("--correction", default="off", choices=SAMPLER_CORRECTIONS)
    add_smoke_flag(parser)
    args = parser.parse_args()
    config = load_profile(args.profile)
    if args.smoke:
        config, args.steps = tiny_profile(config), 1
    zoo = build_zoo(config.task, config.zoo, progress=False)
    paths = {name: str(zoo[name].path) for name in ("A", "B")}
    grpo = dataclasses.replace(config.grpo, steps=args.steps, eval_every=10**9, sampler_correction=args.correction)
    placement = {name: PlacementConfig(dtype="bfloat16") for name in paths}
    run = Run(dataclasses.replace(config, grpo=grpo, runner=RunnerConfig(backend="inline"), threads=1,
                                  placement=placement), paths, probe_config(args.probe), grpo.seed, grpo.steps)
    record = run_concurrent(run, progress=False)
    steps = pd.DataFrame(record.steps)
    columns = [c for c in steps.columns if c.startswith(("sampler_logp_diff", "sampler_weight"))]
    print(f"bf16 sampler vs fp32 masters under bf16 autocast: {args.profile} zoo, {args.probe}, {args.steps} steps, "
          f"{grpo.prompts_per_step} prompts x {grpo.group_size} samples of at most {grpo.max_new_tokens} tokens, "
          f"correction {args.correction}")
    with pd.option_context("display.width", 160, "display.float_format", "{:.4f}".format):
        print(steps[["step", "policy", "reward", *columns]].to_string(index=False))
        print("\nmean over steps:")
        print(steps.groupby("policy")[columns].mean().to_string())


if __name__ == "__main__":
    main()

"""One policy's TRL trainer of a multi-policy run, as a process of its own (docs/trl.md, Running it).

    python -m mrl.integrations.trl_train --policy A --policies A=data/models/.../A-x B=data/models/.../B-y \\
        --probe sgt --steps 20 --exchange results/trl/exchange --output results/trl/A

Start one such process per policy (each under `accelerate launch` on its own GPUs, or as a Ray task); they share
experience through the `--exchange` folder and must agree on the task, the seed and the batch shape, so that they
sample the same prompts at every step. A peer that publishes nothing within `--deadline` seconds is named (its
process died or hangs) and, under the default failure policy, stops this trainer. TRL's metrics go where TRL puts
them: `--report-to tensorboard` writes them under `<output>/runs/`, and `trainer_state.json` in `<output>` keeps
every logged step (`log_history`), the probe's statistics as `probe/<name>` and SEE's counters as `exchange/<name>`.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import mrl  # noqa: F401  (first: the numerics contract, before torch)


def trl_args(output: Path, steps: int, prompts_per_step: int, group_size: int, max_new_tokens: int, lr: float,
             seed: int, report_to: str, **overrides):
    """The GRPOConfig of one trainer: one generation batch (prompts_per_step x group_size completions) per
    optimizer step at a constant learning rate (as mrl's runner), TRL's logging every step, no checkpoints of TRL's
    own."""
    import torch
    from trl import GRPOConfig

    settings = dict(output_dir=str(output), use_cpu=not torch.cuda.is_available(), bf16=False,
                    report_to=report_to, logging_steps=1, save_strategy="no", disable_tqdm=True,
                    per_device_train_batch_size=prompts_per_step * group_size, num_generations=group_size,
                    max_completion_length=max_new_tokens, max_steps=steps, learning_rate=lr, temperature=1.0,
                    lr_scheduler_type="constant", warmup_steps=0,
                    beta=0.0, seed=seed, activation_checkpointing=False)
    return GRPOConfig(**{**settings, **overrides})


def train(policy: str, paths: dict[str, str], task_config, probe, exchange_root: Path, output: Path, steps: int,
          prompts_per_step: int = 4, group_size: int = 8, max_new_tokens: int = 6, lr: float = 1e-4, seed: int = 0,
          deadline: float = 60.0, failure_policy: str = "fail", report_to: str = "none"):
    """Train `policy` (its checkpoint in `paths`) with `probe` beside the other policies of `paths`, each in its
    own process; returns the trainer after `steps` steps, its state (log_history) saved in `output`."""
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    from mrl.integrations.file_exchange import FileExchange
    from mrl.integrations.trl import MRLGRPOTrainer, problem_dataset
    from mrl.tasks import make_task

    task = make_task(task_config)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(paths[policy], padding_side="left")
    args = trl_args(output, steps, prompts_per_step, group_size, max_new_tokens, lr, seed, report_to)
    exchange = FileExchange(exchange_root, policy, tuple(sorted(set(paths) - {policy})), deadline=deadline,
                            failure_policy=failure_policy)
    trainer = MRLGRPOTrainer(AutoModelForCausalLM.from_pretrained(paths[policy]), args, problem_dataset(task),
                             tokenizer, policy=policy, task=task, probe=probe, exchange=exchange, peer_paths=paths)
    trainer.train()
    trainer.save_state()
    return trainer


def main(argv: list[str] | None = None) -> int:
    from mrl.config import TaskConfig
    from mrl.probes import as_probe_config

    parser = argparse.ArgumentParser(prog="python -m mrl.integrations.trl_train", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy", required=True, help="this trainer's policy id (one of --policies)")
    parser.add_argument("--policies", nargs="+", required=True, metavar="ID=FOLDER",
                        help="every policy of the run and its checkpoint folder")
    parser.add_argument("--probe", default="sgt", help="a registered probe, or YAML such as '{name: sgt, lam: 0.3}'")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--prompts-per-step", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=6)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--task", default="{}", help="TaskConfig fields as YAML, e.g. '{max_operand: 9}'")
    parser.add_argument("--exchange", type=Path, required=True, help="the folder every trainer of the run shares")
    parser.add_argument("--output", type=Path, required=True, help="TRL's output_dir of this trainer")
    parser.add_argument("--deadline", type=float, default=60.0, help="seconds to wait for a peer's step")
    parser.add_argument("--failure-policy", choices=("fail", "continue"), default="fail")
    parser.add_argument("--report-to", default="none", help="TRL's report_to: none, tensorboard, trackio, ...")
    args = parser.parse_args(argv)
    import yaml

    paths = dict(entry.split("=", 1) for entry in args.policies)
    if args.policy not in paths:
        parser.error(f"--policy {args.policy!r} is not among --policies {sorted(paths)}")
    probe_entry = yaml.safe_load(args.probe)
    train(args.policy, paths, TaskConfig(**yaml.safe_load(args.task)), as_probe_config(probe_entry), args.exchange,
          args.output, args.steps, args.prompts_per_step, args.group_size, args.max_new_tokens, args.lr, args.seed,
          args.deadline, args.failure_policy, args.report_to)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""One policy's TRL trainer of a multi-policy run, as a process of its own (docs/trl.md, Running it).

    python -m mrl.integrations.trl_train --policy A --policies A=data/models/.../A-x B=data/models/.../B-y \\
        --probe sgt --steps 20 --exchange results/trl/exchange --output results/trl/A

Start one such process per policy; they share experience through the `--exchange` folder and must agree on the
task, the seed and the batch shape. A peer silent for `--deadline` seconds is named and, under the default failure
policy, stops this trainer. TRL's metrics and the trained policy go where TRL puts them (`<output>`); `--save-steps N`
adds TRL's checkpoints, and `--resume` continues every trainer of the run, and their exchange, from the newest step
all of them checkpointed (docs/trl.md: Running it, Resuming a run).
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
from pathlib import Path

import mrl  # noqa: F401  (first: the numerics contract, before torch)
import torch  # noqa: E402
import yaml  # noqa: E402
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, TrainerCallback  # noqa: E402
from trl import GRPOConfig  # noqa: E402

from mrl.core.batch import CHAT_DATE
from mrl.core.config import GrpoConfig, PlacementConfig, TaskConfig
from mrl.core.probes import as_probe_config, probe_label
from mrl.core.stop_tokens import stop_ids
from mrl.core.tasks import make_task
from mrl.core.validation import ConfigError
from mrl.experiments import policy_paths
from mrl.integrations.file_exchange import FileExchange
from mrl.integrations.trl import MRLGRPOTrainer, MrlSharing, problem_dataset, trl_settings
from mrl.profiles import PROFILES, load_profile


def exchange_run_id(policies, probe, seed: int, profile: str | None) -> str:
    """The run's name in the exchange folder, the same in every trainer of one run: its pairing, probe (with its
    knobs), RL seed and profile, e.g. "A+B sgt seed 0 (smoke)". The exchange writes it beside each policy's steps
    and refuses a peer folder that another run wrote, naming both runs."""
    return f"{'+'.join(sorted(policies))} {probe_label(probe)} seed {seed} ({profile or 'no profile'})"


def trl_args(output: Path, grpo, placement, report_to: str = "none", use_vllm: bool = False, save_steps: int = 0,
             **overrides):
    """The GRPOConfig of one trainer from mrl's GrpoConfig (mrl.integrations.trl.trl_settings: the batch shape and
    every loss setting the probes read) and the policy's PlacementConfig (bf16 autocast over fp32 weights, gradient
    checkpointing; its micro_batch goes to MRLGRPOTrainer); a constant learning rate as the runner's, chat templates
    given mrl's fixed date, TRL's logging every step, dropout off. save_steps: TRL's own checkpoints every this many
    steps (save_strategy steps), 0 for none. use_vllm: TRL's own switch, vLLM colocated with the trainer
    (`pip install -e ".[vllm]"`); the probes' ratios are then to vLLM's sampling log-probs."""
    settings = dict(output_dir=str(output), use_cpu=not torch.cuda.is_available(),
                    bf16=placement.dtype == "bfloat16", gradient_checkpointing=placement.gradient_checkpointing,
                    report_to=report_to, logging_steps=1, disable_tqdm=True,
                    **({"save_strategy": "steps", "save_steps": save_steps} if save_steps else {"save_strategy": "no"}),
                    lr_scheduler_type="constant", warmup_steps=0, disable_dropout=True,
                    chat_template_kwargs={"date_string": CHAT_DATE}, use_vllm=use_vllm,
                    **({"vllm_mode": "colocate"} if use_vllm else {}), **trl_settings(grpo))
    return GRPOConfig(**{**settings, **overrides})


class ExchangeCheckpoints(TrainerCallback):
    """After each of TRL's checkpoints, note its step in the exchange (a resume starts from a step every trainer
    checkpointed)."""

    def __init__(self, sharing: MrlSharing):
        self.sharing = sharing

    def on_save(self, args, state, control, **kwargs):
        self.sharing.exchange.record_checkpoint(state.global_step)


def train(sharing: MrlSharing, args: GRPOConfig, resume_from: Path | None = None):
    """Train sharing.policy (its checkpoint folder sharing.peer_paths[sharing.policy]) with sharing.probe beside the
    other policies of sharing.peer_paths, each in its own process, under TRL's GRPOConfig `args` (trl_args), from TRL's
    checkpoint `resume_from` if given (resume_point); returns the trainer after args.max_steps steps, its state
    (log_history), the trained model, its tokenizer and TRL's model card saved in args.output_dir (save_model), the
    generation config listing every stop id the rollouts stopped at."""
    path = sharing.peer_paths[sharing.policy]
    tokenizer = PreTrainedTokenizerFast.from_pretrained(path, padding_side="left")
    trainer = MRLGRPOTrainer(AutoModelForCausalLM.from_pretrained(path), args, problem_dataset(sharing.task),
                             tokenizer, sharing=sharing, callbacks=[ExchangeCheckpoints(sharing)])
    trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
    trainer.save_state()
    trainer.model.generation_config.eos_token_id = list(stop_ids(tokenizer))
    trainer.save_model(args.output_dir)
    trainer.create_model_card(model_name=sharing.policy, tags=["mrl", sharing.probe.name])
    return trainer


CHECKPOINT = re.compile(r"checkpoint-(\d+)")
"""the name of TRL's checkpoint folder after a step"""


def checkpoints(output: Path) -> dict[int, Path]:
    """TRL's intact checkpoints in `output` ({step: folder}; a folder without its trainer_state.json is a save
    killed midway)."""
    found = {int(m.group(1)): p for p in output.glob("checkpoint-*") if (m := CHECKPOINT.fullmatch(p.name))}
    return {step: folder for step, folder in sorted(found.items()) if (folder / "trainer_state.json").exists()}


def resume_point(output: Path, exchange: FileExchange, asked: str) -> Path:
    """The checkpoint this trainer resumes from: `asked` (a checkpoint folder), or with "newest" the newest step
    every trainer of the run checkpointed (FileExchange.common_checkpoint). The exchange resumes after that step
    (FileExchange.resume) and this trainer's later checkpoints are moved aside into `<output>/aside-<n>/`. A clear
    ConfigError where there is nothing to resume from."""
    own = checkpoints(output)
    if not own:
        raise ConfigError(f"--resume: no intact checkpoint in {output} (trl_train saves them with --save-steps N)")
    if asked == "newest":
        step = exchange.common_checkpoint(list(own))
    else:
        m = CHECKPOINT.fullmatch(Path(asked).name)
        mine = m and Path(asked).resolve().parent == output.resolve()
        step = int(m.group(1)) if mine and exchange.checkpointed(int(m.group(1))) else None
    if step is None or step not in own:
        raise ConfigError(f"--resume {asked}: no checkpoint of this trainer (steps {list(own)} in {output}) that every "
                          f"trainer of the run checkpointed too (the exchange's run files in {exchange.root})")
    exchange.resume(step)
    later = [folder for checkpointed, folder in own.items() if checkpointed > step]
    if later:
        aside = output / f"aside-{exchange.generation}"
        aside.mkdir(exist_ok=True)
        for folder in later:
            os.replace(folder, aside / folder.name)
    return own[step]


SMALL_RUN = {"steps": 20, "prompts_per_step": 4, "group_size": 8, "max_new_tokens": 6, "lr": 1e-4, "seed": 0}
"""the run's shape without --profile (every other GRPO setting is GrpoConfig's default)"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mrl.integrations.trl_train", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy", required=True, help="this trainer's policy id (one of --policies)")
    parser.add_argument("--policies", nargs="+", metavar="ID=FOLDER",
                        help="every policy of the run and its checkpoint folder (default: the profile's policies)")
    parser.add_argument("--profile", choices=PROFILES, help="take the task, the policies' checkpoints and the GRPO "
                        "settings from this profile (the paper profile: GSM8K, the pretrained instruct models)")
    parser.add_argument("--pairing", help="the policies that share, e.g. A+B (default: every policy given)")
    parser.add_argument("--probe", default="sgt", help="a registered probe, or YAML such as '{name: sgt, lam: 0.3}'")
    for name, value in SMALL_RUN.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=None,
                            help=f"default: the profile's grpo.{name}, else {value}")
    parser.add_argument("--task", default=None, help="TaskConfig fields as YAML, e.g. '{max_operand: 9}' (default: "
                                                     "the profile's task, else arith-ops)")
    parser.add_argument("--exchange", type=Path, required=True, help="the folder every trainer of the run shares")
    parser.add_argument("--output", type=Path, required=True, help="TRL's output_dir of this trainer")
    parser.add_argument("--deadline", type=float, default=60.0, help="seconds to wait for a peer's step")
    parser.add_argument("--failure-policy", choices=("fail", "continue"), default="fail")
    parser.add_argument("--report-to", default="none", help="TRL's report_to: none, tensorboard, trackio, ...")
    parser.add_argument("--use-vllm", action="store_true", help="sample with vLLM (a GPU and the [vllm] extra)")
    parser.add_argument("--save-steps", type=int, default=0, help="TRL's checkpoints every N steps into "
                        "<output>/checkpoint-N/ (default 0: none; the trained model is saved into <output> at the end)")
    parser.add_argument("--resume", nargs="?", const="newest", metavar="CHECKPOINT",
                        help="continue from TRL's checkpoint at the newest step every trainer checkpointed (or from "
                             "CHECKPOINT), and the exchange from that step; give every trainer of the run --resume")
    args = parser.parse_args(argv)

    config = load_profile(args.profile) if args.profile else None
    grpo = config.grpo if config else GrpoConfig(**SMALL_RUN)
    grpo = dataclasses.replace(grpo, **{name: getattr(args, name) for name in SMALL_RUN
                                        if getattr(args, name) is not None})   # validated: a bad value names its field
    task = TaskConfig(**yaml.safe_load(args.task)) if args.task else config.task if config else TaskConfig()
    if args.policies:
        paths = dict(entry.split("=", 1) for entry in args.policies)
    else:   # the profile's checkpoints, or its zoo (built on first use: build it before starting the trainers)
        paths = dict(config.policies) if config and config.policies else policy_paths(config, False) if config else {}
    if args.pairing:
        unknown = sorted(set(args.pairing.split("+")) - set(paths))
        if unknown:
            parser.error(f"--pairing {args.pairing}: {unknown} are not among the policies {sorted(paths)}")
        paths = {name: paths[name] for name in args.pairing.split("+")}
    if args.policy not in paths:
        parser.error(f"--policy {args.policy!r} is not among the policies {sorted(paths)} (--policies or --profile)")
    probe = as_probe_config(yaml.safe_load(args.probe))
    placement = config.placement_of(args.policy) if config else PlacementConfig()
    trainer_args = trl_args(args.output, grpo, placement, args.report_to, args.use_vllm, args.save_steps)
    exchange = FileExchange(args.exchange, args.policy, tuple(sorted(set(paths) - {args.policy})),
                            deadline=args.deadline, failure_policy=args.failure_policy,
                            run_id=exchange_run_id(paths, probe, grpo.seed, args.profile))
    resume_from = resume_point(args.output, exchange, args.resume) if args.resume else None
    train(MrlSharing(task=make_task(task), probe=probe, exchange=exchange, peer_paths=paths,
                     micro_batch=placement.micro_batch), trainer_args, resume_from)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""One GRPO step of mrl against one trl.GRPOTrainer step on the same model, in the same run.

mrl's step is the one every experiment runs: a PolicyActor's rollout and update with the `grpo` probe
(sampling, scoring, SEE records, the probe's loss, backward, Adam).

Batch: 4 prompts x 8 completions, completion length up to 16, the same GPT-2 zoo architecture
(random init, so both samplers draw from the same distribution and most completions run to the
length limit), Adam at the same learning rate, a coin-flip reward on both sides so that every
group has signal (mrl's skip of zero-advantage rows then saves nearly nothing). Prints per-step
medians, mean completion lengths and the ratio mrl/TRL.

    .venv/bin/python benchmarks/bench_grpo_step.py [--steps 20] [--threads 2] [--numerics both]
    .venv/bin/python benchmarks/bench_grpo_step.py --smoke    # 1 step of 2 prompts x 2 completions of <= 4 tokens
"""
import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from typing import NamedTuple

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import mrl  # noqa: E402, F401  (first: the numerics contract, mrl.numerics, before torch and numpy)
import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers import AutoModelForCausalLM, TrainerCallback  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from numerics_cost import add_numerics_flag, compare, hand_back  # noqa: E402
from smoke import add_smoke_flag  # noqa: E402
from mrl.runtime.actor import WorkerSpec, PolicyActor  # noqa: E402
from mrl.core.config import FamilyConfig, GrpoConfig, TaskConfig  # noqa: E402
from mrl.numerics import state  # noqa: E402
from mrl.core.tasks import ArithTask  # noqa: E402
from mrl.runtime.zoo import build_model, train_tokenizer  # noqa: E402


class Shape(NamedTuple):
    """The benchmarked batch: prompts x completions per prompt (G), completions of at most `length` tokens."""

    prompts: int
    group: int
    length: int


BATCH = Shape(prompts=4, group=8, length=16)
SMOKE_BATCH = Shape(prompts=2, group=2, length=4)


class StepTimer(TrainerCallback):
    """Wall seconds of every GRPOTrainer step."""

    def __init__(self):
        self.times, self._start = [], None

    def on_step_begin(self, args, state, control, **kwargs):
        self._start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.times.append(time.perf_counter() - self._start)


class CoinFlipTask:
    """A reward of 1 with probability 1/2 whatever the completion, so that every group has signal."""

    verifier_id = "coin-flip"

    def __init__(self, seed: int):
        self.rng = random.Random(seed)

    def verify(self, completion_text, problem) -> float:
        return float(self.rng.random() < 0.5)


def bench_trl(model_dir, tokenizer, problems, steps, out, shape: Shape):
    """(seconds of each TRL step, mean completion length) of `steps` GRPOTrainer steps."""
    rng = random.Random(1)

    def reward(completions, **kwargs):
        return [float(rng.random() < 0.5) for _ in completions]

    lengths = []

    def length(completion_ids, **kwargs):
        lengths.extend(len(c) for c in completion_ids)
        return [0.0] * len(completion_ids)

    args = GRPOConfig(output_dir=out, use_cpu=True, bf16=False, report_to="none", activation_checkpointing=False,
                      per_device_train_batch_size=shape.prompts * shape.group, num_generations=shape.group,
                      max_completion_length=shape.length,
                      loss_type="grpo", beta=0.0, learning_rate=1e-4, max_steps=steps, logging_steps=1000,
                      save_strategy="no", disable_tqdm=True, seed=0, temperature=1.0, lr_scheduler_type="constant",
                      warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0, reward_weights=[1.0, 0.0])
    dataset = Dataset.from_list([{"prompt": p.prompt} for p in problems])
    timer = StepTimer()
    trainer = GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(model_dir), processing_class=tokenizer,
                          reward_funcs=[reward, length], args=args,
                          train_dataset=dataset, callbacks=[timer])
    trainer.train()
    return timer.times, statistics.mean(lengths)


def bench_mrl(model_dir, problems, steps, threads, shape: Shape):
    """(seconds of each mrl step, sequences forwarded in each) of `steps` PolicyActor rollouts and updates."""
    cfg = GrpoConfig(prompts_per_step=shape.prompts, group_size=shape.group, max_new_tokens=shape.length, lr=1e-4,
                     loss_type="grpo")
    actor = PolicyActor(WorkerSpec("A", model_dir, TaskConfig(), cfg, threads=threads))
    actor.task = CoinFlipTask(1)
    times, lengths = [], []
    for step in range(1, steps + 1):
        batch = problems[(step * shape.prompts) % len(problems):][:shape.prompts]
        start = time.perf_counter()
        actor.rollout(step, batch)
        result = actor.update(step, {})
        times.append(time.perf_counter() - start)
        lengths.append(result.active_sequences)
    return times, lengths


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    add_numerics_flag(parser)
    add_smoke_flag(parser)
    args = parser.parse_args()
    if args.numerics == "both":
        return compare(__file__, sys.argv[1:])
    shape = SMOKE_BATCH if args.smoke else BATCH
    if args.smoke:
        args.steps, args.threads = 1, 1
    torch.set_num_threads(args.threads)
    task = ArithTask(TaskConfig())
    tokenizer = train_tokenizer("bpe", task.corpus, 48, 64)
    problems = task.train["S1"][:400]
    with tempfile.TemporaryDirectory() as tmp:
        build_model(FamilyConfig(arch="gpt2", d_ff=512), len(tokenizer), 64, seed=0).save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)  # a checkpoint folder, as the actor loads one
        trl_times, trl_length = bench_trl(tmp, tokenizer, problems, args.steps + 2, os.path.join(tmp, "trl"),
                                           shape)
        mrl_times, mrl_active = bench_mrl(tmp, problems, args.steps + 2, args.threads, shape)
    trl_median = statistics.median(trl_times[2:])
    mrl_median = statistics.median(mrl_times[2:])
    print(f"GRPO step, {shape.prompts} prompts x {shape.group} completions, completion length <= {shape.length}, "
          f"{args.threads} threads, median of {args.steps} steps after 2 warm-up steps, numerics {state()['mode']}")
    print(f"  trl.GRPOTrainer : {trl_median * 1000:8.1f} ms/step  (mean completion length {trl_length:.1f})")
    print(f"  mrl PolicyActor : {mrl_median * 1000:8.1f} ms/step  (sequences forwarded per step "
          f"{statistics.mean(mrl_active):.1f} of {shape.prompts * shape.group})")
    print(f"  ratio mrl/TRL   : {mrl_median / trl_median:.3f}")
    hand_back({"trl.GRPOTrainer step": trl_median * 1000, "mrl PolicyActor step": mrl_median * 1000})


if __name__ == "__main__":
    main()

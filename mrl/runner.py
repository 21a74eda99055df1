"""Training loops over zoo policies: independent GRPO (`train_grpo`, `train_grpo_zoo`).

Seeds come from `mrl.seeding`: prompts per step shared by all policies, sampling per (step, policy).
"""
from __future__ import annotations

import copy
import multiprocessing
import time

from tqdm.auto import tqdm

from mrl.config import GrpoConfig
from mrl.evaluation import skill_accuracy
from mrl.policy import PolicyWorker
from mrl.seeding import step_generator, step_prompts, torch_threads
from mrl.tasks import make_task
from mrl.zoo import load_policy


def train_grpo(policy, task, cfg: GrpoConfig, progress: bool = True) -> tuple[list[dict], list[dict]]:
    """Independent GRPO on one zoo policy (its model is trained in place).

    Returns (step rows: step, rollouts, reward, loss, grad_norm, active sequences, seconds;
    eval rows: step, rollouts, split, skill, accuracy), evaluated greedily every `eval_every` steps.
    """
    ref = copy.deepcopy(policy.model).eval() if cfg.beta else None
    worker = PolicyWorker(policy.name, policy.model, policy.tokenizer, cfg, ref_model=ref)
    rollouts_per_step = cfg.prompts_per_step * cfg.group_size
    steps, evals = [], []

    def evaluate(step):
        for row in skill_accuracy(policy.model, policy.tokenizer, task, cfg.max_new_tokens):
            evals.append({"policy": policy.name, "step": step, "rollouts": step * rollouts_per_step, **row})

    evaluate(0)
    for step in tqdm(range(1, cfg.steps + 1), desc=f"grpo {policy.name}", disable=not progress, mininterval=5):
        start = time.perf_counter()
        result = worker.grpo_step(step_prompts(task, cfg.seed, step, cfg.prompts_per_step), task.verify,
                                  step_generator(cfg.seed, step, policy.name))
        steps.append({"policy": policy.name, "step": step, "rollouts": step * rollouts_per_step,
                      "reward": result.rewards.mean().item(), "loss": result.loss, "grad_norm": result.grad_norm,
                      "active_sequences": result.active_sequences, "seconds": time.perf_counter() - start})
        if step % cfg.eval_every == 0 or step == cfg.steps:
            evaluate(step)
    return steps, evals


def _train_one(args) -> tuple[list[dict], list[dict]]:
    path, family, task_cfg, cfg, threads, progress = args
    with torch_threads(threads):
        return train_grpo(load_policy(path, family), make_task(task_cfg), cfg, progress)


def train_grpo_zoo(zoo: dict, task_cfg, cfg: GrpoConfig, workers: int = 1, threads: int = 1,
                   progress: bool = True) -> tuple[list[dict], list[dict]]:
    """Independent GRPO on every zoo policy, each from its saved warm-up checkpoint.

    Policies run in `workers` spawned processes (or inline when workers = 1) with `threads` torch
    threads each; results are identical either way for a fixed seed. Returns the concatenated
    (step rows, eval rows) of `train_grpo`, in zoo order.
    """
    jobs = [(policy.path, policy.family, task_cfg, cfg, threads, progress) for policy in zoo.values()]
    if workers > 1 and len(jobs) > 1:
        with multiprocessing.get_context("spawn").Pool(min(workers, len(jobs))) as pool:
            results = pool.map(_train_one, jobs, chunksize=1)
    else:
        results = [_train_one(job) for job in jobs]
    return [row for steps, _ in results for row in steps], [row for _, evals in results for row in evals]

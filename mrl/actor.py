"""A policy actor: one policy's model, optimizer and task, driven step by step by an MWRA backend.

The same class runs inline, in a spawned process or as a Ray actor. Each step has two phases:
`rollout` (sample G completions per prompt, score them, return the experience records to share)
and `update` (the GRPO step, given what the probe collected from peers). Sampling draws from a
generator derived from (seed, step, policy), so a resumed actor draws exactly what it would have.
"""
from __future__ import annotations

import time

import torch

from mrl.config import GrpoConfig, TaskConfig
from mrl.evaluation import skill_accuracy
from mrl.grpo import group_advantages
from mrl.policy import PolicyWorker, completion_texts, score
from mrl.see import GroupStats, Rollout, Success
from mrl.seeding import step_generator
from mrl.tasks import make_task
from mrl.zoo import load_policy


class PolicyActor:
    """One policy in a concurrent run."""

    def __init__(self, name: str, policy_path: str, task_cfg: TaskConfig, grpo_cfg: GrpoConfig, threads: int,
                 run_id: str = "run"):
        torch.set_num_threads(threads)
        self.name, self.run_id, self.cfg = name, run_id, grpo_cfg
        self.policy = load_policy(policy_path)
        self.task = make_task(task_cfg)
        self.worker = PolicyWorker(name, self.policy.model, self.policy.tokenizer, grpo_cfg)
        self.tokenizer_id = f"{name}:{self.policy.family.tokenizer}"
        self.version = 0
        self._batch = None

    def ping(self) -> str:
        return self.name

    def policy_spec(self) -> dict:
        """What the exchange validates this policy's records against."""
        return {"vocab_size": len(self.policy.tokenizer), "tokenizer_id": self.tokenizer_id}

    def rollout(self, step: int, problems: list) -> dict:
        """Sample and score this step's groups; returns records to publish and rollout metrics."""
        start = time.perf_counter()
        cfg = self.cfg
        prompt_ids, prompt_mask, completion_ids, completion_mask, sample_logp = self.worker.sample(
            [p.prompt for p in problems], step_generator(cfg.seed, step, self.name))
        expanded = [p for p in problems for _ in range(cfg.group_size)]
        texts = completion_texts(self.policy.tokenizer, completion_ids, completion_mask, self.worker.eos_id)
        rewards = score(texts, expanded, self.task.verify)
        self._batch = (problems, prompt_ids, prompt_mask, completion_ids, completion_mask, rewards)
        records = []
        for i, (problem, (text, ok)) in enumerate(zip(expanded, texts)):
            n = int(completion_mask[i].sum())
            ids = completion_ids[i, :n].tolist()
            records.append(Rollout(self.run_id, self.name, self.version, problem.pid, problem.prompt, text, ids,
                                   sample_logp[i, :n].tolist(), float(rewards[i]),
                                   "eos" if ids and ids[-1] == self.worker.eos_id else "length", self.tokenizer_id))
            if rewards[i] > 0:
                records.append(Success(self.name, self.version, problem.pid, text, "arith-integer"))
        grouped = rewards.view(-1, cfg.group_size)
        for problem, group in zip(problems, grouped):
            records.append(GroupStats(self.name, self.version, problem.pid, cfg.group_size, float(group.sum()),
                                      float((group ** 2).sum())))
        return {"records": records, "reward": rewards.mean().item(), "seconds": time.perf_counter() - start}

    def update(self, step: int, peer_records: dict | None = None) -> dict:
        """The GRPO update on this step's own groups (probe 'none': peer records are not used)."""
        start = time.perf_counter()
        problems, prompt_ids, prompt_mask, completion_ids, completion_mask, rewards = self._batch
        advantages = group_advantages(rewards, self.cfg.group_size, self.cfg.scale)
        loss, grad_norm, n_active, _ = self.worker.update(prompt_ids, prompt_mask, completion_ids, completion_mask,
                                                          advantages)
        self.version = step
        self._batch = None
        return {"loss": loss, "grad_norm": grad_norm, "active_sequences": n_active,
                "seconds": time.perf_counter() - start}

    def step(self, step: int, problems: list, evaluate: bool = False) -> dict:
        """Rollout and update in one call (the async clock's unit of work); optionally evaluate after."""
        rollout = self.rollout(step, problems)
        update = self.update(step, None)
        return {"rollout": rollout, "update": update, "evals": self.evaluate(step) if evaluate else None}

    def evaluate(self, step: int) -> list[dict]:
        return [{"policy": self.name, "step": step, **row}
                for row in skill_accuracy(self.policy.model, self.policy.tokenizer, self.task, self.cfg.max_new_tokens)]

    def state_dict(self) -> dict:
        return {"model": self.policy.model.state_dict(), "optimizer": self.worker.optimizer.state_dict(),
                "version": self.version}

    def load_state_dict(self, state: dict) -> None:
        self.policy.model.load_state_dict(state["model"])
        self.worker.optimizer.load_state_dict(state["optimizer"])
        self.version = state["version"]

"""A policy actor: one policy's model, optimizer and task, driven step by step by an MWRA backend.

The same class runs inline, in a spawned process or as a Ray actor. Each step has two phases:
`rollout` (sample G completions per prompt, score them, return the experience records to share)
and `update` (the probe's loss over the own groups and what the runner collected from peers, then
one optimizer step). Sampling draws from a generator derived from (seed, step, policy), and so do the
probe's own draws, so a resumed actor draws exactly what it would have.
"""
from __future__ import annotations

import time

import torch

from transformers import PreTrainedTokenizerFast

from mrl.config import GrpoConfig, ProbeConfig, TaskConfig
from mrl.evaluation import skill_accuracy
from mrl.policy import PolicyWorker, completion_texts, score
from mrl.probes import LearnerBatch, PeerView, get_probe
from mrl.see import GroupStats, Rollout, Success
from mrl.seeding import step_generator
from mrl.tasks import make_task
from mrl.zoo import load_policy


class PolicyActor:
    """One policy in a concurrent run."""

    def __init__(self, name: str, policy_path: str, task_cfg: TaskConfig, grpo_cfg: GrpoConfig, threads: int,
                 run_id: str = "run", probe_cfg: ProbeConfig | None = None, peer_paths: dict | None = None):
        torch.set_num_threads(threads)
        self.name, self.run_id, self.cfg = name, run_id, grpo_cfg
        self.probe_cfg = probe_cfg or ProbeConfig()
        self.probe = get_probe(self.probe_cfg.name)
        self.peer_tokenizers = {peer: PreTrainedTokenizerFast.from_pretrained(path, padding_side="left")
                                for peer, path in (peer_paths or {}).items()
                                if peer != name and "rollout" in self.probe.kinds}
        self.policy = load_policy(policy_path)
        self.task = make_task(task_cfg)
        self.worker = PolicyWorker(name, self.policy.model, self.policy.tokenizer, grpo_cfg)
        kind = self.policy.family.tokenizer if self.policy.family else self.policy.path.name
        self.tokenizer_id = f"{name}:{kind}"
        self.version = 0
        self.probe_state: dict = {}
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
        """The probe's loss on this step's own groups and the peers' records, then one optimizer step.

        peer_records: {kind: {prompt_id: [records]}} as the runner collected them for this policy.
        """
        start = time.perf_counter()
        problems, prompt_ids, prompt_mask, completion_ids, completion_mask, rewards = self._batch
        batch = LearnerBatch(self.name, problems, self.cfg.group_size, prompt_ids, prompt_mask, completion_ids,
                             completion_mask, rewards, self.worker, self.task.verify,
                             step_generator(self.cfg.seed, step, f"{self.name}/probe"), self.probe_state, step)
        peer_records = peer_records or {}
        peers = PeerView(rollouts=peer_records.get("rollout", {}), group_stats=peer_records.get("group_stats", {}),
                         successes=peer_records.get("success", {}), tokenizers=self.peer_tokenizers)
        output = self.probe.loss(batch, peers, self.probe_cfg)
        if output.grad_norm is not None:  # the probe took its own optimizer steps
            loss, grad_norm = output.loss_value, output.grad_norm
        elif output.loss is None:
            loss, grad_norm = 0.0, 0.0
        else:
            loss, grad_norm = output.loss.item(), self.worker.apply(output.loss)
        self.version = step
        self._batch = None
        return {"loss": loss, "grad_norm": grad_norm,
                "active_sequences": output.active_sequences, "probe": output.stats,
                "seconds": time.perf_counter() - start}

    def step(self, step: int, problems: list, evaluate: bool = False) -> dict:
        """Rollout and update in one call (the async clock's unit of work, probes that share nothing);
        optionally evaluate after."""
        rollout = self.rollout(step, problems)
        update = self.update(step, None)
        return {"rollout": rollout, "update": update, "evals": self.evaluate(step) if evaluate else None}

    def evaluate(self, step: int) -> list[dict]:
        return [{"policy": self.name, "step": step, **row}
                for row in skill_accuracy(self.policy.model, self.policy.tokenizer, self.task, self.cfg.max_new_tokens)]

    def state_dict(self) -> dict:
        return {"model": self.policy.model.state_dict(), "optimizer": self.worker.optimizer.state_dict(),
                "version": self.version, "probe_state": self.probe_state}

    def load_state_dict(self, state: dict) -> None:
        self.policy.model.load_state_dict(state["model"])
        self.worker.optimizer.load_state_dict(state["optimizer"])
        self.version = state["version"]
        self.probe_state = state.get("probe_state", {})

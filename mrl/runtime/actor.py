"""A policy actor: one policy's model, optimizer, optional reference model and task, driven step by step.

The same class runs inline, in a worker process or as a Ray actor (MWRA builds it from its `WorkerSpec`).
Each step has two phases: `rollout` (sample G completions per prompt, score them, keep them as this
step's `RolloutBatch` and return the experience records to share) and `update` (the probe's loss from the batch,
the peers' records and the `Learner`, then backward, clip and one optimizer step per update). Sampling draws
from a generator derived from (seed, step, policy), and so do the probe's own draws, so a resumed actor
draws exactly what it would have. The actor is the only place that steps the optimizer.
"""
from __future__ import annotations

import copy
import time
from collections import OrderedDict
from dataclasses import dataclass, field

import torch
from torch import Tensor
from torch.utils._pytree import tree_map
from transformers import PreTrainedTokenizerFast

from mrl import numerics
from mrl.core.batch import Learner, RolloutBatch, StopIds, completion_texts, prompt_renderer, score
from mrl.core.config import ConfigError, GrpoConfig, PlacementConfig, TaskConfig
from mrl.core.engines import CAPABILITIES, Engine
from mrl.core.microbatch import MicroBatchedLogprobs
from mrl.core.mismatch import mismatch_stats, sampler_weights, weight_stats
from mrl.core.probes import PeerView, ProbeConfig, get_probe
from mrl.core.see import GroupStats, Rollout, Success
from mrl.core.seeding import step_generator
from mrl.core.tasks import make_task
from mrl.runtime.evaluation import skill_accuracy
from mrl.runtime.placement import (active_dropout, cast_parameters, frozen_dtype, measured_peak, precision,
                                   resolve_device, set_training)
from mrl.runtime.rollout import completion_logprobs, sample_groups, stop_ids
from mrl.runtime.teacher import LearnerSamples, teacher_logprobs
from mrl.runtime.zoo import load_policy


@dataclass
class RolloutResult:
    """What a worker's rollout of one step returns to the runner."""

    records: list
    """the step's experience as SEE records (Rollout, Success, GroupStats), to publish"""
    reward: float
    """the mean reward of the step's samples"""
    tokens: int
    """completion tokens sampled this step, stop ids included"""
    seconds: float
    """the rollout's wall time"""
    sampler: dict = field(default_factory=dict)
    """under a bf16 sampler, the sampler/trainer mismatch statistics (mrl.core.mismatch); on a GPU, rollout_peak_gb"""


@dataclass
class UpdateResult:
    """What a worker's update of one step returns: the means over the probe's optimizer steps (0 without any)."""

    loss: float
    """the mean loss"""
    grad_norm: float
    """the mean gradient norm before clipping"""
    active_sequences: int
    """sequences with a non-zero advantage or weight (ProbeOutput.active_sequences)"""
    probe: dict
    """the probe's statistics (ProbeOutput.stats); on a GPU, update_peak_gb"""
    seconds: float
    """the update's wall time"""


@dataclass
class FinishResult:
    """The async clock's second call of a step: the update, then the evaluation rows (None off evaluation steps)."""

    update: UpdateResult
    evals: list | None


SHARED_TASKS: OrderedDict = OrderedDict()
"""the arithmetic tasks built in this process, by their config's repr, the most recent last (at most 4)"""


def shared_task(config: TaskConfig):
    """make_task(config), built once per process for an arithmetic task: its splits are a pure function of its config
    (seeded), and the driver and every inline worker of a run, and every run a packed process runs, build the same
    one (three builds were a fifth of a smoke run's time). The task is shared: it is built from a copy of the config
    (a caller's later edit of its own config cannot reach it), and nothing in mrl changes a task once built; code
    that patches a task's methods (a test's stand-in verifier) must patch a task of its own. A GSM8K-style task
    reads its files and is built each time."""
    if config.name == "gsm8k":
        return make_task(config)
    key = repr(config)
    task = SHARED_TASKS.pop(key, None) or make_task(copy.deepcopy(config))
    SHARED_TASKS[key] = task
    while len(SHARED_TASKS) > 4:
        SHARED_TASKS.popitem(last=False)
    return task


def teacher_of(policy: str, policies: list[str]) -> str:
    """The teacher of `policy` for probes that need one: the next policy of the run in name order (cyclic: A's is
    B, B's is A; with A, B, C: B, C, A)."""
    ordered = sorted(policies)
    if len(ordered) < 2:
        raise ValueError(f"a probe with a teacher needs a second policy in the run; got {ordered}")
    return ordered[(ordered.index(policy) + 1) % len(ordered)]


def policy_optimizer(parameters, lr: float) -> torch.optim.Adam:
    """Every policy's optimizer: Adam with betas (0.9, 0.99), fused (one kernel for every parameter, TRL's default
    adamw_torch_fused; the per-tensor loop took 11% of a zoo update)."""
    return torch.optim.Adam(parameters, lr=lr, betas=(0.9, 0.99), fused=True)


@dataclass
class WorkerSpec:
    """Everything one policy's worker is built from, and its resources: the last of the three records from a profile
    to a worker (RunConfig, then mrl.runtime.spec.Run, then one WorkerSpec per policy, made by
    mrl.runtime.runner.plan_run), sent as it is to the worker's process or Ray actor, which builds `actor(spec)`."""

    name: str
    """the policy id"""
    policy_path: str
    """its checkpoint folder (a zoo member or a pretrained model)"""
    task: TaskConfig
    """the task: prompts and the verifier"""
    grpo: GrpoConfig
    """sampling and the own-sample GRPO loss; group_size already multiplied for probes that sample more"""
    probe: ProbeConfig = field(default_factory=ProbeConfig)
    """the probe whose loss the actor minimises, with its knobs"""
    threads: int = 1
    """torch threads of this actor"""
    run_id: str = "run"
    """written into every Rollout record"""
    peer_paths: dict = field(default_factory=dict)
    """{peer id: checkpoint folder}, whose tokenizers THL needs when the probe reads peer rollouts"""
    attack: str = ""
    """a poisoned policy's attack (mrl.runtime.poison.PoisonedActor reads it); '' for an honest one"""
    reverify: bool = True
    """re-score the peers' claims with this policy's verifier before they enter a loss (RunnerConfig.reverify)"""
    placement: PlacementConfig = field(default_factory=PlacementConfig)
    """its device, dtype, gradient checkpointing and micro-batch"""
    probe_module: str = ""
    """the module that registers the probe (mrl.core.probes.Probe.module), imported by a worker that does not know it
    yet; '' takes it from this process's registry"""

    actor: type | None = None
    """the worker's class: None for PolicyActor; PoisonedActor for a poisoned policy, a test's faulty subclass"""

    def __post_init__(self):
        if not self.probe_module:
            self.probe_module = get_probe(self.probe.name).module

    @property
    def num_cpus(self) -> int:
        """the CPUs its backend reserves: its torch threads"""
        return self.threads

    @property
    def num_gpus(self) -> float:
        """the GPUs its backend reserves: its placement's share"""
        return self.placement.gpus

    def build(self) -> "PolicyActor":
        """The worker's actor, built where it runs."""
        return (self.actor or PolicyActor)(self)


def batch_records(batch: RolloutBatch, texts: list[tuple[str, bool]], stops: StopIds, run_id: str, version: int,
                  tokenizer_id: str, verifier_id: str) -> list:
    """One policy's experience of a step as SEE records: a Rollout per sample (its ids and sampling log-probs up to
    and including EOS), a Success per verified one, GroupStats per prompt. texts: completion_texts of the batch;
    stops: the learner's stop ids; version: the policy's updates so far."""
    stops = (stops,) if isinstance(stops, int) else stops
    records = []
    expanded = [p for p in batch.problems for _ in range(batch.group_size)]
    for i, (problem, (text, _)) in enumerate(zip(expanded, texts)):
        n = int(batch.completion_mask[i].sum())
        ids = batch.completion_ids[i, :n].tolist()
        records.append(Rollout(run_id, batch.policy, version, problem.pid, problem.prompt, text, ids,
                               batch.sample_logp[i, :n].tolist(), float(batch.rewards[i]),
                               "eos" if ids and ids[-1] in stops else "length", tokenizer_id, sample=i))
        if batch.rewards[i] > 0:
            records.append(Success(batch.policy, version, problem.pid, text, verifier_id, sample=i))
    for x, (problem, group) in enumerate(zip(batch.problems, batch.rewards.view(-1, batch.group_size))):
        records.append(GroupStats(batch.policy, version, problem.pid, batch.group_size, float(group.sum()),
                                  float((group ** 2).sum()), sample=x))
    return records


class PolicyActor:
    """One policy in a run of n >= 1 policies: a mrl.runtime.worker.Worker, the runner's calls are its methods."""

    def __init__(self, config: WorkerSpec):
        numerics.require()  # in every worker, whichever backend started it
        torch.set_num_threads(config.threads)
        self.config, self.name, self.cfg = config, config.name, config.grpo
        self.probe = get_probe(config.probe.name, config.probe_module)
        self.peer_tokenizers = {peer: PreTrainedTokenizerFast.from_pretrained(path, padding_side="left")
                                for peer, path in config.peer_paths.items()
                                if peer != self.name and "rollout" in self.probe.kinds}
        placement = config.placement
        self.device, self.bf16 = resolve_device(placement.device), placement.dtype == "bfloat16"
        self.policy = load_policy(config.policy_path)
        # fp32 master weights whatever the checkpoint's dtype (Adam's steps of ~lr would round away in bf16)
        self.model, self.tokenizer = self.policy.model.to(self.device, torch.float32), self.policy.tokenizer
        self.reference = None
        if self.cfg.beta:
            self.reference = cast_parameters(copy.deepcopy(self.model), frozen_dtype(placement.dtype)).eval()
            self.reference.requires_grad_(False)
        # what samples and evaluates: the model itself in float32; under bfloat16 a bf16 copy synced after every
        # optimizer step (sampling outside autocast: transformers' static cache takes one dtype for keys and values)
        self.sampler = self.model
        if self.bf16:
            self.sampler = cast_parameters(copy.deepcopy(self.model), torch.bfloat16).eval().requires_grad_(False)
        if self.cfg.sampler_correction != "off" and not self.bf16:
            raise ConfigError(f"GrpoConfig.sampler_correction = {self.cfg.sampler_correction!r} is not allowed with "
                              f"PlacementConfig.dtype = {placement.dtype!r}: the float32 sampler is the trained model, "
                              f"so there is no mismatch to correct; expected 'off' (or dtype 'bfloat16')")
        self.teacher = None
        if self.probe.teacher:
            self.teacher = load_policy(config.peer_paths[teacher_of(self.name, list(config.peer_paths))])
            cast_parameters(self.teacher.model.to(self.device), frozen_dtype(placement.dtype)).requires_grad_(False)
        if placement.gradient_checkpointing:
            self.model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        if placement.micro_batch and active_dropout(self.model):
            raise ConfigError(f"PlacementConfig.micro_batch = {placement.micro_batch} is not allowed for "
                              f"{config.policy_path}: it applies dropout ({active_dropout(self.model)}), so the "
                              f"micro-batches' second forward would not reproduce the first; expected 0")
        self.micro_batched = (MicroBatchedLogprobs(self._logprobs, placement.micro_batch)
                              if placement.micro_batch else None)
        self.optimizer = policy_optimizer(self.model.parameters(), self.cfg.lr)
        self.task = shared_task(config.task)
        self.render = prompt_renderer(self.tokenizer, config.task.chat_template)
        self.teacher_render = prompt_renderer(self.teacher.tokenizer, config.task.chat_template) if self.teacher \
            else None
        kind = self.policy.family.tokenizer if self.policy.family else self.policy.path.name
        self.tokenizer_id = f"{self.name}:{kind}"
        self.version = 0
        self.probe_state: dict = {}
        self.pending: RolloutBatch | None = None  # this step's samples, between rollout and update

    def ping(self) -> str:
        return self.name

    def policy_spec(self) -> dict:
        """What the exchange validates this policy's records against."""
        return {"vocab_size": len(self.tokenizer), "tokenizer_id": self.tokenizer_id}

    def logprobs(self, prompt_ids: Tensor, prompt_mask: Tensor, completion_ids: Tensor,
                 completion_mask: Tensor) -> Tensor:
        """log pi of every completion token with gradient, the model in training mode. (N, P), (N, T) -> (N, T).
        With a micro_batch, computed that many sequences at a time (mrl.core.microbatch; `apply` backpropagates it)."""
        if self.micro_batched is not None:
            return self.micro_batched(prompt_ids, prompt_mask, completion_ids, completion_mask)
        return self._logprobs(prompt_ids, prompt_mask, completion_ids, completion_mask)

    def _logprobs(self, prompt_ids: Tensor, prompt_mask: Tensor, completion_ids: Tensor,
                  completion_mask: Tensor) -> Tensor:
        set_training(self.model, True)
        with precision(self.device, self.config.placement.dtype):
            return completion_logprobs(self.model, prompt_ids, prompt_mask, completion_ids, completion_mask,
                                       engine=self.cfg.engine, temperature=self.cfg.temperature)

    @torch.no_grad()
    def scored_logprobs(self, model, prompt_ids: Tensor, prompt_mask: Tensor, completion_ids: Tensor,
                        completion_mask: Tensor) -> Tensor:
        """log-probs of the completions under a model without a graph (this policy's training forward, its
        reference), in the training forward's precision and micro_batch rows at a time. (N, T)."""
        set_training(model, False)
        with precision(self.device, self.config.placement.dtype):
            return completion_logprobs(model, prompt_ids, prompt_mask, completion_ids, completion_mask,
                                       engine=self.cfg.engine, temperature=self.cfg.temperature,
                                       chunk=self.config.placement.micro_batch)

    def rollout(self, step: int, problems: list) -> RolloutResult:
        """Sample and score this step's groups; keep them as the pending RolloutBatch; return the records to
        publish and rollout metrics (on a GPU with the phase's measured memory peak, rollout_peak_gb)."""
        peak: dict = {}
        with measured_peak(self.device, "rollout_peak_gb", peak):
            result = self._rollout(step, problems)
        result.sampler = {**result.sampler, **peak}
        return result

    def _rollout(self, step: int, problems: list) -> RolloutResult:
        start = time.perf_counter()
        cfg = self.cfg
        # the loops' sampling log-probs come free (the sampler's own, as it drew); in float32 they are the ratio's
        # old log-probs, otherwise the training forward scores the samples
        loop = CAPABILITIES[Engine(cfg.engine)].own_logprobs
        rescore = self.bf16 or not loop
        prompt_ids, prompt_mask, completion_ids, completion_mask, drawn_logp = sample_groups(
            self.sampler, self.tokenizer, [self.render(p.prompt) for p in problems],
            step_generator(cfg.seed, step, self.name, self.device), cfg, with_logprobs=loop)
        sample_logp = drawn_logp
        if rescore:
            sample_logp = completion_mask * self.scored_logprobs(self.model, prompt_ids, prompt_mask, completion_ids,
                                                                 completion_mask)
        sample_weight, sampler = None, {}
        if self.sampler is not self.model:   # the samples' distribution is the bf16 copy's: measure the mismatch
            sample_weight, sampler = self.sampler_mismatch(prompt_ids, prompt_mask, completion_ids, completion_mask,
                                                           sample_logp, drawn_logp)
        expanded = [p for p in problems for _ in range(cfg.group_size)]
        texts = completion_texts(self.tokenizer, completion_ids, completion_mask, stop_ids(self.tokenizer))
        rewards = score(texts, expanded, self.task.verify, self.device)
        ref_logp = None
        if self.reference is not None:
            ref_logp = self.scored_logprobs(self.reference, prompt_ids, prompt_mask, completion_ids,
                                            completion_mask)
        teacher_logp, teacher_failed = None, 0
        if self.teacher is not None:
            with precision(self.device, self.config.placement.dtype):
                samples = LearnerSamples([self.teacher_render(p.prompt) for p in expanded], completion_ids,
                                         completion_mask, [text for text, _ in texts])
                teacher_logp, teacher_failed = teacher_logprobs(
                    self.teacher.model, self.teacher.tokenizer, self.tokenizer, samples, sample_logp, cfg.engine,
                    self.config.placement.micro_batch)
        self.pending = RolloutBatch(
            policy=self.name, step=step, problems=list(problems), group_size=cfg.group_size, prompt_ids=prompt_ids,
            prompt_mask=prompt_mask, completion_ids=completion_ids, completion_mask=completion_mask,
            sample_logp=sample_logp, rewards=rewards, grpo=cfg, ref_logp=ref_logp, teacher_logp=teacher_logp,
            teacher_failed=teacher_failed, sample_weight=sample_weight)
        return RolloutResult(records=self.records(self.pending, texts), reward=rewards.mean().item(),
                             tokens=int(completion_mask.sum().item()), seconds=time.perf_counter() - start,
                             sampler=sampler)

    def sampler_mismatch(self, prompt_ids: Tensor, prompt_mask: Tensor, completion_ids: Tensor,
                         completion_mask: Tensor, train_logp: Tensor,
                         drawn_logp: Tensor | None = None) -> tuple[Tensor | None, dict]:
        """(the sampler correction's weight, None when it is off; the step's mismatch statistics):
        |log pi_train - log pi_sampler| per token gives TRL's sampling_logp_difference (mrl.core.mismatch). pi_sampler
        is what the sampler computed as it drew (drawn_logp: the fast and hf loops'), else, for the generate and batched
        engines, which return none, the bf16 sampler scoring its own completions in one forward (closer to the trainer
        than its cached decoding: it may understate the mismatch). All (N, T); train_logp: the ratio's old log-probs."""
        cfg = self.cfg
        sampler_logp = completion_mask * (drawn_logp if drawn_logp is not None else self.scored_logprobs(
            self.sampler, prompt_ids, prompt_mask, completion_ids, completion_mask))
        stats = mismatch_stats(train_logp, sampler_logp, completion_mask)
        if cfg.sampler_correction == "off":
            return None, stats
        weight = sampler_weights(train_logp, sampler_logp, completion_mask, cfg.sampler_correction,
                                 cfg.sampler_clip_min, cfg.sampler_clip_max)
        return weight, {**stats, **weight_stats(weight, completion_mask)}

    def records(self, batch: RolloutBatch, texts: list[tuple[str, bool]]) -> list:
        """The step's experience as SEE records (batch_records)."""
        return batch_records(batch, texts, stop_ids(self.tokenizer), self.config.run_id, self.version,
                             self.tokenizer_id, self.task.verifier_id)

    def learner(self, step: int) -> Learner:
        """What this policy's probe may use of it at `step`: its log-probs with gradient, tokenizer, verifier and
        renderer, the probe's own draws (a generator derived from (seed, step, policy)) and its state."""
        return Learner(self.logprobs, self.tokenizer, self.task.verify,
                       step_generator(self.cfg.seed, step, f"{self.name}/probe", self.device), self.probe_state,
                       self.render)

    def update(self, step: int, peer_records: dict | None = None) -> UpdateResult:
        """One update of this policy (docs/architecture.md, One step): the probe's loss from the step's batch, the
        peers' records and the learner, then for each of its optimizer updates backward, clip and step.

        peer_records: {kind: {prompt_id: [records]}}, what the runner collected for this policy between the step's
        two barriers. Returns the mean loss and mean pre-clip gradient norm over the updates (0 when there were
        none) and the probe's statistics (on a GPU with the update's measured memory peak, update_peak_gb)."""
        batch, start, peak = self.pending, time.perf_counter(), {}
        if batch is None or batch.step != step:
            raise RuntimeError(f"{self.name}: update({step}) without the rollout of step {step}")
        peers = PeerView(**(peer_records or {}), tokenizers=self.peer_tokenizers, reverify=self.config.reverify)
        losses, norms = [], []
        with measured_peak(self.device, "update_peak_gb", peak):
            output = self.probe.loss(batch, peers, self.learner(step), self.config.probe)
            for m in range(output.updates):   # minibatches (HACPO's, grpo's): loss m on the weights update m - 1 left
                loss = output.loss(m)
                losses.append(loss.item())
                set_training(self.model, True)
                self.optimizer.zero_grad(set_to_none=True)
                if self.micro_batched is not None:
                    self.micro_batched.backward(loss)   # backpropagated micro_batch rows at a time
                else:
                    loss.backward()
                norms.append(torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip).item())
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)   # freed: the next rollout runs without them
                self.sync_sampler()
        self.version, self.pending = step, None
        return UpdateResult(loss=sum(losses) / len(losses) if losses else 0.0,
                            grad_norm=sum(norms) / len(norms) if norms else 0.0,
                            active_sequences=output.active_sequences, probe={**output.stats, **peak},
                            seconds=time.perf_counter() - start)

    @torch.no_grad()
    def sync_sampler(self) -> None:
        """The bf16 sampling copy takes the master weights (nothing to do in float32: it is the model)."""
        if self.sampler is not self.model:
            for copy_, master in zip(self.sampler.parameters(), self.model.parameters()):
                copy_.copy_(master)

    def finish(self, step: int, peer_records: dict | None = None, evaluate: bool = False) -> FinishResult:
        """The update of the pending rollout with the peers' records, then optionally an evaluation (the async
        clock's second call of a step: the runner collects the records once this worker's rollout is published)."""
        update = self.update(step, peer_records)
        return FinishResult(update=update, evals=self.evaluate(step) if evaluate else None)

    def evaluate(self, step: int) -> list[dict]:
        """Greedy accuracy rows per split and skill (on a GPU with the evaluation's measured peak, eval_peak_gb)."""
        peak: dict = {}
        with measured_peak(self.device, "eval_peak_gb", peak):
            rows = skill_accuracy(self.sampler, self.tokenizer, self.task,
                                  self.cfg.eval_max_new_tokens or self.cfg.max_new_tokens, self.cfg.engine, self.render,
                                  self.cfg.eval_batch)
        return [{"policy": self.name, "step": step, **row, **peak} for row in rows]

    def state_dict(self) -> dict:
        """Model, optimizer and probe state on the CPU (a checkpoint or another process reads it anywhere);
        load_state_dict puts it back on this actor's device."""
        def host(tree):
            return tree_map(lambda x: x.detach().cpu() if isinstance(x, Tensor) else x, tree)

        return {"model": host(self.model.state_dict()), "optimizer": host(self.optimizer.state_dict()),
                "version": self.version, "probe_state": host(self.probe_state)}

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.sync_sampler()
        self.optimizer.load_state_dict(state["optimizer"])
        for group in self.optimizer.param_groups:  # the saved groups replace ours: one saved before fused Adam has None
            group["fused"] = True
        self.version = state["version"]
        self.probe_state = state.get("probe_state", {})

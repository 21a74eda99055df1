"""Every probe inside TRL's GRPOTrainer: one trainer per policy, sharing through SEE (docs/trl.md).

`MRLGRPOTrainer` is a `trl.GRPOTrainer` (TRL pinned in pyproject.toml) that carries any registered probe unchanged:
TRL samples as it always does; the generate-and-score step turns TRL's batch into the policy's `RolloutBatch` and
its SEE records, publishes them through a `FileExchange` shared by all the trainers and collects its peers'
(`mrl.runtime.runner.collect_for`); the loss is the probe's loss on that batch and a `PeerView`, so a probe is
written once for both paths. One step in full: docs/trl.md, What happens in one step; what is refused when the
trainer is built: its What is refused.
"""
from __future__ import annotations

import dataclasses
import functools

import torch
from trl import GRPOConfig, GRPOTrainer

from mrl.core.batch import Learner, RolloutBatch, completion_texts, score
from mrl.core.config import GrpoConfig
from mrl.core.grpo import LEVELS, LOSS_TYPES
from mrl.core.microbatch import MicroBatchedLogprobs
from mrl.core.probes import PeerView, ProbeConfig, get_probe
from mrl.core.see import PolicySpec
from mrl.core.seeding import step_generator
from mrl.core.tasks import Problem
from mrl.core.validation import ConfigError
from mrl.integrations.file_exchange import FileExchange
from mrl.runtime.actor import batch_records
from mrl.runtime.placement import set_training
from mrl.runtime.rollout import completion_logprobs, stop_ids
from mrl.runtime.runner import collect_for

PROBLEM_COLUMNS = ("text", "answer", "skill", "pid")
"""the dataset columns a trainer reads its problems from (`problem_dataset`); TRL reads `prompt`"""


class PromptOrderMismatch(RuntimeError):
    """A peer sampled other prompts at the same step: the trainers' data order differs."""


def problem_dataset(task):
    """A task's RL prompts (its fixed pool, or its whole training split when it has none) as the `datasets.Dataset`
    every trainer of a run reads: the same rows in the same order, so the same sampler seed gives every trainer the
    same prompts at every step. `prompt` is what TRL samples from: the task's text, or, for a task with chat
    templates, one user message that TRL puts through each policy's own template (as mrl.runtime.rollout.chat_prompt
    does); `text`, `answer`, `skill` and `pid` are the mrl Problem."""
    from datasets import Dataset

    source = task.pool or task.train
    chat = task.config.chat_template
    return Dataset.from_list([{"prompt": [{"role": "user", "content": p.prompt}] if chat else p.prompt,
                               "text": p.prompt, "answer": p.answer, "skill": p.skill, "pid": p.pid}
                              for skill in sorted(source) for p in source[skill]])


def grpo_config(args: GRPOConfig) -> GrpoConfig:
    """mrl's GrpoConfig of a TRL GRPOConfig: the settings every own-sample term of a probe reads (aggregation, clip
    range, ratio level, advantage scale, KL), TRL's names mapped onto mrl's. Refuses what mrl's loss does not
    define, naming the field and the allowed values."""
    if args.loss_type not in LOSS_TYPES:
        raise ConfigError(f"GRPOConfig.loss_type = {args.loss_type!r} is not allowed with MRLGRPOTrainer; expected "
                          f"one of {list(LOSS_TYPES)}")
    if args.importance_sampling_level not in LEVELS:
        raise ConfigError(f"GRPOConfig.importance_sampling_level = {args.importance_sampling_level!r}; expected one "
                          f"of {list(LEVELS)}")
    scale = {True: "group", False: "none"}.get(args.scale_rewards, args.scale_rewards)
    return GrpoConfig(steps=max(args.max_steps, 1),
                      prompts_per_step=args.per_device_train_batch_size // args.num_generations,
                      group_size=args.num_generations, max_new_tokens=args.max_completion_length,
                      temperature=args.temperature, lr=args.learning_rate, grad_clip=args.max_grad_norm,
                      loss_type=args.loss_type, level=args.importance_sampling_level, scale=scale,
                      eps_low=args.epsilon, eps_high=args.epsilon if args.epsilon_high is None else args.epsilon_high,
                      beta=args.beta, kl_bias_correction=args.use_bias_correction_kl, engine="hf", seed=args.seed)


def trl_settings(grpo: GrpoConfig) -> dict:
    """The GRPOConfig keywords of an mrl GrpoConfig (grpo_config's inverse): one generation batch of
    prompts_per_step x group_size completions per optimizer step, and the loss settings the probes read."""
    return dict(per_device_train_batch_size=grpo.prompts_per_step * grpo.group_size, num_generations=grpo.group_size,
                max_completion_length=grpo.max_new_tokens, max_steps=grpo.steps, temperature=grpo.temperature,
                learning_rate=grpo.lr, max_grad_norm=grpo.grad_clip, loss_type=grpo.loss_type,
                importance_sampling_level=grpo.level, scale_rewards=grpo.scale, epsilon=grpo.eps_low,
                epsilon_high=grpo.eps_high, beta=grpo.beta, use_bias_correction_kl=grpo.kl_bias_correction,
                seed=grpo.seed)


def check_trl_args(args: GRPOConfig, probe: ProbeConfig) -> None:
    """Refuse the TRL settings the adapter does not carry (one generation batch is one optimizer step of one
    process), and the probes it cannot run, each with the field, its value and what is allowed."""
    required = {"gradient_accumulation_steps": 1, "steps_per_generation": 1, "num_iterations": 1}
    for name, allowed in required.items():
        if getattr(args, name) != allowed:
            raise ConfigError(f"GRPOConfig.{name} = {getattr(args, name)!r} is not allowed with MRLGRPOTrainer; "
                              f"expected {allowed}: one generation batch is one optimizer step, the step the peers "
                              f"share")
    if args.per_device_train_batch_size % args.num_generations:
        raise ConfigError(f"GRPOConfig.per_device_train_batch_size = {args.per_device_train_batch_size} must be a "
                          f"multiple of num_generations = {args.num_generations}: whole groups per step")
    if args.fp16:
        raise ConfigError("GRPOConfig.fp16 = True is not allowed with MRLGRPOTrainer; expected bf16 (fp16's loss "
                          "scaler is not carried through the micro-batched backward)")
    if (strategy := getattr(args.eval_strategy, "value", args.eval_strategy)) != "no":
        raise ConfigError(f"GRPOConfig.eval_strategy = {strategy!r} is not allowed with MRLGRPOTrainer; "
                          f"expected 'no' (an evaluation batch would be shared with the peers as a training step)")
    if get_probe(probe.name).group_multiplier != 1:
        raise ConfigError(f"probe {probe.name!r} samples {get_probe(probe.name).group_multiplier} x num_generations "
                          f"completions per prompt, which MRLGRPOTrainer does not; run it on mrl's runner")
    if getattr(probe, "minibatches", 1) != 1:
        raise ConfigError(f"{probe.name}.minibatches = {probe.minibatches} is not allowed with MRLGRPOTrainer; "
                          f"expected 1 (TRL steps the optimizer once per batch; run several updates per step on "
                          f"mrl's runner)")
    if get_probe(probe.name).teacher:
        raise ConfigError(f"probe {probe.name!r} needs a fixed teacher model, which MRLGRPOTrainer does not load; "
                          f"run it on mrl's runner")


def verifier_reward(task, tokenizer):
    """A TRL reward function that scores as mrl does: 1 when the completion ends with EOS, holds no other special
    token and the task's verifier accepts its text (TRL logs it; the probe's rewards are recomputed from the ids)."""
    def mrl_verifier(prompts, completions, completion_ids, text, answer, skill, pid, **_) -> list[float]:
        texts = completion_texts(tokenizer, *padded(completion_ids, tokenizer.pad_token_id), stop_ids(tokenizer))
        problems = [Problem(*row) for row in zip(text, answer, skill, pid)]
        return score(texts, problems, task.verify).tolist()

    return mrl_verifier


def padded(rows: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Lists of ids as (ids padded right with pad_id, mask): (N, T), (N, T)."""
    width = max((len(r) for r in rows), default=0)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, :len(row)], mask[i, :len(row)] = torch.tensor(row, dtype=torch.long), 1
    return ids, mask


@dataclasses.dataclass(frozen=True)
class MrlSharing:
    """What MRLGRPOTrainer adds to GRPOTrainer's arguments: the policy it trains, its task and probe, and how it
    shares experience with the trainers of the other policies."""

    task: object
    """its task: the prompts and the verifier (mrl.core.tasks.make_task)"""
    probe: ProbeConfig
    """the probe whose loss the trainer minimises, with its knobs (mrl.core.probes.probe_config)"""
    exchange: FileExchange
    """this policy's end of the folder every trainer of the run shares"""
    peer_paths: dict = dataclasses.field(default_factory=dict)
    """{peer id: checkpoint folder}, whose tokenizers THL needs when the probe reads peer rollouts"""
    reverify: bool = True
    """re-score the peers' claimed successes with this policy's verifier (as RunnerConfig.reverify)"""
    max_staleness: int = 1
    """as RunnerConfig.max_staleness (1: the records of this step, sampled by peers one update behind)"""
    run_id: str = "trl"
    """written into every Rollout record this trainer publishes"""
    micro_batch: int = 0
    """as PlacementConfig.micro_batch: 0, the whole step's batch in one forward; n, n sequences at a time with the
    whole batch's gradient (mrl.core.microbatch)"""

    @property
    def policy(self) -> str:
        """this policy's id: the exchange's own end"""
        return self.exchange.policy


class MRLGRPOTrainer(GRPOTrainer):
    """A GRPOTrainer whose loss is an mrl probe's, sharing experience with the trainers of the other policies.

    sharing: mrl's part (MrlSharing: the policy, its task, the probe, the exchange and the peers). Every other
    argument is GRPOTrainer's, as TRL names it; `reward_funcs` is mrl's verifier (`verifier_reward`) and may not be
    given."""

    def __init__(self, model, args: GRPOConfig, train_dataset, processing_class, *, sharing: MrlSharing, **kwargs):
        from transformers import PreTrainedTokenizerFast

        if "reward_funcs" in kwargs:
            raise ConfigError("MRLGRPOTrainer(reward_funcs=...) is not allowed: the reward is the task's verifier")
        check_trl_args(args, sharing.probe)
        self.mrl_sharing, self.mrl_probe = sharing, get_probe(sharing.probe.name)
        self.mrl_grpo = grpo_config(args)
        self.mrl_probe.check(self.mrl_grpo)
        self.mrl_peer_tokenizers = {peer: PreTrainedTokenizerFast.from_pretrained(path, padding_side="left")
                                    for peer, path in sharing.peer_paths.items()
                                    if peer != sharing.policy and "rollout" in self.mrl_probe.kinds}
        self.mrl_state: dict = {}
        self.mrl_micro = None
        self.mrl_pending: tuple[RolloutBatch, PeerView] | None = None
        super().__init__(model=model, reward_funcs=[verifier_reward(sharing.task, processing_class)], args=args,
                         train_dataset=train_dataset, processing_class=processing_class, **kwargs)
        sharing.exchange.spec = self.policy_spec()
        if self.accelerator.num_processes != 1:
            raise ConfigError(f"MRLGRPOTrainer runs one process per policy; this launch has "
                              f"{self.accelerator.num_processes} (launch each policy's trainer on its own)")

    @property
    def tokenizer_id(self) -> str:
        return f"{self.mrl_sharing.policy}:{type(self.processing_class).__name__}"

    def policy_spec(self) -> PolicySpec:
        """What the peers validate this trainer's records against."""
        return PolicySpec(vocab_size=len(self.processing_class), tokenizer_id=self.tokenizer_id)

    def _generate_and_score_completions(self, inputs):
        """TRL's generation and scoring, then mrl's: the RolloutBatch, the records published and the peers'
        collected for this step (kept for compute_loss)."""
        output = super()._generate_and_score_completions(inputs)
        group = self.num_generations
        problems = [Problem(*(row[c] for c in PROBLEM_COLUMNS)) for row in inputs[::group]]
        step = self.state.global_step + 1
        batch = self.rollout_batch(problems, output, step)
        self.mrl_pending = (batch, self.share(batch, step))
        return output

    def rollout_batch(self, problems: list, output: dict, step: int) -> RolloutBatch:
        """The RolloutBatch of TRL's generation output (prompt_ids, prompt_mask, completion_ids, completion_mask;
        sampling_per_token_logps under vLLM): rewards from the ids under mrl's EOS rule, sampling log-probs scored
        by the model (or vLLM's), reference log-probs when beta > 0."""
        ids = {k: output[k] for k in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")}
        tokenizer, device = self.processing_class, output["completion_ids"].device
        expanded = [p for p in problems for _ in range(self.num_generations)]
        texts = completion_texts(tokenizer, ids["completion_ids"], ids["completion_mask"], stop_ids(tokenizer))
        sample_logp = self.scored_logprobs(self.model, **ids)
        sampler_logp = output.get("sampling_per_token_logps")   # vLLM's own, NaN where it gave none
        if sampler_logp is not None:   # the behaviour policy is vLLM's: the probes' ratios are to its log-probs
            sample_logp = torch.where(sampler_logp.isnan(), sample_logp, sampler_logp)
        ref_logp = self.scored_logprobs(self.ref_model, **ids) if self.mrl_grpo.beta else None
        policy, task = self.mrl_sharing.policy, self.mrl_sharing.task
        return RolloutBatch(
            policy=policy, step=step, problems=list(problems), group_size=self.num_generations,
            **ids,
            sample_logp=sample_logp * ids["completion_mask"],
            rewards=score(texts, expanded, task.verify, device),
            grpo=self.mrl_grpo, ref_logp=ref_logp)

    def share(self, batch: RolloutBatch, step: int) -> PeerView:
        """Publish this step's records and collect the peers' for the same prompts (the PeerView of the probe);
        the exchange's counters go to TRL's metrics as exchange/<counter>."""
        sharing = self.mrl_sharing
        stops = stop_ids(self.processing_class)
        texts = completion_texts(self.processing_class, batch.completion_ids, batch.completion_mask, stops)
        own = batch_records(batch, texts, stops, sharing.run_id, self.state.global_step, self.tokenizer_id,
                            sharing.task.verifier_id)
        sharing.exchange.publish(step, own)
        exchange, missing = sharing.exchange.gather(step, own)
        check_same_prompts(exchange, batch.problems, sharing.policy)
        records = collect_for(exchange, self.mrl_probe.kinds, sharing.policy, batch.problems, sharing.task,
                              sharing.max_staleness, sharing.reverify, at=step)
        metrics = self._metrics["train"]
        metrics["exchange/missing_peers"].append(float(len(missing)))
        for name, count in exchange.counters.items():
            metrics[f"exchange/{name}"].append(float(count))
        return PeerView(**records, tokenizers=self.mrl_peer_tokenizers, reverify=sharing.reverify)

    def logprobs(self, model, prompt_ids, prompt_mask, completion_ids, completion_mask) -> torch.Tensor:
        """log pi of every completion token with gradient (mrl.runtime.rollout.completion_logprobs, the runner's own
        forward), the model in training mode, at TRL's sampling temperature. (N, P), (N, T) -> (N, T)."""
        set_training(model, True)
        return completion_logprobs(model, prompt_ids, prompt_mask, completion_ids, completion_mask, engine="hf",
                                   temperature=self.mrl_grpo.temperature)

    @torch.no_grad()
    def scored_logprobs(self, model, prompt_ids, prompt_mask, completion_ids, completion_mask) -> torch.Tensor:
        """The same log-probs without a graph, the model in eval mode as the actor scores (sampling log-probs, the
        reference's). (N, T)."""
        set_training(model, False)
        return completion_logprobs(model, prompt_ids, prompt_mask, completion_ids, completion_mask, engine="hf",
                                   temperature=self.mrl_grpo.temperature)

    def training_step(self, model, inputs, num_items_in_batch=None):
        """TRL's training step; with micro-batches, its backward is MicroBatchedLogprobs.backward (dL/dlogp, then
        each micro-batch's forward again under the same autocast), so the gradient is the whole batch's."""
        if not self.mrl_sharing.micro_batch:
            return super().training_step(model, inputs, num_items_in_batch)
        backward = self.accelerator.backward

        def micro_batched_backward(loss, **_):
            with self.compute_loss_context_manager():
                self.mrl_micro.backward(loss)

        self.accelerator.backward = micro_batched_backward
        try:
            return super().training_step(model, inputs, num_items_in_batch)
        finally:
            self.accelerator.backward = backward

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        """The probe's loss on this step's RolloutBatch and PeerView (one optimizer update); its statistics go to
        TRL's metrics as probe/<statistic>."""
        if return_outputs:
            raise ValueError("MRLGRPOTrainer.compute_loss does not return outputs")
        if self.mrl_pending is None:
            raise RuntimeError("compute_loss before _generate_and_score_completions: no pending batch")
        batch, peers = self.mrl_pending
        if len(inputs["completion_ids"]) != len(batch.completion_ids):
            raise RuntimeError(f"TRL handed compute_loss {len(inputs['completion_ids'])} rows of a "
                               f"{len(batch.completion_ids)}-row generation batch (steps_per_generation must be 1)")
        logprobs = functools.partial(self.logprobs, model)
        if self.mrl_sharing.micro_batch:   # training_step backpropagates it (MicroBatchedLogprobs.backward)
            logprobs = self.mrl_micro = MicroBatchedLogprobs(logprobs, self.mrl_sharing.micro_batch)
        learner = Learner(logprobs, self.processing_class, self.mrl_sharing.task.verify,
                          step_generator(self.mrl_grpo.seed, batch.step, f"{batch.policy}/probe", batch.device),
                          self.mrl_state)
        output = self.mrl_probe.loss(batch, peers, learner, self.mrl_sharing.probe)
        if output.updates > 1:
            raise ConfigError(f"probe {self.mrl_probe.name!r} returned {output.updates} updates for one batch; "
                              f"MRLGRPOTrainer takes 1 per step")
        loss = output.loss(0) if output.updates else None   # computed first: the statistics are complete after it
        metrics = self._metrics["train"]
        metrics["probe/active_sequences"].append(float(output.active_sequences))
        for name, value in output.stats.items():
            metrics[f"probe/{name}"].append(float(value))
        if loss is None:   # nothing to learn: a zero that reaches no parameter, so no gradient and no Adam step
            return torch.zeros((), device=batch.device, requires_grad=True)
        return loss


def check_same_prompts(exchange, problems: list, policy: str) -> None:
    """Refuse a step at which a peer's group statistics are for other prompts than this policy's: the trainers'
    dataset, seed or prompts per step differ, so no record would be for the same prompts."""
    own = {p.pid for p in problems}
    for peer, prompts in sorted(exchange.prompts_by_policy("group_stats").items()):
        if peer != policy and prompts != own:
            raise PromptOrderMismatch(f"peer {peer!r} sampled other prompts than {policy!r} at this step "
                                      f"({sorted(prompts ^ own)[:3]} ...): give every trainer the same dataset, seed "
                                      f"and per_device_train_batch_size / num_generations")

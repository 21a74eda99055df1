"""hacpo, and its baselines gspo and naive (docs/architecture.md, The probes; HACPO from its official code).

hacpo: the learner's group for a prompt is its own samples plus every peer's (retokenized by THL), with advantages
from the capability-aware mixed baseline; own samples take GSPO's clipped sequence-level loss, peer samples the
objective clip(s, l_m, 1) sg(clip(s))^alpha omega(src, learner) A with s the sequence-level ratio
pi_learner(T(y)) / pi_src(y). gspo is hacpo without peers, gspo_x2 the same with 2G samples per prompt, naive the
pooled group with no corrections. The ratio's normalisation and tokenization, the KL, the minibatches' stepwise
clipping and the baselines in full: docs/architecture.md, The probes (hacpo and its baselines).
"""
from __future__ import annotations

import math
from typing import Annotated, Literal

import numpy as np
import torch
from pydantic import Field
from torch import Tensor

from mrl.core.batch import Learner, RolloutBatch
from mrl.core.grpo import Surrogate, policy_loss
from mrl.core.probes.contract import PeerView, ProbeConfig, ProbeOutput, register_probe
from mrl.core.probes.hacpo_primitives import (CapabilityTracker, capability_advantages, peer_objective,
                                         stepwise_lower_bound)
from mrl.core.probes.terms import (TOKENIZATIONS, marginal_statistics, own_logprobs, peer_log_ratio, rescored_reward,
                              retokenize_rollouts, sequence_logprobs, text_logprobs)
from mrl.core.validation import Bool, Float, PositiveInt, config_dataclass

GSPO_EPS = (3e-4, 4e-4)   # GSPO's sequence-ratio clip on own samples (epsilon low, high)


@config_dataclass(frozen=True)
class GspoConfig(ProbeConfig):
    """gspo, gspo_x2 and naive: GSPO's loss over the (pooled) group."""

    minibatches: PositiveInt = 1
    """optimizer updates per step over the pooled batch (own samples first)"""


@config_dataclass(frozen=True)
class HacpoConfig(ProbeConfig):
    advantage: Literal["capability", "pooled", "own"] = "capability"
    """baseline of the pooled group: capability (omega-weighted), pooled (plain mean) or own"""
    omega: Bool = True
    """scale each peer sample's term by omega(source, learner) (the capability discrepancy coefficient)"""
    alpha: Annotated[Float, Field(ge=0)] = 1.0
    """exponent of the stop-gradient reweighting s * sg(s)^alpha of a peer sample's ratio s"""
    clipping: Literal["stepwise", "fixed", "symmetric", "none"] = "stepwise"
    """peer ratio clip: stepwise [min(1, 1 - delta + m delta_step), 1], fixed [1 - delta, 1] (the paper's "no
    stepwise"), symmetric [1 - delta, 1 + delta], none (the paper's "no clip": s unclipped, |log s| <= 10)"""
    delta: Annotated[Float, Field(ge=0, lt=1)] = 0.2
    """lower clip offset of the peer ratio"""
    delta_step: Annotated[Float, Field(ge=0)] = 0.025
    """rise of the lower bound per minibatch update m"""
    ratio: Literal["thl", "mean"] = "thl"
    """peer sequence ratio normalised over THL groups (thl) or each side by its own token count (mean, the
    official code)"""
    tokenization: Literal[TOKENIZATIONS] = "canonical"
    """the learner's log-probability of a peer text in s: its canonical tokenization's (canonical, the official code)
    or summed over every tokenization it can write (marginal, terms.sequence_logprobs: texts it cannot write, or with
    more than terms.MAX_TOKENIZATIONS, keep the canonical); `ratio`'s normalisers stay the canonical alignment's"""
    minibatches: PositiveInt = 1
    """optimizer updates per step over the pooled batch (own samples first); the stepwise bound rises with each"""
    capability_window: PositiveInt = 5
    """K, steps in the rolling positive-reward rate"""


def _pooled(batch: RolloutBatch, peers: PeerView, learner: Learner, cfg: GspoConfig | HacpoConfig, mode: str):
    """The pooled groups: own advantages (P*G,), peer rows (prompt, record, alignment, advantage, omega), stats."""
    samples, failed, inexact = retokenize_rollouts(batch, learner, peers) if mode != "gspo" else ([], 0, 0)
    g = batch.group_size
    weighted = mode == "hacpo" and cfg.omega
    # never a peer's own claim
    rescored = [rescored_reward(batch, learner, peers, x, record) for x, record, _ in samples]
    tracker, rates = None, {}
    if mode == "hacpo":
        tracker = learner.state.setdefault("capability", CapabilityTracker(window=cfg.capability_window))
        rates = {batch.policy: float((batch.rewards > 0).float().mean())}
        per_source: dict[str, list] = {}
        for (_, record, _), reward in zip(samples, rescored):
            per_source.setdefault(record.policy_id, []).append(reward > 0)
        rates.update({source: sum(hits) / len(hits) for source, hits in per_source.items()})
        tracker.update(rates)  # the current batch is included (update before use)
    own = batch.rewards.view(-1, g)
    peer_rewards = [[] for _ in batch.problems]
    peer_sources = [[] for _ in batch.problems]
    for (x, record, _), reward in zip(samples, rescored):
        peer_rewards[x].append(reward)
        peer_sources[x].append(record.policy_id)
    advantage_mode = cfg.advantage if mode == "hacpo" else ("pooled" if mode == "naive" else "own")
    own_adv, peer_adv = [], [[] for _ in batch.problems]
    for x in range(len(batch.problems)):
        rewards = torch.cat([own[x], torch.tensor(peer_rewards[x], dtype=own.dtype, device=own.device)])
        is_own = torch.arange(len(rewards), device=own.device) < g
        omegas = torch.tensor([1.0] * g + [tracker.omega(batch.policy, s) if weighted else 1.0
                                           for s in peer_sources[x]], dtype=own.dtype, device=own.device)
        advantages = capability_advantages(rewards, omegas, is_own, mode=advantage_mode)
        own_adv.append(advantages[:g])
        peer_adv[x] = advantages[g:].tolist()
    cursor = [0] * len(batch.problems)
    peer_rows = []
    for x, record, alignment in samples:
        a = peer_adv[x][cursor[x]]
        cursor[x] += 1
        omega_src = tracker.omega(record.policy_id, batch.policy) if weighted else 1.0
        peer_rows.append((x, record, alignment, a, omega_src))
    stats = {"peer_samples": len(samples), "thl_failed": failed, "thl_inexact": inexact,
             "reward_disagreements": sum(r != record.reward for r, (_, record, _) in zip(rescored, samples))}
    if len(rates) > 1:
        stats.update({f"omega_from_{s}": tracker.omega(s, batch.policy) for s in sorted(rates) if s != batch.policy})
    return torch.cat(own_adv), peer_rows, stats


def _bounds(cfg: HacpoConfig, minibatch: int) -> tuple[float, float]:
    if cfg.clipping == "stepwise":
        return stepwise_lower_bound(minibatch, cfg.delta, cfg.delta_step), 1.0
    if cfg.clipping == "fixed":
        return 1.0 - cfg.delta, 1.0
    if cfg.clipping == "none":
        return 0.0, math.inf
    return 1.0 - cfg.delta, 1.0 + cfg.delta


def _own_term(batch: RolloutBatch, learner: Learner, rows: list[int], own_adv: Tensor,
              old_logp: Tensor | None) -> tuple[Tensor, list]:
    """(the sum over these own sequences of GSPO's per-sequence loss, with the k3 KL of batch.grpo.beta; their
    log(pi / pi_old), token mean, each with True: own sequences are never clipped out) (Table 6 of the HACPO paper).
    rows: indices into the batch."""
    rows = torch.tensor(rows, device=batch.device)
    logp = own_logprobs(batch, learner, rows)
    old = logp.detach() if old_logp is None else old_logp[rows]
    beta = batch.grpo.beta
    gspo = Surrogate(level="sequence", eps_low=GSPO_EPS[0], eps_high=GSPO_EPS[1], beta=beta,
                     kl_bias_correction=batch.grpo.kl_bias_correction)   # GSPO's clip, grpo's aggregation
    own_loss, _ = policy_loss(logp, old, own_adv[rows], batch.completion_mask[rows], gspo,
                              ref_logp=batch.ref_logp[rows] if beta else None,
                              sample_weight=None if batch.sample_weight is None else batch.sample_weight[rows])
    mask = batch.completion_mask[rows].to(logp.dtype)
    own_log_ratio = ((logp.detach() - old) * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    return own_loss * len(rows), [(float(v), True) for v in own_log_ratio]


def _peer_term(batch: RolloutBatch, learner: Learner, cfg: GspoConfig | HacpoConfig, mode: str, peer_rows: list,
               minibatch: int, marginal: list) -> tuple[Tensor, int, int, dict]:
    """(the sum over these peer samples of the HACPO objective (naive: the unclipped one), peer samples kept, peer
    samples clipped, {source: that source's log s with whether s was inside the clip range}). With tokenization
    "marginal", appends each peer text's (source, log marginal - log canonical, whether it has a marginal) to
    `marginal`."""
    kept, clipped = 0, 0
    ratios: dict[str, list] = {}
    prompts = [batch.problems[x].prompt for x, *_ in peer_rows]
    logp, mask = text_logprobs(batch, learner, prompts, [alignment.dst_ids for _, _, alignment, _, _ in peer_rows])
    sums = (logp * mask).sum(-1)
    if mode == "hacpo" and cfg.tokenization == "marginal":
        canonical = sums.detach()
        sums, used = sequence_logprobs(batch, learner, prompts,
                                       [alignment.text for _, _, alignment, _, _ in peer_rows], sums,
                                       [a.dst_ids[-1] == learner.eos_id for _, _, a, _, _ in peer_rows],
                                       cfg.tokenization)
        marginal.extend(zip([record.policy_id for _, record, *_ in peer_rows],
                            (sums.detach() - canonical).tolist(), used))
    if mode == "naive":
        log_s = sums / mask.sum(-1)
        objective = torch.exp(log_s - log_s.detach()) * torch.tensor([a for *_, a, _ in peer_rows],
                                                                     device=log_s.device)
    else:
        log_s = torch.stack([peer_log_ratio(sums[i], len(alignment.dst_ids), record.logps, alignment.n_groups,
                                            cfg.ratio)
                             for i, (_, record, alignment, _, _) in enumerate(peer_rows)])
        lower, upper = _bounds(cfg, minibatch)
        advantages = torch.tensor([a for *_, a, _ in peer_rows], dtype=log_s.dtype, device=log_s.device)
        omegas = torch.tensor([o for *_, o in peer_rows], dtype=log_s.dtype, device=log_s.device)
        objective = peer_objective(log_s, advantages, omegas, lower, cfg.alpha, upper)
        s = torch.exp(log_s.detach())
        inside = (s >= lower) & (s <= upper)
        kept = int(inside.sum())
        clipped = len(peer_rows) - kept
        for (_, record, *_), value, ok in zip(peer_rows, log_s.detach().tolist(), inside.tolist()):
            ratios.setdefault(record.policy_id, []).append((value, ok))
    return objective.sum(), kept, clipped, ratios


def _chunk_loss(batch: RolloutBatch, learner: Learner, cfg: GspoConfig | HacpoConfig, mode: str, chunk: list,
                own_adv: Tensor, old_logp: Tensor | None, minibatch: int, marginal: list):
    """Minus the mean over this chunk's sequences ([("own", row) or ("peer", peer row), ...]) of the per-sequence
    objectives: own GSPO (_own_term), peer HACPO (_peer_term). Returns (loss, peer samples kept, peer samples
    clipped, ratios {"self": ..., source: ...})."""
    own_rows = [i for kind, i in chunk if kind == "own"]
    peer_rows = [row for kind, row in chunk if kind == "peer"]
    total, kept, clipped = 0.0, 0, 0
    ratios: dict[str, list] = {}
    if own_rows:
        own_total, ratios["self"] = _own_term(batch, learner, own_rows, own_adv, old_logp)
        total = total + own_total
    if peer_rows:
        objective, kept, clipped, peer_ratios = _peer_term(batch, learner, cfg, mode, peer_rows, minibatch, marginal)
        ratios.update(peer_ratios)
        total = total - objective
    return total / max(len(own_rows) + len(peer_rows), 1), kept, clipped, ratios


def _minibatch_output(batch: RolloutBatch, learner: Learner, cfg: GspoConfig | HacpoConfig, mode: str,
                      sequences: list, own_adv: Tensor, stats: dict, n_total: int) -> ProbeOutput:
    """One update per minibatch of `sequences`, update m's loss computed when the actor asks for it (after it applied
    update m - 1); each adds the peer samples kept and clipped, and the last the ratio statistics
    (`ratio_statistics`), to stats."""
    old_logp = None
    if cfg.minibatches > 1:  # the ratio of later updates is to the policy that sampled
        with torch.no_grad():
            old_logp = own_logprobs(batch, learner, torch.arange(len(batch.rewards), device=batch.device))
    size = math.ceil(len(sequences) / cfg.minibatches)
    updates = math.ceil(len(sequences) / size)
    stats.update({"peer_kept": 0, "peer_clipped": 0})
    ratios: dict[str, list] = {}
    marginal: list[tuple[str, float, bool]] = []

    def loss(m: int) -> Tensor:
        chunk = sequences[m * size:(m + 1) * size]
        value, kept, clipped, chunk_ratios = _chunk_loss(batch, learner, cfg, mode, chunk, own_adv, old_logp, m,
                                                         marginal)
        stats["peer_kept"] += kept
        stats["peer_clipped"] += clipped
        for source, values in chunk_ratios.items():
            ratios.setdefault(source, []).extend(values)
        if m == updates - 1:
            stats.update(ratio_statistics(ratios))  # with the last loss: complete when the actor reads them
            if getattr(cfg, "tokenization", "canonical") == "marginal":
                stats.update(marginal_statistics(*map(list, zip(*marginal))) if marginal else {})
        if cfg.minibatches == 1:   # the loss of a full batch averages over every sequence, skipped ones included
            value = value * len(chunk) / n_total
        return value

    return ProbeOutput(updates, loss, len(sequences), stats)


def ratio_statistics(ratios: dict[str, list]) -> dict[str, float]:
    """Per source ("self" or a peer id): mean, std and 10/50/90% quantiles of its log ratios over the step, and
    the fraction inside the clip range (peers only): keys like log_s_mean_from_B, inside_from_B."""
    out = {}
    for source, values in sorted(ratios.items()):
        if not values:
            continue
        logs = np.array([v for v, _ in values])
        tag = "self" if source == "self" else f"from_{source}"
        out.update({f"log_s_mean_{tag}": float(logs.mean()), f"log_s_std_{tag}": float(logs.std()),
                    **{f"log_s_q{q}_{tag}": float(np.quantile(logs, q / 100)) for q in (10, 50, 90)}})
        if source != "self":
            out[f"inside_{tag}"] = float(np.mean([ok for _, ok in values]))
    return out


def _shared_gspo(batch: RolloutBatch, peers: PeerView, learner: Learner, cfg: GspoConfig | HacpoConfig,
                 mode: str) -> ProbeOutput:
    own_adv, peer_rows, stats = _pooled(batch, peers, learner, cfg, mode)
    own_rows = list(range(len(batch.rewards)))
    if batch.grpo.skip_zero_advantage and not batch.grpo.beta and cfg.minibatches == 1:
        own_rows = [i for i in own_rows if own_adv[i] != 0]   # exact: beta = 0 and one on-policy update
        peer_rows = [row for row in peer_rows if row[3] != 0]
    sequences = [("own", i) for i in own_rows] + [("peer", row) for row in peer_rows]
    if not sequences:
        return ProbeOutput(0, None, 0, stats)
    n_total = len(batch.rewards) + stats["peer_samples"]
    output = _minibatch_output(batch, learner, cfg, mode, sequences, own_adv, stats, n_total)
    if cfg.minibatches == 1:   # one update on the current parameters: computed now, its statistics complete
        return ProbeOutput.single(output.loss(0), output.active_sequences, stats)
    return output


@register_probe("hacpo", config=HacpoConfig, kinds=("rollout",), aggregations=("grpo",))
def hacpo_loss(batch: RolloutBatch, peers: PeerView, learner: Learner, cfg: HacpoConfig) -> ProbeOutput:
    """HACPO: capability-aware advantages, exponential IS with stepwise clipping on peer samples, GSPO on own."""
    return _shared_gspo(batch, peers, learner, cfg, "hacpo")


@register_probe("gspo", config=GspoConfig, aggregations=("grpo",))
def gspo_loss(batch: RolloutBatch, peers: PeerView, learner: Learner, cfg: GspoConfig) -> ProbeOutput:
    """GSPO on the own samples only: HACPO's independent baseline."""
    return _shared_gspo(batch, PeerView(), learner, cfg, "gspo")


@register_probe("gspo_x2", config=GspoConfig, aggregations=("grpo",), group_multiplier=2)
def gspo_x2_loss(batch: RolloutBatch, peers: PeerView, learner: Learner, cfg: GspoConfig) -> ProbeOutput:
    """GSPO with twice the rollouts per prompt (2G): the resource-equivalent of two policies' samples."""
    return _shared_gspo(batch, PeerView(), learner, cfg, "gspo")


@register_probe("naive", config=GspoConfig, kinds=("rollout",), aggregations=("grpo",))
def naive_loss(batch: RolloutBatch, peers: PeerView, learner: Learner, cfg: GspoConfig) -> ProbeOutput:
    """Naive sharing: pooled samples, plain-mean advantages, peer samples as if own (no ratio, omega or clip)."""
    return _shared_gspo(batch, peers, learner, cfg, "naive")

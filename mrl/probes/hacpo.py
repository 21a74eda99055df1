"""hacpo, and its baselines gspo and naive (SPEC section 8; HACPO from its official code).

hacpo: the learner's group for a prompt is its own samples plus every peer's (retokenized by THL);
advantages from the capability-aware mixed baseline (mrl.hacpo.capability_advantages); own samples take
GSPO's clipped sequence-level loss, peer samples the objective clip(s, l_m, 1) sg(clip(s))^alpha
omega(src, learner) A with s the sequence-level ratio pi_learner(T(y)) / pi_src(y), normalised over THL
groups (ratio "thl") or each side by its own token count (ratio "mean", the official code). Loss: minus the
mean over all sequences of the per-sequence objectives; KL (beta of GrpoConfig) on own samples only. With
`minibatches` M > 1 the pooled batch (own samples first, as the official V1 code orders it) is split into M
optimizer updates and the peers' lower clip bound rises with the update index m (stepwise clipping).
gspo: own samples only, GSPO's loss with advantages (r - mean) / (std + 1e-6) (hacpo without peers);
gspo_x2: the same with 2G samples per prompt (the registry doubles the group size: resource-equivalent).
naive: pooled plain-mean advantages, peer samples with ratio 1 and no omega or clipping (no corrections).
"""
from __future__ import annotations

import math

import torch

from mrl.grpo import policy_loss
from mrl.hacpo import CapabilityTracker, capability_advantages, peer_objective, stepwise_lower_bound
from mrl.policy import completion_logprobs
from mrl.probes import register_probe
from mrl.probes.batch import LearnerBatch, PeerView, ProbeOutput, rescored_reward, retokenize_rollouts

GSPO_EPS = (3e-4, 4e-4)   # GSPO's sequence-ratio clip on own samples (epsilon low, high)
MAX_LOG_RATIO = 10.0      # the official code clamps |log s| <= 10


def peer_log_ratio(learner_logp_sum: torch.Tensor, n_learner: int, source_logps: list, n_groups: int,
                   ratio: str) -> torch.Tensor:
    """log s of one peer sequence: (sum logp_learner - sum logp_source) / n_groups (thl), or
    sum logp_learner / n_learner - sum logp_source / n_source (mean); clamped to +-10."""
    source = float(sum(source_logps))
    if ratio == "thl":
        value = (learner_logp_sum - source) / max(n_groups, 1)
    else:
        value = learner_logp_sum / max(n_learner, 1) - source / max(len(source_logps), 1)
    return value.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)


def _pooled(batch: LearnerBatch, peers: PeerView, cfg, mode: str):
    """The pooled groups: own rewards, peer samples (prompt, record, alignment, reward), advantages, omegas."""
    samples, failed, inexact = retokenize_rollouts(batch, peers) if mode != "gspo" else ([], 0, 0)
    g = batch.group_size
    tracker = batch.state.setdefault("capability", CapabilityTracker(window=cfg.capability_window))
    rates = {batch.policy: float((batch.rewards > 0).float().mean())}
    per_source: dict[str, list] = {}
    for _, record, _ in samples:
        per_source.setdefault(record.policy_id, []).append(record.reward > 0)
    rates.update({source: sum(hits) / len(hits) for source, hits in per_source.items()})
    if mode == "hacpo":
        tracker.update(rates)  # the current batch is included (update before use)
    own = batch.rewards.view(-1, g)
    peer_rewards = [[] for _ in batch.problems]
    peer_sources = [[] for _ in batch.problems]
    for x, record, _ in samples:
        peer_rewards[x].append(rescored_reward(batch, x, record))
        peer_sources[x].append(record.policy_id)
    own_adv, peer_adv = [], [[] for _ in batch.problems]
    for x in range(len(batch.problems)):
        rewards = torch.cat([own[x], torch.tensor(peer_rewards[x], dtype=own.dtype)])
        is_own = torch.arange(len(rewards)) < g
        omegas = torch.tensor([1.0] * g + [tracker.omega(batch.policy, s) if mode == "hacpo" and cfg.omega else 1.0
                                           for s in peer_sources[x]], dtype=own.dtype)
        advantage_mode = cfg.advantage if mode == "hacpo" else ("pooled" if mode == "naive" else "own")
        advantages = capability_advantages(rewards, omegas, is_own, mode=advantage_mode)
        own_adv.append(advantages[:g])
        peer_adv[x] = advantages[g:].tolist()
    cursor = [0] * len(batch.problems)
    peer_rows = []
    for x, record, alignment in samples:
        a = peer_adv[x][cursor[x]]
        cursor[x] += 1
        omega_src = tracker.omega(record.policy_id, batch.policy) if mode == "hacpo" and cfg.omega else 1.0
        peer_rows.append((x, record, alignment, a, omega_src))
    stats = {"peer_samples": len(samples), "thl_failed": failed, "thl_inexact": inexact}
    if mode == "hacpo" and len(rates) > 1:
        stats.update({f"omega_from_{s}": tracker.omega(s, batch.policy) for s in sorted(rates) if s != batch.policy})
    return torch.cat(own_adv), peer_rows, stats


def _bounds(cfg, minibatch: int) -> tuple[float, float]:
    if cfg.clipping == "stepwise":
        return stepwise_lower_bound(minibatch, cfg.delta, cfg.delta_step), 1.0
    if cfg.clipping == "fixed":
        return 1.0 - cfg.delta, 1.0
    return 1.0 - cfg.delta, 1.0 + cfg.delta


def _chunk_loss(batch: LearnerBatch, cfg, mode: str, own_rows, own_adv, old_logp, peer_rows, minibatch: int):
    """Minus the mean over this chunk's sequences of the per-sequence objectives (own GSPO, peer HACPO term)."""
    worker, total, kept, clipped = batch.worker, 0.0, 0, 0
    n = len(own_rows) + len(peer_rows)
    if own_rows:
        rows = torch.tensor(own_rows)
        logp = completion_logprobs(worker.model, batch.prompt_ids[rows], batch.prompt_mask[rows],
                                   batch.completion_ids[rows], batch.completion_mask[rows])
        old = logp.detach() if old_logp is None else old_logp[rows]
        own_loss, _ = policy_loss(logp, old, own_adv[rows], batch.completion_mask[rows], level="sequence",
                                  eps_low=GSPO_EPS[0], eps_high=GSPO_EPS[1], beta=0.0)
        total = total + own_loss * len(own_rows)
    if peer_rows:
        logp, mask = batch.logprobs([batch.problems[x].prompt for x, *_ in peer_rows],
                                    [alignment.dst_ids for _, _, alignment, _, _ in peer_rows])
        sums = (logp * mask).sum(-1)
        if mode == "naive":
            log_s = sums / mask.sum(-1)
            objective = torch.exp(log_s - log_s.detach()) * torch.tensor([a for *_, a, _ in peer_rows])
        else:
            log_s = torch.stack([peer_log_ratio(sums[i], len(alignment.dst_ids), record.logps, alignment.n_groups,
                                                cfg.ratio)
                                 for i, (_, record, alignment, _, _) in enumerate(peer_rows)])
            lower, upper = _bounds(cfg, minibatch)
            advantages = torch.tensor([a for *_, a, _ in peer_rows], dtype=log_s.dtype)
            omegas = torch.tensor([o for *_, o in peer_rows], dtype=log_s.dtype)
            objective = peer_objective(log_s, advantages, omegas, lower, cfg.alpha, upper)
            s = torch.exp(log_s.detach())
            kept = int(((s >= lower) & (s <= upper)).sum())
            clipped = len(peer_rows) - kept
        total = total - objective.sum()
    return total / max(n, 1), kept, clipped


def _shared_gspo(batch: LearnerBatch, peers: PeerView, cfg, mode: str) -> ProbeOutput:
    own_adv, peer_rows, stats = _pooled(batch, peers, cfg, mode)
    own_rows = list(range(len(batch.rewards)))
    if batch.worker.config.skip_zero_advantage and cfg.minibatches == 1:
        own_rows = [i for i in own_rows if own_adv[i] != 0]   # exact: beta = 0 and one on-policy update
        peer_rows = [row for row in peer_rows if row[3] != 0]
    sequences = [("own", i) for i in own_rows] + [("peer", row) for row in peer_rows]
    if not sequences:
        return ProbeOutput(None, 0, stats)
    n_total = len(batch.rewards) + stats["peer_samples"]
    old_logp = None
    if cfg.minibatches > 1:
        with torch.no_grad():
            old_logp = completion_logprobs(batch.worker.model, batch.prompt_ids, batch.prompt_mask,
                                           batch.completion_ids, batch.completion_mask)
    size = math.ceil(len(sequences) / cfg.minibatches)
    losses, norms, kept, clipped = [], [], 0, 0
    for m in range(cfg.minibatches):
        chunk = sequences[m * size:(m + 1) * size]
        if not chunk:
            break
        loss, k, c = _chunk_loss(batch, cfg, mode, [i for kind, i in chunk if kind == "own"], own_adv, old_logp,
                                 [row for kind, row in chunk if kind == "peer"], m)
        kept, clipped = kept + k, clipped + c
        if cfg.minibatches == 1:   # the loss of a full batch averages over every sequence, skipped ones included
            loss = loss * len(chunk) / n_total
            stats.update({"peer_kept": kept, "peer_clipped": clipped})
            return ProbeOutput(loss, len(chunk), stats)
        losses.append(loss.item())
        norms.append(batch.worker.apply(loss))
    stats.update({"peer_kept": kept, "peer_clipped": clipped})
    return ProbeOutput(None, len(sequences), stats, loss_value=sum(losses) / len(losses),
                       grad_norm=sum(norms) / len(norms))


HACPO_KNOBS = ("advantage", "omega", "alpha", "clipping", "delta", "delta_step", "ratio", "minibatches",
               "capability_window")


@register_probe("hacpo", kinds=("rollout",), knobs=HACPO_KNOBS)
def hacpo_loss(batch: LearnerBatch, peers: PeerView, cfg) -> ProbeOutput:
    """HACPO: capability-aware advantages, exponential IS with stepwise clipping on peer samples, GSPO on own."""
    return _shared_gspo(batch, peers, cfg, "hacpo")


@register_probe("gspo", knobs=("minibatches",))
def gspo_loss(batch: LearnerBatch, peers: PeerView, cfg) -> ProbeOutput:
    """GSPO on the own samples only: HACPO's independent baseline."""
    return _shared_gspo(batch, PeerView(), cfg, "gspo")


@register_probe("gspo_x2", group_multiplier=2, knobs=("minibatches",))
def gspo_x2_loss(batch: LearnerBatch, peers: PeerView, cfg) -> ProbeOutput:
    """GSPO with twice the rollouts per prompt (2G): the resource-equivalent of two policies' samples."""
    return _shared_gspo(batch, PeerView(), cfg, "gspo")


@register_probe("naive", kinds=("rollout",), knobs=("minibatches",))
def naive_loss(batch: LearnerBatch, peers: PeerView, cfg) -> ProbeOutput:
    """Naive sharing: pooled samples, plain-mean advantages, peer samples as if own (no ratio, omega or clip)."""
    return _shared_gspo(batch, peers, cfg, "naive")

"""Loss terms the probes share: the GRPO term on the learner's own samples, log-probs of arbitrary completions,
peer rollouts retokenized by THL and re-scored, importance ratios over THL groups, importance-weighted sequence
terms and their pooling, and the rescue set.

Every function reads a `RolloutBatch` (data), the `Learner` it needs (its log-probs, tokenizer, verifier) or plain
arrays and returns tensors or numbers; none touches a model or an optimizer. A probe file holds only what is its
own.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np
import torch
from torch import Tensor

from mrl.core.batch import Learner, RolloutBatch, encode_prompts, pad_completions
from mrl.core.grpo import policy_loss
from mrl.core.probes.advantages import AdvantageEstimator, group_estimator
from mrl.core.probes.contract import PeerView, ProbeConfig
from mrl.core.stop_tokens import stop_ids
from mrl.core.thl import ThlError, align_batch, lattice, tokenizations

MAX_LOG_WEIGHT = 20.0
"""|log w| bound of a token or sequence importance weight before truncation (exp(20) is already beyond what float32
weights mean)"""
MAX_SEQUENCE_LOG_RATIO = 10.0
"""|log s| bound of HACPO's sequence cross ratio (its official code clamps at 10)"""
TOKENIZATIONS = ("canonical", "marginal")
"""the learner's probability of a peer's text in a sequence ratio: its canonical tokenization's (THL's
retokenization, every paper's choice) or summed over every tokenization (mrl.core.marginal, docs/marginal.md)"""
MAX_TOKENIZATIONS = 256
"""tokenizations of one peer text scored for the marginal; a text with more keeps its canonical one (counted)"""


def own_logprobs(batch: RolloutBatch, learner: Learner, rows: Tensor) -> Tensor:
    """log pi_learner of the own completions `rows` (indices into the batch), with gradient. -> (len(rows), T)."""
    return learner.logprobs(batch.prompt_ids[rows], batch.prompt_mask[rows], batch.completion_ids[rows],
                            batch.completion_mask[rows])


def own_grpo_loss(batch: RolloutBatch, learner: Learner, advantages: Tensor,
                  anchor: Callable[[Tensor], Tensor] | None = None) -> tuple[Tensor | None, int, dict]:
    """The GRPO loss (mrl.core.grpo.policy_loss with batch.grpo's settings) on the own samples, on-policy: ratio 1,
    old_logp = logp.detach(), as TRL with num_iterations = 1. advantages: (P*G,).
    anchor: old_logp = anchor(logp) instead, (P*G, T) -> (P*G, T), given the log-probs with their gradient (TRRD's
    old/teacher mixture, whose clamped teacher term carries gradient).

    Returns (loss or None when nothing is active, sequences forwarded, stats). With beta = 0 and
    skip_zero_advantage, rows with A = 0 are not forwarded: their loss and gradient are exactly 0, and the
    aggregation still divides by the full batch. With beta > 0 the k3 term uses batch.ref_logp.
    """
    cfg = batch.grpo
    if cfg.beta and batch.ref_logp is None:
        raise ValueError("GrpoConfig.beta > 0 needs the reference log-probs (RolloutBatch.ref_logp); the actor "
                         "computes them when it holds a reference model")
    active = torch.arange(len(advantages), device=batch.device) if (cfg.beta or not cfg.skip_zero_advantage) \
        else (advantages != 0).nonzero().squeeze(-1)
    if active.numel() == 0:
        return None, 0, {}
    logp_active = own_logprobs(batch, learner, active)
    logp = torch.zeros(batch.completion_ids.shape, dtype=logp_active.dtype, device=batch.device).index_put(
        (active,), logp_active)
    old_logp = logp.detach() if anchor is None else anchor(logp)
    loss, stats = policy_loss(logp, old_logp, advantages, batch.completion_mask, cfg.surrogate,
                              ref_logp=batch.ref_logp, sample_weight=batch.sample_weight)
    return loss, int(active.numel()), {k: v.item() for k, v in stats.items()}


class OwnTerm(NamedTuple):
    """The GRPO term on the learner's own samples."""

    loss: Tensor | None
    """None when no sequence is active"""
    active: int
    """sequences forwarded"""
    stats: dict
    """the loss's statistics (mrl.core.grpo.policy_loss: clip fractions, kl)"""
    advantage_stats: dict
    """the estimator's statistics"""


def own_term(batch: RolloutBatch, learner: Learner, peers: PeerView | None = None, cfg: ProbeConfig | None = None,
             estimator: AdvantageEstimator = group_estimator,
             anchor: Callable[[Tensor], Tensor] | None = None) -> OwnTerm:
    """own_grpo_loss with the advantages of `estimator` (mrl.core.probes.advantages: GRPO's group_estimator, or
    xgrpo_estimator): the prelude every probe that trains on its own samples with GRPO shares."""
    advantages, advantage_stats = estimator(batch, peers or PeerView(), cfg or ProbeConfig())
    loss, active, stats = own_grpo_loss(batch, learner, advantages, anchor)
    return OwnTerm(loss, active, stats, advantage_stats)


def encode_completion(learner: Learner, text: str, with_eos: bool = True) -> list[int]:
    """The learner's canonical ids of a completion text, EOS appended (a target or a retokenized sample)."""
    ids = learner.tokenizer(text, add_special_tokens=False)["input_ids"]
    return ids + [learner.eos_id] if with_eos else ids


def text_logprobs(batch: RolloutBatch, learner: Learner, prompts: list[str],
                  completions: list[list[int]]) -> tuple[Tensor, Tensor]:
    """log pi_learner of each completion token (learner ids) given its task prompt (read through learner.render),
    with gradient, on the batch's device. -> (logp (N, T), mask (N, T))."""
    prompt_ids, prompt_mask = encode_prompts(learner.tokenizer, [learner.render(p) for p in prompts], batch.device)
    ids, mask = pad_completions(completions, learner.pad_id, batch.device)
    return learner.logprobs(prompt_ids, prompt_mask, ids, mask), mask


def marginal_text_logprobs(batch: RolloutBatch, learner: Learner, prompts: list[str], texts: list[str],
                           eos: list[bool]) -> tuple[Tensor, list[bool]]:
    """log pi_learner(text | prompt) summed over every tokenization of each text, with gradient: each tokenization
    (mrl.core.marginal's lattice, EOS appended where `eos`) is one row of learner.logprobs and a text's value is the
    logsumexp of its rows, whose gradient weighs each tokenization by its posterior share.

    Returns (values (N,), marginal (N,) bools): a text the learner cannot write (no tokenization) or with more than
    MAX_TOKENIZATIONS has no marginal (marginal False, value NaN): the caller keeps its canonical log-prob."""
    rows, owner, marginal = [], [], []
    for k, (text, end) in enumerate(zip(texts, eos)):
        graph = lattice(learner.tokenizer, text)
        paths = [p + [learner.eos_id] if end else p for p in tokenizations(graph)] \
            if 0 < graph.count <= MAX_TOKENIZATIONS else []
        paths = [p for p in paths if p]
        marginal.append(bool(paths))
        rows.extend(paths)
        owner.extend([k] * len(paths))
    values = torch.full((len(texts),), float("nan"), device=batch.device)
    if rows:
        logp, mask = text_logprobs(batch, learner, [prompts[k] for k in owner], rows)
        sums = (logp * mask).sum(-1)
        index = torch.tensor(owner, device=batch.device)
        values = torch.stack([torch.logsumexp(sums[index == k], 0) if ok else values[k]
                              for k, ok in enumerate(marginal)])
    return values, marginal


def sequence_logprobs(batch: RolloutBatch, learner: Learner, prompts: list[str], texts: list[str], canonical: Tensor,
                      eos: list[bool], tokenization: str) -> tuple[Tensor, list[bool]]:
    """The learner's log-probability of each peer text in a sequence ratio: `canonical` (N,) (its canonical
    tokenization's, summed) or, with tokenization "marginal", the sum over every tokenization where the learner can
    write the text (marginal_text_logprobs), the canonical elsewhere. Returns (values (N,), which are marginal)."""
    if tokenization == "canonical" or not texts:
        return canonical, [False] * len(texts)
    values, marginal = marginal_text_logprobs(batch, learner, prompts, texts, eos)
    used = torch.tensor(marginal, device=canonical.device)
    return torch.where(used, values.to(canonical.dtype), canonical), marginal


def marginal_gap_column(source: str) -> str:
    """The step metric of the mean marginal gap of the texts from `source` (its writer and its readers name it here)."""
    return f"marginal_gap_from_{source}"


def marginal_statistics(sources: list[str], gaps: list[float], marginal: list[bool]) -> dict[str, float]:
    """Per source: the mean log marginal - log canonical of its texts that have a marginal (marginal_gap_from_B), and
    the texts that kept their canonical log-prob (marginal_fallback). Inputs: one entry per peer text."""
    by_source: dict[str, list[float]] = {}
    for source, gap, ok in zip(sources, gaps, marginal):
        if ok:
            by_source.setdefault(source, []).append(gap)
    out = {marginal_gap_column(source): float(np.mean(values)) for source, values in sorted(by_source.items())}
    return {**out, "marginal_fallback": marginal.count(False)}


def weighted_sequence_loss(logp: Tensor, mask: Tensor, advantages: Tensor, weights: Tensor) -> Tensor:
    """Per sequence token mean of -A_i w_it exp(logp_it - sg(logp_it)), summed over sequences.

    logp, mask, weights: (N, T); advantages: (N,). The value is -sum_i A_i mean_t w_it; the gradient is
    -sum_i A_i mean_t w_it grad logp_it: an importance-weighted policy-gradient term whose weights
    carry no gradient (truncated IS). Returns the sum, so callers pool it with other sequences.
    """
    per_token = -advantages[:, None] * weights.detach() * torch.exp(logp - logp.detach())
    m = mask.to(per_token.dtype)
    return ((per_token * m).sum(-1) / m.sum(-1).clamp(min=1)).sum()


def pooled_loss(own_loss: Tensor | None, n_own: int, extra_sum: Tensor | None, n_extra: int) -> Tensor | None:
    """Mean over all sequences of per-sequence losses: (n_own * own_loss + extra_sum) / (n_own + n_extra).

    own_loss is the GRPO loss with loss_type grpo (a mean over the own sequences; probes that pool register
    aggregations=("grpo",)); extra_sum a sum over the extra sequences (weighted_sequence_loss)."""
    parts = []
    if own_loss is not None:
        parts.append(own_loss * n_own)
    if extra_sum is not None:
        parts.append(extra_sum)
    return sum(parts) / (n_own + n_extra) if parts else None


def retokenize_rollouts(batch: RolloutBatch, learner: Learner, peers: PeerView):
    """Every peer rollout of the step's prompts, aligned to the learner's tokenizer by THL.

    Returns ([(prompt index, record, Alignment)], failed, inexact): a sample THL cannot align is counted
    and left out; an inexact (coarse, one-group) alignment is kept and counted."""
    by_source: dict[str, list] = {}
    for x, problem in enumerate(batch.problems):
        for record in peers.rollout.get(problem.pid, []):
            by_source.setdefault(record.policy_id, []).append((x, record))
    samples, failed, inexact = [], 0, 0
    for source in sorted(by_source):
        items = by_source[source]
        alignments = align_batch([r.completion for _, r in items], peers.tokenizers[source], learner.tokenizer,
                                 [r.token_ids for _, r in items])
        for (x, record), alignment in zip(items, alignments):
            if isinstance(alignment, ThlError) or not alignment.dst_ids:
                failed += 1
                continue
            inexact += not alignment.exact
            samples.append((x, record, alignment))
    return samples, failed, inexact


def well_formed(token_ids: list[int], tokenizer) -> bool:
    """The rule the learner's own rewards follow (rollout.completion_texts), on a peer's ids and tokenizer: EOS (any
    of the peer checkpoint's stop ids) last and no other special token (pad, unk, ...) before it."""
    stops = set(stop_ids(tokenizer))
    special = set(tokenizer.all_special_ids) - stops
    return bool(token_ids) and token_ids[-1] in stops and not special & set(token_ids[:-1])


def rescored_reward(batch: RolloutBatch, learner: Learner, peers: PeerView, x: int, record) -> float:
    """A peer sample's reward under the learner's rules, never above what the peer claimed: 0 unless it is well-formed
    in its own tokenizer (well_formed), else the learner's verifier on its text; the claim as it is when
    peers.reverify is off (the poisoned-peer ablation)."""
    if not peers.reverify:
        return record.reward
    if record.finish_reason != "eos" or not well_formed(list(record.token_ids), peers.tokenizers[record.policy_id]):
        return 0.0
    return min(record.reward, learner.verify(record.completion, batch.problems[x]))


def accepted_success(learner: Learner, peers: PeerView, text: str, problem) -> bool:
    """Whether a peer's claimed success counts: the learner's verifier accepts its text (every claim when
    peers.reverify is off). A Success carries text only, so a correct text a peer's sample did not earn (a pad token
    inside it, say) still counts: it is a correct answer, though not one the peer's own reward credited."""
    return not peers.reverify or learner.verify(text, problem) > 0


def group_log_ratios(learner_logp: np.ndarray, source_logps: np.ndarray, alignment) -> np.ndarray:
    """log w per THL group: sum of the learner's log-probs minus the source's over the group's tokens.

    learner_logp (n_dst,), source_logps (n_src,) -> (n_groups,)."""
    n = alignment.n_groups
    return (np.bincount(alignment.dst_group, weights=learner_logp, minlength=n)
            - np.bincount(alignment.src_group, weights=source_logps, minlength=n))


def peer_log_ratio(learner_logp_sum: Tensor, n_learner: int, source_logps: list, n_groups: int,
                   ratio: str) -> Tensor:
    """log s of one peer sequence: (sum logp_learner - sum logp_source) / n_groups (thl), or
    sum logp_learner / n_learner - sum logp_source / n_source (mean); clamped to +-MAX_SEQUENCE_LOG_RATIO."""
    source = float(sum(source_logps))
    if ratio == "thl":
        value = (learner_logp_sum - source) / max(n_groups, 1)
    else:
        value = learner_logp_sum / max(n_learner, 1) - source / max(len(source_logps), 1)
    return value.clamp(-MAX_SEQUENCE_LOG_RATIO, MAX_SEQUENCE_LOG_RATIO)


def ess_fraction(log_weights: np.ndarray) -> float:
    """(sum w)^2 / (n sum w^2), computed stably from log w. (n,) -> scalar in (0, 1]."""
    if len(log_weights) == 0:
        return float("nan")
    w = np.exp(log_weights - log_weights.max())
    return float(w.sum() ** 2 / (len(w) * (w ** 2).sum()))


def failure_threshold(group_size: int, tau: float) -> int:
    """The largest own success count k that still counts as failing: floor(tau G) (0 for tau = 0)."""
    return int(tau * group_size + 1e-9)


def rescue_set(successes_per_prompt, group_size: int, tau: float, peer_has_success) -> list[int]:
    """R = {x : k_own(x) <= tau G and at least one verified peer success}, as indices x. Inputs (P,)."""
    threshold = failure_threshold(group_size, tau)
    return [x for x, (k, peer) in enumerate(zip(successes_per_prompt.tolist(), peer_has_success))
            if k <= threshold and peer]

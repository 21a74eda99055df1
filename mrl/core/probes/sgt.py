"""sgt (outcome level; the form GRAFT confirms): GRPO plus an NLL toward one verified peer success
on the rescue set R = {x : k_own(x) <= tau G and a peer succeeded on x} (terms.rescue_set)."""
from __future__ import annotations

from typing import Annotated

import torch
from pydantic import Field

from mrl.core.batch import Learner, RolloutBatch
from mrl.core.probes.contract import PeerView, ProbeConfig, ProbeOutput, register_probe
from mrl.core.probes.terms import (accepted_success, encode_completion, failure_threshold, own_term, rescue_set,
                              text_logprobs)
from mrl.core.thl import decode_text
from mrl.core.validation import Float, config_dataclass


@config_dataclass(frozen=True)
class SgtConfig(ProbeConfig):
    lam: Annotated[Float, Field(ge=0)] = 0.1
    """weight lambda of the rescue NLL"""
    tau: Annotated[Float, Field(ge=0, lt=1)] = 0.0
    """a prompt is in the rescue set when k_own / G <= tau (0: every own sample failed) and a peer succeeded"""


@register_probe("sgt", config=SgtConfig, kinds=("success",))
def sgt_loss(batch: RolloutBatch, peers: PeerView, learner: Learner, cfg: SgtConfig) -> ProbeOutput:
    """L_GRPO + lam * mean_{x in R} NLL_learner(T(y*) | x), token mean per target, y* uniform among the
    peers' successes on x that the learner's own verifier accepts (a forged success never enters)."""
    verified = []
    for problem in batch.problems:
        texts = [s.completion for s in peers.success.get(problem.pid, [])]
        verified.append([t for t in texts if accepted_success(learner, peers, t, problem)])
    rescue = rescue_set(batch.successes_per_prompt, batch.group_size, cfg.tau, [bool(v) for v in verified])
    loss, active, _, _ = own_term(batch, learner)
    threshold = failure_threshold(batch.group_size, cfg.tau)
    stats = {"rescue_candidates": int((batch.successes_per_prompt <= threshold).sum()), "rescue_size": len(rescue),
             "rejected_successes": sum(len(peers.success.get(p.pid, [])) for p in batch.problems)
             - sum(map(len, verified)), "targets_inexact": 0}
    if not rescue or cfg.lam == 0:
        return ProbeOutput.single(loss, active, stats)
    targets = []
    for x in rescue:
        pick = int(torch.randint(len(verified[x]), (1,), generator=learner.generator, device=learner.generator.device))
        ids = encode_completion(learner, verified[x][pick])
        stats["targets_inexact"] += decode_text(learner.tokenizer, ids) != verified[x][pick]  # THL residual
        targets.append(ids)
    logp, mask = text_logprobs(batch, learner, [batch.problems[x].prompt for x in rescue], targets)
    nll = -((logp * mask).sum(-1) / mask.sum(-1)).mean()
    rescue_loss = cfg.lam * nll
    stats["rescue_nll"] = nll.item()
    return ProbeOutput.single(rescue_loss if loss is None else loss + rescue_loss, active + len(rescue), stats)

"""What the canonical tokenization drops from a peer's probability, and what summing every tokenization costs
(docs/marginal.md, What it costs, and what it changes; 80_beyond's section on the marginal).

A source policy samples completions as its RL rollouts are drawn (`draw_samples`); a learner scores each text that
ended with EOS canonically and over every tokenization (`score_samples`: the gap, the canonical share and HACPO's
log-ratio under three definitions); `scoring_cost` times the marginal against the canonical in one call, and
`measure_policies` does all of it for every ordered pair of a set of policies. The definitions and what each step
records: docs/marginal.md.
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from mrl.core.batch import Learner, RolloutBatch, completion_texts, encode_prompts, pad_completions
from mrl.core.config import GrpoConfig
from mrl.core.marginal import lattice, marginal_logprobs
from mrl.core.probes.hacpo_primitives import stepwise_lower_bound
from mrl.core.probes.terms import (MAX_SEQUENCE_LOG_RATIO, MAX_TOKENIZATIONS, encode_completion, sequence_logprobs,
                              text_logprobs)
from mrl.core.seeding import derived_seed
from mrl.core.thl import ThlError, align_batch
from mrl.runtime.rollout import completion_logprobs, sample_groups, stop_ids

DEFINITIONS = ("canonical", "marginal", "exact")
"""HACPO's sequence ratio s = pi_learner(y) / pi_source(y): canonical (learner: its canonical tokenization; source:
its sampled tokens), marginal (learner: the text over every tokenization; source: its sampled tokens), exact (both
sides: the text over every tokenization)"""
COST_REPEATS = 3
"""timed repeats of each scoring (the median is reported)"""


def stepwise_bounds(cfg) -> tuple[float, float]:
    """The peer ratio's lower clip bound at the first and at the last update of a HACPO step (a HacpoConfig with
    clipping "stepwise": 1 - delta + m delta_step for m = 0 and minibatches - 1; the upper bound is 1)."""
    if cfg.clipping != "stepwise":
        raise ValueError(f"stepwise_bounds: clipping = {cfg.clipping!r}; expected 'stepwise'")
    return (stepwise_lower_bound(0, cfg.delta, cfg.delta_step),
            stepwise_lower_bound(cfg.minibatches - 1, cfg.delta, cfg.delta_step))


@dataclass(frozen=True)
class SourceSample:
    """One completion a source policy sampled."""

    prompt: str
    text: str
    """the decoded completion before EOS"""
    ids: tuple[int, ...]
    """the sampled token ids, EOS included when it ended"""
    logp: float
    """the source's log-probability of its sampled ids (sum over them, at the sampling temperature)"""
    ended: bool
    """it ended with EOS and no other special token (a well-formed completion)"""
    reward: float
    """the task's verifier on the text (0 for one that did not end)"""


def draw_samples(policy, problems: list, grpo: GrpoConfig, verify: Callable, seed: int) -> list[SourceSample]:
    """grpo.group_size completions per problem at grpo's temperature, length and engine, as an RL step draws them
    (mrl.runtime.rollout.sample_groups), from a generator seeded with `seed`. Prompts are read as written (the zoo has
    no chat template)."""
    generator = torch.Generator(device=policy.model.device).manual_seed(seed)
    _, _, ids, mask, logp = sample_groups(policy.model, policy.tokenizer, [p.prompt for p in problems], generator,
                                          grpo)
    group_size = grpo.group_size
    texts = completion_texts(policy.tokenizer, ids, mask, stop_ids(policy.tokenizer))
    out = []
    for row, (text, ended) in enumerate(texts):
        problem, n = problems[row // group_size], int(mask[row].sum())
        out.append(SourceSample(problem.prompt, text, tuple(ids[row, :n].tolist()), float(logp[row, :n].sum()), ended,
                                float(verify(text, problem)) if ended else 0.0))
    return out


def score_samples(learner, source, samples: list[SourceSample]) -> pd.DataFrame:
    """One row per sample that ended: outcome (success: reward > 0), the learner's tokenizations of the text, its log
    marginal and log canonical (EOS included) and their gap, the canonical share P(canonical) / P(text), whether the
    marginal is exact, the THL groups between the source's ids and the learner's encoding, and HACPO's log s (ratio
    thl, clamped to +-MAX_SEQUENCE_LOG_RATIO as the probe does) under each of DEFINITIONS ("log s canonical", ...;
    NaN where THL could not align the text). learner, source: mrl.runtime.zoo.Policy."""
    kept = [s for s in samples if s.ended]
    if not kept:
        return pd.DataFrame(columns=["outcome", "tokenizations", "log marginal", "log canonical", "gap",
                                     "canonical share", "exact", "groups", *(f"log s {d}" for d in DEFINITIONS)])
    prompts, texts = [s.prompt for s in kept], [s.text for s in kept]
    mine = marginal_logprobs(learner.model, learner.tokenizer, prompts, texts, eos=True)
    theirs = marginal_logprobs(source.model, source.tokenizer, prompts, texts, eos=True)
    alignments = align_batch(texts, source.tokenizer, learner.tokenizer, [list(s.ids) for s in kept])
    groups = np.array([np.nan if isinstance(a, ThlError) else a.n_groups for a in alignments], dtype=float)
    frame = pd.DataFrame({
        "outcome": ["success" if s.reward > 0 else "failure" for s in kept],
        "tokenizations": [m.tokenizations for m in mine],
        "log marginal": [m.logp for m in mine], "log canonical": [m.canonical_logp for m in mine],
        "gap": [m.gap for m in mine], "canonical share": [m.canonical_share for m in mine],
        "exact": [m.exact for m in mine], "groups": groups})
    source_logp = {"canonical": np.array([s.logp for s in kept]), "marginal": np.array([s.logp for s in kept]),
                   "exact": np.array([t.logp for t in theirs])}
    learner_logp = {"canonical": frame["log canonical"].to_numpy(), "marginal": frame["log marginal"].to_numpy(),
                    "exact": frame["log marginal"].to_numpy()}
    for definition in DEFINITIONS:
        log_s = (learner_logp[definition] - source_logp[definition]) / np.maximum(groups, 1)
        frame[f"log s {definition}"] = np.clip(log_s, -MAX_SEQUENCE_LOG_RATIO, MAX_SEQUENCE_LOG_RATIO)
    return frame


def scoring_batch(policy, engine: str = "hf") -> tuple[RolloutBatch, Learner]:
    """A RolloutBatch with no own samples (on the policy's device) and a Learner whose `logprobs` is the policy's
    forward with gradient: what the probes' scoring functions (mrl.core.probes.terms) read to score peer texts, and
    nothing else."""
    device = policy.model.device
    empty = torch.zeros((0, 1), dtype=torch.long, device=device)

    def logprobs(prompt_ids, prompt_mask, completion_ids, completion_mask):
        return completion_logprobs(policy.model, prompt_ids, prompt_mask, completion_ids, completion_mask, engine)

    batch = RolloutBatch(policy=str(policy.path), step=0, problems=[], group_size=1, prompt_ids=empty,
                         prompt_mask=empty, completion_ids=empty, completion_mask=empty, sample_logp=empty.float(),
                         rewards=torch.zeros(0, device=device), grpo=None)
    return batch, Learner(logprobs, policy.tokenizer, lambda text, problem: 0.0, torch.Generator())


def scoring_cost(policy, prompts: list[str], texts: list[str], engine: str = "hf", repeats: int = COST_REPEATS,
                 clock: Callable[[], float] = time.process_time) -> dict[str, float]:
    """The learner's CPU time (`clock`, process time by default: a shared machine's load does not enter) to score
    finished peer texts, canonical against marginal, measured in this one call, the four scorings interleaved in
    each of `repeats` rounds, medians:

    - probe: what a probe's step pays for the learner's log-probability of the texts, forward and backward:
      canonical, the canonical encodings (terms.text_logprobs); marginal, those plus every tokenization as one row
      (terms.sequence_logprobs with tokenization "marginal", at most terms.MAX_TOKENIZATIONS per text).
    - search: the exact value without gradient: a canonical forward of the encodings against mrl.core.marginal's
      search over tokenization prefixes (marginal_logprobs).

    Returns {"texts", "rows per text" (the probe's marginal rows over the texts), "probe canonical s", "probe
    marginal s", "probe ratio", "search canonical s", "search marginal s", "search ratio"}."""
    if not texts:
        raise ValueError("scoring_cost needs at least one text")
    model, tokenizer = policy.model, policy.tokenizer
    batch, learner = scoring_batch(policy, engine)
    canonical_ids = [encode_completion(learner, text) for text in texts]

    def probe(marginal: bool) -> None:
        logp, mask = text_logprobs(batch, learner, prompts, canonical_ids)
        values = (logp * mask).sum(-1)
        if marginal:
            values, _ = sequence_logprobs(batch, learner, prompts, texts, values, [True] * len(texts), "marginal")
        (-values.sum()).backward()
        model.zero_grad(set_to_none=True)

    def canonical_forward() -> None:
        prompt_ids, prompt_mask = encode_prompts(tokenizer, prompts, model.device)
        ids, mask = pad_completions(canonical_ids, tokenizer.pad_token_id, model.device)
        with torch.no_grad():
            completion_logprobs(model, prompt_ids, prompt_mask, ids, mask, engine)

    scorings = {"probe canonical s": lambda: probe(False), "probe marginal s": lambda: probe(True),
                "search canonical s": canonical_forward,
                "search marginal s": lambda: marginal_logprobs(model, tokenizer, prompts, texts, eos=True)}
    times: dict[str, list[float]] = {name: [] for name in scorings}
    for _ in range(repeats):
        for name, scoring in scorings.items():
            start = clock()
            scoring()
            times[name].append(clock() - start)
    out = {"texts": len(texts), "rows per text": _marginal_rows(learner.tokenizer, texts) / len(texts)}
    out.update({name: statistics.median(values) for name, values in times.items()})
    for kind in ("probe", "search"):
        out[f"{kind} ratio"] = out[f"{kind} marginal s"] / out[f"{kind} canonical s"]
    return out


def _marginal_rows(tokenizer, texts: list[str]) -> int:
    """The rows the probes' marginal scores for these texts: the canonical ones plus every tokenization of a text
    that has a marginal (terms.marginal_text_logprobs' rule)."""
    counts = [lattice(tokenizer, text).count for text in texts]
    return len(texts) + sum(c for c in counts if 0 < c <= MAX_TOKENIZATIONS)


def measure_policies(policies: dict, problems: list, grpo: GrpoConfig, verify: Callable,
                     cost_texts: int | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(rows, cost) for every ordered pair (learner, source) of `policies` ({name: mrl.runtime.zoo.Policy}): each source
    samples `group_size` completions per problem once (draw_samples, seeded from (seed, its name)), every other
    policy scores them (score_samples:
    rows with columns learner and source), and the learner's scoring_cost on the first `cost_texts` ended texts (all
    when None: one RL step's peer samples is prompts_per_step x group_size), one row per pair."""
    drawn = {name: draw_samples(policy, problems, grpo, verify, derived_seed("marginal", grpo.seed, name))
             for name, policy in policies.items()}
    rows, cost = [], []
    for learner, policy in policies.items():
        for source, samples in drawn.items():
            if source == learner:
                continue
            scored = score_samples(policy, policies[source], samples)
            rows.append(scored.assign(learner=learner, source=source))
            ended = [s for s in samples if s.ended][:cost_texts]
            if ended:
                measured = scoring_cost(policy, [s.prompt for s in ended], [s.text for s in ended], grpo.engine)
                cost.append({"learner": learner, "source": source, **measured})
    front = ["learner", "source"]
    frame = pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=front)
    return frame[front + [c for c in frame if c not in front]], pd.DataFrame(cost)

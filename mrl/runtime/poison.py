"""A poisoned peer: a policy that trains honestly on its own rewards but publishes lies to the exchange.

HACPO's paper names a malicious peer as an open security question; this is the package's answer to how far each
probe is exposed. Only what the poisoned policy publishes changes (`forge`): forged successes, lying group
statistics or malformed records. Each forgery, and what re-verification stops and what it cannot:
docs/architecture.md, SEE (A poisoned peer).
"""
from __future__ import annotations

import dataclasses

from mrl.core.config import ATTACKS
from mrl.core.see import GroupStats, Limits, Rollout, Success
from mrl.runtime.actor import PolicyActor


def forge(records: list, attack: str, verifier_id: str, vocab_size: int) -> list:
    """The records an honest policy would publish, rewritten by `attack` (see the module docstring)."""
    if attack not in ATTACKS:
        raise ValueError(f"attack={attack!r} is not allowed; expected one of {list(ATTACKS)}")
    out = []
    for record in records:
        if attack == "forged_success" and isinstance(record, Rollout):
            out.append(dataclasses.replace(record, reward=1.0))
            if record.reward <= 0:  # a correct sample already has its honest Success record
                out.append(Success(record.policy_id, record.version, record.prompt_id, record.completion,
                                   verifier_id, sample=record.sample))
        elif attack == "lying_stats" and isinstance(record, GroupStats):
            out.append(dataclasses.replace(record, reward_sum=float(record.n), reward_sq_sum=float(record.n)))
        elif attack == "malformed":
            out.append(_malformed(record, vocab_size))
        else:
            out.append(record)
    return out


def _malformed(record, vocab_size: int):
    """The record with one field outside what SEE accepts."""
    if isinstance(record, Rollout):
        return dataclasses.replace(record, token_ids=[*record.token_ids[:-1], vocab_size])
    if isinstance(record, GroupStats):
        return dataclasses.replace(record, reward_sum=record.n + 1.0)
    return dataclasses.replace(record, completion="9" * (Limits().max_text_bytes + 1))


class PoisonedActor(PolicyActor):
    """A PolicyActor whose published records are `forge`d by its config's attack; it learns like an honest one."""

    def records(self, batch, texts) -> list:
        honest = super().records(batch, texts)
        return forge(honest, self.config.attack, self.task.verifier_id, len(self.tokenizer))

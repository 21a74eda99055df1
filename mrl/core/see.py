"""SEE, the Shared Experience Exchange (docs/architecture.md, SEE): typed, versioned, validated records.

Three kinds of record cross between policies: `Rollout` (data level: a peer's sampled completion with its token ids
and log-probs), `GroupStats` (value level: a peer's reward statistics for one prompt) and `Success` (outcome level:
a verified completion for one prompt). `Exchange.publish` validates every record on entry: a bad one raises
`InvalidExperience` naming the field, is counted by reason and never enters the store; an accepted one is stored
in plain form (`frozen`), so its sender cannot change it. `collect` hands a receiver its peers' records for some
prompts, stale ones dropped and successes re-verified with the receiver's own verifier. What is checked:
docs/architecture.md, SEE.

An exchange given a log (`StepLog`) hands it the step's accepted records at `flush(step)`; the log on disk
and its `replay` are mrl.runtime.experience_log's.
"""
from __future__ import annotations

import math
import numbers
import operator
from collections import Counter
from dataclasses import asdict, dataclass, field, fields
from typing import Callable, Protocol

KINDS = ("rollout", "group_stats", "success")
FINISH_REASONS = ("eos", "length")


class InvalidExperience(ValueError):
    """A record failed validation; `reason` is a short counter key, the message names the field."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Rollout:
    """A sampled completion, as its source policy produced it."""

    run_id: str
    policy_id: str
    version: int
    prompt_id: str
    prompt: str
    completion: str
    token_ids: list
    logps: list
    reward: float
    finish_reason: str
    tokenizer_id: str
    sample: int = 0
    """this record's index among its source's records of the kind in one step (the sample's row; for
    GroupStats the prompt's position): tells a repeated draw apart from a duplicate publish"""
    kind = "rollout"


@dataclass(frozen=True)
class GroupStats:
    """A policy's reward statistics over its G samples of one prompt."""

    policy_id: str
    version: int
    prompt_id: str
    n: int
    reward_sum: float
    reward_sq_sum: float
    capability: float | None = None
    sample: int = 0
    """this record's index among its source's records of the kind in one step (the sample's row; for
    GroupStats the prompt's position): tells a repeated draw apart from a duplicate publish"""
    kind = "group_stats"

    @property
    def mean(self) -> float:
        return self.reward_sum / self.n


@dataclass(frozen=True)
class Success:
    """A completion its source says is verified correct for one prompt (the receiver re-verifies it)."""

    policy_id: str
    version: int
    prompt_id: str
    completion: str
    verifier_id: str
    sample: int = 0
    """this record's index among its source's records of the kind in one step (the sample's row; for
    GroupStats the prompt's position): tells a repeated draw apart from a duplicate publish"""
    kind = "success"


RECORD_TYPES = {"rollout": Rollout, "group_stats": GroupStats, "success": Success}


@dataclass(frozen=True)
class PolicySpec:
    """What the exchange knows of a registered policy."""

    vocab_size: int
    tokenizer_id: str


@dataclass(frozen=True)
class Limits:
    """Caps every record must respect."""

    max_text_bytes: int = 4096
    """prompt and completion length in UTF-8 bytes"""
    max_tokens: int = 1024
    """token ids and log-probs per rollout"""
    reward_min: float = 0.0
    """lowest allowed reward"""
    reward_max: float = 1.0
    """highest allowed reward"""
    max_group: int = 4096
    """largest n in GroupStats"""
    max_id_bytes: int = 256
    """run, policy, prompt, tokenizer and verifier ids and finish_reason, in UTF-8 bytes"""
    max_sample: int = 1 << 20
    """largest sample index"""


def shown(value) -> str:
    """A value as an error message shows it, bounded: an int of more than 128 bits by its size, a text or a
    sequence cut after a few items, an object of another type by its type name (its repr is never called)."""
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, float):
        return repr(float.__float__(value))
    if isinstance(value, int):
        value = operator.index(value)
        return repr(value) if value.bit_length() <= 128 else f"<an int of {value.bit_length()} bits>"
    if isinstance(value, str):
        text = str.__str__(value)
        return repr(text[:60]) + (f"... ({len(text)} characters)" if len(text) > 60 else "")
    if isinstance(value, (list, tuple)):
        base = list if isinstance(value, list) else tuple  # the base methods: a subclass's overrides never run
        items = ", ".join(shown(v) for v in base.__getitem__(value, slice(4)))
        size = base.__len__(value)
        return f"[{items}" + (f", ... ({size} items)]" if size > 4 else "]")
    if isinstance(value, numbers.Number) and type(value).__module__ == "numpy":
        return repr(value)
    return f"<{type(value).__name__}>"


def _fail(reason: str, record, name: str, value, allowed: str) -> InvalidExperience:
    """The error for field `name` of `record` holding `value`: names the field, the value and what is allowed."""
    return InvalidExperience(reason, f"{type(record).__name__}.{name} = {shown(value)} ({type(value).__name__}); "
                                     f"{allowed}")


def plain_text(record, name: str, value, cap: int) -> str:
    """A str field as a plain str of valid UTF-8 of at most `cap` bytes (a str subclass is copied)."""
    if not isinstance(value, str):
        raise _fail("type", record, name, value, "expected str")
    text = str.__str__(value)
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as err:
        raise _fail("utf8", record, name, value, f"not valid UTF-8 (a lone surrogate at {err.start})") from None
    if size > cap:
        raise InvalidExperience("length", f"{type(record).__name__}.{name} has {size} bytes; the cap is {cap}")
    return text


def plain_int(record, name: str, value, reason: str = "type") -> int:
    """An integer field (int or numpy integer; not bool) as a Python int; no float is ever truncated."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise _fail(reason, record, name, value, "expected an integer")
    try:
        return operator.index(value)
    except (TypeError, ValueError, OverflowError):
        raise _fail(reason, record, name, value, "expected an integer") from None


def plain_real(record, name: str, value) -> float:
    """A real field (int, float, numpy scalar; not bool) as a finite Python float.

    An int too large for a float (10**400) is non_finite, like inf: float() would raise OverflowError."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _fail("type", record, name, value, "expected a real number")
    try:
        number = float(value)
    except (OverflowError, ValueError, TypeError):
        number = math.inf
    if not math.isfinite(number):
        raise InvalidExperience("non_finite", f"{type(record).__name__}.{name} = {shown(value)} is not finite")
    return number


def plain_sequence(record, name: str, value, cap: int) -> tuple:
    """A list or tuple field of at most `cap` items, as a tuple (its items converted by the caller)."""
    if not isinstance(value, (list, tuple)):
        raise _fail("type", record, name, value, "expected a list or tuple")
    base = list if isinstance(value, list) else tuple
    if base.__len__(value) > cap:
        raise InvalidExperience("length", f"{type(record).__name__}.{name} has {base.__len__(value)} items; "
                                          f"the cap is {cap}")
    return tuple(base.__iter__(value))


TEXT_FIELDS = ("prompt", "completion")
ID_FIELDS = ("run_id", "policy_id", "prompt_id", "tokenizer_id", "verifier_id", "finish_reason")
INT_FIELDS = ("version", "n", "sample")
REAL_FIELDS = ("reward", "reward_sum", "reward_sq_sum")


def frozen(record, limits: Limits = Limits()):
    """The record with plain Python values: str, int, finite float, and tuples for its sequences (hashable,
    immutable, and no numpy scalar, str subclass or list of the sender's inside).

    Raises InvalidExperience (type, utf8, length, non_finite, out_of_vocab) for a value that does not convert;
    ranges are `validate`'s concern."""
    if type(record) not in RECORD_TYPES.values():
        raise InvalidExperience("type", f"not an experience record: {type(record).__name__}; "
                                        f"expected Rollout, GroupStats or Success")
    values = {}
    for f in fields(record):
        value = getattr(record, f.name, None)
        if f.name in TEXT_FIELDS or f.name in ID_FIELDS:
            cap = limits.max_text_bytes if f.name in TEXT_FIELDS else limits.max_id_bytes
            values[f.name] = plain_text(record, f.name, value, cap)
        elif f.name in INT_FIELDS:
            values[f.name] = plain_int(record, f.name, value)
        elif f.name in REAL_FIELDS or (f.name == "capability" and value is not None):
            values[f.name] = plain_real(record, f.name, value)
        elif f.name == "token_ids":
            ids = plain_sequence(record, f.name, value, limits.max_tokens)
            values[f.name] = tuple(plain_int(record, f.name, i, "out_of_vocab") for i in ids)
        elif f.name == "logps":
            values[f.name] = tuple(plain_real(record, f.name, v)
                                   for v in plain_sequence(record, f.name, value, limits.max_tokens))
        else:  # capability None
            values[f.name] = value
    return type(record)(**values)


def validate(record, policies: dict[str, PolicySpec], clock: int, limits: Limits = Limits()):
    """The record in plain form (`frozen`) if it is well-formed for this exchange at step `clock`, else
    InvalidExperience naming the field, the value and what is allowed."""
    record = frozen(record, limits)
    name = type(record).__name__
    spec = policies.get(record.policy_id)
    if spec is None:
        raise InvalidExperience("unknown_policy", f"{name}.policy_id = {shown(record.policy_id)} is not registered; "
                                                  f"known: {sorted(policies)}")
    if not 0 <= record.sample <= limits.max_sample:
        raise InvalidExperience("range", f"{name}.sample = {shown(record.sample)} is outside "
                                         f"[0, {limits.max_sample}]")
    if record.version < 0 or record.version > clock:
        raise InvalidExperience("future_version" if record.version > clock else "range",
                                f"{name}.version = {shown(record.version)} is outside [0, {clock}] (the exchange "
                                f"clock)")
    if isinstance(record, Rollout):
        _validate_rollout(record, spec, limits)
    elif isinstance(record, GroupStats):
        _validate_group_stats(record, limits)
    return record


def _validate_rollout(record: Rollout, spec: PolicySpec, limits: Limits) -> None:
    """Ranges of a Rollout in plain form: its tokenizer, finish reason, ids, log-probs and reward."""
    if record.tokenizer_id != spec.tokenizer_id:
        raise InvalidExperience("tokenizer", f"Rollout.tokenizer_id = {shown(record.tokenizer_id)} does not match "
                                             f"policy {record.policy_id!r}'s {spec.tokenizer_id!r}")
    if record.finish_reason not in FINISH_REASONS:
        raise InvalidExperience("range", f"Rollout.finish_reason = {shown(record.finish_reason)}; "
                                         f"expected one of {list(FINISH_REASONS)}")
    if len(record.logps) != len(record.token_ids):
        raise InvalidExperience("shape", f"Rollout.logps has {len(record.logps)} values for "
                                         f"{len(record.token_ids)} token ids")
    for i in record.token_ids:
        if not 0 <= i < spec.vocab_size:
            raise InvalidExperience("out_of_vocab", f"Rollout.token_ids holds {shown(i)}, outside policy "
                                                    f"{record.policy_id!r}'s vocabulary [0, {spec.vocab_size})")
    for value in record.logps:
        if value > 0:
            raise InvalidExperience("range", f"Rollout.logps holds {value}; log-probabilities are <= 0")
    if not limits.reward_min <= record.reward <= limits.reward_max:
        raise InvalidExperience("range", f"Rollout.reward = {record.reward} is outside "
                                         f"[{limits.reward_min}, {limits.reward_max}]")


def group_stats_bounds(n: int, total: float, low: float, high: float) -> tuple[float, float]:
    """[min, max] of sum r_i^2 over n rewards r_i in [low, high] with sum r_i = total (low <= total/n <= high).

    Min: S^2 / n (all equal, Cauchy-Schwarz). Max: every r in [a, b] has r^2 <= (a + b) r - a b (the chord of
    r^2 lies above it), so sum r^2 <= (a + b) S - n a b, with equality when every r is a or b."""
    return total ** 2 / n, (low + high) * total - n * low * high


def float32_slack(n: int, low: float, high: float) -> float:
    """How far float32 rounding can move a group's sums (the actor sums rewards in float32): about n^2 units of
    2^-24 of the largest r^2, taken as n^2 2^-22 max(a^2, b^2, 1). Exact for 0/1 rewards, which need none."""
    return n * n * 2.0 ** -22 * max(low * low, high * high, 1.0)


def _validate_group_stats(record: GroupStats, limits: Limits) -> None:
    """Ranges of a GroupStats in plain form: n, sums that rewards in range can produce, capability."""
    if not 1 <= record.n <= limits.max_group:
        raise InvalidExperience("range", f"GroupStats.n = {shown(record.n)} is outside [1, {limits.max_group}]")
    a, b, n, total, squares = limits.reward_min, limits.reward_max, record.n, record.reward_sum, record.reward_sq_sum
    slack = float32_slack(n, a, b)
    if not n * a - slack <= total <= n * b + slack:
        raise InvalidExperience("range", f"GroupStats.reward_sum = {total} is outside [{n * a}, {n * b}] for n = {n}")
    least, most = group_stats_bounds(n, min(max(total, n * a), n * b), a, b)
    if not least - slack <= squares <= most + slack:
        raise InvalidExperience("range", f"GroupStats.reward_sq_sum = {squares} is impossible for n = {n}, "
                                         f"reward_sum = {total} and rewards in [{a}, {b}] (allowed: "
                                         f"[{least:.6g}, {most:.6g}])")
    if record.capability is not None and not 0 <= record.capability <= 1:
        raise InvalidExperience("range", f"GroupStats.capability = {record.capability} is outside [0, 1]")


class StepLog(Protocol):
    """Where an Exchange writes the records it accepted, one step at a time (on disk:
    mrl.runtime.experience_log.ExperienceLog). A failed write raises and leaves the records with the exchange."""

    def write_step(self, step: int, records: list, policies: dict, clock: int, limits: Limits) -> list:
        """Write `records`, accepted under `policies`, `clock` and `limits`, as step `step`; the files written."""


@dataclass
class Exchange:
    """The store and the rules of experience sharing between registered policies.

    policies: {policy id: PolicySpec}; limits: caps on records; log: where `flush` writes the records accepted
    since the last flush (None: no log, and nothing is kept for one). `clock` is the step of the exchange (set by
    `advance`); a record's version may not exceed it.
    """

    policies: dict
    limits: Limits = field(default_factory=Limits)
    log: StepLog | None = None
    clock: int = 0
    counters: Counter = field(default_factory=Counter)
    _store: dict = field(default_factory=dict, repr=False)
    _unflushed: list = field(default_factory=list, repr=False)

    def advance(self, step: int) -> None:
        """Move the clock to `step` (records of versions up to `step` are accepted)."""
        if step < self.clock:
            raise ValueError(f"the exchange clock cannot go back from {self.clock} to {step}")
        self.clock = step

    def publish(self, record) -> None:
        """Validate and store a record; InvalidExperience (counted under rejected/<reason>) if malformed."""
        try:
            record = validate(record, self.policies, self.clock, self.limits)
            bucket = self._store.setdefault((record.kind, record.prompt_id), [])
            if record in bucket:
                raise InvalidExperience("duplicate", f"{type(record).__name__} {record.sample} of {record.policy_id!r} "
                                                     f"for prompt {record.prompt_id!r} was already published")
        except InvalidExperience as err:
            self.counters[f"rejected/{err.reason}"] += 1
            self.counters["rejected"] += 1
            raise
        bucket.append(record)
        if self.log is not None:  # without a log nothing is kept for flush (a long run's memory stays bounded)
            self._unflushed.append(record)
        self.counters[f"accepted/{record.kind}"] += 1

    def publish_many(self, records) -> int:
        """Publish each record; malformed ones are counted and skipped. Returns how many were accepted."""
        accepted = 0
        for record in records:
            try:
                self.publish(record)
                accepted += 1
            except InvalidExperience:
                pass
        return accepted

    def collect(self, receiver: str, kind: str, prompt_ids, max_staleness: int | None = None,
                verify: Callable[[Success], bool] | None = None, at: int | None = None) -> dict[str, list]:
        """The peers' records of `kind` for `prompt_ids`, as {prompt_id: [records]} (the receiver's own excluded).

        Records older than `max_staleness` steps (at - version, `at` the receiver's step, default the clock) are
        dropped and counted under stale/<kind>. For kind "success", `verify` (the receiver's own verifier) is
        required and every record it rejects is dropped and counted under forged.
        """
        if kind not in KINDS:
            raise ValueError(f"kind={kind!r} is not allowed; expected one of {list(KINDS)}")
        if kind == "success" and verify is None:
            raise ValueError("collect(kind='success') needs the receiver's verifier: a peer's success is re-verified")
        out = {}
        for prompt_id in prompt_ids:
            kept = []
            for record in self._store.get((kind, prompt_id), []):
                if record.policy_id == receiver:
                    continue
                if max_staleness is not None and (self.clock if at is None else at) - record.version > max_staleness:
                    self.counters[f"stale/{kind}"] += 1
                    continue
                if kind == "success" and not verify(record):
                    self.counters["forged"] += 1
                    continue
                kept.append(record)
            out[prompt_id] = kept
        return out

    def prompts_by_policy(self, kind: str) -> dict[str, set]:
        """{policy id: the prompt ids it published records of `kind` for}."""
        out: dict[str, set] = {}
        for (stored_kind, prompt_id), records in self._store.items():
            for record in records if stored_kind == kind else ():
                out.setdefault(record.policy_id, set()).add(prompt_id)
        return out

    def drop_older_than(self, version: int) -> int:
        """Forget records of versions below `version` (bounded memory in long runs); returns how many."""
        dropped = 0
        for key, records in list(self._store.items()):
            kept = [r for r in records if r.version >= version]
            dropped += len(records) - len(kept)
            self._store[key] = kept
        return dropped

    def flush(self, step: int | None = None) -> list:
        """Hand the records accepted since the last flush to the log as step `step` (default: the clock).

        Returns the files the log wrote, the manifest last ([] without a log or without pending records). The
        records stay pending until the log's write returned: if it fails, the error propagates and the next flush
        hands them over again (the log refuses a step it already wrote: ValueError)."""
        if self.log is None or not self._unflushed:
            return []
        step = self.clock if step is None else step
        paths = self.log.write_step(step, self._unflushed, self.policies, self.clock, self.limits)
        self._unflushed = []
        return paths

    def state_dict(self) -> dict:
        """Clock, counters and stored records (for checkpoints)."""
        return {"clock": self.clock, "counters": dict(self.counters),
                "records": [(r.kind, asdict(r)) for records in self._store.values() for r in records]}

    def load_state_dict(self, state: dict) -> None:
        self.clock = state["clock"]
        self.counters = Counter(state["counters"])
        self._store = {}
        for kind, row in state["records"]:
            record = frozen(RECORD_TYPES[kind](**row), self.limits)
            self._store.setdefault((kind, record.prompt_id), []).append(record)

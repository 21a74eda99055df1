"""SEE, the Shared Experience Exchange (SPEC section 6): typed, versioned, validated records.

Three kinds of record cross between policies:
- `Rollout` (data level: a peer's sampled completion with its token ids and log-probs),
- `GroupStats` (value level: a peer's reward statistics for one prompt),
- `Success` (outcome level: a verified completion for one prompt).

`Exchange.publish` validates every record on entry (types, finite values, declared ranges, valid
UTF-8, length caps, known policy ids, ids inside the source vocabulary, tokenizer id, versions not
from the future). A bad record raises `InvalidExperience` naming the field, is counted by reason,
and never enters the store, so a bad peer cannot crash or poison a run. `collect` hands a receiver
its peers' records for some prompts, dropping (and counting) those older than a staleness bound;
a `Success` is re-verified with the receiver's own verifier first: a peer cannot forge a success.
Every step's accepted records can be written to Parquet through `datasets` and replayed.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Callable, Iterator

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


def _check_type(record, name: str, value, expected: tuple) -> None:
    ok = isinstance(value, expected) and not (isinstance(value, bool) and bool not in expected)
    if not ok:
        allowed = " or ".join(t.__name__ for t in expected)
        raise InvalidExperience("type", f"{type(record).__name__}.{name} = {value!r:.60} has type "
                                        f"{type(value).__name__}; expected {allowed}")


def _check_text(record, name: str, value: str, limits: Limits) -> None:
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidExperience("utf8", f"{type(record).__name__}.{name} is not valid UTF-8") from None
    if size > limits.max_text_bytes:
        raise InvalidExperience("length", f"{type(record).__name__}.{name} has {size} bytes; "
                                          f"the cap is {limits.max_text_bytes}")


def _check_finite(record, name: str, value: float) -> None:
    if not math.isfinite(value):
        raise InvalidExperience("non_finite", f"{type(record).__name__}.{name} = {value!r} is not finite")


FIELD_TYPES = {
    "run_id": (str,), "policy_id": (str,), "prompt_id": (str,), "prompt": (str,), "completion": (str,),
    "tokenizer_id": (str,), "verifier_id": (str,), "finish_reason": (str,), "version": (int,), "n": (int,),
    "token_ids": (list, tuple), "logps": (list, tuple), "reward": (int, float), "reward_sum": (int, float),
    "reward_sq_sum": (int, float), "capability": (int, float, type(None)),
}


def validate(record, policies: dict[str, PolicySpec], clock: int, limits: Limits = Limits()) -> None:
    """Raise InvalidExperience unless `record` is well-formed for this exchange at step `clock`."""
    if type(record) not in RECORD_TYPES.values():
        raise InvalidExperience("type", f"not an experience record: {type(record).__name__}; "
                                        f"expected Rollout, GroupStats or Success")
    for f in fields(record):
        _check_type(record, f.name, getattr(record, f.name), FIELD_TYPES[f.name])
    name = type(record).__name__
    spec = policies.get(record.policy_id)
    if spec is None:
        raise InvalidExperience("unknown_policy", f"{name}.policy_id = {record.policy_id!r} is not registered; "
                                                  f"known: {sorted(policies)}")
    if record.version < 0 or record.version > clock:
        raise InvalidExperience("future_version" if record.version > clock else "range",
                                f"{name}.version = {record.version} is outside [0, {clock}] (the exchange clock)")
    for text_field in ("prompt", "completion", "prompt_id"):
        if hasattr(record, text_field):
            _check_text(record, text_field, getattr(record, text_field), limits)
    if isinstance(record, Rollout):
        _validate_rollout(record, spec, limits)
    elif isinstance(record, GroupStats):
        _validate_group_stats(record, limits)


def _validate_rollout(record: Rollout, spec: PolicySpec, limits: Limits) -> None:
    if record.tokenizer_id != spec.tokenizer_id:
        raise InvalidExperience("tokenizer", f"Rollout.tokenizer_id = {record.tokenizer_id!r} does not match "
                                             f"policy {record.policy_id!r}'s {spec.tokenizer_id!r}")
    if record.finish_reason not in FINISH_REASONS:
        raise InvalidExperience("range", f"Rollout.finish_reason = {record.finish_reason!r}; "
                                         f"expected one of {list(FINISH_REASONS)}")
    if len(record.token_ids) > limits.max_tokens:
        raise InvalidExperience("length", f"Rollout.token_ids has {len(record.token_ids)} tokens; "
                                          f"the cap is {limits.max_tokens}")
    if len(record.logps) != len(record.token_ids):
        raise InvalidExperience("shape", f"Rollout.logps has {len(record.logps)} values for "
                                         f"{len(record.token_ids)} token ids")
    for i in record.token_ids:
        if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < spec.vocab_size:
            raise InvalidExperience("out_of_vocab", f"Rollout.token_ids holds {i!r}, outside policy "
                                                    f"{record.policy_id!r}'s vocabulary [0, {spec.vocab_size})")
    for value in record.logps:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise InvalidExperience("type", f"Rollout.logps holds {value!r}; expected floats")
        _check_finite(record, "logps", value)
        if value > 0:
            raise InvalidExperience("range", f"Rollout.logps holds {value}; log-probabilities are <= 0")
    _check_finite(record, "reward", record.reward)
    if not limits.reward_min <= record.reward <= limits.reward_max:
        raise InvalidExperience("range", f"Rollout.reward = {record.reward} is outside "
                                         f"[{limits.reward_min}, {limits.reward_max}]")


def _validate_group_stats(record: GroupStats, limits: Limits) -> None:
    if not 1 <= record.n <= limits.max_group:
        raise InvalidExperience("range", f"GroupStats.n = {record.n} is outside [1, {limits.max_group}]")
    for name in ("reward_sum", "reward_sq_sum"):
        _check_finite(record, name, getattr(record, name))
    low, high = record.n * limits.reward_min, record.n * limits.reward_max
    if not low <= record.reward_sum <= high:
        raise InvalidExperience("range", f"GroupStats.reward_sum = {record.reward_sum} is outside [{low}, {high}] "
                                         f"for n = {record.n}")
    # n * sum(r^2) >= (sum r)^2 (Cauchy-Schwarz) and every r^2 <= max(r_min^2, r_max^2)
    top = record.n * max(limits.reward_min ** 2, limits.reward_max ** 2)
    if record.reward_sq_sum < 0 or record.reward_sq_sum > top + 1e-9 or \
            record.n * record.reward_sq_sum < record.reward_sum ** 2 - 1e-9:
        raise InvalidExperience("range", f"GroupStats.reward_sq_sum = {record.reward_sq_sum} is impossible for "
                                         f"n = {record.n}, reward_sum = {record.reward_sum}")
    if record.capability is not None:
        _check_finite(record, "capability", record.capability)
        if not 0 <= record.capability <= 1:
            raise InvalidExperience("range", f"GroupStats.capability = {record.capability} is outside [0, 1]")


@dataclass
class Exchange:
    """The store and the rules of experience sharing between registered policies.

    policies: {policy id: PolicySpec}; limits: caps on records; log_dir: where `flush` writes one
    Parquet file per step and kind (None: no log). `clock` is the step of the exchange (set by
    `advance`); a record's version may not exceed it.
    """

    policies: dict
    limits: Limits = field(default_factory=Limits)
    log_dir: str | Path | None = None
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
            validate(record, self.policies, self.clock, self.limits)
        except InvalidExperience as err:
            self.counters[f"rejected/{err.reason}"] += 1
            self.counters["rejected"] += 1
            raise
        self._store.setdefault((record.kind, record.prompt_id), []).append(record)
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
                verify: Callable[[Success], bool] | None = None) -> dict[str, list]:
        """The peers' records of `kind` for `prompt_ids`, as {prompt_id: [records]} (the receiver's own excluded).

        Records older than `max_staleness` steps (clock - version) are dropped and counted under
        stale/<kind>. For kind "success", `verify` (the receiver's own verifier) is required and
        every record it rejects is dropped and counted under forged.
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
                if max_staleness is not None and self.clock - record.version > max_staleness:
                    self.counters[f"stale/{kind}"] += 1
                    continue
                if kind == "success" and not verify(record):
                    self.counters["forged"] += 1
                    continue
                kept.append(record)
            out[prompt_id] = kept
        return out

    def drop_older_than(self, version: int) -> int:
        """Forget records of versions below `version` (bounded memory in long runs); returns how many."""
        dropped = 0
        for key, records in list(self._store.items()):
            kept = [r for r in records if r.version >= version]
            dropped += len(records) - len(kept)
            self._store[key] = kept
        return dropped

    def flush(self, step: int | None = None) -> list[Path]:
        """Write the records accepted since the last flush to log_dir/step-<step>-<kind>.parquet."""
        records, self._unflushed = self._unflushed, []
        if self.log_dir is None or not records:
            return []
        from datasets import Dataset

        step = self.clock if step is None else step
        folder = Path(self.log_dir)
        folder.mkdir(parents=True, exist_ok=True)
        paths = []
        for kind in KINDS:
            rows = [asdict(r) for r in records if r.kind == kind]
            if rows:
                path = folder / f"step-{step:06d}-{kind}.parquet"
                Dataset.from_list(rows).to_parquet(str(path))
                paths.append(path)
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
            record = RECORD_TYPES[kind](**row)
            self._store.setdefault((kind, record.prompt_id), []).append(record)


def replay(log_dir: str | Path) -> Iterator[tuple[int, object]]:
    """(step, record) for every record of a Parquet exchange log, in step order."""
    from datasets import Dataset

    for path in sorted(Path(log_dir).glob("step-*-*.parquet")):
        _, step, kind = path.stem.split("-", 2)
        for row in Dataset.from_parquet(str(path)):
            yield int(step), RECORD_TYPES[kind](**row)

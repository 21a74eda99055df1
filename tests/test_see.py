"""SEE: valid records pass, every kind of malformed record is rejected with InvalidExperience and
counted, staleness is enforced, a forged success never reaches the receiver, logs replay and refuse damage."""
import dataclasses
import itertools
import json
import math
import os

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mrl.core.see import Exchange, GroupStats, InvalidExperience, Limits, PolicySpec, Rollout, Success, frozen
from mrl.runtime.experience_log import ExperienceLog, ExperienceLogError, replay

POLICIES = {"A": PolicySpec(vocab_size=48, tokenizer_id="A:bpe"),
            "B": PolicySpec(vocab_size=17, tokenizer_id="B:unigram")}


def rollout(**overrides):
    values = dict(run_id="r0", policy_id="A", version=3, prompt_id="train/S1/37/48", prompt="37+48=", completion="85",
                  token_ids=[12, 9, 1], logps=[-0.1, -0.2, -0.05], reward=1.0, finish_reason="eos",
                  tokenizer_id="A:bpe")
    return Rollout(**{**values, **overrides})


def stats(**overrides):
    values = dict(policy_id="B", version=3, prompt_id="train/S1/37/48", n=8, reward_sum=2.0, reward_sq_sum=2.0,
                  capability=0.25)
    return GroupStats(**{**values, **overrides})


def exchange():
    ex = Exchange(POLICIES)
    ex.advance(5)
    return ex


def test_valid_records_are_stored_and_collected_by_peers_only():
    ex = exchange()
    ex.publish(rollout())
    ex.publish(stats())
    ex.publish(Success("A", 4, "train/S1/37/48", "85", "arith"))
    assert ex.counters["accepted/rollout"] == 1 and ex.counters["rejected"] == 0
    assert ex.collect("B", "rollout", ["train/S1/37/48"])["train/S1/37/48"] == [frozen(rollout())]
    assert ex.collect("A", "rollout", ["train/S1/37/48"])["train/S1/37/48"] == []  # own records excluded
    assert ex.collect("A", "group_stats", ["train/S1/37/48"])["train/S1/37/48"][0].mean == 0.25


BAD_ROLLOUTS = {
    "non_finite": [dict(reward=math.nan), dict(reward=math.inf), dict(logps=[-0.1, math.nan, -0.1]),
                   dict(reward=10**400), dict(logps=[-0.1, -10**400, -0.1]), dict(reward=10**5000),
                   dict(logps=[-0.1, -10**5000, -0.1])],
    "range": [dict(reward=2.0), dict(reward=-0.5), dict(logps=[-0.1, 0.3, -0.1]), dict(finish_reason="stop"),
              dict(version=-1), dict(sample=10**5000), dict(sample=-10**5000)],
    "type": [dict(reward="1"), dict(version=3.0), dict(token_ids="12 9 1"), dict(completion=85), dict(reward=True),
             dict(logps=[-0.1, "x", -0.1]), dict(policy_id=None), dict(reward=np.bool_(True)),
             dict(version=np.float64(3.0)), dict(token_ids=np.array([12, 9, 1]))],
    "utf8": [dict(completion="8\ud8005"), dict(run_id="run\udc80")],
    "length": [dict(completion="9" * 5000), dict(token_ids=[3] * 2000, logps=[-0.1] * 2000),
               dict(run_id="r" * 10_000_000), dict(prompt_id="p" * 300)],
    "unknown_policy": [dict(policy_id="Z")],
    "out_of_vocab": [dict(token_ids=[12, 48, 1]), dict(token_ids=[-1, 9, 1]), dict(token_ids=[12, 9.0, 1]),
                     dict(token_ids=[12, 10**5000, 1]), dict(token_ids=[12, True, 1])],
    "future_version": [dict(version=6), dict(version=10**5000)],
    "tokenizer": [dict(tokenizer_id="B:unigram")],
    "shape": [dict(logps=[-0.1])],
}


@pytest.mark.parametrize("reason,overrides", [(r, o) for r, cases in BAD_ROLLOUTS.items() for o in cases])
def test_malformed_rollouts_are_rejected_and_counted(reason, overrides):
    ex = exchange()
    with pytest.raises(InvalidExperience) as err:
        ex.publish(rollout(**overrides))
    assert err.value.reason == reason, str(err.value)
    assert ex.counters[f"rejected/{reason}"] == 1 and ex.counters["rejected"] == 1
    assert ex.collect("B", "rollout", ["train/S1/37/48"])["train/S1/37/48"] == []
    ex.publish(rollout())  # the exchange goes on
    assert ex.counters["accepted/rollout"] == 1


@pytest.mark.parametrize("overrides", [dict(n=0), dict(reward_sum=9.0), dict(reward_sq_sum=-1.0),
                                       dict(reward_sum=4.0, reward_sq_sum=1.0), dict(capability=1.5),
                                       dict(capability=math.nan), dict(reward_sum=math.inf), dict(n=8.0),
                                       dict(reward_sum=0.0, reward_sq_sum=8.0), dict(reward_sum=10**400),
                                       dict(reward_sum=4.0, reward_sq_sum=4.5), dict(sample=-1), dict(n=10**5000),
                                       dict(capability=10**5000), dict(reward_sq_sum=-10**5000)])
def test_malformed_group_stats_are_rejected(overrides):
    ex = exchange()
    with pytest.raises(InvalidExperience):
        ex.publish(stats(**overrides))
    assert ex.counters["rejected"] == 1


def test_every_group_stats_real_rewards_produce_is_accepted():
    """All 0/1 reward vectors of a group of 8 (and a fractional one): their statistics pass; 0/8 with
    reward_sq_sum 8 (impossible for rewards in [0, 1]) does not (above)."""
    for wins in range(9):
        exchange().publish(stats(reward_sum=float(wins), reward_sq_sum=float(wins)))
    exchange().publish(stats(n=2, reward_sum=1.0, reward_sq_sum=0.5))  # rewards 0.5 and 0.5


def test_numpy_scalars_and_str_subclasses_are_stored_as_plain_python_values():
    """What a worker hands over may hold numpy scalars (a tensor's .item() or an array's items) or str subclasses:
    they are converted, so the store, the log and equality never see anything but str, int, float and tuples."""
    class Text(str):
        pass

    ex = exchange()
    ex.publish(rollout(version=np.int64(3), token_ids=[np.int64(12), np.int32(9), 1],
                       logps=[np.float32(-0.5), np.float64(-0.25), -0.05], reward=np.float32(1.0),
                       completion=Text("85"), sample=np.uint8(2)))
    ex.publish(stats(n=np.int16(8), reward_sum=np.float32(2.0), reward_sq_sum=np.float16(2.0),
                     capability=np.float32(0.25)))
    stored = ex.collect("B", "rollout", ["train/S1/37/48"])["train/S1/37/48"][0]
    assert stored == rollout(token_ids=(12, 9, 1), logps=(-0.5, -0.25, -0.05), sample=2)
    assert [type(v) for v in (stored.version, stored.token_ids[0], stored.logps[0], stored.reward, stored.sample,
                              stored.completion)] == [int, int, float, float, int, str]
    group = ex.collect("A", "group_stats", ["train/S1/37/48"])["train/S1/37/48"][0]
    assert [type(v) for v in (group.n, group.reward_sum, group.reward_sq_sum, group.capability)] == [int, float,
                                                                                                   float, float]


def test_a_huge_int_in_a_message_is_shown_by_its_size():
    with pytest.raises(InvalidExperience, match=r"Rollout.version = <an int of 16610 bits> is outside"):
        exchange().publish(rollout(version=10**5000))


@settings(max_examples=200, deadline=None)
@given(rewards=st.lists(st.floats(0, 1, width=32), min_size=1, max_size=64))
def test_group_stats_of_float32_rewards_are_accepted(rewards):
    """The actor sums its rewards in float32: whatever rounding does to S and sum r^2, a real group passes."""
    group = torch.tensor(rewards, dtype=torch.float32)
    exchange().publish(stats(n=len(rewards), reward_sum=float(group.sum()), reward_sq_sum=float((group ** 2).sum()),
                             capability=None))


@pytest.mark.parametrize("value", [0.1, 0.9, 1 / 3, 0.999])
def test_group_stats_of_equal_fractional_rewards_are_accepted(value):
    """All rewards equal: sum r^2 = S^2 / n exactly in reals, so float32 rounding can land just below the bound."""
    group = torch.full((8,), value, dtype=torch.float32)
    exchange().publish(stats(reward_sum=float(group.sum()), reward_sq_sum=float((group ** 2).sum())))


def test_group_stats_bounds_hold_for_every_group_on_a_grid():
    """An independent check of [S^2 / n, (a + b) S - n a b]: every triple of rewards in {0, 0.1, ..., 1} lies
    inside, and the upper end is reached where every reward is 0 or 1."""
    from mrl.core.see import group_stats_bounds

    grid = [k / 10 for k in range(11)]
    reached = set()
    for r in itertools.product(grid, repeat=3):
        total, squares = sum(r), sum(v * v for v in r)
        least, most = group_stats_bounds(3, total, 0.0, 1.0)
        assert least - 1e-12 <= squares <= most + 1e-12
        if abs(squares - most) < 1e-12:
            reached.add(tuple(sorted(r)))
    assert all(set(r) <= {0.0, 1.0} for r in reached) and len(reached) == 4


def test_a_record_published_twice_is_a_duplicate_but_a_repeated_draw_is_not():
    ex = exchange()
    for _ in range(3):
        ex.publish_many([rollout()])
    assert ex.counters["accepted/rollout"] == 1 and ex.counters["rejected/duplicate"] == 2
    ex.publish(rollout(sample=1))  # the same completion sampled again in the group: a second sample
    assert len(ex.collect("B", "rollout", ["train/S1/37/48"])["train/S1/37/48"]) == 2


def test_a_published_record_cannot_be_changed_by_its_sender():
    ex = exchange()
    record = rollout()
    ex.publish(record)
    record.token_ids[0], record.logps[0] = 47, -9.0  # the inline backend hands over the same objects
    stored = ex.collect("B", "rollout", ["train/S1/37/48"])["train/S1/37/48"][0]
    assert stored.token_ids == (12, 9, 1) and stored.logps == (-0.1, -0.2, -0.05)


def test_error_message_names_the_field():
    with pytest.raises(InvalidExperience, match=r"Rollout.reward = nan is not finite"):
        exchange().publish(rollout(reward=math.nan))
    with pytest.raises(InvalidExperience, match=r"policy_id = 'Z' is not registered; known: \['A', 'B'\]"):
        exchange().publish(rollout(policy_id="Z"))


field_values = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.integers(10**300, 10**400),
                         st.sampled_from([10**5000, -10**5000, np.int64(7), np.float32(-0.5), np.bool_(False)]),
                         st.floats(allow_nan=True),
                         st.text(max_size=30), st.lists(st.integers(-100, 200), max_size=8),
                         st.lists(st.floats(allow_nan=True), max_size=8))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(field=st.sampled_from(["run_id", "policy_id", "version", "prompt_id", "prompt", "completion", "token_ids",
                              "logps", "reward", "finish_reason", "tokenizer_id", "sample"]), value=field_values)
def test_fuzzed_rollouts_never_crash_and_never_store_bad_records(field, value):
    """Any single corrupted field: either the record is still valid, or publish rejects it with a counted reason."""
    ex = exchange()
    record = rollout(**{field: value})
    try:
        ex.publish(record)
    except InvalidExperience:
        assert ex.counters["rejected"] == 1
        assert ex.collect("B", "rollout", [record.prompt_id if isinstance(record.prompt_id, str) else ""]) \
            .get(record.prompt_id if isinstance(record.prompt_id, str) else "", []) == []
        return
    # accepted: it must really be well-formed
    assert record.policy_id in POLICIES and 0 <= record.version <= ex.clock
    assert all(isinstance(i, int) and 0 <= i < 48 for i in record.token_ids)
    assert all(math.isfinite(v) and v <= 0 for v in record.logps) and len(record.logps) == len(record.token_ids)
    assert math.isfinite(record.reward) and 0 <= record.reward <= 1


def test_staleness_bound_drops_and_counts():
    ex = Exchange(POLICIES)
    ex.publish(rollout(version=0))
    ex.advance(3)
    ex.publish(rollout(version=3, completion="86", reward=0.0))
    fresh = ex.collect("B", "rollout", ["train/S1/37/48"], max_staleness=2)["train/S1/37/48"]
    assert [r.version for r in fresh] == [3] and ex.counters["stale/rollout"] == 1
    assert len(ex.collect("B", "rollout", ["train/S1/37/48"], max_staleness=3)["train/S1/37/48"]) == 2
    with pytest.raises(ValueError, match="cannot go back"):
        ex.advance(2)


def test_forged_success_is_re_verified_away():
    ex = exchange()
    ex.publish(Success("A", 5, "train/S1/37/48", "85", "arith"))
    ex.publish(Success("A", 5, "train/S1/37/48", "86", "arith"))  # well-formed but wrong: a forgery
    verify = lambda success: success.completion == "85"  # noqa: E731  (the receiver's own verifier)
    kept = ex.collect("B", "success", ["train/S1/37/48"], verify=verify)["train/S1/37/48"]
    assert [s.completion for s in kept] == ["85"] and ex.counters["forged"] == 1
    with pytest.raises(ValueError, match="verifier"):
        ex.collect("B", "success", ["train/S1/37/48"])


def logged_exchange(folder):
    ex = Exchange(POLICIES, log=ExperienceLog(folder))
    ex.publish(rollout(version=0))
    ex.publish(stats(version=0))
    ex.publish_many([rollout(version=0, reward=math.nan)])  # rejected, not logged
    ex.flush(0)
    ex.advance(1)
    ex.publish(Success("B", 1, "p1", "7", "arith"))
    ex.flush(1)
    return ex


def test_parquet_log_replays_every_accepted_record(tmp_path):
    logged_exchange(tmp_path)
    replayed = list(replay(tmp_path))
    assert [(step, type(r).__name__) for step, r in replayed] == [(0, "GroupStats"), (0, "Rollout"), (1, "Success")]
    assert replayed[1][1] == frozen(rollout(version=0)) and replayed[0][1] == stats(version=0)


def test_a_failed_flush_keeps_the_records_for_the_next_one(tmp_path):
    (tmp_path / "log").write_text("a file where the log folder should be")
    ex = Exchange(POLICIES, log=ExperienceLog(tmp_path / "log"))
    ex.advance(1)
    ex.publish(rollout(version=1))
    with pytest.raises(OSError):
        ex.flush(1)
    (tmp_path / "log").unlink()
    ex.flush(1)
    assert [r for _, r in replay(tmp_path / "log")] == [frozen(rollout(version=1))]


def flip(path, old: bytes, new: bytes):
    data = path.read_bytes()
    assert old in data
    path.write_bytes(data.replace(old, new, 1))


@pytest.mark.parametrize("damage, message", [
    (lambda d: flip(d / "step-000000-rollout.parquet", b"37+48=", b"37*48="), "does not match its checksum"),
    (lambda d: (d / "step-000001-success.parquet").unlink(), "missing"),
    (lambda d: (d / "step-000001.json").unlink(), "have no manifest"),
    (lambda d: (d / "step-000000.json").write_text("{"), "unreadable"),
])
def test_replay_refuses_an_altered_missing_or_torn_log_naming_the_file(tmp_path, damage, message):
    logged_exchange(tmp_path)
    damage(tmp_path)
    with pytest.raises(ExperienceLogError, match=message):
        list(replay(tmp_path))


def test_replay_ignores_files_that_are_not_part_of_the_log(tmp_path):
    logged_exchange(tmp_path)
    for name in ("notes.txt", "step-x-rollout.parquet", "step-000002-other.parquet",
                 ".step-000003-rollout.parquet.tmp"):
        (tmp_path / name).write_text("foreign")
    assert len(list(replay(tmp_path))) == 3


def test_replay_re_validates_what_it_reads(tmp_path):
    """A log written with a record that would not pass validation today (a manifest whose checksum matches it)."""
    from mrl.runtime.experience_log import write_log_step

    bad = dataclasses.replace(frozen(rollout(version=0)), token_ids=(12, 99, 1))  # outside A's vocabulary of 48
    write_log_step(tmp_path, 0, [bad], POLICIES)
    with pytest.raises(ExperienceLogError, match="record 0: Rollout.token_ids holds 99, outside"):
        list(replay(tmp_path))


def edit_manifest(path, change):
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest))


@pytest.mark.parametrize("change, message", [
    (lambda m: m.clear(), "not a manifest of step 1"),
    (lambda m: m.pop("policies"), "'policies' must be objects"),
    (lambda m: m.update(files={"../../etc/passwd": m["files"]["step-000001-success.parquet"]}),
     "lists '../../etc/passwd', not a file name of step 1"),
    (lambda m: m["files"]["step-000001-success.parquet"].update(sha256="0" * 63), "needs a sha256"),
    (lambda m: m["files"]["step-000001-success.parquet"].update(records="1"), "needs a sha256 .* record count"),
    (lambda m: m.update(previous=1), "previous step 1 is not a step before this one"),
    (lambda m: m["policies"]["A"].update(vocab=48), "bad policies or limits"),
])
def test_replay_refuses_a_malformed_manifest_naming_it(tmp_path, change, message):
    logged_exchange(tmp_path)
    edit_manifest(tmp_path / "step-000001.json", change)
    with pytest.raises(ExperienceLogError, match=f"step-000001.json: .*{message}"):
        list(replay(tmp_path))
    (tmp_path / "step-000001.json").write_text("[]")
    with pytest.raises(ExperienceLogError, match="step-000001.json: not a manifest of step 1"):
        list(replay(tmp_path))


def test_a_removed_step_is_reported(tmp_path):
    """Its manifest and its files gone: the next manifest names the step it follows."""
    ex = logged_exchange(tmp_path)
    ex.advance(2)
    ex.publish(Success("B", 2, "p1", "7", "arith"))
    ex.flush(2)
    for path in tmp_path.glob("step-000001*"):
        path.unlink()
    with pytest.raises(ExperienceLogError, match="step-000002.json follows step 1, .* a step was removed"):
        list(replay(tmp_path))


def test_a_step_flushed_twice_is_refused_and_nothing_is_lost(tmp_path):
    ex = logged_exchange(tmp_path)
    ex.publish(Success("A", 1, "p1", "7", "arith"))
    with pytest.raises(ValueError, match="step 1 is already logged"):
        ex.flush(1)
    ex.advance(2)
    ex.flush(2)
    assert [(step, r.policy_id) for step, r in replay(tmp_path) if r.kind == "success"] == [(1, "B"), (2, "A")]


def test_steps_past_six_digits_are_replayed(tmp_path):
    ex = Exchange(POLICIES, log=ExperienceLog(tmp_path))
    ex.advance(1_234_567)
    ex.publish(rollout())
    ex.flush()
    assert [step for step, _ in replay(tmp_path)] == [1_234_567]


def test_the_log_keeps_the_clock_and_limits_its_records_were_accepted_under(tmp_path):
    ex = Exchange(POLICIES, limits=Limits(max_text_bytes=8000), log=ExperienceLog(tmp_path))
    ex.advance(3)
    ex.publish(rollout(completion="9" * 5000))  # version 3, flushed as step 2 (the async runner's checkpoint)
    ex.flush(2)
    assert [(step, len(r.completion)) for step, r in replay(tmp_path)] == [(2, 5000)]
    with pytest.raises(ExperienceLogError, match="record 0: Rollout.completion has 5000 bytes"):
        list(replay(tmp_path, limits=Limits()))


def test_records_published_without_a_log_are_not_kept_for_one(tmp_path):
    ex = exchange()
    ex.publish_many([rollout(sample=i) for i in range(100)])
    ex.log = ExperienceLog(tmp_path)
    assert ex.flush(5) == [] and not any(tmp_path.iterdir())


def test_a_write_cut_before_the_manifest_is_a_torn_step_and_the_records_stay_pending(tmp_path, monkeypatch):
    import mrl.runtime.experience_log

    ex = logged_exchange(tmp_path)
    ex.advance(2)
    ex.publish(rollout(version=2))

    rename = os.replace

    def crash_on_manifest(source, target):
        if str(target).endswith(".json"):
            raise OSError("disk full")
        rename(source, target)

    monkeypatch.setattr(mrl.runtime.experience_log.os, "replace", crash_on_manifest)
    with pytest.raises(OSError, match="disk full"):
        ex.flush(2)
    monkeypatch.undo()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # no temporary file left behind
    with pytest.raises(ExperienceLogError, match=r"\['step-000002-rollout.parquet'\] have no manifest"):
        list(replay(tmp_path))
    ex.flush(2)
    assert [step for step, _ in replay(tmp_path)] == [0, 0, 1, 2]


def test_a_resumed_exchange_rewrites_the_steps_after_its_checkpoint(tmp_path):
    """Steps 0 and 1 logged, checkpoint after 0, crash after 1: the resumed exchange writes step 1 again, after
    the step 0 it finds on disk, and the log reads as one run."""
    first = Exchange(POLICIES, log=ExperienceLog(tmp_path))
    first.publish(rollout(version=0))
    first.flush(0)
    state = first.state_dict()
    first.advance(1)
    first.publish(rollout(version=1))
    first.flush(1)
    before = list(replay(tmp_path))
    resumed = Exchange(POLICIES, log=ExperienceLog(tmp_path))
    resumed.load_state_dict(state)
    resumed.advance(1)
    resumed.publish(rollout(version=1))
    resumed.flush(1)
    assert list(replay(tmp_path)) == before
    assert json.loads((tmp_path / "step-000001.json").read_text())["previous"] == 0


def test_state_dict_round_trip():
    ex = exchange()
    ex.publish(rollout())
    ex.publish_many([rollout(reward=math.inf)])
    restored = Exchange(POLICIES)
    restored.load_state_dict(ex.state_dict())
    assert restored.clock == 5 and restored.counters == ex.counters
    assert restored.collect("B", "rollout", ["train/S1/37/48"]) == ex.collect("B", "rollout", ["train/S1/37/48"])

"""Faults in the folder exchange between TRL trainers: a trainer killed in the middle of writing a step, a torn step
file, a step folder written by another run. Each is refused and its peer named (WorkerFailed under "fail", dropped
under "continue"), and every step published before stays readable."""
import json

import pytest

from mrl.core.see import GroupStats, PolicySpec
from mrl.integrations.file_exchange import RUN_FILE, FileExchange
from mrl.runtime.experience_log import log_file_name, manifest_name, read_log_step, replay
from mrl.runtime.mwra import WorkerFailed

SPEC = {"A": PolicySpec(vocab_size=40, tokenizer_id="A:bpe"), "B": PolicySpec(vocab_size=40, tokenizer_id="B:uni")}


def stats(policy: str, step: int) -> list:
    return [GroupStats(policy, step, f"p{i}", 4, 0.5, 0.25, sample=i) for i in range(2)]


def pair(root, failure_policy: str = "fail", run_ids=("run-1", "run-1")) -> tuple[FileExchange, FileExchange]:
    return tuple(FileExchange(root, name, (peer,), SPEC[name], deadline=0.3, failure_policy=failure_policy,
                              run_id=run_id) for (name, peer), run_id in zip((("A", "B"), ("B", "A")), run_ids))


def published_steps(folder) -> list[int]:
    """Every step of a policy's folder, read back through SEE's replay (its structure, checksums and records
    checked)."""
    return sorted({step for step, _ in replay(folder)})


def test_a_step_is_read_whole_from_a_peer(tmp_path):
    a, b = pair(tmp_path)
    for step in (1, 2):
        b.publish(step, stats("B", step))
        exchange, missing = a.gather(step, stats("A", step))
        assert missing == [] and exchange.counters["accepted/group_stats"] == 4
    assert json.loads((tmp_path / "B" / RUN_FILE).read_text())["run_id"] == "run-1"


@pytest.mark.parametrize("failure_policy", ["fail", "continue"])
def test_a_trainer_killed_while_writing_a_step_is_named_with_what_it_left(tmp_path, failure_policy):
    """B publishes steps 1 and 2, then dies in step 3 after its data file was renamed into place and before its
    manifest (and with a temporary file still there): A never reads step 3, names B at the deadline with those files,
    and B's steps 1 and 2 stay whole."""
    a, b = pair(tmp_path, failure_policy)
    for step in (1, 2):
        b.publish(step, stats("B", step))
    b.publish(3, stats("B", 3))
    (tmp_path / "B" / manifest_name(3)).unlink()
    (tmp_path / "B" / f".{log_file_name(3, 'success')}.tmp").write_bytes(b"PAR1")
    if failure_policy == "fail":
        with pytest.raises(WorkerFailed, match=r"'B' failed: published no records for step 3 .*it left "
                                               r"\['.step-000003-success.parquet.tmp', "
                                               r"'step-000003-group_stats.parquet'\] without their manifest"):
            a.gather(3, stats("A", 3))
    else:
        assert a.gather(3, stats("A", 3))[1] == ["B"] and a.dropped == {"B"}
    assert [len(read_log_step(tmp_path / "B", step)) for step in (1, 2)] == [2, 2]   # published: still whole


@pytest.mark.parametrize("failure_policy", ["fail", "continue"])
def test_a_torn_step_file_is_refused_naming_its_peer(tmp_path, failure_policy):
    a, b = pair(tmp_path, failure_policy)
    b.publish(1, stats("B", 1))
    data = tmp_path / "B" / log_file_name(1, "group_stats")
    data.write_bytes(data.read_bytes()[:-20])   # torn after its manifest was written (a bad disk, a partial copy)
    if failure_policy == "fail":
        with pytest.raises(WorkerFailed, match=r"'B' failed: its step 1 is refused: .*step-000001-group_stats.parquet "
                                               r"does not match its checksum"):
            a.gather(1, stats("A", 1))
    else:
        exchange, missing = a.gather(1, stats("A", 1))
        assert missing == ["B"] and a.dropped == {"B"} and exchange.counters.get("accepted/group_stats") == 2


@pytest.mark.parametrize("failure_policy", ["fail", "continue"])
def test_a_peer_folder_of_another_run_is_refused_naming_the_peer(tmp_path, failure_policy):
    """B's folder holds the steps of run-0 (left there, or copied in): A, of run-1, refuses them."""
    a, b = pair(tmp_path, failure_policy, run_ids=("run-1", "run-0"))
    b.publish(1, stats("B", 1))
    if failure_policy == "fail":
        with pytest.raises(WorkerFailed, match=r"'B' failed: its step 1 is refused: .*B was written by run 'run-0', "
                                               r"not by this run 'run-1'"):
            a.gather(1, stats("A", 1))
    else:
        assert a.gather(1, stats("A", 1))[1] == ["B"] and a.dropped == {"B"}
    assert published_steps(tmp_path / "B") == [1]   # refused, not removed: nothing published is lost


def test_trl_train_names_its_run_by_pairing_probe_seed_and_profile_and_a_foreign_folder_is_refused(tmp_path):
    """trl_train's run id is the same in every trainer of one run and differs when the pairing, the probe, its
    knobs, the seed or the profile differ; a trainer pointed at the folder of another run stops naming both."""
    from mrl.core.probes import probe_config
    from mrl.integrations.trl_train import exchange_run_id
    from mrl.runtime.experience_log import ExperienceLogError

    ours = exchange_run_id({"B": "x", "A": "y"}, probe_config("sgt"), 0, "smoke")
    assert ours == exchange_run_id(["A", "B"], probe_config("sgt"), 0, "smoke") == "A+B sgt seed 0 (smoke)"
    others = [exchange_run_id(["A", "C"], probe_config("sgt"), 0, "smoke"),
              exchange_run_id(["A", "B"], probe_config("prp"), 0, "smoke"),
              exchange_run_id(["A", "B"], probe_config("sgt", lam=0.3), 0, "smoke"),
              exchange_run_id(["A", "B"], probe_config("sgt"), 1, "smoke"),
              exchange_run_id(["A", "B"], probe_config("sgt"), 0, "default")]
    assert len({ours, *others}) == 6
    a, b = pair(tmp_path, run_ids=(ours, others[3]))
    b.publish(0, [])
    with pytest.raises(ExperienceLogError, match="A\\+B sgt seed 1 \\(smoke\\).*A\\+B sgt seed 0 \\(smoke\\)"):
        a.read_peer_step("B", 0)

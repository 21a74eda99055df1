"""Offline peers (GRAFT's offline variant, runner.OfflinePeers): a learner trains alone while a stored SEE log
supplies a peer's records step by step; what it received is exactly what the log holds, and the run is
deterministic."""
import pytest

from mrl.core.config import ConfigError, GrpoConfig, TaskConfig
from mrl.core.probes import probe_config
from mrl.runtime.experience_log import replay
from mrl.runtime.runner import run_concurrent
from mrl.runtime.spec import Variant


def records_of(log_dir, policy):
    return [(step, record) for step, record in replay(log_dir) if record.policy_id == policy]


@pytest.mark.slow
def test_a_learner_with_an_offline_peer_receives_the_logged_records_step_by_step(tiny_zoo_paths, tmp_path):
    from testsupport import TINY_TASK, run_of

    task, grpo = TaskConfig(**TINY_TASK), GrpoConfig(steps=3, prompts_per_step=4, group_size=4, lr=3e-4,
                                                      eval_every=3, seed=0)
    both = {name: tiny_zoo_paths[name] for name in ("A", "B")}
    run_concurrent(run_of(both, task, grpo), experience_dir=tmp_path / "source", progress=False)
    offline = Variant(offline=(("B", tiny_zoo_paths["B"]),), offline_log=str(tmp_path / "source"))
    runs = [run_concurrent(run_of({"A": tiny_zoo_paths["A"]}, task, grpo, probe=probe_config("graft"), variant=offline),
                           experience_dir=tmp_path / f"run{i}", progress=False)
            for i in range(2)]
    assert records_of(tmp_path / "run0", "B") == records_of(tmp_path / "source", "B")   # every logged record, as is
    assert len(records_of(tmp_path / "run0", "B")) > 0
    assert [r["policy"] for r in runs[0].steps] == ["A"] * 3
    strip = [[{k: v for k, v in row.items() if not k.endswith("seconds")} for row in run.steps] for run in runs]
    assert strip[0] == strip[1] and runs[0].evals == runs[1].evals
    assert all("graft_candidates" in row for row in strip[0])

    with pytest.raises(ConfigError, match="must differ from the live policies"):
        run_concurrent(run_of(both, task, grpo, variant=offline), progress=False)
    with pytest.raises(ConfigError, match=r"names \['C'\], which the log .* does not hold; it holds \['A', 'B'\]"):
        run_concurrent(run_of({"A": tiny_zoo_paths["A"]}, task, grpo, variant=Variant(
            offline=(("C", tiny_zoo_paths["B"]),), offline_log=str(tmp_path / "source"))), progress=False)

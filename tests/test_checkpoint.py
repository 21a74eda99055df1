"""Checkpoints on disk: a damaged newest checkpoint (truncated, empty, garbage, flipped bytes, no manifest) is
skipped for the newest intact one, and a checkpoint of another experiment is refused naming both values."""
import pytest
import torch

from mrl.runtime import checkpoint
from mrl.runtime.checkpoint import CheckpointMismatch

IDENTITY = {"policies": {"A": "/zoo/A", "B": "/zoo/B"}, "seed": 0, "steps": 6, "probe": {"name": "grpo"}}


def write(folder, step, identity=IDENTITY):
    return checkpoint.save(folder, step, {"step": step, "weights": torch.arange(1000.0) * step}, identity)


@pytest.fixture
def folder(tmp_path):
    for step in (2, 4, 6):
        write(tmp_path, step)
    return tmp_path


def test_the_newest_intact_checkpoint_loads_with_nothing_skipped(folder):
    path, state, skipped = checkpoint.load_latest(folder, IDENTITY)
    assert path.name == "step-000006" and state["step"] == 6 and skipped == []
    assert torch.equal(state["weights"], torch.arange(1000.0) * 6)


@pytest.mark.parametrize("damage, reason", [
    (lambda p: p.write_bytes(p.read_bytes()[:100]), "checksum"),  # truncated
    (lambda p: p.write_bytes(b""), "checksum"),  # empty
    (lambda p: p.write_bytes(b"\x80garbage" * 50), "checksum"),  # garbage
    (lambda p: p.unlink(), "missing"),
])
def test_a_damaged_state_falls_back_to_the_previous_checkpoint(folder, damage, reason):
    damage(folder / "step-000006" / "state.pt")
    path, state, skipped = checkpoint.load_latest(folder, IDENTITY)
    assert path.name == "step-000004" and state["step"] == 4
    assert len(skipped) == 1 and skipped[0][0] == "step-000006" and reason in skipped[0][1]


def test_one_flipped_byte_in_the_weights_is_caught(folder):
    state = folder / "step-000006" / "state.pt"
    data = bytearray(state.read_bytes())
    data[len(data) // 2] ^= 0x01  # inside the tensor storage: torch.load alone would load it silently
    state.write_bytes(bytes(data))
    path, _, skipped = checkpoint.load_latest(folder, IDENTITY)
    assert path.name == "step-000004" and "checksum" in skipped[0][1]


def test_a_damaged_manifest_is_skipped_and_a_missing_one_means_unfinished(folder):
    (folder / "step-000006" / "manifest.json").write_text("{not json")
    (folder / "step-000004" / "manifest.json").unlink()  # never finished: not a checkpoint at all
    path, _, skipped = checkpoint.load_latest(folder, IDENTITY)
    assert path.name == "step-000002"
    assert [name for name, _ in skipped] == ["step-000006"] and "manifest" in skipped[0][1]


def test_every_checkpoint_damaged_leaves_nothing_to_resume(folder):
    for step in (2, 4, 6):
        (folder / f"step-{step:06d}" / "state.pt").write_bytes(b"")
    assert checkpoint.load_latest(folder, IDENTITY)[:2] == (None, None)


def test_a_half_written_folder_is_never_a_checkpoint(tmp_path):
    write(tmp_path, 4)
    (tmp_path / "step-000006.tmp").mkdir()  # a save interrupted by SIGKILL
    (tmp_path / "step-000006.tmp" / "state.pt").write_bytes(b"trunc")
    (tmp_path / "step-000008").mkdir()  # renamed by hand, no manifest
    (tmp_path / "step-000008" / "state.pt").write_bytes(b"trunc")
    assert checkpoint.latest(tmp_path).name == "step-000004"


@pytest.mark.parametrize("change, named", [
    ({"seed": 1}, "seed: the checkpoint has 0, this run has 1"),
    ({"probe": {"name": "sgt"}}, 'probe: the checkpoint has {"name": "grpo"}, this run has {"name": "sgt"}'),
    ({"steps": 10}, "steps: the checkpoint has 6, this run has 10"),
    ({"policies": {"A": "/zoo/A", "C": "/zoo/C"}}, "policies:"),
])
def test_a_checkpoint_of_another_experiment_is_refused_naming_both_values(folder, change, named):
    with pytest.raises(CheckpointMismatch, match="another run") as err:
        checkpoint.load_latest(folder, {**IDENTITY, **change})
    assert named in str(err.value)


def test_the_identity_check_comes_after_the_damage_check(folder):
    """A damaged newest checkpoint of this run is skipped; an intact older one of another run is still refused."""
    write(folder, 8, {**IDENTITY, "seed": 5})
    (folder / "step-000008" / "state.pt").write_bytes(b"")
    assert checkpoint.load_latest(folder, IDENTITY)[0].name == "step-000006"
    write(folder, 10)
    (folder / "step-000010" / "state.pt").write_bytes(b"")
    write(folder, 8, {**IDENTITY, "seed": 5})
    with pytest.raises(CheckpointMismatch, match="seed"):
        checkpoint.load_latest(folder, IDENTITY)

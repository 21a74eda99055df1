"""Run checkpoints on disk: written atomically, checked on resume, never trusted blindly.

A checkpoint is a folder `step-NNNNNN/` holding `state.pt` (every policy's weights and optimizer state,
the exchange, the metrics so far) and `manifest.json`, written last: the run's identity (the settings
that define the experiment, mrl.runtime.spec.run_identity: policies, seed, probe and its knobs, task, GRPO settings,
clock) and the sha256 of every file. Both are written into `step-NNNNNN.tmp/`, which is renamed into place, so a folder
named `step-NNNNNN` with a manifest is complete.

On resume, `load_latest` walks the checkpoints from the newest: one whose manifest is missing or
unreadable, whose files fail their checksum, or whose `state.pt` does not load is skipped (and
named in the returned list, for the run's events); the first intact one must have the identity of
the run being resumed, else `CheckpointMismatch` names the differing setting and both values.
"""
from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import torch

from mrl.core.config import ConfigError
from mrl.runtime.experience_log import file_sha256

STEP_DIR = "step-{:06d}"
STEP_NAME = re.compile(r"step-\d{6}")
MANIFEST = "manifest.json"
FORMAT = 1


class CheckpointMismatch(ConfigError):
    """The checkpoint folder holds a different experiment than the one being resumed."""


def placement_key(placement) -> dict:
    """What of a PlacementConfig can change a run's numbers, as configured (no device is resolved: the machine
    that computes a key, a Ray driver say, need not be the one that runs the policy): cuda when the device names
    it, the dtype, gradient checkpointing; {} for the default (auto or cpu, float32, no checkpointing), so `auto`
    keys alike on a CPU and on a GPU machine."""
    key = {"device": "cuda" if placement.device.startswith("cuda") else "auto or cpu", "dtype": placement.dtype,
           "gradient_checkpointing": placement.gradient_checkpointing}
    return {} if key == {"device": "auto or cpu", "dtype": "float32", "gradient_checkpointing": False} else key


def identity_differences(saved: dict, current: dict) -> list[str]:
    """'setting: checkpoint has X, this run has Y' for every top-level identity entry that differs."""
    out = []
    for key in sorted(set(saved) | set(current)):
        if saved.get(key) != current.get(key):
            out.append(f"{key}: the checkpoint has {_short(saved.get(key))}, this run has {_short(current.get(key))}")
    return out


def _short(value) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 300 else text[:297] + "..."


def save(folder: str | Path, step: int, state: dict, identity: dict, keep: int = 0) -> Path:
    """Write `state` (torch.save) and its manifest as folder/step-NNNNNN, atomically; returns the folder. keep > 0:
    then remove all but the `keep` newest finished checkpoints."""
    target = Path(folder) / STEP_DIR.format(step)
    staging = Path(folder) / (STEP_DIR.format(step) + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    torch.save(state, staging / "state.pt")
    files = {name: {"sha256": file_sha256(staging / name), "bytes": (staging / name).stat().st_size}
             for name in sorted(os.listdir(staging))}
    manifest = {"format": FORMAT, "step": step, "identity": identity, "files": files}
    (staging / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True, default=str))
    for path in staging.iterdir():  # on disk before the rename makes the checkpoint visible
        with open(path, "rb") as handle:
            os.fsync(handle.fileno())
    shutil.rmtree(target, ignore_errors=True)
    os.replace(staging, target)
    for older in checkpoints(folder)[keep:] if keep else ():
        shutil.rmtree(older, ignore_errors=True)
    return target


def checkpoints(folder: str | Path) -> list[Path]:
    """Every finished checkpoint folder (renamed into place, manifest present), newest first."""
    found = [p for p in Path(folder).glob("step-*") if STEP_NAME.fullmatch(p.name) and (p / MANIFEST).exists()]
    return sorted(found, reverse=True)


def latest(folder: str | Path) -> Path | None:
    """The newest finished checkpoint folder (a half-written `*.tmp` or manifest-less one is never named)."""
    found = checkpoints(folder)
    return found[0] if found else None


def damage(path: Path) -> tuple[dict | None, str | None]:
    """(manifest, None) if every file of the checkpoint matches its manifest, else (None, what is wrong)."""
    try:
        manifest = json.loads((path / MANIFEST).read_text())
        files, identity, step = manifest["files"], manifest["identity"], manifest["step"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        return None, f"its manifest is unreadable ({type(err).__name__}: {err})"
    if not isinstance(files, dict) or not isinstance(identity, dict) or step != int(path.name.split("-")[1]):
        return None, "its manifest is malformed"
    if "state.pt" not in files:
        return None, "its manifest does not list state.pt"
    for name, expected in files.items():
        file = path / name
        if not file.is_file():
            return None, f"{name} is missing"
        if file.stat().st_size != expected.get("bytes") or file_sha256(file) != expected.get("sha256"):
            return None, f"{name} does not match its checksum (truncated or altered)"
    return manifest, None


def load_latest(folder: str | Path, identity: dict) -> tuple[Path | None, dict | None, list[tuple[str, str]]]:
    """(checkpoint folder, its state, [(skipped folder name, reason)]) of the newest intact checkpoint.

    (None, None, skipped) when no intact checkpoint exists. Raises CheckpointMismatch when the newest
    intact checkpoint belongs to another experiment (its identity differs from `identity`).
    """
    skipped = []
    for path in checkpoints(folder):
        manifest, problem = damage(path)
        if problem is None:
            differences = identity_differences(manifest["identity"], identity)
            if differences:
                raise CheckpointMismatch(f"{path} is a checkpoint of another run; resuming it would continue a "
                                         f"different experiment. Differences: " + "; ".join(differences)
                                         + ". Use another checkpoint_dir, or resume=False to start over.")
            try:
                state = torch.load(path / "state.pt", weights_only=False)
            except Exception as err:  # noqa: BLE001 - any unreadable state is damage; the next one is tried
                problem = f"state.pt does not load ({type(err).__name__}: {err})"
            else:
                return path, state, skipped
        skipped.append((path.name, problem))
    return None, None, skipped

"""A committed record of finished runs: each run's held-out evaluations under its key, so a grid that takes several
sessions keeps what finished in a checkout whose run cache starts empty: the second registration's block
(docs/registration_claims.md) takes several sessions of two cores.

The record is a folder of two CSV files, each replaced whole by a rename, evaluations first, under a lock:

- `evals.csv`, the held-out evaluations (step, policy, split, skill, accuracy), each row with its run's key;
- `runs.csv`, one row per run: its key (Run.key: the run's identity, the mrl package's code and the numerics mode),
  its label's columns, the numerics mode and the code fingerprint it ran under, the stamp its caller gives (the
  registration's checksum), its wall seconds, the commit and the machine. A run is recorded once its evaluations are.

A run is read back under its own key; or, where the caller names the stamp a run must carry, under its label, when
the recorded run carries that stamp and the code fingerprint of the record's first run: the whole block made by one
code, which a later checkout whose code has moved on can still read. Floats are written with full precision, so the
evaluations read back are the ones the run computed, bit for bit.
"""
from __future__ import annotations

import fcntl
import json
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

import pandas as pd

from mrl import numerics
from mrl.experiments.runs import Labelled, run_many
from mrl.fingerprint import code_fingerprint
from mrl.runtime.results import git_sha, machine

RUNS = "runs.csv"
EVALS = "evals.csv"
EVAL_COLUMNS = ["step", "policy", "split", "skill", "accuracy"]
"""what the record keeps of a run's evaluation rows (its held-out split)"""


def read_record(folder: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(runs, evals) of the record in `folder`, a run listed only where its evaluations are; empty frames where it
    holds none."""
    runs_path, evals_path = Path(folder) / RUNS, Path(folder) / EVALS
    if not runs_path.exists() or not evals_path.exists():
        return pd.DataFrame(columns=["key"]), pd.DataFrame(columns=["key", *EVAL_COLUMNS])
    runs = pd.read_csv(runs_path, dtype={"key": str, "pairing": str, "probe": str, "code": str, "stamp": str})
    evals = pd.read_csv(evals_path, dtype={"key": str, "policy": str, "split": str, "skill": str})
    return runs[runs.key.isin(set(evals.key))].reset_index(drop=True), evals


def readable(labelled: Labelled, runs: pd.DataFrame, stamp: str | None = None) -> list[str | None]:
    """Per run of `labelled`, the key under which the record holds it (None: it does not): its own key, or, with
    `stamp`, the key of the recorded run with its label that carries `stamp` and the first recorded run's code."""
    keys = set(runs.key)
    by_label = {}
    if stamp is not None and len(runs):
        code = runs.code.iloc[0]
        same = runs[(runs.stamp == stamp) & (runs.code == code)]
        columns = list(labelled[0][0]) if labelled else []
        by_label = {tuple(row[c] for c in columns): row["key"] for _, row in same.iterrows()}
    return [run.key() if run.key() in keys else by_label.get(tuple(label.values())) for label, run in labelled]


def recorded_evals(labelled: Labelled, folder: Path, stamp: str | None = None) -> pd.DataFrame:
    """The held-out evaluations the record holds of the runs in `labelled` (readable), each row with its run's label
    columns, in the order given; runs the record lacks are absent."""
    runs, evals = read_record(folder)
    by_key = dict(tuple(evals.groupby("key"))) if len(evals) else {}
    frames = [by_key[key][EVAL_COLUMNS].assign(**label)
              for (label, _), key in zip(labelled, readable(labelled, runs, stamp)) if key is not None]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=EVAL_COLUMNS)


def missing_runs(labelled: Labelled, folder: Path, stamp: str | None = None) -> Labelled:
    """The runs of `labelled` the record does not hold (readable), in the order given."""
    keys = readable(labelled, read_record(folder)[0], stamp)
    return [item for item, key in zip(labelled, keys) if key is None]


@contextmanager
def locked(folder: Path):
    """One writer at a time in the record's folder (an exclusive lock on its .lock file)."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def replace_csv(frame: pd.DataFrame, path: Path) -> None:
    """Write `frame` into a temporary file of this process beside `path`, then rename it into place."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    frame.to_csv(tmp, index=False)
    os.replace(tmp, path)


def append_runs(folder: Path, labelled: Labelled, evals: pd.DataFrame, stamp: str = "") -> None:
    """Add finished runs to the record: `evals` are run_many's rows of `labelled` (their label columns beside each
    row); each run's wall seconds come from its run cache entry; `stamp` is written beside each (the registration's
    checksum). A run whose held-out rows are missing or repeated is refused. Evaluations are replaced first and the
    run list second, so a kill between the two leaves runs that read_record does not list, and that run again."""
    folder = Path(folder)
    info, sha, now, code = machine(), git_sha(), time.strftime("%Y-%m-%dT%H:%M:%S%z"), code_fingerprint()
    with locked(folder):
        runs, old = read_record(folder)
        rows, frames = [], []
        for label, run in labelled:
            if run.key() in set(runs.key):
                continue
            mine = evals.loc[(evals[list(label)] == pd.Series(label)).all(axis=1)]
            held = mine[mine.split == "held-out"]
            if held.empty or held.duplicated(["step", "policy", "skill"]).any():
                raise ValueError(f"run {run.label()} ({label}): its held-out evaluations are missing or repeated in "
                                 f"the rows given ({len(held)} rows); nothing of it is recorded")
            record = json.loads((run.folder() / "run.json").read_text())
            rows.append({"key": run.key(), **label, "numerics": numerics.mode(), "code": code, "stamp": stamp,
                         "wall_seconds": record["wall_seconds"], "git_sha": sha, "cpu": info["cpu"],
                         "recorded": now})
            frames.append(held[EVAL_COLUMNS].assign(key=run.key())[["key", *EVAL_COLUMNS]])
        if not rows:
            return
        new_keys = {row["key"] for row in rows}
        kept = old[~old.key.isin(new_keys)] if len(old) else old
        replace_csv(pd.concat([kept, *frames], ignore_index=True) if len(kept) else pd.concat(frames,
                                                                                             ignore_index=True),
                    folder / EVALS)
        replace_csv(pd.concat([runs, pd.DataFrame(rows)], ignore_index=True) if len(runs) else pd.DataFrame(rows),
                    folder / RUNS)


def run_into_record(labelled: Labelled, folder: Path, packed_runs: int, backend: str | None = None,
                    progress: bool = True, chunk: int = 4, stamp: str = "",
                    after_chunk: Callable[[Labelled], None] | None = None) -> None:
    """Run what the record lacks of `labelled` (run_many, through the run cache), `chunk` runs at a time, adding each
    chunk to the record (with `stamp`) as it finishes: a stop costs at most the chunk in flight. The runs' policies
    must exist. after_chunk: called with each chunk once the record holds it (mrl.reproduce times the block's parts
    there)."""
    todo = missing_runs(labelled, folder, stamp or None)
    for start in range(0, len(todo), chunk):
        part = todo[start:start + chunk]
        _, evals = run_many(part, packed_runs, backend, progress=progress)
        append_runs(folder, part, evals, stamp)
        if after_chunk is not None:
            after_chunk(part)

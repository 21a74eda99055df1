"""The experience log on disk: SEE's accepted records, one step at a time (docs/architecture.md, SEE).

`ExperienceLog(folder)` is the log an `Exchange` is given: its `flush(step)` hands the step's accepted records to
`write_step`, which writes one Parquet file per kind (pyarrow), each renamed into place, then `step-NNNNNN.json`,
the step's manifest (sha256 and record count of every file, the policies' specs, limits and clock, the log's
previous step), last; the exchange keeps the records pending until that write succeeded. `replay` reads only what
manifests list, checks every checksum, the chain of steps and every record again (`ExperienceLogError` names the
file otherwise); `read_log_step` reads one step as another process writes the log.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

from mrl.core.see import KINDS, RECORD_TYPES, InvalidExperience, Limits, PolicySpec, shown, validate


class ExperienceLogError(ValueError):
    """An experience log file is missing, altered, torn or holds an invalid record."""


@dataclass
class ExperienceLog:
    """The log in `folder` an Exchange writes its accepted records to (the `StepLog` of mrl.core.see), one step per
    flush. Steps only increase within one log object (ValueError otherwise: a step written twice would lose the
    first write); a resumed run's log may rewrite the steps after its checkpoint, and its first write finds the
    log's previous step on disk."""

    folder: Path
    """the folder holding the log's files (created on the first write)"""
    last_step: int | None = field(default=None, repr=False)
    """the step this object wrote last (None: none yet)"""

    def __post_init__(self):
        self.folder = Path(self.folder)

    def write_step(self, step: int, records: list, policies: dict, clock: int, limits: Limits) -> list[Path]:
        """Write `records` (accepted under `policies`, `clock` and `limits`) as step `step` (`write_log_step`);
        returns the files written, the manifest last."""
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"flush(step={step!r}): the step must be an int >= 0")
        if self.last_step is not None and step <= self.last_step:
            raise ValueError(f"flush(step={step}): step {self.last_step} is already logged; each step is "
                             f"written once and steps increase")
        previous = self.last_step if self.last_step is not None else last_logged_step(self.folder, step)
        paths = write_log_step(self.folder, step, records, policies, previous, clock, limits)
        self.last_step = step
        return paths


LOG_FILE = re.compile(r"step-(\d{6,})-(rollout|group_stats|success)\.parquet")
LOG_MANIFEST = re.compile(r"step-(\d{6,})\.json")
SHA256 = re.compile(r"[0-9a-f]{64}")


def file_sha256(path: Path) -> str:
    """sha256 of a file's bytes, read in 1 MiB blocks (the checkpoints' checksum; the log checks the bytes it read)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def log_file_name(step: int, kind: str) -> str:
    """The name of a step's Parquet file of one kind: step-000012-rollout.parquet."""
    return f"step-{step:06d}-{kind}.parquet"


def manifest_name(step: int) -> str:
    """The name of a step's manifest: step-000012.json."""
    return f"step-{step:06d}.json"


def _log_step(pattern: re.Pattern, name: str) -> int | None:
    """The step a log file name belongs to, or None for a name the log never writes (step-1-... or notes.txt)."""
    match = pattern.fullmatch(name)
    if match is None:
        return None
    step = int(match.group(1))
    canonical = manifest_name(step) if pattern is LOG_MANIFEST else log_file_name(step, match.group(2))
    return step if name == canonical else None


def _write_durably(path: Path, data: bytes) -> None:
    """Write `data` to `path` and fsync it (the caller renames it into place)."""
    with open(path, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def _fsync_folder(folder: Path) -> None:
    """Make the renames inside `folder` durable (where the platform allows opening a folder)."""
    try:
        handle = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(handle)
    except OSError:
        pass
    finally:
        os.close(handle)


def parquet_bytes(records: list) -> bytes:
    """Records of one kind as the bytes of one Parquet file (their fields as columns)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pylist([asdict(r) for r in records]), sink)
    return sink.getvalue().to_pybytes()


def last_logged_step(folder: Path, before: int) -> int | None:
    """The greatest step below `before` whose manifest is in `folder` (None: none), as a resumed run finds it."""
    steps = [_log_step(LOG_MANIFEST, p.name) for p in folder.glob("step-*.json")] if folder.is_dir() else []
    earlier = [s for s in steps if s is not None and s < before]
    return max(earlier) if earlier else None


def write_log_step(folder: Path, step: int, records: list, policies: dict, previous: int | None = None,
                   clock: int | None = None, limits: Limits = Limits()) -> list[Path]:
    """Write one step of the experience log; returns its files, the manifest last.

    Every Parquet file is written to a temporary name and fsynced; the step's old manifest (a resumed run
    rewriting the step) is removed, the files are renamed into place, files of the step no longer written are
    removed, and the manifest (each file's sha256 and record count, the policies' specs, the limits and clock
    the records were accepted under, the step of the log's previous manifest) is written and renamed last. A
    crash anywhere leaves the step without a manifest, which `replay` reports as torn; on an error every
    temporary file is removed and the error propagates."""
    folder.mkdir(parents=True, exist_ok=True)
    by_kind = {kind: [r for r in records if r.kind == kind] for kind in KINDS}
    payloads = {log_file_name(step, kind): parquet_bytes(rows) for kind, rows in by_kind.items() if rows}
    files = {log_file_name(step, kind): {"sha256": hashlib.sha256(payloads[log_file_name(step, kind)]).hexdigest(),
                                         "records": len(rows)} for kind, rows in by_kind.items() if rows}
    manifest = {"step": step, "previous": previous, "clock": step if clock is None else clock, "files": files,
                "limits": asdict(limits), "policies": {k: asdict(v) for k, v in sorted(policies.items())}}
    payloads[manifest_name(step)] = json.dumps(manifest, indent=1, sort_keys=True).encode()
    temporaries = {name: folder / f".{name}.tmp" for name in payloads}
    try:
        for name, data in payloads.items():
            _write_durably(temporaries[name], data)
        (folder / manifest_name(step)).unlink(missing_ok=True)
        for name in payloads:
            if name != manifest_name(step):
                os.replace(temporaries[name], folder / name)
        for kind in KINDS:
            if log_file_name(step, kind) not in payloads:
                (folder / log_file_name(step, kind)).unlink(missing_ok=True)
        _fsync_folder(folder)
        os.replace(temporaries[manifest_name(step)], folder / manifest_name(step))
        _fsync_folder(folder)
    finally:
        for temporary in temporaries.values():
            temporary.unlink(missing_ok=True)
    return [folder / name for name in payloads]


def _manifest_error(path: Path, what: str) -> ExperienceLogError:
    return ExperienceLogError(f"{path}: {what}")


def read_manifest(path: Path, step: int) -> dict:
    """A step's manifest, checked: ExperienceLogError naming the file if it is unreadable or malformed (its step,
    file names of this step only, sha256 and record counts, policies, limits, clock, previous step)."""
    try:
        manifest = json.loads(path.read_bytes())
    except (OSError, ValueError) as err:
        raise _manifest_error(path, f"the manifest is unreadable ({err})") from None
    if not isinstance(manifest, dict) or manifest.get("step") != step or type(manifest.get("step")) is not int:
        raise _manifest_error(path, f"not a manifest of step {step}")
    files, policies = manifest.get("files"), manifest.get("policies")
    if not isinstance(files, dict) or not isinstance(policies, dict):
        raise _manifest_error(path, "'files' and 'policies' must be objects")
    for name, entry in files.items():
        if _log_step(LOG_FILE, name) != step:
            raise _manifest_error(path, f"lists {shown(name)}, not a file name of step {step}")
        if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str) or \
                not SHA256.fullmatch(entry["sha256"]) or type(entry.get("records")) is not int or entry["records"] < 0:
            raise _manifest_error(path, f"the entry of {name} needs a sha256 (64 hex digits) and a record count")
    try:
        manifest["policies"] = {str(k): PolicySpec(**v) for k, v in policies.items()}
        manifest["limits"] = Limits(**manifest["limits"]) if "limits" in manifest else None
    except TypeError as err:
        raise _manifest_error(path, f"bad policies or limits ({err})") from None
    clock, previous = manifest.setdefault("clock", step), manifest.get("previous")
    if type(clock) is not int or clock < 0:
        raise _manifest_error(path, f"clock {shown(clock)} is not a step (an int >= 0)")
    if previous is not None and (type(previous) is not int or not 0 <= previous < step):
        raise _manifest_error(path, f"previous step {shown(previous)} is not a step before this one")
    return manifest


def read_log_index(folder: Path) -> dict[int, dict]:
    """{step: checked manifest} of a log, after checking what needs no file contents: every data file of the log
    is listed by its step's manifest (else the step is torn), every listed file exists, and each manifest's
    previous step is the manifest before it (else a whole step was removed). Other files are ignored."""
    if not folder.is_dir():
        raise ExperienceLogError(f"{folder} is not a folder holding an experience log")
    names = {p.name for p in folder.iterdir()}
    manifests = {step: read_manifest(folder / name, step) for name in sorted(names)
                 if (step := _log_step(LOG_MANIFEST, name)) is not None}
    listed = {name for manifest in manifests.values() for name in manifest["files"]}
    unlisted = sorted(name for name in names if _log_step(LOG_FILE, name) is not None and name not in listed)
    torn = [name for name in unlisted if _log_step(LOG_FILE, name) not in manifests]
    if torn:
        raise ExperienceLogError(f"{folder}: {torn} have no manifest (a write torn by a crash); their step was "
                                 f"never completed")
    if unlisted:
        raise ExperienceLogError(f"{folder}: {unlisted} are not listed in their step's manifest (written by "
                                 f"something other than this step's flush)")
    steps = sorted(manifests)
    for position, step in enumerate(steps):
        missing = sorted(set(manifests[step]["files"]) - names)
        if missing:
            raise ExperienceLogError(f"{folder / missing[0]} is listed in {manifest_name(step)} but missing")
        expected = steps[position - 1] if position else None
        if "previous" in manifests[step] and manifests[step]["previous"] != expected:
            previous = manifests[step]["previous"]
            raise ExperienceLogError(f"{folder / manifest_name(step)} follows step {previous}, but the log's step "
                                     f"before it is {expected}: " + ("a step was removed" if previous is not None
                                                                     and previous not in manifests else
                                                                     "two logs share this folder"))
    return manifests


def replay(log_dir: str | Path, limits: Limits | None = None) -> Iterator[tuple[int, object]]:
    """(step, record) for every record of an exchange log, in step order, each re-validated.

    The log's structure is checked before the first record (see `read_log_index`); then each file, as it is
    read, against its manifest's sha256 and record count, and each record by `validate` with the policies,
    clock and limits (`limits` overrides them) its manifest holds. Any failure raises ExperienceLogError naming
    the file: a missing, altered, truncated or unlisted file, a torn step, a removed step, an invalid record."""
    folder = Path(log_dir)
    for step, manifest in read_log_index(folder).items():
        for record in step_records(folder, step, manifest, limits):
            yield step, record


def read_log_step(log_dir: str | Path, step: int, limits: Limits | None = None) -> list | None:
    """The records of one step of an exchange log, each re-validated as `replay` does (ExperienceLogError naming
    the file otherwise), or None while the step's manifest is not on disk (a writer publishes it last, so a step
    is either complete or absent; another process may read a log while it is written)."""
    path = Path(log_dir) / manifest_name(step)
    if not path.exists():
        return None
    return list(step_records(Path(log_dir), step, read_manifest(path, step), limits))


def step_records(folder: Path, step: int, manifest: dict, limits: Limits | None = None) -> Iterator:
    """The records of one step whose manifest is checked: each file against its sha256 and record count, each
    record by `validate` under the manifest's policies, clock and limits (`limits` overrides them)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    checked_limits = limits or manifest["limits"] or Limits()
    for name, expected in sorted(manifest["files"].items()):
        path = folder / name
        try:
            data = path.read_bytes()
        except OSError as err:
            raise ExperienceLogError(f"{path} is listed in {manifest_name(step)} but unreadable ({err})") from None
        if hashlib.sha256(data).hexdigest() != expected["sha256"]:
            raise ExperienceLogError(f"{path} does not match its checksum in {manifest_name(step)} "
                                     f"(altered or truncated)")
        try:
            rows = pq.read_table(pa.BufferReader(data)).to_pylist()
        except (pa.ArrowException, ValueError, OSError) as err:
            raise ExperienceLogError(f"{path} is not a readable Parquet file ({err})") from None
        if len(rows) != expected["records"]:
            raise ExperienceLogError(f"{path} holds {len(rows)} records; its manifest lists {expected['records']}")
        kind = LOG_FILE.fullmatch(name).group(2)
        for index, row in enumerate(rows):
            try:
                record = validate(RECORD_TYPES[kind](**row), manifest["policies"], manifest["clock"], checked_limits)
            except (InvalidExperience, TypeError) as err:
                raise ExperienceLogError(f"{path}, record {index}: {err}") from None
            yield record

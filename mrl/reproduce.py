"""Run every notebook of a profile with papermill and regenerate paper_tables/ and figures/.

    python -m mrl.reproduce --profile default        # this CPU: all tables and figures
    python -m mrl.reproduce --profile smoke          # CI budget; executed copies go to notebooks/smoke/

The default profile executes the notebooks in place: notebooks/NN_name.ipynb is committed with its outputs, figures
included, beside its jupytext twin NN_name.py (the source). Executed smoke notebooks are committed in notebooks/smoke/
(nbval re-runs them in `make test`), with the images of their inline figures dropped (the figure's text line stays)
to keep the repository light; executed copies of other profiles go to results/notebooks/<profile>/ (git-ignored).
A timing record of the whole run is written to results/reproduce-<profile>.json; a whole default-profile run also
commits it as paper_tables/reproduce_default.json and rewrites the README's generated blocks (the claims ledger,
the notebooks' times) from paper_tables/. `--block-part` runs the second registration's block in parts, each part's
time kept in that record (docs/reproducibility.md, A block in parts). `--cores N` sets the cores the warm-ups and
grid runs use (default: every core this process may use); `--ray ADDRESS` runs each of them as a Ray task of one CPU
on a cluster (docs/performance.md, On a Ray cluster).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from mrl.paths import BLOCK_RECORD
from mrl.profiles import PROFILES, load_profile
from mrl.reports.performance import update_performance
from mrl.reports.provenance import update_provenance
from mrl.reports.readme import RECORD, update_readme
from mrl.runtime.results import git_sha, machine, repo_root


def executed_dir(profile: str) -> Path:
    """Where a profile's executed notebooks go: the default profile's are the notebooks themselves (committed with
    their outputs, so a reader sees every table and figure), smoke's notebooks/smoke/, the others' results/."""
    root = repo_root()
    return {"default": root / "notebooks", "smoke": root / "notebooks" / "smoke"}.get(
        profile, root / "results" / "notebooks" / profile)


def run_notebook(name: str, profile: str, parameters: dict | None = None, log_output: bool = False) -> float:
    """Execute one notebook with papermill; returns its wall time in seconds.

    The default profile executes each notebook in place with its own defaults (no injected parameters cell, so the
    jupytext twin stays the notebook's source; the tour keeps its smoke zoo) and keeps its figures; smoke's copies
    keep only the figures' text lines."""
    import papermill

    source = repo_root() / "notebooks" / name
    target = executed_dir(profile) / name
    target.parent.mkdir(parents=True, exist_ok=True)
    in_place = profile == "default" and not parameters
    running = target.with_name(f".{target.stem}.running.ipynb")   # a failed run leaves the notebook as it was
    start = time.perf_counter()
    try:
        papermill.execute_notebook(str(source), str(running),
                                   parameters={} if in_place else {"profile": profile, **(parameters or {})},
                                   cwd=str(target.parent), kernel_name="python3", progress_bar=False,
                                   log_output=log_output)
        seconds = time.perf_counter() - start
        tidy_outputs(running, keep_images=profile != "smoke")
        os.replace(running, target)
    finally:
        running.unlink(missing_ok=True)
    return seconds


def tidy_outputs(path: Path, keep_images: bool) -> None:
    """Rewrite an executed notebook in place without what changes run to run or bloats it: papermill's and the
    kernel's timing metadata, empty tag lists, embedded PDFs, and (keep_images=False) every image (their text/plain
    line stays)."""
    import nbformat

    notebook = nbformat.read(path, as_version=4)
    notebook.metadata.pop("papermill", None)
    notebook.metadata.pop("widgets", None)
    for cell in notebook.cells:
        for key in ("papermill", "execution"):
            cell.metadata.pop(key, None)
        if cell.metadata.get("tags") == []:
            del cell.metadata["tags"]
        for output in cell.get("outputs", []):
            for mime in [m for m in output.get("data", {})
                         if m == "application/pdf" or (m.startswith("image/") and not keep_images)]:
                del output["data"][mime]
    nbformat.write(notebook, path)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", choices=PROFILES, default="default")
    parser.add_argument("--only", nargs="*", default=None, help="notebook name prefixes to run, e.g. 00 10")
    parser.add_argument("--log-output", action="store_true", help="stream notebook output to this terminal")
    parser.add_argument("--block-part", action="store_true",
                        help="run what the second registration's record lacks (docs/registration_claims.md), "
                             "recording the part's time; no notebook runs")
    parser.add_argument("--cores", type=int, metavar="N",
                        help="cores the warm-ups and grid runs use (default: this process's CPU affinity and cgroup "
                             "quota; mrl.runtime.capacity)")
    parser.add_argument("--ray", metavar="ADDRESS",
                        help="run every warm-up and grid run as a Ray task of one CPU on the cluster at ADDRESS "
                             "(a Ray address, 'auto' or ray://host:port), or 'local' for a Ray instance on this "
                             "machine only (docs/performance.md, On a Ray cluster)")
    args = parser.parse_args(argv)
    if args.cores is not None and args.cores < 1:
        parser.error(f"--cores {args.cores} is not allowed; expected an integer >= 1")
    if args.ray is not None:
        from mrl.runtime.cluster import checked_address

        try:
            checked_address(args.ray, "--ray")
        except ValueError as err:
            parser.error(str(err))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    scale_out(args.cores, args.ray)
    if args.block_part:
        return block_part(args.profile)
    notebooks = [f"{stem}.ipynb" for stem in load_profile(args.profile).notebooks]
    unknown = [p for p in args.only or () if not any(n.startswith(p) for n in notebooks)]
    if unknown or args.only == []:
        parser.error(f"--only {' '.join(unknown) or '(nothing)'}: each value must be the start of a notebook name "
                     f"of the {args.profile} profile: {[n.removesuffix('.ipynb') for n in notebooks]}")
    selected = [n for n in notebooks if args.only is None or any(n.startswith(p) for p in args.only)]
    record = {"profile": args.profile, "git_sha": git_sha(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
              "machine": machine(), "notebooks": {}}
    total = time.perf_counter()
    for name in selected:
        print(f"[mrl.reproduce] {args.profile}: running {name} ...", flush=True)
        seconds = run_notebook(name, args.profile, log_output=args.log_output)
        record["notebooks"][name] = round(seconds, 1)
        print(f"[mrl.reproduce] {name} done in {seconds:.0f} s", flush=True)
    record["total_seconds"] = round(time.perf_counter() - total, 1)
    suffix = "" if args.only is None else "-only-" + "-".join(n.split("_")[0] for n in selected)
    out = repo_root() / "results" / f"reproduce-{args.profile}{suffix}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2))
    print(f"[mrl.reproduce] {args.profile} finished in {record['total_seconds']:.0f} s; record in {out}")
    if args.profile == "default":
        publish_default(record, whole=args.only is None)
    return 0


def scale_out(cores: int | None, ray_address: str | None) -> None:
    """Where this process and every notebook kernel it starts (which inherit its environment) run their warm-ups and
    grid runs: `cores` of this machine (MRL_CORES), and the Ray cluster at `ray_address` (MRL_RAY_ADDRESS); for
    'local', a Ray instance this process starts on this machine alone (loopback only, no dashboard), which the
    kernels join and which ends with this process."""
    from mrl.runtime.capacity import CORES_ENV
    from mrl.runtime.cluster import ADDRESS_ENV, LOCAL, connect

    if cores is not None:
        os.environ[CORES_ENV] = str(cores)
    if ray_address == LOCAL:
        import ray

        connect(LOCAL)
        ray_address = ray.get_runtime_context().gcs_address
    if ray_address is not None:
        os.environ[ADDRESS_ENV] = ray_address


def block_part(profile: str) -> int:
    """One part of the second registration's block (run_claims_block into BLOCK_RECORD), its times kept in the
    reproduce record (the default profile's: paper_tables/RECORD; another's: results/) after every chunk."""
    from mrl.experiments.heldout import run_claims_block   # imports torch: only when a part runs
    from mrl.reports.claims_registration import registered_stamp

    config = load_profile(profile)
    if config.heldout.confirmatory_claims is None:
        print(f"[mrl.reproduce] the {profile} profile has no confirmatory_claims block")
        return 1
    try:
        registered = registered_stamp(config, repo_root() / "docs" / "registration_claims.md")
    except ValueError as err:
        print(f"[mrl.reproduce] refused: {err}")
        return 1
    path = repo_root() / ("paper_tables" if profile == "default" else "results") / \
        (RECORD if profile == "default" else f"reproduce-{profile}.json")
    part = {"git_sha": git_sha(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": machine(),
            "runs_added": 0, "seconds": 0.0}
    start = time.perf_counter()

    def keep_time(chunk) -> None:
        part["runs_added"] += len(chunk)
        part["seconds"] = round(time.perf_counter() - start, 1)
        part["last_chunk"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        record = json.loads(path.read_text()) if path.exists() else {"profile": profile}
        parts = [p for p in record.get("block_parts", []) if p["started"] != part["started"]]
        record["block_parts"] = [*parts, dict(part)]
        path.write_text(json.dumps(record, indent=2) + "\n")
        if profile == "default":   # its generated table lists the parts
            update_provenance(repo_root() / "docs" / "provenance.md", repo_root() / "paper_tables")

    run_claims_block(config, repo_root() / BLOCK_RECORD, progress=True, stamp=registered, after_chunk=keep_time)
    print(f"[mrl.reproduce] block part done: {part['runs_added']} runs added in {time.perf_counter() - start:.0f} s")
    return 0


def machine_kind(machine: dict) -> tuple:
    """What two runs' times need in common to be compared: the CPU's name, its cores and the numerics mode."""
    return machine.get("cpu"), machine.get("cpus"), machine.get("numerics", {}).get("mode")


def merged_record(committed: dict, partial: dict) -> dict | None:
    """The committed whole run's record with a partial run's notebook times in place of its own, the total summed
    again and the partial run listed under "reruns" (its notebooks, SHA, start and machine); None where the partial
    run ran on another kind of CPU or numerics than the record names (its times would not compare)."""
    if machine_kind(committed.get("machine", {})) != machine_kind(partial.get("machine", {})):
        return None
    notebooks = {**committed["notebooks"], **partial["notebooks"]}
    rerun = {key: partial[key] for key in ("git_sha", "started", "machine")} | {"notebooks": list(partial["notebooks"])}
    return {**committed, "notebooks": notebooks, "total_seconds": round(sum(notebooks.values()), 1),
            "reruns": [*committed.get("reruns", []), rerun]}


def publish_default(record: dict, whole: bool) -> None:
    """After a default-profile run: a whole run's record is committed beside the tables (the README's notebook
    times come from it); a partial run's times replace those of its notebooks in the committed record
    (merged_record) when it ran on the same kind of machine. Then the generated blocks of the README and
    docs/performance.md are rewritten from the tables (mrl.reports.readme, mrl.reports.performance)."""
    tables = repo_root() / "paper_tables"
    path = tables / RECORD
    if not whole and path.exists():
        record = merged_record(json.loads(path.read_text()), record)
        if record is None:
            print(f"[mrl.reproduce] {RECORD} kept: this run's machine differs from the one it records")
    if record is not None and (whole or path.exists()):
        path.write_text(json.dumps(record, indent=2) + "\n")
    if update_readme(repo_root() / "README.md", tables):
        print("[mrl.reproduce] README.md: generated blocks rewritten from paper_tables/")
    if update_performance(repo_root() / "docs" / "performance.md", tables):
        print("[mrl.reproduce] docs/performance.md: generated blocks rewritten from paper_tables/")
    if update_provenance(repo_root() / "docs" / "provenance.md", tables):
        print("[mrl.reproduce] docs/provenance.md: generated block rewritten from paper_tables/")


if __name__ == "__main__":
    sys.exit(main())

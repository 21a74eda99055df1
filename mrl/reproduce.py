"""Run every notebook of a profile with papermill and regenerate paper_tables/ and figures/.

    python -m mrl.reproduce --profile default        # this CPU: all tables and figures
    python -m mrl.reproduce --profile smoke          # CI budget; executed copies go to notebooks/smoke/

Executed smoke notebooks are committed (nbval re-runs them in `make test`), with the images of their inline
figures dropped (the figure's text line stays) to keep the repository light; executed copies of other
profiles go to results/notebooks/<profile>/ (git-ignored), figures included. A timing record of the whole
run is written to results/reproduce-<profile>.json.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from mrl.profiles import PROFILES, load_profile
from mrl.results import git_sha, machine, repo_root


def executed_dir(profile: str) -> Path:
    root = repo_root()
    return root / "notebooks" / "smoke" if profile == "smoke" else root / "results" / "notebooks" / profile


def run_notebook(name: str, profile: str, parameters: dict | None = None, log_output: bool = False) -> float:
    """Execute one notebook with papermill; returns its wall time in seconds."""
    import papermill

    source = repo_root() / "notebooks" / name
    target = executed_dir(profile) / name
    target.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    papermill.execute_notebook(str(source), str(target), parameters={"profile": profile, **(parameters or {})},
                               cwd=str(target.parent), kernel_name="python3", progress_bar=False,
                               log_output=log_output)
    seconds = time.perf_counter() - start
    if profile == "smoke":
        drop_images(target)
    return seconds


def drop_images(path: Path) -> None:
    """Remove image data from a notebook's outputs in place (their text/plain line stays)."""
    import nbformat

    notebook = nbformat.read(path, as_version=4)
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            for mime in [m for m in output.get("data", {}) if m.startswith("image/") or m == "application/pdf"]:
                del output["data"][mime]
    nbformat.write(notebook, path)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", choices=PROFILES, default="default")
    parser.add_argument("--only", nargs="*", default=None, help="notebook name prefixes to run, e.g. 00 10")
    parser.add_argument("--log-output", action="store_true", help="stream notebook output to this terminal")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
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
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Bit-identity evidence for a refactor of code the registered runs depend on: one warm-up of each registered block,
run on two commits, compared bit for bit.

    python benchmarks/refactor_identity.py run --out tmp/identity_before.json      # on the commit before
    python benchmarks/refactor_identity.py run --out tmp/identity_after.json       # on the refactor
        [--zoo-fingerprint HEX]   # from the zoos the commit before used, where the refactor moved ZOO_MODULES' code
    python benchmarks/refactor_identity.py compare tmp/identity_before.json tmp/identity_after.json
    python benchmarks/refactor_identity.py check tmp/identity_after.json     # the committed rows only
    python benchmarks/refactor_identity.py smoke CHECKOUT_BEFORE CHECKOUT_AFTER   # after make reproduce PROFILE=smoke

`run` computes, in this checkout and with the default profile, every run of the first warm-up of the first
registration's block (heldout.confirmatory, docs/registration.md) and of the second's (heldout.confirmatory_claims,
docs/registration_claims.md), each into its trained folder (the run cache keeps numbers, not weights), and writes
for each run: its step rows (loss, grad norm, rewards, ... without the wall times and memory peaks, which are not
numbers of the run), its evaluation rows, the sha256 of each trained policy's weights, and the sha256 of each zoo
member's weights it started from. `smoke` compares two checkouts' smoke outputs: every file of results/smoke and of each notebook's folder byte for
byte (the tables whose content is a wall time apart), the step rows but their wall-time columns, the zoo members'
and trained policies' weights, and each executed smoke notebook's outputs cell by cell (it names the cells that
differ, for a person to read: wall times, progress bars). `compare` names every run whose rows or hashes differ
(exit 1), and checks the
second file's evaluations against the committed per-run rows: the second registration's record
(paper_tables/confirmatory_claims_record/evals.csv, matched by label) and the first registration's endpoint values
(paper_tables/confirmatory_runs.csv, overall). It runs only what this script imports from mrl, so it runs on both
commits.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
NOT_NUMBERS = ("_seconds", "_peak_gb")
"""step-row columns that are the machine's, not the run's: wall times and memory peaks"""


def weights_hash(folder: Path) -> str:
    """sha256 over a transformers folder's weight files (*.safetensors, *.bin), in name order."""
    digest = hashlib.sha256()
    for path in sorted([*folder.glob("*.safetensors"), *folder.glob("*.bin")]):
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()


def block_runs(config, block: str) -> list:
    """(label, Run) of the first warm-up of a registered block (its zoo built when missing), with
    runner.save_policies on: each run leaves its trained policies in its trained folder (not part of its numbers, so
    not of its key)."""
    from mrl.experiments import heldout

    held = config.experiments["heldout"]
    field = "confirmatory" if block == "confirmatory" else "confirmatory_claims"
    registered = getattr(held, field)
    first = dataclasses.replace(registered, zoo_seeds=registered.zoo_seeds[:1])
    config = dataclasses.replace(config, experiments={**config.experiments,
                                                      "heldout": dataclasses.replace(held, **{field: first})})
    heldout.heldout_zoos(config, True, first.zoo_seeds)
    labelled = heldout.confirmatory_runs(config) if block == "confirmatory" else heldout.claims_block_runs(config)
    return [(label, run.with_runner(save_policies=True)) for label, run in labelled]


def run_block(config, block: str, processes: int) -> dict:
    """{run label: its rows and hashes} of the first warm-up of `block` (block_runs), computed afresh in `processes`
    packed processes."""
    from mrl.experiments.runs import run_one, run_packed, trained_folder

    labelled = block_runs(config, block)
    run_packed([run for _, run in labelled], processes, recompute=True)
    out = {}
    for label, run in labelled:
        steps, evals = run_one(run)
        name = f"{block} {label['probe']} seed {label['seed']} zoo {label['zoo_seed']}"
        out[name] = {"label": {k: str(v) for k, v in label.items()},
                     "steps": steps[[c for c in steps.columns if not c.endswith(NOT_NUMBERS)]].to_dict("records"),
                     "evals": evals.to_dict("records"),
                     "weights": {policy: weights_hash(trained_folder(run) / policy) for policy in run.paths},
                     "zoo": {policy: weights_hash(Path(path)) for policy, path in run.paths.items()}}
    return out


def run(args) -> int:
    from mrl.profiles import load_profile

    if args.zoo_fingerprint:   # the zoos the commit before built and used, whatever this commit's zoo code hashes to
        import mrl.fingerprint
        import mrl.runtime.zoo

        for module in (mrl.fingerprint, mrl.runtime.zoo):
            if hasattr(module, "zoo_fingerprint"):
                module.zoo_fingerprint = lambda: args.zoo_fingerprint

    config = load_profile("default")
    found = {}
    for block in ("confirmatory", "claims"):
        found.update(run_block(config, block, args.processes))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(found, indent=1, sort_keys=True, default=str))
    print(f"{len(found)} runs -> {args.out}")
    return 0


def committed_differences(after: dict) -> list[str]:
    """The runs of `after` whose evaluations differ from the committed per-run rows of their registration."""
    from mrl.reports.claims import endpoint_values

    wrong = []
    record = ROOT / "paper_tables" / "confirmatory_claims_record"
    keys = pd.read_csv(record / "runs.csv")
    recorded = pd.read_csv(record / "evals.csv").merge(keys[["key", "probe", "seed", "zoo_seed"]], on="key")
    first = pd.read_csv(ROOT / "paper_tables" / "confirmatory_runs.csv", dtype={"pairing": str, "probe": str})
    for name, found in after.items():
        label, evals = found["label"], pd.DataFrame(found["evals"])
        if name.startswith("claims"):
            want = recorded[(recorded.probe == label["probe"]) & (recorded.seed == int(label["seed"]))
                            & (recorded.zoo_seed == int(label["zoo_seed"]))]
            columns = ["step", "policy", "split", "skill", "accuracy"]
            got = evals[columns].sort_values(columns[:4]).reset_index(drop=True)
            if not got.equals(want[columns].sort_values(columns[:4]).reset_index(drop=True)):
                wrong.append(f"{name}: evaluations differ from the record's")
        else:
            evals = evals.assign(**{k: label[k] for k in ("pairing", "probe")}, seed=int(label["seed"]),
                                 zoo_seed=int(label["zoo_seed"]))
            got = endpoint_values(evals).set_index(["policy"]).overall
            want = first[(first.probe == label["probe"]) & (first.seed == int(label["seed"]))
                         & (first.zoo_seed == int(label["zoo_seed"]))].set_index("policy").overall
            if not got.sort_index().equals(want.sort_index()):
                wrong.append(f"{name}: overall endpoint {got.to_dict()} != committed {want.to_dict()}")
    return wrong


def compare(args) -> int:
    before, after = (json.loads(Path(p).read_text()) for p in (args.before, args.after))
    wrong = [f"{name}: only in one file" for name in sorted(set(before) ^ set(after))]
    for name in sorted(set(before) & set(after)):
        for part in ("steps", "evals", "weights", "zoo"):
            if before[name][part] != after[name][part]:
                wrong.append(f"{name}: {part} differ")
    wrong += committed_differences(after)
    print(f"{len(set(before) & set(after))} runs compared (steps, evaluations, trained weights, zoo weights) and "
          f"checked against the committed per-run rows: " + ("bit for bit identical" if not wrong else
                                                              f"{len(wrong)} differences"))
    print("\n".join(wrong))
    return 1 if wrong else 0


def check(args) -> int:
    """The runs of one file against the committed per-run rows (committed_differences): the evaluations the
    registered code computed, without a run of the commit before."""
    after = json.loads(Path(args.after).read_text())
    wrong = committed_differences(after)
    print(f"{len(after)} runs checked against the committed per-run rows: "
          + ("bit for bit identical" if not wrong else f"{len(wrong)} differences"))
    print("\n".join(wrong))
    return 1 if wrong else 0


WALL_TIME_FILES = ("beyond_scaling", "beyond_marginal_cost", "beyond_marginal_training", "mwra_compute",
                   "mwra_timeline", "timeline.csv", "meta.json", "run.json", "README.md")
"""smoke outputs whose content is a wall time, a date or a commit (beyond_marginal_training: its update seconds)"""


def smoke_files(root: Path) -> dict[str, Path]:
    """{path relative to the checkout: path} of the smoke run's outputs: results/smoke and each notebook's folder,
    but the step rows (compared without their wall times)."""
    found = [*root.glob("results/smoke/**/*"), *root.glob("results/[0-9]*/smoke-seed0/**/*")]
    return {str(p.relative_to(root)): p for p in found if p.is_file() and p.name != "steps.csv"}


def weights_by_family(root: Path) -> list[tuple[str, str, str]]:
    """(task, family, weights hash) of every zoo member under the checkout's data/models, sorted: folder names carry
    the zoo code's fingerprint, which a refactor may move."""
    return sorted((p.parent.parent.name, p.parent.name.split("-")[0], weights_hash(p.parent))
                  for p in root.glob("data/models/*/*/model.safetensors"))


def notebook_outputs(path: Path) -> list[str]:
    """Each code cell's outputs of an executed notebook as text (streams, plain text, Markdown, HTML)."""
    import nbformat

    texts = []
    for cell in nbformat.read(path, 4).cells:
        if cell.cell_type == "code":
            parts = [o.get("text", "") if o.output_type == "stream" else
                     "".join(o.get("data", {}).get(kind, "") for kind in ("text/plain", "text/markdown", "text/html"))
                     for o in cell.get("outputs", [])]
            texts.append("".join(parts))
    return texts


def smoke(args) -> int:
    before, after = Path(args.before), Path(args.after)
    files_before, files_after = smoke_files(before), smoke_files(after)
    wrong = [f"{name}: only in one checkout" for name in sorted(set(files_before) ^ set(files_after))]
    same, timed = 0, 0
    for name in sorted(set(files_before) & set(files_after)):
        if files_before[name].read_bytes() == files_after[name].read_bytes():
            same += 1
        elif any(part in name for part in WALL_TIME_FILES):
            timed += 1
        else:
            wrong.append(f"{name}: differs")
    rows = 0
    for path in sorted(before.glob("results/[0-9]*/smoke-seed0/**/steps.csv")):
        mine, theirs = pd.read_csv(path), pd.read_csv(after / path.relative_to(before))
        numbers = [c for c in mine.columns if not c.endswith(NOT_NUMBERS)]
        rows += len(mine)
        if list(mine.columns) != list(theirs.columns) or not mine[numbers].equals(theirs[numbers]):
            wrong.append(f"{path.relative_to(before)}: step rows differ")
    if weights_by_family(before) != weights_by_family(after):
        wrong.append("zoo weights differ")
    trained = [sorted(weights_hash(p) for p in root.glob("results/trained/*") if p.is_dir()) for root in (before, after)]
    if trained[0] != trained[1]:
        wrong.append("trained weights differ")
    cells = []
    for path in sorted(before.glob("notebooks/smoke/*.ipynb")):
        pairs = zip(notebook_outputs(path), notebook_outputs(after / path.relative_to(before)))
        cells += [f"{path.name} cell {i}" for i, (a, b) in enumerate(pairs) if a != b]
    print(f"smoke outputs compared: {same} files byte-identical, {timed} wall-time files differ, {rows} step rows, "
          f"{len(weights_by_family(before))} zoo members, {len(trained[0])} trained runs: "
          + ("identical but wall times" if not wrong else f"{len(wrong)} differences"))
    print("\n".join(wrong))
    print(f"notebook cells whose outputs differ ({len(cells)}; read them: wall times, progress bars and object "
          f"addresses may differ): {', '.join(cells) or 'none'}")
    return 1 if wrong else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    ran = commands.add_parser("run", help="run one warm-up of each registered block into a JSON file")
    ran.add_argument("--out", required=True)
    ran.add_argument("--processes", type=int, default=2)
    ran.add_argument("--zoo-fingerprint", help="run from the zoos cached under this zoo fingerprint (the commit "
                     "before's, mrl.fingerprint.zoo_fingerprint) where this commit's zoo code hashes otherwise")
    compared = commands.add_parser("compare", help="compare two files of `run`")
    compared.add_argument("before")
    compared.add_argument("after")
    checked = commands.add_parser("check", help="check one file of `run` against the committed per-run rows only")
    checked.add_argument("after")
    smoked = commands.add_parser("smoke", help="compare two checkouts' outputs of make reproduce PROFILE=smoke")
    smoked.add_argument("before")
    smoked.add_argument("after")
    args = parser.parse_args(argv)
    return {"run": run, "compare": compare, "check": check, "smoke": smoke}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())

"""Where results go and what they record: run folders, tables (md/csv/tex) and figures (png/pdf).

Every run folder records the config, the seed, the git SHA (and whether the tree was dirty) and
the library versions. The default profile writes tables to `paper_tables/` and figures to `figures/`
(committed); every other profile writes them under `results/<profile>/` (git-ignored), so a run of smoke, full or
paper never overwrites the committed tables.

The run cache (results/runs/<key>/) is written whole or not at all: a run is computed in a work folder of its process,
renamed into place (the first rename of a key wins), and read only where run.json's checksums match its files
(read_run)."""
from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import re
import shutil
import subprocess
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from mrl import numerics
from mrl.core.probes import as_probe_config, probe_label
from mrl.core.validation import to_dict
from mrl.runtime.experience_log import LOG_MANIFEST
from mrl.paths import repo_root  # noqa: F401  (re-exported: notebooks import mrl.runtime.results.repo_root)

if TYPE_CHECKING:
    import pandas as pd


def git_sha(root: Path | None = None) -> str:
    """HEAD's SHA, with '-dirty' when tracked files changed; 'unknown' outside git."""
    root = root or repo_root()
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


COMMITTED_PROFILE = "default"
"""the one profile whose tables and figures are committed (paper_tables/, figures/)"""


def output_dirs(profile: str) -> tuple[Path, Path]:
    """(tables folder, figures folder) of a profile: paper_tables/ and figures/ for the default profile, else
    results/<profile>/paper_tables/ and results/<profile>/figures/."""
    root = repo_root()
    if profile != COMMITTED_PROFILE:
        return root / "results" / profile / "paper_tables", root / "results" / profile / "figures"
    return root / "paper_tables", root / "figures"


NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
"""/proc/cpuinfo flags of a CPU that computes bf16 dot products itself (oneDNN emulates them without)"""


def machine(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict:
    """The processor the numbers come from and the numerics they were computed under: {"cpu": model name, "cpus":
    the cores this process may use, "cpu_capability": the kernels torch runs (AVX2 under the contract),
    "native_bf16": bool, "numerics": mrl.numerics.state()}. Under the portable contract fp32 runs are bit-identical
    on every x86-64 CPU with AVX2; bf16 autocast is not (a CPU with AVX512-BF16 or AMX computes bf16 natively, with
    other roundings)."""
    import torch


    name, flags = platform.processor() or platform.machine(), set()
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                name = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
    return {"cpu": name, "cpus": len(os.sched_getaffinity(0)),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "native_bf16": any(flag in flags for flag in NATIVE_BF16_FLAGS), "numerics": numerics.state()}


def start_run(notebook: str, profile: str, config, seed: int, extra: dict | None = None) -> Path:
    """Create results/<notebook>/<profile>-seed<seed>/ with config.yaml and meta.json; returns it. Raises where the
    numerics contract was asked for and does not hold (mrl.numerics.require: torch ran before mrl was imported)."""
    import torch
    import transformers
    import trl


    numerics.require()

    folder = repo_root() / "results" / notebook / f"{profile}-seed{seed}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(to_dict(config), sort_keys=False))
    meta = {"notebook": notebook, "profile": profile, "seed": seed, "git_sha": git_sha(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "python": platform.python_version(),
            "torch": torch.__version__, "transformers": transformers.__version__, "trl": trl.__version__,
            "torch_threads": torch.get_num_threads(), "machine": machine(), **(extra or {})}
    (folder / "meta.json").write_text(json.dumps(meta, indent=2))
    return folder


LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                 "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}
LATEX_SYMBOLS = {"Δ": r"$\Delta$", "±": r"$\pm$", "×": r"$\times$", "≥": r"$\geq$", "≤": r"$\leq$",
                 "κ": r"$\kappa$", "λ": r"$\lambda$", "τ": r"$\tau$", "γ": r"$\gamma$", "δ": r"$\delta$",
                 "ω": r"$\omega$", "α": r"$\alpha$", "→": r"$\rightarrow$", "≈": r"$\approx$", "−": "-",
                 "·": r"$\cdot$"}
BOLD = re.compile(r"\*\*(.+?)\*\*")
CODE = re.compile(r"`([^`]+)`")


def latex_text(text) -> str:
    """Markdown-ish table text as LaTeX: special characters escaped, Greek and math symbols as math,
    **bold** as \\textbf, `code` as \\texttt. A character pdflatex cannot set raises ValueError naming it."""
    text = str(text).replace(">=", "≥").replace("<=", "≤")
    out = "".join(LATEX_SPECIAL.get(ch, LATEX_SYMBOLS.get(ch, ch)) for ch in text)
    out = CODE.sub(lambda m: r"\texttt{" + m.group(1) + "}", BOLD.sub(lambda m: r"\textbf{" + m.group(1) + "}", out))
    unknown = sorted({ch for ch in out if ord(ch) > 127})
    if unknown:
        raise ValueError(
            f"no LaTeX form for {unknown} in {str(text)[:80]!r}; add it to mrl.runtime.results.LATEX_SYMBOLS")
    return out


def listing(values) -> str:
    """A list as caption text: ['A+B'] -> 'A+B', [0, 1, 2] -> '0, 1, 2' (no Python reprs in tables)."""
    return ", ".join(str(v) for v in values)


def is_missing(value) -> bool:
    """None, NaN or pandas' NA (a scalar cell; shown as an empty cell, never as `<NA>`)."""
    import pandas as pd

    return value is None or (pd.api.types.is_scalar(value) and bool(pd.isna(value)))


def counts_as_floats(column) -> bool:
    """A float column that holds counts (every value whole, some above 1: rollouts, tokens), shown without decimals;
    accuracies and differences are never above 1 in magnitude, so they keep the float format."""
    values = column.dropna()
    return len(values) > 0 and bool((values == values.round()).all()) and bool((values.abs() > 1).any())


def write_table(df, name: str, folder: Path, caption: str = "", float_format: str = "{:.3f}") -> dict[str, Path]:
    """Write a DataFrame as name.md, name.csv and name.tex in `folder`; returns the paths.

    float_format: how float cells are shown in .md and .tex (the .csv keeps full precision), e.g. "{:.3f}"
    for accuracies on a few hundred prompts. The .tex is a complete `table` float (booktabs) whose text is
    escaped for LaTeX (`latex_text`) and which fits an A4 page (`latex_table`)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {ext: folder / f"{name}.{ext}" for ext in ("md", "csv", "tex")}
    df.to_csv(paths["csv"], index=False)
    formatted = df.astype(object).map(lambda v: "" if is_missing(v) else v)
    for column in df.columns:
        if df[column].dtype.kind == "f":
            shown = "{:.0f}" if counts_as_floats(df[column]) else float_format
            formatted[column] = df[column].map(lambda v: "" if is_missing(v) else shown.format(v))
    header = f"{caption}\n\n" if caption else ""
    paths["md"].write_text(header + formatted.to_markdown(index=False, disable_numparse=True) + "\n")
    paths["tex"].write_text(latex_table(formatted.map(latex_text), [latex_text(c) for c in df.columns],
                                        latex_text(caption) if caption else "", f"tab:{name}"))
    return paths


# Page geometry a table is fitted to: an A4 page with 2.5 cm margins at \small (9 pt Computer Modern)
LINE_WIDTH_CM = 16.0
LANDSCAPE_WIDTH_CM = 24.0   # an A4 page's text height at 2.5 cm margins: a sideways table's line
LANDSCAPE_FROM = 1.25       # a table wider than this many lines turns sideways rather than shrink below 80%
CHAR_CM = 0.16          # an average character at \small
COLUMN_GAP_CM = 0.28    # \tabcolsep = 4 pt on both sides
WRAP_CHARS = 28         # a text column whose cells are longer wraps at this width (a p column)
LATEX_MARKUP = re.compile(r"\\[a-zA-Z]+|[{}$]")


def shown_length(cell: str) -> int:
    """The characters a LaTeX cell shows, roughly: its text without commands, braces and math shifts."""
    return len(LATEX_MARKUP.sub("", cell))


def words_outside_braces(text: str) -> list[str]:
    """`text` split at the spaces outside braces, so "\\textbf{a b} c" gives ["\\textbf{a b}", "c"] (a header
    breaks over lines only between words LaTeX can end a line after)."""
    words, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {"{": 1, "}": -1}.get(char, 0)
        if char == " " and depth == 0:
            words.append(text[start:i])
            start = i + 1
    return [*words, text[start:]]


def latex_table(cells, headers: list[str], caption: str, label: str) -> str:
    r"""A booktabs `table` float that fits the page (LINE_WIDTH_CM), as LaTeX text; cells: a DataFrame of LaTeX
    strings. Numeric columns are right-aligned; a text column with cells longer than WRAP_CHARS wraps (a p column);
    a header longer than its column breaks over lines; a table wider than LANDSCAPE_FROM lines turns sideways (a
    `sidewaystable`, its line the page's height, so it is not shrunk to an unreadable size); a table still wider
    than its line is scaled to it (\resizebox). Needs \usepackage{array,booktabs,graphicx,rotating}."""
    numeric = re.compile(r"^(\\textbf\{)?[-+]?[\d.,/]+( \[[-+\d., ]+\])?\}?$")
    specs, widths, header_cells = [], [], []
    for column, header in zip(cells.columns, headers):
        values = [v for v in cells[column] if v != ""]
        width = max((shown_length(v) for v in values), default=1)
        right = bool(values) and all(numeric.match(v) for v in values)
        wraps = not right and width > WRAP_CHARS
        width = min(width, WRAP_CHARS) if wraps else width
        words, lines = words_outside_braces(header), [""]
        for word in words:   # the header broken into lines no wider than its column (at least 10 characters)
            if lines[-1] and shown_length(lines[-1] + " " + word) > max(width, 10):
                lines.append(word)
            else:
                lines[-1] = f"{lines[-1]} {word}".strip()
        width = max(width, *(shown_length(line) for line in lines))
        specs.append(f">{{\\raggedright\\arraybackslash}}p{{{width * CHAR_CM:.1f}cm}}" if wraps else
                     "r" if right else "l")
        align = "r" if right else "l"
        lines = ["{}" + line if line.startswith("[") else line for line in lines]   # not an optional [argument]
        header_cells.append(lines[0] if len(lines) == 1 else
                            f"\\begin{{tabular}}[b]{{@{{}}{align}@{{}}}}" + r" \\ {}".join(lines) + r"\end{tabular}")
        widths.append(width * CHAR_CM + COLUMN_GAP_CM)
    cells = cells.map(lambda cell: "{}" + cell if cell.startswith("[") else cell)   # not \\'s optional [length]
    body = [r"\begin{tabular}{" + "".join(specs) + "}", r"\toprule", " & ".join(header_cells) + r" \\",
            r"\midrule", *(" & ".join(row) + r" \\" for row in cells.itertuples(index=False)), r"\bottomrule",
            r"\end{tabular}"]
    float_env = "sidewaystable" if sum(widths) > LANDSCAPE_FROM * LINE_WIDTH_CM else "table"
    if sum(widths) > (LANDSCAPE_WIDTH_CM if float_env == "sidewaystable" else LINE_WIDTH_CM):
        body = [r"\resizebox{\linewidth}{!}{%", *body, "}"]
    head = [rf"\begin{{{float_env}}}", r"\centering", r"\small", r"\setlength{\tabcolsep}{4pt}"]
    if caption:
        head.append(rf"\caption{{{caption}}}")
    return "\n".join([*head, rf"\label{{{label}}}", *body, rf"\end{{{float_env}}}"]) + "\n"


def save_figure(fig, name: str, folder: Path):
    """Save a matplotlib figure as name.png (150 dpi) and name.pdf, without timestamps in the files, and return it.

    The figure is closed in pyplot, so a notebook cell that ends with this call shows it exactly once (the
    returned figure is displayed inline) and a long run keeps no open figures.
    """
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    save_png(fig, folder / f"{name}.png")
    fig.savefig(folder / f"{name}.pdf", bbox_inches="tight",
                metadata={"CreationDate": None, "Producer": None, "Creator": None})
    plt.close(fig)
    return fig


def save_png(fig, path: Path) -> None:
    """The figure as a PNG at 150 dpi, without a timestamp: what save_figure commits, and what a redraw is compared
    with byte for byte."""
    fig.savefig(path, dpi=150, bbox_inches="tight", metadata={"Software": None})


RUN_TABLES = ("evals", "steps", "events")

# --- the run cache: results/runs/<key>/, each entry published whole and read only when its checksums match ----------

RUN_FORMAT = 2
"""run.json's format: 2 records the sha256 of steps.csv, evals.csv and the experience log's index; 1 (before it)
recorded none, so a run of format 1 is recomputed (read_run refuses it) rather than read unchecked"""

CHECKED_TABLES = ("steps.csv", "evals.csv")


class RunCacheWarning(UserWarning):
    """A cached run that fails its checks (a torn, edited or unchecked file): never returned, recomputed instead."""


def experience_index_sha256(log: Path) -> str:
    """sha256 over an experience log's manifests (each one's name and bytes, in step order). A manifest holds its step
    files' sha256 and record counts (mrl.runtime.experience_log.read_manifest), so this covers the whole log."""
    digest = hashlib.sha256()
    for path in sorted(p for p in log.iterdir() if LOG_MANIFEST.fullmatch(p.name)):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def run_checksums(folder: Path) -> dict[str, str]:
    """{file: sha256} of a run folder's CHECKED_TABLES, and {"experience": its index's} where it keeps a log."""
    sums = {name: hashlib.sha256((folder / name).read_bytes()).hexdigest() for name in CHECKED_TABLES}
    if (folder / "experience").is_dir():
        sums["experience"] = experience_index_sha256(folder / "experience")
    return sums


@dataclass(frozen=True)
class CachedRun:
    """A finished run read from its cache folder, every file checked against run.json's checksums."""

    record: dict
    """run.json: the run's settings, counters, events, backend, git SHA, wall time and checksums"""
    steps: pd.DataFrame
    evals: pd.DataFrame


def read_run(folder: Path) -> CachedRun | None:
    """The run cached in `folder`; None when it holds no finished run (no run.json) or fails a check, which a
    RunCacheWarning names with the folder: run.json unreadable or of format 1 (no checksums), a table or the
    experience log's index that does not match its checksum (torn by a crash in a write, or edited). Each table is
    parsed from the very bytes that were checked. Its caller recomputes what it gets None for."""
    import pandas as pd

    path = folder / "run.json"
    if not path.exists():
        return None

    def refuse(why: str) -> None:
        warnings.warn(f"the cached run in {folder} is not read: {why}", RunCacheWarning, stacklevel=3)

    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        return refuse(f"its run.json is unreadable ({err})")
    sums = record.get("sha256") if isinstance(record, dict) else None
    if not isinstance(sums, dict) or record.get("format") != RUN_FORMAT:
        return refuse(f"its run.json (format {record.get('format', 1) if isinstance(record, dict) else '?'}) holds "
                      f"no checksums of format {RUN_FORMAT}")
    tables = {}
    for name in CHECKED_TABLES:
        try:
            data = (folder / name).read_bytes()
        except OSError as err:
            return refuse(f"{name} is unreadable ({err})")
        if hashlib.sha256(data).hexdigest() != sums.get(name):
            return refuse(f"{name} does not match its checksum in run.json (torn or edited)")
        tables[name] = pd.read_csv(io.BytesIO(data))
    if "experience" in sums:
        log = folder / "experience"
        if not log.is_dir() or experience_index_sha256(log) != sums["experience"]:
            return refuse("its experience log's manifests do not match their checksum in run.json")
    return CachedRun(record, tables["steps.csv"], tables["evals.csv"])


def write_run_record(folder: Path, record: dict) -> None:
    """run.json, the mark of a finished run, written last: `record` with the format and the checksums of the files
    already in `folder` (run_checksums)."""
    record = {"format": RUN_FORMAT, **record, "sha256": run_checksums(folder)}
    (folder / "run.json").write_text(json.dumps(record, indent=2, default=str))


def work_folder(folder: Path) -> Path:
    """Where this process computes the run cached in `folder`: results/runs/.partial/<key>-<pid>/ (its experience
    log, then its tables and run.json), renamed into place when the run ends (publish_run), so a crash leaves nothing
    under the key's own name and two processes computing one key never write into one folder."""
    return folder.parent / ".partial" / f"{folder.name}-{os.getpid()}"


def clear_work_folders(folder: Path) -> None:
    """Remove the work folders of `folder`'s key that no process will finish: this process's own (an earlier try) and
    those of processes that are gone (killed mid-run)."""
    for work in folder.parent.glob(f".partial/{folder.name}-*"):
        pid = work.name.rpartition("-")[2]
        if pid.isdigit() and (int(pid) == os.getpid() or not process_alive(int(pid))):
            shutil.rmtree(work, ignore_errors=True)


def process_alive(pid: int) -> bool:
    """A process of this id exists (signal 0 checks without sending) and is not a zombie (killed, its exit status
    not yet collected by its parent; Linux's /proc says so, elsewhere the signal's answer stands)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return True
    return state not in ("Z", "X")


def publish_run(work: Path, folder: Path, experience: bool = False) -> CachedRun | None:
    """Rename the finished `work` folder to `folder`; the rename decides between processes that computed the same
    key. None: this process's entry is in place. Else the entry another process published first, which passed its
    checks (read_run), is returned and `work` removed. An entry in the way that fails its checks (torn, edited, of
    format 1), or that lacks the experience log this one carries (experience=True: the same run, computed before
    without a log), is moved aside and removed first. A reader sees the old entry, none, or a new one whole. The
    .partial folder goes when it is left empty."""
    while True:
        try:
            os.rename(work, folder)
            cached = None
            break
        except OSError:   # `folder` is there: a rename never replaces a folder that holds files
            if not work.is_dir():
                raise
        cached = read_run(folder)
        if cached is not None and (not experience or cached.record.get("experience", False)):
            shutil.rmtree(work, ignore_errors=True)
            break
        aside = work.with_name(f"{work.name}.replaced")
        try:
            os.rename(folder, aside)
        except FileNotFoundError:
            continue   # another process moved it aside first
        shutil.rmtree(aside, ignore_errors=True)
    try:
        work.parent.rmdir()
    except OSError:
        pass   # another computation's work folder is in it
    return cached


def load_runs(folder: str | Path | None = None, table: str = "evals", as_dataset: bool = False):
    """Every cached run's rows of one table in one frame: `evals` (policy, step, split, skill, accuracy,
    rollouts), `steps` (policy, step, reward, loss, grad_norm, probe statistics, ...) or `events` (step, event),
    each row with its run's identity: run (the cache key), probe (label with changed knobs), seed, steps,
    policies ('A+B'), models (their checkpoint folders, which tell the zoos apart), task, backend and git_sha.

    folder: the run cache (default results/runs, where the notebooks' grids and `mrl run` write). Returns a
    pandas DataFrame, or a `datasets.Dataset` with as_dataset=True. A folder without a finished run (no
    run.json) is skipped, and so is one that fails its checks (read_run), with a RunCacheWarning naming it; no run at
    all gives an empty frame with the identity columns."""
    import pandas as pd

    if table not in RUN_TABLES:
        raise ValueError(f"table={table!r}: allowed values are {list(RUN_TABLES)}")
    root = Path(folder) if folder is not None else repo_root() / "results" / "runs"
    frames = []
    for run_json in sorted(root.glob("*/run.json")) if root.is_dir() else []:
        cached = read_run(run_json.parent)
        if cached is None:
            continue
        run = cached.record
        identity = {"run": run_json.parent.name, "probe": probe_label(as_probe_config(run["probe"])),
                    "seed": run["grpo"]["seed"], "steps": run["grpo"]["steps"],
                    "policies": "+".join(run["policies"]),
                    "models": " ".join(Path(path).name for path in run["policies"].values()),
                    "task": run["task"]["name"],
                    "backend": run.get("backend"), "git_sha": run.get("git_sha")}
        if table == "events":
            rows = pd.DataFrame(run.get("events", []), columns=None if run.get("events") else ["step", "event"])
        else:
            rows = cached.steps if table == "steps" else cached.evals
        frames.append(rows.assign(**identity))
    columns = ["run", "probe", "seed", "steps", "policies", "models", "task", "backend", "git_sha"]
    frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)
    frame = frame[columns + [c for c in frame.columns if c not in columns]]
    if as_dataset:
        import datasets

        return datasets.Dataset.from_pandas(frame, preserve_index=False)
    return frame

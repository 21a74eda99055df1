"""Every script in benchmarks/ still runs: each one, at a tiny size, exits 0 and prints its figure (most of them one
after another in one process, tests/run_benchmarks.py, the rest as a process each: OWN_PROCESS),
and every command the README and docs/performance.md show names a script and flags that exist (read from the
scripts' syntax trees).

What runs each file:
- the benchmarks with a --smoke flag (benchmarks/smoke.py's tiny zoo, GRPO step and test split, or the script's own
  small sizes) and the GPU benchmarks with their --cpu-check (a tiny stand-in on the CPU), each at its tiny size;
- import_graph.py as it is (it only parses mrl/'s syntax trees);
- gpu_first_run.py's --cpu-check builds stand-ins at the published widths and did not finish one step in minutes on
  a 2-core CPU: CI checks its imports and arguments (--help); MRL_BENCH_SLOW=1 runs its --cpu-check too;
- gpu_checks_43.sh, a shell script for a GPU machine: `bash -n` parses it.
The helper modules are covered by the scripts that import them: numerics_cost.py (bench_grpo_step, bench_rollout,
bench_warmup; its --numerics both path runs once, on bench_grpo_step, the cheapest of the three to run three times)
and smoke.py (every --smoke). Nothing here asserts a duration: a smoke run's figures mean nothing, only that they are
printed.
"""
from __future__ import annotations

import ast
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
TIMEOUT = 300
"""seconds a script may take before the test fails (no test hangs CI)"""

HELPERS = {"numerics_cost.py", "smoke.py"}
"""modules the scripts import, with no command of their own"""

CLUSTER_RUNS = {"simulated_cluster.py"}
"""scripts that tests/test_cluster.py runs (make test-cluster)"""

SMOKE_RUNS = {
    "bench_grpo_step.py": (["--smoke", "--numerics", "both"],
                           r"ratio mrl/TRL\s*:\s*\d+\.\d+(.|\n)*portable/native\n.* \d+\.\d+\s+\d+\.\d+\s+\d+\.\d+"),
    "bench_rollout.py": (["--smoke"], r"ratio hf / fast: sampling \d+\.\d+"),
    "bench_thl.py": (["--smoke"], r"THL share of the step .*: \d+\.\d%"),
    "bench_warmup.py": (["--smoke", "--zoo", "heldout", "--families", "A", "B", "--per-run"],
                        r"zoo build / run \d+\.\d"),
    "bench_probes.py": (["--smoke", "--probes", "grpo", "sgt", "xgrpo", "prp", "prp_naive"],
                        r"prp_naive\s+\d+\.\d ms/step .* ratio to grpo\s+\d+\.\d+"),
    "bench_packing.py": (["--smoke"], r"ratio packed / one at a time\s+\d+\.\d+"),
    "bench_mwra.py": (["--smoke", "--backends", "inline"], r"inline\s+loop\s+\d+\.\d+ s .*ratio to inline: \d"),
    "bench_zoo.py": (["--smoke"], r"zoo \(A, B, C\), \d+ workers, \d+\.\d s"),
    "sampler_mismatch.py": (["--smoke"], r"mean over steps:\n.*sampler_logp_diff_mean"),
    "plan_vs_measured.py": (["--smoke"], r"update\s+\d+\.\d+\s+\d+\.\d+\s+\d+\.\d+"),
    "marginal_gap.py": (["--smoke"], r"Cost: CPU milliseconds and ratio"),
    "import_graph.py": ([], r"longest chain of module-level imports: \d+ files"),
    "refactor_identity.py": (["smoke", ".", "."], r"smoke outputs compared: \d+ files byte-identical, 0 wall-time "
                                                 r"files differ, .*: identical but wall times"),
    "bench_gpu_rollout.py": (["--cpu-check", "--out", "{tmp}"], r"\| 64x8 +\| graphs +\|.*\d"),
    "bench_gpu_update.py": (["--cpu-check", "--out", "{tmp}"], r"\| 64x8 +\| chunked +\|.*\d"),
}
"""script -> (its arguments, a pattern its output must hold: the figure it exists to print); {tmp} is a fresh folder"""
OWN_PROCESS = {"bench_grpo_step.py", "bench_gpu_rollout.py", "bench_gpu_update.py"}
"""the runs that need a process of their own: --numerics both re-runs its script in two processes, whose output
does not pass through a shared process's captured stdout; the GPU scripts choose their numerics (MRL_NUMERICS=native)
before they import mrl. The others run one after another in one process (tests/run_benchmarks.py), which imports
mrl, torch and transformers once for all of them."""

SLOW_RUNS = {
    "arm_costs.py": (["--zoo-seed", "999", "--out", "{tmp}/arm_costs.json"], r"wrote .*arm_costs\.json"),
    "job_memory.py": (["--warmup-steps", "1", "--run-steps", "1", "--arms", "grpo", "--out", "{tmp}/job_memory.json"],
                      r"run grpo of A\+B.*: \d+ MiB(.|\n)*wrote .*job_memory\.json"),
    "gpu_first_run.py": (["--cpu-check", "--out", "{tmp}", "--policies", "C,A", "--steps", "1", "--prompts", "1",
                          "--eval-prompts", "1", "--engines", "generate,graphs"], r"tokens per second|tokens/s"),
}
"""runs too long for CI on a 2-core CPU: run when MRL_BENCH_SLOW=1"""

DOCUMENTS = ("README.md", "docs/performance.md")
COMMAND = re.compile(r"^\s*(?:(?:\.venv/bin/)?python\s+)?(benchmarks/[\w.]+\.py)(.*)$")
"""a shown command: an optional interpreter, then a benchmarks/ script and its arguments"""


def run_script(script: str, argv: list[str]) -> subprocess.CompletedProcess:
    """`python benchmarks/<script> argv` from the repository's root, one torch thread, its output captured."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, str(BENCHMARKS / script), *argv], cwd=ROOT, env=env, text=True,
                          capture_output=True, timeout=TIMEOUT)


def assert_prints_its_figure(script: str, argv: list[str], pattern: str, tmp_path: Path) -> None:
    """The script exits 0 and its standard output matches `pattern`."""
    argv = [arg.replace("{tmp}", str(tmp_path)) for arg in argv]
    done = run_script(script, argv)
    assert_printed(script, argv, pattern, done.returncode, done.stdout, done.stderr)


def assert_printed(script: str, argv: list[str], pattern: str, returncode: int, stdout: str, stderr: str = "") -> None:
    assert returncode == 0, f"{script} {' '.join(argv)} failed:\n{stdout[-3000:]}\n{stderr[-3000:]}"
    assert re.search(pattern, stdout), f"{script} printed no figure matching {pattern!r}:\n{stdout[-3000:]}"


@pytest.fixture(scope="module")
def shared_runs(tmp_path_factory) -> tuple[dict, dict]:
    """({script: argv}, {script: {"returncode", "stdout", "stderr"}}) of every SMOKE_RUNS entry outside OWN_PROCESS,
    run one after another in one process (tests/run_benchmarks.py; all of them, whichever tests are selected)."""
    folder = tmp_path_factory.mktemp("benchmarks")
    jobs = {script: [arg.replace("{tmp}", str(folder / script)) for arg in argv]
            for script, (argv, _) in sorted(SMOKE_RUNS.items()) if script not in OWN_PROCESS}
    out = folder / "runs.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "run_benchmarks.py"), str(out), json.dumps(jobs)],
                          cwd=ROOT, env=env, text=True, capture_output=True, timeout=3 * TIMEOUT)
    assert done.returncode == 0 and out.is_file(), f"tests/run_benchmarks.py failed:\n{done.stderr[-3000:]}"
    return jobs, json.loads(out.read_text())


def test_every_file_in_benchmarks_is_covered():
    """A new file in benchmarks/ needs a run here (or a place among the helpers)."""
    covered = {*SMOKE_RUNS, *SLOW_RUNS, *HELPERS, *CLUSTER_RUNS, "gpu_checks_43.sh"}
    present = {path.name for path in BENCHMARKS.iterdir() if path.suffix in (".py", ".sh")}
    assert present - covered == set(), f"benchmarks/ files no test runs: {sorted(present - covered)}"
    assert covered - present == set(), f"files this test names that benchmarks/ lacks: {sorted(covered - present)}"


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(SMOKE_RUNS))
def test_the_benchmark_runs_at_a_tiny_size_and_prints_its_figure(script, tmp_path, request):
    argv, pattern = SMOKE_RUNS[script]
    if script in OWN_PROCESS:
        assert_prints_its_figure(script, argv, pattern, tmp_path)
        return
    jobs, results = request.getfixturevalue("shared_runs")
    done = results[script]
    assert_printed(script, jobs[script], pattern, done["returncode"], done["stdout"], done["stderr"])


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("MRL_BENCH_SLOW") != "1", reason="minutes on a CPU: MRL_BENCH_SLOW=1 runs it")
@pytest.mark.parametrize("script", sorted(SLOW_RUNS))
def test_the_slow_cpu_checks_run(script, tmp_path):
    argv, pattern = SLOW_RUNS[script]
    assert_prints_its_figure(script, argv, pattern, tmp_path)


def test_gpu_first_run_takes_its_arguments():
    """Without a GPU: its imports and its argument parser (--help)."""
    done = run_script("gpu_first_run.py", ["--help"])
    assert done.returncode == 0 and "--cpu-check" in done.stdout, done.stderr[-3000:]


def test_the_gpu_shell_script_parses():
    done = subprocess.run(["bash", "-n", str(BENCHMARKS / "gpu_checks_43.sh")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def shown_commands() -> list[tuple[str, str, list[str]]]:
    """(document, script, flags) of every line of DOCUMENTS that runs a benchmarks/ script, its comment dropped."""
    commands = []
    for document in DOCUMENTS:
        for line in (ROOT / document).read_text().splitlines():
            match = COMMAND.match(line)
            if match:
                arguments = match.group(2).split("#")[0]
                flags = re.findall(r"(?<![\w-])--[a-z][\w-]*", arguments)
                commands.append((document, match.group(1), flags))
    return commands


def declared_flags(script: Path) -> set[str]:
    """The "--flag" string literals of a script and of the benchmarks/ modules it imports from (where its parser's
    shared flags are declared: numerics_cost, smoke, bench_gpu_rollout): read from the syntax trees, nothing run."""
    tree = ast.parse(script.read_text())
    flags = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)
             and re.fullmatch(r"--[a-z][\w-]*", node.value)}
    local = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
             and (BENCHMARKS / f"{node.module}.py").is_file()}
    for module in local - {script.stem}:
        flags |= declared_flags(BENCHMARKS / f"{module}.py")
    return flags


def test_the_documents_show_benchmark_commands():
    """The parser below finds the commands (a change of their form would make the next test vacuous)."""
    assert len(shown_commands()) >= 10


def test_every_shown_command_names_a_script_and_flags_that_exist():
    """Each shown script exists and declares each flag its command passes (argparse's --help is implied)."""
    wrong = []
    for document, script, flags in shown_commands():
        if not (ROOT / script).is_file():
            wrong.append(f"{document}: {script} does not exist")
            continue
        declared = declared_flags(ROOT / script) | {"--help"}
        wrong += [f"{document}: {script} has no {flag}" for flag in flags if flag not in declared]
    assert wrong == [], "\n".join(wrong)


def test_the_shown_command_pattern_reads_a_line():
    """The command pattern: interpreter optional, the flags kept, a trailing comment dropped by shown_commands."""
    match = COMMAND.match("    .venv/bin/python benchmarks/bench_thl.py [--n 1000] --smoke   # tiny")
    assert match and match.group(1) == "benchmarks/bench_thl.py"
    assert shlex.split(match.group(2).split("#")[0]) == ["[--n", "1000]", "--smoke"]

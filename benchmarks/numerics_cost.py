"""What the numerics contract costs: a benchmark run twice, MRL_NUMERICS=native then portable, in the same run.

The numerics are fixed per process (mrl.numerics), so `--numerics both` re-runs the benchmark's own script in two
fresh processes, one per mode, each printing its usual table and handing its timings back through a JSON file, and
then prints one table: each timing under both modes and the ratio portable / native (above 1: the contract is
slower). Used by bench_rollout.py, bench_grpo_step.py and bench_warmup.py:

    .venv/bin/python benchmarks/bench_warmup.py --numerics both
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from mrl.numerics import CONTRACT

TIMINGS_FILE = "MRL_BENCH_TIMINGS"
"""the environment variable naming the file a child writes its timings to"""


def add_numerics_flag(parser) -> None:
    parser.add_argument("--numerics", choices=["this", "both"], default="this",
                        help="this: this process's numerics (MRL_NUMERICS, portable unless set); both: native and "
                             "portable in two processes, with the ratio of every timing")


def hand_back(timings: dict[str, float]) -> None:
    """Write {label: milliseconds} for a --numerics both parent (nothing when run on its own)."""
    if os.environ.get(TIMINGS_FILE):
        Path(os.environ[TIMINGS_FILE]).write_text(json.dumps(timings))


def compare(script: str, argv: list[str]) -> None:
    """Run `script argv --numerics this` under each mode, then print every timing's ratio portable / native."""
    argv = [a for i, a in enumerate(argv) if a != "--numerics" and (i == 0 or argv[i - 1] != "--numerics")
            and not a.startswith("--numerics=")]
    timings = {}
    with tempfile.TemporaryDirectory() as folder:
        for mode in ("native", "portable"):
            out = Path(folder) / f"{mode}.json"
            # without the contract's variables (this process's own `import mrl` set them): the child sets its mode's
            env = {**{k: v for k, v in os.environ.items() if k not in CONTRACT}, "MRL_NUMERICS": mode,
                   TIMINGS_FILE: str(out)}
            print(f"== MRL_NUMERICS={mode} ==", flush=True)
            subprocess.run([sys.executable, script, *argv], env=env, check=True)
            timings[mode] = json.loads(out.read_text())
    width = max(len(label) for label in timings["native"]) + 2
    print(f"\n{'timing (ms)':<{width}}{'native':>10}{'portable':>10}{'portable/native':>17}")
    for label, native in timings["native"].items():
        portable = timings["portable"][label]
        print(f"{label:<{width}}{native:10.1f}{portable:10.1f}{portable / native:17.2f}")

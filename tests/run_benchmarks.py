"""Several benchmarks/ scripts at their tiny sizes in one process, one after another, for tests/test_benchmarks.py.

Importing mrl, torch and transformers is most of a tiny run's time (about 8 s of CPU here), so the scripts share one
import instead of paying it each. Each script still runs as its own `__main__` (runpy) with its own argv, and what it
changes in the process is put back before the next (run_script). Writes OUT, a JSON object {script: {"returncode":
int, "stdout": str, "stderr": str}}; an exception is the script's return code 1 with its traceback in its stderr, so
one failing script does not hide the others.

    python tests/run_benchmarks.py OUT '{"bench_thl.py": ["--smoke"], ...}'
"""
import contextlib
import io
import json
import os
import random
import runpy
import sys
import traceback
import warnings
from pathlib import Path

import mrl  # noqa: F401  (the numerics contract first, as every mrl process)
import numpy as np
import torch

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def run_script(script: str, argv: list[str]) -> dict:
    """{"returncode", "stdout", "stderr"} of benchmarks/<script> run as __main__ with `argv`, the process put back
    after it: environment, argv, sys.path, working folder, torch's threads, the random states, the warning filters."""
    environ, sys_argv, sys_path, folder = dict(os.environ), sys.argv, list(sys.path), os.getcwd()
    threads, states = torch.get_num_threads(), (torch.get_rng_state(), random.getstate(), np.random.get_state())
    stdout, stderr, code = io.StringIO(), io.StringIO(), 0
    sys.argv = [str(BENCHMARKS / script), *argv]
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr), warnings.catch_warnings():
            runpy.run_path(str(BENCHMARKS / script), run_name="__main__")
    except SystemExit as stop:   # argparse's errors, sys.exit("why")
        code = stop.code if isinstance(stop.code, int) else 0 if stop.code is None else 1
        stderr.write("" if isinstance(stop.code, int | None) else str(stop.code))
    except Exception:
        code = 1
        stderr.write(traceback.format_exc())
    finally:
        os.environ.clear()
        os.environ.update(environ)
        sys.argv, sys.path[:] = sys_argv, sys_path
        os.chdir(folder)
        torch.set_num_threads(threads)
        torch.set_rng_state(states[0])
        random.setstate(states[1])
        np.random.set_state(states[2])
    return {"returncode": code, "stdout": stdout.getvalue(), "stderr": stderr.getvalue()}


if __name__ == "__main__":
    sys.path[0] = str(BENCHMARKS)   # the scripts' folder first, as `python benchmarks/<script>` has it (not tests/)
    out, jobs = Path(sys.argv[1]), json.loads(sys.argv[2])
    out.write_text(json.dumps({script: run_script(script, argv) for script, argv in jobs.items()}))

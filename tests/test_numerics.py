"""The numerics contract (mrl.numerics): the same bits from a fixed seed whatever instruction set the CPU offers.

One machine cannot be two kinds of CPU, but it can be made to look like a smaller one: torch's kernels, MKL,
oneDNN, numpy and OpenBLAS each take a lower instruction-set level when told to (ATEN_CPU_CAPABILITY,
MKL_ENABLE_INSTRUCTIONS, ONEDNN_MAX_CPU_ISA, NPY_DISABLE_CPU_FEATURES, OPENBLAS_CORETYPE). The cross-level test
warms up the smoke profile's A and B and runs SGT between them, in a fresh process per level
(tests/cpu_level_run.py), and compares checkpoints and metrics byte for byte: equal under the contract, and, so
that the equality is not vacuous, different with MRL_NUMERICS=native, where the levels really compute otherwise
(on a CPU without AVX-512 there is only one level, nothing to compare, and the test is skipped).
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mrl import numerics

RUN = Path(__file__).parent / "cpu_level_run.py"

LEVELS = {"AVX512": {}, "AVX2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
                                 "ONEDNN_MAX_CPU_ISA": "AVX2", "OPENBLAS_CORETYPE": "Haswell",
                                 "NPY_DISABLE_CPU_FEATURES": numerics.CONTRACT["NPY_DISABLE_CPU_FEATURES"]}}
"""the instruction-set levels this test can force, as the environment a process starts in (AVX512: the CPU's own)"""


def clean_environment(**extra) -> dict:
    """This process's environment without the variables that pick kernels (the test's own run set them)."""
    picked = set(numerics.CONTRACT) | {"MRL_NUMERICS", "MKL_ENABLE_INSTRUCTIONS"}
    return {**{k: v for k, v in os.environ.items() if k not in picked}, **extra}


def python(code: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], env=clean_environment(**env), capture_output=True,
                          text=True, timeout=120)


def native_capability() -> str:
    """torch's kernel level on this CPU when nothing pins it (AVX512, AVX2, DEFAULT)."""
    done = python("import torch; print(torch.backends.cpu.get_cpu_capability())")
    return done.stdout.strip()


@pytest.mark.skipif(numerics.mode() == "native", reason="the test session runs with MRL_NUMERICS=native")
def test_this_test_process_runs_under_the_contract():
    state = numerics.require()
    assert state == {"mode": "portable", "aten": "AVX2", "mkl_cbwr": "COMPATIBLE", "onednn_max_cpu_isa": "AVX2",
                     "numpy_avx512": False, "fp32_matmul": "highest", "portable": True}


def test_the_contract_switches_off_every_avx512_target_numpy_has():
    from numpy._core._multiarray_umath import __cpu_dispatch__

    assert {target for target in __cpu_dispatch__ if target.startswith("AVX512")} <= set(numerics.NUMPY_AVX512)


def test_the_default_is_native_off_x86(monkeypatch):
    monkeypatch.delenv("MRL_NUMERICS", raising=False)
    monkeypatch.setattr(numerics.platform, "machine", lambda: "aarch64")
    assert numerics.mode() == "native"
    monkeypatch.setattr(numerics.platform, "machine", lambda: "x86_64")
    assert numerics.mode() == "portable"


def test_an_unknown_mode_names_the_allowed_values(monkeypatch):
    monkeypatch.setenv("MRL_NUMERICS", "fast")
    with pytest.raises(ValueError, match=r"MRL_NUMERICS='fast'.*\['portable', 'native'\]"):
        numerics.mode()


def test_native_mode_sets_nothing_but_itself(monkeypatch):
    monkeypatch.setenv("MRL_NUMERICS", "native")
    assert numerics.environment() == {"MRL_NUMERICS": "native"}
    monkeypatch.setenv("MRL_NUMERICS", "portable")
    assert numerics.environment() == {"MRL_NUMERICS": "portable", **numerics.CONTRACT}


def test_torch_used_before_mrl_is_a_clear_error():
    done = python("import torch; torch.randn(8, 8) @ torch.randn(8, 8)\n"
                  "import mrl.numerics; mrl.numerics.require()")
    assert done.returncode != 0
    assert "MKL's branch is OFF" in done.stderr
    if native_capability() == "AVX512":  # on an AVX2 CPU torch's kernels run AVX2 anyway
        assert "torch's kernels run AVX512" in done.stderr
    assert "`import mrl` before them" in done.stderr and "MRL_NUMERICS=native" in done.stderr


def test_torch_imported_but_unused_before_mrl_is_pinned_but_for_numpy():
    """torch's kernels and MKL are pinned at their first use; numpy's dispatch is fixed when torch imports it."""
    done = python("import torch\nimport mrl.numerics, json; print(json.dumps(mrl.numerics.state()))")
    state = json.loads(done.stdout)
    assert state["aten"] == "AVX2" and state["mkl_cbwr"] == "COMPATIBLE"
    if native_capability() == "AVX512":
        assert state["numpy_avx512"] and not state["portable"]


def test_native_mode_is_recorded_and_not_required():
    done = python("import mrl.numerics as n, json; print(json.dumps(n.require()))", MRL_NUMERICS="native")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["mode"] == "native"


def level_runs(mode: str, levels: list[str], root: Path) -> dict[str, dict]:
    """{level: cpu_level_run.py's JSON} for each level, two processes at a time."""
    processes = {level: subprocess.Popen([sys.executable, str(RUN), str(root / f"{mode}-{level}")],
                                         env=clean_environment(MRL_NUMERICS=mode, **LEVELS[level]),
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for level in levels}
    results = {}
    try:
        for level, process in processes.items():
            out, err = process.communicate(timeout=600)
            assert process.returncode == 0, f"{mode} at {level}: {err[-3000:]}"
            results[level] = json.loads(out.strip().splitlines()[-1])
    finally:
        for process in processes.values():
            process.kill()  # a timed-out or failed level leaves nothing running
    return results


@pytest.mark.slow
def test_warmup_and_sgt_are_byte_identical_across_instruction_set_levels(tmp_path):
    if native_capability() != "AVX512":
        # one level has nothing to compare (a run at this level alone is every other test's run)
        pytest.skip(f"this CPU's kernels are {native_capability()}: no second level to compare runs at")
    levels = ["AVX512", "AVX2"]
    portable = level_runs("portable", levels, tmp_path)
    for level, result in portable.items():
        assert result["numerics"]["portable"], f"the contract did not hold at {level}: {result['numerics']}"
        assert result["rescues"] > 0, "the SGT run rescued nothing: too short to exercise the sharing path"
        zoo_json = next((tmp_path / f"portable-{level}" / "zoo").rglob("zoo.json"))
        assert json.loads(zoo_json.read_text())["machine"]["numerics"]["portable"]
    assert {k: portable["AVX2"][k] for k in ("checkpoints", "steps", "evals")} == \
        {k: portable["AVX512"][k] for k in ("checkpoints", "steps", "evals")}, "the contract's bits differ at AVX2"
    native = level_runs("native", levels, tmp_path)
    assert {level: r["numerics"]["aten"] for level, r in native.items()} == {"AVX512": "AVX512", "AVX2": "AVX2"}
    assert native["AVX512"]["checkpoints"] != native["AVX2"]["checkpoints"], \
        "native runs at two levels gave the same checkpoints: this test could not see a CPU-dependent result"

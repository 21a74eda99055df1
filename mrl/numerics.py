"""The numerics contract: the same fp32 bits from a fixed seed on every x86-64 CPU with AVX2 (Intel and AMD).

`apply()` runs when `mrl` is imported, before any of its modules imports torch: under `portable` (the default on
x86-64) it pins torch's ATen kernels, MKL, oneDNN, numpy and its OpenBLAS to code paths every such CPU has and
computes the same bits on, and every process mrl starts inherits the pins; `MRL_NUMERICS=native` switches them off.
`state()` reads back what the libraries do, and `require()` stops a process that ran torch or imported numpy before
mrl, naming the fix (`import mrl` first). Each variable and why its value, what is not covered, how it is tested
and what it costs: docs/reproducibility.md.
"""
from __future__ import annotations

import ctypes
import functools
import os
import platform
from pathlib import Path

MODES = ("portable", "native")
"""MRL_NUMERICS: portable (the contract, the default on x86-64) or native (every library's fastest path on this
CPU, the default elsewhere)"""

X86_64 = ("x86_64", "amd64")
"""platform.machine() of the processors the contract is for (lower case)"""

NUMPY_AVX512 = ("AVX512F", "AVX512CD", "AVX512_KNL", "AVX512_KNM", "AVX512_SKX", "AVX512_CLX", "AVX512_CNL",
                "AVX512_ICL", "AVX512_SPR")
"""numpy's AVX-512 dispatch targets (numpy.show_config()), all switched off by the contract"""

CONTRACT = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE", "ONEDNN_MAX_CPU_ISA": "AVX2",
            "MKL_DYNAMIC": "FALSE", "OMP_DYNAMIC": "FALSE", "NPY_DISABLE_CPU_FEATURES": " ".join(NUMPY_AVX512),
            "OPENBLAS_CORETYPE": "Haswell", "OPENBLAS_NUM_THREADS": "1"}
"""the environment of the portable contract, set before torch's first kernel and MKL's first call"""

MKL_BRANCHES = {0: "OFF", 1: "OFF", 2: "AUTO", 3: "COMPATIBLE", 4: "SSE2", 6: "SSSE3", 7: "SSE4_1", 8: "SSE4_2",
                9: "AVX", 10: "AVX2", 12: "AVX512", 14: "AVX512_E1"}
"""oneMKL's MKL_CBWR_* branch constants (mkl_cbwr.h), by value"""

_MKL_CBWR_BRANCH = 1
"""mkl_cbwr_get's argument that asks for the branch in use"""


def mode() -> str:
    """MRL_NUMERICS of this process: "portable" or "native"; unset, portable on x86-64 and native elsewhere (the
    contract pins x86 instruction sets); anything else names the allowed values."""
    default = "portable" if platform.machine().lower() in X86_64 else "native"
    value = os.environ.get("MRL_NUMERICS", "").strip().lower() or default
    if value not in MODES:
        raise ValueError(f"MRL_NUMERICS={os.environ['MRL_NUMERICS']!r} is not allowed; expected one of "
                         f"{list(MODES)} (portable: the same bits on every x86-64 CPU with AVX2; native: this "
                         "CPU's fastest kernels)")
    return value


def environment() -> dict[str, str]:
    """The variables a process needs to compute as this one does: MRL_NUMERICS and, if portable, the contract."""
    return {"MRL_NUMERICS": mode(), **(CONTRACT if mode() == "portable" else {})}


def apply() -> None:
    """Set the contract's environment in this process (and so in every process it starts), unless native."""
    os.environ.update(environment())


@functools.lru_cache(maxsize=1)
def _mkl_cbwr_get():
    """oneMKL's cbwr getter, exported by torch's CPU library (None where this torch build has none)."""
    import torch

    for library in (Path(torch.__file__).parent / "lib" / "libtorch_cpu.so", None):
        try:
            getter = ctypes.CDLL(str(library) if library else None).mkl_serv_cbwr_get
        except (OSError, AttributeError):
            continue
        getter.argtypes, getter.restype = [ctypes.c_int], ctypes.c_int
        return getter
    return None


def mkl_branch() -> str:
    """The MKL code branch in effect ("COMPATIBLE", "OFF" = no CNR, ...); "none" without MKL, "unreadable" where
    this torch build has MKL but does not export its getter."""
    import torch

    if not torch.backends.mkl.is_available():
        return "none"
    getter = _mkl_cbwr_get()
    if getter is None:
        return "unreadable"
    value = getter(_MKL_CBWR_BRANCH)
    return MKL_BRANCHES.get(value, str(value))


def numpy_avx512() -> bool:
    """Whether numpy dispatches any of its kernels to AVX-512 in this process."""
    from numpy._core._multiarray_umath import __cpu_features__

    return any(__cpu_features__.get(feature, False) for feature in NUMPY_AVX512)


def state() -> dict:
    """What the libraries do now: {"mode", "aten", "mkl_cbwr", "onednn_max_cpu_isa", "numpy_avx512",
    "fp32_matmul", "portable"}; "portable" is True when every pinned path is in effect (recorded in meta.json,
    zoo.json, run.json and the reproduce record)."""
    import torch

    current = {"mode": mode(), "aten": torch.backends.cpu.get_cpu_capability(), "mkl_cbwr": mkl_branch(),
               "onednn_max_cpu_isa": os.environ.get("ONEDNN_MAX_CPU_ISA", "") or "native",
               "numpy_avx512": numpy_avx512(), "fp32_matmul": torch.get_float32_matmul_precision()}
    return {**current, "portable": not deviations(current)}


def deviations(current: dict) -> list[str]:
    """What in a state() differs from the portable contract, one phrase each (empty: the contract holds)."""
    return [f"torch's kernels run {current['aten']} (expected AVX2)"] * (current["aten"] != "AVX2") \
        + [f"MKL's branch is {current['mkl_cbwr']} (expected COMPATIBLE)"] \
        * (current["mkl_cbwr"] not in ("COMPATIBLE", "none")) \
        + [f"ONEDNN_MAX_CPU_ISA is {current['onednn_max_cpu_isa']} (expected AVX2)"] \
        * (current["onednn_max_cpu_isa"] != CONTRACT["ONEDNN_MAX_CPU_ISA"]) \
        + ["numpy dispatches to AVX-512 (expected AVX2 at most)"] * current["numpy_avx512"] \
        + [f"torch's fp32 matmul precision is {current['fp32_matmul']!r} (expected 'highest')"] \
        * (current["fp32_matmul"] != "highest")


def require() -> dict:
    """state(), after checking that the portable contract holds where it was asked for; raises a RuntimeError that
    names what is off and what to do (import mrl before torch and numpy, or MRL_NUMERICS=native) where it does not."""
    current = state()
    if current["mode"] == "portable" and not current["portable"]:
        raise RuntimeError(
            f"the portable numerics contract is not in effect in this process: {'; '.join(deviations(current))}. "
            "Either torch or numpy came first (torch, pandas and transformers import numpy): restart the kernel or "
            "process and `import mrl` before them; or this CPU is not an x86-64 CPU with AVX2. Set "
            "MRL_NUMERICS=native to run on this CPU's own kernels (bit-reproducible on this kind of CPU only).")
    return current

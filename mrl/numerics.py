"""The numerics contract: the same fp32 bits from a fixed seed on every x86-64 CPU with AVX2.

torch's own kernels (ATen), MKL (torch's BLAS on x86) and oneDNN each pick a code path by the instruction set the
CPU reports, and each path rounds in its own order: an fp32 trajectory then differs in its last bits from one kind
of CPU to another, and RL amplifies the difference into other samples, other accuracies, other tables. The
`portable` contract (the default) pins every one of them to a path that every x86-64 CPU of the last decade has,
and that computes the same bits on all of them:

- ATen: `ATEN_CPU_CAPABILITY=avx2` (torch's vectorized kernels, Sleef's transcendentals included, are the same
  AVX2 + FMA code on an Intel and an AMD CPU; read lazily, at torch's first kernel dispatch).
- MKL: `MKL_CBWR=COMPATIBLE` (conditional numerical reproducibility, SSE2 without rcpps/rsqrtps: the one branch
  oneMKL guarantees on Intel *and* non-Intel CPUs; its AVX2 branch is Intel-only, and on an AMD EPYC
  `mkl_cbwr_set(AVX2)` returns MKL_CBWR_ERR_UNSUPPORTED_BRANCH and MKL falls back to its CPU-specific AUTO path).
  MKL reads it at its first call; with `MKL_DYNAMIC=FALSE` the thread count is the one asked for.
- oneDNN: `ONEDNN_MAX_CPU_ISA=AVX2` (torch's fp32 matmuls do not reach oneDNN; bf16 autocast does, and is not
  covered: see below).
- numpy: `NPY_DISABLE_CPU_FEATURES` lists every AVX-512 feature (numpy's exp and log, used by PRP's importance
  weights and the bandit analysis, take other algorithms with AVX-512 and round otherwise; read when numpy is
  imported), and `OPENBLAS_CORETYPE=Haswell` pins the AVX2 kernels of the OpenBLAS inside numpy and scipy.
- threads: every run sets its own torch thread count (`threads` of the profile, one per warm-up), and the count
  is recorded with the result; the bits are the same only for the same count.

What it does not cover: bf16 autocast on the CPU (oneDNN computes bf16 natively with AVX512-BF16 or AMX and
emulates it otherwise, with other roundings), GPUs (CUDA kernels are another world), other torch, MKL or glibc
builds, and other thread counts. `MRL_NUMERICS=native` switches the contract off: each library then takes its
fastest path on this CPU, runs are still bit-reproducible on one kind of CPU, and the committed tables and nbval's
smoke copies are no longer reproduced byte for byte.

`apply()` runs when `mrl` is imported, before any of its modules imports torch; every process mrl starts (the
zoo's warm-up pool, the process backend's workers, Ray actors, the notebook kernel under papermill, `mrl run`,
the benchmarks) imports mrl and inherits the environment. A process that ran a torch kernel or imported numpy
(torch, pandas and transformers import it) before importing mrl cannot be pinned any more: `require()` then names
the fix, `import mrl` first.
"""
from __future__ import annotations

import ctypes
import functools
import os
from pathlib import Path

MODES = ("portable", "native")
"""MRL_NUMERICS: portable (the contract, the default) or native (every library's fastest path on this CPU)"""

NUMPY_AVX512 = ("AVX512F", "AVX512CD", "AVX512_KNL", "AVX512_KNM", "AVX512_SKX", "AVX512_CLX", "AVX512_CNL",
                "AVX512_ICL", "AVX512_SPR")
"""numpy's AVX-512 dispatch targets (numpy.show_config()), all switched off by the contract"""

CONTRACT = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE", "ONEDNN_MAX_CPU_ISA": "AVX2",
            "MKL_DYNAMIC": "FALSE", "OMP_DYNAMIC": "FALSE", "NPY_DISABLE_CPU_FEATURES": " ".join(NUMPY_AVX512),
            "OPENBLAS_CORETYPE": "Haswell"}
"""the environment of the portable contract, set before torch's first kernel and MKL's first call"""

MKL_BRANCHES = {0: "OFF", 1: "OFF", 2: "AUTO", 3: "COMPATIBLE", 4: "SSE2", 6: "SSSE3", 7: "SSE4_1", 8: "SSE4_2",
                9: "AVX", 10: "AVX2", 12: "AVX512", 14: "AVX512_E1"}
"""oneMKL's MKL_CBWR_* branch constants (mkl_cbwr.h), by value"""

_MKL_CBWR_BRANCH = 1
"""mkl_cbwr_get's argument that asks for the branch in use"""


def mode() -> str:
    """MRL_NUMERICS of this process: "portable" (unset) or "native"; anything else names the allowed values."""
    value = os.environ.get("MRL_NUMERICS", "portable").strip().lower() or "portable"
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
    """oneMKL's cbwr getter exported by torch's CPU library (None where this torch build has none)."""
    import torch

    try:
        library = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"))
        getter = library.mkl_serv_cbwr_get
    except (OSError, AttributeError):
        return None
    getter.argtypes, getter.restype = [ctypes.c_int], ctypes.c_int
    return getter


def mkl_branch() -> str:
    """The MKL code branch in effect ("COMPATIBLE", "OFF" = no CNR, ...), or "unknown" if it cannot be read."""
    import torch

    getter = _mkl_cbwr_get() if torch.backends.mkl.is_available() else None
    if getter is None:
        return "unknown"
    value = getter(_MKL_CBWR_BRANCH)
    return MKL_BRANCHES.get(value, str(value))


def numpy_avx512() -> bool:
    """Whether numpy dispatches any of its kernels to AVX-512 in this process."""
    from numpy._core._multiarray_umath import __cpu_features__

    return any(__cpu_features__.get(feature, False) for feature in NUMPY_AVX512)


def state() -> dict:
    """What the libraries do now: {"mode", "aten", "mkl_cbwr", "onednn_max_cpu_isa", "numpy_avx512", "portable"};
    "portable" is True when every pinned path is in effect (recorded in meta.json, zoo.json, run.json and the
    reproduce record)."""
    import torch

    aten = torch.backends.cpu.get_cpu_capability()
    mkl = mkl_branch()
    onednn = os.environ.get("ONEDNN_MAX_CPU_ISA", "")
    numpy_wide = numpy_avx512()
    portable = (aten == "AVX2" and mkl in ("COMPATIBLE", "unknown") and onednn == CONTRACT["ONEDNN_MAX_CPU_ISA"]
                and not numpy_wide)
    return {"mode": mode(), "aten": aten, "mkl_cbwr": mkl, "onednn_max_cpu_isa": onednn or "native",
            "numpy_avx512": numpy_wide, "portable": portable}


def require() -> dict:
    """state(), after checking that the portable contract holds where it was asked for; raises a RuntimeError that
    names what is off and what to do (import mrl before torch and numpy, or MRL_NUMERICS=native) where it does not."""
    current = state()
    if current["mode"] == "portable" and not current["portable"]:
        off = [f"torch's kernels run {current['aten']} (expected AVX2)"] * (current["aten"] != "AVX2") \
            + [f"MKL's branch is {current['mkl_cbwr']} (expected COMPATIBLE)"] \
            * (current["mkl_cbwr"] not in ("COMPATIBLE", "unknown")) \
            + [f"ONEDNN_MAX_CPU_ISA is {current['onednn_max_cpu_isa']} (expected AVX2)"] \
            * (current["onednn_max_cpu_isa"] != "AVX2") \
            + ["numpy dispatches to AVX-512 (expected AVX2 at most)"] * current["numpy_avx512"]
        raise RuntimeError(
            f"the portable numerics contract is not in effect in this process: {'; '.join(off)}. Either torch or "
            "numpy came first (torch, pandas and transformers import numpy): restart the kernel or process and "
            "`import mrl` before them; or this CPU has no AVX2. Set MRL_NUMERICS=native to run on this CPU's own "
            "kernels (bit-reproducible on this kind of CPU only).")
    return current

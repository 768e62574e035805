"""Crafted HDF5 files from the library's CVEs (``../shared/hdf5-cve``, or ``$KBPACK_CVE_DIR``).

Each file is tried raw and wrapped behind a kbpack header with a valid manifest (so the byte
check passes and HDF5 really parses it). ``verify`` must answer with findings, never crash or
hang; ``inspect`` (the in-process reader) must refuse with a one-line PackError. Each inspect
runs in a forked child with a timeout, so one crash or hang is reported, not fatal to the
suite; a handful also go through the real CLI.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import h5py  # noqa: F401 - imported once here, not again in every forked child
import pytest

from kbpack.errors import KbpackError
from kbpack.ops.inspect import describe
from kbpack.runtime.sandbox import Limits, SandboxFailure, run_isolated
from kbpack.verify.pipeline import verify_pack
from tests.fixture_pack import cve_dir, cve_files, wrap_hdf5

FILES = cve_files()
CLI = [sys.executable, "-c", "from kbpack.cli.main import main; main()"]
LIMITS = Limits(timeout_s=30, memory_bytes=2 * 2**30)

pytestmark = pytest.mark.skipif(
    not FILES,
    reason=f"no crafted HDF5 files: set KBPACK_CVE_DIR (looked in {cve_dir() or '../shared/hdf5-cve'})",
)


def _inspect(path: str) -> dict[str, Any]:
    try:
        describe(Path(path))
    except KbpackError as e:
        return {"error": type(e).__name__, "message": str(e)}
    except Exception as e:  # the CLI would survive this too, but it is a reader bug
        return {"error": type(e).__name__, "message": str(e), "untyped": True}
    return {"error": None}


@pytest.fixture(scope="module")
def wrapped(tmp_path_factory: pytest.TempPathFactory) -> dict[Path, Path]:
    folder = tmp_path_factory.mktemp("cve")
    return {f: wrap_hdf5(f, folder / (f.name + ".kbpack")) for f in FILES}


def test_every_crafted_file_is_refused_by_verify_and_inspect(wrapped: dict[Path, Path]) -> None:
    problems: list[str] = []
    codes: Counter[str] = Counter()
    for raw, pack in wrapped.items():
        for label, path in (("raw", raw), ("wrapped", pack)):
            report = verify_pack(path, limits=LIMITS)
            if report.intact:
                problems.append(f"{raw.name} {label}: verify found nothing")
            codes.update(f.code for f in report.findings)
            try:
                result = run_isolated(_inspect, (str(path),), LIMITS)
            except SandboxFailure as e:
                problems.append(f"{raw.name} {label}: inspect {e.code}: {e.detail}")
                continue
            if result["error"] is None:
                problems.append(f"{raw.name} {label}: inspect accepted it")
            elif result.get("untyped") or "\n" in result["message"]:
                problems.append(f"{raw.name} {label}: {result['error']}: {result['message']}")
    print(f"\n{len(wrapped)} crafted files x raw/wrapped; findings: {dict(codes.most_common(12))}")
    assert problems == []
    # the wrapped files really reached HDF5: no crash, no hang of the verify child either
    assert codes["sandbox-crash"] == codes["sandbox-timeout"] == 0
    assert codes["hash-mismatch"] == 0 and codes["not-a-pack"] == len(wrapped)


def test_a_handful_through_the_real_cli(wrapped: dict[Path, Path]) -> None:
    picks = list(wrapped.items())[:: max(1, len(wrapped) // 4)][:4]
    for raw, pack in picks:
        for path in (raw, pack):
            for cmd in (["verify", str(path)], ["inspect", str(path)]):
                r = subprocess.run([*CLI, *cmd], capture_output=True, timeout=120, check=False)
                out = (r.stdout + r.stderr).decode()
                # a raw HDF5 file is not a pack (usage, 2) except to verify, which reports it as a
                # finding (1); a wrapped one is a damaged pack (1)
                want = 2 if (path == raw and cmd[0] == "inspect") else 1
                assert r.returncode == want, (cmd, out)
                assert "Traceback" not in out and "internal error" not in out, (cmd, out)
                if cmd[0] == "inspect":
                    assert len(r.stderr.decode().strip().splitlines()) == 1, out

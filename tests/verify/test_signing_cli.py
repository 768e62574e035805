"""Signatures through the CLI: an update says it dropped the old signature (or re-signs with
--key); one malformed key among the trusted keys is a note, not a failure of every verify."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kbpack.cli.main import _quiet_interrupts, main
from kbpack.errors import Exit


def run(capfd: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as e:
        main(list(args))
    out, err = capfd.readouterr()
    return int(e.value.code or 0), out, err


@pytest.fixture
def signed(capfd: pytest.CaptureFixture[str], tmp_path: Path) -> tuple[Path, Path, Path, str]:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.md").write_text("# A\n\nthe first text\n")
    pack = tmp_path / "a.kbpack"
    assert run(capfd, "build", str(src), "-o", str(pack), "--no-vectors", "-q")[0] == 0
    code, out, _ = run(capfd, "keygen", "-o", str(tmp_path / "team"), "--json")
    assert code == 0
    kid = json.loads(out)["key_id"]
    assert run(capfd, "sign", str(pack), "--key", str(tmp_path / "team.key"))[0] == 0
    (src / "b.md").write_text("# B\n\nthe second text\n")
    return pack, src, tmp_path / "team", kid


def test_update_says_the_signature_was_dropped(
    capfd: pytest.CaptureFixture[str], signed: tuple[Path, Path, Path, str]
) -> None:
    pack, src, stem, kid = signed
    code, out, _ = run(capfd, "update", str(pack), str(src), "--no-vectors")
    assert code == 0
    assert out.splitlines()[-1] == (
        f"signature    dropped: the old pack was signed by key {kid}; re-sign with "
        f"kbpack sign {pack} --key NAME.key (or pass --key to update)"
    )
    pub = f"{stem}.pub"
    code, _, _ = run(capfd, "verify", str(pack), "--key", pub, "--require-signature")
    assert code == Exit.FAILURE  # unsigned now, as the summary said


def test_update_with_key_signs_the_new_pack(
    capfd: pytest.CaptureFixture[str], signed: tuple[Path, Path, Path, str]
) -> None:
    pack, src, stem, kid = signed
    code, out, _ = run(
        capfd, "update", str(pack), str(src), "--no-vectors", "--key", f"{stem}.key", "--json"
    )
    assert code == 0 and json.loads(out)["signature"] == {"old": kid, "new": kid}
    code, _, _ = run(capfd, "verify", str(pack), "--key", f"{stem}.pub", "--require-signature")
    assert code == 0


def test_update_checks_the_key_before_building(
    capfd: pytest.CaptureFixture[str], signed: tuple[Path, Path, Path, str]
) -> None:
    pack, src, stem, _ = signed
    before = pack.read_bytes()
    code, _, err = run(capfd, "update", str(pack), str(src), "--no-vectors", "--key", f"{stem}.pub")
    assert code == Exit.USAGE and "secret key" in err and pack.read_bytes() == before


def test_one_malformed_trusted_key_is_a_note(
    capfd: pytest.CaptureFixture[str],
    signed: tuple[Path, Path, Path, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pack, _, stem, kid = signed
    keys = tmp_path / "trusted"
    assert kid
    keys.mkdir()
    (keys / "broken.pub").write_text("not a key")
    (keys / "team.pub").write_bytes(Path(f"{stem}.pub").read_bytes())
    monkeypatch.setenv("KBPACK_TRUSTED_KEYS", str(keys))
    code, out, _ = run(capfd, "verify", str(pack), "--require-signature", "--json")
    report = json.loads(out)
    assert code == 0 and report["signature"] == {
        **report["signature"],
        "status": "valid",
        "key_id": kid,
    }
    assert any("broken.pub: not a PEM public key" in n for n in report["notes"])


def test_a_lost_interrupt_prints_no_traceback() -> None:
    seen: list[object] = []

    class Info:
        def __init__(self, e: BaseException) -> None:
            self.exc_value = e

    hook = _quiet_interrupts(seen.append)
    hook(Info(KeyboardInterrupt()))
    assert seen == []  # recorded by kbpack.runtime.interrupt; no "Exception ignored" traceback
    other = Info(ValueError("x"))
    hook(other)
    assert seen == [other]


def test_signing_ones_own_build_keeps_what_this_machine_remembers_of_it(
    capfd: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pack built here opens without the pre-flight and queries without the verify hint;
    signing it (header only, HDF5 bytes hashed first) used to lose both, since the file's
    times changed. A pack this machine knows nothing of learns nothing by being signed."""
    from kbpack.pack.manifest import read_header
    from kbpack.pack.preflight import is_remembered_clean
    from kbpack.pack.verified import was_verified

    monkeypatch.setenv("KBPACK_CACHE_DIR", str(tmp_path / "cache"))
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.md").write_text("# A\n\nthe first text\n")
    pack = tmp_path / "a.kbpack"
    assert run(capfd, "build", str(src), "-o", str(pack), "--no-vectors", "-q")[0] == 0
    stranger = tmp_path / "copy.kbpack"
    stranger.write_bytes(pack.read_bytes())  # another file: nothing remembered of it
    assert run(capfd, "keygen", "-o", str(tmp_path / "team"))[0] == 0
    for p in (pack, stranger):
        assert run(capfd, "sign", str(p), "--key", str(tmp_path / "team.key"))[0] == 0
        header = read_header(p)
        assert header.signature is not None
        known = p == pack
        assert is_remembered_clean(p, header) is known
        assert was_verified(p, header.manifest.hdf5_sha256) is known
    code, _, err = run(capfd, "query", str(pack), "first", "--mode", "bm25")
    assert code == 0 and err == ""

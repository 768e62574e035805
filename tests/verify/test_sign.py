"""Ed25519 signing: keygen, sign (user block only), and each way a signature check can fail,
each with its own finding code and the key id that signed."""

from __future__ import annotations

import shutil
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from kbpack.cli.main import cli
from kbpack.errors import PackError, UsageError
from kbpack.pack import format as F
from kbpack.pack.manifest import encode_header, read_header, write_header
from kbpack.pack.sign import keygen, sign_pack
from kbpack.verify.pipeline import verify_pack
from tests.fixture_pack import make_pack


def codes(path: Path, **kw: object) -> list[str]:
    return [f.code for f in verify_pack(path, **kw).findings]  # type: ignore[arg-type]


def hdf5_bytes(p: Path) -> bytes:
    return p.read_bytes()[F.USERBLOCK_SIZE :]


@pytest.fixture()
def keys(tmp_path: Path) -> tuple[Path, Path, str]:
    return keygen(tmp_path / "alice")


@pytest.fixture()
def signed(tmp_path: Path, keys: tuple[Path, Path, str]) -> Path:
    p = make_pack(tmp_path / "signed.kbpack")
    sign_pack(p, keys[0])
    return p


def test_keygen_writes_a_private_secret_and_refuses_to_overwrite(
    tmp_path: Path, keys: tuple[Path, Path, str]
) -> None:
    secret, public, kid = keys
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert b"PRIVATE KEY" in secret.read_bytes() and b"PUBLIC KEY" in public.read_bytes()
    assert len(kid) == 16 and int(kid, 16) >= 0
    with pytest.raises(UsageError, match="already exists"):
        keygen(tmp_path / "alice")


def test_signing_rewrites_only_the_signature_record(
    tmp_path: Path, keys: tuple[Path, Path, str]
) -> None:
    p = make_pack(tmp_path / "p.kbpack")
    before_hdf5, before_manifest = hdf5_bytes(p), read_header(p).manifest_bytes
    kid = sign_pack(p, keys[0])
    header = read_header(p)
    assert hdf5_bytes(p) == before_hdf5
    assert header.manifest_bytes == before_manifest
    assert header.signature is not None and header.signature["key_id"] == kid == keys[2]


def test_valid_signature_names_the_key(signed: Path, keys: tuple[Path, Path, str]) -> None:
    report = verify_pack(signed, key=keys[1], require_signature=True)
    assert report.intact
    assert report.signature is not None
    assert report.signature["status"] == "valid" and report.signature["key_id"] == keys[2]
    assert report.summary["signature"] == f"signed by trusted key {keys[2]}"


def test_trusted_keys_folder_from_the_environment(
    tmp_path: Path, signed: Path, keys: tuple[Path, Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "trusted"
    folder.mkdir()
    monkeypatch.setenv("KBPACK_TRUSTED_KEYS", str(folder))
    # no trusted key at all: a required signature cannot be checked (docs/verify.md)
    with pytest.raises(UsageError, match="no trusted keys are configured"):
        verify_pack(signed, require_signature=True)
    _, bob_pub, _ = keygen(tmp_path / "bob")
    shutil.copyfile(bob_pub, folder / "bob.pub")
    assert codes(signed, require_signature=True) == ["signature-untrusted-key"]
    assert codes(signed) == ["signature-untrusted-key"]  # keys configured: required anyway
    shutil.copyfile(keys[1], folder / "alice.pub")
    assert codes(signed, require_signature=True) == []


def test_signed_by_an_untrusted_key_is_a_note_unless_required(
    tmp_path: Path, signed: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KBPACK_TRUSTED_KEYS", str(tmp_path / "none"))
    report = verify_pack(signed)
    assert report.intact
    assert "not trusted here" in report.notes[0]


def test_unsigned_pack_with_require_signature(tmp_path: Path, keys: tuple[Path, Path, str]) -> None:
    p = make_pack(tmp_path / "unsigned.kbpack")
    assert codes(p, require_signature=True, key=keys[1]) == ["signature-missing"]
    assert codes(p) == []


def test_wrong_key(tmp_path: Path, signed: Path, keys: tuple[Path, Path, str]) -> None:
    _, bob_pub, bob_id = keygen(tmp_path / "bob")
    report = verify_pack(signed, key=bob_pub)
    assert [f.code for f in report.findings] == ["signature-untrusted-key"]
    detail = report.findings[0].detail
    assert keys[2] in detail and bob_id in detail  # who signed, and whom we trust


def test_edited_manifest(signed: Path, keys: tuple[Path, Path, str]) -> None:
    header = read_header(signed)
    edited = header.manifest_bytes.replace(b'"kbpack_version":"', b'"kbpack_version":"9')
    write_header(signed, encode_header(edited, header.signature))
    found = verify_pack(signed, key=keys[1]).findings
    assert found[0].code == "signature-invalid"
    assert "edited after signing" in found[0].detail


def test_manifest_copied_from_another_pack(
    tmp_path: Path, signed: Path, keys: tuple[Path, Path, str]
) -> None:
    other = make_pack(tmp_path / "other.kbpack", created="2026-01-01T00:00:00+00:00", seed=7)
    # the attacker keeps other's HDF5 content and puts the signed header of `signed` in front
    forged = tmp_path / "forged.kbpack"
    forged.write_bytes(signed.read_bytes()[: F.USERBLOCK_SIZE] + hdf5_bytes(other))
    report = verify_pack(forged, key=keys[1])
    found = [f.code for f in report.findings]
    assert report.signature is not None and report.signature["status"] == "valid"
    assert "manifest-from-other-pack" in found
    assert found[0] in ("size-mismatch", "hash-mismatch")


def test_damaged_signature_record(signed: Path, keys: tuple[Path, Path, str]) -> None:
    header = read_header(signed)
    assert header.signature is not None
    record = dict(header.signature, signature="not base64!")
    write_header(signed, encode_header(header.manifest_bytes, record))
    assert codes(signed, key=keys[1]) == ["signature-malformed"]


def test_sign_refuses_a_damaged_pack(tmp_path: Path, keys: tuple[Path, Path, str]) -> None:
    p = make_pack(tmp_path / "p.kbpack")
    data = bytearray(p.read_bytes())
    data[-1] ^= 1
    p.write_bytes(data)
    with pytest.raises(PackError, match="refusing to sign"):
        sign_pack(p, keys[0])


def test_the_verifying_key_never_comes_from_the_pack(
    tmp_path: Path, signed: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a forger re-signs an edited manifest with their own key: without that key being trusted
    # here, the signature is worthless
    trusted = tmp_path / "trusted"
    trusted.mkdir()
    _, bob_pub, _ = keygen(tmp_path / "bob")
    shutil.copyfile(bob_pub, trusted / "bob.pub")  # some key is trusted, not mallory's
    monkeypatch.setenv("KBPACK_TRUSTED_KEYS", str(trusted))
    mallory, _, mallory_id = keygen(tmp_path / "mallory")
    sign_pack(signed, mallory)
    report = verify_pack(signed, require_signature=True)
    assert [f.code for f in report.findings] == ["signature-untrusted-key"]
    assert report.signature is not None and report.signature["key_id"] == mallory_id


def test_cli_keygen_sign_verify(tmp_path: Path) -> None:
    runner = CliRunner()
    p = make_pack(tmp_path / "p.kbpack")
    r = runner.invoke(cli, ["keygen", "-o", str(tmp_path / "k")])
    assert r.exit_code == 0, r.output
    r = runner.invoke(cli, ["sign", str(p), "--key", str(tmp_path / "k.key"), "--json"])
    assert r.exit_code == 0, r.output
    kid = r.output.split('"key_id": "')[1].split('"')[0]
    r = runner.invoke(cli, ["verify", str(p), "--key", str(tmp_path / "k.pub")])
    assert r.exit_code == 0, r.output
    assert f"signed by trusted key {kid}" in r.output
    # a secret key where the public one is expected is a usage error
    r = runner.invoke(cli, ["verify", str(p), "--key", str(tmp_path / "k.key")])
    assert r.exit_code == 2
    assert "is a secret key" in r.output

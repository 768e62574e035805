"""Ed25519 signatures over a pack's manifest.

The signature covers the exact manifest bytes in the user block, and the manifest covers every
HDF5 byte (size and SHA-256), so signing rewrites only the header's signature record and never
the HDF5 content. The verifying key always comes from the user (``--key``) or the machine's
trusted-keys directory, never from the pack: a pack cannot vouch for itself.

Key files are PEM (PKCS#8 for the secret key, SubjectPublicKeyInfo for the public key), so
``openssl pkey`` reads them too. A key id is the first 16 hex digits of the SHA-256 of the raw
32-byte public key.

We use ``cryptography`` (already a dependency, maintained, wheels everywhere) rather than
PyNaCl: one fewer native library to ship to an air-gapped machine.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kbpack.errors import PackError, UsageError
from kbpack.pack.manifest import Header, encode_header, hash_hdf5_bytes, read_header, write_header
from kbpack.schema import fields_of

ALGORITHM = "ed25519"
KEYS_ENV = "KBPACK_TRUSTED_KEYS"


@dataclass(frozen=True)
class TrustedKey:
    key_id: str
    raw: bytes  # 32-byte Ed25519 public key
    source: str  # the file it came from


@dataclass(frozen=True)
class SignatureCheck:
    """What step 2 of verify found. ``status``: valid, unsigned, untrusted-key, invalid,
    malformed. ``key_id`` is the key that signed (verified when valid, claimed otherwise)."""

    status: str
    key_id: str | None
    detail: str
    key_source: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return fields_of(self, "status", "key_id", "key_source", "detail")


def key_id_of(raw_public: bytes) -> str:
    return hashlib.sha256(raw_public).hexdigest()[:16]


# -- keys ------------------------------------------------------------------------------------


def keygen(stem: Path) -> tuple[Path, Path, str]:
    """Write ``STEM.key`` (secret, mode 0600) and ``STEM.pub``; refuse to overwrite either."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    secret_path = stem.with_name(stem.name + ".key")
    public_path = stem.with_name(stem.name + ".pub")
    for p in (secret_path, public_path):
        if p.exists():
            raise UsageError(f"{p}: already exists; choose another name or remove it first")
    if not secret_path.parent.is_dir():
        raise UsageError(f"{secret_path.parent}: folder does not exist; create it first")
    key = Ed25519PrivateKey.generate()
    secret = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    # O_EXCL: never clobber a key that appeared meanwhile; 0600: the secret stays private.
    fd = os.open(secret_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(secret)
    fd = os.open(public_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(public)
    return secret_path, public_path, key_id_of(raw)


def load_public_key(path: Path) -> TrustedKey:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    data = _read_key_file(path)
    if b"PRIVATE KEY" in data:
        raise UsageError(f"{path}: is a secret key; verify needs the public key (the .pub file)")
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as e:
        raise UsageError(f"{path}: not a PEM public key; use a .pub file from kbpack keygen") from e
    if not isinstance(key, Ed25519PublicKey):
        raise UsageError(f"{path}: not an Ed25519 public key; use a .pub file from kbpack keygen")
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return TrustedKey(key_id_of(raw), raw, str(path))


def check_secret_key(path: Path) -> None:
    """Raise UsageError unless ``path`` is a usable secret key (checked before long work)."""
    _load_secret_key(path)


def _load_secret_key(path: Path) -> Any:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    data = _read_key_file(path)
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as e:
        raise UsageError(
            f"{path}: not an unencrypted PEM secret key; use a .key file from kbpack keygen"
        ) from e
    if not isinstance(key, Ed25519PrivateKey):
        raise UsageError(f"{path}: not an Ed25519 secret key; use a .key file from kbpack keygen")
    return key


def _read_key_file(path: Path) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read(16384)  # a PEM Ed25519 key is ~120 bytes; do not slurp a wrong file
    except OSError as e:
        raise UsageError(f"{path}: cannot read key file: {e.strerror or e}") from e
    return data


def trusted_keys_dir() -> Path:
    env = os.environ.get(KEYS_ENV)
    if env:
        return Path(env)
    return Path.home() / ".config" / "kbpack" / "trusted-keys"


def trusted_keys(key: Path | None = None, warnings: list[str] | None = None) -> list[TrustedKey]:
    """``--key`` alone when given (a bad one is an error), else every ``*.pub`` in the
    trusted-keys directory: one malformed file there is skipped, with a line appended to
    ``warnings``, so that it does not fail every verify."""
    if key is not None:
        return [load_public_key(key)]
    folder = trusted_keys_dir()
    if not folder.is_dir():
        return []
    keys = []
    for p in sorted(folder.glob("*.pub")):
        try:
            keys.append(load_public_key(p))
        except UsageError as e:
            if warnings is not None:
                warnings.append(f"trusted key skipped: {e}")
    return keys


# -- sign and check --------------------------------------------------------------------------


def sign_pack(pack: Path, secret_key: Path) -> str:
    """Sign ``pack`` in place (user block only) and return the key id.

    Refuses a pack whose bytes no longer match its manifest: signing it would vouch for damage.
    """
    key = _load_secret_key(secret_key)
    header = read_header(pack)
    size, sha = hash_hdf5_bytes(pack)
    if size != header.manifest.file_size or sha != header.manifest.hdf5_sha256:
        raise PackError(
            f"{pack}: bytes do not match the manifest (run kbpack verify); refusing to sign"
        )
    from cryptography.hazmat.primitives import serialization

    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    kid = key_id_of(raw)
    record = {
        "alg": ALGORITHM,
        "key_id": kid,
        "signature": base64.b64encode(key.sign(header.manifest_bytes)).decode("ascii"),
    }
    # What this machine remembers of the pack (parsed safely; written or verified here) holds
    # for its signed state too: the HDF5 bytes, hashed just above, do not change. Without
    # this, signing one's own build brought back the first-open pre-flight and the query hint.
    from kbpack.pack.preflight import is_remembered_clean, remember_parsed
    from kbpack.pack.verified import identity, remember_verified, was_verified

    parsed = is_remembered_clean(pack, header)
    trusted = was_verified(pack, header.manifest.hdf5_sha256)
    try:
        write_header(pack, encode_header(header.manifest_bytes, record))
    except OSError as e:
        raise PackError(f"{pack}: cannot write the signature: {e.strerror or e}") from e
    if parsed:
        remember_parsed(pack)
    if trusted:
        remember_verified(pack, identity(pack), event="signed")
    return kid


def check_signature(header: Header, keys: Sequence[TrustedKey]) -> SignatureCheck:
    """Check the signature record against the trusted keys (never against a key in the pack)."""
    record = header.signature
    if record is None:
        return SignatureCheck("unsigned", None, "the pack is not signed")
    parsed = _parse_record(record)
    if isinstance(parsed, str):
        return SignatureCheck("malformed", _claimed_id(record), parsed)
    claimed, sig = parsed
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    # Try every trusted key: the claimed id only picks the message, it is not trusted either.
    for k in keys:
        try:
            Ed25519PublicKey.from_public_bytes(k.raw).verify(sig, header.manifest_bytes)
        except InvalidSignature:
            continue
        return SignatureCheck("valid", k.key_id, f"signed by trusted key {k.key_id}", k.source)
    match = next((k for k in keys if k.key_id == claimed), None)
    if match is not None:
        return SignatureCheck(
            "invalid",
            claimed,
            f"signature by key {claimed} does not match the manifest: "
            "the manifest was edited after signing",
            match.source,
        )
    have = ", ".join(k.key_id for k in keys) or "none"
    return SignatureCheck(
        "untrusted-key",
        claimed,
        f"signed by key {claimed}, which is not trusted here (trusted: {have}); "
        f"pass --key or add its .pub to {trusted_keys_dir()}",
    )


def _claimed_id(record: Mapping[str, Any]) -> str | None:
    kid = record.get("key_id")
    return kid if isinstance(kid, str) else None


def _parse_record(record: Mapping[str, Any]) -> tuple[str, bytes] | str:
    if record.get("alg") != ALGORITHM:
        return f"signature algorithm {record.get('alg')!r} is not {ALGORITHM}"
    kid = record.get("key_id")
    sig = record.get("signature")
    if not isinstance(kid, str) or not isinstance(sig, str):
        return "signature record lacks key_id or signature"
    try:
        raw = base64.b64decode(sig, validate=True)
    except (binascii.Error, ValueError):
        return "signature is not base64"
    if len(raw) != 64:
        return f"signature is {len(raw)} bytes, an Ed25519 signature is 64"
    return kid, raw


__all__ = [
    "SignatureCheck",
    "TrustedKey",
    "check_signature",
    "key_id_of",
    "keygen",
    "load_public_key",
    "sign_pack",
    "trusted_keys",
    "trusted_keys_dir",
]


def sign_updated(path: Path, old: str | None, key: Path | None) -> dict[str, Any] | None:
    """An update changes the bytes, so the old signature cannot carry over: sign with ``key``,
    or report that it was dropped. None when neither pack is signed."""
    if key is None and old is None:
        return None
    return {"old": old, "new": sign_pack(path, key) if key is not None else None}


# -- the signature policy of every reader (issue 30) ------------------------------------------

NO_KEYS = (
    "a signature is required but no trusted keys are configured: put the signer's .pub in "
    "$KBPACK_TRUSTED_KEYS (default ~/.config/kbpack/trusted-keys), or give --key FILE.pub"
)


@dataclass(frozen=True)
class SignaturePolicy:
    """What a reader demands of a pack's signature before it reads anything else.

    * trusted keys configured (a ``*.pub`` in the trusted-keys directory) or ``key`` given: a
      valid signature by one of them is required, unless ``allow_unsigned``;
    * ``require``: required, and with no trusted key at all that is a usage error (a signature
      checked against no key, or against a key the pack names, proves nothing);
    * an invalid or malformed signature is refused always (the manifest was edited).
    """

    key: Path | None = None
    require: bool = False
    allow_unsigned: bool = False

    def __post_init__(self) -> None:
        if self.allow_unsigned and (self.require or self.key is not None):
            raise UsageError("--allow-unsigned contradicts --require-signature and --key: give one")

    def keys(self, warnings: list[str] | None = None) -> list[TrustedKey]:
        return trusted_keys(self.key, warnings)

    def required(self, keys: Sequence[TrustedKey]) -> bool:
        if self.require or self.key is not None:
            if not keys:
                raise UsageError(NO_KEYS)
            return True
        return bool(keys) and not self.allow_unsigned

    def enforce(self, header: Header, where: Any) -> SignatureCheck:
        """The signature check of ``header``; PackError (one line) when the policy refuses."""
        keys = self.keys()
        required = self.required(keys)
        check = check_signature(header, keys)
        if check.status in ("invalid", "malformed"):
            raise PackError(f"{where}: refused: {check.detail}; run kbpack verify {where}")
        if required and check.status == "unsigned":
            raise PackError(
                f"{where}: refused: the pack is not signed, and this machine requires a "
                "signature by a trusted key; ask its maker to sign it, or pass --allow-unsigned"
            )
        if required and check.status != "valid":
            raise PackError(f"{where}: refused: {check.detail}; or pass --allow-unsigned")
        return check

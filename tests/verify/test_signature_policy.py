"""Issue 30, item 6: a signature policy that every reader follows (docs/verify.md).

With trusted keys configured, ``verify``, ``query``, ``serve``/``mcp`` (their library) and
``kbpack.open`` refuse an unsigned pack and one signed by an unknown key unless told
``--allow-unsigned``; ``--require-signature`` with no trusted key configured is a usage error
(exit 2): a signature checked against no key proves nothing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

import kbpack
from kbpack.cli.main import cli
from kbpack.errors import PackError, UsageError
from kbpack.serve.library import Library


def run(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(cli, list(args))
    return r.exit_code, r.output


@pytest.fixture(scope="module")
def packs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("policy")
    (root / "src").mkdir()
    (root / "src" / "a.md").write_text("# Pump\n\nPrime the pump through the bleed valve.\n")
    unsigned = root / "unsigned.kbpack"
    assert run("build", str(root / "src"), "-o", str(unsigned), "--no-vectors", "-q")[0] == 0
    keys = root / "trusted"
    keys.mkdir()
    for who in ("team", "stranger"):
        code, out = run("keygen", "-o", str(root / who), "--json")
        assert code == 0, out
    shutil.copy(root / "team.pub", keys / "team.pub")  # only the team's key is trusted
    out = {"unsigned": unsigned, "keys": keys}
    for who in ("team", "stranger"):
        signed = root / f"by-{who}.kbpack"
        shutil.copy(unsigned, signed)
        assert run("sign", str(signed), "--key", str(root / f"{who}.key"))[0] == 0
        out[who] = signed
    return out


# (pack, keys configured, extra option) -> refused?
CASES = [
    ("unsigned", False, None, False),
    ("stranger", False, None, False),
    ("unsigned", True, None, True),
    ("stranger", True, None, True),
    ("team", True, None, False),
    ("unsigned", True, "--allow-unsigned", False),
    ("stranger", True, "--allow-unsigned", False),
    ("team", True, "--require-signature", False),
    ("unsigned", True, "--require-signature", True),
]


@pytest.mark.parametrize(("which", "configured", "option", "refused"), CASES)
def test_every_reader_follows_the_policy(
    packs: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    which: str,
    configured: bool,
    option: str | None,
    refused: bool,
) -> None:
    monkeypatch.setenv("KBPACK_TRUSTED_KEYS", str(packs["keys"] if configured else tmp_path))
    pack = str(packs[which])
    opts = [option] if option else []
    code, out = run("verify", pack, *opts, "--json")
    assert code == (1 if refused else 0), out
    if refused:
        codes = {f["code"] for f in json.loads(out)["findings"]}
        assert codes & {"signature-missing", "signature-untrusted-key"}, codes
    code, out = run("query", pack, *opts, "--", "bleed valve")
    assert code == (1 if refused else 0), out
    if refused:
        assert out.count("\n") == 1 and "refused" in out and "Traceback" not in out, out
    kw = {
        "allow_unsigned": option == "--allow-unsigned",
        "require_signature": option == "--require-signature",
    }
    from kbpack.pack.sign import SignaturePolicy

    policy = SignaturePolicy(None, kw["require_signature"], kw["allow_unsigned"])
    if refused:
        with pytest.raises(PackError, match="refused"):
            kbpack.open(pack, load_model=False, **kw)
        with pytest.raises(PackError, match="refused"):
            Library([Path(pack)], load_model=False, policy=policy)
    else:
        with kbpack.open(pack, load_model=False, **kw) as p:
            assert p.search("bleed valve", mode="bm25").results
        with Library([Path(pack)], load_model=False, policy=policy) as lib:
            assert lib.get(None).verify["checks"]["bytes_sha256"] is True


def test_require_signature_without_trusted_keys_is_a_usage_error(
    packs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KBPACK_TRUSTED_KEYS", str(tmp_path))  # no .pub there
    for args in (["verify"], ["query"]):
        extra = ["--", "valve"] if args == ["query"] else []
        code, out = run(*args, str(packs["team"]), "--require-signature", *extra)
        assert code == 2, out
        assert "no trusted keys are configured" in out
    with pytest.raises(UsageError, match="no trusted keys are configured"):
        kbpack.open(packs["team"], load_model=False, require_signature=True)

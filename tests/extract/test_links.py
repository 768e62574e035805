"""Links between the documents of a pack (spec §3.12, issue 33): the HTML extractor keeps each
``<a href>`` that leads to a document of the pack, or to an anchor in one, with the offsets of
its text; the writer resolves them to document rows and offsets; verify checks them (and their
digests); update, merge, split and migrate keep or rebuild them; a pack without them is as
valid as before; the reader renders them as links."""

from __future__ import annotations

import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
from cli_run import run

from kbpack.extract import extract_file
from kbpack.extract.html import extract_html, extract_links, link_target
from kbpack.pack import format as F
from kbpack.pack.read import PackReader
from kbpack.verify.pipeline import verify_pack
from tests.fixture_pack import rewritten
from tests.paths import REPO_ROOT

ROOT = REPO_ROOT
GOLDEN_0_2_0 = ROOT / "fixtures" / "golden" / "v2-0.2.0.kbpack"
INDEX = """<html><head><title>Pump manual</title></head><body>
<nav><a href="sub/seals.html">Seals (navigation, dropped)</a></nav>
<h1>Pump manual</h1>
<p>Read the <a href="sub/seals.html#replace">seal  replacement   steps</a> first, then the
<a href="#priming"> priming section </a>. The <a href="https://example.com/">vendor</a>,
<a href="mailto:a@b.c">mail</a>, <a href="missing.html">a missing page</a> and
<a href="#">top</a> are not links of the pack.</p>
<ul><li><a href="sub/seals.html">Seals</a></li><li><a href="./sub/../notes.md">Notes</a></li></ul>
<table><tr><td><a href="sub/seals.html#no-such-anchor">in a table</a></td><td>cell</td></tr></table>
<h2 id="priming">Priming</h2>
<p>Open the bleed valve and prime the pump.</p>
</body></html>
"""
SEALS = """<html><head><title>Seals</title></head><body>
<h1>Seals</h1>
<p>Seals wear out. Go <a href="../index.html">back to the manual</a>.</p>
<a name="replace"></a>
<h2>Replacing a seal</h2>
<p>Replace the mechanical seal every 4000 hours of operation.</p>
</body></html>
"""
NOTES = "# Notes\n\nThe pump notes, in Markdown: no links are kept from Markdown.\n"


def links_of(pack: Path) -> list[tuple[str, str, str, str]]:
    """(source name, link text, target name, the target's text from the offset on, 16 chars)."""
    out = []
    with PackReader(pack) as r:
        names = r.strings(F.DOC_NAME)
        for d, name in enumerate(names):
            text = r.text(d)
            for a, b, t, at, _anchor in r.links_of(d):
                out.append((name, text[a:b], names[t], r.text(t)[at : at + 16]))
    return out


def sources(root: Path) -> Path:
    (root / "sub").mkdir(parents=True)
    (root / "index.html").write_text(INDEX)
    (root / "sub" / "seals.html").write_text(SEALS)
    (root / "notes.md").write_text(NOTES)
    return root


@pytest.fixture(scope="module")
def pack(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = sources(tmp_path_factory.mktemp("docs") / "manual")
    out = tmp_path_factory.mktemp("links") / "manual.kbpack"
    code, _, err = run("build", str(src), "-o", str(out), "--no-vectors", "-q")
    assert code == 0, err
    return out


EXPECTED = [
    ("index.html", "seal replacement steps", "sub/seals.html", "Replacing a seal"),
    ("index.html", "priming section", "index.html", "Priming\n\nOpen th"),
    ("index.html", "Seals", "sub/seals.html", "Seals\n\nSeals wea"),
    ("index.html", "Notes", "notes.md", "# Notes\n\nThe pum"),
    ("index.html", "in a table", "sub/seals.html", "Seals\n\nSeals wea"),
    ("sub/seals.html", "back to the manual", "index.html", "Pump manual\n\nRea"),
]


def test_links_lead_to_the_documents_and_anchors_of_the_pack(pack: Path) -> None:
    assert links_of(pack) == EXPECTED
    with PackReader(pack) as r:
        assert r.counts["links"] == len(EXPECTED)
    assert verify_pack(pack).findings == []


def test_a_reader_written_from_the_spec_reads_the_same_links(pack: Path) -> None:
    import independent_reader as ind

    assert ind.read_links(str(pack)) == EXPECTED
    assert ind.read_links(str(GOLDEN_0_2_0)) is None


def test_the_canonical_text_is_what_a_parse_without_links_gives() -> None:
    """Offsets are sacred: the marked parse never changes the text (it only reads offsets)."""
    for html in (INDEX, SEALS, (ROOT / "fixtures/docs/sqlite/datatype3.html").read_text()):
        builder, _ = extract_html(html)
        text = builder.text()
        found, anchors = extract_links(html, text)
        assert found and anchors
        for a, b, _href in found:
            assert 0 <= a < b <= len(text) and text[a:b] == text[a:b].strip()
        assert all(0 <= at <= len(text) for at in anchors.values())
    doc = extract_file(ROOT / "fixtures/docs/sqlite/datatype3.html", "sqlite/datatype3.html")
    texts = {doc.text[k.start : k.end] for k in doc.links}
    assert {"CAST expression", "STRICT tables", "INTEGER PRIMARY KEY"} <= texts
    cast = next(k for k in doc.links if doc.text[k.start : k.end] == "CAST expression")
    assert (cast.target, cast.anchor) == ("sqlite/lang_expr.html", "castexpr")


def test_a_page_holding_the_mark_characters_is_read_without_links() -> None:
    html = '<p>odd \ufdd0 text <a href="x.html">link</a></p>'
    builder, _ = extract_html(html)
    assert extract_links(html, builder.text()) == ([], {})


@pytest.mark.parametrize(
    ("href", "name", "want"),
    [
        ("x.html", "a/b.html", ("a/x.html", "")),
        ("../x.html#f%20g", "a/b.html", ("x.html", "f g")),
        ("#top", "a/b.html", ("a/b.html", "top")),
        ("sub/", "b.html", ("sub/index.html", "")),
        ("./", "b.html", ("index.html", "")),
        ("../../x.html", "a/b.html", None),
        ("/x.html", "a/b.html", None),
        ("https://example.com/x.html", "b.html", None),
        ("javascript:void(0)", "b.html", None),
        ("#", "b.html", None),
        ("", "b.html", None),
    ],
)
def test_link_target(href: str, name: str, want: tuple[str, str] | None) -> None:
    assert link_target(href, name) == want


def test_a_changed_link_fails_verify(pack: Path, tmp_path: Path) -> None:
    with h5py.File(pack, "r") as h:
        target = h[F.LINK_TARGET][()]
        offset = h[F.LINK_TARGET_OFFSET][()]
        start = h[F.LINK_FROM][()]
    # tampered without restamping: the element's digest says so
    raw = tmp_path / "raw.kbpack"
    shutil.copyfile(pack, raw)
    with h5py.File(raw, "r+") as h:
        h[F.LINK_TARGET][0] = (int(target[0]) + 1) % len(h[F.DOC_NAME])
    found = {(f.code, f.path) for f in verify_pack(raw).findings}
    assert ("digest-mismatch", F.LINK_TARGET) in found or any(
        p == F.LINK_TARGET for _, p in found
    ), found
    # restamped to match: the invariants catch each kind of wrong value
    cases = {
        F.LINK_TARGET: (np.where(np.arange(len(target)) == 0, 99, target).astype("<i4"), "link-document"),
        F.LINK_TARGET_OFFSET: (np.where(np.arange(len(offset)) == 0, 10**6, offset).astype("<i8"), "link-target"),
        F.LINK_FROM: (np.where(np.arange(len(start)) == 1, start[0], start).astype("<i8"), "link-order"),
    }  # fmt: skip
    for path, (values, code) in cases.items():
        bad = rewritten(pack, tmp_path / "bad.kbpack", path, values)
        codes = {f.code for f in verify_pack(bad).findings}
        assert code in codes, (path, codes)


def test_a_pack_without_links_is_valid_and_migrate_keeps_it_so(tmp_path: Path) -> None:
    with h5py.File(GOLDEN_0_2_0, "r") as h:
        assert F.LINKS not in h
    with PackReader(GOLDEN_0_2_0) as r:
        assert not r.has_links and r.links_of(0) == []
    out = tmp_path / "migrated.kbpack"
    code, _, err = run("migrate", str(GOLDEN_0_2_0), "-o", str(out), "-q")
    assert code == 0, err
    with h5py.File(out, "r") as h:
        assert F.LINKS not in h


def test_migrate_keeps_the_links(pack: Path, tmp_path: Path) -> None:
    out = tmp_path / "migrated.kbpack"
    code, _, err = run("migrate", str(pack), "-o", str(out), "-q")
    assert code == 0, err
    assert links_of(out) == EXPECTED
    assert verify_pack(out).findings == []


def test_update_re_resolves_links_to_a_changed_document(pack: Path, tmp_path: Path) -> None:
    src = sources(tmp_path / "manual")
    # the seals page changes: its anchor moves down; the index is taken over unchanged
    (src / "sub" / "seals.html").write_text(
        SEALS.replace("<h1>Seals</h1>", "<h1>Seals</h1>\n<p>A new first paragraph.</p>")
    )
    out = tmp_path / "updated.kbpack"
    code, _, err = run("update", str(pack), str(src), "-o", str(out), "-q")
    assert code == 0, err
    got = links_of(out)
    assert ("index.html", "seal replacement steps", "sub/seals.html", "Replacing a seal") in got
    assert len(got) == len(EXPECTED)
    assert verify_pack(out).findings == []
    # the unchanged index was taken over with its links; removing the seals page drops the
    # links that led there
    (src / "sub" / "seals.html").unlink()
    gone = tmp_path / "gone.kbpack"
    code, _, err = run("update", str(out), str(src), "-o", str(gone), "-q")
    assert code == 0, err
    assert [x[2] for x in links_of(gone)] == ["index.html", "notes.md"]
    assert verify_pack(gone).findings == []


def test_merge_keeps_the_links_inside_each_pack(pack: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "valves.html").write_text(
        '<h1>Valves</h1><p>See <a href="#bypass">the bypass</a>.</p><h2 id="bypass">Bypass</h2>'
        "<p>The bypass opens at 4 bar.</p>"
    )
    second = tmp_path / "valves.kbpack"
    assert run("build", str(other), "-o", str(second), "--no-vectors", "-q")[0] == 0
    merged = tmp_path / "merged.kbpack"
    code, _, err = run("merge", str(pack), str(second), "-o", str(merged), "-q")
    assert code == 0, err
    got = links_of(merged)
    assert sorted(got) == sorted(
        [*EXPECTED, ("valves.html", "the bypass", "valves.html", "Bypass\n\nThe bypa")]
    )
    assert verify_pack(merged).findings == []


def test_split_keeps_the_links_whose_target_is_in_the_same_member(
    pack: Path, tmp_path: Path
) -> None:
    from kbpack.ops.recut import recut

    out = tmp_path / "members"
    out.mkdir()
    recut([pack], out / "m.kbpack", 160 * 1024)  # the CLI's smallest size is 1M
    members = sorted(out.glob("*.kbpack"))
    assert len(members) >= 2, [m.stat().st_size for m in members]
    got = [x for m in members for x in links_of(m)]
    for m in members:
        assert verify_pack(m).findings == []
    # every link kept leads inside its own member, and every link between two documents of
    # one member is kept
    for m in members:
        with PackReader(m) as r:
            names = set(r.strings(F.DOC_NAME))
        want = [x for x in EXPECTED if x[0] in names and x[2] in names]
        assert [x for x in got if x[0] in names] == want


def test_the_reader_renders_links_to_the_target_place(pack: Path) -> None:
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from kbpack.serve.library import Library
    from kbpack.serve.web import create_app

    with Library([pack], load_model=False, verify=False) as lib:
        client = TestClient(create_app(lib), base_url="http://127.0.0.1")
        html = client.get("/doc/index.html", params={"pack": "manual"}).text
        with PackReader(pack) as r:
            at = r.links_of(0)[0][3]
        assert f'<a class="xref" href="/doc/sub/seals.html?pack=manual&amp;at={at}#at">' in html
        there = client.get(f"/doc/sub/seals.html?pack=manual&at={at}").text
        assert '<span class="anchor" id="at"></span>' in there
        api = client.get("/api/doc/index.html", params={"pack": "manual"}).json()
        assert api["links"][0] == {
            "from": api["text"].index("seal replacement steps"),
            "to": api["text"].index(" first"),
            "name": "sub/seals.html",
            "at": at,
        }
        bad = client.get("/doc/sub/seals.html?pack=manual&at=999999")
        assert bad.status_code == 400 and "outside the text" in bad.text


def test_rendering_keeps_every_character_and_one_mark_around_the_hit() -> None:
    pytest.importorskip("starlette")
    import html as html_lib
    import re

    from kbpack.serve.library import Document, Section
    from kbpack.serve.web import render_text

    text = "Seals\n\nGo back to the manual now.\n\nReplacing\n\nReplace it.\n"
    sections = [
        Section(0, 0, "Seals", 0, len(text), -1),
        Section(1, 1, "Seals", 0, text.index("Replacing"), 0),
        Section(2, 1, "Replacing", text.index("Replacing"), len(text), 0),
    ]
    link = (text.index("back"), text.index(" now"), "index.html", 5)
    doc = Document("p", "s.html", "Seals", "html", text, sections, [], [link])
    hit = (text.index("the manual"), text.index("Replace it"))
    html = str(render_text(doc, hit, (0, len(text))))
    assert html.count("<mark id=hit>") == 1 and html.count("</mark>") == 1
    assert '<a class="xref" href="/doc/index.html?pack=p&amp;at=5#at">' in html
    assert '<strong class="heading level1">Replacing</strong>' in html
    marked = re.search(r"<mark id=hit>(.*?)</mark>", html, re.S)
    assert marked is not None
    assert html_lib.unescape(re.sub(r"<[^>]+>", "", marked.group(1))) == text[hit[0] : hit[1]]
    assert html_lib.unescape(re.sub(r"<[^>]+>", "", html)) == text

"""kbpack makes llama.cpp's OpenMP threads sleep when idle (OMP_WAIT_POLICY=PASSIVE): with the
default spin-wait, a query embedded on the main thread ran 15-50x slower than on a worker thread
on this shared machine (bench/embed_thread.py). libgomp reads the variable once, when llama.cpp's
library loads, so what matters is that it is set before llama_cpp is first imported. Checked in a
fresh interpreter each time: this test process has long since loaded llama_cpp."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import kbpack

PROBE = """
import json, os, sys
from pathlib import Path
import kbpack.model.embedder as E
before = "llama_cpp" in sys.modules
policy_at_import = os.environ.get("OMP_WAIT_POLICY")
loaded = False
model = E.default_model_path()
if Path(model).is_file():
    with E.Embedder(model) as embedder:
        embedder.embed_query("a query")
    loaded = "llama_cpp" in sys.modules
print(json.dumps({"before": before, "policy": policy_at_import, "loaded": loaded,
                  "after": os.environ.get("OMP_WAIT_POLICY")}))
"""


def probe(env_policy: str | None) -> dict[str, object]:
    env = dict(os.environ)
    env.pop("OMP_WAIT_POLICY", None)
    if env_policy is not None:
        env["OMP_WAIT_POLICY"] = env_policy
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def test_passive_is_set_before_llama_cpp_loads() -> None:
    got = probe(None)
    assert got["before"] is False, "importing kbpack.model.embedder must not load llama_cpp"
    assert got["policy"] == "PASSIVE"
    assert got["after"] == "PASSIVE"


def test_a_policy_the_user_chose_wins() -> None:
    got = probe("ACTIVE")
    assert got["policy"] == "ACTIVE" and got["after"] == "ACTIVE"


def test_every_llama_cpp_import_goes_through_kbpack_model_embedder() -> None:
    """The setdefault lives in kbpack/model/embedder.py; a module that imported llama_cpp without
    importing kbpack.model.embedder first could load the library before the variable is set."""
    root = Path(kbpack.__file__).parent
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if "import llama_cpp" in text and path.name != "embedder.py":
            assert "from kbpack.model.embedder import" in text, f"{path} imports llama_cpp directly"

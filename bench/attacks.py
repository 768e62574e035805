"""The adversarial matrix of issue 30 (lane trust): every attack of its items 1, 2, 3, 6 and 8
run against the product, each as the test that crafts the hostile input (a pack made with
h5py, digests and manifest restamped; a swapped file; a crafted URL) and asserts the safe
behaviour. Prints attacks tried / safe / holes: a hole is an attack whose test fails.

    python bench/attacks.py            # ~2-4 min on a loaded 2-core machine

Items 4, 5 and 7 of the issue (terminal escapes, symlinks, denial of service) are another
lane's (trustio) and not in this matrix.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# attack -> the pytest node that mounts it and asserts the safe outcome
ATTACKS: dict[str, str] = {
    "1 /model@sha256 = ../ steps to a victim": "tests/hostile/test_model_hash_path.py::test_a_crafted_model_hash_touches_no_file[relative]",
    "1 /model@sha256 = an absolute path": "tests/hostile/test_model_hash_path.py::test_a_crafted_model_hash_touches_no_file[absolute]",
    "1 /model@sha256 uppercase hex": "tests/hostile/test_model_hash_path.py::test_a_crafted_model_hash_touches_no_file[uppercase]",
    "2 serve: damaged file swapped in, then a good one": "tests/serve/test_served_file.py::test_serve_serves_the_checked_file_until_the_new_one_passed",
    "2 swap between the check and the read": "tests/serve/test_served_file.py::test_a_file_swapped_after_the_check_is_not_the_file_read",
    "2 mcp: file swapped under the library": "tests/serve/test_served_file.py::test_mcp_notices_a_changed_file",
    "2 a partly checked pack labelled verified": "tests/serve/test_served_file.py::test_full_verify_is_the_only_verified_label",
    "3 embedded GGUF bert.block_count = 0": "tests/hostile/test_model_header_check.py::test_a_crafted_block_count_is_refused_before_llama_cpp[0]",
    "3 embedded GGUF bert.block_count = 0xFFFFFFFF": "tests/hostile/test_model_header_check.py::test_a_crafted_block_count_is_refused_before_llama_cpp[4294967295]",
    "3 embedded GGUF whose load fails in llama.cpp": "tests/hostile/test_model_header_check.py::test_a_pack_model_is_first_loaded_in_a_child",
    "6 unsigned / unknown signer with trusted keys": "tests/verify/test_signature_policy.py::test_every_reader_follows_the_policy",
    "6 --require-signature with no trusted key": "tests/verify/test_signature_policy.py::test_require_signature_without_trusted_keys_is_a_usage_error",
    "8 set id with '/', '../', uppercase, empty, a number": "tests/pack/test_set_id_grammar.py",
    "8 open redirect //evil.example/x; newline in a document name": "tests/serve/test_served_file.py::test_found_8_in_serve",
    "8 damaged pack on the HTML search page": "tests/serve/test_served_file.py::test_a_damaged_pack_gives_the_search_page_an_error_page",
}


def main() -> int:
    safe, holes = 0, []
    for name, node in ATTACKS.items():
        r = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", node],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        ok = r.returncode == 0
        safe += ok
        if not ok:
            holes.append(name)
        print(f"{'safe' if ok else 'HOLE'}  {name}", flush=True)
    print(f"attacks tried {len(ATTACKS)}, safe {safe}, holes {len(holes)}")
    return 1 if holes else 0


if __name__ == "__main__":
    sys.exit(main())

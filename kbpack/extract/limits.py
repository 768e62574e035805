"""Per-document limits: what a hostile or huge file may cost before it is refused."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """Defaults suit a laptop; every one is checked before the expensive step it guards."""

    max_file_bytes: int = 100 * 2**20
    max_pages: int = 2000
    # DOCX: sum of the zip members' declared sizes, checked (with the compression ratio and
    # the member count) before python-docx decompresses anything.
    max_decompressed_bytes: int = 512 * 2**20
    max_zip_members: int = 10_000
    max_zip_ratio: float = 200.0  # uncompressed / compressed, over the whole archive
    # Per document; a parser still running then is killed (status failed, stage "timeout").
    timeout_s: float = 120.0
    # Address space of the extraction worker process; 0 = no limit. A blow-up becomes a
    # failed document (stage "limits") instead of swapping the machine.
    max_worker_memory_bytes: int = 4 * 2**30

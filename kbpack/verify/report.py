"""The report ``kbpack verify`` returns: findings and a status and one-line summary per step."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kbpack.pack.structure import Finding

STEPS = ("bytes", "signature", "structure", "digests", "invariants")
HEADER = "header"  # the path of findings about the user block


@dataclass
class VerifyReport:
    path: str
    findings_by_step: dict[str, list[Finding]] = field(default_factory=dict)
    status: dict[str, str] = field(default_factory=dict)  # step -> ok / failed / skipped
    summary: dict[str, str] = field(default_factory=dict)  # step -> one human line
    notes: list[str] = field(default_factory=list)
    signature: dict[str, Any] | None = None
    stats: dict[str, int] = field(default_factory=dict)

    @property
    def findings(self) -> list[Finding]:
        return [f for step in STEPS for f in self.findings_by_step.get(step, [])]

    @property
    def intact(self) -> bool:
        return not self.findings

    def add(self, step: str, findings: list[Finding], summary: str = "") -> None:
        """Record a step's findings; ``summary`` describes it when it passed."""
        found = self.findings_by_step.setdefault(step, [])
        found.extend(findings)
        self.status[step] = "failed" if found else "ok"
        if found:
            self.summary[step] = f"{len(found)} finding{'s' if len(found) != 1 else ''}"
        elif summary:
            self.summary[step] = summary

    def skip(self, step: str, why: str) -> None:
        self.status[step] = "skipped"
        self.summary[step] = why

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "intact": self.intact,
            "steps": {
                s: {
                    "status": self.status.get(s, "skipped"),
                    "summary": self.summary.get(s, ""),
                    "findings": [f.as_dict() for f in self.findings_by_step.get(s, [])],
                }
                for s in STEPS
            },
            "findings": [f.as_dict() for f in self.findings],
            "signature": self.signature,
            "notes": self.notes,
            "stats": self.stats,
        }

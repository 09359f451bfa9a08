"""The outcome of ``loadtune doctor --verify``: one typed result per check of the GPU path, and the
whole run, as JSON a user can attach to a bug report. Data only: the checks are decided in
``analysis.verify``, measured in ``engine.verify`` and rendered in ``report.verify``."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from loadtune.version import __version__

SCHEMA = "loadtune/verify"
SCHEMA_VERSION = 1
NO_CUDA = "no CUDA device: nothing to verify"


@dataclass
class Check:
    """One check: its name, whether it passed, one line for people with the figures in it, and the
    figures themselves (plain numbers and words, for the JSON)."""

    name: str
    passed: bool
    summary: str
    figures: dict[str, Any] = field(default_factory=dict)
    note: str | None = None  # what limits the check, or what a failure means

    @classmethod
    def from_dict(cls, data: dict) -> Check:
        return cls(str(data["name"]), bool(data["passed"]), str(data["summary"]), dict(data.get("figures") or {}),
                   data.get("note"))


@dataclass
class Verification:
    """Every check run, in order; why nothing was verified (``refused``) or why the checks stopped
    early (``error``); and the machine's facts (``doctor``'s, read by the process that ran the checks)."""

    checks: list[Check] = field(default_factory=list)
    refused: str | None = None
    error: str | None = None
    facts: dict[str, Any] = field(default_factory=dict)
    wall_s: float = 0.0

    @property
    def passed(self) -> bool:
        """Every check ran and passed (a refusal or an early stop is never a pass)."""
        return self.refused is None and self.error is None and bool(self.checks) and all(c.passed for c in self.checks)

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if not c.passed]

    def to_dict(self) -> dict:
        return {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "loadtune": __version__, "passed": self.passed,
                **asdict(self)}

    @classmethod
    def from_dict(cls, data: dict) -> Verification:
        return cls([Check.from_dict(c) for c in data.get("checks", [])], data.get("refused"), data.get("error"),
                   dict(data.get("facts") or {}), float(data.get("wall_s", 0.0)))

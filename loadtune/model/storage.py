"""The page cache's state a scan measured in: which files the dataset reads, how large they are, the
state every config was timed in (warm: read from the page cache; cold: fetched from storage), why
that state, and a few configs timed alone in the other state.

A dataset read from files runs many times faster from the page cache than from storage, and the
best config differs between the two (docs/measuring.md, "Storage"): a scan that mixed them would
credit a knob with what the cache gave.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from loadtune.model.known import from_known
from loadtune.model.trial import Trial

WARM, COLD = "warm", "cold"
STATES = (WARM, COLD)
ASKED = ("auto", WARM, COLD)


@dataclass
class DatasetFiles:
    """The files a dataset reads: named outright (``--data``) or found by reading some of it."""

    roots: list[str]  # folders or files; every file under them counts
    files: int
    bytes: int  # their size on storage
    found_by: str  # "data": named by --data; "opened": opened or mapped while samples were read
    suffixes: list[str] = field(default_factory=list)  # only files named so count (those seen read); none: every file
    recursive: bool = True  # the roots' subfolders count too


@dataclass
class StorageState:
    """What a scan did with the page cache, and why."""

    asked: str  # "auto" | "warm" | "cold"
    state: str | None  # "warm" | "cold"; None: the scan found no files the dataset reads (nothing to set)
    why: str  # one sentence: why this state
    files: DatasetFiles | None = None
    cache_bytes: int | None = None  # what the page cache can hold beside the job: available memory less the loader's peak
    droppable: bool | None = None  # dropping the files emptied the cache of them (None: not tried)
    # configs timed alone in the other state, the pick first: what that state gives and would pick
    other: list[Trial] = field(default_factory=list)

    @property
    def other_state(self) -> str | None:
        return None if self.state is None else (COLD if self.state == WARM else WARM)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["other"] = [t.to_dict() for t in self.other]
        return data

    @classmethod
    def from_dict(cls, data: dict | None) -> "StorageState | None":
        if not data:
            return None
        return from_known(cls, data, files=from_known(DatasetFiles, data["files"]) if data.get("files") else None,
                          other=[Trial.from_dict(t) for t in data.get("other", [])])

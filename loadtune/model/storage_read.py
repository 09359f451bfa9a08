"""What ``loadtune doctor --storage PATH`` found about the storage a dataset lives on: its filesystem,
whether the page cache lets go of its files there, and the random-read rate of whole files at a few
depths of reads in flight. Data only: measured in ``engine.diskread``, decided in
``analysis.diskread``, rendered in ``report.doctor``."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from loadtune.model.estimate import Estimate
from loadtune.model.known import from_known


@dataclass
class ReadLevel:
    """Whole files read in random order by ``in_flight`` threads for ``seconds``: the rates are the
    median of equal windows of that time, with their interval."""

    in_flight: int
    files: int  # read to the end within the level's time
    bytes: int
    seconds: float
    files_per_s: Estimate
    mb_per_s: Estimate  # 10^6 bytes a second

    @classmethod
    def from_dict(cls, data: dict) -> ReadLevel:
        return from_known(cls, data, files_per_s=from_known(Estimate, data["files_per_s"]),
                          mb_per_s=from_known(Estimate, data["mb_per_s"]))


@dataclass
class StorageReadReport:
    """The storage under ``path``, read-only: what its mount is, whether dropping a file from the page
    cache worked there (``resident_after_drop``: the share of a few files just read still cached after
    the drop), and the reads at each level, cold where ``droppable``."""

    path: str
    filesystem: str | None  # the mount's type: ext4, xfs, nfs4, fuse.gcsfuse, ...; None: not found
    mount_point: str | None
    device: str | None  # the mount's source: /dev/nvme0n1p2, server:/export, ...
    files_found: int
    sample_files: int  # the files the reads choose from
    sample_bytes: int
    resident_after_read: float | None  # None: mincore could not tell
    resident_after_drop: float | None
    droppable: bool | None  # None: could not be told
    levels: list[ReadLevel] = field(default_factory=list)
    note: str | None = None  # what the cache's behaviour there means for the figures and for a scan
    piece_bytes: int | None = None  # files larger than this were read in pieces of it (a level's "files" count reads)

    @property
    def cold(self) -> bool:
        """The reads came from storage: every file was dropped from the page cache before it was read."""
        return self.droppable is True

    def to_dict(self) -> dict:
        return {**asdict(self), "cold": self.cold}

    @classmethod
    def from_dict(cls, data: dict) -> StorageReadReport:
        return from_known(cls, data, levels=[ReadLevel.from_dict(level) for level in data.get("levels", [])])

"""Archetype: tar shards read as a stream (the WebDataset layout): an IterableDataset whose workers
each read whole shards in turn, member by member, and decode each member as a 128x128x3 uint8 image.

Reads are large and sequential within a shard, so storage serves them far faster than small files,
and the page cache's state moves the speed less; the workers split the shards between them. The
shards are written once into ``LOADTUNE_SHARDS_DIR`` (default ``/var/tmp/loadtune-shards``):
``LOADTUNE_SHARDS`` of them (default 40), 500 samples of 48 KiB each (0.94 GiB in all).
"""

import io
import os
import tarfile

import torch
from torch.utils.data import IterableDataset, get_worker_info

SIDE, CHANNELS = 128, 3
SAMPLE_BYTES = SIDE * SIDE * CHANNELS
PER_SHARD = 500
ROOT = os.environ.get("LOADTUNE_SHARDS_DIR", "/var/tmp/loadtune-shards")
COUNT = int(os.environ.get("LOADTUNE_SHARDS", "40"))


def write_shards(root: str = ROOT, count: int = COUNT) -> list[str]:
    """The shards, written where missing (deterministic bytes) and synced, so their pages can be dropped."""
    os.makedirs(root, exist_ok=True)
    paths = [os.path.join(root, f"shard-{i:04d}.tar") for i in range(count)]
    wrote = False
    for s, path in enumerate(paths):
        if os.path.exists(path):
            continue
        with tarfile.open(path + ".part", "w") as tar:
            for k in range(PER_SHARD):
                g = torch.Generator().manual_seed(s * PER_SHARD + k)
                data = torch.randint(0, 256, (SAMPLE_BYTES,), dtype=torch.uint8, generator=g).numpy().tobytes()
                info = tarfile.TarInfo(f"{s * PER_SHARD + k:08d}.raw")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        os.replace(path + ".part", path)
        wrote = True
    if wrote:
        os.sync()
    return paths


class Shards(IterableDataset):
    def __init__(self, paths: list[str]):
        self.paths = paths

    def __len__(self) -> int:
        return len(self.paths) * PER_SHARD

    def __iter__(self):
        info = get_worker_info()
        mine = self.paths if info is None else self.paths[info.id::info.num_workers]
        for path in mine:
            with tarfile.open(path, "r") as tar:
                for member in tar:
                    raw = tar.extractfile(member).read()
                    image = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(SIDE, SIDE, CHANNELS)
                    yield image.permute(2, 0, 1).contiguous(), int(member.name[:8]) % 10


def dataset() -> Shards:
    return Shards(write_shards())

"""Archetype: a folder of small files on the local disk, one file a sample (the shape of most
preprocessed image sets): each sample is read from its file, viewed as a 128x128x3 uint8 image and
cropped lightly.

Its speed is the page cache's: from the cache (every epoch after the first, for a dataset that fits
in memory) a loader without workers is fastest, since a worker's inter-process transfer costs more than
the read; from storage (every epoch of a dataset larger than memory) reads wait on the disk, and
workers that wait in parallel win. The files are written once into ``LOADTUNE_SMALL_FILES_DIR``
(default ``/var/tmp/loadtune-small-files``), ``LOADTUNE_SMALL_FILES`` of them (default 20,000, 0.94 GiB).
"""

import os

import torch
from torch.utils.data import Dataset

SIDE, CHANNELS, CROP = 128, 3, 112
FILE_BYTES = SIDE * SIDE * CHANNELS  # 48 KiB
ROOT = os.environ.get("LOADTUNE_SMALL_FILES_DIR", "/var/tmp/loadtune-small-files")
COUNT = int(os.environ.get("LOADTUNE_SMALL_FILES", "20000"))


def write_files(root: str = ROOT, count: int = COUNT) -> list[str]:
    """The dataset's files, written where missing (deterministic bytes per index) and synced, so that
    their pages are clean and can be dropped from the page cache."""
    os.makedirs(root, exist_ok=True)
    paths = [os.path.join(root, f"{i:06d}.raw") for i in range(count)]
    wrote = False
    for i, path in enumerate(paths):
        if os.path.exists(path) and os.path.getsize(path) == FILE_BYTES:
            continue
        g = torch.Generator().manual_seed(i)
        data = torch.randint(0, 256, (FILE_BYTES,), dtype=torch.uint8, generator=g)
        with open(path, "wb") as f:
            f.write(data.numpy().tobytes())
        wrote = True
    if wrote:
        os.sync()
    return paths


class SmallFiles(Dataset):
    def __init__(self, paths: list[str]):
        self.paths = paths

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int):
        with open(self.paths[index], "rb") as f:
            raw = f.read()
        image = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(SIDE, SIDE, CHANNELS)
        top = index % (SIDE - CROP)
        return image[top:top + CROP, top:top + CROP].permute(2, 0, 1).contiguous(), index % 10


def dataset() -> SmallFiles:
    return SmallFiles(write_files())

"""A pre-batched stream: webdataset shards read by a ``WebLoader(batch_size=None)``.

Sharded tar streams batch inside the pipeline (``.batched(64)``), and the DataLoader around them
only runs the pipeline in its workers (``batch_size=None``: no batching of its own). loadtune
cannot rebuild such a loader from a dataset, so the spec defines ``loader(**knobs)``, and the
knobs go to the ``WebLoader``. The pipeline's batches are the batches: loadtune counts samples
from them (a short last batch counts short) and does not search the batch size; since it cannot
read 64 off the loader, ``loadtune_options`` declares it (the table's label and check's shaped
calibration use it; a first batch of another size is flagged).

Each worker reads its own shards (webdataset's ``split_by_worker``): with more workers than
shards the extra workers have nothing to read (``empty_check=False`` lets them idle; by default
webdataset refuses such a loader, and the scan would show that config failed with its message). The shards (8 x 256 samples of a 3x64x64
float image and a label) are written once to a temporary folder.

Needs ``pip install webdataset`` (it does not replace torch).

Try it:

    loadtune scan examples/webdataset_stream.py
    loadtune scan examples/webdataset_stream.py --workers 0,1,2,4,8
"""

import os
import tempfile
from pathlib import Path

import torch
import webdataset as wds

BATCH_SIZE = 64
SHARDS, PER_SHARD = 8, 256
FOLDER = Path(tempfile.gettempdir()) / "loadtune-example-webdataset"


def write_shards() -> list[str]:
    """The shards, written once (atomically: several trial processes may start at once)."""
    FOLDER.mkdir(exist_ok=True)
    paths = []
    for shard in range(SHARDS):
        path = FOLDER / f"train-{shard:04d}.tar"
        if not path.exists():
            partial = FOLDER / f".{path.name}.{os.getpid()}"
            g = torch.Generator().manual_seed(shard)
            with wds.TarWriter(str(partial)) as sink:
                for i in range(PER_SHARD):
                    sink.write({"__key__": f"{shard:04d}{i:05d}", "image.pth": torch.rand(3, 64, 64, generator=g),
                                "cls": i % 10})
            partial.replace(path)
        paths.append(str(path))
    return paths


def augment(sample):
    image, label = sample
    return image.flip(-1) * 2 - 1, label  # a stand-in for per-sample CPU work


def loader(**knobs) -> wds.WebLoader:
    """The training stream: shards -> decode -> augment -> batches of 64, run by the WebLoader's workers."""
    pipeline = (wds.WebDataset(write_shards(), shardshuffle=False, empty_check=False).decode().to_tuple("image.pth", "cls")
                .map(augment).batched(BATCH_SIZE))
    return wds.WebLoader(pipeline, batch_size=None, **knobs)


loadtune_options = {"batch_size": BATCH_SIZE}  # the stream's own batch size, declared (it is not searched)

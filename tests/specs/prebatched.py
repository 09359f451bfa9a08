"""A pre-batched stream (needs webdataset): 2 shards of 10 samples, batched by 4 in the pipeline (batches
of 4, 4, 2 per shard), run by a WebLoader(batch_size=None); its batch size is declared."""

import os
import tempfile
from pathlib import Path

import torch
import webdataset as wds

FOLDER = Path(tempfile.gettempdir()) / f"loadtune-test-prebatched-{os.getuid()}"


def shards():
    FOLDER.mkdir(exist_ok=True)
    paths = []
    for shard in range(2):
        path = FOLDER / f"s{shard}.tar"
        if not path.exists():
            partial = FOLDER / f".s{shard}.{os.getpid()}"
            with wds.TarWriter(str(partial)) as sink:
                for i in range(10):
                    sink.write({"__key__": f"{shard}{i:03d}", "x.pth": torch.full((3,), float(i)), "cls": i})
            partial.replace(path)
        paths.append(str(path))
    return paths


def loader(**knobs):
    pipeline = wds.WebDataset(shards(), shardshuffle=False).decode().to_tuple("x.pth", "cls").batched(4)
    return wds.WebLoader(pipeline, batch_size=None, **knobs)


loadtune_options = {"batch_size": 4}

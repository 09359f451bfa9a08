"""torchvision's ``ImageFolder`` over PNG files, with the usual training transforms.

``ImageFolder`` is a map-style Dataset: ``dataset()`` returns it and loadtune builds the loader.
The images (400 PNGs of 96x96 in 4 classes) are written once to a temporary folder.

Needs torchvision built for your torch. PyPI's torchvision wheels are each built against one torch
release; where none matches (as for torch 2.13.0 when this was written), ``import torchvision``
fails and so does this spec, with a one-line message and exit code 2.

Try it:

    loadtune scan examples/imagefolder.py
"""

import os
import tempfile
from pathlib import Path

import torch
from torchvision import datasets, transforms
from torchvision.io import write_png

FOLDER = Path(tempfile.gettempdir()) / "loadtune-example-imagefolder"
CLASSES, PER_CLASS = 4, 100


def write_images() -> Path:
    """The class folders of PNGs, written once (each file atomically)."""
    for c in range(CLASSES):
        folder = FOLDER / f"class{c}"
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(PER_CLASS):
            path = folder / f"{i:04d}.png"
            if not path.exists():
                g = torch.Generator().manual_seed(c * 1000 + i)
                partial = folder / f".{i:04d}.{os.getpid()}.png"
                write_png(torch.randint(0, 256, (3, 96, 96), dtype=torch.uint8, generator=g), str(partial))
                partial.replace(path)
    return FOLDER


TRAIN = transforms.Compose([
    transforms.RandomResizedCrop(64),
    transforms.RandomHorizontalFlip(),
    transforms.ToTensor(),
    transforms.Normalize([0.5, 0.5, 0.5], [0.25, 0.25, 0.25]),
])


def dataset():
    return datasets.ImageFolder(str(write_images()), transform=TRAIN)


loadtune_options = {"batch_size": 64}

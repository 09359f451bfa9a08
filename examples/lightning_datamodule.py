"""A LightningDataModule: scan the loader its ``train_dataloader()`` builds.

``loadtune scan examples/lightning_datamodule.py:ImagesDataModule`` instantiates the class (a
factory returning a DataModule works too), runs ``prepare_data()`` once and ``setup("fit")`` in
every process that builds the loader (as Lightning does in every training process), and takes
``train_dataloader()``. Every config is that DataLoader rebuilt with the config's knobs, keeping
its dataset, sampler, collate_fn and worker_init_fn; its batch size stays the DataModule's unless
you pass ``--batch-size``. The knobs ``train_dataloader()`` sets today (here ``num_workers=1``) are
measured as your current settings: the table marks them, and the recommendation states the gain
over them (or says to keep them).

Needs ``pip install lightning`` (it does not replace torch). Importing lightning takes a few
seconds in every trial process.

Try it:

    loadtune scan examples/lightning_datamodule.py:ImagesDataModule
    loadtune scan examples/lightning_datamodule.py:ImagesDataModule --current "num_workers=4,persistent_workers=True"
"""

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, Dataset


class NoisyImages(Dataset):
    """3x64x64 images with a little per-sample CPU work (a stand-in for decoding and augmenting)."""

    def __init__(self, n: int, seed: int):
        self.n, self.seed = n, seed

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        g = torch.Generator().manual_seed(self.seed * 100_003 + i)
        image = torch.rand(3, 64, 64, generator=g)
        for _ in range(4):
            image = torch.nn.functional.avg_pool2d(image[None], 3, 1, 1)[0]
        return image, i % 10


class ImagesDataModule(pl.LightningDataModule):
    def __init__(self, batch_size: int = 64):
        super().__init__()
        self.batch_size = batch_size

    def prepare_data(self) -> None:
        pass  # downloads go here: loadtune runs it once, in its own process

    def setup(self, stage: str) -> None:
        if stage == "fit":
            self.train_set, self.val_set = NoisyImages(4096, seed=0), NoisyImages(512, seed=1)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True, num_workers=1, persistent_workers=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.batch_size)

"""A real LightningDataModule (needs lightning): 24 samples, batch size 4, one persistent worker in
its train_dataloader(), a collate_fn of its own that tags every batch."""

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, Dataset


class Numbers(Dataset):
    def __len__(self):
        return 24

    def __getitem__(self, i):
        return torch.tensor([float(i)])


def tagged(items):
    return {"x": torch.stack(items), "tag": "mine"}


def step(batch):
    if batch["tag"] != "mine":
        raise AssertionError("the DataModule's collate_fn was not used")


class Numbers4(pl.LightningDataModule):
    def setup(self, stage):
        self.train = Numbers()

    def train_dataloader(self):
        return DataLoader(self.train, batch_size=4, shuffle=True, collate_fn=tagged, num_workers=1, persistent_workers=True)

"""Tuning the DataLoader inside the training job: ``loadtune.autotune`` in place of ``DataLoader``.

A small classifier trains on the CPU on synthetic "images" whose decoding and augmentation cost a
couple of milliseconds each, as JPEG decoding does. From the first batch autotune tries a few
loader configs on this very loop (the real step), each for a short window, races the best few side
by side, settles on the best and logs its decision once; the later epochs run on a plain DataLoader
with that config. Every sample is trained on exactly once per epoch, switches and turns included. Runs in well under a minute on a laptop CPU:

    python examples/train_autotune.py

Under torchrun each rank makes its loader the same way (with a DistributedSampler); the ranks try the
same configs at the same steps and decide together.
"""

import argparse
import logging

import torch
from torch import nn
from torch.utils.data import Dataset

import loadtune


class SyntheticImages(Dataset):
    """3x32x32 images made from noise with a few rounds of blurring (the "decode"), flipped at random
    (the "augmentation"); the label is the brighter half. Deterministic per index."""

    def __init__(self, length: int = 2048, rounds: int = 12):
        self.length, self.rounds = length, rounds

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        if torch.get_num_threads() != 1:
            torch.set_num_threads(1)  # a worker's share of the CPU, as in a real loader
        g = torch.Generator().manual_seed(index)
        x = torch.rand(3, 32, 32, generator=g)
        kernel = torch.full((3, 1, 3, 3), 1 / 9)
        for _ in range(self.rounds):
            x = torch.conv2d(x.unsqueeze(0), kernel, padding=1, groups=3).squeeze(0) + 0.01 * x
        if torch.rand(1, generator=g).item() < 0.5:
            x = x.flip(-1)
        label = int(x[:, :, :16].mean() > x[:, :, 16:].mean())
        return x, label


def model() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(16, 32, 3, padding=1),
                         nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(512, 2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--samples", type=int, default=2048)
    parser.add_argument("--save", default=None, help="also save the decision as loadtune JSON (then: loadtune show FILE)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    torch.manual_seed(0)

    data = SyntheticImages(args.samples)
    loader = loadtune.autotune(data, batch_size=16, shuffle=True, save=args.save)  # instead of DataLoader(...)
    net = model()
    optimiser = torch.optim.SGD(net.parameters(), lr=0.05)
    for epoch in range(args.epochs):
        seen, total = 0, 0.0
        for images, labels in loader:
            loss = nn.functional.cross_entropy(net(images), labels)
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            seen += len(labels)
            total += loss.item() * len(labels)
        print(f"epoch {epoch}: {seen} samples, loss {total / seen:.3f}, loader config {loader.config.label()}")
    report = loader.report()
    if report.settled:
        print(f"settled on {report.config.label()} after {report.cost.seconds:.1f} s of tuning")
    else:
        print(f"still tuning after {args.epochs} epochs (it settles within 20): {report.text()}")


if __name__ == "__main__":
    main()

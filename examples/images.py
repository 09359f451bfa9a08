"""Image classification, ImageNet style: every sample costs CPU time to decode and augment.

This is the classic case for DataLoader workers. Each ``__getitem__`` does what a
``torchvision.datasets.ImageFolder`` with the usual training transforms does:

    decode JPEG -> RandomResizedCrop(224) -> RandomHorizontalFlip -> ToTensor -> Normalize

No image files or torchvision are needed: the "decode" step deterministically synthesises a
uint8 H x W x 3 image from the sample index (with a seeded ``torch.Generator``) at a cost in the
same ballpark as decoding a JPEG of that size, and the transforms are written with plain torch ops.
A sample takes a few milliseconds on one core, so a single process (``num_workers=0``) cannot keep
up, and worker processes, each on a core of its own, add throughput until the cores run out.

Try it:

    loadtune scan examples/images.py
    loadtune scan examples/images.py --workers 0,2,4 --prefetch 2 --no-persistent

Things to try when the dataset itself is the bound (it is, here): cheaper augmentation, decoding
at reduced size, moving normalisation to the GPU and sending uint8 batches (a quarter of the bytes
of float32), or GPU decoding (DALI, torchvision.io.decode_jpeg on device).
"""

import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

# The usual ImageNet statistics, shaped to broadcast over a C x H x W image.
IMAGENET_MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
IMAGENET_STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)


class SyntheticImageFolder(Dataset):
    """Stands in for ``ImageFolder(root, transform=train_transforms)``.

    Defined at module level so that DataLoader workers started with ``spawn`` or ``forkserver``
    can unpickle it (they import this file by name). Everything random is drawn from generators
    seeded by ``(seed, index)``: no global RNG state is read or changed, and a sample is the same
    whichever worker loads it. (Real training would want a different crop each epoch; mix the
    epoch into the seed for that. For a throughput measurement the cost is what matters.)
    """

    def __init__(self, n: int = 4000, num_classes: int = 1000, out_size: int = 224, seed: int = 0):
        self.n = n
        self.num_classes = num_classes
        self.out_size = out_size
        self.seed = seed

    def __len__(self) -> int:
        return self.n

    def _generator(self, index: int, stream: int) -> torch.Generator:
        # One independent, reproducible stream per (seed, index, purpose).
        return torch.Generator().manual_seed((self.seed * 1_000_003 + index) * 4 + stream)

    def decode(self, index: int) -> torch.Tensor:
        """Pretend to decode a JPEG: a uint8 H x W x 3 image whose size varies like ImageNet's.

        A coarse random grid upsampled bilinearly (smooth "content") plus per-pixel noise
        ("texture"): about the arithmetic of an inverse DCT and colour conversion, and as with a
        real decoder the cost grows with the pixel count.
        """
        g = self._generator(index, 0)
        h = int(torch.randint(256, 384, (1,), generator=g))
        w = int(torch.randint(256, 448, (1,), generator=g))
        coarse = torch.rand(1, 3, h // 16, w // 16, generator=g)
        smooth = F.interpolate(coarse, size=(h, w), mode="bilinear", align_corners=False)[0]
        texture = torch.randint(0, 24, (3, h, w), generator=g, dtype=torch.uint8)
        pixels = smooth.mul_(231).to(torch.uint8).add_(texture)  # stays within 0..254
        return pixels.permute(1, 2, 0).contiguous()  # H x W x 3, the layout decoders produce

    def random_resized_crop(self, image: torch.Tensor, g: torch.Generator) -> torch.Tensor:
        """RandomResizedCrop(out_size, scale=(0.08, 1.0), ratio=(3/4, 4/3)) on a float C x H x W image."""
        _, h, w = image.shape
        area = h * w
        for _ in range(10):  # torchvision's rejection sampling, then fall back to a centre crop
            target = area * float(torch.empty(1).uniform_(0.08, 1.0, generator=g))
            log_ratio = float(torch.empty(1).uniform_(-0.2877, 0.2877, generator=g))  # log(3/4), log(4/3)
            aspect = torch.tensor(log_ratio).exp().item()
            cw = int(round((target * aspect) ** 0.5))
            ch = int(round((target / aspect) ** 0.5))
            if 0 < cw <= w and 0 < ch <= h:
                top = int(torch.randint(0, h - ch + 1, (1,), generator=g))
                left = int(torch.randint(0, w - cw + 1, (1,), generator=g))
                break
        else:
            ch = cw = min(h, w)
            top, left = (h - ch) // 2, (w - cw) // 2
        crop = image[:, top : top + ch, left : left + cw].unsqueeze(0)
        size = (self.out_size, self.out_size)
        return F.interpolate(crop, size=size, mode="bilinear", align_corners=False, antialias=True)[0]

    def __getitem__(self, index: int):
        image = self.decode(index)  # uint8 H x W x 3
        g = self._generator(index, 1)
        x = image.permute(2, 0, 1).float().div_(255)  # ToTensor: float C x H x W in [0, 1]
        x = self.random_resized_crop(x, g)
        if float(torch.rand(1, generator=g)) < 0.5:  # RandomHorizontalFlip(p=0.5)
            x = x.flip(-1)
        x = (x - IMAGENET_MEAN) / IMAGENET_STD  # Normalize
        label = index % self.num_classes  # stands in for the class folder the file sits in
        return x.contiguous(), label


def dataset():
    """Called by loadtune (in each trial process) to build the dataset."""
    return SyntheticImageFolder()


# Scan defaults; any CLI flag overrides them. Default collation stacks the images into a
# B x 3 x 224 x 224 float32 batch and the labels into a tensor, as in a torchvision training script.
loadtune = {"batch_size": 32}

"""Image classification, ImageNet style: every sample costs CPU time to decode and augment.

This is the classic case for DataLoader workers. Each ``__getitem__`` does what a
``torchvision.datasets.ImageFolder`` with the usual training transforms does:

    decode JPEG -> RandomResizedCrop(224) -> RandomHorizontalFlip -> ToTensor -> Normalize

No image files or torchvision are needed: the "decode" step deterministically synthesises a
uint8 H x W x 3 image from the sample index (with a seeded ``torch.Generator``) at a cost in the
same ballpark as decoding a JPEG of that size, and the transforms are written with plain torch ops.
A sample takes a few milliseconds on one core, so a single process (``num_workers=0``) cannot keep
up, and worker processes, each on a core of its own, add throughput until the cores run out.
(With ``num_workers=0`` the main process does this work between training steps, using torch's
intra-op threads for the larger tensor ops; inside a worker torch runs one thread. On a machine
shared with other jobs those intra-op threads can slow down badly, which is one more reason to
measure on the machine that trains.)

Try it:

    loadtune scan examples/images.py
    loadtune scan examples/images.py --workers 0,2,4 --prefetch 2 --no-persistent

Things to try when the dataset itself is the bound (it is, here): cheaper augmentation, decoding
at reduced size, moving normalisation to the GPU and sending uint8 batches (a quarter of the bytes
of float32), or GPU decoding (DALI, torchvision.io.decode_jpeg on device).
"""

import math

import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

# The usual ImageNet statistics, shaped to broadcast over a C x H x W image. ToTensor then
# Normalize computes (x / 255 - mean) / std = x * NORM_SCALE + NORM_SHIFT on a uint8 image x.
IMAGENET_MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
IMAGENET_STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)
NORM_SCALE = 1 / (255 * IMAGENET_STD)
NORM_SHIFT = -IMAGENET_MEAN / IMAGENET_STD


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
        """Pretend to decode a JPEG: a uint8 H x W x 3 image of 256..352 x 256..384 pixels, the size
        of an ImageNet copy stored pre-resized (a common step that makes decoding cheaper).

        Modelled on what a JPEG decoder does, at a similar cost: per 8 x 8 block a base colour
        (the DC coefficients), per pixel the detail (entropy decoding and inverse DCT of the AC
        coefficients; here normal noise from the sample's generator, drawn on one core as a
        decoder works), then rounding to uint8. The cost grows with the pixel count.
        """
        g = self._generator(index, 0)
        bh = int(torch.randint(32, 45, (1,), generator=g))  # 256..352 pixels high
        bw = int(torch.randint(32, 49, (1,), generator=g))  # 256..384 pixels wide
        dc = torch.rand(bh, 1, bw, 1, 3, generator=g) * 200 + 28  # one colour per 8 x 8 block
        ac = torch.randn(bh, 8, bw, 8, 3, generator=g)  # per-pixel detail
        pixels = torch.add(dc, ac, alpha=12).clamp_(0, 255).to(torch.uint8)
        return pixels.view(bh * 8, bw * 8, 3)  # H x W x 3, as decoders give

    def random_resized_crop(self, image: torch.Tensor, g: torch.Generator) -> torch.Tensor:
        """RandomResizedCrop(out_size, scale=(0.08, 1.0), ratio=(3/4, 4/3), antialias=True).

        Takes and returns a uint8 C x H x W image; like torchvision's tensor transforms it resizes
        uint8 directly (torch has a fast path for that) and converts to float afterwards.
        """
        _, h, w = image.shape
        area = h * w
        for _ in range(10):  # torchvision's rejection sampling, then a centre crop as fallback
            target = area * float(torch.empty(1).uniform_(0.08, 1.0, generator=g))
            aspect = math.exp(float(torch.empty(1).uniform_(math.log(3 / 4), math.log(4 / 3), generator=g)))
            cw = int(round(math.sqrt(target * aspect)))
            ch = int(round(math.sqrt(target / aspect)))
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
        image = self.decode(index).permute(2, 0, 1)  # uint8 H x W x 3 -> C x H x W (a view)
        g = self._generator(index, 1)
        x = self.random_resized_crop(image, g)  # uint8 3 x 224 x 224
        if float(torch.rand(1, generator=g)) < 0.5:  # RandomHorizontalFlip(p=0.5)
            x = x.flip(-1)
        # ToTensor (float32, / 255) and Normalize((x - mean) / std), folded into one multiply-add.
        x = torch.addcmul(NORM_SHIFT, x.float(), NORM_SCALE)
        label = index % self.num_classes  # stands in for the class folder the file sits in
        return x, label


def dataset():
    """Called by loadtune (in each trial process) to build the dataset."""
    return SyntheticImageFolder()


# Scan defaults; any CLI flag overrides them. Default collation stacks the images into a
# B x 3 x 224 x 224 float32 batch and the labels into a tensor, as in a torchvision training script.
loadtune_options = {"batch_size": 32}

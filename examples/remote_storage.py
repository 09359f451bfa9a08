"""Samples read from slow storage: an object store (S3, GCS), NFS or a network disk.

Each ``__getitem__`` first waits for its bytes (a simulated request with a few milliseconds of
latency, as a GET from an object store in the same region or a read from a busy NFS server takes),
then does a little CPU work to turn the bytes into a tensor.

Most of a sample's time is spent *waiting*, not computing. A waiting worker process leaves its core
free, so this is the case where ``num_workers`` well above the number of cores pays off: with
latency L per sample and W workers, throughput is roughly W / L until the CPU part or the main
process becomes the bound. The folk rule "num_workers = number of cores" leaves most of that on the
table. Give the scan a worker range that goes well past the core count (the second command below)
and see where the curve flattens: that is where the CPU part, the main process or the storage
itself takes over as the bound.

Try it:

    loadtune scan examples/remote_storage.py
    loadtune scan examples/remote_storage.py --workers 0,2,4,8,16

Where the storage is the bound, moving the data helps more than any loader setting: a local NVMe
or tmpfs copy, larger objects (shards such as WebDataset tar files, so that one request brings
many samples), or a read-ahead cache.
"""

import random
import time

import torch
from torch.utils.data import Dataset


class ObjectStoreDataset(Dataset):
    """Stands in for a dataset that fetches one object per sample, e.g. with boto3 or fsspec:

        def __getitem__(self, index):
            body = s3.get_object(Bucket=bucket, Key=keys[index])["Body"].read()
            return decode(body), labels[index]

    Defined at module level so that DataLoader workers started with ``spawn`` or ``forkserver``
    can unpickle it. Holds only a few numbers (no client, no open connection), so it pickles
    cheaply; a real one would open its client lazily, once per worker, on first use.
    """

    def __init__(
        self,
        n: int = 4000,
        latency_s: float = 0.004,
        jitter_s: float = 0.002,
        sample_bytes: int = 16 * 1024,
        num_classes: int = 10,
        seed: int = 0,
    ):
        self.n = n
        self.latency_s = latency_s  # the request's fixed cost: round trip, time to first byte
        self.jitter_s = jitter_s  # storage latency is never constant; up to this much on top
        self.sample_bytes = sample_bytes
        self.num_classes = num_classes
        self.seed = seed

    def __len__(self) -> int:
        return self.n

    def fetch(self, index: int) -> bytes:
        """Simulated GET of object ``index``: wait for the storage, then receive the bytes.

        The wait is a ``time.sleep``: like a socket read it blocks without using the CPU.
        The payload is reproducible from the index (its own ``random.Random``, no global state).
        """
        rng = random.Random(self.seed * 1_000_003 + index)
        time.sleep(self.latency_s + rng.random() * self.jitter_s)
        return rng.randbytes(self.sample_bytes)

    def __getitem__(self, index: int):
        payload = self.fetch(index)
        # The small CPU part: bytes -> uint8 tensor -> float features in [-1, 1]. Real code would
        # parse a record here (torch.load of a serialised tensor, a protobuf, a small image).
        raw = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
        features = raw.float().div_(127.5).sub_(1.0)
        label = index % self.num_classes
        return features, label


def dataset():
    """Called by loadtune (in each trial process) to build the dataset."""
    return ObjectStoreDataset()


# Scan defaults; any CLI flag overrides them. Default collation stacks a batch into a
# B x 16384 float32 tensor and a B label tensor.
loadtune_options = {"batch_size": 32}

"""Language-model pre-training data: variable-length token sequences padded per batch.

Each sample is an already-tokenised document (as read from a pre-tokenised shard), between 16 and
512 tokens long with many short ones and a long tail, the way real document lengths are spread.
Producing a sample is cheap (about ten microseconds), and so is the ``collate_fn``, which pads
each batch to its longest sequence and builds the attention mask and labels: a batch of 32 costs
well under a millisecond all told.

Cheap samples turn the usual advice around. With workers, every batch is moved into shared memory,
its handles are pickled through a queue, and the main process unpickles and maps it; when producing
the batch costs less than that hand-over, ``num_workers=0`` can match or beat any number of
workers, which then only add memory and start-up time (and, without ``persistent_workers``, a
restart every epoch: an epoch here is over in a fraction of a second). On another machine, or with
a costlier ``collate_fn``, one worker may well pay off. Nothing here assumes either way:
``loadtune scan`` measures both on this machine and recommends the cheapest config that is as fast
as the fastest.

Try it:

    loadtune scan examples/tokens.py
    loadtune scan examples/tokens.py --workers 0,1,2 --batch-size 16,64
"""

import math
import random

import torch
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import Dataset

VOCAB_SIZE = 32_000
PAD_ID = 0  # the tokenizer's padding id
IGNORE_INDEX = -100  # label value that torch.nn.CrossEntropyLoss ignores by default
MIN_LEN, MAX_LEN = 16, 512


class PretokenizedDocuments(Dataset):
    """Stands in for a dataset over pre-tokenised documents (e.g. memory-mapped token shards).

    Defined at module level so that DataLoader workers started with ``spawn`` or ``forkserver``
    can unpickle it. The sequence lengths are drawn once, from a log-normal clipped to
    [MIN_LEN, MAX_LEN] (median about 90 tokens, a tail up to the maximum), and kept as a plain
    list of ints; the tokens are generated per sample from a generator seeded by the index, so
    every sample is reproducible and no global RNG state is used.
    """

    def __init__(self, n: int = 5000, seed: int = 0):
        self.seed = seed
        rng = random.Random(seed)
        self.lengths = [
            min(MAX_LEN, max(MIN_LEN, int(rng.lognormvariate(math.log(90), 0.9)))) for _ in range(n)
        ]

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, index: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        # Ids 1.. so that PAD_ID never appears inside a document.
        return torch.randint(1, VOCAB_SIZE, (self.lengths[index],), generator=g)


def collate_fn(batch: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    """Pad a list of 1-D token tensors to the batch's longest one (dynamic padding).

    Returns what a Hugging Face style causal LM takes: ``input_ids`` and ``attention_mask``
    (B x T), and ``labels`` equal to the inputs with padding set to IGNORE_INDEX, so that the
    loss skips it (the model shifts labels by one internally).
    """
    input_ids = pad_sequence(batch, batch_first=True, padding_value=PAD_ID)
    lengths = torch.tensor([len(seq) for seq in batch])
    attention_mask = (torch.arange(input_ids.shape[1]) < lengths[:, None]).long()
    labels = input_ids.masked_fill(attention_mask == 0, IGNORE_INDEX)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def dataset():
    """Called by loadtune (in each trial process) to build the dataset."""
    return PretokenizedDocuments()


# Scan defaults; any CLI flag overrides them.
loadtune_options = {"batch_size": 32}

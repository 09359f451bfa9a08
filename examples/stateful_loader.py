"""A loader factory: torchdata's StatefulDataLoader, built by your own code with the knobs loadtune passes.

When training uses a DataLoader subclass (here ``StatefulDataLoader``, which can checkpoint its
position mid-epoch), a plain ``DataLoader`` over the same dataset is not what trains. A spec can
then define ``loader(**knobs)`` instead of ``dataset()``: loadtune calls it once per config with
``num_workers``, ``pin_memory``, ``prefetch_factor`` and ``persistent_workers`` (and ``batch_size``,
because this factory names it: its default, 32, is the scan's default batch size), and measures
whatever it returns. Before any trial, loadtune builds a loader with a few configs' knobs and
checks that it carries them: a factory that dropped ``**knobs`` would have every config measure the
same loader, and is refused.

Needs ``pip install torchdata`` (it does not replace torch).

Try it:

    loadtune scan examples/stateful_loader.py
    loadtune scan examples/stateful_loader.py --batch-size 32,128
"""

from torchdata.stateful_dataloader import StatefulDataLoader

from tokens import PretokenizedDocuments, collate_fn


def loader(batch_size: int = 32, **knobs) -> StatefulDataLoader:
    """Your training loader, as your training script builds it, with loadtune's knobs passed through."""
    return StatefulDataLoader(PretokenizedDocuments(n=5000), batch_size=batch_size, shuffle=True, collate_fn=collate_fn,
                              **knobs)

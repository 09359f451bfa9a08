"""The timing loop on real DataLoaders, in this process (no isolation), so its counting can be checked."""

import time
from pathlib import Path

import torch

from loadtune.engine.trial.measure import Drained, LoaderOptions, Meter, SampleCounter, Timing, make_consumer, make_loader, measure, ready_batches
from loadtune.model.config import TrialConfig
from loadtune.engine.spec import from_objects, load_spec

SPECS = Path(__file__).parent / "specs"


def meter_for(spec, config, drop_last=False):
    loader = make_loader(spec, config, LoaderOptions(shuffle=False, drop_last=drop_last))
    return Meter(loader, make_consumer(spec, config, torch.device("cpu")), lambda: None, SampleCounter(spec, config, drop_last))


def test_short_dataset_blocks_hold_whole_epochs_and_count_the_short_batch():
    spec = load_spec(SPECS / "short_epoch.py")  # 10 samples, batch size 4: batches of 4, 4, 2
    meter = meter_for(spec, TrialConfig(batch_size=4, num_workers=0))
    meter.startup()
    warm = meter.phase(0.01)
    assert warm.epochs >= 1
    for _ in range(3):
        block = meter.phase(0.01)
        assert block.epochs >= 1
        assert block.samples == 10 * block.epochs  # whole epochs, the short last batch counted as 2
        assert block.batches == 3 * block.epochs


def test_drop_last_counts_only_full_batches():
    spec = load_spec(SPECS / "short_epoch.py")
    meter = meter_for(spec, TrialConfig(batch_size=4, num_workers=0), drop_last=True)
    meter.startup()
    meter.phase(0.01)
    block = meter.phase(0.01)
    assert block.samples == 8 * block.epochs
    assert block.batches == 2 * block.epochs


def test_phases_are_contiguous_and_at_least_min_time():
    spec = load_spec(SPECS / "tiny.py")
    meter = meter_for(spec, TrialConfig(batch_size=32, num_workers=2, prefetch_factor=2))
    meter.startup()
    blocks = [meter.phase(0.05) for _ in range(3)]
    assert all(b.seconds >= 0.05 for b in blocks)
    assert all(b.samples > 0 and b.rate > 0 for b in blocks)


class Counting(torch.utils.data.Dataset):
    def __len__(self):
        return 100

    def __getitem__(self, i):
        return torch.tensor([i])


def test_step_sees_every_batch_and_figures_are_emitted_in_order():
    seen = []
    spec = from_objects(Counting(), step=lambda batch: seen.append(int(batch.shape[0])))
    events = []
    config = TrialConfig(batch_size=8, num_workers=2, prefetch_factor=2, persistent_workers=True)
    timing = Timing(warmup_s=0.05, block_s=0.05, blocks=3)
    measure(spec, config, torch.device("cpu"), timing, LoaderOptions(), lambda k, p: events.append((k, p)))
    events = [(k, p) for k, p in events if k in ("startup", "warmup", "block")]  # figures; "batch" describes
    kinds = [k for k, _ in events]
    assert kinds[:2] == ["startup", "warmup"] and kinds[2:] == ["block"] * 3
    phases = [p for k, p in events if k != "startup"]
    assert len(seen) == sum(p.batches for p in phases)  # the step ran once per batch, none skipped
    assert sum(seen) == sum(p.samples for p in phases)  # and the samples counted are those delivered


def test_warmup_drains_the_prefetch_queue():
    spec = load_spec(SPECS / "tiny.py")
    events = []
    config = TrialConfig(batch_size=4, num_workers=2, prefetch_factor=4)
    measure(spec, config, torch.device("cpu"), Timing(warmup_s=0.001, block_s=0.01, blocks=1), LoaderOptions(),
            lambda k, p: events.append((k, p)))
    warm = dict(events)["warmup"]
    assert warm.batches >= 2 * 4 + 1  # workers x prefetch_factor batches can be queued before timing starts


class SlowAndFastEpochs(torch.utils.data.Dataset):
    """Epochs alternate between ~20 ms and ~70 ms, as a loader's epochs vary with its restarts."""

    def __init__(self):
        self.calls = 0

    def __len__(self):
        return 4

    def __getitem__(self, i):
        epoch, self.calls = self.calls // 4, self.calls + 1
        time.sleep(0.005 if epoch % 2 == 0 else 0.0175)
        return torch.tensor([i])


def test_whole_epoch_blocks_do_not_end_early_on_a_slow_epoch():
    # Ending a block at the first epoch end past min_s gives one-epoch blocks that are all slow and
    # two-epoch blocks that start fast: their median overstates the rate. The count is set beforehand.
    meter = meter_for(from_objects(SlowAndFastEpochs()), TrialConfig(batch_size=1, num_workers=0))
    meter.startup()
    meter.phase(0.2)  # warm-up: several epochs of both kinds
    assert meter.aligned
    blocks = [meter.phase(0.06) for _ in range(6)]
    assert {b.epochs for b in blocks} == {3}  # the fastest epoch takes ~20 ms: three last 60 ms in any order
    assert all(b.seconds >= 0.06 for b in blocks)


def test_long_epochs_keep_time_based_blocks():
    spec = load_spec(SPECS / "short_epoch.py")  # epochs of 3 batches
    config = TrialConfig(batch_size=4, num_workers=0)
    loader = make_loader(spec, config, LoaderOptions(shuffle=False))
    count = SampleCounter(spec, config, False)
    meter = Meter(loader, make_consumer(spec, config, torch.device("cpu")), lambda: None, count, align_s=0.0)
    meter.startup()
    meter.phase(0.01)
    block = meter.phase(0.002)  # an epoch is "long" here (align_s=0): blocks end on time, not at epoch ends
    assert not meter.aligned
    assert block.seconds >= 0.002


class Waiting(torch.utils.data.Dataset):
    """Each sample waits 2 ms, as on a storage read: idle workers finish batches ahead of the consumer."""

    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        time.sleep(0.002)
        return torch.tensor([i])


def test_ready_batches_counts_what_workers_finished_ahead():
    config = TrialConfig(batch_size=4, num_workers=2, prefetch_factor=4)
    meter = meter_for(from_objects(Waiting()), config)
    meter.startup()
    time.sleep(0.5)  # each worker needs ~32 ms for its four batches
    assert ready_batches(meter.iterator) == 2 * 4  # every outstanding task is done and waiting
    solo = meter_for(from_objects(Waiting()), TrialConfig(batch_size=4, num_workers=0))
    solo.startup()
    assert ready_batches(solo.iterator) is None  # no workers, no backlog


def test_warmup_lasts_until_the_startup_backlog_is_consumed():
    meter = meter_for(from_objects(Waiting()), TrialConfig(batch_size=4, num_workers=2, prefetch_factor=4))
    meter.startup()
    time.sleep(0.5)  # a slow first batch elsewhere (start-up) lets the workers run ahead
    warm = meter.phase(0.001, 1, settled=Drained(meter, 2, max_s=30.0))
    assert warm.batches >= 2 * 4 - 1  # the ready batches were consumed inside the warm-up...
    assert ready_batches(meter.iterator) <= 1  # ...down to the steady state of a loader the workers pace


def test_a_backlog_that_does_not_shrink_ends_the_warmup_early():
    """A slow consumer keeps the queue full in the steady state: waiting for it to drain would burn
    the drain cap on every such trial."""
    spec = from_objects(Waiting(), step=lambda batch: time.sleep(0.01))  # workers: 4 ms a batch, consumer: 10 ms
    meter = meter_for(spec, TrialConfig(batch_size=4, num_workers=2, prefetch_factor=4))
    meter.startup()
    time.sleep(0.2)
    start = time.perf_counter()
    meter.phase(0.001, 1, settled=Drained(meter, 2, max_s=30.0))
    assert ready_batches(meter.iterator) > 1  # still full: it did not end by draining
    assert time.perf_counter() - start < 10.0  # ended on the stalled backlog (~0.75 s), not the 30 s cap

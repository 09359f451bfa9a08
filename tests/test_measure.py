"""The timing loop on real DataLoaders, in this process (no isolation), so its counting can be checked."""

import time
from types import SimpleNamespace

import psutil
import pytest
import torch
from conftest import SPECS

from loadtune.engine.trial.measure import Drained, measure
from loadtune.engine.trial.meter import Meter, SampleCounter, SizeTally, ready_batches
from loadtune.engine.trial.setup import LoaderOptions, Timing, make_consumer, make_loader
from loadtune.engine.trial.paired import back_to_level, freezable, freeze, frozen_turn, in_flight, resume, worker_pids
from loadtune.model.config import TrialConfig
from loadtune.engine.spec import from_objects, load_spec


def meter_for(spec, config, drop_last=False):
    loader = make_loader(spec, config, LoaderOptions(shuffle=False, drop_last=drop_last))
    return Meter(loader, make_consumer(spec, config, torch.device("cpu")), lambda: None, SampleCounter(spec, config, drop_last))


def warm_up_to_an_epoch_end(meter, min_s=0.01):
    """Start-up, then warm-up phases until an epoch has ended: from then on phases end at epoch ends.
    (On a busy machine the first phase can end by time, mid-epoch, before any epoch has ended.)"""
    meter.startup()
    meter.phase(min_s)
    while not meter.aligned:
        meter.phase(min_s)


def test_short_dataset_blocks_hold_whole_epochs_and_count_the_short_batch():
    spec = load_spec(SPECS / "short_epoch.py")  # 10 samples, batch size 4: batches of 4, 4, 2
    meter = meter_for(spec, TrialConfig(batch_size=4, num_workers=0))
    warm_up_to_an_epoch_end(meter)
    for _ in range(3):
        block = meter.phase(0.01)
        assert block.epochs >= 1
        assert block.samples == 10 * block.epochs  # whole epochs, the short last batch counted as 2
        assert block.batches == 3 * block.epochs


def test_drop_last_counts_only_full_batches():
    spec = load_spec(SPECS / "short_epoch.py")
    meter = meter_for(spec, TrialConfig(batch_size=4, num_workers=0), drop_last=True)
    warm_up_to_an_epoch_end(meter)
    block = meter.phase(0.01)
    assert block.samples == 8 * block.epochs
    assert block.batches == 2 * block.epochs


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_a_timed_block_spans_four_rounds_of_its_workers_however_short_the_block_time():
    # workers deliver in bursts: a block cut after a round or two times where its ends fell among them
    events = []
    config = TrialConfig(batch_size=4, num_workers=3, prefetch_factor=2, persistent_workers=True)
    measure(from_objects(Waiting(0.001)), config, torch.device("cpu"), Timing(warmup_s=0.01, block_s=0.0, blocks=3),
            LoaderOptions(), lambda k, p: events.append((k, p)))
    blocks = [p for k, p in events if k == "block"]
    assert len(blocks) == 3 and all(b.batches >= 4 * 3 for b in blocks)


@pytest.mark.slow
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
    for _ in range(6):
        whole = meter.epochs_for(0.06)  # as many as 60 ms needs if each epoch were the fastest yet (3 on a quiet machine)
        block = meter.phase(0.06)
        assert block.epochs >= whole >= 2  # never cut short at the end of a slow epoch (one is 70 ms)
        assert block.seconds >= 0.06


class StallOnce(torch.utils.data.Dataset):
    """Ten samples (batches of 4, 4, 2) that stall once, late in the first epoch: a first epoch slowed by
    the machine (a busy CI runner), every later one short."""

    def __init__(self):
        self.stalled = False

    def __len__(self):
        return 10

    def __getitem__(self, i):
        if i == 9 and not self.stalled:
            self.stalled = True
            time.sleep(0.5)
        return torch.tensor([i])


def test_blocks_hold_whole_epochs_even_when_the_first_epoch_stalled():
    # The warm-up ends by time inside the stalled first epoch (0.5 s, longer than align_s: not short);
    # the second epoch is short. The block that began mid-epoch holds part of one and is dropped: every
    # block timed holds whole epochs, 10 samples in 3 batches each.
    spec = from_objects(StallOnce())
    events = []
    measure(spec, TrialConfig(batch_size=4, num_workers=0), torch.device("cpu"),
            Timing(warmup_s=0.1, block_s=0.05, blocks=4), LoaderOptions(shuffle=False), lambda k, p: events.append((k, p)))
    warm = next(p for k, p in events if k == "warmup")
    assert warm.epochs == 0  # the case this is about: the warm-up ended mid-epoch
    blocks = [p for k, p in events if k == "block"]
    assert len(blocks) >= 4
    for block in blocks:
        assert block.epochs >= 1 and block.samples == 10 * block.epochs and block.batches == 3 * block.epochs


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
    """Each sample waits ``delay`` seconds, as on a storage read: idle workers finish batches ahead of the consumer."""

    def __init__(self, delay=0.002):
        self.delay = delay

    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        time.sleep(self.delay)
        return torch.tensor([i])


def backlog_reaches(meter, batches, within_s=30.0):
    """Wait until the workers have ``batches`` finished ahead of the main process (True), or give up."""
    deadline = time.monotonic() + within_s
    while ready_batches(meter.iterator) < batches and time.monotonic() < deadline:
        time.sleep(0.01)
    return ready_batches(meter.iterator) == batches


@pytest.mark.slow
def test_ready_batches_counts_what_workers_finished_ahead():
    config = TrialConfig(batch_size=4, num_workers=2, prefetch_factor=4)
    meter = meter_for(from_objects(Waiting()), config)
    meter.startup()
    # each worker needs ~32 ms for its four batches: then every outstanding task is done and waiting
    assert backlog_reaches(meter, 2 * 4)
    solo = meter_for(from_objects(Waiting()), TrialConfig(batch_size=4, num_workers=0))
    solo.startup()
    assert ready_batches(solo.iterator) is None  # no workers, no backlog


@pytest.mark.slow
def test_a_resumed_loader_is_timed_from_no_head_start():
    # 4 workers x 4 prefetched batches of 40 ms each; the consumer takes 5 ms a batch, so taking the
    # backlog of 16 lasts two batches of a worker's: meanwhile the workers, handed new work as it went,
    # finish more, which the block would count as its own unless resume takes them too
    spec = from_objects(Waiting(0.01))
    config = TrialConfig(batch_size=4, num_workers=4, prefetch_factor=4)
    loader = make_loader(spec, config, LoaderOptions(shuffle=False))
    meter = Meter(loader, lambda batch: time.sleep(0.005), lambda: None, SampleCounter(spec, config, False))
    meter.startup()
    try:
        assert backlog_reaches(meter, 4 * 4)
        resume(meter, config.num_workers, time.perf_counter() + 30)
        # none of the backlog of 16 left for the block to count: at most half a round, where a descheduled main
        # process fell a batch behind its workers while it caught up (a steady machine leaves one at most)
        assert ready_batches(meter.iterator) <= 2
    finally:
        meter.iterator._shutdown_workers()  # a failure must not leave the workers to the next test


class Cold(torch.utils.data.Dataset):
    """Records when each sample was made: the first one after ``rest()`` stands for a batch that pays for a rest."""

    def __init__(self):
        self.made: list[float] = []
        self.cold_at: float | None = None
        self.cold = False

    def rest(self):
        self.cold, self.cold_at = True, None

    def __len__(self):
        return 1000

    def __getitem__(self, i):
        if self.cold:
            self.cold, self.cold_at = False, time.perf_counter()
        self.made.append(time.perf_counter())
        return torch.tensor([i])


def test_a_resumed_loader_without_workers_times_from_its_second_batch():
    # the first batch after a rest pays for the rest (cold caches, the turn's handshake): untimed, as a
    # loader with workers takes its first burst untimed
    data = Cold()
    config = TrialConfig(batch_size=4, num_workers=0)
    meter = meter_for(from_objects(data), config)
    meter.startup()
    meter.phase(0.0, 3)
    data.rest()
    taken = meter.count.position
    resume(meter, config.num_workers, time.perf_counter() + 30)
    assert meter.count.position == taken + 1  # one batch taken
    assert data.cold_at is not None and data.cold_at < meter.mark  # ...before the next block's clock starts
    block = meter.phase(0.0, 2)
    assert block.batches == 2 and all(t > data.cold_at for t in data.made[-8:])


class FakeQueue:
    """A loader's result queue as ``ready_batches`` reads it: only its size."""

    def __init__(self, size):
        self.size = size

    def qsize(self):
        return self.size


def test_in_flight_counts_what_workers_still_make():
    # the DataLoader's outstanding count already leaves out the batches it took from the queue out of
    # order (held for their turn): in flight = outstanding - queued, and ready = queued + held
    queue = FakeQueue(3)
    iterator = SimpleNamespace(_data_queue=queue, _worker_result_queue=queue, _tasks_outstanding=7,
                               _task_info={10: (0,), 11: (1, "held"), 12: (0, "held"), 13: (1,)})
    assert ready_batches(iterator) == 3 + 2
    assert in_flight(iterator) == 7 - 3
    assert in_flight(SimpleNamespace()) == 0  # a torch that keeps them elsewhere: nothing known in flight


def test_a_turns_block_ends_with_no_more_batches_waiting_than_at_its_start():
    # workers restarted together drift apart inside a block: a batch one of them made ahead, left waiting
    # at the block's end, would be taken untimed before the next block and counted by neither
    queue = FakeQueue(0)
    meter = SimpleNamespace(loader_iterator=SimpleNamespace(_data_queue=queue, _worker_result_queue=queue, _task_info={}))
    settled = back_to_level(meter)  # the level at the block's start: none waiting
    time.sleep(0.05)  # the block's time passes; its other ends are met from here
    queue.size = 1
    assert not settled()  # a batch made in the block waits: the block goes on
    queue.size = 0
    assert settled()
    queue.size = 1
    time.sleep(0.06)
    assert settled()  # not past twice the block's length, whatever waits
    assert back_to_level(SimpleNamespace(loader_iterator=None))()  # no workers: nothing can wait


@pytest.mark.slow
def test_warmup_lasts_until_the_startup_backlog_is_consumed():
    # 40 ms a batch per worker: taking ready batches outpaces the workers by far, even on a busy machine
    meter = meter_for(from_objects(Waiting(0.01)), TrialConfig(batch_size=4, num_workers=2, prefetch_factor=4))
    meter.startup()
    assert backlog_reaches(meter, 2 * 4)  # a slow first batch elsewhere (start-up) lets the workers run ahead
    warm = meter.phase(0.001, 1, settled=Drained(meter, 2, max_s=30.0))
    assert warm.batches >= 2 * 4 - 1  # the ready batches were consumed inside the warm-up...
    assert ready_batches(meter.iterator) <= 1  # ...down to the steady state of a loader the workers pace


@pytest.mark.slow
def test_a_backlog_that_does_not_shrink_ends_the_warmup_early():
    """A slow consumer keeps the queue full in the steady state: waiting for it to drain would burn
    the drain cap on every such trial."""
    spec = from_objects(Waiting(), step=lambda batch: time.sleep(0.01))  # workers: 4 ms a batch, consumer: 10 ms
    meter = meter_for(spec, TrialConfig(batch_size=4, num_workers=2, prefetch_factor=4))
    meter.startup()
    assert backlog_reaches(meter, 2 * 4)
    start = time.perf_counter()
    meter.phase(0.001, 1, settled=Drained(meter, 2, max_s=30.0))
    assert ready_batches(meter.iterator) > 1  # still full: it did not end by draining
    assert time.perf_counter() - start < 20.0  # ended on the stalled backlog (under a second when idle), not the 30 s cap


def test_batch_sizes_vary_only_beyond_each_epochs_short_last_batch():
    def tally(*epochs):
        t = SizeTally()
        for epoch in epochs:
            for n in epoch:
                t.add(n)
            t.end_epoch()
        return t.result()

    fixed = tally([32, 32, 8], [32, 32, 8])  # one size, and a short last batch per epoch
    assert not fixed.varying and (fixed.smallest, fixed.largest) == (8, 32) and fixed.mean == pytest.approx(24)
    assert tally([16, 48, 31], [48, 16, 31]).varying  # a token budget: sizes vary inside an epoch
    assert tally([8, 8, 12]).varying  # a last batch larger than the others is no short last batch
    assert SizeTally().result() is None


FRESH = 4 * 2**20  # bytes each batch of ``fresh_batches`` takes fresh from the kernel


def fresh_batches(batch):
    """A collate that maps FRESH bytes anew, writes every page (each write faults one in), and unmaps
    them: what a main process does whose allocator hands every freed batch back to the kernel."""
    import mmap

    region = mmap.mmap(-1, FRESH)
    for offset in range(0, FRESH, mmap.PAGESIZE):
        region[offset] = 1
    region.close()
    return torch.stack(batch)


def test_a_block_counts_the_pages_its_main_process_faulted_in():
    """Without workers the batches are collated in the main process: a collate that maps its memory
    anew shows in every block as at least that many bytes faulted in; one that reuses memory shows far
    less (its loop's own small allocations)."""
    data = [torch.zeros(4) for _ in range(64)]
    config = TrialConfig(batch_size=8, num_workers=0)
    per_batch = {}
    for name, collate in (("fresh", fresh_batches), ("reused", torch.stack)):
        spec = from_objects(data, collate_fn=collate)
        meter = meter_for(spec, config)
        meter.startup()
        meter.phase(0.05)
        block = meter.phase(0.1)
        assert block.faulted_bytes is not None and block.batches > 0
        per_batch[name] = block.faulted_bytes / block.batches
    assert per_batch["fresh"] >= FRESH
    assert per_batch["reused"] < FRESH / 4


def statuses(meter):
    return {psutil.Process(pid).status() for pid in worker_pids(meter.loader_iterator)}


@pytest.mark.slow
def test_a_frozen_loader_makes_nothing_while_it_rests_and_its_block_counts_no_head_start():
    # two workers, 40 ms a batch each: 50 batches (200 samples) a second at most. Resting unfrozen, they
    # finish their four prefetched batches ahead, which a block would take at once; frozen, they make
    # nothing until its next block, which starts from a batch's arrival and counts whole rounds
    config = TrialConfig(batch_size=4, num_workers=2, prefetch_factor=2)
    meter = meter_for(from_objects(Waiting(0.01)), config)
    meter.startup()
    meter.phase(0.1)
    assert freezable(meter, config) and len(worker_pids(meter.iterator)) == 2
    try:
        freeze(meter)
        assert statuses(meter) == {psutil.STATUS_STOPPED}
        level = ready_batches(meter.iterator)
        time.sleep(0.3)
        assert ready_batches(meter.iterator) == level  # nothing made while frozen
        deadline = time.perf_counter() + 30
        blocks = [frozen_turn(meter, config, s, deadline) for s in (0.2, 0.0)]
        assert statuses(meter) == {psutil.STATUS_STOPPED}  # frozen again after each block
        assert all(b.batches % 2 == 0 and b.batches >= 4 * 2 for b in blocks)  # four rounds at least, however short
        assert all(b.rate <= 200 * 1.1 for b in blocks)  # sleeps make it no faster than that
    finally:
        freeze(meter, stop=False)
    assert psutil.STATUS_STOPPED not in statuses(meter)
    time.sleep(0.3)
    assert ready_batches(meter.iterator) == 4  # thawed, they run ahead again: the check above could fail


def test_a_loader_whose_workers_cannot_be_found_is_not_frozen():
    # a user's own loader (``loader(**knobs)``) may keep its workers elsewhere: its turns settle instead
    hidden = SimpleNamespace(loader_iterator=SimpleNamespace())
    assert not freezable(hidden, TrialConfig(batch_size=4, num_workers=2, prefetch_factor=2))
    assert freezable(hidden, TrialConfig(batch_size=4, num_workers=0))  # nothing to freeze
    freeze(hidden)  # and freezing it does nothing

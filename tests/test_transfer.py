"""How batches reach the device: strategies searched, nested batches moved, the prefetcher on a CPU."""

from collections import OrderedDict, UserDict, deque, namedtuple
from collections.abc import Mapping
from dataclasses import dataclass

import pytest
import torch
from torch.nn.utils.rnn import PackedSequence, pack_sequence
from torch.utils.data import DataLoader, Dataset, TensorDataset

import loadtune
from loadtune.model.config import PlanError, TrialConfig, transfers_for
from loadtune.search.space import SearchSpace, build_grid
from loadtune.engine.trial.prefetch import CUDAPrefetcher
from loadtune.analysis.recommend import cost, snippet
from loadtune.search.adaptive import AdaptiveSearch
from loadtune.model.batch import BatchInfo
from loadtune.engine.trial.transfer import batch_info
from loadtune.engine.trial.transfer import batch_size_of, move_to, nbytes_of, tensors_of, unmoved_note
from loadtune.engine.trial.measure import measure
from loadtune.engine.trial.setup import Consumer, LoaderOptions, Timing
from loadtune.engine.spec import from_objects
from conftest import drive

Pair = namedtuple("Pair", "image label")


def nested_batch():
    return {
        "pair": Pair(torch.arange(6.0).reshape(2, 3), torch.tensor([1, 2])),
        "list": [torch.ones(2, dtype=torch.uint8), "a path", 7],
        "ordered": OrderedDict(x=torch.zeros(2, 2, dtype=torch.float64)),
        "name": "sample-1",
    }


# --- strategy selection --------------------------------------------------------------------------------


def test_no_transfer_strategy_without_an_accelerator():
    assert transfers_for(False, False) == ["none"] == transfers_for(True, False)
    configs, skips = build_grid(SearchSpace([32], [0, 2], transfers=["stream", "non_blocking"]), accelerator=False)
    assert {c.transfer for c in configs} == {"none"}
    assert any("stream" in s.what and "CUDA" in s.why for s in skips)


def test_non_blocking_only_with_pinned_memory():
    assert "non_blocking" not in transfers_for(False, True)
    assert transfers_for(True, True)[0] == "non_blocking"  # the pinned default first
    assert transfers_for(False, True)[0] == "sync"
    assert set(transfers_for(True, True)) == {"sync", "non_blocking", "stream"}
    configs, _ = build_grid(SearchSpace([32], [0, 2, 4]), accelerator=True)
    assert all(c.pin_memory for c in configs if c.transfer == "non_blocking")
    assert {c.transfer for c in configs} == {"sync", "non_blocking", "stream"}


def test_narrowed_transfers_and_refused_combinations():
    configs, _ = build_grid(SearchSpace([32], [0, 2], transfers=["stream"]), accelerator=True)
    assert {c.transfer for c in configs} == {"stream"} and {c.pin_memory for c in configs} == {False, True}
    configs, _ = build_grid(SearchSpace([32], [0, 2], transfers=["non_blocking"]), accelerator=True)
    assert {(c.pin_memory, c.transfer) for c in configs} == {(True, "non_blocking")}
    with pytest.raises(PlanError, match="strategy"):
        build_grid(SearchSpace([32], [0], transfers=["zero_copy"]), accelerator=True)
    with pytest.raises(PlanError, match="pin_memory"):
        build_grid(SearchSpace([32], [0], pin=False, transfers=["non_blocking"]), accelerator=True)


def test_with_knobs_keeps_the_transfer_valid():
    pinned = TrialConfig(32, 2, True, 2, False, "non_blocking")
    assert pinned.with_knobs(pin_memory=False).transfer == "sync"
    assert pinned.with_knobs(transfer="stream").with_knobs(pin_memory=False).transfer == "stream"
    assert TrialConfig(32, 2, False, 2, False, "sync").with_knobs(transfer="non_blocking").transfer == "sync"
    assert pinned.with_knobs(transfer="sync").transfer == "sync"  # an explicit choice is kept


def test_adaptive_search_on_cuda_tries_stream_and_never_unpinned_non_blocking():
    space = SearchSpace(batch_sizes=[32], workers=[0, 1, 2, 4], prefetch=[2])
    search = AdaptiveSearch(space, True, [TrialConfig(32, 0, False, None, False, "sync")], 0.02,
                            max_workers=8, memory_available=64 * 2**30)

    def rate(c):  # stream hides the copy: the landscape rewards it
        return 1000 * min(max(c.num_workers, 1), 2) * (1.5 if c.transfer == "stream" else 1.0)

    result = drive(search, rate)
    seen = {t.config for t in result.trials}
    assert any(c.transfer == "stream" for c in seen)
    assert not any(c.transfer == "non_blocking" and not c.pin_memory for c in seen)
    assert not any(c.transfer == "none" for c in seen)
    assert result.trials and loadtune.analysis.recommend.recommend(result.trials).config.transfer == "stream"


def test_cheaper_strategy_wins_a_tie_and_snippet_says_how():
    sync = TrialConfig(32, 2, True, 2, False, "sync")
    stream = sync.with_knobs(transfer="stream")
    assert cost(_ok(sync))[5] < cost(_ok(stream))[5]
    text = snippet(stream, True, False, False)
    assert "CUDAPrefetcher(loader, device)" in text and "pin_memory=True" in text


def _ok(config):
    from loadtune.model.trial import Block, MemoryUsage, Trial

    return Trial(config, "ok", blocks=[Block(10, 1, 1.0)], memory=MemoryUsage(1, 1, "pss"))


# --- moving nested batches -----------------------------------------------------------------------------


def test_move_to_moves_every_tensor_and_leaves_the_rest():
    batch = nested_batch()
    moved = move_to(batch, torch.device("meta"))  # a real device move, on any machine
    assert type(moved["pair"]) is Pair and moved["pair"].image.device.type == "meta"
    assert moved["pair"].label.device.type == "meta"
    assert type(moved["ordered"]) is OrderedDict and moved["ordered"]["x"].dtype == torch.float64
    assert moved["list"][0].device.type == "meta" and moved["list"][1:] == ["a path", 7]
    assert moved["name"] == "sample-1"
    assert all(t.device.type == "cpu" for t in tensors_of(batch))  # the original is untouched


def test_bytes_and_shapes_of_a_batch():
    batch = nested_batch()
    assert len(list(tensors_of(batch))) == 4
    assert nbytes_of(batch) == 6 * 4 + 2 * 8 + 2 * 1 + 4 * 8
    info = batch_info(batch)
    assert info.nbytes == nbytes_of(batch)
    assert info.tensors[0] == ("float32", [2, 3])
    assert BatchInfo.from_dict({"nbytes": info.nbytes, "tensors": [list(t) for t in info.tensors], "samples": info.samples}) == info


# --- every structure DataLoader's pin_memory handles, plus dataclasses and objects with .to() ------------


class Encoding(UserDict):
    """Like Hugging Face's BatchEncoding: a mapping (not a dict) with state of its own and a .to() that
    moves its tensors in place and returns itself."""

    def __init__(self, data=None, encodings=None):
        super().__init__(data)
        self.encodings = encodings
        self.to_calls = []

    def to(self, device, *, non_blocking=False):
        self.to_calls.append(non_blocking)
        self.data = {k: v.to(device, non_blocking=non_blocking) if isinstance(v, torch.Tensor) else v for k, v in self.data.items()}
        return self


class Frozen(Mapping):
    """An immutable mapping: rebuilt through its constructor."""

    def __init__(self, data):
        self._data = dict(data)

    def __getitem__(self, key):
        return self._data[key]

    def __iter__(self):
        return iter(self._data)

    def __len__(self):
        return len(self._data)


@dataclass(frozen=True)
class Sample:
    image: torch.Tensor
    label: torch.Tensor
    path: str = "a.png"


class CustomBatch:
    """DataLoader's documented custom batch: pin_memory() of its own, no .to()."""

    def __init__(self, n):
        self.inp = torch.zeros(n, 3)
        self.tgt = torch.ones(n, dtype=torch.int64)

    def pin_memory(self):
        self.inp, self.tgt = self.inp.pin_memory(), self.tgt.pin_memory()
        return self


class OldTo:
    """A .to(device) without the non_blocking keyword (older libraries), returning a new object."""

    __slots__ = ("x",)

    def __init__(self, x):
        self.x = x

    def to(self, device):
        return OldTo(self.x.to(device))


def test_mappings_that_are_not_dicts_are_moved_and_counted():
    enc = Encoding({"input_ids": torch.zeros(2, 5, dtype=torch.int64), "mask": torch.ones(2, 5, dtype=torch.int8)}, "fast")
    assert nbytes_of(enc) == 2 * 5 * 8 + 2 * 5 and batch_size_of(enc) == 2
    moved = move_to(enc, torch.device("meta"), non_blocking=True)
    assert type(moved) is Encoding and moved.encodings == "fast" and enc.to_calls == [True]  # its own .to, the flag passed
    assert {t.device.type for t in tensors_of(moved)} == {"meta"}
    frozen = Frozen({"x": torch.zeros(4), "name": "n"})
    out = move_to(frozen, torch.device("meta"))
    assert type(out) is Frozen and out["x"].device.type == "meta" and out["name"] == "n" and nbytes_of(frozen) == 16


def test_dataclasses_custom_batches_and_own_to_are_moved_and_counted():
    sample = Sample(torch.zeros(2, 3), torch.tensor([1, 2]))
    moved = move_to(sample, torch.device("meta"))
    assert type(moved) is Sample and moved.image.device.type == "meta" and moved.path == "a.png"
    assert sample.image.device.type == "cpu" and nbytes_of(sample) == 24 + 16 and batch_size_of(sample) == 2
    custom = CustomBatch(4)
    out = move_to([custom], torch.device("meta"))[0]
    assert type(out) is CustomBatch and out.inp.device.type == out.tgt.device.type == "meta" and custom.inp.device.type == "cpu"
    assert nbytes_of(custom) == 4 * 3 * 4 + 4 * 8
    old = OldTo(torch.zeros(3))  # no non_blocking keyword, tensors in __slots__
    assert move_to(old, torch.device("meta"), non_blocking=True).x.device.type == "meta" and nbytes_of(old) == 12
    packed = pack_sequence([torch.ones(3), torch.ones(2)])  # a namedtuple with its own .to(): batch_sizes stay on the host
    out = move_to(packed, torch.device("meta"), non_blocking=True)
    assert type(out) is PackedSequence and out.data.device.type == "meta" and out.batch_sizes.device.type == "cpu"


def test_sequences_keep_their_type_and_leaves_stay():
    deq = deque([torch.zeros(2), "s"])
    out = move_to(deq, torch.device("meta"))
    assert type(out) is deque and out[0].device.type == "meta" and out[1] == "s"
    assert move_to(range(3), torch.device("meta")) == [0, 1, 2]  # not rebuildable: a list, as pin_memory gives
    looped = CustomBatch(1)
    looped.me = looped  # refers back to itself: looked into once
    assert len(list(tensors_of(looped))) == 2
    assert batch_size_of([["a", "b", "c"], ["d", "e", "f"]]) == 3  # default_collate's transposed strings


def test_a_batch_with_nothing_to_move_gets_a_note():
    assert unmoved_note(nested_batch()) is None and unmoved_note(Sample(torch.zeros(1), torch.zeros(1))) is None
    note = unmoved_note(["a", "b"])
    assert "hold no tensor" in note and "list" in note and "cannot differ" in note
    assert "own .to()" in unmoved_note(Opaque())


class Opaque:
    def to(self, device, non_blocking=False):
        return self


class Strings(Dataset):
    def __len__(self):
        return 16

    def __getitem__(self, i):
        return f"s{i}"


def test_a_trial_of_batches_with_nothing_to_move_says_so_and_counts_bytes():
    events = []
    measure(from_objects(Strings()), TrialConfig(4, 0, transfer="sync"), torch.device("cpu"),
            Timing(warmup_s=0.01, block_s=0.01, blocks=2), LoaderOptions(), lambda k, p: events.append((k, p)))
    warnings = [p for k, p in events if k == "warning"]
    assert len(warnings) == 1 and "hold no tensor" in warnings[0]
    assert all(p.h2d_bytes == 0 for k, p in events if k == "block")
    consumer = Consumer(None, "sync", torch.device("cpu"))  # what a trial counts per batch, now for a BatchEncoding too
    consumer.begin_block()
    consumer(Encoding({"ids": torch.zeros(4, 8, dtype=torch.int64)}))
    assert consumer.end_block(0.0) == (None, 4 * 8 * 8)


# --- the prefetcher on a CPU: a pass-through ------------------------------------------------------------


def test_prefetcher_is_exported_and_passes_through_on_cpu():
    assert loadtune.CUDAPrefetcher is CUDAPrefetcher
    batches = [nested_batch() for _ in range(3)]
    prefetcher = CUDAPrefetcher(batches, "cpu")
    out = list(prefetcher)
    assert len(out) == 3 and all(a is b for a, b in zip(out, batches))  # the very objects, untouched
    assert len(prefetcher) == 3


@pytest.mark.slow
def test_prefetcher_over_a_real_loader_exhausts_and_restarts():
    data = TensorDataset(torch.arange(40.0).reshape(20, 2), torch.arange(20))
    loader = DataLoader(data, batch_size=6, num_workers=2)
    prefetcher = CUDAPrefetcher(loader, torch.device("cpu"))
    for _ in range(2):  # each iter() is a fresh epoch
        it = iter(prefetcher)
        got = [b for b in it]
        assert [len(y) for _, y in got] == [6, 6, 6, 2]
        assert torch.equal(torch.cat([y for _, y in got]), torch.arange(20))
        with pytest.raises(StopIteration):
            next(it)
    del loader, prefetcher


def test_prefetcher_default_device_follows_the_machine():
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert CUDAPrefetcher([]).device.type == expected
    assert list(CUDAPrefetcher([], "cpu")) == []


def test_in_memory_datasets_are_not_forked_for_a_cuda_device():
    from loadtune.engine.trial.harness import context_for
    from loadtune.engine.options import OptionsError
    from loadtune.engine.plan import check_picklable
    from loadtune.engine.spec import from_objects

    spec = from_objects(TensorDataset(torch.zeros(4, 2)))
    assert context_for(spec, "cpu").get_start_method() == "fork"
    assert context_for(spec, "cuda:0").get_start_method() != "fork"  # CUDA does not survive a fork
    check_picklable(spec)
    with pytest.raises(OptionsError, match="must pickle"):
        check_picklable(from_objects(TensorDataset(torch.zeros(4, 2)), step=lambda batch: None))

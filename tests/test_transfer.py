"""How batches reach the device: strategies searched, nested batches moved, the prefetcher on a CPU."""

from collections import OrderedDict, namedtuple

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import loadtune
from loadtune.model.config import PlanError, TrialConfig, transfers_for
from loadtune.search.space import SearchSpace, build_grid
from loadtune.engine.trial.prefetch import CUDAPrefetcher
from loadtune.analysis.recommend import cost, snippet
from loadtune.search.adaptive import AdaptiveSearch
from loadtune.model.batch import BatchInfo
from loadtune.engine.trial.transfer import batch_info
from loadtune.engine.trial.transfer import move_to, nbytes_of, tensors_of
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
    from loadtune.model.results import Block, MemoryUsage, Trial

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
    assert BatchInfo.from_dict({"nbytes": info.nbytes, "tensors": [list(t) for t in info.tensors]}) == info


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
    from loadtune.engine.scan import OptionsError, check_picklable
    from loadtune.engine.spec import from_objects

    spec = from_objects(TensorDataset(torch.zeros(4, 2)))
    assert context_for(spec, "cpu").get_start_method() == "fork"
    assert context_for(spec, "cuda:0").get_start_method() != "fork"  # CUDA does not survive a fork
    check_picklable(spec)
    with pytest.raises(OptionsError, match="must pickle"):
        check_picklable(from_objects(TensorDataset(torch.zeros(4, 2)), step=lambda batch: None))

"""``engine.check.record_baseline`` (``check --record``'s API) with the measuring stubbed: the baseline
file gets the reference only once it can decide a check, and is otherwise left byte for byte."""

import pytest
from conftest import FIXTURES

from loadtune.engine import check as check_mod
from loadtune.engine.check import Recorded, ReferenceIncomplete, record_baseline
from loadtune.model.paired import CalibrationShape, PairedReference, PairedRound
from loadtune.model.results import ScanResult

SHAPE = CalibrationShape(units=10, sleep_s=0.0, sample_numel=4, unit_s=1e-4, source="stage profile")


def reference(config, ratios: list[float | None]) -> PairedReference:
    rounds = [PairedRound(100.0 if r else None, 100.0 / r if r else None) for r in ratios]
    return PairedReference(config, SHAPE, rounds, recorded_at="2026-01-01T00:00:00Z")


@pytest.fixture
def baseline(tmp_path):
    path = tmp_path / "loadtune.json"
    path.write_text((FIXTURES / "tiny_scan.json").read_text())
    return path


def stub_record(monkeypatch, ratios: list[float | None]) -> list:
    calls = []

    def record(spec, saved, config, rounds, on_round=None):
        calls.append((spec, config, rounds))
        return reference(config or saved.recommendation.config, ratios)

    monkeypatch.setattr(check_mod, "record", record)
    return calls


def test_the_reference_is_written_into_the_baseline_and_replaces_the_last(baseline, monkeypatch):
    calls, started = stub_record(monkeypatch, [1.0, 1.1, 0.9]), []
    first = record_baseline("spec.py", baseline, rounds=3, on_start=lambda config, rounds: started.append((config, rounds)))
    pick = ScanResult.load(baseline).recommendation.config
    assert isinstance(first, Recorded) and first.replaced is None and first.path == baseline
    assert started == [(pick, 3)] and calls == [("spec.py", None, 3)]
    assert ScanResult.load(baseline).reference.measured == 3
    again = record_baseline("spec.py", str(baseline), rounds=3)
    assert again.replaced is not None and again.replaced.recorded_at == "2026-01-01T00:00:00Z"


def test_too_few_rounds_leave_the_baseline_as_it_was(baseline, monkeypatch):
    stub_record(monkeypatch, [1.0, None, None])
    before = baseline.read_bytes()
    with pytest.raises(ReferenceIncomplete, match=f"only 1 of 3 paired rounds were measured .*: {baseline} is left as it was"):
        record_baseline("spec.py", baseline, rounds=3)
    assert baseline.read_bytes() == before

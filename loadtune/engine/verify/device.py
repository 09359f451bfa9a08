"""The GPU checks of ``doctor --verify``, in a process of their own: ``python -m loadtune.engine.verify.device``.

Each check drives the code a scan measures with (``move_to``, ``CUDAPrefetcher``, the trial's
``Meter`` and ``Consumer``, ``bandwidth``, ``doctor``) on GPU 0 and reports what it saw as one line
of JSON on stdout, prefixed with ``MARK``, as soon as it is known: a crash later loses none of them.
Batches carry their own index as their value, so a copy that read or landed in the wrong memory
shows as a wrong (min, max) on the device. Where a check guards against a fault, a control runs the
same load without the guard (``without``), to show whether this GPU could have shown the fault at all.
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from loadtune.analysis import verify as decide
from loadtune.engine import doctor
from loadtune.engine.bandwidth import MiB, pinned_peak
from loadtune.engine.loaders import start
from loadtune.engine.spec import from_objects
from loadtune.engine.trial.meter import Meter, build_meter
from loadtune.engine.trial.setup import LoaderOptions, Timing
from loadtune.engine.trial.prefetch import CUDAPrefetcher
from loadtune.engine.trial.transfer import move_to
from loadtune.engine.trial.workload import StepWorkload, SyntheticStep, calibrate
from loadtune.model.config import TrialConfig
from loadtune.model.verify import NO_CUDA, Check

MARK = "loadtune-verify "
STEP_MS = 5.0  # the known step: the synthetic step of --step-ms, calibrated once
COPY_MIB = 64  # the copy-rate check's size
BIG_MIB, SMALL_MIB = 32, 1  # copies longer than the step; steps longer than the copies
VALUE_BATCHES = 16
OVERLAP_BATCHES, OVERLAP_REPEATS = 30, 3
MAX_OVERLAP_MIB = 512  # a copy as long as the step, at most this big (a fast host link makes it huge)


def say(kind: str, payload: Any) -> None:
    print(MARK + json.dumps({kind: payload}), flush=True)


@dataclass
class Bench:
    """What the checks share: GPU 0, the calibrated step and the pinned rate once measured."""

    device: torch.device
    work: StepWorkload
    pinned_gbps: float | None = None

    @property
    def step_s(self) -> float:
        return self.work.calibrated_ms / 1000

    def step(self) -> SyntheticStep:
        return self.work.build(self.device)


@contextlib.contextmanager
def without(owner: Any, name: str) -> Iterator[None]:
    """``owner.name`` does nothing for a while: the control run of a guard (``wait_stream``,
    ``record_stream``) that loadtune's own path relies on."""
    saved = owner.__dict__.get(name)
    setattr(owner, name, lambda *args, **kwargs: None)
    try:
        yield
    finally:
        if saved is None:
            delattr(owner, name)
        else:
            setattr(owner, name, saved)


def filled(count: int, mib: float) -> list[torch.Tensor]:
    """Pinned batches, batch i holding the value i + 1 throughout."""
    numel = int(mib * MiB) // 4
    return [torch.full((numel,), i + 1, dtype=torch.int32).pin_memory() for i in range(count)]


def observe(batches: Iterable[torch.Tensor], step: Callable[[Any], Any] | None = None) -> list[list[int]]:
    """(min, max) of each batch as the step's stream reads it, after the step; one sync, at the end."""
    seen = []
    for batch in batches:
        if step is not None:
            step(batch)
        seen.append(torch.stack(torch.aminmax(batch)))
    return torch.stack(seen).tolist() if seen else []


class Filled(Dataset):
    """Sample i: ``numel`` int32 values of i + 1 (after ``pace_s`` of waiting: a loader of known pace)."""

    def __init__(self, numel: int, length: int = 1_000_000, pace_s: float = 0.0):
        self.numel, self.length, self.pace_s = numel, length, pace_s

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> torch.Tensor:
        if self.pace_s:
            time.sleep(self.pace_s)
        return torch.full((self.numel,), i + 1, dtype=torch.int32)


# --- the checks ------------------------------------------------------------------------------------


def copy_rates(bench: Bench) -> Check:
    """``doctor``'s copies of GPU 0 at one size (pinned and pageable, with the link read after them),
    the pinned one timed again on the wall clock."""
    gpu = doctor.examine_gpu(bench.device.index, (COPY_MIB * MiB,), measure=True)
    if gpu.error:
        return Check(decide.COPY, False, f"copies could not be measured: {gpu.error}")
    rate = {(c.direction, c.memory): c.gbps for c in gpu.copies}
    bench.pinned_gbps = rate.get(("h2d", "pinned"))
    link = gpu.link
    text = f"PCIe gen{link.gen_current} x{link.width_current}" if link and link.gen_current and link.width_current else None
    return decide.copy_check(bench.pinned_gbps, rate.get(("h2d", "pageable")), wall_rate(bench.device, COPY_MIB * MiB),
                             gpu.link_gbps_current, gpu.link_gbps_max, text, COPY_MIB)


def wall_rate(device: torch.device, nbytes: int, repeats: int = 16) -> float:
    """Pinned host-to-device GB/s of back-to-back copies on the wall clock, the device synchronised
    before and after them only: a second clock for ``bandwidth``'s CUDA events."""
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    host.fill_(1)
    dev = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dev.copy_(host, non_blocking=True)
    torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(repeats):
        dev.copy_(host, non_blocking=True)
    torch.cuda.synchronize(device)
    return nbytes * repeats / (time.perf_counter() - start) / 1e9


def prefetch_values(bench: Bench) -> Check:
    """``CUDAPrefetcher``: copies longer than the step (the step must wait for its copy: wait_stream),
    and steps longer than the copies (a batch's memory must not be reused under its step: record_stream)."""
    big, small, step = filled(VALUE_BATCHES, BIG_MIB), filled(VALUE_BATCHES, SMALL_MIB), bench.step()

    def through(batches, with_step):
        return decide.corrupted(observe(CUDAPrefetcher(batches, bench.device), step if with_step else None))

    runs = [(f"{BIG_MIB} MiB copies longer than the step", VALUE_BATCHES, through(big, False)),
            (f"{SMALL_MIB} MiB copies under a {bench.work.calibrated_ms:.3g} ms step", VALUE_BATCHES, through(small, True))]
    with without(torch.cuda.Stream, "wait_stream"):
        no_wait = through(big, False)
    torch.cuda.synchronize(bench.device)
    with without(torch.Tensor, "record_stream"):
        no_record = through(small, True)
    torch.cuda.synchronize(bench.device)
    controls = [("without wait_stream", VALUE_BATCHES, no_wait), ("without record_stream", VALUE_BATCHES, no_record)]
    return decide.values_check(decide.PREFETCH, runs, controls)


def non_blocking_values(bench: Bench) -> Check:
    """``move_to(batch, device, non_blocking=True)`` from a DataLoader's pinned batches (two workers
    and the pin thread): copies longer than the step (the pin thread refills pinned memory while a
    copy reads it), and steps longer than the copies (the host runs ahead of the GPU, so a pinned
    batch is freed long before its copy runs). Neither freed batch may be refilled before its copy
    has read it; the control refills one pinned buffer as soon as its copy is queued."""
    step = bench.step()
    runs = [(f"{BIG_MIB} MiB pinned copies longer than the step", VALUE_BATCHES, loader_values(bench, BIG_MIB, VALUE_BATCHES, None)),
            (f"{SMALL_MIB} MiB pinned copies under a {bench.work.calibrated_ms:.3g} ms step", 2 * VALUE_BATCHES,
             loader_values(bench, SMALL_MIB, 2 * VALUE_BATCHES, step))]
    staging = torch.empty(SMALL_MIB * MiB // 4, dtype=torch.int32, pin_memory=True)

    def refilled():
        for i in range(2 * VALUE_BATCHES):
            staging.fill_(i + 1)
            yield staging.to(bench.device, non_blocking=True)

    control = decide.corrupted(observe(refilled(), step))
    torch.cuda.synchronize(bench.device)
    return decide.values_check(decide.NON_BLOCKING, runs, [("one pinned buffer refilled under its copy", 2 * VALUE_BATCHES, control)])


def loader_values(bench: Bench, mib: float, count: int, step: Callable[[Any], Any] | None) -> int:
    """Corrupted batches of ``count`` through DataLoader(pin_memory=True, num_workers=2) and a non_blocking move."""
    loader = DataLoader(Filled(int(mib * MiB) // 4, count), batch_size=None, num_workers=2, pin_memory=True)
    return decide.corrupted(observe((move_to(b, bench.device, non_blocking=True) for b in start(loader)), step))


def trial_meter(bench: Bench, dataset: Dataset, config: TrialConfig) -> Meter:
    """A trial's own Meter (its loader, consumer and device sync) over ``dataset``, with the calibrated step."""
    timing = Timing(warmup_s=0.1, block_s=0.2, blocks=3, max_s=60)
    return build_meter(from_objects(dataset), config, bench.device, timing, LoaderOptions(shuffle=False), bench.work, None)


def hidden_sync(bench: Bench) -> Check:
    """The timed loop of a trial (loader with workers and the pin thread, copy, step, idle clock)
    under torch's sync debug mode "error", for the strategies that must never synchronise."""
    loops = {}
    for transfer in ("non_blocking", "stream"):
        config = TrialConfig(4, 2, pin_memory=True, prefetch_factor=2, transfer=transfer)
        loops[transfer] = synced_loop(trial_meter(bench, Filled(64 * 1024), config), bench.device)
    return decide.sync_check(loops)


def synced_loop(meter: Meter, device: torch.device, blocks: int = 3, block_s: float = 0.2) -> tuple[int, str | None]:
    """(batches consumed, the synchronising call raised on, or None). Only the closing sync of each
    block runs outside the debug mode: it is the one a trial means to make."""
    def boundary() -> None:
        torch.cuda.set_sync_debug_mode(0)
        torch.cuda.synchronize(device)

    meter.sync = boundary
    meter.startup()
    batches = 0
    try:
        for _ in range(blocks):
            torch.cuda.set_sync_debug_mode("error")
            batches += meter.phase(block_s, 8).batches
    except Exception as exc:  # noqa: BLE001 - a ConsumerError wraps it; the pin thread's comes re-raised
        cause = exc.__cause__ or exc
        text = f"{type(cause).__name__}: {cause}"
        if "synchroniz" not in text:
            raise
        return batches, gist(text) + where(cause)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    return batches, None


def first_line(text: str) -> str:
    return text.strip().splitlines()[0][:300] if text.strip() else text


def gist(text: str) -> str:
    """First and last line: a DataLoader re-raising its pin thread's error puts the error itself last."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if len(lines) <= 1:
        return first_line(text)
    return f"{lines[0][:200]} … {lines[-1][:200]}"


def where(exc: BaseException) -> str:
    """The Python line that made the call, for the report."""
    frames = traceback.extract_tb(exc.__traceback__)
    return f" (at {frames[-1].filename}:{frames[-1].lineno}, in {frames[-1].name})" if frames else ""


def idle_share(bench: Bench) -> Check:
    """A trial's GPU idle clock against the wall clock with a known step: a loader twice as slow as
    the step (the GPU idles about half the time) and one that is never waited for (about none)."""
    step_s = bench.step_s
    points = []
    for label, pace in ((f"a loader of {2 * step_s * 1e3:.3g} ms per batch", 2 * step_s), ("a loader never waited for", 0.0)):
        config = TrialConfig(1, 0, pin_memory=True, transfer="non_blocking")
        meter = trial_meter(bench, Filled(1024, pace_s=pace), config)
        meter.startup()
        meter.phase(0.0, 5)  # warm-up, discarded
        blocks = [meter.phase(0.0, 30) for _ in range(2)]
        seconds = sum(b.seconds for b in blocks)
        events = sum(b.wait_s or 0.0 for b in blocks) / seconds
        points.append((label, events, decide.wall_idle_share(sum(b.batches for b in blocks), step_s, seconds)))
        del meter
    return decide.idle_check(points, bench.work.calibrated_ms)


def stream_overlap(bench: Bench) -> Check:
    """The copy alone, the step alone, both through ``CUDAPrefetcher`` (``stream``) and both on one
    stream (``non_blocking``), over the same pinned batches, the copy as long as the step."""
    device, gbps = bench.device, bench.pinned_gbps or pinned_peak(bench.device, COPY_MIB * MiB)
    mib = min(MAX_OVERLAP_MIB, max(1.0, bench.step_s * gbps * 1e9 / MiB))
    pool = [torch.full((int(mib * MiB) // 4,), float(i)).pin_memory() for i in range(2)]
    batches = [pool[i % 2] for i in range(OVERLAP_BATCHES)]
    resident = [p.to(device) for p in pool]

    def timed(loop: Callable[[], None]) -> float:
        torch.cuda.synchronize(device)
        start = time.perf_counter()
        loop()
        torch.cuda.synchronize(device)
        return (time.perf_counter() - start) / OVERLAP_BATCHES

    def copy_loop():
        for batch in batches:
            move_to(batch, device, non_blocking=True)

    copy_s = statistics.median(timed(copy_loop) for _ in range(OVERLAP_REPEATS))
    work = bench.work if abs(copy_s - bench.step_s) <= 0.25 * bench.step_s else calibrate(copy_s * 1000, device)
    step = work.build(device)
    loops = {
        "copy": copy_loop,
        "step": lambda: [step(resident[i % 2]) for i in range(OVERLAP_BATCHES)],
        "stream": lambda: [step(b) for b in CUDAPrefetcher(batches, device)],
        "non_blocking": lambda: [step(move_to(b, device, non_blocking=True)) for b in batches],
    }
    times: dict[str, list[float]] = {name: [] for name in loops}
    for _ in range(OVERLAP_REPEATS):  # interleaved: a drifting clock touches every loop alike
        for name, loop in loops.items():
            times[name].append(timed(loop))
    median = {name: statistics.median(t) for name, t in times.items()}
    return decide.overlap_check(median["copy"], median["step"], median["stream"], median["non_blocking"], OVERLAP_BATCHES)


CHECKS: list[tuple[str, Callable[[Bench], Check]]] = [
    (decide.COPY, copy_rates), (decide.PREFETCH, prefetch_values), (decide.NON_BLOCKING, non_blocking_values),
    (decide.SYNC, hidden_sync), (decide.IDLE, idle_share), (decide.OVERLAP, stream_overlap),
]


def run_checks(bench: Bench) -> None:
    """Every check in turn; one that raises fails with the exception, and the others still run."""
    for name, check in CHECKS:
        try:
            result = check(bench)
        except Exception as exc:  # noqa: BLE001 - reported as this check's failure
            result = decide.unfinished(name, f"{type(exc).__name__}: {first_line(str(exc))}")
        say("check", asdict(result))
        gc.collect()  # a check's loaders (and their workers) and batches go before the next check starts
        torch.cuda.synchronize(bench.device)
        torch.cuda.empty_cache()


def main() -> None:
    from loadtune.engine.trial.child import die_with_parent

    die_with_parent()
    reason = doctor.no_gpu_reason()
    if reason is not None:
        say("refused", f"{NO_CUDA}: {reason.removeprefix('no GPU: ')}")
        return
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    say("facts", doctor.collect(measure=False).to_dict())
    try:
        work = calibrate(STEP_MS, device)
    except Exception as exc:  # noqa: BLE001 - nothing can be checked without the step
        say("error", f"the {STEP_MS:g} ms step could not be calibrated: {type(exc).__name__}: {first_line(str(exc))}")
        return
    if not math.isfinite(work.calibrated_ms) or work.calibrated_ms <= 0:
        say("error", f"the {STEP_MS:g} ms step calibrated to {work.calibrated_ms} ms")
        return
    run_checks(Bench(device, work))
    say("done", True)


if __name__ == "__main__":
    main()
    sys.exit(0)

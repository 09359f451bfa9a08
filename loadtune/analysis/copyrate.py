"""The host-to-device copy as a bound, as pure functions of a scan's result.

A config's achieved copy rate is the bytes of the batches it moved to the GPU per second of timed
block; set beside the device's pinned peak (measured before the trials), it says what share of the
time the copy alone would take at best. When that share is large the copy bounds throughput, and
for float32 images the cure is known: transfer uint8 and normalise on the GPU, a quarter of the
bytes, as NVIDIA apex's ImageNet example does.
"""

from __future__ import annotations

import math

from loadtune.model.results import ConfigResult, ScanResult
from loadtune.model.batch import BatchInfo

COPY_BOUND_SHARE = 0.5  # the copy at the peak rate would fill at least this share of the time: it bounds
IMAGE_CHANNELS = (1, 3, 4)
SMALLER_AS_UINT8 = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2}


def copy_share(config: ConfigResult, peak_gbps: float | None) -> float | None:
    """Achieved GB/s / the device's pinned peak: how much of the time the copy needs at best."""
    achieved = config.h2d_gbps
    if achieved is None or not peak_gbps:
        return None
    return achieved / peak_gbps


def image_tensor(batch: BatchInfo | None) -> tuple[str, list[int]] | None:
    """The floating-point image-like tensor (N,C,H,W, N,H,W,C or a video's 5 dims, 1, 3 or 4 channels)
    that holds most of the batch's bytes, if there is one."""
    if batch is None or not batch.nbytes:
        return None
    for dtype, shape in batch.tensors:
        if dtype not in SMALLER_AS_UINT8 or len(shape) not in (4, 5):
            continue
        itemsize = {"float32": 4, "float64": 8}.get(dtype, 2)
        if math.prod(shape) * itemsize < 0.5 * batch.nbytes:
            continue
        rest = shape[1:]
        if any(d in IMAGE_CHANNELS for d in rest) and sum(d >= 16 for d in rest) >= 2:
            return dtype, shape
    return None


def device_peak(result: ScanResult, config: ConfigResult) -> float | None:
    """The pinned peak of the GPU the config's timed blocks were copied to. With several ranks those
    are the slowest rank's blocks, copied to that rank's own GPU (``cuda:LOCAL_RANK``): its peak, the
    lowest of them when runs had different slowest ranks. Else the scan's device."""
    peaks = result.h2d_peaks_gbps
    if not peaks:
        return result.h2d_peak_gbps
    slowest = {t.slowest_rank.local_rank for t in config.trials if t.ok and t.slowest_rank is not None}
    own = [peaks[i] for i in slowest if 0 <= i < len(peaks)]
    return min(own) if own else result.h2d_peak_gbps


def copy_notes(result: ScanResult) -> list[str]:
    """Notes for the report: the recommended config's copy rate beside the peak, and the uint8 advice
    when the copy is the bound and the batch is floating-point images."""
    rec = result.recommendation
    pick = result.config_result(rec.config) if rec else None
    peak = device_peak(result, pick) if pick is not None else None
    if pick is None or pick.h2d_gbps is None:
        return []
    if not peak:
        return [f"{pick.config.label()} moved {pick.h2d_gbps:.2f} GB/s to the GPU (no pinned peak was measured to "
                "compare with; `loadtune doctor` measures it)"]
    share = copy_share(pick, peak)
    whose = "the slowest rank's own GPU's" if result.h2d_peaks_gbps else "this device's"
    out = [f"{pick.config.label()} moved {pick.h2d_gbps:.2f} GB/s to the GPU: {share:.0%} of {whose} pinned "
           f"host-to-device peak ({peak:.1f} GB/s, measured before the trials)"]
    if share < COPY_BOUND_SHARE:
        return out
    out[0] += ": the copy is the bound, or close to it"
    image = image_tensor(pick.batch)
    if image is not None:
        dtype, shape = image
        times = SMALLER_AS_UINT8[dtype]
        out.append(f"the batch is {dtype} images {tuple(shape)}: transferring them as uint8 and normalising on the GPU "
                   f"(as NVIDIA apex's ImageNet example does) moves 1/{times} of the bytes, which moves this bound")
    return out

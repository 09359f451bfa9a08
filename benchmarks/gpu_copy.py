"""Pinned against pageable host memory: host-to-device (and device-to-host) GB/s at 1, 16 and 256 MiB.

The folk claim "pin_memory makes transfers 30-50% faster" measured, not repeated. Each figure is
``loadtune.engine.bandwidth.copy_rate``: CUDA events around each copy, two warm-up copies, then the median of
repeats (about 1 GiB moved per figure, 5 to 50 copies) with its 95% interval. Pinned copies are
issued ``non_blocking``; pageable ones are staged by the driver. The PCIe link's theoretical rate
(NVML generation x width) is printed beside them.

    PYTHONPATH=. python3 benchmarks/gpu_copy.py --out /tmp/gpu_copy.json   # kept as benchmarks/results/gpu_copy.json.gz (gzip -9n)
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_common import gpu_meta, require_cuda

MiB = 1 << 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,16,256", help="sizes in MiB (default: 1,16,256)")
    parser.add_argument("--out", type=Path, metavar="PATH", help="write the figures here")
    args = parser.parse_args()
    require_cuda("gpu_copy")
    meta = gpu_meta()
    import torch

    from loadtune.engine import bandwidth, doctor

    device = torch.device("cuda", torch.cuda.current_device())
    sizes = [int(s) * MiB for s in args.sizes.split(",")]
    rows = []
    print(f"{'size':>8} {'dir':>4} {'pinned GB/s':>14} {'pageable GB/s':>14} {'pinned/pageable':>16}")
    for size in sizes:
        for direction in ("h2d", "d2h"):
            pinned = bandwidth.copy_rate(device, size, direction, pinned=True)
            pageable = bandwidth.copy_rate(device, size, direction, pinned=False)
            rows += [asdict(pinned), asdict(pageable)]
            print(f"{size // MiB:>5} MiB {direction:>4} {pinned.gbps:>8.2f} ±{(pinned.high - pinned.low) / 2:.2f}"
                  f" {pageable.gbps:>8.2f} ±{(pageable.high - pageable.low) / 2:.2f} {pinned.gbps / pageable.gbps:>15.2f}x")
    link = doctor.examine_gpu(device.index, (), measure=False).link  # read right after the copies
    if link:
        print(f"PCIe now gen {link.gen_current} x{link.width_current} ({doctor.link_gbps(link.gen_current, link.width_current)} GB/s), "
              f"max gen {link.gen_max} x{link.width_max} ({doctor.link_gbps(link.gen_max, link.width_max)} GB/s), theoretical each way")
    if args.out:
        out = {"benchmark": "gpu_copy", "meta": meta, "link": asdict(link) if link else None, "copies": rows}
        args.out.write_text(json.dumps(out, indent=1) + "\n")
        print(f"saved to {args.out}")


if __name__ == "__main__":
    main()

"""The recommended config's achieved host-to-device rate, as a fraction of doctor's pinned peak.

A scan (``loadtune.scan``, adaptive search, all transfer strategies) of a transfer-bound dataset
(benchmarks/transfer_bound.py: whole batches already pinned, so only the copy costs time). The
achieved rate is what the report prints: bytes of the batches moved per timed block / block time,
median over blocks; the peak is the scan's own measurement before the trials
(``loadtune.engine.bandwidth.pinned_peak``: 256 MiB pinned copies, CUDA events, median). Target: >= 90%.
``--samples`` scans the realistic case too (float32 images collated and pinned by the loader),
reported without a target: there the host-side copies can be the bound, which the report says.

    PYTHONPATH=. python3 benchmarks/gpu_achieved.py --out /tmp/gpu_achieved.json   # kept as benchmarks/results/gpu_achieved.json.gz (gzip -9n)
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from gpu_common import gpu_meta, require_cuda  # noqa: E402  (after the sys.path line above)

TARGET = 0.90


def scan_case(factory: str, workers: list[int], batch_size: int, quick: bool) -> dict:
    import loadtune

    timing = dict(warmup=0.3, block_time=0.2, blocks=3) if quick else dict(warmup=1.0, block_time=0.5, blocks=10)
    with tempfile.TemporaryDirectory() as tmp:
        result = loadtune.scan(f"{HERE / 'transfer_bound.py'}:{factory}", workers=workers, batch_size=batch_size,
                               prefetch=[2], json_path=Path(tmp) / "scan.json", **timing)
    rec = result.recommendation
    pick = result.config_result(rec.config) if rec else None
    peak = result.h2d_peak_gbps
    rows = [{"config": c.config.label(), "samples_per_s": c.estimate.median, "h2d_gbps": c.h2d_gbps,
             "fraction_of_peak": (c.h2d_gbps / peak) if c.h2d_gbps and peak else None}
            for c in result.configs if c.ok]
    achieved = pick.h2d_gbps if pick else None
    return {"factory": factory, "peak_gbps": peak, "recommended": rec.config.label() if rec else None,
            "achieved_gbps": achieved, "fraction": achieved / peak if achieved and peak else None,
            "configs": rows, "notes": result.notes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", action="store_true", help="also scan the realistic images dataset (no target)")
    parser.add_argument("--quick", action="store_true", help="short trials (a smoke run, not a figure to record)")
    parser.add_argument("--out", type=Path, metavar="PATH", help="write the figures here")
    args = parser.parse_args()
    require_cuda("gpu_achieved")
    meta = gpu_meta()
    cases = [scan_case("dataset", [0, 1, 2], 1, args.quick)]
    if args.samples:
        cases.append(scan_case("samples", [0, 2, 4, 8], 128, args.quick))
    for case in cases:
        print(f"{case['factory']}: pinned peak {case['peak_gbps']} GB/s")
        for row in sorted(case["configs"], key=lambda r: -(r["h2d_gbps"] or 0)):
            frac = f"{row['fraction_of_peak']:.0%}" if row["fraction_of_peak"] is not None else "-"
            print(f"  {row['config']:<40} {row['h2d_gbps'] or 0:7.2f} GB/s  {frac:>5} of peak")
        frac = case["fraction"]
        verdict = "" if case["factory"] != "dataset" else (" PASS" if frac and frac >= TARGET else " FAIL") + f" (target {TARGET:.0%})"
        print(f"  recommended {case['recommended']}: {case['achieved_gbps'] or 0:.2f} GB/s = "
              f"{frac:.1%} of the peak{verdict}" if frac is not None else "  no achieved rate measured")
    if args.out:
        args.out.write_text(json.dumps({"benchmark": "gpu_achieved", "meta": meta, "target": TARGET,
                                        "cases": cases}, indent=1) + "\n")
        print(f"saved to {args.out}")


if __name__ == "__main__":
    main()

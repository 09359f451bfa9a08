"""How steady is one reading of the calibration unit's CPU time on this machine?

``check`` compares the CPU time one unit of the shaped calibration's work takes today with the
baseline's (``engine.calibration.unit_seconds_isolated``: thread time, the fastest of 5 repeats per
reading, the fastest of 3 readings). This takes single readings every few seconds for a while, to run
beside another benchmark (``check_alarms.py``: quiet, one core busy, a pace that changes), and prints
their spread: how often one reading alone would have strayed past the gate's 10%.

    python benchmarks/unit_seconds.py --seconds 600 --out /tmp/unit_seconds.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from meta import run_meta

from loadtune.engine.calibration import unit_seconds_isolated


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=600)
    p.add_argument("--every", type=float, default=4.0, help="seconds between readings")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    meta, readings = run_meta(), []
    end = time.time() + args.seconds
    while time.time() < end:
        readings.append((time.time(), unit_seconds_isolated(readings=1)))
        time.sleep(args.every)
    values = sorted(u for _, u in readings)
    median = statistics.median(values)
    strays = sum(abs(u / median - 1) > 0.10 for u in values)
    Path(args.out).write_text(json.dumps({"meta": meta, "readings": readings}, indent=1) + "\n")
    print(f"{len(values)} readings: median {median * 1e6:.3f} us, {values[0] * 1e6:.3f}-{values[-1] * 1e6:.3f}; "
          f"{strays} beyond 10% of the median")


if __name__ == "__main__":
    main()

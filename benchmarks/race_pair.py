"""Race one of ``race_coverage.py``'s pairs a few times with whichever loadtune is on the path, to put
two versions of the race side by side on one pair (alternate their runs, alone on the machine).

    cd /tmp && PYTHONPATH=/tmp/before python /work/main/benchmarks/race_pair.py images_no_persistent --seed 1
    cd /tmp && PYTHONPATH=/work/main python /work/main/benchmarks/race_pair.py images_no_persistent --seed 1

Prints one JSON line: where loadtune came from, the race's ratio a / b, its 95% interval, its legs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import loadtune

sys.path.insert(0, str(Path(__file__).resolve().parent))
from race_coverage import HERE, PAIRS, one_race, worker_config  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pair", choices=sorted(PAIRS))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    path, batch, wa, wb, persistent = PAIRS[args.pair]
    a, b = worker_config(batch, wa, persistent), worker_config(batch, wb, persistent)
    r = one_race(str((HERE / path).resolve()), a, b, args.seed)
    print(json.dumps({"loadtune": loadtune.__file__, "pair": args.pair, "ratio": r["ratio"], "low": r["low"],
                      "high": r["high"], "legs": r["legs"]}))


if __name__ == "__main__":
    main()

"""One-off: what the kernel's readahead costs a memory-mapped array read at random from storage, and
what ``madvise`` on the mapping changes. Plain DataLoader loops in fresh processes, cold (the file
dropped once before each run), every process in a cgroup v1 memory group of ``--memory-limit`` GiB so
that a file larger than it reads as one larger than RAM does. Per run: samples/s and the bytes storage
fetched per sample (``/proc/self/io`` ``read_bytes``, reaped workers included).

    LOADTUNE_MEMMAP=/var/tmp/loadtune-memmap-24g.u8 LOADTUNE_MEMMAP_ROWS=500000 \
        python benchmarks/experiments/mmap-readahead/run.py --rounds 2 --samples 2000
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(BENCH))
from storage import memory_limited  # noqa: E402

LOOP = r"""
import json, mmap, os, sys, time
sys.path.insert(0, sys.argv[1])
import numpy as np, torch
from torch.utils.data import DataLoader
import memmap_array as m

ADVICE = {"none": None, "random": mmap.MADV_RANDOM, "willneed": "row"}

class Advised(m.Rows):
    def __init__(self, path, rows, advice):
        super().__init__(path, rows)
        self.advice = advice

    def __getitem__(self, index):
        if self.array is None:
            self.array = np.memmap(self.path, dtype=np.uint8, mode="r", shape=(self.rows, m.ROW))
            if isinstance(ADVICE[self.advice], int):
                self.array._mmap.madvise(ADVICE[self.advice])
        if ADVICE[self.advice] == "row":  # one read of exactly the row, before it is touched
            start = (index * m.ROW) // mmap.PAGESIZE * mmap.PAGESIZE
            self.array._mmap.madvise(mmap.MADV_WILLNEED, start, index * m.ROW + m.ROW - start)
        return super().__getitem__(index)

workers, advice, most = int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
fd = os.open(m.PATH, os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)
def fetched():
    return int(dict(l.split(": ") for l in open("/proc/self/io").read().splitlines())["read_bytes"])
loader = DataLoader(Advised(m.PATH, m.ROWS, advice), batch_size=32, shuffle=True, num_workers=workers,
                    **({"prefetch_factor": 2} if workers else {}))
before, warm, samples, t0 = fetched(), 2 * max(1, workers), 0, None
for i, batch in enumerate(loader):
    if i == warm:
        t0, samples = time.perf_counter(), 0
    elif t0 is not None:
        samples += len(batch[0])
        if samples >= most:
            break
rate = samples / (time.perf_counter() - t0)
del batch, loader
print(json.dumps({"rate": rate, "storage_per_sample": (fetched() - before) / (samples + warm * 32)}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--memory-limit", type=float, default=3)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("results.json"))
    args = parser.parse_args()
    cells = [(w, a) for w in (0, 2) for a in ("none", "random", "willneed")]
    got: dict[str, list] = {f"w{w} {a}": [] for w, a in cells}
    with memory_limited(args.memory_limit):
        for r in range(args.rounds):
            for w, a in (cells if r % 2 == 0 else list(reversed(cells))):
                out = subprocess.run([sys.executable, "-c", LOOP, str(BENCH / "archetypes"), str(w), a, str(args.samples)],
                                     capture_output=True, text=True, check=True)
                got[f"w{w} {a}"].append(json.loads(out.stdout.strip().splitlines()[-1]))
                print(f"round {r + 1} w{w} {a}: {got[f'w{w} {a}'][-1]}", file=sys.stderr, flush=True)
    args.out.write_text(json.dumps(got, indent=1) + "\n")


if __name__ == "__main__":
    main()

"""Does the machine's pace move torch's small ops and plain Python alike? 14 spawned processes one after
another, each: a 16x16 tanh_ loop (the shaped calibration's unit of work) and a pure-Python loop, the
best of three half-second readings of each, relative to the best process. README.md has the answer."""

import multiprocessing as mp
import time

READING_S = 0.5


def rate(step, units: int) -> float:
    """Units per second of ``step`` (which does ``units`` of them) over half a second."""
    start, done = time.perf_counter(), 0
    while time.perf_counter() - start < READING_S:
        step()
        done += units
    return done / (time.perf_counter() - start)


def one(_: int) -> tuple[float, float]:
    import torch

    torch.set_num_threads(1)
    x = torch.full((16, 16), 1.001)

    def torch_ops() -> None:
        for _ in range(200):
            x.tanh_()

    def python() -> None:
        total = 0
        for i in range(2000):
            total += i * i

    rate(torch_ops, 200), rate(python, 2000)  # warm-up
    return max(rate(torch_ops, 200) for _ in range(3)), max(rate(python, 2000) for _ in range(3))


if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    got = []
    for i in range(14):
        with ctx.Pool(1) as pool:
            got.append(pool.apply(one, (i,)))
    best_torch, best_python = max(g[0] for g in got), max(g[1] for g in got)
    for t, p in got:
        print(f"torch {t / best_torch:.2f}  python {p / best_python:.2f}")

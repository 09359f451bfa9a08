"""A dataset whose loader without workers slows down while another trial process of it is alive: what
a race sees (its loaders alive together) and a run alone does not. Each trial process registers its
pid in the folder beside this file at ``dataset()``; the main process, loading without workers, costs
three times as much while another registered process lives. Alone, the two worker counts deliver
alike; side by side, no workers reads about a third as fast: the race and the runs alone disagree far
beyond any noise, and the referee's rounds alone must side with the runs alone."""

import os
import time
from pathlib import Path

from torch.utils.data import Dataset, get_worker_info

HERE = Path(__file__).resolve().parent
COST_S = 0.001


def ancestors() -> set[int]:
    """This process and those it descends from (the scan that started the trial reads samples too)."""
    out, pid = set(), os.getpid()
    while pid > 1 and pid not in out:
        out.add(pid)
        with open(f"/proc/{pid}/stat") as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])
    return out


def others_alive() -> bool:
    mine = ancestors()
    for path in HERE.glob("alive-*"):
        pid = int(path.name.split("-")[1])
        if pid in mine:
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            path.unlink(missing_ok=True)
            continue
        if state != "Z":  # a zombie is dead, only not yet reaped
            return True
    return False


class Contested(Dataset):
    def __init__(self):
        self.checked, self.crowded = 0.0, False

    def __len__(self):
        return 4096

    def __getitem__(self, i):
        cost = COST_S
        if get_worker_info() is None:
            now = time.monotonic()
            if now - self.checked > 0.05:
                self.checked, self.crowded = now, others_alive()
            cost *= 3 if self.crowded else 1
        time.sleep(cost)
        return i


def dataset():
    (HERE / f"alive-{os.getpid()}").touch()
    return Contested()


loadtune_options = {"batch_size": 16, "workers": [0, 2], "prefetch": [2], "persistent": True,
                    "warmup": 0.3, "block_time": 0.3, "blocks": 6, "min_blocks": 3}

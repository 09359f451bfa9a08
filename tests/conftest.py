"""Every test must leave no process of its own behind (trial children, DataLoader workers)."""

import time

import psutil
import pytest

# multiprocessing's own long-lived helpers, started once per test session, are not leaks
HELPERS = ("forkserver", "resource_tracker", "semaphore_tracker")


def stray_children():
    me = psutil.Process()
    strays = []
    for proc in me.children(recursive=True):
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            # a helper is our direct child; trials forked by the fork server share its command line
            if proc.ppid() == me.pid and any(h in " ".join(proc.cmdline()) for h in HELPERS):
                continue
            strays.append(proc)
        except psutil.NoSuchProcess:
            pass
    return strays


@pytest.fixture(autouse=True)
def no_leaked_processes():
    yield
    deadline = time.monotonic() + 5  # processes that are exiting get a moment to finish
    while stray_children() and time.monotonic() < deadline:
        time.sleep(0.05)
    strays = stray_children()
    assert not strays, f"processes left behind: {[(p.pid, p.cmdline()) for p in strays]}"

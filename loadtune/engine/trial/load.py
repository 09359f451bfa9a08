"""Who used the trial's CPUs while its blocks were timed: the machine against the trial's own processes.

A busy machine slows some trials and not others, and a scan compares trials taken at different
times: a figure measured while another job ran says little about the config. The trial reads,
around its timed blocks, the CPUs it may run on (``/proc/stat``, each CPU of its affinity mask),
the CPU of its own processes (itself, every descendant, and the children they have reaped), of the
kernel's threads, and where a cgroup quota binds, that cgroup's usage. What the CPUs spent beyond
the trial, the kernel's threads and the scan's own process is load from outside the scan
(``LoadReading.outside_s``); ``analysis/load.py`` decides when it is too much. Linux only.

``/proc/stat`` gives each CPU's busy time two ways, and the reading keeps both: the window less the
idle time (kept to the microsecond on a tickless kernel, but it also counts the idle loop's own
entry and exit, which a trial switching 30,000 times a second makes worth 0.1 of a core on a 2-core
VM), and the user, system, interrupt and steal time (which leaves that out, but is charged by
whole timer ticks, so sampled).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from loadtune.engine.machine import CGROUP_ROOT, cgroup_v2_dirs, parse_cfs, parse_cpu_max, usable_cores
from loadtune.engine.trial.cpu import process_cpu_s
from loadtune.model.load import LoadReading

PROC_STAT = Path("/proc/stat")
OUTSIDE_WINDOW_S = 0.5  # how long ``outside_now`` watches: long next to a tick, short next to a scan
NAMED = 3  # the busiest outside processes it names


def tick_s() -> float:
    """/proc/stat's unit: 1 / USER_HZ (100 on Linux)."""
    try:
        return 1.0 / os.sysconf("SC_CLK_TCK")
    except (ValueError, OSError, AttributeError):
        return 0.01


BUSY_FIELDS = (0, 1, 2, 5, 6, 7)  # user, nice, system, irq, softirq, steal (guest time is inside user)
IDLE_FIELDS = (3, 4)  # idle, iowait: the CPU was free


def cpu_ticks(text: str, cpus: set[int]) -> dict[int, tuple[int, int]] | None:
    """(busy, idle) ticks of each CPU of ``cpus`` in a /proc/stat text (lines ``cpuN user nice
    system idle iowait irq softirq steal ...``); None when one of them is missing (taken offline)."""
    out = {}
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu") or not name[3:].isdigit() or int(name[3:]) not in cpus:
            continue
        fields = [int(v) for v in rest.split()] + [0] * 8
        out[int(name[3:])] = (sum(fields[i] for i in BUSY_FIELDS), sum(fields[i] for i in IDLE_FIELDS))
    return out if set(out) == cpus else None


def quota_usage_file(root: Path = CGROUP_ROOT) -> tuple[Path, float] | None:
    """The usage counter of the cgroup whose CPU quota binds (the tightest), with its unit in
    seconds: v2 ``cpu.stat`` (``usage_usec``), v1 ``cpuacct.usage`` (ns). None without a quota."""
    found: list[tuple[float, Path, float]] = []
    for folder in cgroup_v2_dirs(root):
        try:
            limit = parse_cpu_max((folder / "cpu.max").read_text())
        except (OSError, ValueError):
            continue
        if limit is not None and (folder / "cpu.stat").exists():
            found.append((limit, folder / "cpu.stat", 1e-6))
    try:
        limit = parse_cfs((root / "cpu" / "cpu.cfs_quota_us").read_text(), (root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        limit = None
    usage = next((p for p in (root / "cpu" / "cpuacct.usage", root / "cpuacct" / "cpuacct.usage") if p.exists()), None)
    if limit is not None and usage is not None:
        found.append((limit, usage, 1e-9))
    if not found:
        return None
    _, path, unit = min(found, key=lambda f: f[0])
    return path, unit


def read_usage(path: Path, unit: float) -> float | None:
    """Seconds in a cgroup usage counter (``cpu.stat``'s ``usage_usec`` line, or a bare number)."""
    try:
        text = path.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 1 and parts[0].isdigit():
            return int(parts[0]) * unit
        if len(parts) == 2 and parts[0] == "usage_usec":
            return int(parts[1]) * unit
    return None


PF_KTHREAD = 0x00200000  # /proc/PID/stat flags: a kernel thread


@dataclass(frozen=True)
class Proc:
    """What /proc/PID/stat says of a process that matters here."""

    ppid: int
    kernel: bool  # a kernel thread (kworker, ksoftirqd, ...)
    reaped_ticks: int  # CPU ticks of the children it has reaped (cutime + cstime)


def proc_table(root: Path = Path("/proc")) -> dict[int, Proc]:
    """Every process of the machine, from one pass over /proc/*/stat (what psutil's ``children``
    reads too); processes that end while it is read are left out."""
    table: dict[int, Proc] = {}
    try:
        names = os.listdir(root)
    except OSError:  # no /proc: not Linux
        return table
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(root / name / "stat", "rb") as f:
                data = f.read()
            fields = data[data.rindex(b")") + 2:].split()  # the command name may hold spaces and parentheses
            table[int(name)] = Proc(int(fields[1]), bool(int(fields[6]) & PF_KTHREAD), int(fields[13]) + int(fields[14]))
        except (OSError, ValueError, IndexError):
            continue
    return table


def descendants(table: dict[int, Proc], pid: int) -> list[int]:
    """Every process below ``pid``: workers, a fork server and what it forked, their children."""
    below: dict[int, list[int]] = {}
    for child, proc in table.items():
        below.setdefault(proc.ppid, []).append(child)
    out, todo = [], list(below.get(pid, []))
    while todo:
        child = todo.pop()
        out.append(child)
        todo += below.get(child, [])
    return out


def own_cpu_s(table: dict[int, Proc], pids: list[int], tick: float) -> tuple[float, int]:
    """CPU seconds of this process, of ``pids`` (its descendants), and of every child any of them has
    reaped (a worker restarted each epoch is gone by the end); with how many of those figures came
    in ticks (the reaped time of descendants)."""
    import resource  # Unix only; this runs only where /proc/stat was read

    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    total, ticked = time.process_time() + reaped.ru_utime + reaped.ru_stime, 0
    for pid in pids:
        try:
            total += process_cpu_s(pid)
        except (psutil.Error, OSError):
            continue  # gone since the listing: its parent's reaped time holds it
        if table[pid].reaped_ticks:
            total += table[pid].reaped_ticks * tick
            ticked += 1
    return total, ticked


def thread_cpu_s(pids: list[int]) -> dict[int, float]:
    """CPU seconds of single-threaded processes (the kernel's threads), by pid."""
    out = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/schedstat") as f:
                out[pid] = int(f.read().split()[0]) / 1e9
        except (OSError, ValueError, IndexError):
            continue
    return out


@dataclass
class Counters:
    """One reading: the CPUs' ticks, the trial's own CPU, the quota's usage, the kernel's threads."""

    cpu: dict[int, tuple[int, int]]  # (busy, idle) ticks by CPU
    own_s: float
    ticked: int
    quota_s: float | None
    kernel: dict[int, float]


class LoadMeter:
    """Reads the counters at ``start`` and at ``stop``, around the timed blocks and outside them.

    The processes are listed first (with many on the machine that takes milliseconds); then the
    CPUs' ticks, the quota's usage and the trial's own CPU are read back to back at the start, in
    the reverse order at the end, so that the CPUs' window holds the trial's own and ``edge_s`` (how
    much longer it is) stays short. The kernel's threads are read outside that: their window holds
    the CPUs'. They are not outside load: the trial's own batches make them work (freeing shared
    memory, closing files)."""

    def __init__(self) -> None:
        self.cpus = set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))
        self.tick = tick_s()
        self.quota = quota_usage_file()
        self.usable = usable_cores()
        self.first: Counters | None = None
        self.started = self.edge_s = 0.0

    def _cpu(self) -> dict[int, tuple[int, int]] | None:
        try:
            return cpu_ticks(PROC_STAT.read_text(), self.cpus)
        except OSError:
            return None

    def _quota(self) -> float | None:
        return read_usage(*self.quota) if self.quota else None

    def _listing(self) -> tuple[dict[int, Proc], list[int], list[int]]:
        table = proc_table()
        return table, descendants(table, os.getpid()), [pid for pid, p in table.items() if p.kernel]

    def start(self) -> None:
        """The first reading; none where /proc cannot be read (not Linux): ``stop`` then gives None."""
        try:
            self._start()
        except (OSError, ValueError, KeyError, IndexError, psutil.Error):  # this reading is lost, not the trial
            self.first = None

    def stop(self) -> LoadReading | None:
        """The reading over the window since ``start``; None where /proc could not be read."""
        try:
            return self._stop() if self.first is not None else None
        except (OSError, ValueError, KeyError, IndexError, psutil.Error):
            return None

    def _start(self) -> None:
        if self._cpu() is None:  # no /proc/stat (not Linux), or a CPU of the mask missing from it
            return
        table, mine, kernel = self._listing()
        threads = thread_cpu_s(kernel)
        self.started = time.perf_counter()
        cpu, quota = self._cpu(), self._quota()
        own, ticked = own_cpu_s(table, mine, self.tick)
        self.edge_s = time.perf_counter() - self.started
        self.first = Counters(cpu, own, ticked, quota, threads) if cpu is not None else None

    def _stop(self) -> LoadReading | None:
        table, mine, kernel = self._listing()
        ending = time.perf_counter()
        own, ticked = own_cpu_s(table, mine, self.tick)
        quota, cpu = self._quota(), self._cpu()
        done = time.perf_counter()
        threads = thread_cpu_s(kernel)
        if cpu is None:
            return None
        first = self.first
        busy = [max(0, cpu[c][0] - first.cpu[c][0]) * self.tick for c in sorted(self.cpus)]
        return LoadReading(
            window_s=done - self.started, cpus=len(self.cpus), usable_cores=self.usable,
            idle_s=sum(cpu[c][1] - first.cpu[c][1] for c in self.cpus) * self.tick, cpu_busy_s=busy,
            own_s=max(0.0, own - first.own_s), tick_s=self.tick, tick_reads=len(self.cpus) + max(first.ticked, ticked),
            edge_s=self.edge_s + done - ending,
            kernel_s=sum(max(0.0, s - first.kernel.get(pid, 0.0)) for pid, s in threads.items()),
            quota_busy_s=max(0.0, quota - first.quota_s) if quota is not None and first.quota_s is not None else None,
        )


def outside_now(window_s: float = OUTSIDE_WINDOW_S) -> tuple[float | None, list[str]]:
    """Cores that processes outside this one kept busy over ``window_s`` (the trials' own reading,
    ``LoadMeter``, over a short wait), and the busiest of them by name and share of a core ("pip 95%"):
    what is running now, where the load average still carries what ended a minute ago. (None, []) where
    the CPUs cannot be read (not Linux)."""
    before = process_cpu()
    meter = LoadMeter()
    meter.start()
    time.sleep(window_s)
    reading = meter.stop()
    if reading is None:
        return None, []
    after = process_cpu()
    used = sorted(((after[pid][1] - cpu, name) for pid, (name, cpu) in before.items()
                   if pid in after and pid != os.getpid()), reverse=True)
    who = [f"{name} {share / reading.window_s:.0%}" for share, name in used[:NAMED] if share / reading.window_s >= 0.1]
    return round(reading.outside_cores, 2), who


def process_cpu() -> dict[int, tuple[str, float]]:
    """Every process's name and CPU seconds so far (those it may not read or that end meanwhile left out)."""
    out = {}
    for p in psutil.process_iter(["name", "cpu_times"]):
        times = p.info.get("cpu_times")
        if times is not None:
            out[p.pid] = (p.info.get("name") or str(p.pid), times.user + times.system)
    return out

"""Rendering ``loadtune doctor``'s report: the machine, the storage under ``--storage``, and per GPU
its link and measured copy rates."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from loadtune.analysis.footprint import size_text
from loadtune.report.text import gbps, short_bytes, spread_text


def pace_text(pace: Any) -> str:
    """The CPU's pace (``analysis.pace.CpuPace``) in words: its spread, and what a wandering one means."""
    what = ("steady" if pace.steady else
            "it wanders (other load, or a host that shares the cores), and side-by-side comparisons of CPU-bound "
            "loaders need more turns here (a scan's race says how many)")
    return (f"±{pace.spread:.1%} between adjacent tenths of a second ({pace.processes} process"
            f"{'es' if pace.processes != 1 else ''} of fixed work, {pace.pairs} pairs) · {what}")


def cache_text(storage: Any) -> str:
    """Whether the page cache let go of a few files just read, in figures: what every read below is worth."""
    if storage.droppable is None:
        return "could not be told (mincore unavailable): whether the reads below are cold is not known"
    kept = f"{storage.resident_after_drop:.0%}" if storage.resident_after_drop is not None else "all"
    was = f" (after a read: {storage.resident_after_read:.0%})" if storage.resident_after_read is not None else ""
    if storage.droppable:
        return f"can be dropped: {kept} of a few files just read stayed cached after the drop{was}, so every read below is cold"
    return f"cannot be dropped: {kept} of a few files just read stayed cached after the drop{was}, so the reads below are warm"


def storage_lines(storage: Any) -> list[tuple[str, str]]:
    """``--storage``'s rows of the machine's table: the path's mount, the files sampled, the page cache."""
    mount = (f"{storage.filesystem} on {storage.mount_point} ({storage.device})" if storage.filesystem else "filesystem unknown")
    mean = storage.sample_bytes / storage.sample_files if storage.sample_files else 0
    return [
        ("storage", f"{storage.path} · {mount}"),
        ("files", f"{storage.sample_files:,} of the {storage.files_found:,} under it read at random, {size_text(storage.sample_bytes)} "
                  f"(mean {size_text(mean)} a file)"),
        ("page cache", cache_text(storage)),
    ]


def print_reads(console: Console, storage: Any) -> None:
    """``--storage``'s reads per level: files/s and MB/s, the median of a level's windows with its interval."""
    state = "cold" if storage.cold else "warm" if storage.droppable is False else "cold or warm: not known"
    piece = storage.piece_bytes
    what = f"whole files, those over {size_text(piece)} in pieces of it at random offsets" if piece else "whole files"
    reads = Table(title=f"  random reads of {what}, {state} (median ± its interval)", title_justify="left",
                  header_style="bold", pad_edge=False)
    for col in ("reads in flight", "reads/s" if piece else "files/s", "MB/s", "reads" if piece else "files read", "seconds"):
        reads.add_column(col, justify="right")
    for level in storage.levels:
        reads.add_row(str(level.in_flight), spread_text(level.files_per_s) if level.files else "-",
                      spread_text(level.mb_per_s) if level.files else "-", f"{level.files:,}", f"{level.seconds:.2f}")
    console.print(reads)
    if storage.note:
        console.print(Text(f"  {storage.note}", style="yellow"))


def print_doctor(console: Console, report: Any) -> None:
    """``loadtune doctor``: the machine (and the storage under ``--storage``), then each GPU with its link and
    measured copy rates."""
    m = report.machine
    quota = f", cgroup quota {m.cgroup_cpu_limit:g} CPUs" if m.cgroup_cpu_limit is not None else ""
    lines = [
        ("cores", f"{m.usable_cores} usable (affinity mask {report.affinity_cores}{quota}; {m.logical_cores} logical) · {m.cpu_model}"),
        ("RAM", f"{short_bytes(m.memory_total_bytes)} total, {short_bytes(m.memory_available_bytes)} available"),
        ("/dev/shm", f"{short_bytes(m.shm_total_bytes)} total, {short_bytes(report.shm_free_bytes)} free" if m.shm_total_bytes else "not available"),
        ("python", f"{m.python} · {m.platform}"),
        ("torch", f"{m.torch} · CUDA {m.cuda or 'none (CPU build)'}" + (f" · cuDNN {report.cudnn}" if report.cudnn else "")
         + (f" · driver supports CUDA {report.driver_cuda}" if report.driver_cuda else "")),
        ("start method", f"{m.start_method} (DataLoader workers start this way by default)"),
        ("NVML", "available" if report.nvml_note is None else f"unavailable ({report.nvml_note})"),
        *([("CPU pace", pace_text(report.cpu_pace))] if report.cpu_pace is not None else []),
        *(storage_lines(report.storage) if report.storage is not None else []),
    ]
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold", no_wrap=True)
    table.add_column()
    for name, value in lines:
        table.add_row(name, value)
    console.print(table)
    if report.storage is not None:
        print_reads(console, report.storage)
    if report.gpu_note:
        console.print(Text(report.gpu_note, style="yellow"))
        return
    for gpu in report.gpus:
        link = gpu.link
        head = Text.assemble((f"GPU {gpu.index}: {gpu.name}", "bold"), f" · {short_bytes(gpu.memory_bytes)}"
                             + (f" · driver {gpu.driver}" if gpu.driver else ""))
        console.print(head)
        if link is not None:
            console.print(f"  PCIe gen {link.gen_current or '?'} x{link.width_current or '?'} now (read after the copies), "
                          f"gen {link.gen_max or '?'} x{link.width_max or '?'} at most: "
                          f"{gbps(gpu.link_gbps_current)} GB/s now, {gbps(gpu.link_gbps_max)} GB/s at most, each way (theoretical)")
        else:
            console.print("  PCIe link: unknown (NVML unavailable)", style="dim")
        if gpu.copies:
            copies = Table(title="  measured copies, GB/s (median of repeats, CUDA events)", title_justify="left",
                           header_style="bold", pad_edge=False)
            copies.add_column("size", justify="right")
            for col in ("H2D pinned", "H2D pageable", "D2H pinned", "D2H pageable"):
                copies.add_column(col, justify="right")
            for size in dict.fromkeys(c.size_bytes for c in gpu.copies):
                by = {(c.direction, c.memory): c for c in gpu.copies if c.size_bytes == size}
                copies.add_row(f"{size / 2**20:g} MiB", *[
                    f"{by[k].gbps:.1f} ±{(by[k].high - by[k].low) / 2 / by[k].gbps:.0%}" if k in by and by[k].gbps else "-"
                    for k in (("h2d", "pinned"), ("h2d", "pageable"), ("d2h", "pinned"), ("d2h", "pageable"))])
            console.print(copies)
        if gpu.error:
            console.print(Text(f"  copies could not be measured: {gpu.error}", style="red"))



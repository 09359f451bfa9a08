"""Where the time goes: the stage table of a scan's profile, and the panel's lines on the bound it sets."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from loadtune.analysis import bound as bound_mod
from loadtune.analysis.bound import scan_bound
from loadtune.analysis.storage import bound_caveat
from loadtune.model.results import ScanResult
from loadtune.model.stages import StageCost
from loadtune.report.text import ms, rate


def cost_row(name: str, cost: StageCost | None, per_batch: float | None, note: str = "") -> list | None:
    """A stage's row: its cost per batch and spread; None for a stage this scan did not measure."""
    if cost is None or per_batch is None:
        return None
    spread = f"±{cost.rel_spread:.0%}" if cost.rel_spread < 0.995 else "noisy"
    return [name, ms(per_batch), spread, note]


def diagnosis_table(result: ScanResult) -> Table | None:
    """Where the time goes: each stage's cost per batch (measured alone), then the ceilings they set."""
    st, bound = result.stages, scan_bound(result)
    if st is None or bound is None:
        return None
    table = Table(title=f"Where the time goes (bs{st.batch_size}: per batch, each stage measured alone)", title_justify="left",
                  header_style="bold", pad_edge=False)
    table.add_column("stage", ratio=1, min_width=14)
    table.add_column("per batch", justify="right", no_wrap=True)
    table.add_column("±", justify="right", no_wrap=True)
    table.add_column("note", ratio=2)
    for row in stage_rows(st):
        if row is not None:
            table.add_row(*row)
    table.add_section()
    add_ceilings(table, bound)
    storage = " unless storage's cap, which binds both, is lower" if bound.counts_storage else ""
    table.caption = ("cap: samples/s that stage allows, ± from the costs' spread; ◀ the bound (the better of num_workers=0 "
                     f"and the lowest cap with up to {bound.max_workers} workers{storage})"
                     + ("; = ties with it within the spread" if bound.ties else ""))
    table.caption_justify = "left"
    return table


def stage_rows(st) -> list[list | None]:
    """One row per stage of the profile ``st`` (None where it was not measured), in the order a batch meets them."""
    c = bound_mod.BatchCosts.of(st)
    wait = c.fetch_wall - c.fetch_cpu
    return [
        cost_row(bound_mod.DATASET_CPU, st.fetch_cpu, c.fetch_cpu, f"{ms(st.fetch_cpu.mean)} CPU per sample, one thread"),
        cost_row(bound_mod.IO_WAIT, st.fetch_wall, wait, "dataset wall time less CPU (waiting, not computing)"),
        cost_row(bound_mod.STORAGE_READ, st.storage_read, st.storage_read.mean * st.batch_size if st.storage_read else None,
                 "dataset wall time, its files dropped from the page cache first"),
        cost_row(bound_mod.COLLATION, st.collate, c.collate, ""),
        cost_row(bound_mod.HANDOFF, st.handoff, c.handoff - c.collate + c.touch,
                 f"worker CPU to collate into shared memory and send{', first touch of its pages' if c.touch else ''}"),
        cost_row(bound_mod.MAIN, st.receive, c.receive, "main thread CPU to receive a batch"),
        cost_row(bound_mod.PIN, st.pin, c.pin, "pin thread"),
        cost_row(bound_mod.COPY, st.copy, c.copy,
                 f"{st.batch_bytes / (c.copy or 1) / 1e9:.1f} GB/s pinned" if c.copy else ""),
        cost_row(bound_mod.STEP, st.step or st.consumer, c.step if c.cuda else (c.consumer if st.consumer else None),
                 "the spec's step" + (" on the device" if c.cuda else "")),
    ]


def add_ceilings(table: Table, bound) -> None:
    """The caps the stages set, lowest first: ◀ marks the bound, = a cap tied with it."""
    for ceiling in sorted(bound.ceilings, key=lambda x: x.rate):
        mark = " ◀" if ceiling == bound.ceiling else (" =" if ceiling in bound.ties else "")
        finite = ceiling.rate != float("inf")
        table.add_row(Text(f"cap: {ceiling.name}{mark}", style="bold" if mark else ""),
                      f"{rate(ceiling.rate)}/s" if finite else "-",
                      f"±{ceiling.rel_halfwidth:.0%}" if finite and ceiling.rel_halfwidth else "",
                      f"{ceiling.stage}: {ceiling.detail}")


def bound_text(result: ScanResult) -> Text:
    """The panel's lines on the bound: how close the pick is, what limits it (and what ties with it),
    what would move it."""
    bound = scan_bound(result)
    out = Text()
    if bound is None:
        return out
    spread = (f" ({rate(bound.low)}–{rate(bound.high)} from the stage costs' spread)"
              if bound.low is not None and bound.high is not None and bound.high > bound.low else "")
    out.append(f"Bound: {rate(bound.rate)} samples/s{spread} at batch size {bound.batch_size}, set by ")
    out.append(bound.stage, style="bold")
    out.append(f" ({bound.ceiling.name}: {bound.ceiling.detail})")
    for tie in bound.ties:
        out.append("; ")
        out.append(tie.stage, style="bold")
        out.append(f" ({tie.name}: {rate(tie.rate)}/s) ties with it within that spread")
    out.append(pick_against_bound(result) + "\n")
    out.append(busy_text(result))
    caveat = bound_caveat(result)
    out.append(f"{caveat}.\n" if caveat else move_text(bound))  # the stages' advice misleads while readahead rules
    return out


def short_bound_text(result: ScanResult) -> str:
    """The bound in one line: its rate, the stage that sets it, and where the pick sits against it."""
    bound = scan_bound(result)
    if bound is None:
        return ""
    caveat = " Storage's bandwidth not counted: see the readahead note." if bound_caveat(result) else ""
    return f"Bound: {rate(bound.rate)} samples/s, set by {bound.stage}{pick_against_bound(result)}{caveat}\n"


def busy_text(result: ScanResult) -> str:
    """How many cores the pick kept busy while timed: how much of the machine the bound's rate costs."""
    rec = result.recommendation
    pick = result.config_result(rec.config) if rec else None
    if pick is None or pick.busy_cores is None:
        return ""
    return (f"While timed, this config kept {pick.busy_cores:.2f} of {result.machine.usable_cores} usable cores "
            "busy (its main process and workers).\n")


def move_text(bound) -> str:
    """What would move the bound: more workers for a loader waiting on I/O, else each bounding stage's advice."""
    out = ""
    if bound.workers_needed and bound.stage == bound_mod.IO_WAIT:
        out += (f"About {bound.workers_needed} workers would lift the workers' cap to the next one; "
                f"this scan tried up to {bound.max_workers}.\n")
    for stage in bound.stages:
        if bound_mod.ADVICE.get(stage):
            out += f"To move it: {bound_mod.ADVICE[stage]}.\n"
    return out


def pick_against_bound(result: ScanResult) -> str:
    """How the pick's long-run rate sits against the bound and its interval, as the end of a sentence."""
    where = bound_mod.pick_against_bound(result)
    fraction, interval = where.fraction, where.interval
    if where.verdict == "not compared":
        return "; the recommended batch size differs, so it is not compared."
    if where.verdict == "unknown":
        return "."
    if where.verdict == "over":
        return (f"; this config measured {fraction:.0%} of it, so the profile overstated a stage's cost and the bound "
                "is not a ceiling here.")
    if where.verdict == "within spread":
        return f"; this config is at the bound within its spread ({fraction:.0%} of it)."
    if where.verdict == "at":
        return "; this config is at the bound."
    within = f", {interval[0]:.0%}–{interval[1]:.0%} within its spread" if interval and interval[1] > interval[0] else ""
    return f"; this config reaches {fraction:.0%} of it{within}."

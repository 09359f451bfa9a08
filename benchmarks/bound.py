"""How close does the recommended config get to the computed bound, and is the limiting stage right?

For each dataset archetype in ``benchmarks/archetypes/`` it runs a default scan (the adaptive search,
loadtune's own worker range, extended while throughput rises; the stage profile on) with the timing
settings given, then reports:

- the bound (samples/s), its interval from the stage costs' spread, the stage that sets it and the
  stages whose caps tie with it;
- the recommended config's throughput as a fraction of the bound (target >= 0.90 on the CPU-bound and
  the two storage-latency-bound archetypes; the others are reported, not judged);
- whether the named limiting stage is one the archetype was built to have (and every tied one too),
  and whether the profile sees the dataset itself as built (computing, waiting, or moving bytes): past
  enough workers a waiting dataset's small CPU share can become the cap, as ``storage_latency``'s 4 ms
  waits do at 64 workers on 2 cores (``experiments/cpu-saturation/``); ``object_store``'s 20 ms waits do not.

    python benchmarks/bound.py --out benchmarks/results/bound.json.gz   # the scans: benchmarks/results/bound-scans/
    python benchmarks/bound.py --archetypes cpu_bound,storage_latency --warmup 0.3 --block-time 0.2 --out /tmp/b.json
    python benchmarks/bound.py --rescore --out benchmarks/results/bound.json.gz   # the saved scans, judged by this checkout

Every figure, and each scan's full result (stages included), goes to the JSON file given by ``--out``,
rewritten after each archetype. Run it on an otherwise idle machine: the trials' throughput competes
with anything else for the cores, while the bound comes from CPU time and waits measured alone.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import loadtune
from loadtune.analysis.bound import COLLATION, DATASET_CPU, HANDOFF, IO_WAIT, MAIN, STEP, pick_fraction, pick_rate
from loadtune.model.results import ScanResult
from loadtune.model.scanfile import check_writable
from loadtune.analysis.bound import scan_bound

from meta import run_meta
from saved import read_json, stem, write_json

HERE = Path(__file__).resolve().parent
ARCHETYPES = ["cpu_bound", "storage_latency", "object_store", "large_tensors", "tiny_dataset", "heavy_tail", "iterable"]
SPECS = {"object_store": "storage_latency.py:object_store"}  # an archetype that is another factory of a file
# the stage each archetype was built to be bound by (any of these counts as right)
EXPECTED = {
    "cpu_bound": {DATASET_CPU},
    # 4 ms waits: linear in the workers up to 32, but at the 64 workers the search reaches on 2 cores the CPU is
    # 86% busy and throughput 77% of linear (benchmarks/experiments/cpu-saturation/): the waits and the CPU limit together,
    # and which cap is lower depends on the cores. object_store's 20 ms waits stay the bound on any machine.
    "storage_latency": {IO_WAIT, DATASET_CPU},
    "object_store": {IO_WAIT},
    "large_tensors": {COLLATION, HANDOFF, MAIN, STEP},  # moving bytes: collating, handing over, first touch
    "tiny_dataset": {DATASET_CPU},
    "heavy_tail": {DATASET_CPU},
    "iterable": {DATASET_CPU},
}
# what the profile must see in the dataset itself, whatever caps throughput at the top of the worker range
# (past enough workers a waiting dataset's own CPU share can become the cap, as storage_latency's docstring says)
BUILT_AS = {
    "cpu_bound": "computing", "storage_latency": "waiting", "object_store": "waiting", "large_tensors": "moving bytes",
    "tiny_dataset": "computing", "heavy_tail": "computing", "iterable": "computing",
}
JUDGED = {"cpu_bound", "storage_latency", "object_store"}  # the >= 90% target applies to these
TARGET = 0.90


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def character(stages) -> str | None:
    """What the dataset's own time is, per the profile: waiting, computing, or moving bytes."""
    if stages is None:
        return None
    b = stages.batch_size
    cpu, wall = b * stages.fetch_cpu.mean, b * stages.fetch_wall.mean
    moving = stages.collate.mean + (stages.handoff.mean if stages.handoff else 0.0)
    if moving > wall:
        return "moving bytes"
    return "waiting" if wall - cpu > cpu else "computing"


def run_archetype(name: str, args: argparse.Namespace, folder: Path, before: dict | None = None) -> dict:
    """Scan the archetype, or with ``--rescore`` read its saved scan back (``before``: its earlier
    record, whose wall time and load averages are kept), and judge the bound."""
    spec = str(HERE / "archetypes" / SPECS.get(name, f"{name}.py"))
    started = time.monotonic()
    load_start = load_average()
    json_path = folder / f"bound-{name}.json"
    if args.rescore:
        result = ScanResult.load(json_path)
    else:
        result = loadtune.scan(spec, json_path=json_path, warmup=args.warmup, block_time=args.block_time,
                               blocks=args.blocks, timeout=args.timeout, seed=args.seed)
    bound = scan_bound(result)
    rec = result.recommendation
    pick = result.config_result(rec.config) if rec else None
    fraction = pick_fraction(result)
    interval = bound.fraction_interval(pick_rate(result)) if bound and pick_rate(result) else None
    record = {
        "archetype": name,
        "wall_s": time.monotonic() - started,
        "load_average_start": load_start,
        "load_average_end": load_average(),
        "pick": rec.config.label() if rec else None,
        "pick_rate": pick.estimate.median if pick and pick.ok else None,
        "pick_rel_spread": pick.estimate.rel_spread if pick and pick.ok else None,
        "bound": bound.rate if bound else None,
        "bound_low": bound.low if bound else None,
        "bound_high": bound.high if bound else None,
        "bound_ceiling": bound.ceiling.name if bound else None,
        "bound_detail": bound.ceiling.detail if bound else None,
        "limiting_stage": bound.stage if bound else None,
        "expected_stages": sorted(EXPECTED[name]),
        "tied_stages": bound.stages[1:] if bound else [],
        "stage_right": (bound.stage in EXPECTED[name]) if bound else None,
        # every stage named (the limiting one and those tied with it) is one the archetype was built to have
        "named_right": set(bound.stages) <= EXPECTED[name] if bound else None,
        "dataset_character": character(result.stages),
        "built_as": BUILT_AS[name],
        "character_right": character(result.stages) == BUILT_AS[name] if result.stages else None,
        "fraction": fraction,
        "fraction_interval": list(interval) if interval else None,  # against the bound's high and low ends
        "judged": name in JUDGED,
        "meets_target": (fraction >= TARGET) if fraction is not None and name in JUDGED else None,
        "ceilings": [{"name": c.name, "rate": c.rate, "low": c.low, "high": c.high, "stage": c.stage, "detail": c.detail}
                     for c in bound.ceilings] if bound else [],
        "workers_measured": sorted({c.config.num_workers for c in result.configs}),
        "result": json.loads(json_path.read_text()),
    }
    if args.rescore and before is not None:
        record.update({k: before[k] for k in ("wall_s", "load_average_start", "load_average_end") if k in before})
    return record


def fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_row(r: dict) -> None:
    verdict = {True: "ok", False: "MISS", None: "n/a"}
    print(f"  {r['archetype']:16s} pick {r['pick'] or '-':22s} {fmt(r['pick_rate'], ',.0f'):>9s}/s  "
          f"bound {fmt(r['bound'], ',.0f'):>9s}/s ({r['bound_ceiling']}; {fmt(r['bound_low'], ',.0f')}-"
          f"{fmt(r['bound_high'], ',.0f')})  fraction {fmt(r['fraction'], '.2f'):>5s} "
          f"[{verdict[r['meets_target']]}]  stage: {r['limiting_stage']} [{verdict[r['stage_right']]}]"
          f"{' tied: ' + ', '.join(r['tied_stages']) if r['tied_stages'] else ''} [{verdict[r['named_right']]}]  "
          f"dataset: {r['dataset_character']} [{verdict[r['character_right']]}]  "
          f"({r['wall_s']:.0f} s, load {r['load_average_start']} -> {r['load_average_end']})", flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="JSON file for every figure (rewritten after each archetype)")
    p.add_argument("--archetypes", help=f"comma-separated subset of: {', '.join(ARCHETYPES)}")
    p.add_argument("--warmup", type=float, default=1.0, help="per trial, seconds (default: loadtune's 1.0)")
    p.add_argument("--block-time", type=float, default=0.5, help="per timed block, seconds (default: loadtune's 0.5)")
    p.add_argument("--blocks", type=int, default=10, help="timed blocks per trial, at most (default: loadtune's 10)")
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rescore", action="store_true",
                   help="measure nothing: judge the scans saved beside --out again with this checkout's bound "
                        "(a pure function of a saved scan)")
    args = p.parse_args(argv)
    names = [n.strip() for n in args.archetypes.split(",")] if args.archetypes else ARCHETYPES
    unknown = [n for n in names if n not in ARCHETYPES]
    if unknown:
        p.error(f"unknown archetype(s) {', '.join(unknown)}; choose from {', '.join(ARCHETYPES)}")
    args.names = names
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    check_writable(out)
    folder = out.parent / (stem(out) + "-scans")
    folder.mkdir(exist_ok=True)
    print(f"bound benchmark: {', '.join(args.names)}; warmup {args.warmup:g} s, blocks up to {args.blocks} x "
          f"{args.block_time:g} s; load average {load_average()}", flush=True)
    document = {
        "benchmark": "bound",
        "meta": run_meta(argv),
        "target_fraction": TARGET,
        "archetypes": [],
    }
    earlier = {}
    if args.rescore and out.exists():
        previous = read_json(out)
        earlier = {r["archetype"]: r for r in previous.get("archetypes", [])}
        document["measured"] = previous.get("meta", {}).get("date", previous.get("created"))  # older files: "created"
    for name in args.names:
        record = run_archetype(name, args, folder, earlier.get(name))
        document["archetypes"].append(record)
        print_row(record)
        write_json(out, document, default=str)
    judged = [r for r in document["archetypes"] if r["judged"] and r["fraction"] is not None]
    right = [r for r in document["archetypes"] if r["stage_right"]]
    named = [r for r in document["archetypes"] if r["named_right"]]
    built = [r for r in document["archetypes"] if r["character_right"]]
    print(f"\n  fraction of the bound: target >= {TARGET:.2f} met on {sum(1 for r in judged if r['meets_target'])}/{len(judged)} "
          f"judged archetypes; limiting stage as built: {len(right)}/{len(document['archetypes'])} "
          f"(with its ties: {len(named)}/{len(document['archetypes'])}); "
          f"dataset seen as built: {len(built)}/{len(document['archetypes'])}")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

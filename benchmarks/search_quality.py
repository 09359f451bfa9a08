"""How good is the default (adaptive) search? A benchmark against the exhaustive grid.

For each dataset archetype in ``benchmarks/archetypes/`` it runs, in one process and one session:

a. the exhaustive grid (``search="grid"``, no confirmation round, ``--workers`` x ``--prefetch`` x
   persistent on/off, x batch sizes with ``--batch-scale``, x in_order with ``--allow-reorder``: a grid
   of realistic size) and the default adaptive search, with the same short timing settings, and
   times each ``loadtune.scan`` call. The adaptive search runs as ``loadtune scan`` does without
   ``--workers``: loadtune's own worker range for the usable cores, extended past it while throughput
   still rises (an explicit list would be taken as the exact range; ``--adaptive-workers grid`` does
   that instead);
b. a side-by-side re-measurement of the grid's fastest config, the grid's recommendation and the
   adaptive search's recommendation, in the same trial machinery (``loadtune.engine.trial.harness.run_trial``),
   interleaved over several repeats in a shuffled order, each run with the scans' warm-up and block
   time and exactly ``--blocks`` blocks (pooled per config, so every repeat weighs the same): the
   adaptive pick's throughput relative to the grid's best (target >= 0.95), and the adaptive scan's
   wall time relative to the grid's (target <= 0.25);
c. accuracy: the adaptive pick's estimate from its scan against a run of the same config with 10x
   the timed blocks (target: relative error within +-5%);
d. reproducibility: a second adaptive scan with another seed; both picks' long-run throughputs
   (target: within 5% of each other).

It prints a table per archetype and an overall one, and writes every figure (and every scan's full
result, raw blocks included) to the JSON file given by ``--out``, rewritten after each archetype.

    python benchmarks/search_quality.py --out benchmarks/results/search_quality.json.gz
    python benchmarks/search_quality.py --quick --out /tmp/sq.json
    python benchmarks/search_quality.py --archetypes cpu_bound,iterable --out /tmp/sq.json

The figures are throughputs on this machine: run it on an otherwise idle machine, as the trials
compete with anything else for the cores. The load average at the start and the end of each
archetype is recorded so that a noisy run can be recognised.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import sys
import time
from pathlib import Path

import loadtune
from loadtune.engine.trial.setup import LoaderOptions, Timing
from loadtune.model.config import TrialConfig
from loadtune.model.results import ScanResult
from loadtune.model.scanfile import check_writable
from loadtune.model.trial import Trial
from loadtune.engine.trial.harness import run_trial
from loadtune.engine.trial.protocol import TrialRequest
from loadtune.engine.plan import DEFAULT_BATCH_SIZE, prepare
from loadtune.engine.spec import SpecRef
from loadtune.model.estimate import estimate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from meta import run_meta
from saved import write_json

HERE = Path(__file__).resolve().parent
ARCHETYPE_DIR = HERE / "archetypes"
ARCHETYPES = ["cpu_bound", "storage_latency", "large_tensors", "tiny_dataset", "heavy_tail", "iterable"]
QUICK_ARCHETYPES = ["storage_latency", "tiny_dataset"]

# Targets (from the issue): adaptive pick vs grid best, adaptive wall vs grid wall, estimate vs long run,
# and the two default scans' picks vs each other.
TARGET_PICK_RATIO = 0.95
TARGET_WALL_RATIO = 0.25
TARGET_ACCURACY = 0.05
TARGET_REPRO = 0.05


def spec_batch_size(spec: str) -> int:
    """The archetype's own batch size (its ``loadtune = {"batch_size": ...}``)."""
    return (prepare(spec).options.batch_size or [DEFAULT_BATCH_SIZE])[0]


def scan_settings(args: argparse.Namespace, spec: str) -> dict:
    """The short timing settings shared by every scan of the benchmark, and the grid's knobs."""
    settings = {
        "workers": args.workers,
        "prefetch": args.prefetch,
        "persistent": None,  # search both
        "warmup": args.warmup,
        "block_time": args.block_time,
        "blocks": args.blocks,
        "min_blocks": args.min_blocks,
        "timeout": args.timeout,
        "target_spread": args.target_spread,
        "allow_reorder": args.allow_reorder,
    }
    if args.batch_scale != [1]:
        base = spec_batch_size(spec)
        settings["batch_size"] = [base * k for k in args.batch_scale]
    return settings


def config_dict(config: TrialConfig | None) -> dict | None:
    return config.to_dict() if config is not None else None


def label(config: TrialConfig | None) -> str:
    return config.label() if config is not None else "-"


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def slim(result: ScanResult) -> dict:
    """The scan's full record, minus the memory sampling time series (large, not needed here)."""
    data = result.to_dict()
    for trial in data["trials"]:
        if trial.get("memory"):
            trial["memory"].pop("samples", None)
    return data


def run_scan(spec: str, search: str, settings: dict, seed: int, confirm: int | None) -> tuple[ScanResult, float]:
    """One ``loadtune.scan`` call, timed from the outside."""
    options = dict(settings, search=search, seed=seed)
    if confirm is not None:
        options["confirm"] = confirm
    started = time.monotonic()
    result = loadtune.scan(spec, **options)
    return result, time.monotonic() - started


def pooled(trials: list[Trial]) -> dict | None:
    """Median samples/s over the timed blocks of several runs of one config, with its interval."""
    rates = [b.rate for t in trials if t.ok for b in t.blocks]
    if not rates:
        return None
    est = estimate(rates)
    return {"median": est.median, "low": est.low, "high": est.high, "rel_spread": est.rel_spread, "blocks": est.n}


def trial_summary(trial: Trial) -> dict:
    est = trial.estimate
    return {
        "config": label(trial.config),
        "round": trial.round,
        "status": trial.status,
        "samples_per_s": est.median if est else None,
        "rel_spread": est.rel_spread if est else None,
        "blocks": len(trial.blocks),
        "epochs_in_blocks": sum(b.epochs for b in trial.blocks),
        "startup_s": trial.startup_s,
        "wall_s": trial.wall_s,
        "error": trial.error.message if trial.error else None,
    }


def scan_summary(result: ScanResult, wall: float, seed: int) -> dict:
    rec = result.recommendation
    pick = result.config_result(rec.config) if rec else None
    best = result.config_result(rec.best) if rec else None
    return {
        "seed": seed,
        "wall_s": wall,
        "trials": len(result.trials),
        "configs": len(result.configs),
        "trial_wall_s": sum(t.wall_s for t in result.trials),
        "pick": config_dict(rec.config) if rec else None,
        "pick_label": label(rec.config) if rec else None,
        "pick_estimate": pick.estimate.median if pick and pick.ok else None,
        "best": config_dict(rec.best) if rec else None,
        "best_label": label(rec.best) if rec else None,
        "best_estimate": best.estimate.median if best and best.ok else None,
        "tied": [label(c) for c in rec.tied] if rec else [],
        "workers_measured": sorted({c.config.num_workers for c in result.configs}),
        "skipped": [f"{s.what}: {s.why}" for s in result.skipped],
        "trial_log": [trial_summary(t) for t in result.trials],
    }


class Remeasure:
    """Trials of chosen configs outside any scan, in the scans' own trial machinery and settings."""

    def __init__(self, spec: str, args: argparse.Namespace):
        plan = prepare(spec, **scan_settings(args, spec))  # the device, start method and loader options a scan would use
        self.source = SpecRef.parse(spec)
        self.device = plan.device
        self.start_method = plan.machine.start_method
        self.options = LoaderOptions(shuffle=plan.options.shuffle, drop_last=plan.options.drop_last, seed=args.seed)
        self.args = args

    def timing(self, factor: int = 1) -> tuple[Timing, float]:
        """The scans' warm-up and block time with a fixed count of ``factor`` x ``--blocks`` blocks: no
        early stop at the target spread, so that every run weighs the same when blocks are pooled
        (an early-stopped clean run would otherwise count half as much as a noisy one that ran on)."""
        a = self.args
        blocks = a.blocks * factor
        timeout = a.timeout if factor == 1 else max(a.timeout, 4 * (a.warmup + blocks * a.block_time) + 30)
        timing = Timing(warmup_s=a.warmup, block_s=a.block_time, blocks=blocks, max_s=timeout * 0.8,
                        min_blocks=blocks, target_spread=0.0)
        return timing, timeout

    def run(self, config: TrialConfig, factor: int = 1) -> Trial:
        timing, timeout = self.timing(factor)
        request = TrialRequest(config, self.device, timing, self.options, timeout, self.start_method)
        return run_trial(self.source, request)


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def side_by_side(remeasure: Remeasure, roles: dict[str, TrialConfig], repeats: int, seed: int) -> dict:
    """Each distinct config once per repeat, in a shuffled order per repeat; blocks pooled per config."""
    distinct = list(dict.fromkeys(roles.values()))
    runs: dict[TrialConfig, list[Trial]] = {c: [] for c in distinct}
    order_log = []
    for r in range(repeats):
        order = list(distinct)
        random.Random(seed * 1000 + r).shuffle(order)
        order_log.append([label(c) for c in order])
        for config in order:
            runs[config].append(remeasure.run(config))
    per_config = {
        label(c): {
            "config": config_dict(c),
            "pooled": pooled(trials),
            "runs": [trial_summary(t) for t in trials],
        }
        for c, trials in runs.items()
    }
    roles_out = {role: label(c) for role, c in roles.items()}

    def median_of(role: str) -> float | None:
        p = per_config[label(roles[role])]["pooled"]
        return p["median"] if p else None

    def per_repeat(role: str, against: str) -> list[float | None]:
        a, b = runs[roles[role]], runs[roles[against]]
        return [ratio(x.estimate.median if x.ok else None, y.estimate.median if y.ok else None) for x, y in zip(a, b)]

    return {
        "roles": roles_out,
        "order": order_log,
        "configs": per_config,
        "pick_vs_grid_best": ratio(median_of("adaptive_pick"), median_of("grid_best")),
        "pick_vs_grid_pick": ratio(median_of("adaptive_pick"), median_of("grid_pick")),
        "pick_vs_grid_best_per_repeat": per_repeat("adaptive_pick", "grid_best"),
        "wall_s": sum(t.wall_s for trials in runs.values() for t in trials),
    }


def long_runs(remeasure: Remeasure, configs: list[TrialConfig], factor: int) -> dict[TrialConfig, dict]:
    """One run of each distinct config with ``factor`` x the blocks, in the order given."""
    out = {}
    for config in dict.fromkeys(configs):
        trial = remeasure.run(config, factor)
        out[config] = {"config": label(config), "run": trial_summary(trial), "pooled": pooled([trial])}
    return out


def rel_error(estimate_: float | None, truth: float | None) -> float | None:
    return (estimate_ - truth) / truth if estimate_ is not None and truth else None


def warm_up(name: str, args: argparse.Namespace) -> float:
    """One untimed short trial before any scan: it starts the trial fork server (which imports torch,
    seconds) so that this one-off cost does not land in the first scan's wall time."""
    started = time.monotonic()
    remeasure = Remeasure(str(ARCHETYPE_DIR / f"{name}.py"), args)
    remeasure.run(TrialConfig(1, 0), factor=1)
    return time.monotonic() - started


def run_archetype(name: str, args: argparse.Namespace) -> dict:
    spec = str(ARCHETYPE_DIR / f"{name}.py")
    settings = scan_settings(args, spec)
    record: dict = {"archetype": name, "spec": spec, "scan_settings": settings, "load_average_start": load_average()}
    started = time.monotonic()

    print(f"\n== {name} ==", flush=True)
    adaptive_settings = dict(settings)
    if args.adaptive_workers == "default":
        adaptive_settings.pop("workers")  # loadtune's own range, extended while throughput rises
    grid, grid_wall = run_scan(spec, "grid", settings, args.seed, confirm=0)
    print(f"  grid      : {len(grid.trials):2d} trials, {grid_wall:6.1f} s", flush=True)
    adaptive, adaptive_wall = run_scan(spec, "adaptive", adaptive_settings, args.seed, confirm=None)
    print(f"  adaptive  : {len(adaptive.trials):2d} trials, {adaptive_wall:6.1f} s", flush=True)
    second, second_wall = run_scan(spec, "adaptive", adaptive_settings, args.seed + 1, confirm=None)
    print(f"  adaptive#2: {len(second.trials):2d} trials, {second_wall:6.1f} s (seed {args.seed + 1})", flush=True)
    record["scans"] = {
        "grid": scan_summary(grid, grid_wall, args.seed),
        "adaptive": scan_summary(adaptive, adaptive_wall, args.seed),
        "adaptive_2": scan_summary(second, second_wall, args.seed + 1),
    }
    record["wall_ratio"] = ratio(adaptive_wall, grid_wall)
    record["wall_ratio_2"] = ratio(second_wall, grid_wall)
    if not (grid.recommendation and adaptive.recommendation and second.recommendation):
        record["error"] = "a scan made no recommendation (every trial failed?)"
        record["full_results"] = {"grid": slim(grid), "adaptive": slim(adaptive), "adaptive_2": slim(second)}
        return record

    remeasure = Remeasure(spec, args)
    roles = {
        "grid_best": grid.recommendation.best,
        "grid_pick": grid.recommendation.config,
        "adaptive_pick": adaptive.recommendation.config,
    }
    print(f"  side by side x{args.repeats}: {', '.join(dict.fromkeys(label(c) for c in roles.values()))}", flush=True)
    record["side_by_side"] = side_by_side(remeasure, roles, args.repeats, args.seed)

    picks = [adaptive.recommendation.config, second.recommendation.config]
    print(f"  long runs ({args.long_factor}x blocks): {', '.join(dict.fromkeys(label(c) for c in picks))}", flush=True)
    longs = long_runs(remeasure, picks, args.long_factor)
    long_1 = longs[picks[0]]["pooled"]["median"] if longs[picks[0]]["pooled"] else None
    long_2 = longs[picks[1]]["pooled"]["median"] if longs[picks[1]]["pooled"] else None
    est_1 = record["scans"]["adaptive"]["pick_estimate"]
    est_2 = record["scans"]["adaptive_2"]["pick_estimate"]
    record["long_runs"] = [v for v in longs.values()]
    record["accuracy"] = {
        "pick": label(picks[0]),
        "scan_estimate": est_1,
        "long_run": long_1,
        "rel_error": rel_error(est_1, long_1),
        "pick_2": label(picks[1]),
        "scan_estimate_2": est_2,
        "long_run_2": long_2,
        "rel_error_2": rel_error(est_2, long_2),
    }
    same = picks[0] == picks[1]
    record["reproducibility"] = {
        "pick_1": label(picks[0]),
        "pick_2": label(picks[1]),
        "same_config": same,
        "long_run_1": long_1,
        "long_run_2": long_2,
        # one long run serves both picks when they are the same config: the difference is then 0 by construction
        "rel_diff": abs(long_1 - long_2) / max(long_1, long_2) if long_1 and long_2 else None,
    }
    record["wall_s"] = time.monotonic() - started
    record["load_average_end"] = load_average()
    record["full_results"] = {"grid": slim(grid), "adaptive": slim(adaptive), "adaptive_2": slim(second)}
    return record


def verdicts(record: dict) -> dict:
    sbs = record.get("side_by_side") or {}
    acc = record.get("accuracy") or {}
    rep = record.get("reproducibility") or {}

    def check(value, ok):
        return None if value is None else bool(ok(value))

    return {
        "pick_ratio": check(sbs.get("pick_vs_grid_best"), lambda v: v >= TARGET_PICK_RATIO),
        "wall_ratio": check(record.get("wall_ratio"), lambda v: v <= TARGET_WALL_RATIO),
        "accuracy": check(acc.get("rel_error"), lambda v: abs(v) <= TARGET_ACCURACY),
        "reproducibility": check(rep.get("rel_diff"), lambda v: v <= TARGET_REPRO),
    }


def fmt(value, spec: str = ".2f", none: str = "-") -> str:
    return none if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def mark(ok: bool | None) -> str:
    return "n/a" if ok is None else ("ok" if ok else "MISS")


def print_table(rows: list[list[str]], header: list[str], indent: str = "  ") -> None:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = lambda r: indent + "  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(r, widths)))  # noqa: E731
    print(line(header))
    print(indent + "  ".join("-" * w for w in widths))
    for r in rows:
        print(line(r))


def print_archetype(record: dict) -> None:
    name = record["archetype"]
    print(f"\n-- {name}: results (load average {record.get('load_average_start')} -> {record.get('load_average_end')}) --")
    if record.get("error"):
        print(f"  ERROR: {record['error']}")
        return
    rows = []
    for key, title in (("grid", "grid (confirm=0)"), ("adaptive", "adaptive"), ("adaptive_2", "adaptive, 2nd seed")):
        s = record["scans"][key]
        rows.append([title, s["trials"], fmt(s["wall_s"], ".1f"), s["pick_label"], fmt(s["pick_estimate"], ".0f"),
                     s["best_label"], fmt(s["best_estimate"], ".0f")])
    print_table(rows, ["scan", "trials", "wall s", "pick", "pick/s", "fastest", "fastest/s"])
    adaptive_log = record["scans"]["adaptive"]["trial_log"]
    print(f"  adaptive trials (workers {record['scans']['adaptive']['workers_measured']}): " + "; ".join(
        f"{t['config']}{' r' + str(t['round']) if t['round'] else ''} {fmt(t['samples_per_s'], '.0f', 'failed')}" for t in adaptive_log))
    sbs = record["side_by_side"]
    roles_by_label: dict[str, list[str]] = {}
    for role, lab in sbs["roles"].items():
        roles_by_label.setdefault(lab, []).append(role)
    rows = []
    for lab, data in sbs["configs"].items():
        p = data["pooled"]
        per_run = ", ".join(fmt(r["samples_per_s"], ".0f", "failed") for r in data["runs"])
        rows.append([lab, "+".join(roles_by_label.get(lab, [])), fmt(p["median"] if p else None, ".0f"),
                     fmt(p["rel_spread"] * 100 if p else None, ".1f"), per_run])
    print(f"  side by side ({len(sbs['order'])} interleaved repeats):")
    print_table(rows, ["config", "role", "samples/s", "+-%", "per repeat"], indent="    ")
    acc, rep, v = record["accuracy"], record["reproducibility"], record["verdicts"]
    print(f"  adaptive pick / grid best : {fmt(sbs['pick_vs_grid_best'], '.3f')}  (target >= {TARGET_PICK_RATIO})  {mark(v['pick_ratio'])}"
          f"   [per repeat: {', '.join(fmt(x, '.3f') for x in sbs['pick_vs_grid_best_per_repeat'])}]")
    print(f"  adaptive wall / grid wall : {fmt(record['wall_ratio'], '.3f')}  (target <= {TARGET_WALL_RATIO})  {mark(v['wall_ratio'])}"
          f"   [2nd seed: {fmt(record['wall_ratio_2'], '.3f')}]")
    print(f"  accuracy ({acc['pick']})   : scan {fmt(acc['scan_estimate'], '.0f')} vs long run {fmt(acc['long_run'], '.0f')} = "
          f"{fmt(acc['rel_error'] * 100 if acc['rel_error'] is not None else None, '+.1f')}%  (target +-{TARGET_ACCURACY * 100:.0f}%)  "
          f"{mark(v['accuracy'])}   [2nd pick {acc['pick_2']}: "
          f"{fmt(acc['rel_error_2'] * 100 if acc['rel_error_2'] is not None else None, '+.1f')}%]")
    print(f"  reproducibility           : {rep['pick_1']} {fmt(rep['long_run_1'], '.0f')} vs {rep['pick_2']} {fmt(rep['long_run_2'], '.0f')}"
          f" = {fmt(rep['rel_diff'] * 100 if rep['rel_diff'] is not None else None, '.1f')}%"
          f"{' (same config)' if rep['same_config'] else ''}  (target <= {TARGET_REPRO * 100:.0f}%)  {mark(v['reproducibility'])}")
    print(f"  archetype wall time: {record['wall_s']:.0f} s", flush=True)


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v is not None and v > 0]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def overall(records: list[dict]) -> dict:
    ok = [r for r in records if not r.get("error")]
    acc = [abs(r["accuracy"]["rel_error"]) for r in ok if r["accuracy"]["rel_error"] is not None]
    rep = [r["reproducibility"]["rel_diff"] for r in ok if r["reproducibility"]["rel_diff"] is not None]
    grid_wall = sum(r["scans"]["grid"]["wall_s"] for r in records)
    adaptive_wall = sum(r["scans"]["adaptive"]["wall_s"] for r in records)
    met = {k: sum(1 for r in ok if r["verdicts"][k]) for k in ("pick_ratio", "wall_ratio", "accuracy", "reproducibility")}
    return {
        "archetypes": len(records),
        "failed": [r["archetype"] for r in records if r.get("error")],
        "pick_ratio_geomean": geomean([r["side_by_side"]["pick_vs_grid_best"] for r in ok]),
        "pick_ratio_min": min((r["side_by_side"]["pick_vs_grid_best"] for r in ok
                               if r["side_by_side"]["pick_vs_grid_best"] is not None), default=None),
        "wall_ratio_total": ratio(adaptive_wall, grid_wall),
        "wall_ratio_max": max((r["wall_ratio"] for r in records if r["wall_ratio"] is not None), default=None),
        "accuracy_abs_max": max(acc, default=None),
        "accuracy_abs_median": statistics.median(acc) if acc else None,
        "reproducibility_max": max(rep, default=None),
        "targets_met": met,
        "targets_total": len(ok),
    }


def print_overall(records: list[dict], summary: dict, wall: float) -> None:
    print("\n== overall ==")
    rows = []
    for r in records:
        if r.get("error"):
            rows.append([r["archetype"], "error", "", "", "", "", "", ""])
            continue
        v = r["verdicts"]
        rows.append([
            r["archetype"],
            f"{fmt(r['scans']['grid']['wall_s'], '.0f')}/{fmt(r['scans']['adaptive']['wall_s'], '.0f')}",
            f"{r['scans']['grid']['trials']}/{r['scans']['adaptive']['trials']}",
            f"{fmt(r['side_by_side']['pick_vs_grid_best'], '.3f')} {mark(v['pick_ratio'])}",
            f"{fmt(r['wall_ratio'], '.2f')} {mark(v['wall_ratio'])}",
            f"{fmt(r['accuracy']['rel_error'] * 100 if r['accuracy']['rel_error'] is not None else None, '+.1f')}% {mark(v['accuracy'])}",
            f"{fmt(r['reproducibility']['rel_diff'] * 100 if r['reproducibility']['rel_diff'] is not None else None, '.1f')}% "
            f"{mark(v['reproducibility'])}",
            f"{r['scans']['grid']['pick_label']} | {r['scans']['adaptive']['pick_label']} | {r['scans']['adaptive_2']['pick_label']}",
        ])
    print_table(rows, ["archetype", "wall s g/a", "trials g/a", "pick/best", "wall ratio", "accuracy", "repro",
                       "picks: grid | adaptive | adaptive#2"])
    n = summary["targets_total"]
    met = summary["targets_met"]
    print(f"  pick/best: geomean {fmt(summary['pick_ratio_geomean'], '.3f')}, min {fmt(summary['pick_ratio_min'], '.3f')} "
          f"(target >= {TARGET_PICK_RATIO}; met {met['pick_ratio']}/{n})")
    print(f"  wall ratio: all archetypes {fmt(summary['wall_ratio_total'], '.3f')}, worst {fmt(summary['wall_ratio_max'], '.3f')} "
          f"(target <= {TARGET_WALL_RATIO}; met {met['wall_ratio']}/{n})")
    print(f"  accuracy: |error| median {fmt(summary['accuracy_abs_median'] * 100 if summary['accuracy_abs_median'] is not None else None, '.1f')}%, "
          f"worst {fmt(summary['accuracy_abs_max'] * 100 if summary['accuracy_abs_max'] is not None else None, '.1f')}% "
          f"(target +-{TARGET_ACCURACY * 100:.0f}%; met {met['accuracy']}/{n})")
    print(f"  reproducibility: worst {fmt(summary['reproducibility_max'] * 100 if summary['reproducibility_max'] is not None else None, '.1f')}% "
          f"(target <= {TARGET_REPRO * 100:.0f}%; met {met['reproducibility']}/{n})")
    if summary["failed"]:
        print(f"  failed: {', '.join(summary['failed'])}")
    print(f"  total wall time: {wall:.0f} s", flush=True)


def int_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="JSON file for every figure (rewritten after each archetype)")
    p.add_argument("--quick", action="store_true", help=f"smoke run: {', '.join(QUICK_ARCHETYPES)} only, 2 repeats")
    p.add_argument("--archetypes", help=f"comma-separated subset of: {', '.join(ARCHETYPES)}")
    p.add_argument("--repeats", type=int, help="interleaved side-by-side repeats (default 4; 2 with --quick)")
    p.add_argument("--long-factor", type=int, default=10, help="blocks of the accuracy runs, as a multiple of --blocks (default 10)")
    p.add_argument("--workers", type=int_list, default=[0, 1, 2, 4, 8], help="grid of num_workers (default 0,1,2,4,8)")
    p.add_argument("--adaptive-workers", choices=["default", "grid"], default="default",
                   help="the adaptive scans' num_workers: 'default' passes none, as `loadtune scan` without --workers "
                   "(loadtune's range from the cores, extended past it while throughput rises); 'grid': the grid's list, "
                   "which loadtune takes as the exact range (no extension)")
    p.add_argument("--prefetch", type=int_list, default=[2, 4], help="grid of prefetch_factor (default 2,4)")
    p.add_argument("--batch-scale", type=int_list, default=[1],
                   help="batch sizes searched, as multiples of each archetype's own (default 1: its own only)")
    p.add_argument("--allow-reorder", action="store_true", help="search in_order=False too (both scans)")
    p.add_argument("--warmup", type=float, default=0.3)
    p.add_argument("--block-time", type=float, default=0.2)
    p.add_argument("--blocks", type=int, default=6)
    p.add_argument("--min-blocks", type=int, default=3)
    p.add_argument("--target-spread", type=float, default=0.03)
    p.add_argument("--timeout", type=float, default=60.0, help="per trial, seconds")
    p.add_argument("--seed", type=int, default=0, help="seed of the grid and first adaptive scan; the second uses seed+1")
    args = p.parse_args(argv)
    if args.archetypes:
        names = [n.strip() for n in args.archetypes.split(",") if n.strip()]
        unknown = [n for n in names if n not in ARCHETYPES]
        if unknown:
            p.error(f"unknown archetype(s) {', '.join(unknown)}; choose from {', '.join(ARCHETYPES)}")
        args.names = names
    else:
        args.names = QUICK_ARCHETYPES if args.quick else ARCHETYPES
    if args.repeats is None:
        args.repeats = 2 if args.quick else 4
    if args.repeats < 1 or args.long_factor < 1:
        p.error("--repeats and --long-factor must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    check_writable(out)  # fail now, not after the whole run
    started = time.monotonic()
    print(f"search quality: {', '.join(args.names)}; grid workers {args.workers} x prefetch {args.prefetch} x persistent "
          f"on/off x batch scale {args.batch_scale}{' x in_order' if args.allow_reorder else ''}; "
          f"adaptive workers: {args.adaptive_workers}; warmup {args.warmup:g} s, blocks {args.min_blocks}-{args.blocks} "
          f"x {args.block_time:g} s; {args.repeats} side-by-side repeats; accuracy runs {args.long_factor}x blocks; "
          f"load average {load_average()}", flush=True)
    document = {
        "benchmark": "search_quality",
        "meta": run_meta(argv),
        "load_average": load_average(),
        "settings": {k: v for k, v in vars(args).items() if k not in ("out",)},
        "targets": {"pick_ratio_min": TARGET_PICK_RATIO, "wall_ratio_max": TARGET_WALL_RATIO,
                    "accuracy_abs_max": TARGET_ACCURACY, "reproducibility_max": TARGET_REPRO},
        "archetypes": [],
    }
    document["warm_up_s"] = warm_up(args.names[0], args)
    records = []
    for name in args.names:
        record = run_archetype(name, args)
        record["verdicts"] = verdicts(record)
        records.append(record)
        print_archetype(record)
        document["archetypes"] = records
        document["overall"] = overall(records)
        document["wall_s"] = time.monotonic() - started
        write_json(out, document, default=str)
    print_overall(records, document["overall"], time.monotonic() - started)
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Repeatability and truth of the default scan: the same spec scanned several times in a row, then the
configs those scans raced timed in long plain loops.

A user who scans twice must get the same story: the same pick, gains whose intervals hold each other,
and intervals narrow enough to act on. And the story must be true where it is used: the pick at least
0.95 of the best config that long runs of a plain ``DataLoader`` loop find (each run with the
environment the scan recommends with it, e.g. the allocator's heap setting).

    python benchmarks/repeatability.py --spec examples/images.py --flags "--workers 0,1,2,4 --prefetch 2 --no-persistent" \\
        --scans 5 --after-install --out benchmarks/results/repeatability_images.json.gz
    python benchmarks/repeatability.py --spec benchmarks/archetypes/large_batches.py --scans 5 \\
        --out benchmarks/results/repeatability_large_batches.json.gz

``--after-install`` runs ``pip install -e .`` right before the first scan, as the README's quick start
does. Each scan is the CLI in a process of its own; the plain loops are fresh processes of their own,
interleaved, with no loadtune code in them. Run alone: nothing else on the machine meanwhile.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from answer import timed_scan
from meta import REPO, run_meta
from saved import read_json, write_json

from loadtune.model.config import TrialConfig
from loadtune.model.results import ScanResult

LOOP = """
import importlib.util, json, sys, time
from torch.utils.data import DataLoader
spec = importlib.util.spec_from_file_location("user_spec", sys.argv[1]); mod = importlib.util.module_from_spec(spec)
sys.modules["user_spec"] = mod; spec.loader.exec_module(mod)
ds = mod.dataset() if callable(getattr(mod, "dataset", None)) else mod.dataset
kwargs = json.loads(sys.argv[2]); warm, timed = float(sys.argv[3]), float(sys.argv[4])
loader = DataLoader(ds, shuffle=True, **kwargs)
samples, started, t0 = 0, time.perf_counter(), None
while True:
    for batch in loader:
        now = time.perf_counter()
        if t0 is None and now - started >= warm:
            t0, samples = now, 0
        elif t0 is not None:
            samples += len(batch[0]) if isinstance(batch, (list, tuple)) else len(batch)
            if now - t0 >= timed:
                print(samples / (now - t0)); sys.exit(0)
"""


def one_scan(spec: str, flags: list[str]) -> dict:
    """A default scan through the CLI; what it picked, what it said of the gain, how long it took to
    the answer and to its exit (``answer.timed_scan``)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "scan.json"
        run = timed_scan([spec, *flags, "--json", str(out)], cwd=REPO)
        if not out.exists():
            return {"wall_s": run.wall_s, "answer_s": run.answer_s, "error": run.stderr[-2000:]}
        result, saved = ScanResult.load(out), json.loads(out.read_text())
    rec = result.recommendation
    raced = sorted({t.config.key: t.config for t in result.trials if t.raced}.values(), key=lambda c: c.key)
    return {"wall_s": run.wall_s, "answer_s": run.answer_s, "pick": rec.config.label(), "pick_config": rec.config.to_dict(),
            "gain": rec.speedup, "low": rec.speedup_low, "high": rec.speedup_high, "gain_unsettled": rec.gain_unsettled,
            "baseline": rec.baseline.label() if rec.baseline else None, "raced": [c.to_dict() for c in raced],
            "legs": max((t.leg for t in result.trials if t.raced), default=0), "notes": result.notes,
            "result": saved}  # the whole scan (about 9 KB gzipped), to read again what each one raced and why


def plain_rate(spec: str, config: TrialConfig, warm_s: float, timed_s: float) -> float | None:
    """samples/s of a plain DataLoader loop of ``config`` in a fresh process, its environment set."""
    env = {**os.environ, **config.environment}
    proc = subprocess.run([sys.executable, "-c", LOOP, str(REPO / spec), json.dumps(config.loader_kwargs()), str(warm_s),
                           str(timed_s)], env=env, capture_output=True, text=True, timeout=warm_s + timed_s + 120)
    try:
        return float(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None


def truth(spec: str, configs: list[TrialConfig], rounds: int, warm_s: float, timed_s: float) -> dict[str, list[float]]:
    """Each config's long plain-loop rates, rounds interleaved (each round's order reversed from the last)."""
    rates: dict[str, list[float]] = {c.label(): [] for c in configs}
    for r in range(rounds):
        for c in configs if r % 2 == 0 else configs[::-1]:
            rate = plain_rate(spec, c, warm_s, timed_s)
            if rate is not None:
                rates[c.label()].append(rate)
    return rates


def truth_span(rates: dict[str, list[float]], scan: dict) -> tuple[float, float] | None:
    """The range of gains the long loops span for a scan's pick over its baseline: the pick's slowest
    loop over the baseline's fastest, and its fastest over the baseline's slowest."""
    pick, base = rates.get(scan.get("pick")), rates.get(scan.get("baseline"))
    return (min(pick) / max(base), max(pick) / min(base)) if pick and base else None


def summary(scans: list[dict], rates: dict[str, list[float]]) -> dict:
    ok = [s for s in scans if "pick" in s]
    picks = [s["pick"] for s in ok]
    widths = [max(s["high"] / s["gain"] - 1, 1 - s["low"] / s["gain"]) for s in ok if s["gain"] and s["low"] and s["high"]]
    gains = [(s["gain"], s["low"], s["high"]) for s in ok if s["gain"] and s["low"] and s["high"]]
    overlapping = all(a[1] <= b[0] <= a[2] for a in gains for b in gains)
    spans = [(s["low"], s["high"]) for s in ok if s["low"] and s["high"]]  # intervals and ranges alike
    medians = {k: statistics.median(v) for k, v in rates.items() if v}
    best = max(medians.values()) if medians else None
    plain = [medians[s["pick"]] / medians[s["baseline"]] if s["pick"] in medians and s.get("baseline") in medians else None
             for s in ok if s["low"] and s["high"]]
    truths = [truth_span(rates, s) for s in ok if s["low"] and s["high"]]
    return {
        "scans": len(scans), "measured": len(ok), "same_pick": max((picks.count(p) for p in set(picks)), default=0),
        "picks": picks, "gain_halfwidths": [round(w, 3) for w in widths],
        "within_10pct": sum(w <= 0.10 for w in widths), "gains_within_each_others_intervals": overlapping,
        "unsettled_gains": sum(bool(s.get("gain_unsettled")) for s in ok),
        "spans_overlap": all(a[0] <= b[1] and b[0] <= a[1] for a in spans for b in spans),
        "plain_gain_held": sum(g is not None and lo <= g <= hi for g, (lo, hi) in zip(plain, spans)),
        "plain_gains": [round(g, 3) if g else None for g in plain],
        # where the baseline's speed follows a state (the allocator's), its long loops land at several
        # speeds too: the range of gains they span, and the scans' spans that meet it
        "plain_gain_ranges": [[round(g, 3) for g in t] if t else None for t in truths],
        "spans_meeting_plain_range": sum(t is not None and lo <= t[1] and t[0] <= hi for t, (lo, hi) in zip(truths, spans)),
        "median_answer_s": statistics.median(s["answer_s"] for s in scans) if scans else None,
        "median_wall_s": statistics.median(s["wall_s"] for s in scans) if scans else None,
        "plain_medians": {k: round(v, 1) for k, v in medians.items()},
        "pick_over_best": {p: round(medians[p] / best, 3) for p in set(picks) if p in medians and best} if best else {},
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--spec", default="examples/images.py")
    p.add_argument("--flags", default="", help="the scan's flags, as one string")
    p.add_argument("--scans", type=int, default=5)
    p.add_argument("--after-install", action="store_true", help="pip install -e . right before the first scan")
    p.add_argument("--rounds", type=int, default=3, help="rounds of long plain loops")
    p.add_argument("--warm-s", type=float, default=3.0)
    p.add_argument("--long-s", type=float, default=8.0)
    p.add_argument("--out", type=Path)
    p.add_argument("--show", type=Path, help="print the summary of a saved run (recomputed from its scans and loops)")
    args = p.parse_args()
    if args.show:
        saved = read_json(args.show)
        print(json.dumps(summary(saved["scans"], saved["plain"]), indent=1))
        return
    out = {"meta": run_meta(), "command": " ".join(sys.argv), "spec": args.spec, "scans": []}
    for i in range(args.scans):
        if i == 0 and args.after_install:
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-e", "."], cwd=REPO, check=True)
        out["scans"].append(one_scan(args.spec, args.flags.split()))
        print(json.dumps({k: v for k, v in out["scans"][-1].items() if k not in ("notes", "raced", "pick_config", "result")}), flush=True)
    configs = {TrialConfig.from_dict(c).key: TrialConfig.from_dict(c) for s in out["scans"] for c in s.get("raced", [])}
    out["plain"] = truth(args.spec, sorted(configs.values(), key=lambda c: c.key), args.rounds, args.warm_s, args.long_s)
    out["summary"] = summary(out["scans"], out["plain"])
    print(json.dumps(out["summary"], indent=1))
    if args.out:
        write_json(args.out, out)


if __name__ == "__main__":
    main()

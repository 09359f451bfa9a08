"""Wall time of a default ``loadtune scan`` now against an earlier commit, on the benchmark archetypes.

Both versions scan each archetype with their own copy of it (an option's name may have changed
between them), from a clean tree of each (``git archive``), side by side: for every repeat and
archetype the two scans run back to back in alternating order (before, after; then after, before),
so drift of the machine hits both alike. Reported per archetype: the median wall time of each and the
median of the paired ratios after / before; overall, the ratio of the summed medians. Beside the wall
time, the time to the answer: until the recommendation is printed.

    python benchmarks/scan_time.py --before dd48840 --after 0cfef0d --repeats 2 --out benchmarks/results/scan_time_cheapest_runnerup.json.gz

Run on an otherwise idle machine: each scan's trials compete with anything else for the cores.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import tempfile
from pathlib import Path

from answer import timed_scan
from meta import run_meta
from saved import write_json

from loadtune.analysis.comparison import Comparison, mean_error
from loadtune.analysis.race import PAIRS_PER_LEG, race_ratio, raced_configs
from loadtune.model.estimate import t975
from loadtune.model.results import ScanResult

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
GOAL = 0.05  # the half-width the issue asks of the pick's intervals
ARCHETYPES = ["cpu_bound", "heavy_tail", "iterable", "large_tensors", "storage_latency", "tiny_dataset"]


def tree_at(ref: str, into: Path) -> Path:
    """A clean copy of the repository at ``ref`` (tracked files only)."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def one_scan(tree: Path, archetype: str, out: Path) -> dict:
    """One default scan of ``archetype`` by the loadtune in ``tree``, timed from outside
    (``answer.timed_scan``): to its exit, and to its answer."""
    env = {**os.environ, "PYTHONPATH": str(tree), "COLUMNS": "160", "PYTHONUNBUFFERED": "1"}
    spec = tree / "benchmarks" / "archetypes" / f"{archetype}.py"
    run = timed_scan([str(spec), "--json", str(out)], cwd=tree, env=env)
    data = json.loads(out.read_text()) if out.exists() else {}
    pick = (data.get("recommendation") or {}).get("config")
    return {"exit": run.returncode, "wall_s": run.wall_s, "answer_s": run.answer_s,
            "trials": len(data.get("trials", [])), "pick": pick, "stderr_tail": run.stderr[-400:] if run.returncode else None,
            **race_widths(data)}


def race_widths(data: dict) -> dict:
    """How decisive the scan's race was: the half-widths of the pick's ratio intervals to the runner-up
    (the raced config nearest it) and to PyTorch's defaults (or ``--current``), where they were raced
    (read by today's ``analysis.race`` from the saved trials); and for each, what ±5% would take
    (``turns_for``)."""
    try:
        result = ScanResult.from_dict(data)
    except Exception:  # noqa: BLE001 - an earlier version's file, or none: no figure rather than no run
        return {}
    rec = result.recommendation
    if rec is None:
        return {}
    ratios = {c: race_ratio(result.trials, c, rec.config) for c in raced_configs(result.trials) if c != rec.config}
    ratios = {c: r for c, r in ratios.items() if r is not None}
    if not ratios:
        return {}
    runner_up = max(ratios, key=lambda c: ratios[c].value)
    current = result.settings.current
    defaults = next((ratios[c] for c in ratios if c.key == current or (current is None and c.is_pytorch_default)), None)
    turn_s = statistics.fmean(b.seconds for t in result.trials if t.raced for b in t.blocks)
    return {"runner_up_halfwidth": ratios[runner_up].halfwidth,
            "defaults_halfwidth": defaults.halfwidth if defaults is not None else None,
            "runner_up_needs": turns_for(ratios[runner_up], turn_s),
            "defaults_needs": turns_for(defaults, turn_s) if defaults is not None else None}


def turns_for(ratio: Comparison, turn_s: float, goal: float = GOAL, most: int = 40) -> dict:
    """What a ratio's interval of ±``goal`` would take, were its variance parts to stay as measured
    (``analysis.comparison.mean_error``: the turn pairs' spread within a leg, and what the legs add): the legs
    of ``PAIRS_PER_LEG`` turn pairs (None past ``most``), and the timed seconds of its two loaders' turns
    over them alone (two turns per pair and loader, of the turns' mean length measured; no other racer,
    start-up or warm-up: a lower bound on the race). Beside them, the pairs and legs the race ran."""
    need = None
    for k in range(ratio.groups, most + 1):
        se, df = mean_error(ratio.within, ratio.between, max(ratio.pairs, k * PAIRS_PER_LEG), k)
        if math.exp(t975(df) * se) - 1 <= goal:
            need = k
            break
    return {"pair_sd": math.sqrt(ratio.within), "legs_sd": math.sqrt(ratio.between), "pairs_run": ratio.pairs,
            "legs_run": ratio.groups, "legs_for_goal": need,
            "timed_s_for_goal": round(need * PAIRS_PER_LEG * 2 * 2 * turn_s, 1) if need else None}


def summarise(runs: list[dict]) -> dict:
    cells, before_total, after_total = {}, 0.0, 0.0
    for archetype in dict.fromkeys(r["archetype"] for r in runs):
        rs = [r for r in runs if r["archetype"] == archetype]
        before = statistics.median(r["before"]["wall_s"] for r in rs)
        after = statistics.median(r["after"]["wall_s"] for r in rs)
        cells[archetype] = {"pairs": len(rs), "before_s": before, "after_s": after,
                            "ratio": statistics.median(r["after"]["wall_s"] / r["before"]["wall_s"] for r in rs),
                            "before_answer_s": statistics.median(r["before"]["answer_s"] for r in rs),
                            "after_answer_s": statistics.median(r["after"]["answer_s"] for r in rs),
                            "before_trials": [r["before"]["trials"] for r in rs],
                            "after_trials": [r["after"]["trials"] for r in rs]}
        before_total += before
        after_total += after
    before_answer = sum(c["before_answer_s"] for c in cells.values())
    after_answer = sum(c["after_answer_s"] for c in cells.values())
    return {"archetypes": cells, "before_total_s": before_total, "after_total_s": after_total,
            "ratio_total": after_total / before_total if before_total else None,
            "before_answer_total_s": before_answer, "after_answer_total_s": after_answer,
            "answer_ratio_total": after_answer / before_answer if before_answer else None,
            "race_halfwidth": {which: median_width(runs, which) for which in ("before", "after")},
            "race_needs": {which: median_needs(runs, which) for which in ("before", "after")}}


def median_width(runs: list[dict], which: str) -> float | None:
    """The median half-width of the pick's intervals to the runner-up and to the defaults, over every scan."""
    widths = [r[which].get(k) for r in runs for k in ("runner_up_halfwidth", "defaults_halfwidth")]
    widths = [w for w in widths if w is not None]
    return statistics.median(widths) if widths else None


def median_needs(runs: list[dict], which: str) -> dict | None:
    """Over the same intervals as ``median_width``: the medians of what ±5% would take (``turns_for``;
    an interval that 40 legs would not bring there counts as the longest)."""
    needs = [r[which].get(k) for r in runs for k in ("runner_up_needs", "defaults_needs")]
    needs = [n for n in needs if n]
    if not needs:
        return None
    return {key: statistics.median(math.inf if n[key] is None else n[key] for n in needs) for key in needs[0]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--before", required=True, help="the earlier commit")
    p.add_argument("--after", default="HEAD", help="the later commit (default HEAD)")
    p.add_argument("--archetypes", default=",".join(ARCHETYPES))
    p.add_argument("--repeats", type=int, default=2, help="scan pairs per archetype")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="loadtune-scantime-"))
    trees = {"before": tree_at(args.before, tmp / "before"), "after": tree_at(args.after, tmp / "after")}
    refs = {k: subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", ref], capture_output=True, text=True,
                              check=True).stdout.strip() for k, ref in (("before", args.before), ("after", args.after))}
    meta, runs = run_meta(), []
    for i in range(args.repeats):
        for k, archetype in enumerate(args.archetypes.split(",")):  # each archetype's order flips every repeat
            order = ["before", "after"] if (i + k) % 2 == 0 else ["after", "before"]
            run = {"archetype": archetype, "repeat": i, "order": order}
            for which in order:
                run[which] = one_scan(trees[which], archetype, tmp / f"{which}-{archetype}-{i}.json")
            runs.append(run)
            print(f"{i + 1} {archetype:16s} " + "  ".join(
                f"{w} {run[w]['wall_s']:6.1f} s (answer {run[w]['answer_s']:6.1f} s, {run[w]['trials']} trials)"
                for w in ("before", "after")) + f"  order {'/'.join(order)}", flush=True)
            write_json(args.out, {"meta": meta, "refs": refs, "summary": summarise(runs), "runs": runs})
    s = summarise(runs)
    print("| archetype | before s | after s | after / before (median of pairs) | answer: before s | answer: after s |\n"
          "|---|---|---|---|---|---|")
    for name, c in s["archetypes"].items():
        print(f"| {name} | {c['before_s']:.0f} | {c['after_s']:.0f} | {c['ratio']:.2f} | {c['before_answer_s']:.0f} | "
              f"{c['after_answer_s']:.0f} |")
    print(f"| all | {s['before_total_s']:.0f} | {s['after_total_s']:.0f} | {s['ratio_total']:.2f} | "
          f"{s['before_answer_total_s']:.0f} | {s['after_answer_total_s']:.0f} ({s['answer_ratio_total']:.2f}) |")
    print(f"median half-width, pick vs runner-up and vs defaults: {s['race_halfwidth']}")


if __name__ == "__main__":
    main()

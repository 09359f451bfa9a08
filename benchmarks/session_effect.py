"""Do paired rounds of one session share an offset that rounds of another session do not?

``check`` reads its change from the spread of its own rounds and the baseline's. If the rounds of one
session (one ``loadtune`` process) share something that another session's do not, the interval leaves
it out and covers less than it says. A suspect: every trial process of a session is forked from that
session's fork server, so all its rounds share the server's hash seed and memory layout.

This runs ``--sessions`` sessions, each a fresh Python process measuring ``--rounds`` paired rounds of
``check_dataset.py`` (the baseline's pick and shaped calibration), alternating two ways of starting a
round's process: ``forkserver`` (as ``check`` did: one server per session) and ``spawn`` (a fresh
interpreter per round). For each way: the variance of the session means against what the rounds'
own spread predicts (``var(round) / rounds``); an excess is a session-level term.

    python benchmarks/session_effect.py --sessions 12 --rounds 4 --out benchmarks/session_effect.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

from meta import run_meta

HERE = Path(__file__).resolve().parent
SESSION = """
import json, math, multiprocessing, sys
from dataclasses import replace
from loadtune.engine.trial import harness
from loadtune.engine.reference import paired_round
from loadtune.engine.spec import load_spec
from loadtune.engine.check import check_request
from loadtune.model.results import ScanResult
how, rounds, baseline, spec = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
if how == "spawn":
    harness.context_for = lambda source, device="cpu": multiprocessing.get_context("spawn")
saved = ScanResult.load(baseline)
loaded = load_spec(spec)
request, _ = check_request(saved, loaded)
logs = []
for i in range(rounds):
    got, _ = paired_round(loaded.ref, saved.reference.shape, loaded.length, request, i)
    logs.append(math.log(got.ratio) if got.ratio else None)
print(json.dumps(logs))
"""


def session(how: str, rounds: int, baseline: Path) -> list[float]:
    out = subprocess.run([sys.executable, "-c", SESSION, how, str(rounds), str(baseline), str(HERE / "check_dataset.py")],
                         capture_output=True, text=True, check=True)
    return [x for x in json.loads(out.stdout.strip().splitlines()[-1]) if x is not None]


def excess(sessions: list[list[float]]) -> dict:
    """Between-session variance of the means against the rounds' own (one-way random effects)."""
    means = [statistics.fmean(s) for s in sessions]
    within = statistics.fmean(statistics.variance(s) / len(s) for s in sessions)
    between = statistics.variance(means)
    return {"sessions": len(sessions), "between_var_of_means": between, "within_var_over_n": within,
            "ratio": between / within if within else None,
            "session_sd": math.sqrt(max(0.0, between - within)), "round_sd": math.sqrt(statistics.fmean(
                statistics.variance(s) for s in sessions))}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sessions", type=int, default=12, help="sessions per way")
    p.add_argument("--rounds", type=int, default=4, help="paired rounds per session")
    p.add_argument("--baseline", default=str(HERE / "check_alarms_baseline.json"))
    p.add_argument("--out", required=True)
    args = p.parse_args()
    meta, got = run_meta(), {"forkserver": [], "spawn": []}
    for i in range(args.sessions):
        for how in (["forkserver", "spawn"] if i % 2 == 0 else ["spawn", "forkserver"]):
            got[how].append(session(how, args.rounds, Path(args.baseline)))
            print(f"{i + 1:3d} {how:10s} " + " ".join(f"{x:+.3f}" for x in got[how][-1]), flush=True)
        summary = {how: excess(s) for how, s in got.items() if len(s) >= 2}
        Path(args.out).write_text(json.dumps({"meta": meta, "summary": summary, "sessions": got}, indent=1) + "\n")
    for how, s in summary.items():
        print(f"{how:10s} between-session variance of means {s['between_var_of_means']:.5f}, rounds' own "
              f"{s['within_var_over_n']:.5f} (x{s['ratio']:.2f}); session SD {s['session_sd']:.2%}, round SD {s['round_sd']:.2%}")


if __name__ == "__main__":
    main()

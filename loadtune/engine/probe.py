"""Measurements made once per scan on the CUDA device before the trials, in a child process.

The scan's own process must not create a CUDA context: trials of in-memory datasets are forked
from it, and CUDA cannot be used in a child forked after it was initialised. So the device's pinned
copy peak (``bandwidth.pinned_peak``) and the calibration of ``--step-ms``'s synthetic step run here,
in a fresh interpreter, and come back as one line of JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from loadtune.engine.trial.workload import StepWorkload

PROBE_TIMEOUT_S = 180


@dataclass
class Probe:
    h2d_peak_gbps: float | None = None
    workload: StepWorkload | None = None
    error: str | None = None  # what went wrong, when something did


def run(device: str, step_ms: float | None, timeout: float = PROBE_TIMEOUT_S) -> Probe:
    """Measure in a child; a failure comes back as ``Probe.error``, never raised."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)  # the child imports this very loadtune
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    cmd = [sys.executable, "-m", "loadtune.engine.probe", device, repr(step_ms or 0.0)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return Probe(error=f"no answer within {timeout:g} s")
    except OSError as exc:
        return Probe(error=str(exc))
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()
        return Probe(error=tail[-1] if tail else f"exit code {done.returncode}")
    data = json.loads(lines[-1])
    work = data.get("workload")
    return Probe(data.get("h2d_peak_gbps"), StepWorkload.from_dict(work) if work else None, data.get("error"))


def main(argv: list[str]) -> None:
    import torch

    from loadtune.engine.bandwidth import pinned_peak
    from loadtune.engine.trial.workload import calibrate

    device, step_ms = torch.device(argv[0]), float(argv[1])
    out: dict = {}
    try:
        torch.cuda.set_device(device)
        if step_ms > 0:
            out["workload"] = calibrate(step_ms, device).to_dict()
        out["h2d_peak_gbps"] = round(pinned_peak(device), 3)
    except Exception as exc:  # reported, so the scan can say what failed
        out["error"] = f"{type(exc).__name__}: {exc}"
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])

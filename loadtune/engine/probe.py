"""Measurements made once per scan on the CUDA devices before the trials, in a child process.

The scan's own process must not touch CUDA: trials of in-memory datasets are forked from it, and
CUDA cannot be used in a child forked after it was initialised. So the devices' pinned copy peaks
(``bandwidth.pinned_peak``: the scan's device, or each rank's own GPU), their identities for NVML,
and the calibration of ``--step-ms``'s synthetic step run here, in a fresh interpreter, and come
back as one line of JSON.

The step is calibrated with the spec loaded, as each trial loads it before it runs the step: a spec
that changes torch's global settings (TF32 matmuls, ``torch.set_float32_matmul_precision``) changes
how long the same matmuls take, and a calibration without it would give a step of another length.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from loadtune.engine.spec import LoadedSpec, SpecRef
from loadtune.engine.trial.workload import StepWorkload

PROBE_TIMEOUT_S = 180


@dataclass
class Probe:
    h2d_peak_gbps: float | None = None  # the scan's device (the first one measured)
    workload: StepWorkload | None = None
    error: str | None = None  # what went wrong, when something did
    h2d_peaks_gbps: list[float] = field(default_factory=list)  # every device measured, in the order asked
    devices: list[dict] = field(default_factory=list)  # their ``gpu.identity``, for NVML


def child_env() -> dict:
    """The environment of a child that imports this very loadtune (its package's parent on the path)."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def run(device: str, step_ms: float | None, timeout: float = PROBE_TIMEOUT_S, devices: list[str] | None = None,
        source: SpecRef | LoadedSpec | None = None) -> Probe:
    """Measure in a child: the pinned peak of each of ``devices`` (default: ``device`` alone) and, with
    ``step_ms``, the step calibrated on ``device`` with ``source`` loaded first. A failure comes back
    as ``Probe.error``, never raised."""
    ask: dict = {"device": device, "step_ms": step_ms or 0.0, "devices": devices or [device]}
    with tempfile.TemporaryDirectory(prefix="loadtune-probe-") as scratch:
        if step_ms and source is not None:
            ask["spec"] = spec_argument(source, Path(scratch))
        cmd = [sys.executable, "-m", "loadtune.engine.probe", json.dumps(ask)]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=child_env())
        except subprocess.TimeoutExpired:
            return Probe(error=f"no answer within {timeout:g} s")
        except OSError as exc:
            return Probe(error=str(exc))
    return parse(done.returncode, done.stdout, done.stderr)


def spec_argument(source: SpecRef | LoadedSpec, scratch: Path) -> dict:
    """How the child gets the spec: the file's reference, or the objects pickled (as a trial gets them)."""
    if isinstance(source, SpecRef):
        return {"ref": asdict(source)}
    path = scratch / "spec.pickle"
    path.write_bytes(pickle.dumps(source))
    return {"pickle": str(path)}


def parse(returncode: int, stdout: str, stderr: str) -> Probe:
    lines = stdout.strip().splitlines()
    if returncode != 0 or not lines:
        tail = (stderr or stdout).strip().splitlines()
        return Probe(error=tail[-1] if tail else f"exit code {returncode}")
    data = json.loads(lines[-1])
    work = data.get("workload")
    peaks = data.get("h2d_peaks_gbps") or []
    return Probe(peaks[0] if peaks else None, StepWorkload.from_dict(work) if work else None, data.get("error"),
                 peaks, data.get("devices") or [])


def load_for_step(spec: dict | None) -> None:
    """Load the spec as a trial does (its imports and global settings apply; no data preparation)."""
    if not spec:
        return
    from loadtune.engine.spec import load_spec

    if "ref" in spec:
        load_spec(SpecRef(**spec["ref"]), prepare_data=False)
    else:
        pickle.loads(Path(spec["pickle"]).read_bytes())


def main(argv: list[str]) -> None:
    import torch

    ask = json.loads(argv[0])
    out: dict = {}
    errors = []
    try:  # first, on devices nothing else has used yet
        out["h2d_peaks_gbps"], out["devices"] = measure_peaks(ask["devices"])
    except Exception as exc:  # reported, so the scan can say what failed
        errors.append(f"{type(exc).__name__}: {exc}")
    if float(ask["step_ms"]) > 0:
        try:
            out["workload"] = calibrate_step(torch.device(ask["device"]), float(ask["step_ms"]), ask.get("spec"))
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
    if errors:
        out["error"] = "; ".join(errors)
    print(json.dumps(out))


def measure_peaks(names: list[str]) -> tuple[list[float], list[dict]]:
    """Each device's pinned host-to-device peak, and its identity for NVML."""
    import torch

    from loadtune.engine.bandwidth import pinned_peak
    from loadtune.engine.trial.gpu import identity

    peaks, found = [], []
    for name in names:
        device = torch.device(name)
        torch.cuda.set_device(device)
        found.append(identity(device))
        peaks.append(round(pinned_peak(device), 3))
    return peaks, found


def calibrate_step(device, step_ms: float, spec: dict | None) -> dict:
    """The synthetic step calibrated on ``device`` under the spec's settings."""
    import torch

    from loadtune.engine.trial.workload import calibrate

    load_for_step(spec)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    return calibrate(step_ms, device).to_dict()


if __name__ == "__main__":
    main(sys.argv[1:])

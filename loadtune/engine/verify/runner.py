"""``doctor --verify`` in the CLI's process: the GPU checks in a child, then the ranks, never CUDA here.

The CLI's process must stay free of CUDA: a scan forks trials from it, and CUDA does not survive a
fork. So this module decides "no CUDA" from the torch build alone; anything that needs the driver
runs in ``device``'s process (a fresh interpreter, in a session of its own so its DataLoader workers
die with it), whose results are read line by line as they come. The ranks check then runs one short
trial through ``run_trial`` with a rank on every visible GPU (``distributed.agent``, as a scan of
several ranks launches them; one GPU: the trial child alone, as a single-GPU scan runs it).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from loadtune.analysis import verify as decide
from loadtune.engine import calibration
from loadtune.engine.distributed.agent import with_ranks
from loadtune.engine.distributed.layout import setup_for
from loadtune.engine.trial.harness import kill_group, run_trial
from loadtune.engine.trial.setup import LoaderOptions, Timing
from loadtune.engine.trial.protocol import TrialRequest
from loadtune.engine.verify.device import MARK
from loadtune.model.config import TrialConfig
from loadtune.model.trial import Trial
from loadtune.model.verify import NO_CUDA, Check, Verification

DEVICE_TIMEOUT_S = 150.0  # the GPU checks take well under a minute; a hang is cut here
RANKS_TIMEOUT_S = 120.0  # spawning a rank per GPU (each imports torch), the gloo rendezvous and a short window
RANK_CONFIG = TrialConfig(batch_size=32, num_workers=0, pin_memory=True, transfer="non_blocking")
RANK_TIMING = Timing(warmup_s=0.2, block_s=0.2, blocks=3, max_s=90)
RANK_WINDOW_S = 1.0

OnCheck = Callable[[Check], None]


def cpu_build_reason() -> str | None:
    """Why this torch cannot see a GPU at all, read from the build alone (no driver call), or None."""
    import torch

    if torch.version.cuda is None and getattr(torch.version, "hip", None) is None:
        return (f"{NO_CUDA}: this torch ({torch.__version__}) is a CPU-only build; run it on a machine with an NVIDIA "
                "GPU and a CUDA build of torch")
    return None


def parent_cuda_initialised() -> bool:
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_initialized())


def verify(on_check: OnCheck | None = None, device_timeout_s: float = DEVICE_TIMEOUT_S,
           ranks_timeout_s: float = RANKS_TIMEOUT_S) -> Verification:
    """Every check, each handed to ``on_check`` as soon as it is decided; a machine without CUDA is
    refused (``Verification.refused``) before anything runs."""
    started = time.monotonic()
    result = Verification(refused=cpu_build_reason())
    if result.refused is None:
        tell = on_check or (lambda check: None)
        run_device(result, tell, device_timeout_s)
        if result.refused is None:
            gpus = len(result.facts.get("gpus") or [])
            tell(add(result, ranks(gpus, ranks_timeout_s) if gpus else
                     decide.unfinished(decide.RANKS, "the GPU checks ended before they counted the GPUs")))
    result.wall_s = round(time.monotonic() - started, 2)
    return result


def add(result: Verification, check: Check) -> Check:
    result.checks.append(check)
    return check


def child_env() -> dict:
    """The child imports this very loadtune, whatever is installed."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[3])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def run_device(result: Verification, tell: OnCheck, timeout_s: float,
               command: list[str] | None = None) -> None:
    """Run the GPU checks' process and take in what it says until it ends or ``timeout_s`` passes;
    the checks it never reported fail as unfinished, saying why."""
    command = command or [sys.executable, "-m", "loadtune.engine.verify.device"]
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=err, text=True, env=child_env(),
                                start_new_session=True)
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=pump, args=(proc.stdout, lines), daemon=True).start()
        deadline = time.monotonic() + timeout_s
        try:
            while (line := lines.get(timeout=max(0.0, deadline - time.monotonic()))) is not None:
                take(result, line, tell)
        except queue.Empty:
            result.error = f"the GPU checks did not finish within {timeout_s:g} s"
        finally:
            if proc.poll() is None:
                kill_group(proc.pid)
            proc.wait()
        if result.error is None and result.refused is None and proc.returncode != 0:
            err.seek(0)
            tail = err.read().decode(errors="replace").strip().splitlines()
            result.error = f"the GPU checks' process ended with exit code {proc.returncode}" + (f": {tail[-1]}" if tail else "")
    if result.refused is None:
        done = {c.name for c in result.checks}
        for name in decide.CHECK_NAMES:
            if name != decide.RANKS and name not in done:
                tell(add(result, decide.unfinished(name, result.error or "the GPU checks' process said nothing of it")))


def pump(stream, lines: queue.Queue) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def take(result: Verification, line: str, tell: OnCheck) -> None:
    """One line of the child: a check, its facts, a refusal or an error; anything else is not ours."""
    if not line.startswith(MARK):
        return
    message = json.loads(line[len(MARK):])
    if "check" in message:
        tell(add(result, Check.from_dict(message["check"])))
    elif "facts" in message:
        result.facts = message["facts"]
    elif "refused" in message:
        result.refused = message["refused"]
    elif "error" in message:
        result.error = message["error"]


def ranks(gpus: int, timeout_s: float) -> Check:
    """One short trial of loadtune's calibration dataset with a rank on each of the ``gpus``."""
    setup = setup_for(gpus, 1, 0, "cuda", RANK_WINDOW_S, calibration.REF)
    start_method = multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_all_start_methods()[0]
    request = TrialRequest(RANK_CONFIG, "cuda" if setup else "cuda:0", RANK_TIMING, LoaderOptions(shuffle=False),
                           timeout_s, start_method)
    started = time.monotonic()
    trial = run_trial(calibration.REF, with_ranks(request, setup))
    return decide.ranks_check(gpus, measured_blocks(trial, setup is not None), failure(trial), parent_cuda_initialised(),
                              time.monotonic() - started)


def measured_blocks(trial: Trial, ranked: bool) -> list[int]:
    return [len(r.blocks) for r in trial.ranks] if ranked else [len(trial.blocks)]


def failure(trial: Trial) -> str | None:
    if trial.error is not None:
        return trial.error.message + (f" ({read_tail_line(trial.error.log_tail)})" if trial.error.log_tail else "")
    return None if trial.ok else "no timed block"


def read_tail_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""

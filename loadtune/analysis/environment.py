"""What differs between two measurements' surroundings: the dataset they measured (spec file, factory,
class) and the machine (cores, torch, CPU, GPUs). A ratio across such a difference means something
else, so comparisons and checks print it beside their figures."""

from __future__ import annotations

from pathlib import Path

from loadtune.model.machine import MachineInfo


def spec_identity(path: str | None, factory: str | None, dataset_type: str) -> tuple:
    """Which dataset a result is about: file name, factory and class (not the file's content, whose
    edits are exactly what the check is for)."""
    return (Path(path).name if path else None, factory, dataset_type)


def environment_changes(then: MachineInfo, now: MachineInfo, labels: tuple[str, str] = ("then", "now")) -> list[str]:
    """Differences worth knowing when reading a ratio across machines (``labels`` name the two sides)."""
    out = []
    x, y = labels
    for name in ("usable_cores", "torch", "python", "cpu_model"):
        a, b = getattr(then, name), getattr(now, name)
        if a != b:
            out.append(f"{name}: {a} {x}, {b} {y}")
    if [g.name for g in then.gpus] != [g.name for g in now.gpus]:
        out.append(f"gpus: {[g.name for g in then.gpus] or 'none'} {x}, {[g.name for g in now.gpus] or 'none'} {y}")
    return out



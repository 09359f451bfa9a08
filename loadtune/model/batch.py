"""What one batch holds (its bytes, each tensor's dtype and shape), and how many samples the batches
of a loader that batches by itself held, as recorded in a trial's result."""

from __future__ import annotations

from dataclasses import dataclass, field



@dataclass
class BatchInfo:
    """What one batch holds: its bytes and each tensor's dtype and shape (for the report's advice)."""

    nbytes: int
    tensors: list[tuple[str, list[int]]] = field(default_factory=list)
    samples: int | None = None  # samples it holds, where that can be read off it (older files: None)

    @classmethod
    def from_dict(cls, data: dict) -> "BatchInfo":
        samples = data.get("samples")
        return cls(int(data["nbytes"]), [(str(d), list(s)) for d, s in data.get("tensors", [])],
                   int(samples) if samples is not None else None)


@dataclass
class BatchSizes:
    """How many samples a loader that batches by itself (its own batch_sampler, a pre-batched stream)
    put in the batches timed. Such a loader's batches may vary by design (batches cut to a token
    budget): there is then no one batch size, and the mean is what labels the results and sizes
    check's calibration (docs/measuring.md#batches-of-varying-size)."""

    mean: float  # samples per batch over the batches timed
    smallest: int
    largest: int
    varying: bool  # more than one size, each epoch's short last batch aside

    @property
    def label(self) -> str:
        """``~31``: the ``bs`` of a config's label when the batches vary."""
        return f"~{self.mean:.1f}" if self.mean < 10 else f"~{self.mean:.0f}"

    @property
    def calibration_size(self) -> int:
        """The one batch size that stands for these batches where one is needed (check's calibration)."""
        return max(1, round(self.mean))

    @classmethod
    def from_dict(cls, data: dict) -> "BatchSizes":
        return cls(float(data["mean"]), int(data["smallest"]), int(data["largest"]), bool(data["varying"]))

    @classmethod
    def pooled(cls, runs: list["BatchSizes"], weights: list[int]) -> "BatchSizes | None":
        """Several trials' sizes as one: the mean over all their batches (``weights``: each one's batches)."""
        total = sum(weights)
        if not runs or total <= 0:
            return None
        mean = sum(r.mean * w for r, w in zip(runs, weights)) / total
        return cls(mean, min(r.smallest for r in runs), max(r.largest for r in runs), any(r.varying for r in runs))

"""Two saved scans side by side, config by config (``loadtune show a.json b.json``): pure arithmetic.

Before and after a dataset change, or one dataset on two machines. Configs are matched by
``TrialConfig.key``; each side's figure carries the interval for a long run that its own scan
learned (``analysis.noise``), each pair gets the ratio b/a with an interval from both, and a verdict
that calls a difference real only when the two long-run intervals are apart and the medians differ
beyond what two runs of one config do (the test the recommendation uses for configs measured at
different times: two scans always are). What differs around the numbers — cores, torch, the
device, the dataset file, loadtune's own calibration workload — is listed, because a ratio across
machines means little without it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from loadtune.analysis.environment import environment_changes, spec_identity
from loadtune.model.config import TrialConfig
from loadtune.analysis.noise import NOTHING_LEARNED, RunNoise, long_run, run_noise, tie_floor
from loadtune.analysis.recommend import noise_floor_of
from loadtune.model.results import ConfigResult, ScanResult, by_config
from loadtune.model.estimate import Estimate
from loadtune.analysis.stats import Ratio, indistinguishable, ratio
from loadtune.analysis.view import Filters, ViewError, config_knobs, config_status

FASTER = "faster"
SLOWER = "slower"
SAME = "within noise"
ONLY_A = "only in A"
ONLY_B = "only in B"
UNMEASURED = "not measured"  # present on both sides, but failed (or was excluded) on at least one
COMPARE_SORT_KEYS = ("rate", "workers", "ratio")
OPTIONS_THAT_MATTER = ("shuffle", "drop_last", "warmup", "block_time", "noise_floor", "step_ms", "nproc_per_node", "nnodes")


@dataclass(frozen=True)
class ConfigDiff:
    """One config in one or both scans."""

    config: TrialConfig
    a: Estimate | None  # None: absent from A, or not measured there (see a_status)
    b: Estimate | None
    a_status: str | None  # None: absent from A
    b_status: str | None
    ratio: Ratio | None  # b / a, when both were measured
    verdict: str

    @property
    def statuses(self) -> set[str]:
        return {s for s in (self.a_status, self.b_status) if s is not None}


def judge(a: Estimate, b: Estimate, floor: float) -> tuple[Ratio, str]:
    """b / a, and whether b is faster, slower, or not distinguishable from a given both intervals
    (and medians within ``floor`` of each other count as the same: drift between two scans)."""
    r = ratio(b, a)
    if indistinguishable(a, b, floor):
        return r, SAME
    return r, FASTER if b.median > a.median else SLOWER


def diff_config(a: ConfigResult | None, b: ConfigResult | None, floor: float,
                noise: tuple[RunNoise, RunNoise] = (NOTHING_LEARNED, NOTHING_LEARNED)) -> ConfigDiff:
    """One config's row: each side's long-run figure (its own scan's ``noise``), their ratio, the verdict."""
    config = (a or b).config
    a_est = long_run(a, noise[0]) if a is not None else None
    b_est = long_run(b, noise[1]) if b is not None else None
    a_status = config_status(a) if a is not None else None
    b_status = config_status(b) if b is not None else None
    if a is None or b is None:
        return ConfigDiff(config, a_est, b_est, a_status, b_status, None, ONLY_B if a is None else ONLY_A)
    if a_est is None or b_est is None:
        return ConfigDiff(config, a_est, b_est, a_status, b_status, None, UNMEASURED)
    r, verdict = judge(a_est, b_est, floor)
    return ConfigDiff(config, a_est, b_est, a_status, b_status, r, verdict)


def pair_configs(a: list[ConfigResult], b: list[ConfigResult]) -> list[tuple[ConfigResult | None, ConfigResult | None]]:
    """Match by ``TrialConfig.key``: A's configs in their order, then those only B has."""
    b_by_key = {c.config.key: c for c in b}
    a_keys = {c.config.key for c in a}
    return [(c, b_by_key.get(c.config.key)) for c in a] + [(None, c) for c in b if c.config.key not in a_keys]


def noise_floor(a: ScanResult, b: ScanResult) -> float:
    """The looser of the two scans' floors: each scan's own notion of "too close to call", widened
    to how far two runs of one config land apart on its machine where the scan learned that."""
    return max(tie_floor(run_noise(r.configs), noise_floor_of(r)) for r in (a, b))


def calibration_estimate(result: ScanResult) -> Estimate | None:
    """loadtune's fixed yardstick workload, all its runs in the scan pooled."""
    pooled = by_config(result.calibration)
    return pooled[0].estimate if pooled else None


def setting_differences(a: ScanResult, b: ScanResult) -> list[str]:
    """The machine (cores, torch, python, CPU, GPUs), the device batches went to, and the
    measurement options that change what a figure means."""
    out = environment_changes(a.machine, b.machine, ("in A", "in B"))
    if a.settings.device != b.settings.device:
        out.append(f"device: {a.settings.device} in A, {b.settings.device} in B "
                   "(configs differ in how batches reach it, so few or none match)")
    oa, ob = asdict(a.settings.options), asdict(b.settings.options)
    out += [f"{k}: {oa[k]} in A, {ob[k]} in B" for k in OPTIONS_THAT_MATTER if oa[k] != ob[k]]
    for side, r in (("A", a), ("B", b)):
        if r.machine.busy:
            out.append(f"{side} was measured on a busy machine ({r.machine.busy_text()}): its figures are noisier and lower")
        if r.state != "complete":
            out.append(f"{side} is a partial scan ({r.state})")
    return out


def dataset_differences(a: ScanResult, b: ScanResult) -> list[str]:
    """Which dataset each scan measured: a different file or class is worth a warning, an edited
    file is what a before/after comparison is usually about."""
    ia = spec_identity(a.spec.path, a.spec.factory, a.spec.dataset_type)
    ib = spec_identity(b.spec.path, b.spec.factory, b.spec.dataset_type)
    out = []
    if ia != ib:
        out.append(f"different datasets: {ia[0]}:{ia[1]} ({ia[2]}) in A, {ib[0]}:{ib[1]} ({ib[2]}) in B")
    elif a.spec.sha256 != b.spec.sha256:
        out.append(f"the spec file {ia[0]} was edited between the scans")
    if a.spec.length != b.spec.length:
        out.append(f"dataset length: {a.spec.length} in A, {b.spec.length} in B")
    return out


@dataclass
class Comparison:
    """Everything ``show a.json b.json`` prints, from which the JSON form is also written."""

    a_name: str
    b_name: str
    diffs: list[ConfigDiff]
    noise_floor: float
    settings: list[str] = field(default_factory=list)
    dataset: list[str] = field(default_factory=list)
    a_pick: TrialConfig | None = None
    b_pick: TrialConfig | None = None
    calibration: Ratio | None = None  # b / a on loadtune's yardstick: how the machines differ
    spreads: tuple[float | None, float | None] = (None, None)  # each scan's run-to-run spread (None: not learned)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for d in self.diffs:
            out[d.verdict] = out.get(d.verdict, 0) + 1
        return out

    def to_dict(self, diffs: list[ConfigDiff] | None = None) -> dict:
        """The comparison as JSON-ready data; ``diffs``: a selection of the rows (default all)."""
        return {
            "schema": "loadtune/compare",
            "a": self.a_name,
            "b": self.b_name,
            "noise_floor": self.noise_floor,
            "run_spread": {"a": self.spreads[0], "b": self.spreads[1]},
            "settings_differences": self.settings,
            "dataset_differences": self.dataset,
            "a_recommendation": self.a_pick.to_dict() if self.a_pick else None,
            "b_recommendation": self.b_pick.to_dict() if self.b_pick else None,
            "calibration_ratio": finite(asdict(self.calibration)) if self.calibration else None,
            "configs": [
                {
                    "key": d.config.key,
                    "label": d.config.label(),
                    "config": d.config.to_dict(),
                    "a": asdict(d.a) if d.a else None,
                    "b": asdict(d.b) if d.b else None,
                    "a_status": d.a_status,
                    "b_status": d.b_status,
                    "ratio": finite(asdict(d.ratio)) if d.ratio else None,
                    "verdict": d.verdict,
                }
                for d in (self.diffs if diffs is None else diffs)
            ],
        }


def finite(values: dict) -> dict:
    """JSON has no infinity: an unbounded end of an interval is written as null."""
    return {k: (v if not isinstance(v, float) or math.isfinite(v) else None) for k, v in values.items()}


def compare(a: ScanResult, b: ScanResult, a_name: str = "A", b_name: str = "B") -> Comparison:
    floor = noise_floor(a, b)
    noise = (run_noise(a.configs), run_noise(b.configs))
    diffs = [diff_config(x, y, floor, noise) for x, y in pair_configs(a.configs, b.configs)]
    cal_a, cal_b = calibration_estimate(a), calibration_estimate(b)
    return Comparison(
        a_name, b_name, diffs, floor,
        settings=setting_differences(a, b),
        dataset=dataset_differences(a, b),
        a_pick=a.recommendation.config if a.recommendation else None,
        b_pick=b.recommendation.config if b.recommendation else None,
        calibration=ratio(cal_b, cal_a) if cal_a and cal_b else None,
        spreads=tuple(n.between if n.learned else None for n in noise),
    )


def select_diffs(diffs: list[ConfigDiff], filters: Filters = Filters(), sort: str = "rate", top: int | None = None) -> list[ConfigDiff]:
    """Filter by knobs and status (either side's), order (rate: A's, else B's, fastest first;
    workers; ratio: biggest slowdown first), cut to ``top``. Rows without the figure go last."""
    if sort not in COMPARE_SORT_KEYS:
        raise ViewError(f"--sort: when comparing two scans, expected one of {', '.join(COMPARE_SORT_KEYS)}, got {sort!r}")
    if top is not None and top < 1:
        raise ViewError(f"--top must be a whole number >= 1, got {top}")
    kept = [d for d in diffs if filters.keeps_knobs(config_knobs(d.config)) and filters.keeps_status(d.statuses)]

    def key(d: ConfigDiff) -> tuple:
        rate = (d.a or d.b).median if (d.a or d.b) else None
        if sort == "ratio":
            return (d.ratio is None, d.ratio.value if d.ratio else 0.0)
        if sort == "workers":
            return (d.config.num_workers, -(rate or 0.0))
        return (rate is None, -(rate or 0.0))

    ordered = sorted(kept, key=key)  # stable: ties keep A's order
    return ordered[:top] if top is not None else ordered

"""One paired comparison answers every side-by-side question: the race's ratios, a check's rounds and
its gain over PyTorch's defaults, a check against another revision, a scan's closing rounds. The
figures below are what the five estimators that ``analysis.comparison`` replaced read on recorded
observations (``fixtures/recorded/observations.json``, from real runs); the call sites must read
the same through the one function."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest

from loadtune.analysis.against import judge_against
from loadtune.analysis.comparison import SLOWER, TIED, UNDECIDED, Comparison, Prior, compare, singly
from loadtune.analysis.noise import RunNoise, paired_ratio
from loadtune.analysis.race import race_ratio
from loadtune.analysis.verdict import Change, log_ratios, machine_change, paired_change, side_by_side_gain
from loadtune.model.against import DuetRound
from loadtune.model.check import INCONCLUSIVE, PASS, REGRESSION
from loadtune.model.config import TrialConfig
from loadtune.model.paired import PairedRound
from loadtune.model.results import ConfigResult
from loadtune.model.trial import Block, Trial

def fields(c: Change) -> tuple:
    return (c.value, c.low, c.high, c.rounds, c.baseline_rounds)


RECORDED = json.loads((Path(__file__).parent / "fixtures" / "recorded" / "observations.json").read_text())
EXACT = {"rel": 1e-12}

# value, low, high, se, df, within, between of each ordered pair of the race's configs
RACE = [
    (1.0815059582497124, 0.898460147808468, 1.3018442059813804,
     0.07212267737087621, 5, 0.031210083546861004, 0.0),
    (3.726467210094117, 1.0990248065663886, 12.635345248749664,
     0.09609927664679596, 1, 0.007043654202047006, 0.01612225721005918),
    (0.9246366072900607, 0.7681410689585252, 1.1130154213731227,
     0.07212267737087621, 5, 0.031210083546860997, 0.0),
    (3.445627998319082, 2.7200196306208984, 4.364803904040305,
     0.08518266683033848, 4, 0.031737382862625306, 0.003933045835781794),
    (0.26835067736306306, 0.07914306893188817, 0.9098975692134146,
     0.09609927664679596, 1, 0.007043654202047016, 0.016122257210059176),
    (0.29022285646849894, 0.22910536692710173, 0.36764440548237165,
     0.08518266683033848, 4, 0.031737382862625264, 0.003933045835781808),
]


def trial(x: dict, **kw) -> Trial:
    return Trial(TrialConfig.from_dict(x["config"]), "ok", blocks=[Block(*b) for b in x["blocks"]], **kw)


def test_the_race_reads_as_before():
    trials = [trial(x, leg=x["leg"]) for x in RECORDED["race"]]
    configs = list(dict.fromkeys(t.config for t in trials))
    for (a, b), want in zip(itertools.permutations(configs, 2), RACE):
        r = race_ratio(trials, a, b)
        got = (r.value, r.low, r.high, r.se, r.df, r.within, r.between)
        assert got == pytest.approx(want, **EXACT)
    stream, non_blocking, w0 = configs
    assert race_ratio(trials, w0, non_blocking).against_floor(0.02) == SLOWER
    assert race_ratio(trials, non_blocking, stream).against_floor(0.02) == UNDECIDED


def test_closing_rounds_read_as_before():
    trials = [trial(x, round=x["round"]) for x in RECORDED["closing"]]
    a, b = dict.fromkeys(t.config for t in trials)
    gain = paired_ratio(ConfigResult(a, [t for t in trials if t.config == a]), ConfigResult(b, [t for t in trials if t.config == b]),
                        RunNoise(**RECORDED["noise"]))
    assert (gain.ratio.value, gain.ratio.low, gain.ratio.high, gain.rounds) == pytest.approx(
        (0.5894453515837037, 0.44615592596851444, 0.7787542477428745, 1), **EXACT)


def test_a_checks_rounds_read_as_before():
    base = [PairedRound(**r) for r in RECORDED["check"]["baseline"]]
    now = [PairedRound(**r) for r in RECORDED["check"]["now"]]
    assert fields(Change.of(paired_change(log_ratios(base), log_ratios(now)))) == pytest.approx(
        (0.6051858421644618, 0.547710211916312, 0.6647958823602798, 8, 8), **EXACT)
    assert fields(machine_change(base, now)) == pytest.approx(
        (-0.7573280164260413, -0.7731093830932714, -0.7404489775091565, 8, 8), **EXACT)
    assert side_by_side_gain(base) is None  # that baseline has no defaults in its rounds
    gain = side_by_side_gain(now)
    assert (gain.value, gain.low, gain.high) == pytest.approx((1.2620277177527472, 1.0646866895578337, 1.4959461558006937), **EXACT)


def test_checks_against_a_revision_read_as_before():
    short, long_ = ([DuetRound(**r) for r in rounds] for rounds in RECORDED["duets"])
    status, _, change = judge_against(short, 0.10)
    assert status == PASS and fields(change) == pytest.approx(
        (-0.027406977729492743, -0.08821158791032191, 0.03745252125033871, 3, 0), **EXACT)
    status, _, change = judge_against(long_, 0.10)
    assert status == REGRESSION and fields(change) == pytest.approx(
        (-0.12393407135153889, -0.14422192563745662, -0.1031652547181886, 11, 0), **EXACT)


def test_groups_that_disagree_count_for_the_mean():
    """Two processes whose observations agree within but not between: the interval rests on the two
    processes (one degree of freedom), not on the six observations."""
    apart = compare([[-0.03, -0.02, -0.04], [0.03, 0.02, 0.04]])
    alone = compare(singly([-0.03, -0.02, -0.04, 0.03, 0.02, 0.04]))
    assert apart.df == 1 and apart.between > 0 and alone.df == 5 and apart.halfwidth > 3 * alone.halfwidth
    assert compare([[0.1]]) is None and compare([[0.1, 0.2]], least=3) is None


def test_a_prior_gives_one_round_an_interval_and_a_reference_makes_a_change():
    one = compare(singly([math.log(1.2)]), prior=Prior(0.01, 10), least=1)
    assert one.value == pytest.approx(1.2) and one.df == 10 and one.low < 1.2 < one.high
    assert compare(singly([0.1]), prior=Prior(0.01, 0), least=1) is None
    moved = compare(singly([0.10, 0.12, 0.11]), reference=[0.0, 0.01, -0.01])
    assert moved.value == pytest.approx(math.exp(0.11)) and moved.reference == 3 and moved.low > 1
    assert compare(singly([0.10, 0.12]), reference=[0.0]) is None


@pytest.mark.parametrize("c, floor, tolerance", [
    (Comparison(0.80, 0.75, 0.85, 6, 2, se=0.03, df=5), SLOWER, REGRESSION),
    (Comparison(1.00, 0.99, 1.01, 6, 2, se=0.004, df=5), TIED, PASS),
    (Comparison(0.95, 0.85, 1.06, 6, 2, se=0.04, df=5), UNDECIDED, INCONCLUSIVE),
])
def test_the_verdicts_read_the_interval(c, floor, tolerance):
    assert c.against_floor(0.02) == floor and c.against_tolerance(0.10) == tolerance

"""Load from outside the scan, detected while the trials run: the counters, the decision, the record,
the re-measurement and the reports; and one real trial beside a busy loop."""

import json
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
from rich.console import Console

from conftest import FIXTURES, SPECS, fake_trial, machine_info, quick_request
from loadtune.analysis.load import disturbed, load_summary, quieter, resolution_s, sampling_s
from loadtune.engine import scan as scan_mod
from loadtune.engine.distributed.agent import with_ranks
from loadtune.engine.spec import SpecRef
from loadtune.engine.trial.harness import run_trial
from loadtune.engine.trial.load import Proc, cpu_ticks, descendants, proc_table, quota_usage_file, read_usage
from loadtune.engine.trial.setup import Timing
from loadtune.engine.trial.protocol import RankSetup
from loadtune.model.config import TrialConfig
from loadtune.model.load import LoadReading
from loadtune.model.results import ScanResult
from loadtune.model.trial import Trial
from loadtune.report.check import print_check
from loadtune.report.recommendation import recommendation_panel

STAT = """cpu  900 0 300 5000 20 0 10 0 0 0
cpu0 300 0 100 1000 5 0 5 0 0 0
cpu1 200 0 100 2000 7 0 5 0 0 0
cpu2 400 0 100 2000 8 0 0 0 0 0
intr 12345 0 0
ctxt 999
"""


def spread(busy, cpus, window):
    """Busy seconds over ``cpus`` CPUs, each filled up to the window before the next: ticks then
    sample nothing (a CPU busy all along gets every tick)."""
    out = []
    for _ in range(cpus):
        out.append(min(window, busy))
        busy = max(0.0, busy - window)
    return out


def reading(outside_cores=0.0, cpus=2, usable=2, window=2.0, own_cores=1.0, scan_s=None, quota=None, idle_loop=0.0):
    """A reading as the trial takes it, over ``window`` seconds, with ``outside_cores`` taken from
    outside; ``idle_loop`` cores of idle-loop cost show in the idle time only."""
    own = own_cores * window
    busy = own + outside_cores * window + (scan_s or 0)
    return LoadReading(window_s=window, cpus=cpus, usable_cores=usable, idle_s=cpus * window - busy - idle_loop * window,
                       cpu_busy_s=spread(busy, cpus, window), own_s=own, tick_s=0.01, tick_reads=cpus, edge_s=0.0005,
                       quota_busy_s=quota, scan_s=scan_s, scan_window_s=window if scan_s is not None else None)


# --- the counters -------------------------------------------------------------------------------------


def test_each_cpu_of_the_mask_is_read_busy_and_idle():
    assert cpu_ticks(STAT, {0, 1}) == {0: (300 + 100 + 5, 1000 + 5), 1: (200 + 100 + 5, 2000 + 7)}  # not the "cpu" total
    assert cpu_ticks(STAT, {2}) == {2: (500, 2008)}
    assert cpu_ticks(STAT, {0, 3}) is None  # a CPU of the mask missing: no reading rather than a wrong one


def test_the_quota_usage_counter_is_the_tightest_quotas(tmp_path):
    assert quota_usage_file(tmp_path) is None  # no quota: the mask is all there is
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    (tmp_path / "cpu.stat").write_text("usage_usec 2500000\nuser_usec 2000000\n")
    path, unit = quota_usage_file(tmp_path)
    assert path == tmp_path / "cpu.stat" and read_usage(path, unit) == pytest.approx(2.5)
    v1 = tmp_path / "v1"
    (v1 / "cpu").mkdir(parents=True)
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("50000\n")
    (v1 / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    (v1 / "cpu" / "cpuacct.usage").write_text("3000000000\n")
    path, unit = quota_usage_file(v1)
    assert read_usage(path, unit) == pytest.approx(3.0)


def test_the_process_tree_is_read_from_proc(tmp_path):
    for pid, stat in ((1, "1 (init) S 0 1 1 0 -1 4194560 1 2 3 4 5 6 70 80 20"),
                      (2, "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20"),
                      (10, "10 (python (trial)) R 1 10 10 0 -1 4194560 1 2 3 4 5 6 7 8 20"),
                      (11, "11 (pt_data_worker) S 10 10 10 0 -1 4194624 1 2 3 4 5 6 0 0 20"),
                      (12, "12 (kworker/0:1-events) I 2 0 0 0 -1 69238880 0 0 0 0 0 0 0 0 20")):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(stat)
    (tmp_path / "self").mkdir()
    table = proc_table(tmp_path)
    assert sorted(table) == [1, 2, 10, 11, 12]
    assert table[10] == Proc(1, False, 15) and table[12].kernel and not table[11].kernel
    assert sorted(descendants(table, 1)) == [10, 11] and descendants(table, 11) == []


# --- what counts as outside, and when it disturbs -----------------------------------------------------


def test_outside_time_leaves_out_the_trial_and_the_scans_own_process():
    assert reading(0.9).outside_cores == pytest.approx(0.9)
    assert reading(0.0, scan_s=0.05).outside_s == pytest.approx(0.0)  # the scan's samplers are not outside load
    quiet = reading(0.0)
    quiet.own_s += 0.01  # the counters' rounding never reads as negative load
    assert quiet.outside_s == 0.0


def test_the_idle_loops_cost_is_not_outside_load():
    # a trial switching tens of thousands of times a second: the idle time misses 0.1 core, the ticks do not
    switching = reading(0.0, idle_loop=0.1)
    assert switching.idle_outside_s == pytest.approx(0.2) and switching.outside_s == pytest.approx(0.0)
    assert not disturbed(switching, 0.02)
    # ...and sampled ticks alone that read high are no evidence either
    sampled = reading(0.0)
    sampled.cpu_busy_s = [2.0, 0.4]
    assert sampled.tick_outside_s == pytest.approx(0.4) and not disturbed(sampled, 0.02)


def test_the_ticks_sampling_error_grows_with_half_busy_cpus_and_the_window():
    assert sampling_s(reading(1.0)) == 0.0  # both CPUs busy all along: every tick lands on busy time
    half = reading(0.0, own_cores=0.5, cpus=1, usable=1, window=4.0)
    assert sampling_s(half) == pytest.approx(2 * (4.0 * 0.25 * 0.01) ** 0.5)


def test_under_a_quota_only_load_beyond_the_spare_cpus_or_inside_the_cgroup_counts():
    # 8 CPUs in the mask, a 2-core quota: 5 busy cores of other tenants still leave the trial its 2
    assert reading(5.0, cpus=8, usable=2).outside_cores == pytest.approx(0.0)
    assert reading(7.0, cpus=8, usable=2).outside_cores == pytest.approx(1.0)
    # ...but a process in the same cgroup is charged to the same quota
    inside = reading(0.5, cpus=8, usable=2, quota=2.0 * 1.0 + 1.0)
    assert inside.outside_cores == pytest.approx(0.5) and disturbed(inside, 0.02)


def test_a_busy_core_disturbs_a_two_core_trial_and_background_does_not():
    assert disturbed(reading(0.9), 0.02)
    assert not disturbed(reading(0.01), 0.02)  # a machine's background: within the noise floor's share
    assert not disturbed(reading(0.9, cpus=64, usable=64), 0.02)  # one core of 64 moves a figure by under 2%
    assert disturbed(reading(0.9, cpus=64, usable=64), 0.005)  # the floor is the scan's, not a constant here
    assert not disturbed(None, 0.02)  # older files, trials of several ranks: no reading, no verdict


def test_outside_time_within_the_counters_resolution_is_not_evidence():
    r = reading(0.0)
    slack = resolution_s(r) / r.window_s
    assert not disturbed(reading(slack * 0.9), 0.0)
    within_sampling = reading(slack * 1.5)  # the CPUs' idle time shows it, the sampled ticks cannot confirm it
    assert within_sampling.idle_outside_s > resolution_s(within_sampling) and not disturbed(within_sampling, 0.0)
    assert disturbed(reading(0.2), 0.0)


# --- the record ---------------------------------------------------------------------------------------


def test_the_reading_is_saved_with_its_figure_and_older_files_still_read(tmp_path):
    trial = fake_trial(TrialConfig(64, 2), 1000.0)
    trial.load = reading(0.9, scan_s=0.02)
    data = json.loads(json.dumps(trial.to_dict()))
    assert data["load"]["outside_cores"] == pytest.approx(0.9, abs=0.02)
    again = Trial.from_dict(data)
    assert again.load == trial.load
    del data["load"]
    assert Trial.from_dict(data).load is None  # a file written before the reading existed
    data["load"] = {**trial.load.to_dict(), "idle_s": -1.0}
    with pytest.raises(ValueError, match="load figures"):
        Trial.from_dict(data)
    result = ScanResult.load(FIXTURES / "tiny_scan.json")
    assert result.remeasured == []
    result.remeasured.append(trial)
    result.save(tmp_path / "r.json")
    assert ScanResult.load(tmp_path / "r.json").remeasured[0].load == trial.load


# --- measured once more -------------------------------------------------------------------------------


def loaded(config, outside, ok=True):
    trial = fake_trial(config, 1000.0) if ok else Trial(config, "failed")
    trial.load = reading(outside)
    return trial


def test_the_quieter_of_two_runs_is_kept():
    config = TrialConfig(64, 2)
    noisy, quiet, failed = loaded(config, 0.9), loaded(config, 0.1), loaded(config, 0.0, ok=False)
    assert quieter(noisy, quiet) == (quiet, noisy)
    assert quieter(quiet, noisy) == (quiet, noisy)
    assert quieter(noisy, failed) == (noisy, failed)  # a figure under load beats none


def scan_run(result, runs, budget=None):
    """A scan's Run as ``run_quietly`` uses it; ``runs`` are the trials the harness hands back in turn."""
    plan = SimpleNamespace(source=None, result=result, options=result.settings.options, strategy=None)
    plan.options.budget = budget
    return scan_mod.Run(plan, lambda config: config, lambda: None, None), iter(runs)


def test_a_disturbed_trial_is_measured_once_more_and_set_aside(monkeypatch):
    result = ScanResult.load(FIXTURES / "tiny_scan.json")
    config = TrialConfig(64, 2)
    first, second = loaded(config, 0.9), loaded(config, 0.05)
    run, runs = scan_run(result, [first, second])
    monkeypatch.setattr(scan_mod, "run_trial", lambda source, request, on_event=None: next(runs))
    assert scan_mod.run_quietly(run, config, 1) is second
    assert result.remeasured == [first] and first.round == 1
    calm = loaded(config, 0.0)
    run, runs = scan_run(result, [calm])
    assert scan_mod.run_quietly(run, config, 0) is calm  # a quiet trial runs once
    assert result.remeasured == [first]


def test_no_second_run_where_the_budget_has_no_room(monkeypatch):
    result = ScanResult.load(FIXTURES / "tiny_scan.json")
    config = TrialConfig(64, 2)
    first = loaded(config, 0.9)
    run, runs = scan_run(result, [first], budget=0.001)
    monkeypatch.setattr(scan_mod, "run_trial", lambda source, request, on_event=None: next(runs))
    assert scan_mod.run_quietly(run, config, 0) is first and result.remeasured == []


# --- the reports --------------------------------------------------------------------------------------


def rendered(renderable):
    console = Console(record=True, width=200)
    console.print(renderable)
    return " ".join(console.export_text().split())


def test_the_recommendation_says_the_figures_were_taken_under_load():
    result = ScanResult.load(FIXTURES / "tiny_scan.json")
    assert "under load" not in rendered(recommendation_panel(result))
    pick = next(t for t in result.trials if t.config == result.recommendation.config and t.ok)
    pick.load = reading(0.9)
    for t in result.trials:
        if t is not pick and t.ok:
            t.load = reading(0.0)
    result.remeasured.append(loaded(pick.config, 1.2))
    text = rendered(recommendation_panel(result))
    ok = sum(1 for t in result.trials if t.ok)
    assert f"kept up to 0.9 of the 2 usable cores busy during 1 of {ok} trials (45% of the CPU" in text
    assert "the pick's among them" in text and "defaults' among" not in text  # the pick is the defaults here: said once
    assert "1 run taken under outside load measured again" in text
    summary = load_summary(result.trials, 0.02, result.remeasured)
    assert summary.configs == (pick.config,) and summary.peak_share == pytest.approx(0.45, abs=0.01)


def test_check_says_which_of_its_trials_ran_under_load():
    from test_ci_output import check_result

    outcome = check_result("pass")
    for t in outcome.trials:
        t.load = reading(0.0)
    console = Console(record=True, width=200)
    print_check(console, outcome)
    assert "under load" not in console.export_text()
    outcome.trials[1].load = reading(0.8)
    print_check(console, outcome)
    text = " ".join(console.export_text().split())
    said = f"measured under load: processes outside loadtune kept up to 0.8 of the 2 usable cores busy during 1 of {len(outcome.trials)}"
    assert said in text


# --- a real trial beside a busy loop ------------------------------------------------------------------

LOAD_TIMING = Timing(warmup_s=0.1, block_s=0.3, blocks=4, min_blocks=4, max_s=40)


def measured_load(busy: int, ranks: RankSetup | None = None) -> LoadReading:
    """One short trial of the tiny dataset (the main process only; with ``ranks``, one per rank), with
    ``busy`` busy loops running."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    try:
        time.sleep(0.3 if busy else 0)  # the interpreters are up and spinning
        trial = run_trial(SpecRef(str(SPECS / "tiny.py")), with_ranks(quick_request(TrialConfig(32, 0), LOAD_TIMING), ranks))
    finally:
        for proc in spinners:
            proc.kill()
            proc.wait()
    assert trial.ok and trial.load is not None
    return trial.load


def no_room(quiets: list) -> None:
    """Skip where every trial meant to be quiet already read half a core or more of outside load: another
    job filled the machine (a second test suite on a shared VM), and a busy loop of ours can add no load
    to it that a reading could see. Where any was quiet, the busy loops had room, and the test fails."""
    if quiets and all(q.outside_cores > 0.5 for q in quiets):
        pytest.skip(f"the machine was busy with other work throughout ({min(q.outside_cores for q in quiets):.1f} cores "
                    "or more beside a quiet trial): no room to see a busy loop's load")


@pytest.mark.slow
def test_a_busy_loop_beside_a_trial_marks_it_disturbed_and_a_quiet_trial_reads_less():
    busy = max(1, machine_info().usable_cores // 2)  # half the usable cores: the trial keeps a core of its own
    quiets = []
    for _ in range(3):  # another job filling the machine leaves no room to see ours: measure the pair again
        quiet, loaded_reading = measured_load(0), measured_load(busy)
        assert loaded_reading.window_s >= 1.0 and loaded_reading.cpus >= 1
        assert disturbed(loaded_reading, 0.02), loaded_reading
        assert loaded_reading.scan_s is not None  # the parent's own CPU over the window was read and left out
        # CI's own machine may be busy too: the busy loops must add most of a core each to what it has
        if loaded_reading.outside_cores - quiet.outside_cores > 0.6 * busy:
            return
        quiets.append(quiet)
    no_room(quiets)
    raise AssertionError(f"busy loops added no load beside {quiet} to {loaded_reading}")


@pytest.mark.slow
def test_two_ranks_count_each_other_as_the_scans_own_and_a_busy_loop_as_outside_load():
    """Two gloo ranks on the node: read above both, each rank's CPU is the trial's own, so a quiet trial
    reads little outside load though its ranks compete for the cores, and a busy loop beside it reads
    as outside load."""
    ranks = RankSetup(nproc_per_node=2, window_s=1.2)
    quiets = []
    for _ in range(3):  # another job filling the machine leaves no room to see ours: measure the pair again
        quiet, loaded = measured_load(0, ranks), measured_load(1, ranks)
        assert quiet.window_s >= 1.0 and quiet.own_s > 0.5 * quiet.window_s  # the ranks' CPU (and their agent's)
        assert disturbed(loaded, 0.02), loaded
        if loaded.outside_cores - quiet.outside_cores > 0.6:  # most of a core: the busy loop, not the other rank
            return
        quiets.append(quiet)
    no_room(quiets)
    raise AssertionError(f"the busy loop added no load beside {quiet} to {loaded}")


def test_the_ranks_load_is_read_from_the_last_rank_past_warm_up_to_the_last_at_the_windows_end():
    """The agent reads the load above every rank of the node, over the window they share."""
    from loadtune.engine.distributed.agent import Relay
    from loadtune.engine.trial.protocol import Kind, Message

    class Meter:
        calls: list = []

        def start(self):
            self.calls.append("start")

        def stop(self):
            self.calls.append("stop")
            return reading(0.1)

    sent = []
    relay = Relay([None, None], SimpleNamespace(send=sent.append), RankSetup(nproc_per_node=2), load=Meter())
    steps = [(0, "start", []), (1, "start", []), (0, "warmup", []), (1, "warmup", ["start"]), (0, "window", ["start"]),
             (1, "window", ["start", "stop"])]
    for rank, barrier, calls in steps:
        relay.handle(rank, Message(Kind.BARRIER, barrier))
        assert Meter.calls == calls, (rank, barrier)
    assert [(m.kind, m.rank) for m in sent] == [(Kind.LOAD, None)]  # the trial's own reading, no rank's


def test_check_names_a_checked_loader_whose_main_process_faults_in_its_batches():
    """A checked config without workers whose blocks faulted in most of each batch anew gets the
    fresh-pages note: its speed rests on the allocator's state, which can flip a check between runs."""
    from dataclasses import replace

    from test_ci_output import DEFAULTS_W0, check_result

    from loadtune.model.batch import BatchInfo

    outcome = check_result("pass")
    console = Console(record=True, width=300)
    print_check(console, outcome)
    assert "fresh pages" not in console.export_text()
    outcome.config = DEFAULTS_W0
    for t in outcome.trials:
        t.config, t.batch = DEFAULTS_W0, BatchInfo(2**20)
        t.blocks = [replace(b, faulted_bytes=b.batches * 2**20) for b in t.blocks]
    print_check(console, outcome)
    assert "w0 bs64: its main process took 1 MiB of fresh pages from the kernel per batch (100%" in console.export_text()


def test_a_busy_machine_is_told_by_what_runs_now_not_by_the_load_average():
    """The load average still carries a pip install that ended seconds ago: the warning rests on the
    cores other processes keep busy as the scan starts, and names them."""
    from dataclasses import replace

    from loadtune.engine.plan import busy_notes
    info = machine_info()
    assert not busy_notes(replace(info, load_average=4.5 * info.logical_cores, outside_cores=0.05, outside_who=[]))
    busy = busy_notes(replace(info, load_average=0.1, outside_cores=0.9 * info.usable_cores, outside_who=["pip 95%"]))
    assert busy and "pip 95%" in busy[0] and "load average" not in busy[0]
    assert busy_notes(replace(info, load_average=4.5 * info.logical_cores, outside_cores=None))  # older files: all there is


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_outside_now_sees_a_process_outside_the_scan_and_names_it():
    from loadtune.engine.trial.load import outside_now
    # a spinning process that is not ours: the shell that starts it exits, so init adopts it
    spin = "import time; end = time.time() + 4\nwhile time.time() < end: pass"
    subprocess.run(["sh", "-c", f"{sys.executable} -c '{spin}' >/dev/null 2>&1 &"], check=True)
    time.sleep(0.3)
    cores, who = outside_now(1.0)
    assert cores is not None and cores >= 0.5 and any(name.startswith("python") for name in who)

"""``loadtune doctor --storage PATH``: cold random reads of real files, the mount found, whether the page
cache lets go of them, the decisions as pure functions, and the command's refusals."""

import functools
import json
import os
import random

import pytest
from typer.testing import CliRunner

from loadtune.analysis.diskread import DROPPED, droppable, level_rates, storage_note
from loadtune.cli.app import app
from loadtune.engine import diskread
from loadtune.engine.trial import pagecache
from loadtune.engine.diskread import Mount, mount_of, mountinfo_mounts
from loadtune.model.storage_read import StorageReadReport

LOCAL_DISKS = {"ext4", "xfs", "btrfs", "ext3", "ext2", "f2fs"}  # filesystems that honour POSIX_FADV_DONTNEED
QUICK = functools.partial(diskread.measure, seconds=0.1)  # short levels: the rates' size is never asserted


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """300 small files of 1-16 KiB, written back to storage (a dirty page is never dropped)."""
    root = tmp_path_factory.mktemp("dataset")
    rng = random.Random(0)
    sizes = [rng.randint(1, 16) * 1024 for _ in range(300)]
    for i, size in enumerate(sizes):
        (root / f"{i // 100}").mkdir(exist_ok=True)
        (root / f"{i // 100}" / f"{i:03d}.bin").write_bytes(rng.randbytes(size))
    os.sync()
    return root, sum(sizes)


@pytest.fixture(scope="module")
def report(dataset):
    return QUICK(str(dataset[0]))


def test_every_level_reads_the_files_at_a_positive_rate(report, dataset):
    assert [level.in_flight for level in report.levels] == [1, 4, 16, 64]
    assert report.files_found == report.sample_files == 300 and report.sample_bytes == dataset[1]
    for level in report.levels:
        assert level.files > 0 and level.bytes > 0 and level.seconds > 0
        assert level.files_per_s.median > 0 and level.mb_per_s.median > 0
        assert level.files_per_s.low <= level.files_per_s.median <= level.files_per_s.high


def test_the_mount_holding_the_path_is_found(report, dataset):
    assert report.filesystem and report.device
    assert str(dataset[0]).startswith(report.mount_point.rstrip("/") + "/") or report.mount_point == "/"


def test_the_page_cache_lets_go_of_the_files_on_a_local_disk(report):
    if report.filesystem not in LOCAL_DISKS:
        pytest.skip(f"the temporary folder is on {report.filesystem}, not a local disk's filesystem")
    assert report.resident_after_read is not None and report.resident_after_read > 0.5
    assert report.droppable is True and report.cold and report.note is None


def test_the_report_survives_its_json(report):
    data = json.loads(json.dumps(report.to_dict()))
    assert data["cold"] == report.cold
    again = StorageReadReport.from_dict({**data, "added_by_a_newer_version": 1})
    assert again == report


def test_a_drop_that_left_the_files_cached_is_not_a_drop():
    assert droppable(0.97, asked=16) is False  # a network filesystem that ignores the advice
    assert droppable(DROPPED, asked=16) is True and droppable(DROPPED + 0.01, asked=16) is False
    assert droppable(0.0, asked=16) is True
    assert droppable(0.0, asked=0) is False  # the kernel took the advice for no file
    assert droppable(None, asked=16) is None  # mincore could not tell
    note = storage_note(False, 1.0, 0.97, "nfs4")
    assert "nfs4 kept 97%" in note and "warm, not cold" in note and "cold figures could not be measured" in note
    assert storage_note(True, 1.0, 0.0, "ext4") is None
    assert "every read comes from storage" in storage_note(True, 0.0, 0.0, "fuse.sshfs")


def test_a_large_file_is_read_in_distinct_pieces_and_small_ones_whole(tmp_path):
    big, small = tmp_path / "big.u8", tmp_path / "small.bin"
    big.write_bytes(bytes(range(256)) * (5 * 4096 + 16))  # 5 MiB and a little: five whole pieces of 1 MiB
    small.write_bytes(b"x" * 1000)
    got = diskread.pieces([str(big), str(small)], random.Random(0))
    whole = [p for p in got if p.length is None]
    parts = [p for p in got if p.length is not None]
    assert [p.path for p in whole] == [str(small)]
    assert len(parts) == 5 and len({p.offset for p in parts}) == 5
    assert all(p.offset % diskread.PIECE == 0 and p.offset + p.length <= big.stat().st_size for p in parts)
    buffer = bytearray(256 * 1024)
    assert pagecache.read_file(str(big), buffer, 3 * diskread.PIECE, diskread.PIECE) == diskread.PIECE
    assert pagecache.read_file(str(big), buffer, 3 * diskread.PIECE + 7, 10) == 10 and buffer[:10] == bytes(range(7, 17))
    assert len(diskread.pieces([str(big)], random.Random(0), most=2)) == 2


def test_doctor_reads_one_large_file_in_many_pieces_and_says_so(tmp_path):
    """A single multi-MiB file (an array a dataset maps) gives many reads a level, each cold, and the
    table counts reads, not files."""
    from rich.console import Console

    from loadtune.report.doctor import print_reads

    (tmp_path / "array.u8").write_bytes(os.urandom(4 * diskread.PIECE))
    os.sync()
    report = QUICK(str(tmp_path))
    assert report.piece_bytes == diskread.PIECE and report.files_found == 1
    assert all(level.files >= 1 and level.bytes == level.files * diskread.PIECE for level in report.levels)
    assert StorageReadReport.from_dict(json.loads(json.dumps(report.to_dict()))) == report
    console = Console(record=True, width=120)
    print_reads(console, report)
    text = console.export_text()
    assert "those over 1 MiB in pieces of it at random offsets" in " ".join(text.split()) and "reads/s" in text


def test_the_bandwidth_reads_the_dataset_cold_at_the_best_depth(dataset, tmp_path):
    big = tmp_path / "big.u8"
    big.write_bytes(os.urandom(3 * diskread.PIECE))
    os.sync()
    level = diskread.read_bandwidth(pagecache.files_under([str(dataset[0])]) + (str(big),), levels=(1, 4), seconds=0.1)
    assert level is not None and level.in_flight in (1, 4) and level.mb_per_s.median > 0
    assert diskread.read_bandwidth([str(tmp_path / "missing")]) is None


def test_level_rates_are_the_median_of_equal_windows():
    stamps = [0.05, 0.15, 0.16, 0.25, 0.35, 0.36]  # 1, 2, 1, 2 reads in four windows of 0.1 s
    files, mb = level_rates(stamps, [1_000_000] * len(stamps), 0.0, 0.4, 4)
    assert files.n == 4 and files.median == pytest.approx(15.0) and mb.median == pytest.approx(15.0)


def test_the_longest_mount_point_above_the_path_holds_it():
    text = ("22 1 254:0 / / rw - ext4 /dev/vda rw\n"
            "30 22 0:40 / /data rw - nfs4 server:/export rw\n"
            "31 22 0:41 / /data\\040sets rw - fuse.gcsfuse bucket rw\n"
            "32 30 0:42 / /data rw - xfs /dev/nvme0n1 rw\n")
    mounts = mountinfo_mounts(text)
    assert Mount("/data sets", "fuse.gcsfuse", "bucket") in mounts
    assert mount_of("/data/images/a.jpg", mounts) == Mount("/data", "xfs", "/dev/nvme0n1")  # mounted on top of the nfs4
    assert mount_of("/data sets/a", mounts).fstype == "fuse.gcsfuse"
    assert mount_of("/database", mounts).fstype == "ext4"  # /data is not above /database


def test_a_missing_or_empty_path_is_refused_with_exit_2(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "zeros").mkdir()
    (tmp_path / "zeros" / "a").write_bytes(b"")
    for name, said in (("missing", "no such file or folder"), ("empty", "holds no file"), ("zeros", "none with data")):
        got = CliRunner().invoke(app, ["doctor", "--no-pace", "--no-bandwidth", "--storage", str(tmp_path / name)],
                                 env={"COLUMNS": "200"})
        assert got.exit_code == 2, got.output
        assert said in got.output and "Traceback" not in got.output


def test_doctor_json_holds_the_storage(dataset, monkeypatch):
    monkeypatch.setattr(diskread, "measure", functools.partial(diskread.measure, seconds=0.05, levels=(1, 4)))
    got = CliRunner().invoke(app, ["doctor", "--no-pace", "--no-bandwidth", "--format", "json", "--storage", str(dataset[0])])
    assert got.exit_code == 0, got.output
    data = json.loads(got.stdout)
    assert data["schema"] == "loadtune/doctor"
    assert [level["in_flight"] for level in data["storage"]["levels"]] == [1, 4]
    assert data["storage"]["path"] == str(dataset[0])

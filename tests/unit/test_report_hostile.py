"""The report on crafted job directories (issue 47 items 4, 7, 8, 9, 10, 12): it never hangs, never exhausts
memory, and one bad file or line is one skipped line, never the end of the report."""

from __future__ import annotations

import json
import os
import pickle

import pytest

from nemo_resiliency_plugins.core.diagnostics import FLIGHT_RECORDER_PREFIX
from nemo_resiliency_plugins.tools.report import parse_attempt, report_experiment
from tests.report_dirs import BATCH_LOG, GOOD_LOG, report_cli, slurm_job


def test_the_good_directory_reports(tmp_path):
    (job,) = report_experiment(slurm_job(tmp_path))
    assert [row.detected_by for row in job.rows] == ["rank killed by signal 9", None]
    assert job.rows[0].restart_s == 2.0 and job.finished and job.skipped == []


def test_a_fifo_named_like_a_log_is_skipped_not_waited_on(tmp_path):
    job = slurm_job(tmp_path)
    os.mkfifo(job / "log-job_1.out")
    os.mkfifo(job / "sbatch_other.out")
    done = report_cli(str(job), "--json")  # on main this blocked for ever in open()
    assert done.returncode == 0, done.stderr
    (data,) = json.loads(done.stdout)
    assert "log-job_1.out: skipped, a FIFO (only regular files are read)" in data["skipped"]
    assert "sbatch_other.out: skipped, a FIFO (only regular files are read)" in data["skipped"]
    assert data["finished"] is True


def test_a_directory_named_like_a_log_is_skipped(tmp_path, capsys):
    job = slurm_job(tmp_path)
    (job / "log-job_1.out").mkdir()
    (job / "sbatch_x.out").mkdir()
    (report,) = report_experiment(job)
    assert "log-job_1.out: skipped, a directory (only regular files are read)" in report.skipped
    assert "sbatch_x.out: skipped, a directory (only regular files are read)" in report.skipped
    assert [a.attempt for a in report.attempts] == [0]


def test_a_node_range_larger_than_any_job_is_one_skipped_line(tmp_path):
    batch = "++ scontrol show hostnames 'n[1-999999999999]'\n" + BATCH_LOG.split("\n", 1)[1]
    done = report_cli(str(slurm_job(tmp_path, batch=batch)), "--json")  # on main: a trillion names, MemoryError
    assert done.returncode == 0, done.stderr[-2000:]
    (data,) = json.loads(done.stdout)
    assert any("skipped a node list" in line and "more than 65536 nodes" in line for line in data["skipped"])
    assert data["finished"] is True


def test_a_restart_just_after_new_year_takes_seconds():
    log = (
        "2026-12-31 23:59:50,000 [INFO] [nrp-node1] [workload:?(?) infra:0(4242)] launcher.py:1 ft_launcher: started\n"
        "E0101 00:00:01.000000 4242 torch/distributed/elastic/agent/server/api.py:1] failed (exitcode: -9) "
        "local_rank: 1 (pid: 7) of binary: python\n"
        "I0101 00:00:02.000000 4242 torch/distributed/elastic/agent/server/api.py:1]   restart_count=1\n"
        "2027-01-01 00:00:03,000 [INFO] [nrp-node1] [workload:?(?) infra:0(4242)] profiling.py:93   - "
        "Cycle: 1 Event: worker_start_completed Node: h_4242_0 Rank: 0 "
        "Time: 2027-01-01 00:00:03.000000\n"
    )
    report = parse_attempt(log)
    assert report.cycles[0].detected_at == "2027-01-01 00:00:01.000"
    assert report.cycles[0].restart_s == 2.0  # main: 31536002.0 (the January stamp read in the log's first year)


def test_torch_lines_before_the_first_dated_line_belong_to_the_year_before():
    log = (
        "I1231 23:59:59.000000 4242 torch/distributed/elastic/agent/server/api.py:1]   restart_count=0\n"
        "2027-01-01 00:00:01,000 [INFO] [nrp-node1] [workload:?(?) infra:0(4242)] launcher.py:1 ft_launcher: started\n"
    )
    assert parse_attempt(log).first == "2026-12-31 23:59:59.000"


@pytest.mark.parametrize(
    "bad",
    [
        # an impossible NVRx stamp
        "2026-13-45 10:00:00,000 [INFO] [nrp-node1] [workload:?(?) infra:0(4242)] x.py:1 month 13",
        "E1345 10:00:05.000000 4242 torch/distributed/elastic/agent/server/api.py:1] restart_count=0",
        "[default0]:[rank0] FINISHED step=" + "9" * 5000,  # a number past Python's int() digit limit
        "x" * 70000 + " FINISHED step=1",  # a line longer than any launcher writes
    ],
)
def test_one_bad_line_is_one_skipped_line(tmp_path, bad):
    log = GOOD_LOG.replace("[default0]:[rank0] FINISHED", bad + "\n[default0]:[rank0] FINISHED")
    (job,) = report_experiment(slurm_job(tmp_path, log=log))  # main: ValueError, exit 2
    assert job.finished and job.rows[0].restart_s == 2.0
    (said,) = job.attempts[0].skipped
    assert "skipped 1 unreadable line(s), the first line 5: " in said


def _entry(seq: int) -> dict:
    return {"process_group": ["0", "default_pg"], "collective_seq_id": seq, "profiling_name": "gloo:all_reduce",
            "state": "started", "frames": []}  # fmt: skip


def test_a_flight_dump_with_a_5000_digit_sequence_number_is_left_out(tmp_path):
    job = slurm_job(tmp_path)
    (job / f"{FLIGHT_RECORDER_PREFIX}0").write_bytes(pickle.dumps({"entries": [_entry(10**5000)]}))
    (job / f"{FLIGHT_RECORDER_PREFIX}1").write_bytes(pickle.dumps({"entries": [_entry(3)]}))
    done = report_cli(str(job), "--json")  # main: str() of the number raised ValueError, exit 2
    assert done.returncode == 0, done.stderr[-2000:]
    (data,) = json.loads(done.stdout)
    assert data["flight_recorder"] == ["rank 0: ", "rank 1: default_pg #3 gloo:all_reduce started"]


def test_a_small_flight_dump_cannot_ask_for_terabytes(tmp_path):
    job = slurm_job(tmp_path)
    # 1 KB: protocol 4, BINBYTES8 claiming 2**40 bytes, then a little data
    (job / f"{FLIGHT_RECORDER_PREFIX}0").write_bytes(b"\x80\x04\x8e" + (2**40).to_bytes(8, "little") + b"x" * 1000)
    os.mkfifo(job / f"{FLIGHT_RECORDER_PREFIX}1")
    done = report_cli(str(job), "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    (data,) = json.loads(done.stdout)
    unreadable = [line for line in data["flight_recorder"] if line.startswith("unreadable: ")]
    assert len(unreadable) == 2 and "not a regular file" in unreadable[1]


def test_the_timeline_title_is_literal_text(tmp_path):
    job = slurm_job(tmp_path).rename(tmp_path / r"job $\frac$ 3")  # the title names the job's own folder
    png = tmp_path / "t.png"
    done = report_cli(str(job), "--timeline", str(png))  # main: matplotlib's mathtext raised ValueError, exit 2
    assert done.returncode == 0, done.stderr[-2000:]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

"""``nemo-resiliency report`` reads PyTorch's flight-recorder dumps (FaultTolerancePlugin(diagnostics=True)).

The dumps are made by real torch: two gloo ranks (``tests/flight_recorder_ranks.py``) started with the environment
the real plugin gives a LocalExecutor job, one of them inside a collective the other never entered; each writes its
recorder with torch's own dump function into the file the plugin names (gloo records the buffer an NCCL watchdog
would write on a timeout, in the same format; the NCCL dump itself is proven on the GPU machine,
``benchmarks/gpu/flight_recorder_proof.py``).
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from nemo_resiliency_plugins import FaultTolerancePlugin
from nemo_resiliency_plugins.core.diagnostics import FLIGHT_RECORDER_PREFIX
from nemo_resiliency_plugins.tools.cli import main
from nemo_resiliency_plugins.tools.report.flight import flight_report, load_dump
from tests.helpers import TRAIN, add_job, launch_command, local
from tests.unit.test_report import unpack

RANKS = Path(__file__).resolve().parents[1] / "flight_recorder_ranks.py"
NCCL_DUMP = Path(__file__).resolve().parents[1] / "fixtures" / "flight-recorder" / "nccl-timeout"


@pytest.fixture(scope="module")
def dumps(tmp_path_factory) -> Path:
    """A job directory holding the two ranks' dumps, written where the plugin's environment says."""
    import nemo_run as run

    job = add_job(run.Script(path=TRAIN, entrypoint="python"), local(), [FaultTolerancePlugin(diagnostics=True)])
    _, _, plugin_env = launch_command(job)
    job_dir = Path(job.executor.job_dir)
    job_dir.mkdir(parents=True, exist_ok=True)
    assert plugin_env["TORCH_FR_DUMP_TEMP_FILE"] == f"{job_dir}/{FLIGHT_RECORDER_PREFIX}"
    wanted = ("TORCH_FR_", "TORCH_NCCL_", "PYTHONFAULTHANDLER")
    env = {**os.environ, **{k: v for k, v in plugin_env.items() if k.startswith(wanted)}}
    store = tmp_path_factory.mktemp("store") / "store"
    ranks = [
        subprocess.Popen([sys.executable, str(RANKS), str(rank), "2", str(store)], env=env, cwd=Path(TRAIN).parent)
        for rank in range(2)
    ]
    assert [rank.wait(timeout=180) for rank in ranks] == [0, 0]
    return job_dir


def test_the_rank_that_never_entered_the_collective_is_named(dumps):
    report = flight_report(dumps)
    assert report is not None and report.unreadable == []
    assert [Path(f).name for f in report.files] == [f"{FLIGHT_RECORDER_PREFIX}0", f"{FLIGHT_RECORDER_PREFIX}1"]
    newest = {rank: {c.group: c for c in colls} for rank, colls in report.newest.items()}
    assert (newest[0]["default_pg"].seq, newest[0]["default_pg"].op) == (4, "gloo:all_reduce")
    assert (newest[1]["default_pg"].seq, newest[1]["default_pg"].op) == (3, "gloo:all_reduce")
    assert newest[0]["default_pg"].where.startswith("main (flight_recorder_ranks.py:")  # the caller, not torch's
    assert report.behind == ["rank 1: last in default_pg #3, the others in #4 gloo:all_reduce"]


def test_the_job_report_prints_and_returns_it(dumps, tmp_path, capsys):
    # A real job's saved experiment (the local kill-then-hang job) with the dumps in its task's folder, the
    # executor's job_dir, where the plugin has torch write them.
    job_dir = unpack("local-ft-kill-then-hang", tmp_path)
    folder = job_dir / "ft-kill-hang"
    for dump in dumps.glob(f"{FLIGHT_RECORDER_PREFIX}*"):
        (folder / dump.name).write_bytes(dump.read_bytes())
    with pytest.raises(SystemExit) as done:
        main(["report", str(job_dir), "--json"])
    assert done.value.code == 0
    (data,) = json.loads(capsys.readouterr().out)
    assert data["flight_recorder_behind"] == ["rank 1: last in default_pg #3, the others in #4 gloo:all_reduce"]
    with pytest.raises(SystemExit) as done:
        main(["report", str(job_dir)])
    out = capsys.readouterr().out
    assert "flight recorder: never entered: rank 1: last in default_pg #3" in out


def test_an_nccl_watchdog_dump_written_where_the_plugin_said():
    # Made on the lent GPU machine (H100, torch 2.11.0+cu130, NCCL 2.28.9) by benchmarks/gpu/flight_recorder_proof.py:
    # one NCCL rank with the plugin's environment, collective #4 queued behind a spinning kernel, process-group
    # timeout 10 s; torch's watchdog wrote this file on the timeout (the job then ended with SIGABRT).
    report = flight_report(NCCL_DUMP)
    assert report is not None and report.unreadable == [] and report.behind == []
    ((newest,),) = report.newest.values()
    assert (newest.group, newest.seq, newest.op, newest.state) == ("default_pg", 4, "nccl:all_reduce", "scheduled")
    assert newest.where == "<module> (<string>:11)"  # the proof's own line, past torch's frames


def test_a_dump_cannot_run_code_in_the_reader(tmp_path):
    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path}/ran",))

    (tmp_path / f"{FLIGHT_RECORDER_PREFIX}0").write_bytes(pickle.dumps(Payload()))
    (tmp_path / f"{FLIGHT_RECORDER_PREFIX}1").write_bytes(pickle.dumps({"entries": "not a list"}))
    report = flight_report(tmp_path)
    assert not (tmp_path / "ran").exists()
    assert report.newest == {} and len(report.unreadable) == 2
    assert "holds no classes" in report.unreadable[0] and "no 'entries' list" in report.unreadable[1]
    with pytest.raises(ValueError, match="not a flight-recorder dump"):
        load_dump(b"not a pickle")
    assert flight_report(tmp_path / "nothing-here") is None

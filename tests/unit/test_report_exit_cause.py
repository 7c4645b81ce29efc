"""``nemo-resiliency report`` names the rank that failed first, not the rank it took down.

torch's elastic agent logs one failure per poll of its workers: the earliest by whole-second time stamps, ties to the
lowest local rank. When one poll finds a SIGKILLed rank and the rank that then failed in its next collective (gloo:
"Connection closed by peer"), torch's line names the second. Seen in CI: a Docker crash-loop job's report said "rank
exited with code 1" for a kill of rank 1. Here real NVRx ``ft_launcher`` runs two real gloo ranks
(``tests/peer_lost_ranks.py``) with a 20 s poll interval, so that one poll sees both exits in every cycle.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nemo_resiliency_plugins.tools.report import PEER_NOTE, parse_attempt

pytestmark = pytest.mark.slow

RANKS = Path(__file__).resolve().parents[1] / "peer_lost_ranks.py"


@pytest.fixture(scope="module")
def log(tmp_path_factory) -> str:
    """ft_launcher's output (``--tee 3``, as NeMo-Run launches it) of two cycles: one restart, then it gives up."""
    launcher = shutil.which("ft_launcher", path=os.path.dirname(sys.executable))
    assert launcher is not None, "NVRx's ft_launcher is not installed beside this interpreter"
    # torch's agent sleeps the interval before each poll: both ranks are gone (torch's import and two all_reduces,
    # a few seconds even on a loaded host) before the first poll after their start. That poll then records rank 0's
    # failure before rank 1's (it walks the local ranks in order; a time stamp is the poll's whole second), and torch
    # names the earliest, the first on a tie: rank 0, every time. LOGLEVEL=INFO: torch's agent logs each cycle's
    # restart_count, as in a NeMo-Run job.
    command = [launcher, "--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:0", "--nnodes", "1"]
    command += ["--nproc-per-node", "2", "--tee", "3", "--max-restarts", "1", "--monitor-interval", "20", str(RANKS)]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path_factory.mktemp("peer-lost"),
        env={**os.environ, "LOGLEVEL": "INFO"},
    )
    assert done.returncode != 0, done.stdout[-3000:]
    return done.stdout + done.stderr


def test_torch_names_the_rank_that_lost_its_peer(log):
    """The premise: torch's own line names rank 0's exit 1 (not rank 1's SIGKILL) in both cycles."""
    lines = [line for line in log.splitlines() if "failed (exitcode:" in line]
    assert [line.split("failed ")[1].split(" (pid")[0] for line in lines] == ["(exitcode: 1) local_rank: 0"] * 2, log
    assert "Connection" in log and "by peer" in log


def test_a_restarted_cycle_says_the_named_rank_only_lost_a_peer(log):
    """Cycle 0 was restarted: no line of the log names the killed rank, so the row says what it knows."""
    first = parse_attempt(log).cycles[0]
    assert first.exit_after_peer and first.exit_code == 1
    assert first.detected_by == f"rank exited with code 1{PEER_NOTE}"
    assert first.exits == ["local rank 0 exited with code 1"]


def test_the_last_cycle_names_the_killed_rank_from_nvrx_s_list(log):
    """NVRx lists every failure of the last poll when it gives up: the report names the SIGKILLed rank."""
    last = parse_attempt(log).cycles[-1]
    assert (last.detected_by, last.detected_on_rank, last.exit_code) == ("rank killed by signal 9", 1, -9)
    assert not last.exit_after_peer
    assert last.exits == ["local rank 0 exited with code 1"]  # torch's own line still named rank 0

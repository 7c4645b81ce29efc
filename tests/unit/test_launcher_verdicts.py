"""Verdicts from the launchers' own lines only (issue 51 item 3, issue 47 class 15): a rank that prints NVRx's
verdict lines verbatim decides nothing, on the batch host (the requeue guard's bash, core/sbatch/*.sh, whose
patterns are core/sbatch/log_lines.sh) or in ``nemo-resiliency report`` (``job/log_lines.is_launcher_line``).

Every job-log fixture (real runs, tests/fixtures/job-logs/) is read by real bash through the guard's and the spare
block's functions, as it ran and with rank lines that print each verdict line verbatim (torch elastic's prefix in
front, as a rank's output reaches the log; with srun's label; with the diagnostics prefix): the verdicts do not
change. The report's reading of the same launcher lines gives the same answer as the guard's on every fixture.
The same spoofing on the real local Slurm: ``NRP_SPOOF_LINES=1`` on the requeue, crash-loop and spare jobs of
tests/slurm/test_fault_tolerance_slurm.py.
"""

from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

import pytest

from nemo_resiliency_plugins.core import slurm_script
from nemo_resiliency_plugins.job.log_lines import is_launcher_line
from nemo_resiliency_plugins.testing.faults import SPOOF_LINES
from nemo_resiliency_plugins.tools.report import launcher_verdict, report_experiment
from tests.slurm_fixture import local_slurm  # noqa: F401
from tests.unit.test_report import FIXTURES, unpack

ALL_FIXTURES = sorted(p.name[: -len(".tar.gz")] for p in FIXTURES.glob("*.tar.gz"))

#: What a careless rank prints besides SPOOF_LINES: srun's node line, NVRx's store host's failure, a section timeout
#: and Megatron Bridge's straggler lines quoted inside a longer line.
QUOTED = (
    "srun: error: nrp-node4: task 3: Killed",
    "2026-12-07 06:12:44,265 [ERROR] [vm] [workload:?(?) infra:0(0)] launcher.py:3745 Some rank(s) exited with "
    "non-zero exit code: {0: ProcessFailure(...)}. Agent's exit code = 1",
    "2026-12-07 06:12:44,265 [WARNING] [vm] [workload:?(0) infra:0(0)] rank_monitor_server.py:522 [Cycle 0] "
    "Section 'step' has been open for 6.16 seconds. Timeout is 6.00 seconds.",
    "echo 'Exiting program due to straggler detection.' >> notes",
    "STRAGGLER DETECTION WARNING: Some GPUs have worse relative performance. Affected ranks: "
    "{StragglerId(rank=0, node='nrp-node1')} was seen last week",
)
PREFIXES = ("[default0]:", "0: [default1]:", "[default0]:[rank0]:")


def _spoof(text: str) -> str:
    """``text`` with every spoofed line, under each rank prefix, at its start and at its end."""
    spoof = "".join(prefix + line + "\n" for prefix in PREFIXES for line in (*SPOOF_LINES, *QUOTED))
    return spoof + text + ("" if text.endswith("\n") or not text else "\n") + spoof


def _attempt_logs(job_dir: Path) -> list[Path]:
    """Each attempt's step log: Slurm's log-*_<n>.out, a LocalExecutor's combined.log."""
    return sorted(job_dir.rglob("log-*.out")) + sorted(job_dir.rglob("combined.log"))


# Each verdict the guard reads from a step's log, one "name=value" line each (reading the log files it marked).
READ = """
echo "reason=$(nrp_no_restart_reason)"
echo "zero=$(nrp_step_log | nrp_launcher_lines | grep -cE "$NRP_RE_EXIT_ZERO")"
echo "nonzero=$(nrp_step_log | nrp_launcher_lines | grep -cE "$NRP_RE_EXIT_NONZERO")"
echo "finished=$(SLURM_JOB_NUM_NODES=1 NRP_SPARE_NODES=0 nrp_spare_finished && echo 1 || echo 0)"
echo "store_host=$(nrp_store_host_failed)"
echo "straggler_stop=$(nrp_straggler_stopped && echo 1 || echo 0)"
echo "stragglers=$(nrp_straggler_nodes | paste -sd, -)"
echo "hung=$(nrp_hung_rank_node)"
echo "failed_node_line=$(grep -m1 -E "$NRP_RE_SRUN_TASK_ERROR" "$NRP_SRUN_ERR")"
"""


def guard_reads(tmp_path: Path, text: str, srun_err: str = "") -> dict[str, str]:
    """The guard's verdicts on ``text`` as one step's log, by real bash (the guard and the spare block loaded)."""
    log, err = tmp_path / "step.log", tmp_path / "srun.err"
    log.write_text("")
    err.write_text(srun_err)
    program = "\n".join(
        [
            "TORCHX_MAX_RETRIES=0 SLURM_JOB_ID=7 SLURM_JOB_NODELIST='nrp-node[1-4]' SLURM_NTASKS_PER_NODE=1",
            slurm_script._CHAIN_HELPERS,
            slurm_script._REQUEUE_GUARD,
            slurm_script._SPARE_NODES,
            f"NRP_SRUN_ERR={err}; NRP_SCONTROL='command scontrol'",
            f"nrp_step_logs_mark srun --output {log} ft_launcher x",
            f"cat {tmp_path / 'text'} >> {log}",
            READ,
        ]
    )
    (tmp_path / "text").write_text(text)
    done = subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, (done.stdout, done.stderr)
    return dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)


def _srun_err(job_dir: Path) -> str:
    """srun's own lines from the batch log (the guard's srun function captures them apart on the batch host)."""
    return "".join(
        line + "\n"
        for path in sorted(job_dir.rglob("sbatch_*.out"))
        for line in path.read_text(errors="replace").splitlines()
        if line.startswith("srun: ")
    )


@pytest.mark.parametrize("fixture", ALL_FIXTURES)
def test_a_rank_that_prints_the_verdict_lines_changes_no_verdict_of_the_guard(local_slurm, tmp_path, fixture):  # noqa: F811
    job_dir = unpack(fixture, tmp_path)
    err = _srun_err(job_dir)
    for log in _attempt_logs(job_dir):
        text = log.read_text(errors="replace")
        as_run = guard_reads(tmp_path, text, err)
        spoofed = guard_reads(tmp_path, _spoof(text), err + "".join(p + QUOTED[0] + "\n" for p in PREFIXES))
        assert spoofed == as_run, (log.name, as_run, spoofed)


@pytest.mark.parametrize("fixture", ALL_FIXTURES)
def test_the_guard_and_the_report_read_the_same_launcher_verdict(local_slurm, tmp_path, fixture):  # noqa: F811
    """One answer from both readers, per attempt: NVRx's no-restart reason and the launchers' exit codes (the
    guard's spare verdict is the exit codes': none non-zero and at least the active count of zeros)."""
    job_dir = unpack(fixture, tmp_path)
    for log in _attempt_logs(job_dir):
        for text in (log.read_text(errors="replace"), _spoof(log.read_text(errors="replace"))):
            bash = guard_reads(tmp_path, text)
            python = launcher_verdict(text)
            assert bash["reason"] == (python.no_restart or ""), log.name
            assert int(bash["zero"]) == python.exits.count(0), (log.name, python.exits)
            assert int(bash["nonzero"]) == sum(1 for code in python.exits if code), (log.name, python.exits)
            finished = not any(python.exits) and python.exits.count(0) >= 1
            assert bash["finished"] == str(int(finished)), (log.name, python.exits)


def test_the_fixtures_hold_each_verdict_the_guard_reads():
    """The agreement above covers each reading on at least one real log: a no-restart reason, exit 0 and non-zero
    exits, a stack-dump hang."""
    seen = {"reason": False, "zero": False, "nonzero": False}
    for fixture in ALL_FIXTURES:
        with tarfile.open(FIXTURES / f"{fixture}.tar.gz") as tar:
            for member in tar.getmembers():
                name = Path(member.name).name
                if not (name.startswith("log-") or name == "combined.log"):
                    continue
                verdict = launcher_verdict(tar.extractfile(member).read().decode(errors="replace"))
                seen["reason"] |= verdict.no_restart is not None
                seen["zero"] |= 0 in verdict.exits
                seen["nonzero"] |= any(verdict.exits)
    assert all(seen.values()), seen


def _experiment(root: Path) -> Path:
    """The saved experiment in an unpacked fixture: the folder of its _CONFIG nearest the top."""
    return min((p.parent for p in root.rglob("_CONFIG")), key=lambda p: len(p.parts))


def test_the_report_of_a_spoofed_log_is_the_report_of_the_log(tmp_path):
    """``nemo-resiliency report`` on a job whose ranks printed every verdict line: the same cycles, causes, exit
    codes and detections as on the job's real log."""
    for fixture in ALL_FIXTURES:
        (as_run,) = report_experiment(_experiment(unpack(fixture, tmp_path / "a")))
        spoofed_dir = _experiment(unpack(fixture, tmp_path / "b"))
        for log in _attempt_logs(spoofed_dir):
            log.write_text(_spoof(log.read_text(errors="replace")))
        (spoofed,) = report_experiment(spoofed_dir)
        keep = ("cycle", "detected_by", "detected_on_rank", "exit_code", "exits", "restart_s", "node")
        for before, after in zip(as_run.rows, spoofed.rows, strict=True):
            assert [getattr(after, k) for k in keep] == [getattr(before, k) for k in keep], (fixture, before, after)


@pytest.mark.parametrize(
    ("line", "launcher"),
    [
        *((text, True) for text in SPOOF_LINES),
        *((prefix + text, False) for prefix in PREFIXES for text in SPOOF_LINES),
        ("I1207 06:10:35.813000 22136 torch/distributed/elastic/agent/server/api.py:707] [default] Rendezvous", True),
        ("srun: error: nrp-node2: task 1: Killed", True),
        ("nemo-resiliency-plugins: step exited 0 without a preemption signal: finished, not requeued", True),
        ("[default0]:[rank0] FINISHED step=40 params_sha256=00", False),
    ],
)
def test_a_line_is_a_launcher_s_only_in_the_launcher_s_own_shape(line, launcher):
    assert is_launcher_line(line) is launcher

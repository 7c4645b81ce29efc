"""Which node hung, from the launchers' own log: the requeue guard's bash functions, run by real bash on log lines
in NVRx 0.7's format (copied from the local Slurm runs of tests/slurm/test_fault_tolerance_slurm.py), and how
FaultTolerancePlugin switches the watchdog on.

The end-to-end case (a node SIGSTOPped on a real 2-node Slurm job, excluded on the requeue whichever node srun
named first) is ``test_two_node_job_leaves_a_lost_node_and_a_hung_node_behind``.
"""

from __future__ import annotations

import subprocess

import pytest

from nemo_resiliency_plugins import FaultTolerancePlugin, ResiliencyConfigError
from nemo_resiliency_plugins.core import slurm_script
from tests.helpers import add_job, logged, slurm

W = "[WARNING] [vm] [workload:?(0) infra:{t}(0)] rank_monitor_server.py:522"
I = "[INFO] [vm] [workload:?(?) infra:{t}(0)]"  # noqa: E741
E = "[ERROR] [vm] [workload:?(?) infra:{t}(0)] launcher.py:3745"


def line(time: str, fmt: str, task: int, text: str) -> str:
    return f"2026-12-04 21:58:{time} {fmt.format(t=task)} {text}"


TIMEOUT = "[Cycle 0] Section 'step' has been open for 6.22 seconds. Timeout is 6.00 seconds."
EXITED = "Some rank(s) exited with non-zero exit code: {1: ProcessFailure(...)}. Agent's exit code = 1"
HEALTHY_HOST = [  # node 0 stopped; node 1 (store host) times out, exits; the step's end resumes node 0, which logs
    line("10,480", I, 1, "ft_rendezvous_barrier.py:2752 Assigned active rank 1 (round=0)"),
    line("10,487", I, 0, "ft_rendezvous_barrier.py:2752 Assigned active rank 0 (round=0)"),
    "[default0]:[rank0] STEP 12 loss=0.5",
    line("30,236", W, 1, TIMEOUT),
    line("30,424", I, 1, "launcher.py:1002 Stopping workers... Timeout = 15 sec."),
    line("35,448", E, 1, EXITED),
    line("35,983", W, 0, TIMEOUT.replace("6.22", "11.97")),
    line("35,991", I, 0, "launcher.py:1750 All ranks exited gracefully. Launcher exiting without an error."),
]
STALLED = HEALTHY_HOST[:4]  # node 0 (the stopped store host) silent; node 1 blocked in a store call, silent too
RANK_HANG = [  # a rank hung inside a collective: both nodes' monitors time out
    line("30,236", W, 1, TIMEOUT),
    line("31,010", W, 0, TIMEOUT),
    line("35,448", E, 1, EXITED),
]
CRASH = [  # a rank failed first: srun's line decides
    line("30,236", E, 1, EXITED),
    line("31,010", W, 0, TIMEOUT),
]
QUIET = HEALTHY_HOST[:3]


def run_bash(script: str) -> subprocess.CompletedProcess:
    program = f"TORCHX_MAX_RETRIES=0\n{slurm_script._CHAIN_HELPERS}\n{slurm_script._REQUEUE_GUARD}\n{script}"
    return subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=30)


def silent_tasks(tmp_path, lines: list[str], tasks: int = 2, start: int = 0) -> tuple[int, str]:
    log = tmp_path / "launchers.log"
    log.write_text("\n".join(lines) + "\n")
    done = run_bash(f'nrp_silent_tasks "{log}" {start} {tasks}; echo "rc=$?"')
    out = done.stdout.strip()
    return int(out.rsplit("rc=", 1)[1]), out.rsplit("rc=", 1)[0].strip()


@pytest.mark.parametrize(
    ("lines", "rc", "silent"),
    [
        (HEALTHY_HOST, 0, "0"),  # resumed by the step's end: its late lines do not count
        (STALLED, 0, "0"),
        (RANK_HANG, 0, ""),  # every node timed out: no evidence (srun's line, a race)
        (CRASH, 2, ""),
        (QUIET, 1, ""),
    ],
    ids=["healthy-store-host", "stalled", "rank-hang", "crash-first", "no-timeout"],
)
def test_the_silent_launcher_is_found_after_a_section_timeout_elsewhere(tmp_path, lines, rc, silent):
    assert silent_tasks(tmp_path, lines) == (rc, silent)


def test_the_search_starts_at_the_episode_given(tmp_path):
    first = "\n".join(RANK_HANG) + "\n"  # an episode both nodes answered (handled by NVRx)
    assert silent_tasks(tmp_path, RANK_HANG + STALLED[2:], start=len(first.encode())) == (0, "0")


def test_silent_tasks_are_named_as_the_jobs_nodes_and_bounded(tmp_path):
    log = tmp_path / "launchers.log"
    log.write_text("\n".join(HEALTHY_HOST) + "\n")
    watch = (
        f'NRP_WATCH_DIR={tmp_path}; echo "{log}" > {tmp_path}/log; NRP_SCONTROL="command scontrol"; '
        "SLURM_JOB_NODELIST='nrp-node[3-4]'; "
    )
    done = run_bash(watch + "SLURM_JOB_NUM_NODES=2 nrp_silent_node_names")
    assert done.stdout.split() == ["nrp-node3"], done.stderr
    # Three of four silent is not one hung node (e.g. a log level that hides NVRx's lines): no evidence.
    lines = [line("30,236", W, 2, TIMEOUT)]
    log.write_text("\n".join(lines) + "\n")
    done = run_bash(watch + "SLURM_JOB_NODELIST='n[1-4]' SLURM_JOB_NUM_NODES=4 nrp_silent_node_names")
    assert done.stdout.split() == [], done.stdout


# --------------------------------------------------------------------------------------------- the plugin


def two_nodes(tmp_path):
    executor = slurm(tmp_path)
    executor.nodes = 2
    return executor


def test_the_watchdog_is_on_for_multi_node_slurm_jobs(tmp_path):
    job = add_job(_script(), two_nodes(tmp_path), [FaultTolerancePlugin()])
    assert job.executor.env_vars["NRP_SILENT_NODE_TIMEOUT"] == "60"
    assert "nrp_watch_silent_nodes" in job.executor.setup_lines
    job = add_job(_script(), two_nodes(tmp_path), [FaultTolerancePlugin(silent_node_timeout=None)])
    assert "NRP_SILENT_NODE_TIMEOUT" not in job.executor.env_vars
    job = add_job(_script(), slurm(tmp_path), [FaultTolerancePlugin()])  # one node: nothing to exclude
    assert "NRP_SILENT_NODE_TIMEOUT" not in job.executor.env_vars


def test_a_log_level_that_hides_the_launchers_lines_switches_it_off_and_says_so(tmp_path):
    with logged("nemo_resiliency_plugins.core.executor_config", 20) as log:
        job = add_job(_script(), two_nodes(tmp_path), [FaultTolerancePlugin(log_level="WARNING")])
    assert "NRP_SILENT_NODE_TIMEOUT" not in job.executor.env_vars
    assert any("silent_node_timeout has no effect" in m for m in log.messages), log.messages


def test_a_timeout_shorter_than_three_checks_is_refused():
    with pytest.raises(ResiliencyConfigError, match=r"silent_node_timeout = 10"):
        FaultTolerancePlugin(silent_node_timeout=10, workload_check_interval=5)


def _script():
    import nemo_run as run

    return run.Script(
        path="nemo_resiliency_plugins.testing.workload",
        m=True,
        entrypoint="python",
        args=["checkpoint.save=/ckpt", "checkpoint.load=/ckpt", "checkpoint.save_interval=10"],
    )

"""FaultTolerancePlugin(spare_nodes=k) (issue 34): what the plugin does to a job, what it refuses, and the sbatch
block's bash (``core/sbatch/spare_nodes.sh``) run by real bash.

The block stands in for srun on the ft_launcher call; here a shell function stands in for Slurm's srun below it
(it writes the launchers' lines into the step's log and returns srun's code), so the block's own logic is what is
tested. The whole mechanism on the real local Slurm, NVRx and the reference workload:
tests/slurm/test_fault_tolerance_slurm.py::test_a_spare_node_replaces_a_lost_node_inside_the_job.
"""

from __future__ import annotations

import subprocess
import time

import pytest

from nemo_resiliency_plugins import FaultTolerancePlugin, ResiliencyConfigError
from nemo_resiliency_plugins.core import slurm_script
from tests.helpers import TRAIN, add_job, local, slurm
from tests.unit.test_silent_node_evidence import E, I, line


def _setup(executor, **ft):
    import nemo_run as run

    plugin = FaultTolerancePlugin(**ft)
    plugin.setup(run.Script(path=TRAIN, entrypoint="python"), executor)
    return executor


def test_a_slurm_job_holds_the_spares_and_keeps_its_step_when_a_node_dies(tmp_path):
    executor = _setup(slurm(tmp_path, srun_args=["--mpi=none"]), spare_nodes=1)
    assert executor.nodes == 2  # 1 training node (slurm() makes a 1-node job) + 1 spare
    assert executor.srun_args == ["--mpi=none", "--kill-on-bad-exit=0", "--wait=0"]
    assert executor.env_vars["NRP_SPARE_NODES"] == "1"
    guard, block = ("# nemo-resiliency-plugins: requeue guard", "# nemo-resiliency-plugins: spare nodes")
    assert executor.setup_lines.index(guard) < executor.setup_lines.index(block)
    # The silent-node watcher would take a waiting spare for a hung node: not set, and the log says why.
    assert "NRP_SILENT_NODE_TIMEOUT" not in executor.env_vars


def test_the_plugin_applied_again_leaves_a_grown_allocation_as_it_is(tmp_path):
    """A saved experiment's executor already holds the spares: a second setup (a rerun) adds none."""
    executor = _setup(_setup(slurm(tmp_path), spare_nodes=2), spare_nodes=2)
    assert (executor.nodes, executor.srun_args.count("--wait=0")) == (3, 1)
    assert executor.setup_lines.count("# nemo-resiliency-plugins: spare nodes") == 1
    # NeMo-Run reloads a saved executor without the plugins' claims (kept off its fields): the spare count itself
    # refuses a disagreeing plugin; on the same object, the claim of the first plugin refuses it first.
    with pytest.raises(ResiliencyConfigError, match=r"two FaultTolerancePlugins .*spare_nodes=2 vs 1"):
        _setup(executor, spare_nodes=1)
    executor.__dict__.pop("_nrp_claims")
    with pytest.raises(ResiliencyConfigError, match=r"already holds 2 spare node\(s\)"):
        _setup(executor, spare_nodes=1)


@pytest.mark.parametrize(
    ("settings", "match"),
    [
        (dict(spare_nodes=-1), r"FaultTolerancePlugin.*spare_nodes.*-1"),
        (dict(spare_nodes=1, num_in_job_restarts=0), r"spare_nodes = 1 .*0 while num_in_job_restarts=0"),
    ],
)
def test_bad_spare_settings_name_the_field(settings, match):
    with pytest.raises(ResiliencyConfigError, match=match):
        FaultTolerancePlugin(**settings)


def test_srun_flags_of_the_users_that_would_end_the_step_are_refused(tmp_path):
    with pytest.raises(ResiliencyConfigError, match=r"spare_nodes.*executor.srun_args has --wait=30"):
        _setup(slurm(tmp_path, srun_args=["--wait=30"]), spare_nodes=1)


@pytest.mark.parametrize("grace", ["0", "30s", "1e3", "$(reboot)", "-5"])
def test_a_finish_grace_the_block_cannot_count_is_refused(tmp_path, grace):
    with pytest.raises(ResiliencyConfigError, match=r"NRP_SPARE_FINISH_GRACE.*whole number of seconds"):
        _setup(slurm(tmp_path, env_vars={"NRP_SPARE_FINISH_GRACE": grace}), spare_nodes=1)


@pytest.mark.parametrize("timeout", ["0", "600s", "86401", "1,close_timeout=1", "$(reboot)"])
def test_a_join_timeout_nvrx_cannot_take_is_refused(tmp_path, timeout):
    """NRP_SPARE_JOIN_TIMEOUT goes onto ft_launcher's --rdzv-conf line: a comma would add another rendezvous key."""
    with pytest.raises(ResiliencyConfigError, match=r"NRP_SPARE_JOIN_TIMEOUT.*from 1 to 86400.*join_timeout"):
        _setup(slurm(tmp_path, env_vars={"NRP_SPARE_JOIN_TIMEOUT": timeout}), spare_nodes=1)


@pytest.mark.parametrize(("env", "said"), [({"NRP_SPARE_JOIN_TIMEOUT": "45"}, "45 s"), ({}, "NVRx's default 600 s")])
def test_the_setup_log_says_how_long_a_job_without_spares_left_waits(tmp_path, caplog, env, said):
    with caplog.at_level("INFO"):
        executor = _setup(slurm(tmp_path, env_vars=dict(env)), spare_nodes=1)
    assert executor.env_vars.get("NRP_SPARE_JOIN_TIMEOUT") == env.get("NRP_SPARE_JOIN_TIMEOUT")
    assert f"when no spare is left, a rendezvous round waits {said}" in caplog.text, caplog.text


def test_a_finish_grace_in_seconds_is_kept(tmp_path):
    executor = _setup(slurm(tmp_path, env_vars={"NRP_SPARE_FINISH_GRACE": "5"}), spare_nodes=1)
    assert executor.env_vars["NRP_SPARE_FINISH_GRACE"] == "5"


def test_off_slurm_spares_are_refused_with_the_reason():
    import nemo_run as run

    with pytest.raises(ResiliencyConfigError, match=r"spare_nodes.*1.*0 off Slurm.*run.SlurmExecutor has"):
        add_job(run.Script(path=TRAIN, entrypoint="python"), local(), [FaultTolerancePlugin(spare_nodes=1)])


# ----------------------------------------------------------------------------------------- the block's bash

ZERO = "launcher.py:3753 Agent exits with exit code = 0."
SPARE_DONE = "launcher.py:1694 Agent .run() returned None (hot spare or standby exited successfully)."
FAILED = "Some rank(s) exited with non-zero exit code: {0: ProcessFailure(...)}. Agent's exit code = 1"


# The block asks squeue for the job's steps (the watcher below): here a stand-in that knows no job, so that no test
# reads, or stops, a step of a real Slurm that runs beside the unit tests.
NO_QUEUE = "squeue() { return 1; }"


def _step(tmp_path, lines: list[str], rc: int, nodes: int = 3, spares: int = 1) -> tuple[list[str], int, str]:
    """Run the ft_launcher srun call of a ``nodes``-node job through the guard and the spare block; the stand-in
    below them writes ``lines`` to the step's log and returns ``rc``. Returns (the arguments srun got, the code
    the batch script sees, its output)."""
    log, argv = tmp_path / "step.log", tmp_path / "argv"
    log.write_text("")
    stand_in = (
        f'srun() {{ printf "%s\\n" "$@" > {argv}; printf "%s\\n" {" ".join(repr(x) for x in lines)} >> {log}; '
        f"return {rc}; }}"
    )
    program = "\n".join(
        [
            f"TORCHX_MAX_RETRIES=0 SLURM_JOB_NUM_NODES={nodes} NRP_SPARE_NODES={spares} SLURM_JOB_ID=7",
            slurm_script._CHAIN_HELPERS,
            NO_QUEUE,
            stand_in,
            slurm_script._REQUEUE_GUARD,
            slurm_script._SPARE_NODES,
            f"srun --output {log} --wait=60 --kill-on-bad-exit=1 --kill-on-bad-exit=0 --wait=0 ft_launcher "
            f"--rdzv-backend c10d --nnodes {nodes} --nproc-per-node 1 train.py --nnodes 9",
            'echo "exitcode=$?"',
        ]
    )
    done = subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=30)
    out = done.stdout.strip()
    return argv.read_text().split("\n")[:-1], int(out.rsplit("exitcode=", 1)[1]), out


def test_ft_launcher_gets_the_active_to_all_range_and_only_it(tmp_path):
    args, code, _ = _step(tmp_path, [line("10,000", I, 0, ZERO)], rc=0, nodes=5, spares=2)
    assert args[args.index("ft_launcher") :] == [
        "ft_launcher", "--rdzv-backend", "c10d", "--nnodes", "3:5", "--nproc-per-node", "1", "train.py", "--nnodes", "9"
    ]  # fmt: skip
    assert args[args.index("ft_launcher") - 3 : args.index("ft_launcher") - 1] == ["bash", "-c"]
    assert code == 0


@pytest.mark.parametrize(("node_id", "is_host"), [("0", "1"), ("1", "0"), ("2", "0")])
def test_only_the_first_node_s_launcher_hosts_the_rendezvous_store(tmp_path, node_id, is_host):
    """srun runs the per-node shim the block puts ahead of ft_launcher: the first node of the allocation (NeMo-Run's
    rendezvous endpoint) says is_host=1, every other node is_host=0, whatever their addresses (on the local Slurm,
    all nodes share one host, and NVRx's own address match made each launcher a store host). Run here by real bash
    with Slurm's per-task SLURM_NODEID and a stand-in ft_launcher on PATH that prints its arguments."""
    args, _, _ = _step(tmp_path, [line("10,000", I, 0, ZERO)], rc=0)
    shim_at = args.index("bash")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ft_launcher").write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    (bin_dir / "ft_launcher").chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_NODEID": node_id}
    done = subprocess.run(args[shim_at:], capture_output=True, text=True, env=env, timeout=30, check=True)
    given = done.stdout.split("\n")
    assert given[:6] == ["--rdzv-conf", f"is_host={is_host}", "--rdzv-backend", "c10d", "--nnodes", "2:3"], given


@pytest.mark.parametrize(("timeout", "conf"), [("45", "is_host=0,join_timeout=45"), ("", "is_host=0")])
def test_the_join_timeout_reaches_nvrx_s_rendezvous_conf(tmp_path, timeout, conf):
    """NRP_SPARE_JOIN_TIMEOUT (exported by the sbatch script, so in every task's environment) joins is_host on the
    one --rdzv-conf the shim gives ft_launcher; unset, NVRx keeps its own default."""
    args, _, _ = _step(tmp_path, [line("10,000", I, 0, ZERO)], rc=0)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ft_launcher").write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    (bin_dir / "ft_launcher").chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_NODEID": "1"}
    if timeout:
        env["NRP_SPARE_JOIN_TIMEOUT"] = timeout
    done = subprocess.run(args[args.index("bash") :], capture_output=True, text=True, env=env, timeout=30, check=True)
    assert done.stdout.split("\n")[:2] == ["--rdzv-conf", conf], done.stdout


def test_a_step_that_finished_after_a_replacement_is_a_finished_step(tmp_path):
    """srun returns the killed node's 137; the two launchers left (the survivor, the spare that joined) exited 0."""
    lines = [line("40,000", I, 0, ZERO), line("40,100", I, 2, ZERO)]
    _, code, out = _step(tmp_path, lines, rc=137)
    assert code == 0, out
    assert "step exit code 137, but every launcher that ended says training finished" in out, out


@pytest.mark.parametrize(
    ("lines", "why"),
    [
        ([line("40,000", I, 0, ZERO), line("40,100", E, 2, FAILED)], "a launcher failed"),
        ([line("40,000", I, 0, ZERO)], "fewer launchers ended well than train"),
        ([line("40,000", I, 1, SPARE_DONE), line("40,000", I, 1, ZERO)], "only the spare ended well"),
    ],
)
def test_a_failed_step_keeps_srun_s_code(tmp_path, lines, why):
    _, code, out = _step(tmp_path, lines, rc=137)
    assert code == 137, (why, out)


def _watched_step(
    tmp_path, lines: list[str], hold_s: int, slurm: str = NO_QUEUE, rc: int = 0
) -> tuple[subprocess.CompletedProcess, float]:
    """A 3-node job with 1 spare whose stand-in srun writes ``lines`` to the step's log and then runs ``hold_s``
    seconds more (its pid in ``srun.pid``, a ``srun.started`` file once it runs) and returns ``rc``, with the block's
    watcher after a 1 s grace; ``slurm``: stand-ins for squeue and scancel. Returns the batch script's run and its
    duration."""
    log = tmp_path / "step.log"
    log.write_text("")
    stand_in = (
        f'srun() {{ echo "$BASHPID" > {tmp_path}/srun.pid; touch {tmp_path}/srun.started; '
        f'printf "%s\\n" {" ".join(repr(x) for x in lines)} >> {log}; sleep {hold_s} >/dev/null 2>&1; return {rc}; }}'
    )
    program = "\n".join(
        [
            "TORCHX_MAX_RETRIES=0 SLURM_JOB_NUM_NODES=3 NRP_SPARE_NODES=1 SLURM_JOB_ID=7 NRP_SPARE_FINISH_GRACE=1",
            slurm_script._CHAIN_HELPERS,
            slurm,
            stand_in,
            slurm_script._REQUEUE_GUARD,
            slurm_script._SPARE_NODES,
            f"srun --output {log} --kill-on-bad-exit=0 --wait=0 ft_launcher --rdzv-backend c10d --nnodes 3 train.py",
            'echo "exitcode=$?"',
        ]
    )
    started = time.monotonic()
    done = subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=90)
    return done, time.monotonic() - started


FINISHED = [line("40,000", I, 0, ZERO), line("40,100", I, 2, ZERO)]


def test_a_step_a_frozen_node_keeps_running_after_training_finished_is_stopped(tmp_path):
    """A frozen node's task never ends and srun (--wait=0) waits for it: once the active launchers said they exited
    0 and the step still runs NRP_SPARE_FINISH_GRACE seconds later, the block's watcher stops the launchers' step,
    the first step started after srun was called (squeue's stand-in: step 0, a user's, and the launchers' step 1
    once srun runs; scancel's stops the stand-in srun), and the step counts as finished."""
    slurm = "\n".join(
        [
            f"squeue() {{ printf '7.batch\\n7.extern\\n7.0\\n'; [ ! -f {tmp_path}/srun.started ] || echo 7.1; }}",
            f'scancel() {{ echo "$*" >> {tmp_path}/scancel; pkill -KILL -P "$(cat {tmp_path}/srun.pid)"; '
            f'kill -KILL "$(cat {tmp_path}/srun.pid)"; }}',
        ]
    )
    done, took = _watched_step(tmp_path, FINISHED, 120, slurm)
    out = done.stdout
    assert "training finished on the active nodes, but the step still ran 1 s later" in out, (out, done.stderr)
    assert "stopping step 7.1" in out, out
    assert (tmp_path / "scancel").read_text() == "--signal=KILL 7.1\n"
    # scancel's stand-in kills the sleep first, and the stand-in srun may then return 0 before its own kill: either
    # code is a finished step (on 137 the block says why).
    assert out.strip().endswith("exitcode=0"), out
    # Polled every 5 s, 1 s of grace: stopped within two polls and the grace, long before the stand-in's 120 s.
    assert took < 60, took


def test_a_frozen_step_squeue_cannot_name_is_ended_by_stopping_srun(tmp_path):
    """squeue does not answer: the watcher stops srun itself (the batch script goes on; the job's end takes the
    step's last tasks with it), and the step counts as finished."""
    done, took = _watched_step(tmp_path, FINISHED, 120)
    out = done.stdout
    assert "still ran 1 s later (a task on a frozen node): stopping step (not found: stopping srun)" in out, out
    assert out.strip().endswith("exitcode=0"), out
    assert took < 60, took


def test_a_step_still_training_is_not_stopped(tmp_path):
    """Fewer launchers than train have exited: the watcher leaves the step alone (here it ends on its own)."""
    done, took = _watched_step(tmp_path, [line("40,000", I, 0, ZERO)], 12)
    assert "stopping" not in done.stdout and done.stdout.strip().endswith("exitcode=0"), done.stdout
    assert took >= 12, took  # it ran its course


def test_a_step_a_frozen_node_holds_after_the_store_host_gave_up_is_stopped_and_fails(tmp_path):
    """Spares ran out: the store host's launcher (infra:0) waited its join timeout and exited 1, taking the
    rendezvous store with it; a frozen node's task still holds the step. The watcher stops it after the grace, and
    the step keeps a failed code: the requeue path takes over."""
    gave_up = "Agent run ended with exception, e=RendezvousTimeoutError(...). Agent's exit code = 1"
    lines = [line("41,000", E, 0, gave_up)]
    # Its code: 137 when the watcher's kill lands first, 1 when the stand-in's sleep dies first: a failure either way.
    done, took = _watched_step(tmp_path, lines, 120, rc=1)
    out = done.stdout
    assert "the store host's launcher exited with code 1 (spares or restarts ran out), but the step still" in out
    assert "stopping step (not found: stopping srun)" in out, out
    assert not out.strip().endswith("exitcode=0"), out
    assert "every launcher that ended says training finished" not in out, out
    assert took < 60, took


def test_a_step_whose_other_launcher_failed_is_left_to_the_store_host(tmp_path):
    """A launcher other than the store host's exited 1 (NVRx stops every launcher when the job cannot go on; the
    store host's line decides): the watcher leaves the step alone."""
    lines = [line("40,000", E, 2, FAILED)]
    done, took = _watched_step(tmp_path, lines, 12)
    assert "stopping" not in done.stdout and done.stdout.strip().endswith("exitcode=0"), done.stdout
    assert took >= 12, took

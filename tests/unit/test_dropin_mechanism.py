"""Issue 31, the four points at their root in core/, each with real bash / real NeMo-Run objects.

1. PreemptionPlugin builds a task that does not show ``checkpoint.save`` (tests/unit/test_autoresume.py).
2. The forwarded preemption signal goes past a shell wrapper (Megatron Bridge's ``bash -c '...'``) to the rank.
3. The requeue guard adds the ft_launcher template's extra retry on that template only; on NeMo-Run's plain
   template a run that saved and exited 0 on the signal is requeued, a failed run with retries=0 is not.
4. Messages: a NeMo 2 task, NeMo 2's plugin keywords, a run.FaultTolerance(max_restarts=...) conflict.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import fiddle as fdl
import nemo_run as run
import pytest

from nemo_resiliency_plugins import FaultTolerancePlugin, PreemptionPlugin, ResiliencyConfigError
from nemo_resiliency_plugins.core import slurm_script
from tests.helpers import RANK, add_job, forward_block_program
from tests.unit.test_preemption_plugin import sbatch_script, script, slurm

UPSTREAM = Path(__file__).parents[1] / "fixtures" / "upstream" / "mbridge-main" / "scripts" / "performance"


def _upstream_inline_template() -> str:
    sys.path.insert(0, str(UPSTREAM))
    try:
        from utils.executors import INLINE_TEMPLATE
    finally:
        sys.path.remove(str(UPSTREAM))
    return INLINE_TEMPLATE


def _start_wrapped_rank(tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    """Megatron Bridge main's SlurmTemplate, rendered as NeMo-Run renders it and run as NeMo-Run runs it
    (``bash <script>``): bash -> bash -c '<pre_cmds> <command>' -> python."""
    import jinja2

    (tmp_path / "rank.py").write_text(RANK)
    ready = tmp_path / "ready"
    command = f"{sys.executable} {tmp_path / 'rank.py'} {ready}"
    text = jinja2.Template(_upstream_inline_template()).render(pre_cmds="echo pre-cmd ;", command=command)
    (tmp_path / "task.sh").write_text(text)
    proc = subprocess.Popen(
        ["bash", str(tmp_path / "task.sh")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    deadline = time.monotonic() + 30
    while not ready.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
        time.sleep(0.05)
    return proc, ready


def _forward_to(pid: int) -> subprocess.CompletedProcess:
    """The forwarding's own function, as the batch shell's srun --overlap runs it on each task's first pid."""
    program = forward_block_program(f"nrp_signal_process TERM {pid}")
    return subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=30)


def test_forwarded_signal_reaches_the_rank_under_a_bash_c_wrapper(tmp_path):
    proc, _ = _start_wrapped_rank(tmp_path)
    done = _forward_to(proc.pid)
    out, _ = proc.communicate(timeout=30)
    assert done.returncode == 0, done.stderr
    # Sent to the python under the two shells, not to the task's first process (the outer bash).
    assert "sent SIGTERM to task pid" in done.stdout and "(python" in done.stdout, done.stdout
    assert str(proc.pid) not in done.stdout.split("task pid ")[1].split()[0]
    assert "rank got SIGTERM, saved" in out and proc.returncode == 0, out


def test_signal_to_the_wrappers_first_process_is_lost(tmp_path):
    """The failure the forwarding fixes: SIGTERM to the outer bash (what `scontrol listpids`' first pid got)
    ends the bash; the rank under it never hears of it."""
    proc, ready = _start_wrapped_rank(tmp_path)
    rank = int(ready.read_text())
    os.kill(proc.pid, 15)
    assert proc.wait(timeout=30) != 0
    try:
        os.kill(rank, 0)  # the rank is still running, unsignalled (it would have exited 0 on SIGTERM)
    finally:
        os.kill(rank, 9)
    out = proc.stdout.read()
    assert "rank got SIGTERM" not in out, out


def test_a_process_that_is_not_a_shell_is_signalled_itself(tmp_path):
    (tmp_path / "rank.py").write_text(RANK)
    proc = subprocess.Popen(
        [sys.executable, str(tmp_path / "rank.py"), str(tmp_path / "ready")], stdout=subprocess.PIPE, text=True
    )
    while not (tmp_path / "ready").exists():
        assert proc.poll() is None
        time.sleep(0.05)
    done = _forward_to(proc.pid)
    out, _ = proc.communicate(timeout=30)
    assert f"task pid {proc.pid} (python" in done.stdout, done.stdout
    assert "rank got SIGTERM, saved" in out


def _start_torchrun(tmp_path: Path, form: str, nproc: int) -> tuple[subprocess.Popen, list[int]]:
    """torchrun (``--standalone``: its rendezvous on a port the OS picks) around ``nproc`` RANK processes; returns
    once every rank is up, with the ranks' pids."""
    (tmp_path / "rank.py").write_text(RANK)
    bindir = Path(sys.executable).parent
    launcher = [str(bindir / "torchrun")] if form == "torchrun" else [sys.executable, "-m", "torch.distributed.run"]
    ready = tmp_path / "ready-"
    proc = subprocess.Popen(
        [*launcher, "--standalone", f"--nproc-per-node={nproc}", str(tmp_path / "rank.py"), str(ready)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    files = [Path(f"{ready}{i}") for i in range(nproc)]
    deadline = time.monotonic() + 120  # torchrun imports torch first: seconds on a busy 2-core host
    while not all(f.exists() and f.read_text() for f in files):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
        time.sleep(0.05)
    return proc, [int(f.read_text()) for f in files]


@pytest.mark.parametrize("form", ["torchrun", "python-m-torch.distributed.run"])
def test_under_torchrun_the_ranks_get_the_signal_and_torchrun_exits_0(tmp_path, form):
    proc, ranks = _start_torchrun(tmp_path, form, nproc=2)
    done = _forward_to(proc.pid)
    out, _ = proc.communicate(timeout=60)
    assert done.returncode == 0, done.stderr
    sent = {int(pid) for pid in re.findall(r"sent SIGTERM to task pid (\d+)", done.stdout)}
    assert sent == set(ranks), (ranks, proc.pid, done.stdout)  # both ranks, not torchrun
    assert out.count("rank got SIGTERM, saved") == 2, out
    # torchrun saw its workers succeed: exit 0, which NeMo-Run's plain template requeues after the signal.
    assert proc.returncode == 0, out


def test_signal_to_torchrun_itself_ends_it_with_1_though_its_rank_saved(tmp_path):
    """Why torchrun's ranks are signalled and not torchrun: it passes the signal on, the rank saves and exits 0,
    and torchrun still exits 1 (SignalException), a failed run to NeMo-Run's plain template."""
    proc, _ = _start_torchrun(tmp_path, "torchrun", nproc=1)
    proc.send_signal(15)
    out, _ = proc.communicate(timeout=60)
    assert "rank got SIGTERM, saved" in out, out
    assert proc.returncode == 1 and "SignalException" in out, (proc.returncode, out[-3000:])


# ------------------------------------------------------------------------------------- 3. requeue by template


def _run_batch(tmp_path: Path, text: str, *, step_rc: int, signal_first: bool, retries: int) -> tuple[int, str]:
    """Run a rendered sbatch script as Slurm would ($0 = the script file), with stub srun/scontrol on PATH.

    The stubs stand in for the cluster only: srun sleeps (so the batch shell can get the signal while it
    runs) and exits ``step_rc``; scontrol records its arguments. The script itself, the guard and the
    forwarding are the real ones.
    """
    bin_ = tmp_path / "bin"
    bin_.mkdir(exist_ok=True)
    log = tmp_path / "scontrol.log"
    started = tmp_path / "step-started"
    (bin_ / "srun").write_text(
        "#!/bin/bash\n"
        'case " $* " in *" hostname "*|*nrp_signal_tasks*) exit 0 ;; esac\n'  # the template's set-up, the forwarding
        f"touch {started}; sleep 2; exit {step_rc}\n"
    )
    (bin_ / "scontrol").write_text(f'#!/bin/bash\necho "$*" >> {log}\n')
    for f in bin_.iterdir():
        f.chmod(0o755)
    batch = tmp_path / "slurm_script"
    batch.write_text(text)
    batch.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}", "SLURM_JOB_ID": "77", "SLURM_RESTART_COUNT": "0"}
    proc = subprocess.Popen(
        ["bash", str(batch)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path
    )
    if signal_first:  # while the training step runs, as Slurm's --signal=B:TERM@N does
        deadline = time.monotonic() + 30
        while not started.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
            time.sleep(0.05)
        proc.send_signal(15)
    out, _ = proc.communicate(timeout=60)
    return proc.returncode, (log.read_text() if log.exists() else "") + "\n----\n" + out


def _plain_script(tmp_path, retries: int) -> str:
    job = add_job(script(), slurm(tmp_path, retries=retries), [PreemptionPlugin()])
    text = sbatch_script(job)
    assert "\nis_job_failures_limit_reached()" not in text  # NeMo-Run's plain template
    return text


def test_plain_template_with_retries_0_does_not_requeue_a_failed_run(tmp_path):
    rc, out = _run_batch(tmp_path, _plain_script(tmp_path, 0), step_rc=1, signal_first=False, retries=0)
    assert rc == 1 and "requeue" not in out.split("----")[0], out


def test_plain_template_requeues_a_run_that_saved_on_the_preemption_signal(tmp_path):
    rc, out = _run_batch(tmp_path, _plain_script(tmp_path, 0), step_rc=0, signal_first=True, retries=0)
    calls = out.split("----")[0]
    assert "requeue 77" in calls and "preempted, requeue" in out, out
    assert rc == 0


def test_plain_template_does_not_requeue_a_run_that_finished(tmp_path):
    rc, out = _run_batch(tmp_path, _plain_script(tmp_path, 0), step_rc=0, signal_first=False, retries=0)
    assert rc == 0 and "requeue" not in out.split("----")[0], out


def test_ft_template_keeps_the_extra_retry_and_plain_template_does_not(tmp_path):
    probe = "\necho RETRIES=$TORCHX_MAX_RETRIES; exit 0\n"
    for template_line, want in (("is_job_failures_limit_reached() {\n  :\n}\n", "RETRIES=3"), ("", "RETRIES=2")):
        batch = tmp_path / f"s{len(want)}{bool(template_line)}"
        batch.write_text(
            "TORCHX_MAX_RETRIES=2\n"
            + slurm_script._CHAIN_HELPERS
            + "\n"
            + slurm_script._REQUEUE_GUARD
            + probe
            + template_line
        )
        done = subprocess.run(["bash", str(batch)], capture_output=True, text=True, timeout=30)
        assert want in done.stdout, (template_line, done.stdout, done.stderr)


# ----------------------------------------------------------------------------------------------- 4. messages


@dataclasses.dataclass
class Trainer:  # stands for Lightning's nl.Trainer of a NeMo 2 task
    max_steps: int = 1


def nemo2_pretrain(model=None, data=None, trainer=None, log=None, resume=None, optim=None):
    """The shape of NeMo 2's ``llm.pretrain`` (NeMo is not installed here)."""


@pytest.mark.parametrize("plugin", [PreemptionPlugin, FaultTolerancePlugin])
def test_a_nemo2_task_is_named_as_one(plugin):
    task = run.Partial(nemo2_pretrain, model=run.Config(Trainer), trainer=run.Config(Trainer, max_steps=5))
    with pytest.raises(ResiliencyConfigError) as err:
        add_job(task, run.LocalExecutor(), [plugin()])
    text = str(err.value)
    assert "NeMo 2 task" in text and "nemo.lightning.run.plugins" in text and plugin.__name__ in text, text
    assert "checkpoint.save" not in text.split("NeMo 2 task")[0]
    assert isinstance(fdl.get_callable(task), type(nemo2_pretrain))


@pytest.mark.parametrize(("keyword", "value"), [("callbacks", []), ("sig", 15)])
def test_nemo2_plugin_keywords_name_nemo2_plugins_not_a_type_error(keyword, value):
    with pytest.raises(ResiliencyConfigError) as err:
        PreemptionPlugin(preempt_time=120, **{keyword: value})
    text = str(err.value)
    assert "PreemptionPlugin" in text and keyword in text and "nemo.lightning.run.plugins" in text, text


def test_an_unknown_keyword_lists_the_fields():
    with pytest.raises(ResiliencyConfigError) as err:
        FaultTolerancePlugin(num_restarts=2)
    assert "num_restarts" in str(err.value) and "num_in_job_restarts" in str(err.value)


def test_a_launcher_max_restarts_conflict_names_num_in_job_restarts(tmp_path):
    executor = run.LocalExecutor(ntasks_per_node=2, launcher=run.FaultTolerance(max_restarts=5))
    with pytest.raises(ResiliencyConfigError) as err:
        add_job(script(), executor, [FaultTolerancePlugin()])
    text = str(err.value)
    assert "num_in_job_restarts" in text and "max_restarts=5" in text, text
    # The same value in both places is no conflict.
    executor = run.LocalExecutor(ntasks_per_node=2, launcher=run.FaultTolerance(max_restarts=5))
    add_job(script(), executor, [FaultTolerancePlugin(num_in_job_restarts=5)])

"""The drop-in promise, tried on real upstream client code (tests/fixtures/upstream, pinned by commit).

Each client is run as its users run it (its own command line, ``--dryrun``), changed only in the import of the
plugin. For each: it builds and carries the mechanism, or it is refused with a message naming plugin, field and
fix. What our plugin renders is compared with what Megatron Bridge 0.6.2's plugin renders on the same executor
from the same upstream executor factory (docs/dropin.md lists every difference).
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import nemo_run as run
import pytest

from nemo_resiliency_plugins import FaultTolerancePlugin, PreemptionPlugin, ResiliencyConfigError
from tests.helpers import add_job
from tests.unit.test_preemption_plugin import sbatch_script

FIXTURES = Path(__file__).parents[1] / "fixtures" / "upstream"
MAIN = FIXTURES / "mbridge-main" / "scripts" / "performance"
V040 = FIXTURES / "mbridge-v0.4.0" / "scripts" / "performance"
COMMON = ["-m", "llama", "-mr", "llama31_8b", "-g", "h100", "-ng", "8", "-a", "placeholder", "-p", "batch"]


def _dry_run(script: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "NEMORUN_HOME": str(tmp_path / "home"), "COLUMNS": "400"}
    return subprocess.run(
        [sys.executable, str(script), *COMMON, "--log_dir", str(tmp_path / "logs"), *args, "--dryrun"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=env,
    )


def test_mbridge_main_setup_experiment_slurm_with_preemption_builds(tmp_path):
    """Acceptance: Megatron Bridge main's Slurm path, --is_long_convergence_run attaches PreemptionPlugin; its
    checkpoint directory reaches the job as --save_dir (its own flag), which the plugin cannot read."""
    save = tmp_path / "ckpt"
    done = _dry_run(
        MAIN / "setup_experiment.py",
        tmp_path,
        "--save_dir",
        str(save),
        "--is_long_convergence_run",
        "--packager",
        "none",
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-6000:]
    assert "dryrun requested: exiting" in out
    flat = " ".join(out.split())
    assert "#SBATCH --signal=B:TERM@60" in flat, out[-6000:]
    assert "trap 'nrp_forward_signal TERM' TERM" in flat
    assert "# nemo-resiliency-plugins: requeue guard" in flat
    # The exit handler reaches the task's arguments next to the script's own flags.
    for arg in (
        "train.exit_signal_handler=true",
        "train.exit_signal_handler_for_dataloader=false",
        "train.exit_signal=15",
        f"--save_dir {save}",
    ):
        assert arg in flat, (arg, out[-6000:])
    # Warned, not refused: the task does not show checkpoint.save.
    assert "PreemptionPlugin: the task does not show checkpoint.save" in flat
    # Megatron Bridge's own bash -c wrapper (SlurmTemplate) is the launcher.
    assert "bash -c '" in flat


def _main_slurm_executor(tmp_path: Path) -> run.SlurmExecutor:
    sys.path.insert(0, str(MAIN))
    try:
        from utils.executors import slurm_executor
    finally:
        sys.path.remove(str(MAIN))
    executor = slurm_executor(
        gpu="h100",
        account="placeholder",
        partition="batch",
        log_dir=str(tmp_path / "logs"),
        nodes=1,
        num_gpus_per_node=8,
        packager="none",
    )
    executor.tunnel = run.LocalTunnel(job_dir=str(tmp_path / "jobs"))
    return executor


def _bootstrap_task() -> run.Script:
    return run.Script(path=str(MAIN / "bootstrap.py"), entrypoint="python", args=["-m", "llama", "--save_dir", "/ck"])


def test_rendered_job_differs_from_megatron_bridges_plugin_only_where_documented(tmp_path, mb_run_plugins):
    """Same executor factory (Megatron Bridge main's slurm_executor), same task; every difference is in
    docs/dropin.md ("What the two plugins render")."""
    upstream = mb_run_plugins
    theirs = add_job(_bootstrap_task(), _main_slurm_executor(tmp_path / "a"), [upstream.PreemptionPlugin()])
    ours = add_job(_bootstrap_task(), _main_slurm_executor(tmp_path / "b"), [PreemptionPlugin()])
    # Task arguments: the same two, written as Hydra booleans, plus the signal's number.
    assert theirs.task.args[4:] == ["train.exit_signal_handler=True", "train.exit_signal_handler_for_dataloader=False"]
    assert ours.task.args[4:] == [
        "train.exit_signal_handler=true",
        "train.exit_signal_handler_for_dataloader=false",
        "train.exit_signal=15",
    ]
    # Slurm: the batch shell gets the signal, and forwards it.
    assert (theirs.executor.signal, ours.executor.signal) == ("TERM@60", "B:TERM@60")
    a, b = sbatch_script(theirs), sbatch_script(ours)
    sbatch = lambda text: sorted(ln for ln in text.splitlines() if ln.startswith("#SBATCH"))  # noqa: E731
    only_theirs = set(sbatch(a)) - set(sbatch(b))
    only_ours = set(sbatch(b)) - set(sbatch(a))
    job_name = {
        ln
        for ln in only_theirs | only_ours
        if ln.startswith(("#SBATCH --job-name", "#SBATCH --output", "#SBATCH --error"))
    }
    assert only_theirs - job_name == {"#SBATCH --signal=TERM@60"}, only_theirs
    assert only_ours - job_name == {"#SBATCH --signal=B:TERM@60"}, only_ours
    # Env: nothing added or changed.
    assert theirs.executor.env_vars == ours.executor.env_vars
    # setup_lines: ours adds the forwarding and the requeue guard, nothing else.
    assert not (theirs.executor.setup_lines or "")
    assert "# nemo-resiliency-plugins: signal forwarding" in ours.executor.setup_lines
    assert "# nemo-resiliency-plugins: requeue guard" in ours.executor.setup_lines
    # The launcher (Megatron Bridge's SlurmTemplate) is left as it was.
    assert type(ours.executor.launcher) is type(theirs.executor.launcher)
    assert ours.executor.launcher.template_inline == theirs.executor.launcher.template_inline


def test_fault_tolerance_on_main_slurm_executor_replaces_no_user_launcher_silently(tmp_path, mb_run_plugins):
    """Megatron Bridge's FaultTolerancePlugin replaces the SlurmTemplate wrapper with run.FaultTolerance
    silently; ours refuses, naming the field and why (its bash -c wrapper cannot carry ft_launcher)."""
    upstream = mb_run_plugins
    executor = _main_slurm_executor(tmp_path)
    theirs = add_job(_bootstrap_task(), copy.deepcopy(executor), [upstream.FaultTolerancePlugin()])
    assert isinstance(theirs.executor.launcher, run.FaultTolerance)  # the SlurmTemplate is gone
    with pytest.raises(ResiliencyConfigError) as err:
        add_job(_bootstrap_task(), executor, [FaultTolerancePlugin()])
    text = str(err.value)
    assert "FaultTolerancePlugin" in text and "launcher" in text and "SlurmTemplate" in text, text


def test_mbridge_v040_dgx_cloud_path_fails_in_its_own_executor_factory(tmp_path):
    """v0.4.0 attaches FaultTolerancePlugin only on its DGX Cloud path, whose executor factory passes
    app_id=..., which NeMo-Run 0.11.1's DGXCloudExecutor no longer takes: it fails before any plugin, ours
    or Megatron Bridge's, is built."""
    done = _dry_run(
        V040 / "setup_experiment.py",
        tmp_path,
        "--use_recipes",
        "--dgxc_cluster",
        "dgxc",
        "--dgxc_base_url",
        "http://127.0.0.1:9",
        "--dgxc_kube_apiserver_url",
        "http://127.0.0.1:9",
        "--dgxc_app_id",
        "x",
        "--dgxc_app_secret",
        "y",
        "--dgxc_project_name",
        "p",
        "--dgxc_pvc_claim_name",
        "c",
        "--dgxc_pvc_mount_path",
        "/nemo-workspace",
    )
    out = done.stdout + done.stderr
    assert done.returncode != 0
    assert "DGXCloudExecutor.__init__() got an unexpected keyword argument 'app_id'" in out, out[-4000:]
    assert "utils/executors.py" in out and "nemo_resiliency_plugins" not in out.split("Traceback")[-1]

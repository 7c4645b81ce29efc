"""Smoke: NeMo-Run 0.11.1's SlurmExecutor + LocalTunnel submits to the local Slurm and the job runs.

What it takes on this cluster (no containers):
* ``packager=run.Packager()``: the default GitArchivePackager runs ``git rev-parse`` in the cwd;
* ``LocalTunnel(job_dir=$NEMORUN_HOME/experiments)``: NeMo-Run writes the sbatch script under
  ``<NEMORUN_HOME or Experiment(base_dir)>/experiments/<title>/<id>`` but submits
  ``<tunnel.job_dir>/<title>/<id>/..._sbatch.sh``; only SSHTunnel copies between the two, so for a
  LocalTunnel they must be the same directory;
* ``account=`` is required by the dataclass; slurm-up registers the account ``local`` the tests use;
* ``container_image=None``: no ``--container-*`` srun flags are emitted, commands run on the host, so
  ``env_vars["PATH"]`` must put the venv first;
* ``detach=True`` + ``skip_status_at_exit=True``: we wait with the fixture (scontrol/jobcomp; it also
  lifts the hold Slurm puts on a requeued job), not with NeMo-Run's polling. NeMo-Run follows job state
  only through ``sacct``: slurm-up's slurmdbd answers it (before it had one, ``exp.run(detach=False)``
  ended in PersistentSacctFailure after ~60 s although the job COMPLETED).
The experiment runs in a subprocess so NEMORUN_HOME (read at nemo_run import) is a temp dir.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

VENV_BIN = str(Path(sys.executable).parent)

SUBMIT = textwrap.dedent(
    """
    import os, sys
    import nemo_run as run

    home = os.environ["NEMORUN_HOME"]
    executor = run.SlurmExecutor(
        account="local",
        partition=sys.argv[1],
        tunnel=run.LocalTunnel(job_dir=os.path.join(home, "experiments")),
        nodes=1,
        ntasks_per_node=1,
        time="00:05:00",
        container_image=None,
        packager=run.Packager(),
        env_vars={"PATH": sys.argv[2] + ":/usr/local/bin:/usr/bin:/bin"},
    )
    script = run.Script(
        inline="echo hello from $(hostname -s) rank=$SLURM_PROCID; "
        "python -c 'import sys; print(\\"python=\\" + sys.executable)'"
    )
    with run.Experiment("nrp-slurm-smoke", executor=executor, skip_status_at_exit=True,
                        enable_goodbye_message=False) as exp:
        exp.add(script, name="hello")
        exp.run(detach=True)
        handle = exp.jobs[0].handle
    print(f"HANDLE={handle}")
    print(f"EXPDIR={exp._exp_dir}")
    """
)


def test_nemo_run_slurm_executor_runs_script(local_slurm, tmp_path):
    t0 = time.monotonic()
    home = tmp_path / "nemorun_home"
    home.mkdir()
    env = {**os.environ, "NEMORUN_HOME": str(home)}
    p = subprocess.run(
        [sys.executable, "-c", SUBMIT, local_slurm.partition, VENV_BIN],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        cwd=tmp_path,
    )
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    handle = next(ln.split("=", 1)[1] for ln in p.stdout.splitlines() if ln.startswith("HANDLE="))
    exp_dir = Path(next(ln.split("=", 1)[1] for ln in p.stdout.splitlines() if ln.startswith("EXPDIR=")))
    job_id = handle.rstrip("/").split("/")[-1]  # slurm_tunnel://nemo_run/<job id>
    assert job_id.isdigit(), (handle, out)

    res = local_slurm.wait(job_id, timeout=120)
    logs = sorted((exp_dir / "hello").glob("*.out"))
    text = {f.name: f.read_text() for f in logs}
    assert (res.state, res.exit_code) == ("COMPLETED", 0), (res.record, text)
    task_log = next((t for n, t in text.items() if n.startswith("log-")), "")
    assert "hello from" in task_log and "rank=0" in task_log, text
    assert f"python={VENV_BIN}/python" in task_log, text
    sbatch_log = next((t for n, t in text.items() if n.startswith("sbatch_")), "")
    assert "job exited with code 0" in sbatch_log, text
    print(f"NeMo-Run smoke job {job_id}: {time.monotonic() - t0:.1f} s")

"""What a launched job's own files say about how it ended (tools/job_outcome.py) and doctor's verdict on it.

The files are the ones NeMo-Run's DockerExecutor makes its container write (``status_<container>.out``, one line of
JSON with the exit code as a string); the real container's file is read by tests/docker. Here: every shape a job
directory can have, on a real ``run.DockerExecutor`` whose ``job_dir`` points at it.
"""

from __future__ import annotations

import json
from pathlib import Path

import nemo_run as run
import pytest

from nemo_resiliency_plugins.tools.doctor import _container_exit_check
from nemo_resiliency_plugins.tools.job_outcome import container_exit_codes


def status(job_dir: Path, container: str, code: str) -> None:
    # The line NeMo-Run's `bash -c "...; printf '{"id": ..., "exit_code": "%s"}\n' "$EXIT_CODE" > ..."` writes.
    (job_dir / f"status_{container}.out").write_text(json.dumps({"id": "app-1", "exit_code": code}) + "\n")


def executor(job_dir: Path | str) -> run.DockerExecutor:
    exe = run.DockerExecutor(container_image="img", num_gpus=0)
    exe.job_dir = str(job_dir)
    return exe


def test_exit_codes_are_read_per_container(tmp_path):
    status(tmp_path, "exp-train", "0")
    status(tmp_path, "exp-eval", "137")
    (tmp_path / "status_exp-broken.out").write_text("not json")
    assert container_exit_codes(tmp_path) == {"exp-eval": 137, "exp-train": 0, "exp-broken": "not json"}


@pytest.mark.parametrize(
    ("codes", "verdict", "needle"),
    [
        ({"exp-train": "0"}, "pass", "every container exited 0"),
        ({"exp-train": "1"}, "FAIL", "'exp-train': 1"),
        ({}, "n/a", "no status_*.out"),
    ],
)
def test_doctor_reports_the_containers_own_exit(tmp_path, codes, verdict, needle):
    for name, code in codes.items():
        status(tmp_path, name, code)
    check = _container_exit_check(executor(tmp_path))
    assert (check.verdict, check.name) == (verdict, "container exit status"), check
    assert needle in check.detail, check.detail


def test_doctor_on_a_job_never_launched_says_so(tmp_path):
    check = _container_exit_check(executor(tmp_path / "nowhere"))
    assert check.verdict == "n/a" and "not launched" in check.detail

"""Issue 33 (hostile and careless input, round 2): one test per class, each on the real code path (real processes
for the front programs and the guard, real NeMo-Run dry runs for the plugins). The property-based versions are
in ``tests/property/test_hostile_round2.py``."""

from __future__ import annotations

import inspect
import json
import os
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

import nemo_run as run
import pytest
from omegaconf import OmegaConf

from nemo_resiliency_plugins import (
    InProcessRestartPlugin,
    LocalCheckpointPlugin,
    PreemptionPlugin,
    ResiliencyConfigError,
)
from nemo_resiliency_plugins.core import executor_config, task_config
from nemo_resiliency_plugins.job import local_checkpoint_guard as guard
from nemo_resiliency_plugins.job import rank_keeper
from tests.helpers import add_job

SCHEDULE = ["checkpoint.save=/tmp/nrp-h2/ck", "checkpoint.load=/tmp/nrp-h2/ck", "checkpoint.save_interval=100"]
#: A user program that says how it was started: its argv and whether any chain variable is left in its env.
USER_PROGRAM = (
    "import json, os, sys\n"
    "chain = json.dumps(os.environ.get('NRP_FRONT_CHAIN'))\n"
    "print('NRP_USER_ARGV', json.dumps(sys.argv[1:]), chain, sep='\\t', flush=True)\n"
)


def lcp(**kw) -> LocalCheckpointPlugin:
    return LocalCheckpointPlugin(
        **{"non_persistent_local_ckpt_dir": "/tmp/nrp-h2/local", "non_persistent_save_interval": 10, **kw}
    )


def reserve() -> InProcessRestartPlugin:
    return InProcessRestartPlugin(granularity="rank", active_world_size=1)


def run_ranks_program(job, cwd: Path, *, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run what one rank of ``job`` runs (the task's program with its arguments and the job's env), for real,
    the way torchrun starts a worker (``python -u``); only the launcher is left out."""
    task = job.task
    head = ["-m", task.path] if task.m else [task.path]
    env = {**os.environ, **job.executor.env_vars, **(task.env or {}), "RANK": "0", "LOCAL_WORLD_SIZE": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(cwd), str(Path(__file__).resolve().parents[2])])
    return run_in_own_group([sys.executable, "-u", *head, *task.args], cwd=cwd, env=env, timeout=timeout)


def run_in_own_group(cmd: list[str], *, cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """Run ``cmd`` in a process group of its own; on timeout kill the whole group, so that a chain of programs
    that keep starting each other (the bug of class 1) cannot outlive the test."""
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"still running after {timeout} s (a program chain that never reaches the task?)\n{out[-2000:]}")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # anything the chain left behind
        except ProcessLookupError:
            pass
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def user_runs(done: subprocess.CompletedProcess) -> list[tuple[list[str], str | None]]:
    found = []
    for line in done.stdout.splitlines():
        if line.startswith("NRP_USER_ARGV\t"):
            _, argv, chain = line.split("\t")
            found.append((json.loads(argv), json.loads(chain)))
    return found


# ----------------------------------------------------------------------------------- 1: endless process chain


@pytest.mark.parametrize("keeper_first", [True, False], ids=["reserve-then-local", "local-then-reserve"])
def test_front_programs_in_either_order_start_the_users_program_once_with_its_exact_argv(tmp_path, keeper_first):
    """The issue's case: a ``-m`` task whose arguments hold a ``-m`` of their own. Before the chain, with the
    reserve listed first, the keeper read everything before that ``-m`` as interpreter options and started the
    guard again, forever (here: the timeout)."""
    (tmp_path / "nrp_h2_user.py").write_text(USER_PROGRAM)
    args = [*SCHEDULE, "-m", "x y", "--flag=a,b:c", "-u"]
    plugins = [reserve(), lcp()] if keeper_first else [lcp(), reserve()]
    job = add_job(run.Script(path="nrp_h2_user", m=True, entrypoint="python", args=list(args)), local2(), plugins)
    done = run_ranks_program(job, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert user_runs(done) == [(job.task.args, None)], done.stdout[-3000:]
    # The keeper outermost, either order (LocalExecutor ships it as a file: issue 29).
    assert job.task.path.endswith("-" + rank_keeper.KEEPER_FILE) and job.task.m is False, job.task.path
    assert job.task.args[: len(args)] == args


def local2() -> run.LocalExecutor:
    return run.LocalExecutor(ntasks_per_node=2)


def test_the_same_job_whatever_the_plugin_order():
    a = add_job(
        run.Script(path="pkg.train", m=True, entrypoint="python", args=list(SCHEDULE)), local2(), [reserve(), lcp()]
    )
    b = add_job(
        run.Script(path="pkg.train", m=True, entrypoint="python", args=list(SCHEDULE)), local2(), [lcp(), reserve()]
    )
    assert (a.task.path, a.task.m) == (b.task.path, b.task.m)
    assert a.executor.env_vars[guard.CHAIN_ENV] == b.executor.env_vars[guard.CHAIN_ENV]
    assert sorted(a.task.args) == sorted(b.task.args)


@pytest.mark.parametrize(
    ("argv", "options"),
    [
        (["python", "-u", "-m", "pkg", "-m", "x"], ["-u"]),
        (["python", "-u", "/g/guard.py", "a", "-m", "b"], ["-u"]),
        (["python", "-um", "pkg"], ["-u"]),
        (["python", "-W", "error", "-X", "dev", "-B", "s.py", "-W", "x"], ["-W", "error", "-X", "dev", "-B"]),
        (["python", "-Werror", "-uW", "ignore", "-c", "pass", "-u"], ["-Werror", "-uW", "ignore"]),
        (["python", "--check-hash-based-pycs", "never", "-I", "s.py"], ["--check-hash-based-pycs", "never", "-I"]),
        (["python", "s.py", "-u"], []),
    ],
)
def test_the_keeper_reads_only_the_interpreters_own_options(argv, options):
    assert rank_keeper.interpreter_options(argv) == options


def test_both_job_programs_read_the_chain_with_the_same_code():
    assert inspect.getsource(guard.pop_front_chain) == inspect.getsource(rank_keeper.pop_front_chain)
    assert guard.CHAIN_ENV == rank_keeper.CHAIN_ENV and guard._CHAIN_ENTRY.pattern == rank_keeper._CHAIN_ENTRY.pattern


# ----------------------------------------------------------------------------------- 3, 4, 5: the guard


def damaged(path: Path, fill: bytes = b"x") -> bytes:
    """A ``torch.save``-shaped zip archive with one flipped byte in its data (CRC mismatch); returns its bytes."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("archive/data/0", fill * 4096)
    data = bytearray(path.read_bytes())
    data[100] ^= 0xFF
    path.write_bytes(bytes(data))
    return bytes(data)


def run_guard(tmp_path: Path, root: Path, rank: str = "0") -> subprocess.CompletedProcess:
    shipped = tmp_path / "shipped_guard.py"
    shipped.write_text(Path(guard.__file__).read_text())
    (tmp_path / "nrp_h2_user.py").write_text(USER_PROGRAM)
    env = {
        **os.environ,
        "RANK": rank,
        guard.DIR_ENV: str(root),
        guard.TARGET_ENV: "module:nrp_h2_user",  # as a job saved before the chain (the chain: tests above)
    }
    return subprocess.run(
        [sys.executable, str(shipped), "a"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )


def test_a_file_that_disappears_under_the_guard_never_fails_the_start(tmp_path):
    """Class 3, deterministically: the step that failed (the rename of a file another guard already moved) on a
    name that is gone; then, for real, two guards at once on one directory of damaged files."""
    d = tmp_path / "local" / "0"
    d.mkdir(parents=True)
    names = [f"iter_{i:07d}_0_local.pt" for i in range(1, 301)]
    contents = {name: damaged(d / name, bytes([65 + i % 26])) for i, name in enumerate(names)}
    shipped = tmp_path / "g.py"
    shipped.write_text(Path(guard.__file__).read_text())
    (tmp_path / "nrp_h2_user.py").write_text(USER_PROGRAM)
    env = {
        **os.environ,
        "RANK": "0",
        guard.DIR_ENV: str(tmp_path / "local"),
        guard.TARGET_ENV: "module:nrp_h2_user",
    }
    procs = [
        subprocess.Popen([sys.executable, str(shipped)], cwd=tmp_path, env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert all("NRP_USER_ARGV" in out for out in outs)
    kept = {p.name: p.read_bytes() for p in d.iterdir()}
    assert not any(n in kept for n in names)  # every damaged file is set aside ...
    for name, data in contents.items():  # ... and none is lost
        assert any(k.startswith(name) and k.endswith(guard.SET_ASIDE_SUFFIX) and v == data for k, v in kept.items())
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:  # the step that raised, on a name that is gone by then
        assert guard._set_aside(fd, "iter_0000001_0_local.pt") is None
    finally:
        os.close(fd)


def test_an_earlier_set_aside_file_is_never_replaced(tmp_path):
    d = tmp_path / "local" / "0"
    d.mkdir(parents=True)
    name = "iter_0000005_0_local.pt"
    first = damaged(d / f"{name}.unreadable", b"1")
    second = damaged(d / f"{name}.1.unreadable", b"2")
    third = damaged(d / name, b"3")
    done = run_guard(tmp_path, tmp_path / "local")
    assert done.returncode == 0, done.stderr
    assert (d / f"{name}.unreadable").read_bytes() == first
    assert (d / f"{name}.1.unreadable").read_bytes() == second
    assert (d / f"{name}.2.unreadable").read_bytes() == third
    assert f"as {name}.2.unreadable" in done.stderr


def test_a_rank_directory_that_links_elsewhere_is_not_followed(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    data = damaged(elsewhere / "iter_0000005_0_local.pt")
    (tmp_path / "local").mkdir()
    (tmp_path / "local" / "0").symlink_to(elsewhere)
    done = run_guard(tmp_path, tmp_path / "local")
    assert done.returncode == 0 and "NRP_USER_ARGV" in done.stdout, done.stderr
    assert sorted(p.name for p in elsewhere.iterdir()) == ["iter_0000005_0_local.pt"]
    assert (elsewhere / "iter_0000005_0_local.pt").read_bytes() == data
    assert "is a symbolic link" in done.stderr


def test_a_linked_file_is_read_through_and_only_the_link_is_set_aside(tmp_path):
    target = tmp_path / "target.pt"
    data = damaged(target)
    d = tmp_path / "local" / "0"
    d.mkdir(parents=True)
    (d / "iter_0000005_0_local.pt").symlink_to(target)
    done = run_guard(tmp_path, tmp_path / "local")
    assert done.returncode == 0, done.stderr
    assert target.read_bytes() == data and not target.is_symlink()
    assert (d / "iter_0000005_0_local.pt.unreadable").is_symlink()


# ----------------------------------------------------------------------------------- 6, 7: checkpoint spellings


def _script(*args: str) -> run.Script:
    return run.Script(path="/tmp/nrp-h2/train.py", entrypoint="python", args=list(args))


@pytest.mark.parametrize("load", ["${checkpoint.save}", "${.save}"])
def test_a_load_that_names_the_save_directory_by_reference_is_accepted(load):
    args = ["checkpoint.save=/tmp/nrp-h2/ck", f"checkpoint.load={load}", "checkpoint.save_interval=100"]
    # What the job reads: OmegaConf resolves the reference over the final config (Megatron Bridge's
    # process_config_with_overrides: to_container(resolve=True)).
    resolved = OmegaConf.to_container(
        OmegaConf.create({"checkpoint": {"save": "/tmp/nrp-h2/ck", "load": load}}), resolve=True
    )
    assert resolved["checkpoint"]["load"] == "/tmp/nrp-h2/ck"
    assert task_config.config_field_seen(_script(*args), "checkpoint", "load", plugin="t") == (True, "/tmp/nrp-h2/ck")
    job = add_job(_script(*args), local2(), [InProcessRestartPlugin()])
    assert f"checkpoint.load={load}" in job.task.args
    with pytest.raises(ResiliencyConfigError, match=r"checkpoint\.load"):
        add_job(_script(args[0], "checkpoint.load=${checkpoint.other}", "checkpoint.other=/x"), local2(), [reserve()])


@pytest.mark.parametrize("removal", ["checkpoint=null", "~checkpoint"])
@pytest.mark.parametrize("make", [InProcessRestartPlugin, PreemptionPlugin, lcp], ids=["ipr", "preemption", "lcp"])
def test_both_spellings_of_removing_the_checkpoint_section_get_one_answer(removal, make):
    with pytest.raises(ResiliencyConfigError, match=r"checkpoint"):
        add_job(_script(removal), local2(), [make()])


# ----------------------------------------------------------------------------------- 8, 9: executor numbers


@pytest.mark.parametrize("value", [10**400, float("nan"), float("inf"), -1, 10.5, "30", True])
def test_a_docker_stop_timeout_that_is_not_a_whole_number_of_seconds_is_refused_by_name(value):
    executor = run.DockerExecutor(container_image="x", num_gpus=0, additional_kwargs={"stop_timeout": value})
    with pytest.raises(ResiliencyConfigError, match=r"PreemptionPlugin\.executor\.additional_kwargs\['stop_timeout'\]"):
        add_job(_script(*SCHEDULE), executor, [PreemptionPlugin()])


def test_dgx_cloud_reads_the_grace_period_from_custom_spec():
    from tests.contract.test_executors_ft import dgxcloud

    assert executor_config.platform_stop(dgxcloud(), plugin="p")[0] == 30.0
    spec = {"terminationGracePeriodSeconds": 600}
    assert executor_config.platform_stop(dgxcloud(custom_spec=spec), plugin="p")[0] == 600.0
    with pytest.raises(ResiliencyConfigError, match=r"custom_spec\['terminationGracePeriodSeconds'\] = nan"):
        executor_config.platform_stop(dgxcloud(custom_spec={"terminationGracePeriodSeconds": float("nan")}), plugin="p")


# ----------------------------------------------------------------------------------- 10: a plugin listed twice


def test_two_identical_local_checkpoint_plugins_are_one():
    once = add_job(run.Script(path="pkg.train", m=True, entrypoint="python", args=list(SCHEDULE)), local2(), [lcp()])
    twice = add_job(
        run.Script(path="pkg.train", m=True, entrypoint="python", args=list(SCHEDULE)), local2(), [lcp(), lcp()]
    )
    assert (once.task.path, once.task.args) == (twice.task.path, twice.task.args)
    assert once.executor.env_vars == twice.executor.env_vars
    with pytest.raises(ResiliencyConfigError, match="non_persistent_local_ckpt_dir"):
        add_job(
            run.Script(path="pkg.train", m=True, entrypoint="python", args=list(SCHEDULE)),
            local2(),
            [lcp(), lcp(non_persistent_local_ckpt_dir="/tmp/nrp-h2/other")],
        )

"""The container entry (``job/container_entry.py``) as a container's init, measured without a container: a PID
namespace of its own (``unshare --pid``, as in tests/contract/test_executors_ft.py, which shows bash as init
dropping SIGTERM) with the entry as its first process and a launch script shaped like NeMo-Run's
(``bash -c "<launcher> 2>&1 | tee -a log; exit ${PIPESTATUS[0]}"``).

The fake launcher is a real process named ``ft_launcher`` that, like NVRx's, has a child of its own (standing
for a rank monitor, which must NOT get the signal) and exits 0 after its SIGTERM handler ran.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nemo_resiliency_plugins.core import container_entry as core_entry
from nemo_resiliency_plugins.job import container_entry

ENTRY = container_entry.__file__

LAUNCHER = f"""#!{sys.executable}
import signal, subprocess, sys, time
monitor = subprocess.Popen([{sys.executable!r}, "-c", '''
import signal, sys, time
signal.signal(signal.SIGTERM, lambda *a: (print("MONITOR GOT SIGTERM", flush=True), sys.exit(3)))
time.sleep(60)
'''])
got = []
signal.signal(signal.SIGTERM, lambda *a: got.append(1))
print("LAUNCHER READY", flush=True)
for _ in range(600):
    if got:
        break
    time.sleep(0.05)
print("LAUNCHER GOT SIGTERM, SAVING" if got else "LAUNCHER NEVER SIGNALLED", flush=True)
monitor.kill()
monitor.wait()
sys.exit(0 if got else 1)
"""


def _as_init(tmp_path: Path, launch: str) -> tuple[subprocess.Popen, int]:
    """Start ``python3 container_entry.py bash -c <launch>`` as the first process of a new PID namespace; return
    the unshare process and the entry's pid seen from here."""
    outer = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, ENTRY, "bash", "-c", launch],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"},
    )
    # A deadline, not a count of tries: on a loaded host each pgrep is a process start of its own (seen: this test
    # failing once under five developers' test runs on two cores).
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = subprocess.run(["pgrep", "-P", str(outer.pid)], capture_output=True, text=True).stdout.split()
        if found:
            return outer, int(found[0])
        time.sleep(0.05)
    outer.kill()
    raise AssertionError("unshare started no namespace init within 30 s")


def _wait_for_line(log: Path, needle: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists() and needle in log.read_text():
            return
        time.sleep(0.05)
    raise AssertionError(f"{needle!r} not in {log} within {timeout} s")


def test_sigterm_to_the_entry_as_init_reaches_the_launcher_only_and_its_status_is_the_containers(tmp_path):
    launcher = tmp_path / "ft_launcher"
    launcher.write_text(LAUNCHER)
    launcher.chmod(0o755)
    log = tmp_path / "log.out"
    launch = f"ft_launcher 2>&1 | tee -a {log}; exit ${{PIPESTATUS[0]}}"
    outer, init = _as_init(tmp_path, launch)
    _wait_for_line(log, "LAUNCHER READY")
    os.kill(init, signal.SIGTERM)  # what docker stop / the kubelet does to the container's first process
    out, _ = outer.communicate(timeout=30)
    text = log.read_text()
    # The launcher got it; its own child (a rank monitor) did not; tee lived to log what came after.
    assert "LAUNCHER GOT SIGTERM, SAVING" in text and "MONITOR GOT SIGTERM" not in text, text + out
    # The program by its name, whatever the depth of the checkout or of pytest's temp dir (issue 50: a line cut at a
    # fixed length lost the name under a long path).
    assert re.search(
        rf"^{re.escape(container_entry.PREFIX)} got SIGTERM, sent it to pid \d+ \(ft_launcher\)$", out, re.M
    ), out
    assert outer.returncode == 0, out  # the launch script's status (the launcher's 0) is the entry's


@pytest.mark.parametrize(("launch", "status"), [("exit 93", 93), ("exit 0", 0), ("kill -KILL $$", 128 + 9)])
def test_the_entry_exits_with_the_launch_scripts_status(launch, status):
    done = subprocess.run([sys.executable, ENTRY, "bash", "-c", launch], capture_output=True, timeout=30)
    assert done.returncode == status, done.stderr


def test_without_a_launcher_the_signal_goes_to_the_ranks_not_the_shells(tmp_path):
    rank = tmp_path / "rank.py"
    rank.write_text(
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: (print('RANK GOT SIGTERM', flush=True), sys.exit(0)))\n"
        "print('RANK READY', flush=True)\n"
        "time.sleep(30)\n"
        "print('RANK NEVER SIGNALLED', flush=True)\n"
    )
    log = tmp_path / "log.out"
    outer, init = _as_init(tmp_path, f"{sys.executable} {rank} 2>&1 | tee -a {log}; exit ${{PIPESTATUS[0]}}")
    _wait_for_line(log, "RANK READY")
    os.kill(init, signal.SIGTERM)
    out, _ = outer.communicate(timeout=30)
    assert "RANK GOT SIGTERM" in log.read_text(), log.read_text() + out
    assert outer.returncode == 0, out


@pytest.mark.parametrize(
    ("argv", "launcher"),
    [
        (["ft_launcher", "--nproc-per-node=2", "train.py"], True),
        (["/usr/bin/python3", "/venv/bin/ft_launcher", "x.py"], True),
        (["python", "-m", "torch.distributed.run", "x.py"], True),
        (["/venv/bin/torchrun", "x.py"], True),
        (["bash", "-c", "ft_launcher x.py | tee log"], False),
        (["python", "train.py", "ft_launcher"], False),
        (["tee", "-a", "/nemo_run/log.out"], False),
    ],
)
def test_what_counts_as_a_launcher(argv, launcher):
    assert container_entry.is_launcher(argv) is launcher


def test_the_shipped_entry_is_this_module_and_needs_only_the_standard_library():
    assert core_entry.entry_source() == Path(ENTRY).read_text()
    imported = {
        line.split()[1].split(".")[0]
        for line in core_entry.entry_source().splitlines()
        if line.startswith(("import ", "from "))
    }
    assert imported <= {"__future__", "os", "signal", "sys"}, imported


@pytest.mark.parametrize(
    ("argv", "name"),
    [
        (
            ["/v" * 150 + "/bin/python3", "/v" * 150 + "/bin/ft_launcher", "--nproc-per-node=2", "train.py"],
            "ft_launcher",
        ),
        (["/usr/bin/python3.12", "-m", "torch.distributed.run", "--nnodes=1"], "python3.12 -m torch.distributed.run"),
        (["/d" * 200 + "/torchrun", "x.py"], "torchrun"),
        (["python3", "-u", "/d" * 200 + "/train.py"], "python3"),
        (["/d" * 200 + "/bin/python", "/d" * 200 + "/program.py"], "program.py"),
        (["bash"], "bash"),
        ([], "?"),
    ],
)
def test_the_signalled_program_is_named_by_its_name_never_by_its_path(argv, name):
    assert container_entry.program(argv) == name

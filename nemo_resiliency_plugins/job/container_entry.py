"""The container's first process, in front of NeMo-Run's launch script: passes the platform's stop signal on.

Standard library only: this file is shipped to the job by the executor's file route and run by the image's own
``python3``, so the image needs nothing installed.

Why it exists. In the containers NeMo-Run starts (Docker, DGX Cloud, Lepton, Kubeflow) the first process (PID 1
of the container's PID namespace) is NeMo-Run's bash launch script. ``docker stop`` and a Kubernetes pod
deletion send SIGTERM to that process only, and the kernel drops a signal sent to a namespace's init that has
no handler for it: bash never sees it, nor do ft_launcher and the ranks, and the platform SIGKILLs everything
after its grace period, with no checkpoint saved.

What it does. ``python3 container_entry.py <launch command...>`` starts the launch command as its child and
waits for it. On SIGTERM, SIGINT, SIGHUP or SIGQUIT (the signals torchrun and NVRx's ft_launcher catch and pass
to their ranks) it sends the same signal to the *launcher* processes only (``ft_launcher``, ``torchrun``,
``python -m torch.distributed.run``; the top-most ones in its process tree), not to the whole tree: NVRx's rank
monitors close on SIGTERM, after which the ranks' checkpoint-save section messages fail (seen on Slurm), and a
killed ``tee`` would take the launcher's output pipe with it. With no launcher in the tree the signal goes to
every process under it that is not a shell or ``tee`` (the ranks themselves). As PID 1 it also reaps orphans.
It exits with the launch command's exit status (128 + N when a signal N ended it), so the platform sees what
the job did: 0 after a save on the signal, NVRx's no-restart code (93) after a crash loop.
"""

from __future__ import annotations

import os
import signal
import sys

#: Signals passed on (torch's TORCHELASTIC_SIGNALS_TO_HANDLE: what a launcher forwards to its ranks).
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
#: Program names of launchers that catch these signals and pass them to their ranks.
LAUNCHER_NAMES = ("ft_launcher", "torchrun")
LAUNCHER_MODULES = ("torch.distributed.run", "torch.distributed.launch")
#: Processes never signalled when there is no launcher: the launch script's shells and its log ``tee``.
NOT_RANKS = ("bash", "sh", "dash", "tee")
PREFIX = "nemo-resiliency-plugins container entry:"


def _say(message: str) -> None:
    sys.stderr.write(f"{PREFIX} {message}\n")
    sys.stderr.flush()


def _parent_and_name(pid: int) -> tuple[int, str] | None:
    """(parent pid, command name) from ``/proc/<pid>/stat``; the name may hold spaces and parentheses."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            stat = handle.read()
    except OSError:
        return None
    name = stat[stat.index("(") + 1 : stat.rindex(")")]
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[1]), name


def _argv(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            raw = handle.read()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def is_launcher(argv: list[str]) -> bool:
    """Whether a command line is a launcher: ``ft_launcher ...``, ``python /x/bin/torchrun ...`` (a console
    script run by its interpreter, as a shebang does) or ``python -m torch.distributed.run ...``."""
    if not argv:
        return False
    if os.path.basename(argv[0]) in LAUNCHER_NAMES:
        return True
    if not os.path.basename(argv[0]).startswith("python") or len(argv) < 2:
        return False
    if argv[1] == "-m":
        return len(argv) > 2 and argv[2] in LAUNCHER_MODULES
    return os.path.basename(argv[1]) in LAUNCHER_NAMES


def program(argv: list[str]) -> str:
    """The program a command line runs, by name and never by path (a node's container paths are long, and a line cut
    at a fixed length hid the name): ``ft_launcher`` for ``/venv/bin/python /venv/bin/ft_launcher ...``,
    ``python3 -m torch.distributed.run`` for a module, the file name of any other program."""
    if not argv:
        return "?"
    name = os.path.basename(argv[0])
    if not name.startswith("python") or len(argv) < 2:
        return name
    if argv[1] == "-m":
        return f"{name} -m {argv[2]}" if len(argv) > 2 else name
    if argv[1].startswith("-"):
        return name  # python -c ..., python -u script: the interpreter is what can be named without guessing
    return os.path.basename(argv[1])


def targets(root: int) -> list[int]:
    """The processes under ``root`` to pass a stop signal to: the top-most launchers, else every process that
    is not a shell or ``tee``."""
    children: dict[int, list[int]] = {}
    names: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        info = _parent_and_name(int(entry))
        if info is not None:
            children.setdefault(info[0], []).append(int(entry))
            names[int(entry)] = info[1]
    launchers: list[int] = []
    others: list[int] = []
    stack = list(children.get(root, []))
    while stack:
        pid = stack.pop()
        if is_launcher(_argv(pid)):
            launchers.append(pid)
            continue  # its children are its ranks and rank monitors: the launcher passes the signal on
        if names.get(pid) not in NOT_RANKS:
            others.append(pid)
        stack.extend(children.get(pid, []))
    return sorted(launchers or others)


def forward(signum: int, _frame: object = None) -> None:
    name = signal.Signals(signum).name
    pids = targets(os.getpid())
    if not pids:
        _say(f"got {name}; no process to pass it to")
        return
    for pid in pids:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            continue
        _say(f"got {name}, sent it to pid {pid} ({program(_argv(pid))})")


def run(command: list[str]) -> int:
    """Start ``command``, pass stop signals on, reap every child; return its exit status as a shell would."""
    for signum in FORWARDED:
        signal.signal(signum, forward)
    child = os.fork()
    if child == 0:
        for signum in FORWARDED:
            signal.signal(signum, signal.SIG_DFL)
        try:
            os.execvp(command[0], command)
        except OSError as error:
            _say(f"cannot start {command[0]!r}: {error}")
            os._exit(127)
    while True:
        try:
            pid, status = os.waitpid(-1, 0)  # any child: as PID 1 this also reaps orphans
        except ChildProcessError:
            return 1  # cannot happen while the child lives; be explicit rather than loop
        if pid == child:
            code = os.waitstatus_to_exitcode(status)
            return 128 - code if code < 0 else code


def main(argv: list[str] | None = None) -> int:
    command = list(sys.argv[1:] if argv is None else argv)
    if not command:
        _say("usage: python3 container_entry.py <command> [args...]")
        return 2
    return run(command)


if __name__ == "__main__":
    sys.exit(main())

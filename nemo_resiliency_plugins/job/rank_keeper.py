"""Rank keeper: the worker process a launcher starts when in-process restart has a warm reserve.

Why it exists: torchrun and NVRx 0.7's ``ft_launcher`` watch the processes they start and tear the whole worker
group down (and restart it, if restarts are left) as soon as one of them exits with a failure. NVRx's in-process
restart with a warm reserve needs the opposite: when a rank dies, the *surviving* processes must live on so that
NVRx's wrapper can hand the dead rank's place to a reserve rank. NVRx documents ``srun --kill-on-bad-exit=0``
for Slurm and, for ft_launcher, a ``--ft-restart-policy=min-healthy`` that NVRx 0.7 no longer offers (its only
policy is ``any-failed``). So the launcher starts this keeper as each worker, and the keeper runs the real rank
as its child:

* the rank dies by a signal the keeper did not forward (SIGKILL from an OOM killer, a crashed driver, NVRx's
  own ``hard_timeout`` termination): NVRx's monitor process records the rank as terminated in its store, and
  the in-process machinery decides what happens next. The keeper reports the death on its stdout and stays a
  running worker while a rank of its node lives on; it leaves with 0 once the others have finished, and passes
  the death on to the launcher when no rank of its node is alive any more (nobody is left to finish the job).
* anything else is passed on unchanged: an exit code (a rank whose Python code decided to fail, e.g. NVRx's
  wrapper giving up because no reserve is left: the launcher then restarts the group, as without reserves), and
  a death by a signal the launcher sent (the keeper forwarded it and dies the same way).

What this does NOT hide: when no reserve is left, NVRx terminates the surviving ranks (``RankDiscarded``) and
they exit with an error, so the launcher still restarts the worker group (ft_launcher) or fails the job.

How a job gets it: :func:`nemo_resiliency_plugins.core.front_program.install_rank_keeper` (called by
InProcessRestartPlugin when ``active_world_size`` leaves a reserve) turns a ``run.Script(path="pkg.train",
m=True)`` task into one that runs this file, shipped with the job as ``<digest>-rank_keeper.py`` where the
executor can carry a file (standard library only: the job's image needs nothing of this package), else
``run.Script(path="nemo_resiliency_plugins.job.rank_keeper", m=True)`` (the image then needs the package), with
the same arguments, and describes what runs next in the job's environment: ``NRP_FRONT_CHAIN`` (see
:func:`pop_front_chain`; shared with the local-checkpoint guard, so the two compose in either plugin order).
The task's arguments are left as they were, so every plugin still reads and writes its Hydra overrides there.
By hand (the form jobs saved before the chain also use)::

    NRP_RANK_KEEPER_MODULE=pkg.train torchrun --nproc-per-node=3 -m nemo_resiliency_plugins.job.rank_keeper [args...]
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

__all__ = [
    "CHAIN_ENV",
    "FORWARDED_SIGNALS",
    "KEEPER_FILE",
    "KEEPER_MODULE",
    "MODULE_ENV",
    "NVLS_ENV",
    "NVLS_SETTER",
    "NVLS_WHY",
    "ROLE",
    "SCRIPT_ENV",
    "STOP_SIGNALS",
    "interpreter_options",
    "main",
    "nvls_problem",
    "pop_front_chain",
]

KEEPER_MODULE = "nemo_resiliency_plugins.job.rank_keeper"
#: How a keeper shows in a process's argv (the module before 0.2 included, for jobs saved then).
KEEPER_NAMES = frozenset({KEEPER_MODULE, "nemo_resiliency_plugins.rank_keeper"})
#: The file name a plugin ships the keeper under is ``<12 hex digits>-rank_keeper.py`` (core/front_program.py).
KEEPER_FILE = "rank_keeper.py"
MODULE_ENV = "NRP_RANK_KEEPER_MODULE"
SCRIPT_ENV = "NRP_RANK_KEEPER_SCRIPT"
#: This program's name in ``NRP_FRONT_CHAIN``.
ROLE = "rank_keeper"

# Signals a launcher sends its workers (stop, NVRx ft_launcher's rank-termination signal, Slurm's warning).
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _say(message: str) -> None:
    sys.stdout.write(f"[rank_keeper rank={os.environ.get('RANK', '?')}] {message}\n")
    sys.stdout.flush()


# ------------------------------------------------------------------------------------------------------------
# NRP_FRONT_CHAIN: the programs each rank runs, in order, the one running now first. The same function is in
# local_checkpoint_guard.py (each file is shipped alone, standard library only); a test keeps the two identical.
CHAIN_ENV = "NRP_FRONT_CHAIN"
_CHAIN_ENTRY = re.compile(r"([a-z_]+):(module|path):([^,:]+)")


def pop_front_chain(role: str) -> tuple[str, str] | None:
    """What runs after this program, as ``(kind, name)`` (``kind`` is ``module`` or ``path``); None without a chain.

    ``NRP_FRONT_CHAIN`` is ``role:kind:name,role:kind:name,...,task:kind:name``: the program running now (the
    one the launcher started, or the one before it handed over to), the programs still to run, and last the
    task's own. This program drops its own entry and leaves the rest in ``os.environ`` for the next one, which
    inherits it (a child process, or code run in this process). When only the task's own program is left, the
    variable is removed: the task starts exactly once, with its own arguments and an environment without it.
    Each front program reads its successor only from here, never from ``sys.argv``, so no order of front
    programs can make one start another again.
    """
    text = os.environ.get(CHAIN_ENV)
    if text is None:
        return None
    entries = [_CHAIN_ENTRY.fullmatch(part) for part in text.split(",")]
    if len(entries) < 2 or None in entries or entries[0].group(1) != role or entries[-1].group(1) != "task":
        raise SystemExit(
            f"[{role}] {CHAIN_ENV}={text!r}: expected '{role}:<module|path>:<name>,...,task:<module|path>:<name>'"
        )
    rest = entries[1:]
    if len(rest) == 1:
        del os.environ[CHAIN_ENV]
    else:
        os.environ[CHAIN_ENV] = ",".join(entry.group(0) for entry in rest)
    return rest[0].group(2), rest[0].group(3)


# ------------------------------------------------------------------------------------------------------------


def interpreter_options(orig_argv: list[str]) -> list[str]:
    """The options ``orig_argv`` gave the Python interpreter itself (e.g. torchrun's ``-u``), in order.

    Python reads its own options up to the first word that names what to run: a script path, ``-``, or the
    ``-m`` / ``-c`` option (which may close a cluster such as ``-um``). Everything after that word belongs to the
    program, the task's own arguments included, so it is never read here, whatever it holds (a ``-m`` of the
    task's own, a path): the keeper may have been started as ``python -m <keeper>``, as ``python <file>`` or
    from another front program running in the same process.
    """
    options: list[str] = []
    i = 1
    while i < len(orig_argv):
        word = orig_argv[i]
        if word == "--check-hash-based-pycs":
            options += orig_argv[i : i + 2]
            i += 2
            continue
        if word.startswith("--") and len(word) > 2:
            options.append(word)
            i += 1
            continue
        if not word.startswith("-") or word in ("-", "--"):
            break
        taken = 0  # the option's argument is the next word (-W / -X at the end of the cluster)
        for j, letter in enumerate(word[1:], start=1):
            if letter in "cm":
                if j > 1:
                    options.append(word[:j])
                return options
            if letter in "WX":
                taken = 0 if word[j + 1 :] else 1
                break
        options += orig_argv[i : i + 1 + taken]
        i += 1 + taken
    return options


def _target() -> list[str] | None:
    """The rank's own program: the chain's next entry, or (jobs saved before the chain, by hand) the old vars."""
    following = pop_front_chain(ROLE)
    if following is not None:
        kind, name = following
        return ["-m", name] if kind == "module" else [name]
    if os.environ.get(MODULE_ENV):
        return ["-m", os.environ[MODULE_ENV]]
    if os.environ.get(SCRIPT_ENV):
        return [os.environ[SCRIPT_ENV]]
    return None


#: What in-process restart needs of NCCL (InProcessRestartPlugin.REQUIRED_ENV; a test keeps the two equal). Checked
#: here, in the job's final environment, because a plugin listed after InProcessRestartPlugin may overwrite it.
NVLS_ENV = "NCCL_NVLS_ENABLE"
NVLS_REQUIRED = "0"
#: Who sets NVLS on in the clients we know of (NeMo 2's plugin, tests/fixtures/upstream/nemo2/perf_env.py), and why
#: in-process restart cannot have it: said by the plugin at set-up and by this keeper at rank start.
NVLS_SETTER = "e.g. NeMo's PerfEnvPlugin(user_buffer_registration=True)"
NVLS_WHY = "NVLink SHARP buffers cannot be torn down and re-created inside a living process"


def nvls_problem(environ: dict[str, str] | os._Environ[str]) -> str | None:
    """The one line that stops the rank when the job's environment has NVLink SHARP on, or None when it is off."""
    value = environ.get(NVLS_ENV)
    if value == NVLS_REQUIRED:
        return None
    shown = "unset" if value is None else f"{NVLS_ENV}={value!r}"
    return (
        f"InProcessRestartPlugin needs {NVLS_ENV}={NVLS_REQUIRED} but the job's environment has {shown}: a plugin "
        f"listed after it changed the value ({NVLS_SETTER}); {NVLS_WHY}. Stopping at start"
    )


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    problem = nvls_problem(os.environ)
    if problem is not None:
        sys.stderr.write(f"rank_keeper: {problem}\n")
        return 2
    target = _target()
    if target is None:
        sys.stderr.write(f"rank_keeper: set {MODULE_ENV}=<module> or {SCRIPT_ENV}=<script.py> (the real rank)\n")
        return 2
    # The interpreter options the launcher gave the keeper (torchrun: -u) apply to the rank too.
    child = subprocess.Popen([sys.executable, *interpreter_options(sys.orig_argv), *target, *args])
    forwarded: list[int] = []

    def forward(signum: int, _frame) -> None:
        if signum in STOP_SIGNALS:  # SIGUSR1/2 (e.g. Slurm's warning) are passed on, but do not stop the keeper
            forwarded.append(signum)
        try:
            child.send_signal(signum)
        except ProcessLookupError:
            pass

    for signum in FORWARDED_SIGNALS:
        signal.signal(signum, forward)
    code = child.wait()
    if code >= 0:
        return code
    if not forwarded:
        _say(
            f"RANK_DIED pid={child.pid} signal={signal.Signals(-code).name}: left to NVRx in-process restart; "
            "waiting for the other ranks"
        )
        outcome = _wait_for_the_others(forwarded)
        if outcome == "finished":
            _say("the other ranks finished: exit 0")
            return 0
        if outcome == "all dead":
            _say("no rank of this node is alive any more: the death goes to the launcher")
    # Die the way the rank did (or as the launcher asked), so the launcher sees a failed worker.
    signum = forwarded[-1] if forwarded else -code
    if signum != signal.SIGKILL:  # SIGKILL has no handler to reset
        signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    return 128 + signum


def _wait_for_the_others(forwarded: list[int], interval_s: float = 0.5, settle_s: float = 3.0) -> str:
    """After this keeper's rank died: "stopped" (the launcher signalled), "finished" or "all dead".

    The keeper stays a running worker while another rank of this node lives on (NVRx's business, a reserve may
    take the place). When the other keepers have begun to leave with no rank alive, the job ended normally: a
    keeper leaves on its own only when its rank returned 0, and a failure makes the launcher stop every worker,
    this one included (``forwarded``). When every keeper of the node stays there for ``settle_s`` with no living
    rank, nobody is left to finish the job: the death is reported to the launcher after all. (The wait tells a
    keeper whose rank has just returned, and which is about to leave, from one that waits like this one.)
    """
    me = os.getpid()
    expected = int(os.environ.get("LOCAL_WORLD_SIZE", "1")) - 1
    nobody_since: float | None = None
    while not forwarded:
        siblings = [pid for pid in _children(os.getppid()) if pid != me and _is_keeper(pid)]
        alive = any(_has_living_child(pid) for pid in siblings)
        if alive:
            nobody_since = None
        elif len(siblings) < expected:
            return "finished"
        else:
            nobody_since = nobody_since if nobody_since is not None else time.monotonic()
            if time.monotonic() - nobody_since >= settle_s:
                return "all dead"
        time.sleep(interval_s)
    return "stopped"


# The process table is read from /proc (Linux, where every launcher this keeper serves runs): the keeper is
# standard library only, so that it can run in a training image that lacks this package's dependencies.
def _stat(pid: int) -> tuple[str, int] | None:
    """``(state, parent pid)`` of ``pid``, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            text = handle.read().decode(errors="replace")
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()  # the command name may hold spaces and parentheses
    return (fields[0], int(fields[1])) if len(fields) > 1 else None


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(int(entry))
            if stat is not None and stat[1] == pid:
                found.append(int(entry))
    return found


# Python's own options that take a value as the next argument (``python -X dev -m ...``).
_OPTIONS_WITH_VALUE = frozenset({"-X", "-W", "--check-hash-based-pycs"})


def _is_keeper(pid: int) -> bool:
    """Whether ``pid`` is a Python interpreter whose program is the keeper (``python [options] -m <keeper>`` or
    ``python [options] .../rank_keeper.py``).

    The program is what Python runs, not any argument that names the keeper: the launcher's own command line names
    it too (``ft_launcher ... -m nemo_resiliency_plugins.job.rank_keeper ...``), and NVRx's ft_launcher forks one
    rank-monitor process per local rank, which keeps that command line. Counted as keepers, they would make a
    waiting keeper believe other ranks are still there after they finished, and report its rank's death to the
    launcher (a failed worker group after a successful run).
    """
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            argv = handle.read().decode(errors="replace").split("\0")
    except OSError:
        return False
    args = iter(argv[1:])
    for arg in args:
        if arg == "-m":
            return next(args, "") in KEEPER_NAMES
        if arg in _OPTIONS_WITH_VALUE:
            next(args, None)
        elif not arg.startswith("-") or arg == "-":
            return os.path.basename(arg).endswith(KEEPER_FILE)  # the script Python runs (ft_launcher's, for its forks)
        elif arg == "-c":
            return False
    return False


def _has_living_child(pid: int) -> bool:
    return any((_stat(child) or ("Z", 0))[0] not in ("Z", "X") for child in _children(pid))


if __name__ == "__main__":
    sys.exit(main())

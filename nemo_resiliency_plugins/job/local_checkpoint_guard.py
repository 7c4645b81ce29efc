"""Runs in each rank before the training script: sets aside this rank's local checkpoints that cannot be read.

Why: Megatron Bridge 0.6.2 loads the newest local checkpoint that every rank holds, and a file that cannot be
read makes that load raise on every restart (no fallback to the persistent checkpoint); a file whose tensor
bytes were damaged is worse: ``torch.load`` reads it without complaint and training resumes from corrupt
weights. NVRx writes each file through ``.dirty`` + rename but without fsync, so a node that crashes can leave a
complete-looking name over a truncated or zero-filled file.

What it does: for every ``iter_<N>_<R>_local.pt`` under ``<NRP_LOCAL_CKPT_DIR>/<RANK>`` (the rank's own shard
and, with replication, the replicas it holds), open the file as the zip archive ``torch.save`` writes and
check every member's CRC-32. A file that fails is renamed to ``<name>.unreadable`` (``<name>.1.unreadable``,
``<name>.2.unreadable`` ... when an earlier one is there: what was set aside before is never replaced). NVRx's
``LocalCheckpointManager`` lists only names that match its pattern, and its clean-up removes only names that
end in ``.pt``, so this rank no longer offers that iteration, ``find_latest`` settles on an iteration every
rank can still get (a replica held by a peer, or none), and Megatron Bridge loads the newest persistent
checkpoint from ``checkpoint.load`` instead. The file is kept for inspection; each one set aside is logged with
the reason.

What it promises, whatever it finds there:

* it never fails the start of the rank it protects: a file that disappears while it looks (two guards on one
  directory, a clean-up running), a directory it may not read or write, or an error of its own is logged and the
  training script starts all the same;
* it loses nothing: a file is only ever renamed, inside its own directory, to a name nothing else uses;
* it touches nothing outside ``<NRP_LOCAL_CKPT_DIR>/<RANK>``: every operation is relative to that directory,
  opened without following a symbolic link (a rank directory that is a link to somewhere else is not checked,
  and the log says so); a file that is a link is read through, but only the link is renamed. Entries that are
  not regular files (NVRx does not list them either) are left alone, and a FIFO is never opened.

Then it runs the next program in this process, as ``python -m <module>`` or ``python <path>`` would. What runs
next comes from ``NRP_FRONT_CHAIN`` (see :func:`pop_front_chain`), shared with the rank keeper so that the two
compose in either plugin order; jobs saved before the chain name it in ``NRP_RUN_TARGET`` (``module:<name>`` or
``path:<file>``).

Standard library only: LocalCheckpointPlugin ships this file with the job (the training container need not
have this package installed). Reading every byte costs about as long as reading the checkpoint once.
"""

from __future__ import annotations

import os
import re
import runpy
import stat
import sys
import time
import zipfile
from dataclasses import dataclass, field

DIR_ENV = "NRP_LOCAL_CKPT_DIR"
TARGET_ENV = "NRP_RUN_TARGET"
SET_ASIDE_SUFFIX = ".unreadable"
#: NVRx 0.7's local file name (``LocalCheckpointManager._filename_from_template``), without the ``.dirty`` ones.
LOCAL_FILE = re.compile(r"iter_(\d+)_(\d+)_local\.pt")
#: This program's name in ``NRP_FRONT_CHAIN``.
ROLE = "local_checkpoint_guard"
#: How many earlier set-aside copies of one name it steps over before it leaves the file where it is.
MAX_SET_ASIDE_COPIES = 1000


def _say(message: str) -> None:
    sys.stderr.write(f"[nrp-local-guard] {message}\n")
    sys.stderr.flush()


# ------------------------------------------------------------------------------------------------------------
# NRP_FRONT_CHAIN: the programs each rank runs, in order, the one running now first. The same function is in
# rank_keeper.py (each file is shipped alone, standard library only); a test keeps the two identical.
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


def unreadable_reason(path: str, *, dir_fd: int | None = None) -> str | None:
    """Why ``path`` is not a readable ``torch.save`` archive, or None when every member's CRC matches.

    ``FileNotFoundError`` passes through: a file that is gone is not a damaged one (the caller skips it).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY, dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except OSError as err:
        return f"{type(err).__name__}: {err}"
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped for something else since it was listed
            return None
        try:
            with zipfile.ZipFile(handle) as archive:
                bad = archive.testzip()
        except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError, RuntimeError) as err:
            return f"{type(err).__name__}: {err}"
    if bad is not None:
        return f"CRC-32 mismatch in member {bad!r}"
    return None


@dataclass
class Report:
    """What one check of a rank directory found and did."""

    #: (file, reason, the name it now has)
    set_aside: list[tuple[str, str, str]] = field(default_factory=list)
    #: (file, why it was left where it is)
    left: list[tuple[str, str]] = field(default_factory=list)
    #: why the directory was not checked at all, or None
    not_checked: str | None = None


def _set_aside(dir_fd: int, name: str) -> str | None:
    """Rename ``name`` to the first free ``<name>[.<n>].unreadable`` in the same directory; return the new name,
    or None when the file went away meanwhile.

    A hard link to the new name, then the old name removed: ``link`` fails when the name is taken, so an earlier
    set-aside file (or one another guard is setting aside right now) is never replaced (``rename`` would replace
    it). Where the file system has no hard links, a rename to a name seen free just before.
    """
    for copy in range(MAX_SET_ASIDE_COPIES):
        new = f"{name}{SET_ASIDE_SUFFIX}" if copy == 0 else f"{name}.{copy}{SET_ASIDE_SUFFIX}"
        try:
            os.link(name, new, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
        except FileExistsError:
            continue
        except FileNotFoundError:
            return None
        except OSError:  # no hard links here (EPERM, ENOTSUP ...)
            if _exists(new, dir_fd):
                continue
            try:
                os.rename(name, new, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            except FileNotFoundError:
                return None
            return new
        try:
            os.unlink(name, dir_fd=dir_fd)
        except FileNotFoundError:
            pass  # another guard moved it meanwhile: the same file is kept under its name too
        return new
    raise OSError(f"{MAX_SET_ASIDE_COPIES} earlier set-aside copies of {name}: clean the directory up")


def _exists(name: str, dir_fd: int) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def check_rank_dir(rank_dir: str) -> Report:
    """Check every local checkpoint file in ``rank_dir`` and set the unreadable ones aside (see the module doc)."""
    report = Report()
    try:
        dir_fd = os.open(rank_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return report  # no local checkpoint yet: nothing to check
    except OSError as err:
        if os.path.islink(rank_dir):
            report.not_checked = (
                f"{rank_dir} is a symbolic link (to {os.readlink(rank_dir)!r}); the guard renames files only in "
                "the rank directory itself, never through a link to another place"
            )
        else:
            report.not_checked = f"cannot open {rank_dir}: {type(err).__name__}: {err}"
        return report
    try:
        for name in sorted(os.listdir(dir_fd)):
            if LOCAL_FILE.fullmatch(name) is None:
                continue
            try:
                if not stat.S_ISREG(os.stat(name, dir_fd=dir_fd).st_mode):  # follows a link: NVRx would load it
                    continue
                reason = unreadable_reason(name, dir_fd=dir_fd)
                if reason is None:
                    continue
                new = _set_aside(dir_fd, name)
            except FileNotFoundError:
                continue  # gone meanwhile (another guard, a clean-up): nothing left to offer or to keep
            except OSError as err:
                report.left.append((name, f"{type(err).__name__}: {err}"))
                continue
            if new is not None:
                report.set_aside.append((name, reason, new))
    finally:
        os.close(dir_fd)
    return report


def set_aside_unreadable(rank_dir: str) -> list[tuple[str, str]]:
    """Check ``rank_dir``; returns (file, reason) for each file set aside."""
    return [(name, reason) for name, reason, _ in check_rank_dir(rank_dir).set_aside]


def check_this_rank(root: str, rank: str) -> None:
    rank_dir = os.path.join(root, rank)
    started = time.perf_counter()
    report = check_rank_dir(rank_dir)
    seconds = time.perf_counter() - started
    if report.not_checked is not None:
        _say(f"rank {rank}: not checking: {report.not_checked}")
        return
    for name, reason, new in report.set_aside:
        iteration = int(LOCAL_FILE.fullmatch(name).group(1))  # type: ignore[union-attr]
        _say(
            f"rank {rank}: set aside {os.path.join(rank_dir, name)} ({reason}) as {new}; this rank no longer "
            f"offers local iteration {iteration}, so the job resumes from a replica or the newest persistent "
            "checkpoint"
        )
    for name, why in report.left:
        _say(f"rank {rank}: could not check or set aside {os.path.join(rank_dir, name)}: {why}; left where it is")
    _say(f"rank {rank}: local checkpoints in {rank_dir} checked in {seconds:.3f} s, {len(report.set_aside)} set aside")


def _next_program() -> tuple[str, str]:
    following = pop_front_chain(ROLE)
    if following is not None:
        return following
    target = os.environ.get(TARGET_ENV, "")  # a job saved before NRP_FRONT_CHAIN
    kind, _, name = target.partition(":")
    if kind not in ("module", "path") or not name:
        raise SystemExit(f"[nrp-local-guard] {TARGET_ENV}={target!r}: expected 'module:<name>' or 'path:<file>'")
    return kind, name


def main() -> None:
    kind, name = _next_program()
    root, rank = os.environ.get(DIR_ENV, ""), os.environ.get("RANK", "")
    if root and rank.isdigit():
        try:
            check_this_rank(root, rank)
        except Exception as err:  # noqa: BLE001 -- the guard must never be why a rank fails to start
            _say(f"rank {rank}: the check failed ({type(err).__name__}: {err}); starting the training script anyway")
    else:
        _say(f"not checking: {DIR_ENV}={root!r}, RANK={rank!r} (needs both; RANK comes from the launcher)")
    if kind == "module":  # as ``python -m``: the working directory first on sys.path, not this file's
        sys.argv = [name, *sys.argv[1:]]
        sys.path[0] = os.getcwd()
        runpy.run_module(name, run_name="__main__", alter_sys=True)
    else:
        sys.argv = [name, *sys.argv[1:]]
        sys.path[0] = os.path.dirname(os.path.abspath(name))
        runpy.run_path(name, run_name="__main__")


if __name__ == "__main__":
    main()

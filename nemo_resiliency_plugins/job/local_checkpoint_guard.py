"""Runs in each rank before the training script: sets aside this rank's local checkpoints that cannot be read.

Why: Megatron Bridge 0.6.2 loads the newest local checkpoint that every rank holds, and a file that cannot be
read makes that load raise on every restart (no fallback to the persistent checkpoint); a file whose tensor
bytes were damaged is worse: ``torch.load`` reads it without complaint and training resumes from corrupt
weights. NVRx writes each file through ``.dirty`` + rename but without fsync, so a node that crashes can leave a
complete-looking name over a truncated or zero-filled file.

What it does: for every ``iter_<N>_<R>_local.pt`` under ``<NRP_LOCAL_CKPT_DIR>/<RANK>`` (the rank's own shard
and, with replication, the replicas it holds), open the file as the zip archive ``torch.save`` writes and
check every member's CRC-32. A file that fails is renamed to ``<name>.unreadable``: NVRx's
``LocalCheckpointManager`` lists only names that match its pattern, so this rank no longer offers that
iteration, ``find_latest`` settles on an iteration every rank can still get (a replica held by a peer, or
none), and Megatron Bridge loads the newest persistent checkpoint from ``checkpoint.load`` instead. The file
is kept for inspection; each one set aside is logged with the reason.

Then it runs the training script in this process, as ``python -m <module>`` or ``python <path>`` would
(``NRP_RUN_TARGET`` = ``module:<name>`` or ``path:<file>``), with the arguments it was given.

Standard library only: LocalCheckpointPlugin ships this file with the job (the training container need not
have this package installed). Reading every byte costs about as long as reading the checkpoint once.
"""

from __future__ import annotations

import os
import re
import runpy
import sys
import time
import zipfile

DIR_ENV = "NRP_LOCAL_CKPT_DIR"
TARGET_ENV = "NRP_RUN_TARGET"
SET_ASIDE_SUFFIX = ".unreadable"
#: NVRx 0.7's local file name (``LocalCheckpointManager._filename_from_template``), without the ``.dirty`` ones.
LOCAL_FILE = re.compile(r"iter_(\d+)_(\d+)_local\.pt")


def _say(message: str) -> None:
    sys.stderr.write(f"[nrp-local-guard] {message}\n")
    sys.stderr.flush()


def unreadable_reason(path: str) -> str | None:
    """Why ``path`` is not a readable ``torch.save`` archive, or None when every member's CRC matches."""
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as err:
        return f"{type(err).__name__}: {err}"
    if bad is not None:
        return f"CRC-32 mismatch in member {bad!r}"
    return None


def set_aside_unreadable(rank_dir: str) -> list[tuple[str, str]]:
    """Check every local checkpoint file in ``rank_dir``; rename the unreadable ones. Returns (file, reason)."""
    if not os.path.isdir(rank_dir):
        return []
    set_aside = []
    for name in sorted(os.listdir(rank_dir)):
        path = os.path.join(rank_dir, name)
        if LOCAL_FILE.fullmatch(name) is None or not os.path.isfile(path):
            continue
        reason = unreadable_reason(path)
        if reason is None:
            continue
        os.replace(path, path + SET_ASIDE_SUFFIX)
        set_aside.append((name, reason))
    return set_aside


def check_this_rank(root: str, rank: str) -> None:
    rank_dir = os.path.join(root, rank)
    started = time.perf_counter()
    set_aside = set_aside_unreadable(rank_dir)
    seconds = time.perf_counter() - started
    for name, reason in set_aside:
        iteration = int(LOCAL_FILE.fullmatch(name).group(1))  # type: ignore[union-attr]
        _say(
            f"rank {rank}: set aside {os.path.join(rank_dir, name)} ({reason}) as {name}{SET_ASIDE_SUFFIX}; "
            f"this rank no longer offers local iteration {iteration}, so the job resumes from a replica or the "
            f"newest persistent checkpoint"
        )
    _say(f"rank {rank}: local checkpoints in {rank_dir} checked in {seconds:.3f} s, {len(set_aside)} set aside")


def main() -> None:
    target = os.environ.get(TARGET_ENV, "")
    kind, _, name = target.partition(":")
    if kind not in ("module", "path") or not name:
        raise SystemExit(f"[nrp-local-guard] {TARGET_ENV}={target!r}: expected 'module:<name>' or 'path:<file>'")
    root, rank = os.environ.get(DIR_ENV, ""), os.environ.get("RANK", "")
    if root and rank.isdigit():
        check_this_rank(root, rank)
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

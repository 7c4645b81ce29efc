"""Where each rank was when the rank monitor stopped it: the Python stack dumps of ``FaultTolerancePlugin(
diagnostics=True)``, read from the job's own log.

With diagnostics on, the ranks run with ``PYTHONFAULTHANDLER=1`` and NVRx stops a hung rank with SIGABRT instead
of SIGKILL, so Python's faulthandler writes every thread's stack to the rank's stderr before the process ends
("Fatal Python error: Aborted", then ``File "...", line N in func`` lines, most recent call first). In a hang
inside a collective, the ranks waiting in it show a ``torch.distributed`` collective on their main thread and the
rank that never entered it shows where it is instead: that rank is the one to blame, and its node the one to
leave out. No flight recorder is needed for that (gloo records one but never dumps it on a timeout).

The ranks' lines carry torch elastic's ``[default<local rank>]:`` prefix (with srun's ``<task>: `` before it when
srun labels its output); each prefix is one rank's stream. On Slurm, with diagnostics on, the requeue guard has
torch elastic add the global rank (``[default<local rank>]:[rank<rank>]:``): one rank per node makes every node's
lines ``[default0]:``, and only the global rank tells their dumps apart and places each on its node. The guard
reads the same dumps in bash (``core/sbatch/step_verdict.sh``) to exclude that node.
"""

from __future__ import annotations

import dataclasses
import re

from nemo_resiliency_plugins.job import log_lines as ll

_PREFIXED = ll.TORCH_RANK_LINE
_DUMP_LINE = ll.FAULTHANDLER_LINE
_THREAD = ll.FAULTHANDLER_THREAD
_FRAME = ll.FAULTHANDLER_FRAME
_STDLIB = re.compile(r"/lib/python3\.\d+/(?!site-packages/|dist-packages/)")
#: The module whose functions are torch.distributed's collectives (all_reduce, broadcast, barrier ...).
COLLECTIVES_FILE = "torch/distributed/distributed_c10d.py"
FATAL = "Fatal Python error: "


@dataclasses.dataclass(frozen=True)
class Frame:
    path: str
    line: int
    func: str

    def where(self) -> str:
        return f"{self.func} ({self.path.rsplit('/', 1)[-1]}:{self.line})"


@dataclasses.dataclass(kw_only=True)
class RankStack:
    """One rank's dump: its main thread's frames, most recent first."""

    who: str  # the log prefix, e.g. "[default1]:", "1: [default0]:" or "[default0]:[rank3]:"
    local_rank: int
    rank: int | None = None  # the global rank, where the prefix carries it
    reason: str  # faulthandler's, e.g. "Aborted"
    frames: list[Frame]

    def collective(self) -> str | None:
        """The torch.distributed collective the main thread was in, if any (e.g. "all_reduce")."""
        return next((f.func for f in self.frames if f.path.endswith(COLLECTIVES_FILE)), None)

    def own_frame(self) -> Frame | None:
        """The most recent frame outside Python's standard library and torch.distributed: the program's own code."""
        for frame in self.frames:
            if not _STDLIB.search(frame.path) and "/torch/distributed/" not in frame.path:
                return frame
        return self.frames[0] if self.frames else None

    def label(self) -> str:
        """``rank N``: the global rank where the prefix has it, else the local rank (on one node, the rank);
        ``task T local rank N`` under srun's ``-l``."""
        if self.rank is not None:
            return f"rank {self.rank}"
        task = self.who.split(":", 1)[0] if not self.who.startswith("[") else None
        return f"task {task} local rank {self.local_rank}" if task else f"rank {self.local_rank}"

    def summary(self) -> str:
        label = self.label()
        own = self.own_frame()
        at = f", called from {own.where()}" if own else ""
        if (collective := self.collective()) is not None:
            return f"{label}: in {collective}{at}"
        return f"{label}: not in a collective, at {own.where() if own else 'an unknown place'}"


def is_dump_line(line: str) -> bool:
    """Whether ``line`` may be part of a rank's faulthandler dump (a traceback's ``File`` line also is: the dump's
    header decides, in :func:`rank_stacks`)."""
    return _DUMP_LINE.search(line) is not None


def rank_stacks(lines: list[str]) -> list[RankStack]:
    """The faulthandler dumps in ``lines`` (one launcher cycle's log lines), one per rank, in the order they began."""
    dumps: dict[str, list[tuple[str, list[Frame]]]] = {}  # who -> its threads: (faulthandler's name, frames)
    reasons: dict[str, str] = {}
    local_ranks: dict[str, int] = {}
    global_ranks: dict[str, int | None] = {}
    order: list[str] = []
    in_dump: set[str] = set()
    for line in lines:
        m = _PREFIXED.fullmatch(line)
        if m is None or len(m.group("local")) > 9 or len(m.group("rank") or "") > 9:  # longer: not a rank
            continue
        who, rest = m.group("who"), m.group("rest").removeprefix(" ")
        if rest.startswith(FATAL):
            in_dump.add(who)
            if who not in reasons:
                reasons[who] = rest[len(FATAL) :].strip()
                local_ranks[who] = int(m.group("local"))
                global_ranks[who] = int(m.group("rank")) if m.group("rank") else None
                order.append(who)
                dumps[who] = []
            continue
        if who not in in_dump:
            continue
        if thread := _THREAD.match(rest):
            dumps[who].append((thread.group(1), []))
        elif (frame := _FRAME.match(rest)) and dumps[who] and len(frame.group("line")) <= 9:
            dumps[who][-1][1].append(Frame(frame.group("path"), int(frame.group("line")), frame.group("func")))
        elif rest.startswith("Extension modules:"):
            in_dump.discard(who)
    stacks = []
    for who in order:
        threads = dumps[who]
        # The main thread is the one whose oldest frame is a module's top level (the script run as __main__).
        main = next((frames for _, frames in threads if frames and frames[-1].func == "<module>"), None)
        if main is None:
            main = next((frames for name, frames in threads if name == "Current thread"), [])
        stacks.append(
            RankStack(who=who, local_rank=local_ranks[who], rank=global_ranks[who], reason=reasons[who], frames=main)
        )
    return stacks

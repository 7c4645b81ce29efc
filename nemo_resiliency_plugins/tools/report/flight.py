"""Which rank never entered the collective the others waited in: PyTorch's flight-recorder dumps, read from the job
directory where ``FaultTolerancePlugin(diagnostics=True)`` has torch write them
(:mod:`nemo_resiliency_plugins.core.diagnostics`).

A dump is one rank's pickled dict (torch's ``_dump_fr_trace`` format): ``entries``, the rank's last collectives,
each with its process group, ``collective_seq_id`` (the n-th collective of that group on this rank), the operation
(``profiling_name``, e.g. ``nccl:all_reduce``), its ``state`` (``scheduled``, ``started``, ``completed``) and the
Python frames that issued it. In a hang, every rank that reached collective *n* of a group has it unfinished; a rank
whose newest entry of that group is older than *n* never entered it, and is the one the others waited for.

Standard library only (the report runs where the job was launched, which need not have torch). The pickle is read
with an unpickler that refuses every class: a dump holds only dicts, lists, tuples, strings and numbers, and a file
in a job directory must not be able to run code in the reader.
"""

from __future__ import annotations

import dataclasses
import io
import os
import pickle
import pickletools
import re
import stat
from pathlib import Path
from typing import Any

from nemo_resiliency_plugins.core.diagnostics import FLIGHT_RECORDER_PREFIX

_RANK_FILE = re.compile(re.escape(FLIGHT_RECORDER_PREFIX) + r"(\d+)")  # fullmatch: one whole file name
_UNFINISHED = ("scheduled", "started")


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"a flight-recorder dump holds no classes ({module}.{name})")


#: The largest dump read (bytes): torch's buffer holds TORCH_NCCL_TRACE_BUFFER_SIZE entries of a few KB each.
MAX_DUMP_BYTES = 64 * 1024 * 1024
#: The pickle opcodes a dump of plain data is made of; any other (a class, a call, a persistent id) is refused
#: before unpickling.
_PLAIN_OPS = frozenset(
    "PROTO FRAME STOP MARK POP POP_MARK DUP NONE NEWTRUE NEWFALSE INT BININT BININT1 BININT2 LONG LONG1 LONG4 "
    "FLOAT BINFLOAT STRING BINSTRING SHORT_BINSTRING UNICODE SHORT_BINUNICODE BINUNICODE BINUNICODE8 BINBYTES "
    "SHORT_BINBYTES BINBYTES8 BYTEARRAY8 EMPTY_LIST APPEND APPENDS LIST EMPTY_TUPLE TUPLE TUPLE1 TUPLE2 TUPLE3 "
    "EMPTY_DICT DICT SETITEM SETITEMS EMPTY_SET ADDITEMS FROZENSET GET BINGET LONG_BINGET PUT BINPUT LONG_BINPUT "
    "MEMOIZE".split()
)


def _check_opcodes(data: bytes) -> None:
    """Walk the pickle's opcodes without building anything (pickletools reads each argument from the bytes there
    are, so a length field claiming terabytes allocates nothing): ValueError on an opcode outside plain data."""
    try:
        for opcode, _arg, _pos in pickletools.genops(io.BytesIO(data)):
            if opcode.name not in _PLAIN_OPS:
                raise ValueError(f"a dump holds no classes or calls (opcode {opcode.name})")
    except ValueError:
        raise
    except Exception as exc:  # noqa: BLE001 - a truncated or garbled pickle: not a dump
        raise ValueError(f"{type(exc).__name__}: {exc}") from None


def load_dump(data: bytes) -> dict[str, Any]:
    """One rank's dump as a dict; ValueError when it is not one."""
    try:
        _check_opcodes(data)
    except ValueError as exc:
        raise ValueError(f"not a flight-recorder dump ({exc})") from None
    try:
        dump = _PlainUnpickler(io.BytesIO(data)).load()
    except Exception as exc:  # noqa: BLE001 - any failure means "not a dump we can read", said by the caller
        raise ValueError(f"not a flight-recorder dump ({type(exc).__name__}: {exc})") from None
    if not isinstance(dump, dict) or not isinstance(dump.get("entries"), list):
        raise ValueError("not a flight-recorder dump (no 'entries' list)")
    return dump


@dataclasses.dataclass(kw_only=True)
class Collective:
    """A rank's newest collective of one process group."""

    group: str
    seq: int
    op: str
    state: str
    where: str | None  # the innermost frame outside torch.distributed that issued it

    def text(self) -> str:
        at = f" from {self.where}" if self.where else ""
        return f"#{self.seq} {self.op} {self.state}{at}"


@dataclasses.dataclass(kw_only=True)
class FlightReport:
    """What the job's dumps say: each rank's newest collective per group, and the ranks behind the others."""

    files: list[str]
    newest: dict[int, list[Collective]]  # rank -> one per process group
    behind: list[str]  # "rank R: last in <group> #k, the others in #n <op>"
    unreadable: list[str]

    def lines(self) -> list[str]:
        out = [
            f"rank {rank}: " + "; ".join(f"{c.group} {c.text()}" for c in colls)
            for rank, colls in sorted(self.newest.items())
        ]
        return out + [f"never entered: {b}" for b in self.behind] + [f"unreadable: {u}" for u in self.unreadable]


def _where(entry: dict[str, Any]) -> str | None:
    for frame in entry.get("frames") or []:
        if not isinstance(frame, dict):
            continue
        path = str(frame.get("filename", ""))
        if "torch/distributed/" in path or not path:
            continue
        return f"{frame.get('name', '?')} ({path.rsplit('/', 1)[-1]}:{frame.get('line', '?')})"
    return None


def _group(entry: dict[str, Any]) -> str:
    group = entry.get("process_group")
    if isinstance(group, (list, tuple)) and group:
        return str(group[-1] or group[0])  # (name, description): the description reads better ("default_pg")
    return str(group)


def newest_collectives(dump: dict[str, Any]) -> list[Collective]:
    """The rank's newest non-p2p collective of each process group in its buffer."""
    newest: dict[str, Collective] = {}
    for entry in dump["entries"]:
        if not isinstance(entry, dict) or entry.get("is_p2p"):
            continue
        seq = entry.get("collective_seq_id")
        if not isinstance(seq, int) or isinstance(seq, bool) or not 0 <= seq < 2**63:  # torch's is a uint64
            continue
        group = _group(entry)
        if group in newest and newest[group].seq >= seq:
            continue
        newest[group] = Collective(
            group=group,
            seq=seq,
            op=str(entry.get("profiling_name", "?")),
            state=str(entry.get("state", "?")),
            where=_where(entry),
        )
    return list(newest.values())


def _read_dump(path: Path) -> bytes:
    """A dump's bytes: a regular file only (a FIFO would block), at most :data:`MAX_DUMP_BYTES`."""
    info = os.stat(path)
    if not stat.S_ISREG(info.st_mode):
        raise ValueError("not a regular file, skipped")
    if info.st_size > MAX_DUMP_BYTES:
        raise ValueError(f"{info.st_size} bytes, more than a dump holds ({MAX_DUMP_BYTES}), skipped")
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as handle:
        return handle.read(MAX_DUMP_BYTES + 1)[:MAX_DUMP_BYTES]


def flight_report(job_dir: str | Path) -> FlightReport | None:
    """The report of the dumps in ``job_dir``; None when the job left none (no timeout, or diagnostics off)."""
    files = sorted(
        (int(m.group(1)), p)
        for p in Path(job_dir).glob(FLIGHT_RECORDER_PREFIX + "*")
        if (m := _RANK_FILE.fullmatch(p.name)) and len(m.group(1)) <= 9
    )
    if not files:
        return None
    newest: dict[int, list[Collective]] = {}
    unreadable: list[str] = []
    for rank, path in files:
        try:
            newest[rank] = newest_collectives(load_dump(_read_dump(path)))
        except (OSError, ValueError) as exc:
            unreadable.append(f"{path.name}: {exc}")
    behind: list[str] = []
    groups = {c.group for colls in newest.values() for c in colls}
    for group in sorted(groups):
        by_rank = {rank: c for rank, colls in newest.items() for c in colls if c.group == group}
        waited = [c for c in by_rank.values() if c.state in _UNFINISHED]
        if not waited:
            continue
        top = max(waited, key=lambda c: c.seq)
        for rank, c in sorted(by_rank.items()):
            if c.seq < top.seq:
                behind.append(f"rank {rank}: last in {group} #{c.seq}, the others in #{top.seq} {top.op}")
    return FlightReport(files=[str(p) for _, p in files], newest=newest, behind=behind, unreadable=unreadable)

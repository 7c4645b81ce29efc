"""Reading a job's logs while it runs: when each line happened (the launchers' own timestamps, else its arrival)."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path
from typing import Any

_GLOG = re.compile(r"^[IWEF](\d{2})(\d{2}) (\d{2}):(\d{2}):(\d{2}\.\d+) ")
_NVRX = re.compile(r"^(\d{4})-(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2}),(\d{3}) \[")
_WORKER_PREFIX = re.compile(r"^\[default\d+\]:")


def line_time(line: str, arrival: float) -> tuple[float, bool]:
    """(time, own): the launcher line's own timestamp (local time) when it has one, else its arrival time."""
    if _WORKER_PREFIX.match(line):
        return arrival, False
    m = _NVRX.match(line)
    if m:
        y, mo, d, h, mi, s, ms = (int(g) for g in m.groups())
        return time.mktime((y, mo, d, h, mi, s, 0, 0, -1)) + ms / 1000, True
    m = _GLOG.match(line)
    if m:
        mo, d, h, mi = (int(g) for g in m.groups()[:4])
        sec = float(m.group(5))
        year = time.localtime(arrival).tm_year
        return time.mktime((year, mo, d, h, mi, int(sec), 0, 0, -1)) + (sec - int(sec)), True
    return arrival, False


class LogTail(threading.Thread):
    """Follows a run's logs while it runs, stamping each line with the time it was read.

    Launcher lines come from torchx's ``combined.log`` (they carry their own timestamps). Worker lines are read
    from the per-attempt, per-rank ``attempt_<n>/<rank>/stdout.log`` files that torchrun and ft_launcher make
    the ranks write directly (the ranks run ``python -u``): the copies that reach ``combined.log`` pass through
    the launcher's buffered stdout and can arrive many seconds late. They are prefixed ``[default<rank>]:``
    like the copies in ``combined.log``, which are dropped.
    """

    def __init__(self, root: Path, interval: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.root = root
        self.interval = interval
        self.lines: list[tuple[float, str]] = []
        self._halt = threading.Event()
        self._files: dict[Path, list[Any]] = {}  # path -> [offset, pending bytes, prefix or None (combined)]
        self._last_scan = 0.0

    def run(self) -> None:
        while not self._halt.is_set():
            self._poll()
            self._halt.wait(self.interval)
        self._poll(scan=True)
        for state in self._files.values():
            if state[1]:
                self._add(time.time(), state[1], state[2])

    def stop(self) -> None:
        self._halt.set()
        self.join()

    def _scan(self) -> None:
        for path in self.root.rglob("*.log"):
            if path in self._files:
                continue
            if path.name == "combined.log":
                self._files[path] = [0, b"", None]
            elif path.name == "stdout.log" and path.parent.parent.name.startswith("attempt_"):
                self._files[path] = [0, b"", f"[default{path.parent.name}]:"]

    def _add(self, now: float, raw: bytes, prefix: str | None) -> None:
        text = raw.decode(errors="replace")
        if prefix is None:
            if not _WORKER_PREFIX.match(text):
                self.lines.append((now, text))
        else:
            self.lines.append((now, prefix + text))

    def _poll(self, scan: bool = False) -> None:
        now = time.time()
        if scan or now - self._last_scan > 0.5:
            self._last_scan = now
            self._scan()
        for path, state in self._files.items():
            try:
                with open(path, "rb") as f:
                    f.seek(state[0])
                    data = f.read()
            except OSError:
                continue
            if not data:
                continue
            state[0] += len(data)
            *complete, state[1] = (state[1] + data).split(b"\n")
            for raw in complete:
                self._add(now, raw, state[2])

"""Watching a rehearsal's job: the log lines that mark an event, and the thread that tails the logs.

The patterns are the lines NVRx's launcher and the reference workload print; times are when the watch first saw
a line (a :data:`~nemo_resiliency_plugins.tools.rehearse.adapt.POLL_S` poll) in ``combined.log``, which torchx's
``Tee`` fills from the ranks' pipes every 0.1 s. Each time is therefore late by up to ``POLL_S`` + 0.1 s (more when
a loaded machine runs a poll late), and a duration between two events (``detect_s``) can read short or long by
that much: a 5 s step timeout has been reported as ``detect_s=4.84`` while NVRx itself said "open 5.04 s".
"""

from __future__ import annotations

import glob
import os
import re
import threading
import time

from nemo_resiliency_plugins.job import log_lines as ll
from nemo_resiliency_plugins.tools.rehearse.adapt import POLL_S, RUN_CAP_S

EVENT_PATTERNS = [  # the patterns are job/log_lines.py's: one owner for every line the package reads
    (ll.WORKLOAD_INJECTED, "fault injected"),
    (ll.NVRX_SECTION, "section timeout"),
    (ll.NVRX_OUT_OF_SECTION, "out-of-section timeout"),
    (ll.NVRX_HEARTBEAT, "heartbeat timeout"),
    (ll.NVRX_WORKER_GROUP, "worker group failed"),
    (ll.NVRX_WILL_RESTART, "restart"),
    (ll.WORKLOAD_INPROCESS, "in-process restart"),
    (ll.WORKLOAD_EXIT_ON_SIGNAL, "exit on signal"),
    (ll.WORKLOAD_RESUMED, "resumed"),
    (ll.WORKLOAD_STARTING, "training started"),
    (ll.WORKLOAD_SAVED, "checkpoint saved"),
    (ll.RANK_ERROR, "rank error"),
    (ll.WORKLOAD_FINISHED, "finished"),
]
DETECTIONS = ("section timeout", "out-of-section timeout", "heartbeat timeout", "worker group failed",
               "in-process restart", "exit on signal")  # fmt: skip


HEALTHY_JOB_KILLERS = frozenset(
    {"section timeout", "out-of-section timeout", "heartbeat timeout", "worker group failed"}
)


class Watch(threading.Thread):
    """Tails the job's combined.log files while it runs: when each event was first seen, and a deadline.

    The deadline stops a run whose fault nobody detects (a hang with no step timeout would run forever), by
    killing the processes this rehearsal started (the launcher and its ranks are children of this process).
    """

    def __init__(
        self, root: str, started: float, deadline_after_fault: float | None, stop_on: frozenset[str] = frozenset()
    ) -> None:
        super().__init__(daemon=True)
        self.root, self.started, self.deadline, self.stop_on = root, started, deadline_after_fault, stop_on
        self.events: list[tuple[float, str, re.Match]] = []
        self.stopped = False
        self._done = threading.Event()
        self._offsets: dict[str, int] = {}
        self._partial: dict[str, str] = {}

    def finish(self) -> None:
        self._done.set()
        self.join(timeout=5)
        self._scan()  # whatever was written after the last poll

    def first(self, label: str, after: float = -1.0) -> tuple[float, re.Match] | None:
        return next(((t, m) for t, lab, m in self.events if lab == label and t >= after), None)

    def run(self) -> None:
        while not self._done.wait(POLL_S):
            self._scan()
            now = time.monotonic() - self.started
            fault = self.first("fault injected")
            detected = fault and any(self.first(lab, fault[0]) for lab in DETECTIONS)
            late = fault and not detected and self.deadline is not None and now - fault[0] > self.deadline
            doomed = any(lab in self.stop_on for _, lab, _ in self.events)
            if (late or doomed or now > RUN_CAP_S) and not self.stopped:
                self.stopped = True
                kill_children()

    def _scan(self) -> None:
        for path in glob.glob(os.path.join(self.root, "**", "combined.log"), recursive=True):
            try:
                with open(path, errors="replace") as handle:
                    handle.seek(self._offsets.get(path, 0))
                    chunk = handle.read()
                    self._offsets[path] = handle.tell()
            except OSError:
                continue
            now = time.monotonic() - self.started
            text = self._partial.get(path, "") + chunk
            lines = text.split("\n")
            self._partial[path] = lines.pop()
            for line in lines:
                for pattern, label in EVENT_PATTERNS:
                    match = pattern.search(line)
                    if match:
                        self.events.append((now, label, match))


def kill_children() -> None:
    import psutil

    for child in psutil.Process().children(recursive=True):
        try:
            child.kill()
        except psutil.Error:
            pass

"""The time stamps of a launcher log, read on one clock.

NVRx's lines carry a full date; torch's launcher modules log glog-style stamps with month and day but no year
(``I1231 23:59:58.123 ...``). A year-less stamp takes the year of the log's dated lines, carried forward: when the
month goes down from one stamp to the next, the year went up (a restart just after New Year is seconds, not a year,
after the fault before it). Before the log's first dated line, a torch stamp whose month is later than that line's
belongs to the year before.
"""

from __future__ import annotations

import datetime as dt

from nemo_resiliency_plugins.job import log_lines as ll

__all__ = ["LogClock", "iso", "launcher_stamp"]


def iso(when: dt.datetime | None) -> str | None:
    return when.isoformat(sep=" ", timespec="milliseconds") if when else None


def _dated(line: str) -> dt.datetime | None:
    """The full date of an NVRx line or a training_log line (ValueError: an impossible date)."""
    if m := ll.NVRX_STAMP.match(line):
        return dt.datetime.strptime(f"{m.group(1)}.{m.group(2)}", "%Y-%m-%d %H:%M:%S.%f")
    if m := ll.MB_ITERATION.search(line):
        return dt.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")
    return None


class LogClock:
    """Reads one log's lines in order; :meth:`stamp` gives each launcher line's time with the year carried."""

    def __init__(self, text: str) -> None:
        self.year: int | None = None
        self.month = 0
        for line in text.splitlines():  # the first dated line gives the year to start from
            try:
                when = _dated(line)
            except ValueError:
                continue
            if when is not None:
                self.year, self.month = when.year, when.month
                break
        self._before_first = True

    def stamp(self, line: str) -> dt.datetime | None:
        """The launcher's own time stamp of ``line`` (NVRx's, or torch's launcher modules'), in local time; None
        without one. ValueError for an impossible stamp (month 13): the caller skips that line."""
        if m := ll.NVRX_STAMP.match(line):
            when = dt.datetime.strptime(f"{m.group(1)}.{m.group(2)}", "%Y-%m-%d %H:%M:%S.%f")
            self.year, self.month, self._before_first = when.year, when.month, False
            return when
        if (m := ll.TORCH_GLOG.match(line)) and self.year is not None:
            month = int(m.group(1))
            year = self.year
            if self._before_first and month > self.month:
                year -= 1  # before the first dated line, in the year before it
            elif not self._before_first and month < self.month:
                year += 1  # the month went down: New Year passed
            when = dt.datetime.strptime(f"{year}-{m.group(1)}-{m.group(2)} {m.group(3)}", "%Y-%m-%d %H:%M:%S.%f")
            if not self._before_first:  # only a stamp that parsed moves the clock
                self.year, self.month = year, month
            return when
        return None

    def dated(self, when: dt.datetime) -> None:
        """A training_log line's date (full): the clock follows it too."""
        self.year, self.month, self._before_first = when.year, when.month, False


def launcher_stamp(line: str, year: int | None) -> dt.datetime | None:
    """A launcher line's own time stamp (NVRx's, or torch's launcher modules' given ``year``), local time."""
    if m := ll.NVRX_STAMP.match(line):
        return dt.datetime.strptime(f"{m.group(1)}.{m.group(2)}", "%Y-%m-%d %H:%M:%S.%f")
    if (m := ll.TORCH_GLOG.match(line)) and year is not None:
        return dt.datetime.strptime(f"{year}-{m.group(1)}-{m.group(2)} {m.group(3)}", "%Y-%m-%d %H:%M:%S.%f")
    return None
